//! Surviving the object (SPEC §10), performed: the revival (the engine's [`Revival`], which
//! decides every step) driven against the object's storage and the store, once per instance at
//! a time however it was woken (the lease alarm, a reader, the producer); `POST /resume`; the
//! producer epoch on writes (`x-rindle-epoch`).

use super::pump::PumpReattach;
use super::{Object, StreamObject};
use crate::edge::http::{self, unavailable};
use crate::edge::runtime::{log, now};
use crate::engine::access::api::{ApiError, Route};
use crate::engine::host::object_storage::KeyUpdate;
use crate::engine::live::lease::Revived;
use crate::engine::live::{Fenced, ResumeGrant, ResumeRefused, Revival, RevivalEnd, RevivalFailure, RevivalOutput};
use crate::engine::wire::frame::STATUS_STREAMING;
use serde_json::json;
use std::rc::Rc;
use worker::{Request, Response};

/// The request header carrying the producer epoch.
pub const EPOCH_HEADER: &str = "x-rindle-epoch";

/// The request header naming the producer (any string it chose, e.g. a random id per answer):
/// a resume it retries after losing the answer gets the same grant.
pub const PRODUCER_HEADER: &str = "x-rindle-producer";

/// The producer epoch a write carries: `None` without the header; 400 `bad_epoch` when it is
/// not a decimal number.
pub fn epoch_of(req: &Request) -> Result<Option<u64>, ApiError> {
    match req.headers().get(EPOCH_HEADER).ok().flatten() {
        None => Ok(None),
        Some(raw) => raw.trim().parse::<u64>().map(Some).map_err(|_| ApiError::bad_epoch(&raw)),
    }
}

/// A write the fence refused, as the API answers it.
pub fn fenced(stream_id: &str, f: Fenced) -> ApiError {
    match f {
        Fenced::Superseded { current } => ApiError::superseded(stream_id, current),
        Fenced::ResumeRequired { seq, durable_seq } => ApiError::resume_required(stream_id, seq, durable_seq),
        Fenced::PumpRunning => ApiError::pump_running(stream_id),
    }
}

/// How far this instance got with its revival.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum RevivalState {
    /// Not tried yet (a fresh instance), or the last attempt decided nothing.
    #[default]
    Untried,
    /// One attempt is under way: later callers wait for it (single flight).
    Running,
    /// Decided: nothing here to rebuild (a rebuilt stream is simply held).
    Settled(Revived),
}

/// The one revival under way: however it ends (an answer, an error, or its future dropped with
/// its request), the next caller is let through and the waiters are woken.
struct Attempt<'a> {
    object: &'a StreamObject,
    outcome: Option<Revived>,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let state = match self.outcome.take() {
            Some(settled @ Revived::Nothing(_)) => RevivalState::Settled(settled),
            _ => RevivalState::Untried,
        };
        *self.object.revival.borrow_mut() = state;
        for waiter in self.object.revival_waiters.take() {
            let _ = waiter.send(());
        }
    }
}

impl StreamObject {
    /// Rebuilds the stream if this instance holds none and its keys say one was lost while
    /// `streaming`, once at a time: concurrent callers wait for the one attempt and see its
    /// outcome. A stream already held here is [`Revived::Rebuilt`].
    pub(crate) async fn revive(&self, o: &Rc<Object>) -> Revived {
        loop {
            if o.shell.holds_stream() {
                return Revived::Rebuilt;
            }
            let state = self.revival.borrow().clone();
            match state {
                RevivalState::Settled(outcome) => return outcome,
                RevivalState::Running => {
                    let (tx, rx) = futures::channel::oneshot::channel();
                    self.revival_waiters.borrow_mut().push(tx);
                    let _ = rx.await;
                }
                RevivalState::Untried => break,
            }
        }
        *self.revival.borrow_mut() = RevivalState::Running;
        let mut attempt = Attempt { object: self, outcome: None };
        let outcome = self.run_revival(o).await;
        attempt.outcome = Some(outcome.clone());
        outcome
    }

    /// A request's revival: a step that failed is a 503 (the next request tries again).
    pub(crate) async fn revive_for_request(&self, o: &Rc<Object>) -> Result<(), ApiError> {
        match self.revive(o).await {
            Revived::Failed(RevivalFailure::Store(e)) => Err(ApiError::store_unavailable(e)),
            Revived::Failed(RevivalFailure::Storage(e)) => Err(ApiError::store_unavailable(e)),
            _ => Ok(()),
        }
    }

