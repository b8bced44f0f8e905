//! Small helpers for answers and request parts.

use crate::engine::access::api::{self, Action, ApiError};
use crate::engine::text::utf16::Offset;
use serde::Serialize;
use wasm_bindgen::JsCast;
use worker::{Headers, Request, Response};

/// A JSON answer.
pub fn json(status: u16, value: &impl Serialize) -> worker::Result<Response> {
    Ok(Response::from_json(value)?.with_status(status))
}

/// The JSON error answer of SPEC §4. An error with a detail (a configuration's fault, a store's
/// error) is logged with it under a fresh request id, and the body carries only the id.
pub fn error(e: &ApiError) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "application/json; charset=utf-8")?;
    if let Some(allow) = e.extra.get("allow").and_then(|v| v.as_str()) {
        headers.set("allow", allow)?;
    }
    let body = match &e.detail {
        None => e.body(),
        Some(detail) => {
            let id = request_id();
            crate::edge::runtime::log(
                "error",
                "request_failed",
                "",
                serde_json::json!({"requestId": id, "error": e.code, "detail": detail}),
            );
            e.clone().with("requestId", id).body()
        }
    };
    Ok(Response::from_bytes(body.into_bytes())?.with_status(e.status).with_headers(headers))
}

/// A request id for the log and the caller: 16 random hex digits.
fn request_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return format!("{:x}", js_sys::Date::now() as u64);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The path and query of a request, read without a URL parser: the runtime hands over a
/// normalised absolute URL, and the `url` crate's parser (with its IDNA tables) would be a
/// fifth of the wasm.
pub struct Target {
    pub path: String,
    query: String,
}

impl Target {
    pub fn of(req: &Request) -> Self {
        Self::parse(&req.inner().url())
    }

    /// The path and query of an absolute URL as the runtime serializes it.
    pub fn parse(url: &str) -> Self {
        let query = url.split_once('?').map_or("", |(_, q)| q.split('#').next().unwrap_or_default()).to_owned();
        Self { path: api::path_of(url).to_owned(), query }
    }

    /// The query string as sent (without `?`).
    pub fn raw_query(&self) -> &str {
        &self.query
    }

    /// The first value of query parameter `name`, percent- and `+`-decoded.
    pub fn query(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
    }
}

/// Where a request's bearer token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFrom {
    Header,
    /// `?token=`: the URL ends up in logs and histories, so only tokens that cannot write pass.
    Query,
}

/// The bearer token of a request: `Authorization: Bearer …`, or (where allowed) `?token=`.
pub fn token(headers: &Headers, target: &Target, query_allowed: bool) -> Option<(String, TokenFrom)> {
    let header = headers.get("authorization").ok().flatten();
    if let Some(t) = header.as_deref().and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer "))) {
        return Some((t.trim().to_owned(), TokenFrom::Header));
    }
    if query_allowed {
        return target.query("token").map(|t| (t, TokenFrom::Query));
    }
    None
}

/// Where a reader joins: `Last-Event-ID` over `?from=` (SPEC §3).
pub fn join_offset(req: &Request, target: &Target) -> Offset {
    join_offset_of(req.headers(), target)
}

pub fn join_offset_of(headers: &Headers, target: &Target) -> Offset {
    let last_event_id = headers.get("last-event-id").ok().flatten();
    crate::engine::wire::sse::join_offset(last_event_id.as_deref(), target.query("from").as_deref())
}

/// Every header of a request as (lower-case name, value), for an authorizer.
pub fn header_pairs(headers: &Headers) -> Vec<(String, String)> {
    headers.entries().collect()
}

/// A failure of the runtime itself (not of the input): an honest 503, never a panic.
pub fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(503, "unavailable", format!("the service could not complete the request: {e}"))
}

