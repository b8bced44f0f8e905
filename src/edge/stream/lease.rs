//! The object's storage and its alarm, performed: the keys of [`StoredStream`] read in one call
//! and written as [`KeyUpdate`]s, every call bounded by `STORE_TIMEOUT_MS`; and the lease alarm,
//! which drives the core's [`LeaseAlarm`] (and, when nothing is held here, the same revival a
//! request runs: `revive.rs`).

use super::StreamObject;
use crate::edge::meter::Meter;
use crate::edge::runtime::{log, with_timeout};
use crate::engine::host::config::StreamConfig;
use crate::engine::host::object_storage::{kept_at_release, Arming, KeyUpdate, StoredStream, KEYS};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::live::lease::{AlarmOutput, Holding, LeaseAlarm, Release, Renewal, StorageError};
use crate::engine::live::LiveStream;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use worker::State;

/// The object's storage and alarm, as the lease and a revival use them.
pub struct LeaseStore {
    state: State,
    lease: Duration,
    timeout: Millis,
    /// The last arming (its host token) and what the keys held before it, so a refused open
    /// can undo it.
    armed_over: RefCell<Option<Arming>>,
    meter: Rc<Meter>,
    /// The test build's fault plan: `ops=storage` breaks the reads of the keys.
    #[cfg(feature = "test-faults")]
    pub faults: Option<Rc<crate::edge::dev::faults::FaultPlan>>,
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

    /// Stores what the alarm and a revival need and sets the alarm one lease from now. The open
    /// waits for this before it marks the row.
    pub async fn arm(&self, lease: &StoredStream) -> Result<(), StorageError> {
        // The engine's rule: armed over the keys read just before, or not at all.
        let before = self.read_keys().await.map_err(|e| e.0);
        let (arming, update) = Arming::over(lease, before).map_err(StorageError)?;
        *self.armed_over.borrow_mut() = Some(arming);
        self.write_keys(&update).await?;
        self.renew(None).await
    }

    /// Undoes the arming with `host_token` (its open was refused without marking the row):
    /// restores what the keys held before it. The alarm stays set; when it fires it finds what
    /// was restored, or nothing to guard.
    pub async fn disarm(&self, host_token: &str) -> Result<(), StorageError> {
        let undo = self.armed_over.borrow().as_ref().and_then(|arming| arming.undo(host_token));
        let Some(update) = undo else { return Ok(()) };
        self.armed_over.borrow_mut().take();
        self.write_keys(&update).await
    }

    /// Sets the alarm one lease from now, storing the producer's last write first when the
    /// stream asks (see `Output::RenewLease`).
    pub async fn renew(&self, last_write: Option<Timestamp>) -> Result<(), StorageError> {
        if let Some(at) = last_write {
            self.write_keys(&KeyUpdate::last_write(at)).await?;
        }
        self.meter.storage(|s| s.set_alarms += 1);
        self.bounded(self.state.storage().set_alarm(self.lease)).await
    }

    /// Every key ([`KEYS`]), in one call. An error (or no answer in time) is an error, never "nothing
    /// armed": the alarm renews on it.
    pub async fn read_keys(&self) -> Result<StoredStream, StorageError> {
        #[cfg(feature = "test-faults")]
        {
            use crate::engine::host::faults::Fault;
            match self.faults.as_ref().and_then(|plan| plan.decide(crate::engine::host::store::OpKind::LeaseKeys)) {
                Some(Fault::HoldReply) => return self.bounded(futures::future::pending::<worker::Result<StoredStream>>()).await,
                Some(_) => return Err(StorageError("injected fault: the object's storage failed".into())),
                None => {}
            }
        }
        // One `list()`: every key the object holds, and as many rows read (none for an object
        // whose stream is over, which a late reader wakes).
        let map = self.bounded(self.state.storage().list()).await?;
        self.meter.storage(|s| s.gets += u64::from(map.size()));
        let keys = StoredStream::from_values(|key| {
            let value = map.get(&key.into());
            let text = js_sys::JSON::stringify(&value).ok()?.as_string()?;
            serde_json::from_str(&text).ok().filter(|v: &serde_json::Value| !v.is_null())
        });
        Ok(keys)
    }

