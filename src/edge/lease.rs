//! The lease alarm (SPEC §7), performed. The stream asks for its lease to be armed before its
//! row is marked ([`Output::ArmLease`](crate::engine::live::Output::ArmLease)) and renewed while
//! it is alive; what the alarm does when it fires is decided by
//! [`lease::decide`] and only performed here.

use super::meter::Meter;
use super::object::{Object, StreamObject};
use super::shell::log;
use super::store::Store;
use crate::engine::config::CheckpointMode;
use crate::engine::hook::{InterruptCause, StreamNotice};
use crate::engine::live::lease::{self, Holding, HostColumn, LeaseDecision, LeaseRow, Release};
use crate::engine::live::LiveStream;
use crate::engine::store::{ReadHost, StoreError};
use crate::engine::time::Millis;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use worker::State;

/// The storage keys under which the object remembers, for its alarm (an alarm carries no
/// request to read them from), which stream it opened and with which host token.
const STREAM_ID_KEY: &str = "streamId";
const HOST_TOKEN_KEY: &str = "hostToken";

/// The object's storage and alarm, as the lease uses them.
pub struct LeaseStore {
    state: State,
    lease: Duration,
    /// The last arming (its host token) and what it replaced, so a refused open can undo it.
    armed_over: RefCell<Option<(String, Stored)>>,
    meter: Rc<Meter>,
}

/// What a lease stores for its alarm: the stream id and the host token.
type Stored = (Option<String>, Option<String>);

impl LeaseStore {
    pub fn new(state: &State, lease: Millis, meter: Rc<Meter>) -> Self {
        // A second handle on the same JavaScript state object (`State` itself is not `Clone`).
        let raw: &wasm_bindgen::JsValue = state.as_raw().as_ref();
        let state = State::from(wasm_bindgen::JsCast::unchecked_into::<worker::worker_sys::DurableObjectState>(raw.clone()));
        Self { state, lease: Duration::from_millis(lease.0), armed_over: RefCell::new(None), meter }
    }

    /// Stores what the alarm needs and sets it one lease from now. The open waits for this
    /// before it marks the row.
    pub async fn arm(&self, stream_id: &str, host_token: &str) -> worker::Result<()> {
        let previous = self.stored().await;
        *self.armed_over.borrow_mut() = Some((host_token.to_owned(), previous));
        let storage = self.state.storage();
        self.meter.storage(|s| s.puts += 2);
        storage.put(STREAM_ID_KEY, stream_id).await?;
        storage.put(HOST_TOKEN_KEY, host_token).await?;
        self.renew().await
    }

    /// Undoes the arming with `host_token` (its open was refused without marking the row):
    /// restores what the lease stored before it, or stores nothing. The alarm stays set; when it
    /// fires it finds what was restored, or nothing to guard.
    pub async fn disarm(&self, host_token: &str) -> worker::Result<()> {
        let Some((token, (stream_id, previous_token))) = self.armed_over.borrow_mut().take() else { return Ok(()) };
        if token != host_token {
            return Ok(());
        }
        let storage = self.state.storage();
        for (key, value) in [(STREAM_ID_KEY, stream_id), (HOST_TOKEN_KEY, previous_token)] {
            match value {
                Some(v) => {
                    self.meter.storage(|s| s.puts += 1);
                    storage.put(key, v).await?
                }
                None => {
                    self.meter.storage(|s| s.deletes += 1);
                    storage.delete(key).await.map(drop)?
                }
            }
        }
        Ok(())
    }

    /// Sets the alarm one lease from now.
    pub async fn renew(&self) -> worker::Result<()> {
        self.meter.storage(|s| s.set_alarms += 1);
        self.state.storage().set_alarm(self.lease).await
    }

    /// A rehydration won the row with `host_token` (SPEC §10): the alarm's proof of ownership
    /// is that token from now on.
    pub async fn rehost(&self, host_token: &str) -> worker::Result<()> {
        self.meter.storage(|s| s.puts += 1);
        self.state.storage().put(HOST_TOKEN_KEY, host_token).await
    }

