//! Small helpers for answers and request parts.

use crate::engine::access::api::{self, ApiError};
use crate::engine::text::utf16::Offset;
use serde::Serialize;
use worker::{Headers, Request, Response};

/// A JSON answer.
pub fn json(status: u16, value: &impl Serialize) -> worker::Result<Response> {
    Ok(Response::from_json(value)?.with_status(status))
}

/// The JSON error answer of SPEC §4.
pub fn error(e: &ApiError) -> worker::Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "application/json; charset=utf-8")?;
    if let Some(allow) = e.extra.get("allow").and_then(|v| v.as_str()) {
        headers.set("allow", allow)?;
    }
    Ok(Response::from_bytes(e.body().into_bytes())?.with_status(e.status).with_headers(headers))
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
        let url = req.inner().url();
        let query = url.split_once('?').map_or("", |(_, q)| q.split('#').next().unwrap_or_default()).to_owned();
        Self { path: api::path_of(&url).to_owned(), query }
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

/// The bearer token of a request: `Authorization: Bearer …`, or (where allowed) `?token=`.
pub fn token(req: &Request, target: &Target, query_allowed: bool) -> Option<String> {
    let header = req.headers().get("authorization").ok().flatten();
    if let Some(t) = header.as_deref().and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer "))) {
        return Some(t.trim().to_owned());
    }
    if query_allowed {
        return target.query("token");
    }
    None
}

/// Where a reader joins: `Last-Event-ID` over `?from=` (SPEC §3).
pub fn join_offset(req: &Request, target: &Target) -> Offset {
    let last_event_id = req.headers().get("last-event-id").ok().flatten();
    crate::engine::wire::sse::join_offset(last_event_id.as_deref(), target.query("from").as_deref())
}

/// Every header of a request as (lower-case name, value), for an authorizer.
pub fn header_pairs(req: &Request) -> Vec<(String, String)> {
    req.headers().entries().collect()
}

/// A failure of the runtime itself (not of the input): an honest 503, never a panic.
pub fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(503, "unavailable", format!("the service could not complete the request: {e}"))
}

/// Reads a small JSON body (at most `max` bytes); an empty body is `None`.
pub async fn small_json(req: &mut Request, max: usize, what: &str) -> Result<Option<serde_json::Value>, ApiError> {
    if let Some(len) = req.headers().get("content-length").ok().flatten().and_then(|l| l.parse::<usize>().ok()) {
        if len > max {
            return Err(ApiError::too_large(max));
        }
    }
    let bytes = req.bytes().await.map_err(|e| ApiError::new(400, "bad_request", format!("could not read the body: {e}")))?;
    if bytes.len() > max {
        return Err(ApiError::too_large(max));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|e| ApiError::bad_json(what, e))
}