    /// Applies `update`: its puts in one call, its deletes in another.
    pub async fn write_keys(&self, update: &KeyUpdate) -> Result<(), StorageError> {
        let storage = self.state.storage();
        if !update.puts.is_empty() {
            let object = js_sys::Object::new();
            for (key, value) in &update.puts {
                let value = js_sys::JSON::parse(&value.to_string()).map_err(|_| StorageError(format!("{key}: not JSON")))?;
                let _ = js_sys::Reflect::set(&object, &(*key).into(), &value);
            }
            self.meter.storage(|s| s.puts += update.puts.len() as u64);
            self.bounded(storage.put_multiple_raw(object)).await?;
        }
        if !update.deletes.is_empty() {
            self.meter.storage(|s| s.deletes += update.deletes.len() as u64);
            self.bounded(storage.delete_multiple(update.deletes.clone())).await?;
        }
        Ok(())
    }

    /// The lease ends: every key goes (but what [`kept_at_release`] keeps), and the alarm.
    pub async fn forget(&self, keep: &[&str]) -> Result<(), StorageError> {
        let storage = self.state.storage();
        self.meter.storage(|s| s.deletes += 1);
        if keep.is_empty() {
            self.bounded(storage.delete_all()).await?;
        } else {
            let gone: Vec<&str> = KEYS.iter().copied().filter(|k| !keep.contains(k)).collect();
            self.bounded(storage.delete_multiple(gone)).await.map(drop)?;
        }
        self.bounded(storage.delete_alarm()).await
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
    pub(crate) async fn lease_expired(&self) -> worker::Result<()> {
        let settings = self.settings().map_err(|e| worker::Error::RustError(e.message))?;
        let lease = self.lease_store()?;
        let mut alarm = LeaseAlarm::fire();
        let mut format = None;
        let feed = || self.object.borrow().as_ref().map(|o| Rc::clone(&o.shell.feed));
        if let Some(feed) = feed() {
            feed.retry_now();
        }
        loop {
            let Some(output) = alarm.poll_output() else {
                // Every run ends with a renewal or a release; a machine that stopped short
                // leaves the alarm set, so it fires again.
                return Ok(());
            };
            let holding = || self.object.borrow().as_ref().and_then(|o| o.shell.inspect(LiveStream::holding)).unwrap_or(Holding::Nothing);
            // The stream the keys name, else the one this object knows (nothing armed names none).
            let known = || self.object.borrow().as_ref().map(|o| o.shell.stream_id.clone()).unwrap_or_default();
            let id = || alarm.stream_id().map_or_else(known, str::to_owned);
            // A release waits for the stream's notices to its chat's feed.
            let output = match feed() {
                Some(feed) => feed.before_release(output),
                None => output,
            };
            match output {
                AlarmOutput::ReadKeys => {
                    let keys = lease.read_keys().await;
                    format = keys.as_ref().ok().and_then(|k| k.format);
                    alarm.handle_keys(keys, holding());
                }
                AlarmOutput::Revive => {
                    let o = self.object(&id()).map_err(|e| worker::Error::RustError(e.message))?;
                    let revived = self.revive(&o, crate::engine::live::Caller::Alarm).await;
                    alarm.handle_revival(revived);
                }
                AlarmOutput::RetrySeal => {
                    if let Some(o) = self.object.borrow().clone() {
                        o.shell.feed(|s, now| s.retry_seal(now));
                    }
                }
                AlarmOutput::Renew(why) => {
                    if !matches!(why, Renewal::Alive) {
                        log("warn", "lease_renewed", &id(), json!({"reason": format!("{why:?}"), "retryInMs": settings.stream.lease_ms}));
                    }
                    return lease.renew(None).await.map_err(|e| worker::Error::RustError(e.to_string()));
                }
                AlarmOutput::Release(why) => {
                    let (level, reason) = match &why {
                        Release::NothingArmed => ("info", "nothing armed".to_owned()),
                        Release::NotOurs { .. } | Release::TokenUnknown => ("warn", format!("{why:?}")),
                        _ => ("info", format!("{why:?}")),
                    };
                    log(level, "lease_released", &id(), json!({"reason": reason}));
                    let keep = kept_at_release(format, crate::edge::setup::rows_carry_format(&settings));
                    let forgotten = lease.forget(keep).await.map_err(|e| worker::Error::RustError(e.to_string()));
                    // A stream sealed here, still held, retires: a late reader is served from the row.
                    if let Some(o) = self.object.borrow().clone() {
                        o.shell.feed(|s, _| s.lease_released());
                    }
                    return forgotten;
                }
            }
        }
    }
}
