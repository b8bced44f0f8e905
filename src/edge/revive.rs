//! Surviving the object (SPEC §10), performed: a fresh instance that finds its stream's row
//! `streaming` rebuilds the live stream from D1 ([`LiveStream::rehydrate`]), once, however it
//! was woken (the lease alarm, a reader, the producer); `POST /resume`; the producer epoch on
//! writes (`x-rindle-epoch`). The decisions are the engine's (`engine/live/resume.rs`).
//!
//! What the object keeps for it, beside the lease's stream id and host token: the producer
//! epoch (stored before a resume answers, so a replaced connection stays fenced across a
//! reset), the open's `meta` (the authorizer sees it after a rehydration), and the window's
//! deadline (so a second reset does not restart it; cleared by a resume).

use super::http::{self, unavailable};
use super::object::{Object, StreamObject};
use super::pump::PumpReattach;
use super::shell::{log, now};
use super::store::Store;
use crate::engine::access::api::{ApiError, Route};
use crate::engine::host::config::{CheckpointMode, StreamConfig};
use crate::engine::host::object_storage::{EPOCH, META, RESUME_BY};
use crate::engine::host::store::{next_host_token, ClaimHost};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::live::lease::ArmedLease;
use crate::engine::live::{Fenced, LiveStream, Rehydration, ResumeGrant, ResumeRefused, FIRST_EPOCH};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::STATUS_STREAMING;
use serde_json::json;
use std::rc::Rc;
use worker::{Request, Response};

/// The request header carrying the producer epoch.
pub const EPOCH_HEADER: &str = "x-rindle-epoch";

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
    }
}

/// How far this instance got with rehydration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Revival {
    /// Not tried yet (a fresh instance).
    #[default]
    Untried,
    /// One attempt is under way: later callers wait for it (single flight).
    Running,
    /// Decided: rebuilt, or nothing to rebuild here.
    Settled,
}

/// The one rehydration attempt under way: however it ends (an answer, an error, or its future
/// dropped with its request), the next caller is let through and the waiters are woken.
struct Attempt<'a> {
    object: &'a StreamObject,
    settled: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        self.object.revival.set(if self.settled { Revival::Settled } else { Revival::Untried });
        for waiter in self.object.revival_waiters.take() {
            let _ = waiter.send(());
        }
    }
}

impl StreamObject {
    /// Remembers the open's `meta` for a later rehydration (nothing without one).
    pub(super) async fn remember_meta(&self, stream_id: &str, meta: Option<&serde_json::Value>) {
        let Some(meta) = meta else { return };
        self.meter.storage(|s| s.puts += 1);
        if let Err(e) = self.state.storage().put(META, meta).await {
            log("error", "meta_not_stored", stream_id, json!({"error": e.to_string()}));
        }
    }

    /// Rebuilds the stream if this is a fresh instance of an object whose stream was lost while
    /// `streaming`, once per instance: concurrent callers wait for the one attempt. A store
    /// failure is returned (503) and the next caller tries again.
    pub(super) async fn revive(&self, o: &Rc<Object>) -> Result<(), ApiError> {
        loop {
            if o.shell.holds_stream() || o.settings().stream.resume_window_ms == Millis::ZERO {
                return Ok(());
            }
            match self.revival.get() {
                Revival::Settled => return Ok(()),
                Revival::Running => {
                    let (tx, rx) = futures::channel::oneshot::channel();
                    self.revival_waiters.borrow_mut().push(tx);
                    let _ = rx.await;
                }
                Revival::Untried => break,
            }
        }
        self.revival.set(Revival::Running);
        let mut attempt = Attempt { object: self, settled: false };
        let result = self.rehydrate(o).await;
        attempt.settled = result.is_ok();
        result
    }

