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
use crate::engine::live::{
    Attempt, Caller, Fenced, ResumeGrant, ResumeRefused, Revival, RevivalEnd, RevivalFailure, RevivalOutput, Taker, Turn,
};
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

/// The revival this caller runs: however it ends (an answer, an error, or its future dropped
/// with its request), the engine hears of it and the waiting callers ask again.
struct Running<'a> {
    shell: &'a super::shell::Shell,
    attempt: Option<Attempt>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(attempt) = self.attempt.take() {
            self.shell.finish_revival(attempt, None);
        }
    }
}

impl StreamObject {
    /// Rebuilds the stream if this instance holds none and its keys say one was lost while
    /// `streaming`: the engine's [`Revivals`](crate::engine::live::Revivals) say whether this
    /// caller runs a revival, waits for the one under way, or already has the answer. A stream
    /// held here is [`Revived::Rebuilt`].
    pub(crate) async fn revive(&self, o: &Rc<Object>, caller: Caller) -> Revived {
        let attempt = loop {
            match o.shell.begin_revival(caller) {
                Turn::Held => return Revived::Rebuilt,
                Turn::Settled(release) => return Revived::Nothing(release),
                Turn::Wait => drop(o.shell.revival_finished().await),
                Turn::Run(attempt) => break attempt,
            }
        };
        let mut running = Running { shell: &o.shell, attempt: Some(attempt) };
        let outcome = self.run_revival(o).await;
        if let Some(attempt) = running.attempt.take() {
            o.shell.finish_revival(attempt, Some(&outcome));
        }
        outcome
    }

    /// A request's revival: a step that failed is a 503 (the next request tries again).
    pub(crate) async fn revive_for_request(&self, o: &Rc<Object>) -> Result<(), ApiError> {
        match self.revive(o, Caller::Request).await {
            Revived::Failed(e) => Err(ApiError::store_unavailable(e)),
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
        // What this instance may not have told the chat's feed (the start, an end in the row).
        o.shell.feed.revived(revival.keys(), revival.row());
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
        let grant = match o.shell.feed(|s, now| s.resume(epoch, producer.as_deref(), now)) {
            Some(Ok(grant)) => grant,
            Some(Err(ResumeRefused::NotOpen)) | None => {
                // No stream here (the revival found nothing to rebuild): the row says why.
                let row = o.setup.read_durable(&route.stream_id).await.map_err(ApiError::store_unavailable)?;
                return Err(refused(&route.stream_id, ResumeRefused::of_row(row.as_ref())));
            }
            Some(Err(e)) => return Err(refused(&route.stream_id, e)),
        };
        self.store_takeover(o, &grant, producer.as_deref(), Taker::Producer).await?;
        log("info", "resumed", &route.stream_id, json!({"seq": grant.seq, "durableSeq": grant.durable_seq, "epoch": grant.epoch}));
        http::json(200, &json!({"seq": grant.seq, "durableSeq": grant.durable_seq, "format": grant.format.as_str(), "epoch": grant.epoch}))
            .map_err(unavailable)
    }

    /// Stores what a granted take-over (a resume, a pump) changed: the new epoch (the replaced
    /// connection stays fenced across a reset), whom it went to, and no window. When the storage
    /// fails, the engine says whether the take-over still stands ([`Taker::needs_stored_epoch`]):
    /// a producer's resume is answered 503, a pump goes on (logged).
    pub(crate) async fn store_takeover(
        &self,
        o: &Object,
        grant: &ResumeGrant,
        producer: Option<&str>,
        taker: Taker,
    ) -> Result<(), ApiError> {
        let stored = match self.lease_store() {
            Ok(lease) => lease.write_keys(&KeyUpdate::resumed(grant.epoch, producer)).await.map_err(|e| e.0),
            Err(e) => Err(e.to_string()),
        };
        match stored {
            Ok(()) => Ok(()),
            Err(e) if taker.needs_stored_epoch() => Err(ApiError::store_unavailable(e)),
            Err(e) => {
                let fields = json!({"error": e, "epoch": grant.epoch, "taker": format!("{taker:?}")});
                log("error", "epoch_not_stored", &o.shell.stream_id, fields);
                Ok(())
            }
        }
    }
}

/// A refused resume (or a producer's write to a stream that is not live), as the API answers it:
/// `closed` names the status the stream ends with.
pub(crate) fn refused(stream_id: &str, refused: ResumeRefused) -> ApiError {
    match refused {
        ResumeRefused::Closed { status, seq, durable_seq } => ApiError::closed_as(stream_id, status.as_str(), seq, durable_seq),
        ResumeRefused::Fenced(f) => fenced(stream_id, f),
        ResumeRefused::NotOpen => ApiError::not_open(stream_id),
    }
}
