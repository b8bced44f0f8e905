//! `GET /ui` (SPEC §9): a `ui` stream as the AI SDK's UI message stream, live from the stream
//! held here or, once it retired, from its durable text; and the stream's format, kept in the
//! object's storage so that it is known after the stream retired from memory.

use super::http::{self, unavailable};
use super::object::{Object, StreamObject};
use super::shell::log;
use super::sse;
use crate::engine::api::{ApiError, Route};
use crate::engine::frame::EndStatus;
use crate::engine::live::{Dialect, LiveStream};
use crate::engine::ui::{self, Format};
use serde_json::json;
use std::rc::Rc;
use worker::{Request, Response};

/// The storage key of the stream's format.
const FORMAT_KEY: &str = "format";

impl StreamObject {
    /// Remembers the format of the stream opening here. A failure is logged: the live stream
    /// still knows its format, only a read after it retired would not.
    pub(super) async fn remember_format(&self, stream_id: &str, format: Format) {
        self.meter.storage(|s| s.puts += 1);
        if let Err(e) = self.state.storage().put(FORMAT_KEY, format.as_str()).await {
            log("error", "format_not_stored", stream_id, json!({"format": format.as_str(), "error": e.to_string()}));
        }
    }

    /// The stream's format: the live stream's, else the one stored at its open; `None` when
    /// this object never opened the stream.
    pub(super) async fn format(&self, o: &Object) -> Result<Option<Format>, ApiError> {
        if let Some(format) = o.shell.inspect(LiveStream::format) {
            return Ok(Some(format));
        }
        self.meter.storage(|s| s.gets += 1);
        let stored = self.state.storage().get::<String>(FORMAT_KEY).await.map_err(ApiError::store_unavailable)?;
        Ok(stored.as_deref().and_then(Format::parse))
    }

    /// `GET /ui`: live, a reader of the `ui` dialect; finished, the durable lines from the join
    /// offset's line start, then the ending if the row is terminal. A row still `streaming` with
    /// no live stream here (the object was lost, the lease has not fired yet) gets its lines and
    /// no `[DONE]`: the client reconnects and finds the ending once the lease sealed the row.
    pub(super) async fn ui(&self, o: &Rc<Object>, req: &Request, target: &http::Target, route: &Route) -> Result<Response, ApiError> {
        match self.format(o).await? {
            Some(Format::Ui) => {}
            Some(other) => return Err(ApiError::wrong_format(&route.stream_id, other)),
            None => return Err(ApiError::no_stream(&route.stream_id)),
        }
        let from = match o.subscribe(Dialect::Ui, req, target) {
            sse::Subscription::Answered(response) => return response,
            sse::Subscription::NoLiveStream { from } => from,
        };
        let durable = o.setup.sink.read_durable(&route.stream_id).await.map_err(ApiError::store_unavailable)?;
        let durable = durable.ok_or_else(|| ApiError::no_row(&route.stream_id))?;
        let ended = EndStatus::parse(&durable.status).map(|status| (status, durable.error.as_deref()));
        let body = format!("{}{}", crate::engine::sse::preamble(o.settings().sse_retry_ms), ui::encode_durable(&durable.text, from, ended));
        Response::from_bytes(body.into_bytes()).map(|r| r.with_headers(sse::headers(Dialect::Ui))).map_err(unavailable)
    }
}
