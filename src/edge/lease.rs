//! The lease alarm (SPEC §7), performed. The stream asks for its lease to be armed before its
//! row is marked ([`Output::ArmLease`](crate::engine::live::Output::ArmLease)) and renewed while
//! it is alive; what the alarm does when it fires is the core's [`LeaseAlarm`], which this
//! drives: it reads the keys, answers the machine's store requests (each bounded by
//! `STORE_TIMEOUT_MS`) and performs its renewal or release.

use super::meter::Meter;
use super::object::StreamObject;
use super::shell::{log, now, with_timeout};
use crate::engine::host::config::StreamConfig;
use crate::engine::host::hook::StreamNotice;
use crate::engine::host::object_storage::{ARMED_AT, HOST_TOKEN, LEASE_KEYS, STREAM_ID};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::live::lease::{AlarmOutput, ArmedLease, Holding, LeaseAlarm, Release, StorageError};
use crate::engine::live::LiveStream;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use worker::State;

/// The object's storage and alarm, as the lease uses them.
pub struct LeaseStore {
    state: State,
    lease: Duration,
    timeout: Millis,
    /// The last arming (its host token) and what it replaced, so a refused open can undo it.
    armed_over: RefCell<Option<(String, ArmedLease)>>,
    meter: Rc<Meter>,
    /// The test build's fault plan: `ops=storage` breaks the alarm's read of its keys.
    #[cfg(feature = "test-faults")]
    pub faults: Option<Rc<super::faults::FaultPlan>>,
}

impl LeaseStore {
    pub fn new(state: &State, cfg: &StreamConfig, meter: Rc<Meter>) -> Self {
        // A second handle on the same JavaScript state object (`State` itself is not `Clone`).
        let raw: &wasm_bindgen::JsValue = state.as_raw().as_ref();
        let state = State::from(wasm_bindgen::JsCast::unchecked_into::<worker::worker_sys::DurableObjectState>(raw.clone()));
        Self {
            state,
            lease: Duration::from_millis(cfg.lease_ms.0),
            timeout: cfg.store_timeout_ms,
            armed_over: RefCell::new(None),
            meter,
            #[cfg(feature = "test-faults")]
            faults: None,
        }
    }

    /// Stores what the alarm needs and sets it one lease from now. The open waits for this
    /// before it marks the row.
    pub async fn arm(&self, stream_id: &str, host_token: &str) -> Result<(), StorageError> {
        // Unknown (a failed read) restores nothing on a disarm: the alarm then finds nothing.
        let previous = self.stored().await.unwrap_or_default();
        *self.armed_over.borrow_mut() = Some((host_token.to_owned(), previous));
        let armed = ArmedLease { stream_id: Some(stream_id.to_owned()), host_token: Some(host_token.to_owned()), armed_at: Some(now()) };
        self.store(&armed).await?;
        self.renew().await
    }

    /// Undoes the arming with `host_token` (its open was refused without marking the row):
    /// restores what the lease stored before it, or stores nothing. The alarm stays set; when it
    /// fires it finds what was restored, or nothing to guard.
    pub async fn disarm(&self, host_token: &str) -> Result<(), StorageError> {
        let Some((token, previous)) = self.armed_over.borrow_mut().take() else { return Ok(()) };
        if token != host_token {
            return Ok(());
        }
        self.store(&previous).await
    }

    /// Writes the lease's keys (a key whose value is `None` is deleted).
    async fn store(&self, armed: &ArmedLease) -> Result<(), StorageError> {
        let storage = self.state.storage();
        let values = [
            (STREAM_ID, armed.stream_id.as_ref().map(|id| json!(id))),
            (HOST_TOKEN, armed.host_token.as_ref().map(|token| json!(token))),
            // A number of ms, stored as JavaScript stores it (an f64: exact below 2^53).
            (ARMED_AT, armed.armed_at.map(|at| json!(at.0 as f64))),
        ];
        for (key, value) in values {
            let call = async {
                match value {
                    Some(v) => {
                        self.meter.storage(|s| s.puts += 1);
                        storage.put(key, v).await
                    }
                    None => {
                        self.meter.storage(|s| s.deletes += 1);
                        storage.delete(key).await.map(drop)
                    }
                }
            };
            self.bounded(call).await?;
        }
        Ok(())
    }

    /// Sets the alarm one lease from now.
    pub async fn renew(&self) -> Result<(), StorageError> {
        self.meter.storage(|s| s.set_alarms += 1);
        self.bounded(self.state.storage().set_alarm(self.lease)).await
    }

    /// A rehydration won the row with `host_token` (SPEC §10): the alarm's proof of ownership
    /// is that token from now on.
    pub async fn rehost(&self, host_token: &str) -> Result<(), StorageError> {
        self.meter.storage(|s| s.puts += 1);
        self.bounded(self.state.storage().put(HOST_TOKEN, host_token)).await
    }