/// Reads a request body of at most `max` bytes (`Action::max_body_bytes`) against a running
/// count: at the first byte past the bound (or at once, when a declared `content-length` is
/// past it) nothing more is kept and the request is refused 413; the rest is read and dropped
/// piece by piece (see [`read_bounded`]), so memory stays bounded whatever the client sends.
/// A request without a body reads as empty.
pub async fn read_limited(req: &Request, action: Action, max: usize) -> Result<Vec<u8>, ApiError> {
    let Some(body) = req.inner().body() else { return Ok(Vec::new()) };
    let declared = req.headers().get("content-length").ok().flatten().and_then(|l| l.parse::<u64>().ok());
    let keep = if declared.is_some_and(|n| n > max as u64) { 0 } else { max };
    match read_bounded(body, keep).await {
        Ok(bytes) if keep == max => Ok(bytes),
        Ok(_) | Err(Unread::TooLarge) => Err(ApiError::body_too_large(action, max)),
        Err(Unread::Failed(e)) => Err(ApiError::new(400, "bad_request", format!("could not read the body: {e}"))),
    }
}

/// Why [`read_bounded`] kept no body.
pub enum Unread {
    /// It was longer than what was to be kept.
    TooLarge,
    /// Reading it failed.
    Failed(worker::Error),
}

/// The most of a body read and dropped past what is kept: Cloudflare's own request body limit,
/// so every body the edge lets through is read to its end.
pub const MAX_DISCARDED_BYTES: usize = 100 << 20;

/// Reads `body`, keeping at most `keep` bytes. Past them it keeps nothing more and reads on,
/// dropping each piece, to the body's end (or [`MAX_DISCARDED_BYTES`] more, where it cancels):
/// an answer given while the client is still sending is never delivered through `wrangler
/// dev`'s proxy, which then reloads the runtime (workerd alone answers a cancelled body at
/// once; docs/SECURITY.md, "Answered at once"). The front Worker, which answers a denied
/// request without reading its body at all, never gets here.
pub async fn read_bounded(body: web_sys::ReadableStream, keep: usize) -> Result<Vec<u8>, Unread> {
    let cap = keep.saturating_add(MAX_DISCARDED_BYTES) as f64;
    match wasm_bindgen_futures::JsFuture::from(read_body_bounded(&body, keep as f64, cap)).await {
        Ok(kept) => match kept.dyn_into::<js_sys::Uint8Array>() {
            Ok(bytes) => Ok(bytes.to_vec()),
            Err(_) => Err(Unread::TooLarge),
        },
        Err(e) => Err(Unread::Failed(worker::Error::from(e))),
    }
}

#[wasm_bindgen::prelude::wasm_bindgen(inline_js = r#"
export async function read_body_bounded(body, keep, cap) {
  const PIECE = 65536;
  let reader, buffer = new ArrayBuffer(PIECE);
  try { reader = body.getReader({ mode: 'byob' }); } catch { reader = body.getReader(); buffer = null; }
  let kept = new Uint8Array(Math.min(keep, PIECE)), total = 0;
  for (;;) {
    const { done, value } = buffer ? await reader.read(new Uint8Array(buffer)) : await reader.read();
    if (done) return total > keep ? total : kept.subarray(0, total);
    if (buffer) buffer = value.buffer;
    const at = total;
    total += value.byteLength;
    if (total <= keep) {
      if (total > kept.length) {
        const grown = new Uint8Array(Math.min(keep, Math.max(total, 2 * kept.length)));
        grown.set(kept.subarray(0, at));
        kept = grown;
      }
      kept.set(value, at);
    } else if (total > cap) {
      await reader.cancel().catch(() => {});
      return total;
    }
  }
}
"#)]
extern "C" {
    /// Reads `body` in JavaScript, one 64 KiB buffer reused (a BYOB reader, where the stream
    /// offers one): per piece it makes a view and a result object and nothing in wasm, where
    /// a loop in Rust made a future, closures and copies per piece, and the garbage grew workerd
    /// by megabytes over a 60 MiB body. Resolves with the bytes kept (a `Uint8Array`, at most
    /// `keep`), or, past `keep`, with the total read (a number; cancelled past `cap`).
    fn read_body_bounded(body: &web_sys::ReadableStream, keep: f64, cap: f64) -> js_sys::Promise;
}

/// A small JSON body; an empty (or blank) one is `None`.
pub fn small_json(bytes: &[u8], what: &str) -> Result<Option<serde_json::Value>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(bytes).map(Some).map_err(|e| ApiError::bad_json(what, e))
}
