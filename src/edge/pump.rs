//! `POST /streams/{id}/pump`: the object fetches an upstream model API itself and pushes its
//! text deltas (on a `ui` stream, UI message chunks: `engine::pump` decides which), so the
//! producer's own request ends at once. The upstream's end closes the
//! stream; an upstream error or a malformed event fails it; a cancel aborts the upstream.

use super::http::unavailable;
use super::shell::{log, Shell};
use crate::engine::api::ApiError;
use crate::engine::live::{LiveStream, PushError};
use crate::engine::pump::{Pump, PumpRequest, PumpStep};
use eventsource_stream::Eventsource;
use futures::future::{select, Either};
use futures::StreamExt;
use serde_json::json;
use std::rc::Rc;
use worker::{AbortController, Fetch, Headers, Method, Request, RequestInit};

/// How a pump ended, other than by failing.
enum PumpEnd {
    /// The upstream finished its response.
    Complete,
    /// A cancel arrived: the upstream was aborted.
    Cancelled,
    /// Someone else sealed the stream meanwhile.
    StreamEnded,
}

/// Builds the upstream request from a pump body; refuses a bad one with 400 `bad_upstream`.
pub fn upstream_request(body: &[u8]) -> Result<(PumpRequest, Request), ApiError> {
    let pump = PumpRequest::parse(body).map_err(ApiError::bad_upstream)?;
    let headers = Headers::new();
    for (name, value) in &pump.headers {
        headers.set(name, value).map_err(|e| ApiError::bad_upstream(format!("header {name:?}: {e}")))?;
    }
    let mut init = RequestInit::new();
    let method = if pump.method.as_deref() == Some("GET") { Method::Get } else { Method::Post };
    init.with_method(method);
    if let Some(body) = &pump.body {
        if !pump.headers.keys().any(|k| k.eq_ignore_ascii_case("content-type")) {
            headers.set("content-type", "application/json").map_err(unavailable)?;
        }
        init.with_body(Some(body.to_string().into()));
    }
    if !pump.headers.keys().any(|k| k.eq_ignore_ascii_case("accept")) {
        headers.set("accept", "text/event-stream").map_err(unavailable)?;
    }
    init.with_headers(headers);
    let request = Request::new_with_init(&pump.url, &init).map_err(|e| ApiError::bad_upstream(format!("url: {e}")))?;
    Ok((pump, request))
}

/// Runs a pump to its end and seals the stream accordingly. Never logs the upstream's
/// headers or query (they may carry keys).
pub async fn run(shell: Rc<Shell>, pump: PumpRequest, request: Request) {
    let controller = AbortController::default();
    let upstream = pump.redacted_url().to_owned();
    log("info", "pump_started", &shell.stream_id, json!({"format": format!("{:?}", pump.format), "upstream": upstream}));
    let format = shell.inspect(LiveStream::format).unwrap_or_default();
    let outcome = relay(&shell, Pump::for_stream(format, pump.format, &shell.stream_id), request, &controller).await;
    controller.abort(); // a no-op after a complete response; cuts the upstream off otherwise
    let fields = |outcome: &str| json!({"upstream": upstream, "outcome": outcome});
    match outcome {
        Ok(PumpEnd::Complete) => {
            log("info", "pump_finished", &shell.stream_id, fields("complete"));
            shell.feed(|s, now| s.close(now));
        }
        Ok(PumpEnd::Cancelled) => {
            log("info", "pump_finished", &shell.stream_id, fields("cancelled"));
            shell.feed(|s, now| s.close(now));
        }
        Ok(PumpEnd::StreamEnded) => log("info", "pump_finished", &shell.stream_id, fields("stream already ended")),
        Err(error) => {
            log("warn", "pump_failed", &shell.stream_id, json!({"upstream": upstream, "error": error}));
            shell.feed(|s, now| s.fail(&error, now));
        }
    }
}

async fn relay(shell: &Rc<Shell>, mut pump: Pump, request: Request, controller: &AbortController) -> Result<PumpEnd, String> {
    let mut cancelled = shell.watch_cancel();
    let signal = controller.signal();
    let fetch = Fetch::Request(request);
    let response = match select(Box::pin(fetch.send_with_signal(&signal)), &mut cancelled).await {
        Either::Left((response, _)) => response.map_err(|e| format!("the upstream request failed: {e}"))?,
        Either::Right(_) => return Ok(PumpEnd::Cancelled),
    };
    let mut response = response;
    let status = response.status_code();
    if !(200..300).contains(&status) {
        let body = response.text().await.unwrap_or_default();
        let snippet: String = body.chars().take(300).collect();
        return Err(format!("the upstream answered HTTP {status}: {snippet}"));
    }
    let bytes = response.stream().map_err(|e| format!("the upstream sent no body: {e}"))?;
    let mut events = Box::pin(bytes.eventsource());
    loop {
        if shell.inspect(LiveStream::cancelled).unwrap_or(false) {
            return Ok(PumpEnd::Cancelled);
        }
        let step = match select(events.next(), &mut cancelled).await {
            Either::Right(_) => return Ok(PumpEnd::Cancelled),
            Either::Left((None, _)) => pump.handle_body_end(),
            Either::Left((Some(Err(e)), _)) => return Err(format!("the upstream stream failed: {e}")),
            Either::Left((Some(Ok(event)), _)) => pump.handle_event(&event.event, &event.data),
        };
        let push = pump.take_push();
        if !push.is_empty() {
            match shell.feed(|s, now| s.push(&push, now)) {
                Some(Ok(receipt)) if receipt.cancelled => return Ok(PumpEnd::Cancelled),
                Some(Ok(_)) => {}
                Some(Err(PushError::Closed)) | Some(Err(PushError::NotOpen)) | None => return Ok(PumpEnd::StreamEnded),
                Some(Err(e @ (PushError::BadChunk { .. } | PushError::NotUi))) => {
                    return Err(format!("the stream refused the pumped text: {e}"))
                }
            }
        }
        match step {
            PumpStep::Continue => {}
            PumpStep::Complete => return Ok(PumpEnd::Complete),
            PumpStep::Failed(failure) => return Err(failure.to_string()),
        }
    }
}