    /// What the last armed lease stored. An error (or no answer in time) is an error, never
    /// "nothing armed": the alarm renews on it.
    pub async fn stored(&self) -> Result<ArmedLease, StorageError> {
        #[cfg(feature = "test-faults")]
        {
            use crate::engine::host::faults::Fault;
            match self.faults.as_ref().and_then(|plan| plan.decide(crate::engine::host::store::OpKind::LeaseKeys)) {
                Some(Fault::HoldReply) => return self.bounded(futures::future::pending::<worker::Result<ArmedLease>>()).await,
                Some(_) => return Err(StorageError("injected fault: the object's storage failed".into())),
                None => {}
            }
        }
        let storage = self.state.storage();
        self.meter.storage(|s| s.gets += LEASE_KEYS.len() as u64);
        let stream_id = self.bounded(storage.get::<String>(STREAM_ID)).await?;
        let host_token = self.bounded(storage.get::<String>(HOST_TOKEN)).await?;
        let armed_at = self.bounded(storage.get::<f64>(ARMED_AT)).await?.map(|ms| Timestamp(ms as u64));
        Ok(ArmedLease { stream_id, host_token, armed_at })
    }

    /// A storage call, failed when it errs or does not answer within the store timeout.
    async fn bounded<T>(&self, call: impl std::future::Future<Output = worker::Result<T>>) -> Result<T, StorageError> {
        match with_timeout(self.timeout, call).await {
            Some(result) => result.map_err(|e| StorageError(e.to_string())),
            None => Err(StorageError(format!("no answer in {} ms", self.timeout.0))),
        }
    }
}

impl StreamObject {
    /// The lease alarm: drives one run of [`LeaseAlarm`] to its renewal or release. A failure
    /// renews, for as long as it takes: the runtime's own alarm retries give up after a few, and
    /// no row may stay `streaming`.
    pub(super) async fn lease_expired(&self) -> worker::Result<()> {
        let setup = self.setup().map_err(|e| worker::Error::RustError(e.message))?;
        let lease = self.lease_store()?;
        let mut alarm = LeaseAlarm::fire(setup.settings.stream.clone());
        let mut object = None;
        loop {
            let Some(output) = alarm.poll_output() else {
                // Every run ends with a renewal or a release; a machine that stopped short
                // leaves the alarm set, so it fires again.
                return Ok(());
            };
            let holding = |object: &Option<Rc<super::object::Object>>| {
                object.as_ref().and_then(|o| o.shell.inspect(LiveStream::holding)).unwrap_or(Holding::Nothing)
            };
            match output {
                AlarmOutput::ReadKeys => {
                    let keys = lease.stored().await;
                    if let Ok(ArmedLease { stream_id: Some(id), .. }) = &keys {
                        let o = self.object(id).map_err(|e| worker::Error::RustError(e.message))?;
                        // A fresh instance that finds its row `streaming` rebuilds it and waits for
                        // its producer (SPEC §10) instead of sealing it; then the stream is alive
                        // here and the lease renews. A failure leaves the decision to the row.
                        if let Err(e) = self.revive(&o).await {
                            log("error", "rehydration_failed", id, json!({"error": e.message}));
                        }
                        object = Some(o);
                    }
                    alarm.handle_keys(keys, &holding(&object), now());
                }
                AlarmOutput::Store(request) => {
                    let Some(o) = object.clone() else { return Ok(()) };
                    let answer = o.shell.run_bounded(request).await;
                    alarm.handle_store(answer, &holding(&object), now());
                }
                AlarmOutput::SealRepaired => {
                    if let Some(o) = &object {
                        o.shell.feed(|s, _| s.seal_repaired());
                    }
                }
                AlarmOutput::Notice(notice) => {
                    let id = alarm.stream_id().unwrap_or_default().to_owned();
                    match &notice {
                        StreamNotice::Interrupted { durable_seq, .. } => {
                            log("warn", "interrupted", &id, json!({"durableSeq": durable_seq, "by": "lease"}))
                        }
                        StreamNotice::SealRepaired { status, durable_seq, .. } => {
                            log("warn", "seal_repaired", &id, json!({"status": status, "durableSeq": durable_seq}))
                        }
                        other => log("warn", "lease_notice", &id, json!({"notice": format!("{other:?}")})),
                    }
                    if let Some(o) = &object {
                        o.shell.notify(notice);
                    }
                }
                AlarmOutput::Renew(why) => {
                    let id = alarm.stream_id().unwrap_or_default().to_owned();
                    if !matches!(why, crate::engine::live::lease::Renewal::Alive) {
                        log(
                            "warn",
                            "lease_renewed",
                            &id,
                            json!({"reason": format!("{why:?}"), "retryInMs": setup.settings.stream.lease_ms}),
                        );
                    }
                    return lease.renew().await.map_err(|e| worker::Error::RustError(e.to_string()));
                }
                AlarmOutput::Release(why) => {
                    // Nothing armed names no stream: the one this object knows, if any.
                    let known = || self.object.borrow().as_ref().map(|o| o.shell.stream_id.clone()).unwrap_or_default();
                    let id = alarm.stream_id().map_or_else(known, str::to_owned);
                    let (level, reason) = match &why {
                        Release::NothingArmed => ("info", "nothing armed".to_owned()),
                        Release::NotOurs { .. } | Release::TokenUnknown => ("warn", format!("{why:?}")),
                        _ => ("info", format!("{why:?}")),
                    };
                    log(level, "lease_released", &id, json!({"reason": reason}));
                    return Ok(());
                }
            }
        }
    }
}