    /// Drives one [`Revival`]: every store call bounded by `STORE_TIMEOUT_MS` (a timeout is a
    /// failure), the object's storage too.
    async fn run_revival(&self, o: &Rc<Object>) -> Revived {
        let lease = match self.lease_store() {
            Ok(lease) => lease,
            Err(e) => return Revived::Failed(RevivalFailure::Storage(e.to_string())),
        };
        let mut revival = Revival::start(o.settings().stream.clone(), super::random_token());
        while let Some(output) = revival.poll_output() {
            match output {
                RevivalOutput::ReadKeys => revival.handle_keys(lease.read_keys().await.map_err(|e| e.0)),
                RevivalOutput::Store(request) => {
                    let answer = o.shell.run_bounded(request).await;
                    revival.handle_store(answer, now());
                }
                RevivalOutput::WriteKeys(update) => revival.handle_keys_written(lease.write_keys(&update).await.map_err(|e| e.0), now()),
            }
        }
        let Some(end) = revival.take_end() else {
            return Revived::Failed(RevivalFailure::Storage("the revival stopped before it decided".into()));
        };
        let revived = Revived::from(&end);
        match end {
            RevivalEnd::Revived(stream) => self.install_revived(o, *stream).await,
            RevivalEnd::Nothing(why) => log("info", "nothing_to_revive", &o.shell.stream_id, json!({"reason": format!("{why:?}")})),
            RevivalEnd::MarkMayBeInFlight => {}
            RevivalEnd::Failed(e) => log("error", "revival_failed", &o.shell.stream_id, json!({"error": e.to_string()})),
        }
        revived
    }

    /// Installs a rebuilt stream; a background pump that left its record re-attaches and
    /// becomes its producer (it fences any HTTP producer).
    async fn install_revived(&self, o: &Rc<Object>, stream: crate::engine::live::LiveStream) {
        let (stream_id, d, epoch, resume_by) = (o.shell.stream_id.clone(), stream.durable_seq(), stream.epoch(), stream.resume_by());
        let (durable_from, durable_text) = stream.retained_text();
        let durable_text = durable_text.to_owned();
        if !o.shell.install_rehydrated(stream) {
            return;
        }
        log("warn", "rehydrated", &stream_id, json!({"durableSeq": d, "epoch": epoch, "resumeBy": resume_by.map(|t| t.0)}));
        match self.reattach_pump(o, durable_from, &durable_text).await {
            Ok(PumpReattach::Started | PumpReattach::NoRecord | PumpReattach::Interrupted(_)) => {}
            Err(e) => log("error", "pump_reattach_failed", &stream_id, json!({"error": e.to_string()})),
        }
    }

    /// `POST /resume`: a new epoch and where to continue. The epoch is stored before the answer,
    /// so the connection it replaces stays fenced across a reset.
    pub(crate) async fn resume_producer(&self, o: &Rc<Object>, route: &Route, req: &Request) -> Result<Response, ApiError> {
        let epoch = epoch_of(req)?;
        let producer = req.headers().get(PRODUCER_HEADER).ok().flatten();
        let granted = o.shell.feed(|s, now| s.resume(epoch, producer.as_deref(), now));
        let grant = match granted {
            Some(Ok(grant)) => grant,
            Some(Err(ResumeRefused::Closed { status, seq, durable_seq })) => {
                return Err(ApiError::closed_as(&route.stream_id, status.as_str(), seq, durable_seq))
            }
            Some(Err(ResumeRefused::Fenced(f))) => return Err(fenced(&route.stream_id, f)),
            Some(Err(ResumeRefused::NotOpen)) | None => return Err(self.not_resumable(o, route).await),
        };
        self.store_resume(&grant, producer.as_deref()).await.map_err(ApiError::store_unavailable)?;
        log("info", "resumed", &route.stream_id, json!({"seq": grant.seq, "durableSeq": grant.durable_seq, "epoch": grant.epoch}));
        http::json(200, &json!({"seq": grant.seq, "durableSeq": grant.durable_seq, "format": grant.format.as_str(), "epoch": grant.epoch}))
            .map_err(unavailable)
    }

    /// Stores what a granted resume (or a pump taking over) changed: the new epoch (the replaced
    /// connection stays fenced across a reset), whom it went to, and no window.
    pub(crate) async fn store_resume(&self, grant: &ResumeGrant, producer: Option<&str>) -> Result<(), String> {
        let lease = self.lease_store().map_err(|e| e.to_string())?;
        lease.write_keys(&KeyUpdate::resumed(grant.epoch, producer)).await.map_err(|e| e.0)
    }

    /// Why no stream here can resume: its row is sealed (409 naming the status), or there is
    /// nothing streaming here (404 `not_open`).
    async fn not_resumable(&self, o: &Object, route: &Route) -> ApiError {
        match o.setup.read_durable(&route.stream_id).await {
            Ok(Some(row)) if row.status != STATUS_STREAMING && crate::engine::wire::frame::EndStatus::parse(&row.status).is_some() => {
                ApiError::closed_as(&route.stream_id, &row.status, row.seq, row.seq)
            }
            Ok(_) => ApiError::not_open(&route.stream_id),
            Err(e) => ApiError::store_unavailable(e),
        }
    }
}
