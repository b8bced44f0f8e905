//! The lease alarm (SPEC §7): armed at open and renewed while this object holds the stream, so
//! that a stream whose object was evicted, crashed or redeployed is sealed from its durable
//! text, and a seal that could not commit is repaired. No row stays `streaming` forever.

use super::object::{Object, StreamObject};
use super::shell::log;
use crate::core::frame::EndStatus;
use crate::core::live::{LiveStream, SealWrite, StoreFailure, StoreOp, StreamState};
use serde_json::json;
use std::rc::Rc;
use std::time::Duration;

/// The storage key under which the object remembers its stream id, for the lease alarm (an
/// alarm carries no request to read it from).
const STREAM_ID_KEY: &str = "streamId";

/// Why an evicted stream was sealed.
const INTERRUPTED: &str = "the live stream was lost (its Durable Object was evicted, crashed or redeployed) before it was sealed";

impl StreamObject {
    /// Arms the lease alarm and keeps renewing it while this object holds the stream. If the
    /// object dies, the renewals stop and the alarm fires in a fresh instance.
    pub(super) async fn hold_lease(&self, o: &Rc<Object>, stream_id: &str) {
        let storage = self.state.storage();
        let lease_ms = o.setup.settings.lease_ms;
        if let Err(e) = storage.put(STREAM_ID_KEY, stream_id).await {
            log("error", "lease_failed", stream_id, json!({"error": e.to_string()}));
        }
        if let Err(e) = storage.set_alarm(Duration::from_millis(lease_ms)).await {
            log("error", "lease_failed", stream_id, json!({"error": e.to_string()}));
        }
        let shell = Rc::clone(&o.shell);
        wasm_bindgen_futures::spawn_local(async move {
            loop {
                worker::Delay::from(Duration::from_millis(lease_ms / 2)).await;
                let live = shell.inspect(|s| matches!(s.state(), StreamState::Live | StreamState::Sealing)).unwrap_or(false);
                if !live {
                    break; // sealed (or retired): the alarm that follows finds nothing to repair
                }
                if let Err(e) = storage.set_alarm(Duration::from_millis(lease_ms)).await {
                    log("error", "lease_renewal_failed", &shell.stream_id, json!({"error": e.to_string()}));
                }
            }
        });
    }

    /// The lease alarm: a stream still live here renews it; otherwise the row is sealed (see
    /// [`Self::seal_abandoned_row`]). A repair that fails is tried again a lease later, for as
    /// long as it takes: the runtime's own alarm retries give up after a few, and no row may
    /// stay `streaming`.
    pub(super) async fn lease_expired(&self) -> worker::Result<()> {
        let Some(stream_id) = self.state.storage().get::<String>(STREAM_ID_KEY).await.ok().flatten() else { return Ok(()) };
        let o = self.object(&stream_id).map_err(|e| worker::Error::RustError(e.message))?;
        let lease = Duration::from_millis(o.setup.settings.lease_ms);
        if o.shell.inspect(|s| matches!(s.state(), StreamState::Opening | StreamState::Live | StreamState::Sealing)).unwrap_or(false) {
            return self.state.storage().set_alarm(lease).await;
        }
        if let Err(e) = Self::seal_abandoned_row(&o, &stream_id).await {
            log("error", "lease_repair_failed", &stream_id, json!({"error": e.0, "retryInMs": o.setup.settings.lease_ms}));
            self.state.storage().set_alarm(lease).await?;
        }
        Ok(())
    }

    /// Seals a row that no live stream will seal: a seal that could not commit is retried from
    /// the lingering stream (so the row gets the producer's status); otherwise a row still
    /// `streaming` is sealed `interrupted` from its durable text.
    async fn seal_abandoned_row(o: &Object, stream_id: &str) -> Result<(), StoreFailure> {
        if let Some(write) = o.shell.inspect(LiveStream::unsealed_write).flatten() {
            o.setup.sink.run(stream_id, &StoreOp::Seal(write)).await?;
            o.shell.feed(|s, _| s.seal_repaired());
            log("warn", "seal_repaired", stream_id, json!({"durableSeq": o.shell.inspect(LiveStream::durable_seq)}));
            return Ok(());
        }
        let Some(durable) = o.setup.sink.read_durable(stream_id).await?.filter(|d| d.status == crate::core::frame::STATUS_STREAMING) else {
            return Ok(());
        };
        let fits = durable.text.len() <= o.setup.settings.stream.max_compact_bytes;
        let seal = SealWrite {
            status: EndStatus::Interrupted,
            error: Some(INTERRUPTED.to_owned()),
            seq: durable.seq,
            body: fits.then(|| durable.text.clone()),
            body_from: 0,
        };
        o.setup.sink.run(stream_id, &StoreOp::Seal(seal)).await?;
        log("warn", "interrupted", stream_id, json!({"durableSeq": durable.seq, "compacted": fits}));
        Ok(())
    }
}
