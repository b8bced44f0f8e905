//! `GET /ui` (SPEC §9): a `ui` stream as the AI SDK's UI message stream, live from the stream
//! held here or, once it retired, from its durable text; `GET /stream`, the stock AI SDK
//! transport's resume GET over it; and the stream's format, kept in the object's storage so
//! that it is known after the stream retired from memory.

use super::{Object, StreamObject};
use crate::edge::http::{self, unavailable};
use crate::edge::runtime::log;
use crate::edge::sse;
use crate::engine::access::api::{ApiError, Route};
use crate::engine::host::object_storage::FORMAT;
use crate::engine::live::{Dialect, LiveStream};
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, STATUS_STREAMING};
use crate::engine::wire::ui::{self, Format};
use serde_json::json;
use std::rc::Rc;
use std::time::Duration;
use worker::{Request, Response};

/// The response header that tells a `/ui` client the server's `LEASE_MS`: a stream whose
/// object was lost is sealed (and its ending served) within about that long, so the rindle
/// transport waits longer than that before it gives up.
pub const LEASE_HEADER: &str = "x-rindle-lease-ms";

impl StreamObject {
    /// The stream's format: the live stream's, else the row's format column (written at the
    /// open, where one is mapped), else the one stored with the lease's keys; `None` when this
    /// object never opened the stream. `row` is the durable read, when the caller made one.
    pub(crate) async fn format(&self, o: &Object, row: Option<&DurableText>) -> Result<Option<Format>, ApiError> {
        if let Some(format) = o.shell.inspect(LiveStream::format) {
            return Ok(Some(format));
        }
        if let Some(format) = row.and_then(|r| r.format) {
            return Ok(Some(format));
        }
        self.meter.storage(|s| s.gets += 1);
        let stored = self.state.storage().get::<String>(FORMAT).await.map_err(ApiError::store_unavailable)?;
        Ok(stored.as_deref().and_then(Format::parse))
    }

    /// The format of a stream read through `/ui` or `/stream`. A stream this object never opened
    /// whose row is waiting for its open (inserted, not yet `streaming` nor ended: the app
    /// inserts the row, then opens) is waited for, at most `LEASE_MS`, so a reader that comes
    /// between the two (a second tab, a reload) is not turned away. `None`: never opened here.
    /// With it, the row it read, where that is still the row as it stands (no stream is held
    /// here): the durable read a finished stream is served from.
    async fn format_or_await_open(&self, o: &Object, route: &Route) -> Result<(Option<Format>, Option<DurableText>), ApiError> {
        if let Some(format) = o.shell.inspect(LiveStream::format) {
            return Ok((Some(format), None));
        }
        let row = o.setup.read_durable(&route.stream_id).await.map_err(ApiError::store_unavailable)?;
        if let Some(format) = self.format(o, row.as_ref()).await? {
            return Ok((Some(format), row));
        }
        let awaiting_open =
            row.is_some_and(|r| r.seq == Offset::ZERO && r.status != STATUS_STREAMING && EndStatus::parse(&r.status).is_none());
        if !awaiting_open {
            return Ok((None, None));
        }
        let (opened, wait) = futures::channel::oneshot::channel();
        self.awaiting_open.borrow_mut().push(opened);
        log("info", "reader_awaits_open", &route.stream_id, json!({"atMostMs": o.settings().stream.lease_ms}));
        let bound = worker::Delay::from(Duration::from_millis(o.settings().stream.lease_ms.0));
        futures::pin_mut!(bound);
        let _ = futures::future::select(wait, bound).await;
        Ok((self.format(o, None).await?, None))
    }

    /// `GET /ui`: live, a reader of the `ui` dialect; finished, the durable lines from the join
    /// offset's line start, then the ending if the row is terminal. A row still `streaming` with
    /// no live stream here (the object was lost, the lease has not fired yet) gets its lines and
    /// no `[DONE]`: the client reconnects and finds the ending once the lease sealed the row. A
    /// client that already got the ending (`Last-Event-ID: done`) gets 204.
    pub(crate) async fn ui(&self, o: &Rc<Object>, req: &Request, target: &http::Target, route: &Route) -> Result<Response, ApiError> {
        match self.join_ui(o, req, target, route).await? {
            UiJoin::Answered(response) => Ok(response),
            UiJoin::NeverOpened => Err(ApiError::no_stream(&route.stream_id)),
            UiJoin::NoLiveStream { from, row } => {
                let durable = match row {
                    Some(row) => Some(row),
                    None => o.setup.read_durable(&route.stream_id).await.map_err(ApiError::store_unavailable)?,
                };
                let durable = durable.ok_or_else(|| ApiError::no_row(&route.stream_id))?;
                self.durable_ui(o, &durable, from)
            }
        }
    }