    /// The stream id and host token the last armed lease stored.
    pub(super) async fn stored(&self) -> Stored {
        let storage = self.state.storage();
        self.meter.storage(|s| s.gets += 2);
        let stream_id = storage.get::<String>(STREAM_ID_KEY).await.ok().flatten();
        let token = storage.get::<String>(HOST_TOKEN_KEY).await.ok().flatten();
        (stream_id, token)
    }
}

impl StreamObject {
    /// The lease alarm: performs what [`lease::decide`] says until the lease is renewed or
    /// released. A write that fails is tried again a lease later, for as long as it takes: the
    /// runtime's own alarm retries give up after a few, and no row may stay `streaming`.
    pub(super) async fn lease_expired(&self) -> worker::Result<()> {
        let (Some(stream_id), token) = self.lease_store()?.stored().await else {
            // Nothing armed here, or a refused open undid its arming: nothing to guard.
            let known = self.object.borrow().as_ref().map(|o| o.shell.stream_id.clone()).unwrap_or_default();
            log("info", "lease_released", &known, json!({"reason": "nothing armed"}));
            return Ok(());
        };
        let o = self.object(&stream_id).map_err(|e| worker::Error::RustError(e.message))?;
        // A fresh instance that finds its row `streaming` rebuilds it and waits for its producer
        // (SPEC §10) instead of sealing it; a failure leaves the decision below to the row.
        if let Err(e) = self.revive(&o).await {
            log("error", "rehydration_failed", &stream_id, json!({"error": e.message}));
        }
        let cfg = &o.setup.settings.stream;
        let mut row = None;
        loop {
            let holding = o.shell.inspect(LiveStream::holding).unwrap_or(Holding::Nothing);
            let performed = match lease::decide(&holding, row.as_ref(), token.as_deref(), cfg) {
                LeaseDecision::Renew => return self.lease_store()?.renew().await,
                LeaseDecision::Release(release) => {
                    if let Release::NotOurs { .. } | Release::TokenUnknown = release {
                        log("warn", "lease_released", &stream_id, json!({"reason": format!("{release:?}")}));
                    }
                    return Ok(());
                }
                LeaseDecision::ReadRow => read_row(&o, &stream_id).await.map(|r| row = Some(r)),
                LeaseDecision::RepairSeal(write) => o.setup.store.sink().seal(&stream_id, &write).await.map(|()| {
                    o.shell.feed(|s, _| s.seal_repaired());
                    log("warn", "seal_repaired", &stream_id, json!({"durableSeq": o.shell.inspect(LiveStream::durable_seq)}));
                }),
                LeaseDecision::SealInterrupted(write) => o.setup.store.sink().seal(&stream_id, &write).await.map(|()| {
                    log("warn", "interrupted", &stream_id, json!({"durableSeq": write.seq, "compacted": write.body.is_some()}));
                    let cause = InterruptCause::LeaseExpired;
                    o.shell.notify(StreamNotice::Interrupted { stream_id: stream_id.clone(), durable_seq: write.seq, cause });
                    row = None; // the next decision reads the sealed row and releases
                }),
            };
            if let Err(e) = performed {
                log("error", "lease_repair_failed", &stream_id, json!({"error": e.to_string(), "retryInMs": cfg.lease_ms}));
                return self.lease_store()?.renew().await;
            }
        }
    }
}

/// The row as the lease decides on it: its durable text and status, and the host column.
async fn read_row(o: &Object, stream_id: &str) -> Result<LeaseRow, StoreError> {
    let durable = o.setup.store.sink().read_durable(stream_id).await?;
    let host = match (&*o.setup.store, &o.setup.settings.stream.mode) {
        (Store::Tables(tables), CheckpointMode::Tables { host_cas: true }) if durable.is_some() => {
            HostColumn::Holds(tables.perform(stream_id, &ReadHost).await?)
        }
        _ => HostColumn::Unmapped,
    };
    Ok(LeaseRow { durable, host })
}