    /// One attempt: the lease says this object armed it for this stream, the window has not
    /// passed, the row is `streaming` (one atomic read), and, with a host column, the claim
    /// from the lost instance's token wins.
    async fn rehydrate(&self, o: &Rc<Object>) -> Result<(), ApiError> {
        let stream_id = o.shell.stream_id.clone();
        let lease = self.lease_store().map_err(unavailable)?;
        let ArmedLease { stream_id: Some(armed_for), host_token: token, .. } = lease.stored().await.map_err(ApiError::store_unavailable)?
        else {
            return Ok(());
        };
        if armed_for != stream_id {
            return Ok(());
        }
        let durable = o.setup.store.sink().read_durable(&stream_id).await.map_err(ApiError::store_unavailable)?;
        let Some(durable) = durable.filter(|d| d.status == STATUS_STREAMING) else { return Ok(()) };
        let storage = self.state.storage();
        self.meter.storage(|s| s.gets += 3);
        let resume_by = storage.get::<u64>(RESUME_BY).await.map_err(ApiError::store_unavailable)?.map(Timestamp);
        if resume_by.is_some_and(|at| at <= now()) {
            return Ok(()); // the window passed in an earlier life: the lease seals the row
        }
        let token = match (&*o.setup.store, &o.settings().stream.mode, token) {
            (Store::Tables(tables), CheckpointMode::Tables { host_cas: true }, Some(old)) => {
                let next = next_host_token(&old);
                let holder =
                    tables.perform(&stream_id, &ClaimHost { old, new: next.clone() }).await.map_err(ApiError::store_unavailable)?;
                if holder.as_deref() != Some(next.as_str()) {
                    log("warn", "rehydration_refused", &stream_id, json!({"holder": holder}));
                    return Ok(());
                }
                Some(next)
            }
            // A host column and no token to prove ownership with: the row is left to the lease.
            (Store::Tables(_), CheckpointMode::Tables { host_cas: true }, None) => return Ok(()),
            (_, _, token) => token,
        };
        let epoch = storage.get::<u64>(EPOCH).await.map_err(ApiError::store_unavailable)?.unwrap_or(FIRST_EPOCH);
        let meta = storage.get::<serde_json::Value>(META).await.map_err(ApiError::store_unavailable)?;
        let format = self.format(o).await?.unwrap_or_default();
        let now = now();
        let window = resume_by.unwrap_or(now + o.settings().stream.resume_window_ms);
        if let Some(token) = &token {
            lease.rehost(token).await.map_err(ApiError::store_unavailable)?;
        }
        if resume_by.is_none() {
            self.meter.storage(|s| s.puts += 1);
            storage.put(RESUME_BY, window.0).await.map_err(ApiError::store_unavailable)?;
        }
        let durable_text = durable.text.clone();
        let cfg = StreamConfig { format, ..o.setup.settings.stream.clone() };
        let from = Rehydration { durable, epoch, meta, resume_by: Some(window), host_token: token.clone() };
        let d = from.durable.seq;
        if !o.shell.install_rehydrated(LiveStream::rehydrate(&stream_id, cfg, from, now)) {
            return Ok(());
        }
        log("warn", "rehydrated", &stream_id, json!({"durableSeq": d, "epoch": epoch, "resumeBy": window.0}));
        // The object may be its own producer: a background pump re-attaches, and resumes the
        // stream itself (it fences any HTTP producer).
        match self.reattach_pump(o, Offset::ZERO, &durable_text).await {
            // The pump's resume is stored as a producer's is: a window left in storage would
            // have passed by the next reset, which would then leave the row to the lease's
            // `interrupted` seal under a pump still running upstream.
            Ok(PumpReattach::Started) => {
                if let Some(Ok(grant)) = o.shell.feed(|s, now| s.resume(now)) {
                    if let Err(e) = self.store_resume(&grant).await {
                        log("error", "resume_not_stored", &stream_id, json!({"error": e.to_string()}));
                    }
                }
            }
            Ok(PumpReattach::NoRecord | PumpReattach::Interrupted(_)) => {}
            Err(e) => log("error", "pump_reattach_failed", &stream_id, json!({"error": e.to_string()})),
        }
        Ok(())
    }

    /// `POST /resume`: a new epoch and where to continue. The epoch is stored before the answer,
    /// so the connection it replaces stays fenced across a reset.
    pub(super) async fn resume_producer(&self, o: &Rc<Object>, route: &Route) -> Result<Response, ApiError> {
        let granted = o.shell.feed(|s, now| s.resume(now));
        let grant = match granted {
            Some(Ok(grant)) => grant,
            Some(Err(ResumeRefused::Closed { status, seq, durable_seq })) => {
                return Err(ApiError::closed_as(&route.stream_id, status.as_str(), seq, durable_seq))
            }
            Some(Err(ResumeRefused::NotOpen)) | None => return Err(self.not_resumable(o, route).await),
        };
        self.store_resume(&grant).await.map_err(ApiError::store_unavailable)?;
        log("info", "resumed", &route.stream_id, json!({"seq": grant.seq, "durableSeq": grant.durable_seq, "epoch": grant.epoch}));
        http::json(200, &json!({"seq": grant.seq, "durableSeq": grant.durable_seq, "format": grant.format.as_str(), "epoch": grant.epoch}))
            .map_err(unavailable)
    }

    /// Stores what a granted resume changed: the new epoch (the replaced connection stays
    /// fenced across a reset) and no window (it closed; the next reset opens its own).
    async fn store_resume(&self, grant: &ResumeGrant) -> worker::Result<()> {
        let storage = self.state.storage();
        self.meter.storage(|s| {
            s.puts += 1;
            s.deletes += 1;
        });
        storage.put(EPOCH, grant.epoch).await?;
        storage.delete(RESUME_BY).await?;
        Ok(())
    }

    /// Why no stream here can resume: its row is sealed (409 naming the status), or there is
    /// nothing streaming here (404 `not_open`).
    async fn not_resumable(&self, o: &Object, route: &Route) -> ApiError {
        match o.setup.store.sink().read_durable(&route.stream_id).await {
            Ok(Some(row)) if row.status != STATUS_STREAMING && crate::engine::wire::frame::EndStatus::parse(&row.status).is_some() => {
                ApiError::closed_as(&route.stream_id, &row.status, row.seq, row.seq)
            }
            Ok(_) => ApiError::not_open(&route.stream_id),
            Err(e) => ApiError::store_unavailable(e),
        }
    }
}