    /// `GET /stream`, the resume GET of the stock AI SDK transport (SPEC §9): 204 when no answer
    /// is active here (never opened and not about to be, or ended and retired from memory), else
    /// the `/ui` answer from the join offset: `Last-Event-ID` over `from`, else 0, a full replay
    /// (the stock SDK ignores `id:`, and its `resumeStreamIsReplay` starts the message over). An
    /// answer that ended but still lingers here is served with its ending: a page that learned
    /// of it while it ran and reconnects just after does not miss it.
    pub(crate) async fn resume(&self, o: &Rc<Object>, req: &Request, target: &http::Target, route: &Route) -> Result<Response, ApiError> {
        match self.join_ui(o, req, target, route).await? {
            UiJoin::Answered(response) => Ok(response),
            UiJoin::NeverOpened => no_content(),
            // Not held here: active only while the row is still `streaming` (the object was lost
            // and the lease has not sealed it yet).
            UiJoin::NoLiveStream { from, row } => {
                let row = match row {
                    Some(row) => Some(row),
                    None => o.setup.read_durable(&route.stream_id).await.map_err(ApiError::store_unavailable)?,
                };
                match row {
                    Some(durable) if durable.status == STATUS_STREAMING => self.durable_ui(o, &durable, from),
                    _ => no_content(),
                }
            }
        }
    }

    /// What `/ui` and `/stream` share: 204 for a client that got the ending already, the format
    /// check (waiting for an open about to come), and a live reader when the stream is here.
    async fn join_ui(&self, o: &Rc<Object>, req: &Request, target: &http::Target, route: &Route) -> Result<UiJoin, ApiError> {
        if saw_ending(req) {
            return no_content().map(UiJoin::Answered);
        }
        let (format, row) = self.format_or_await_open(o, route).await?;
        match format {
            Some(Format::Ui) => {}
            Some(other) => return Err(ApiError::wrong_format(&route.stream_id, other)),
            None => return Ok(UiJoin::NeverOpened),
        }
        Ok(match o.subscribe(Dialect::Ui, req, target) {
            super::readers::Subscription::Answered(response) => UiJoin::Answered(with_lease(response, o)?),
            super::readers::Subscription::NoLiveStream { from } => UiJoin::NoLiveStream { from, row },
        })
    }

    /// The `/ui` answer of a stream no live stream holds here, from its durable text.
    fn durable_ui(&self, o: &Object, durable: &crate::engine::text::reading::DurableText, from: Offset) -> Result<Response, ApiError> {
        let ended = EndStatus::parse(&durable.status).map(|status| (status, durable.error.as_deref()));
        let body =
            format!("{}{}", crate::engine::wire::sse::preamble(o.settings().sse_retry_ms), ui::encode_durable(&durable.text, from, ended));
        let response = Response::from_bytes(body.into_bytes()).map(|r| r.with_headers(sse::headers(Dialect::Ui))).map_err(unavailable);
        with_lease(response, o)
    }
}

/// Where a `/ui` or `/stream` request stands once the checks they share are done.
enum UiJoin {
    /// Answered already: 204, or a live reader's SSE.
    Answered(Response),
    /// The stream was never opened here (and no open came while it waited).
    NeverOpened,
    /// No live stream here: read the durable text from `from` (`row`: already read).
    NoLiveStream { from: Offset, row: Option<DurableText> },
}

/// The client got the ending already (an `EventSource` that did not close at `[DONE]`).
fn saw_ending(req: &Request) -> bool {
    ui::saw_ending(req.headers().get("last-event-id").ok().flatten().as_deref())
}

/// 204: nothing to read (an `EventSource` stops reconnecting; the stock AI SDK resumes nothing).
fn no_content() -> Result<Response, ApiError> {
    Response::empty().map(|r| r.with_status(204)).map_err(unavailable)
}

/// A `/ui` answer says the server's `LEASE_MS` ([`LEASE_HEADER`]).
fn with_lease(response: Result<Response, ApiError>, o: &Object) -> Result<Response, ApiError> {
    let mut response = response?;
    let _ = response.headers_mut().set(LEASE_HEADER, &o.settings().stream.lease_ms.0.to_string());
    Ok(response)
}
