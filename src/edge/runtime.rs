//! What the runtime gives every room: the clock, a timeout around any call, its randomness,
//! a store call waited out under load, and structured log lines.

use crate::engine::host::time::{Millis, Timestamp};
use serde_json::json;
use std::time::Duration;

/// The wall clock (inside a Durable Object it advances across I/O): the engine's time.
pub fn now() -> Timestamp {
    Timestamp(js_sys::Date::now() as u64)
}

/// `call`'s output, or `None` when it did not come within `limit` (the call is dropped: a late
/// reply is ignored).
pub async fn with_timeout<T>(limit: Millis, call: impl std::future::Future<Output = T>) -> Option<T> {
    let call = std::pin::pin!(call);
    let bound = std::pin::pin!(worker::Delay::from(Duration::from_millis(limit.0)));
    match futures::future::select(call, bound).await {
        futures::future::Either::Left((output, _)) => Some(output),
        futures::future::Either::Right(_) => None,
    }
}

/// The runtime's randomness: 64 bits (the clock's, should the random source fail).
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => js_sys::Date::now().to_bits(),
    }
}

/// A store call made for a request (not a stream's own), waited out under load by the engine's
/// rule ([`crate::engine::live::patiently`]): this runtime's wait and randomness.
pub async fn patiently<T, F, Fut>(
    cfg: &crate::engine::host::config::StreamConfig,
    call: F,
) -> Result<T, crate::engine::host::store::StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::engine::host::store::StoreError>>,
{
    let jitter = crate::engine::live::Jitter::from_seed(random_u64());
    crate::engine::live::patiently(cfg, jitter, |wait: Millis| worker::Delay::from(Duration::from_millis(wait.0)), call).await
}

/// One structured JSON log line.
pub fn log(level: &str, event: &str, stream_id: &str, fields: serde_json::Value) {
    let mut line = json!({"level": level, "event": event, "streamId": stream_id});
    if let (Some(obj), serde_json::Value::Object(extra)) = (line.as_object_mut(), fields) {
        obj.extend(extra);
    }
    if level == "info" {
        worker::console_log!("{line}");
    } else {
        worker::console_error!("{line}");
    }
}
