//! The HTTP API's shape (SPEC §4): routes, and the JSON error every refusal answers with.
//! Pure, so the router's decisions and every error row are tested natively.

use crate::engine::access::auth::Scope;
use crate::engine::access::stream_id::{self, BadStreamId};
use crate::engine::feed::{BadChat, ChatLink};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::ui::Format;
use serde_json::{json, Map, Value};

/// What a request under the prefix asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Open,
    Append,
    Flush,
    Close,
    Fail,
    Events,
    /// `GET /ui`: the AI SDK's UI message stream of a `ui` stream (SPEC §9).
    Ui,
    /// `GET /stream`: the stock AI SDK transport's resume GET (SPEC §9): 204 when no answer is
    /// active here, else `/ui` from the join offset (a full replay for the stock SDK).
    Stream,
    Text,
    Cancel,
    Pump,
    Stats,
    /// `POST /resume`: the producer takes over again after a lost connection or a reset
    /// object (SPEC §10).
    Resume,
    /// `GET /watch`: the producer's watch, answered at a reader's cancel or the stream's end
    /// (or after a hold; the producer asks again), so a cancel reaches a producer in any state.
    Watch,
}

impl Action {
    /// Every route, in declaration order (`action as usize` indexes it).
    pub const ALL: [Action; 14] = [
        Action::Open,
        Action::Append,
        Action::Flush,
        Action::Close,
        Action::Fail,
        Action::Events,
        Action::Ui,
        Action::Stream,
        Action::Text,
        Action::Cancel,
        Action::Pump,
        Action::Stats,
        Action::Resume,
        Action::Watch,
    ];

    /// The route's path segment.
    pub fn name(self) -> &'static str {
        match self {
            Action::Open => "open",
            Action::Append => "append",
            Action::Flush => "flush",
            Action::Close => "close",
            Action::Fail => "fail",
            Action::Events => "events",
            Action::Ui => "ui",
            Action::Stream => "stream",
            Action::Text => "text",
            Action::Cancel => "cancel",
            Action::Pump => "pump",
            Action::Stats => "stats",
            Action::Resume => "resume",
            Action::Watch => "watch",
        }
    }

    fn parse(segment: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == segment)
    }

    /// The one method each route answers.
    pub fn method(self) -> &'static str {
        match self {
            Action::Events | Action::Ui | Action::Stream | Action::Text | Action::Stats | Action::Watch => "GET",
            _ => "POST",
        }
    }

    /// The scope a token needs.
    pub fn scope(self) -> Scope {
        match self {
            Action::Events | Action::Ui | Action::Stream | Action::Text => Scope::Read,
            Action::Cancel => Scope::Cancel,
            _ => Scope::Write,
        }
    }

    /// Reader routes also take the token as `?token=` (EventSource cannot set headers).
    pub fn token_in_query(self) -> bool {
        matches!(self, Action::Events | Action::Ui | Action::Stream | Action::Text)
    }

    /// Routes that read from a join offset (`Last-Event-ID` over `?from=`).
    pub fn joins(self) -> bool {
        matches!(self, Action::Events | Action::Ui | Action::Stream)
    }

    /// The most of a request body this route reads; past it the read stops at once (a running
    /// count, never a read to the end) and the request is refused 413. An append's bound is
    /// `MAX_APPEND_BYTES` (`max_append_bytes`); the other routes carry at most a small JSON
    /// object, or nothing at all (a body sent to those is read against the same bound and
    /// ignored).
    pub fn max_body_bytes(self, max_append_bytes: usize) -> usize {
        match self {
            Action::Append => max_append_bytes,
            Action::Open => MAX_OPEN_BODY_BYTES,
            Action::Pump => MAX_PUMP_BODY_BYTES,
            _ => MAX_SMALL_BODY_BYTES,
        }
    }

    /// When this request, reaching an object that holds no stream, rebuilds the one it lost
    /// (SPEC §10).
    pub fn rebuild(self) -> Rebuild {
        match self {
            Action::Open | Action::Text | Action::Stats => Rebuild::Never,
            Action::Cancel => Rebuild::AfterItsWrite,
            _ => Rebuild::First,
        }
    }
}

/// When a request to an object that holds no stream rebuilds the one it lost ([`Action::rebuild`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuild {
    /// Never: an open starts a stream of its own, `/text` reads the store anyway, `/stats` only
    /// looks.
    Never,
    /// Before the request is served; a rebuild that fails answers 503 (the next request, or the
    /// lease, tries again).
    First,
    /// After the request's own write to the row, and a rebuild that fails does not fail it: a
    /// cancel records the row's flag first, so the Stop is kept even when the object cannot be
    /// rebuilt now, and every rebuild reads it (the stream seals `cancelled`).
    AfterItsWrite,
}

/// The largest body of `fail` and the routes that take none (a 64 KiB error message is far
/// more than one needs).
pub const MAX_SMALL_BODY_BYTES: usize = 64 << 10;

/// The largest open body: room for a chat's user message (at most 64 KiB, refused with 400
/// `bad_user_message` past that, and more as escaped JSON) and a `meta`.
pub const MAX_OPEN_BODY_BYTES: usize = 1 << 20;

/// The largest pump body: the upstream URL, its headers and the model request, which carries
/// the conversation so far (1 MiB: some 250,000 tokens of history, beyond every model's context).
pub const MAX_PUMP_BODY_BYTES: usize = 1 << 20;

/// A routed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub stream_id: String,
    pub action: Action,
}

/// Resolves `method path` under `prefix`. `Ok(None)`: the path is not under the prefix.
/// The path is taken as sent (percent-encoded), so `%00` or `%2F` in an id is refused as the
/// characters `%`, not decoded into a NUL or a slash. The one exception is `%3A`, read as `:`:
/// the only id character `encodeURIComponent` encodes (every client of ours builds its paths
/// with it), and the separator of a database-prefixed id (`eu:answer-1`, docs/LOAD.md).
pub fn route(prefix: &str, method: &str, path: &str) -> Result<Option<Route>, ApiError> {
    let Some(route) = parse_path(prefix, path)? else { return Ok(None) };
    let allowed = route.action.method();
    if method != allowed && !(method == "HEAD" && allowed == "GET") {
        return Err(ApiError::method_not_allowed(method, allowed));
    }
    Ok(Some(route))
}

/// The one method a path answers, whatever the request's (a preflight asks about it with
/// `OPTIONS`); `None` when no route is there.
pub fn route_method(prefix: &str, path: &str) -> Option<&'static str> {
    parse_path(prefix, path).ok().flatten().map(|route| route.action.method())
}

fn parse_path(prefix: &str, path: &str) -> Result<Option<Route>, ApiError> {
    let Some(rest) = path.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) else { return Ok(None) };
    let (id, action) = rest.rsplit_once('/').ok_or_else(|| ApiError::not_found(path))?;
    let action = Action::parse(action).ok_or_else(|| ApiError::not_found(path))?;
    let id = with_colons_decoded(id);
    stream_id::validate(&id).map_err(ApiError::bad_stream_id)?;
    Ok(Some(Route { stream_id: id, action }))
}

/// A path segment with `%3A` (either case) read as `:`, and nothing else decoded: the rest of
/// a percent sign still meets the id check's refusal.
fn with_colons_decoded(segment: &str) -> String {
    segment.replace("%3A", ":").replace("%3a", ":")
}

/// A route of a chat (`GET {prefix}/chats/{chat}/…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRoute {
    pub chat_id: String,
    pub action: ChatAction,
}

/// What a chat route asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatAction {
    /// `…/stream`: the resume GET for a chat, answered with the chat's streaming answer (found
    /// through the mapped chat column), or 204.
    Stream,
    /// `…/events`: the chat's feed (SPEC §11), answered by the chat's own object.
    Events,
}

/// The path segment of chat lookups, under the prefix.
pub const CHATS: &str = "chats";

/// Resolves a chat route. `Ok(None)`: the path is not one (any other route, or not ours). A
/// chat id follows the stream id rules.
pub fn chat_route(prefix: &str, method: &str, path: &str) -> Result<Option<ChatRoute>, ApiError> {
    let Some(rest) = path.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')).and_then(|r| r.strip_prefix(CHATS)) else {
        return Ok(None);
    };
    let Some(rest) = rest.strip_prefix('/') else { return Ok(None) };
    let (chat_id, action) = match (rest.strip_suffix("/stream"), rest.strip_suffix("/events")) {
        (Some(chat_id), _) => (chat_id, ChatAction::Stream),
        (_, Some(chat_id)) => (chat_id, ChatAction::Events),
        _ => return Ok(None),
    };
    let chat_id = with_colons_decoded(chat_id);
    stream_id::validate(&chat_id).map_err(|e| ApiError::new(400, "bad_chat_id", e.to_string().replace("stream id", "chat id")))?;
    if method != "GET" && method != "HEAD" {
        return Err(ApiError::method_not_allowed(method, "GET"));
    }
    Ok(Some(ChatRoute { chat_id, action }))
}

/// What `POST open` asks for: `{"format"?: "text" | "ui", "meta"?: …, "chat"?: {"id", "userMessage"?}}`
/// (SPEC §4, §9, §11).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRequest {
    pub format: Format,
    pub meta: Option<Value>,
    /// The chat the answer belongs to, whose feed announces it (SPEC §11).
    pub chat: Option<ChatLink>,
}

impl OpenRequest {
    /// Reads the open body (`None`: no body). A missing `format` is `text`.
    pub fn parse(body: Option<Value>) -> Result<Self, ApiError> {
        let mut fields = match body {
            None => return Ok(Self { format: Format::Text, meta: None, chat: None }),
            Some(Value::Object(fields)) => fields,
            Some(_) => return Err(ApiError::bad_json("the open body", "expected a JSON object like {\"format\": \"ui\", \"meta\": …}")),
        };
        let format = match fields.remove("format") {
            None | Some(Value::Null) => Format::Text,
            Some(v) => v.as_str().and_then(Format::parse).ok_or_else(|| ApiError::bad_format(&v))?,
        };
        let chat = match fields.remove("chat") {
            None | Some(Value::Null) => None,
            Some(chat) => Some(ChatLink::parse(chat).map_err(|e| ApiError::bad_chat(&e))?),
        };
        Ok(Self { format, meta: fields.remove("meta"), chat })
    }
}

/// An answer that is not a success: a status, a machine code, a sentence, and any extra fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub extra: Map<String, Value>,
    /// What went wrong inside (a configuration's fault, a store's error), for the operator's
    /// log only: never in the body. The shell logs it under a request id, which the body
    /// carries (`requestId`), so a caller can quote it and an operator find it.
    pub detail: Option<String>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), extra: Map::new(), detail: None }
    }

    /// An error whose detail goes to the log: the body says only `message` and the request id.
    pub fn internal(status: u16, code: &'static str, message: &str, detail: impl std::fmt::Display) -> Self {
        Self { detail: Some(detail.to_string()), ..Self::new(status, code, message) }
    }

    /// Adds a field beside `error` and `message` (e.g. `seq`, `durableSeq`).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// The JSON body: `{"error": code, "message": sentence, ...extra}`.
    pub fn body(&self) -> String {
        let mut obj = Map::new();
        obj.insert("error".into(), json!(self.code));
        obj.insert("message".into(), json!(self.message));
        obj.extend(self.extra.clone());
        Value::Object(obj).to_string()
    }

    /// The same body for every denial, so a 403 never tells whether a stream exists.
    pub fn forbidden() -> Self {
        Self::new(403, "forbidden", "the token does not allow this request")
    }

    pub fn not_found(path: &str) -> Self {
        Self::new(404, "not_found", format!("no route for {path:?}"))
    }

    pub fn method_not_allowed(method: &str, allowed: &str) -> Self {
        Self::new(405, "method_not_allowed", format!("{method} is not allowed here; use {allowed}")).with("allow", allowed)
    }

    pub fn bad_stream_id(e: BadStreamId) -> Self {
        Self::new(400, "bad_stream_id", e.to_string())
    }

    pub fn not_open(stream_id: &str) -> Self {
        Self::new(404, "not_open", format!("stream {stream_id} is not open here; open it first"))
    }

    pub fn closed(stream_id: &str) -> Self {
        Self::new(409, "closed", format!("stream {stream_id} is closed"))
    }

    /// A resume of a sealed stream: 409 `closed` naming its status (SPEC §10).
    pub fn closed_as(stream_id: &str, status: &str, seq: Offset, durable_seq: Offset) -> Self {
        Self::new(409, "closed", format!("stream {stream_id} is {status}"))
            .with("status", status)
            .with("seq", seq)
            .with("durableSeq", durable_seq)
    }

    /// A write from a producer connection a resume replaced.
    pub fn superseded(stream_id: &str, current: u64) -> Self {
        Self::new(
            409,
            "superseded",
            format!("a newer producer of stream {stream_id} resumed it (epoch {current}); this connection is fenced"),
        )
        .with("epoch", current)
    }

    /// A write to a rehydrated stream before its producer resumed.
    pub fn resume_required(stream_id: &str, seq: Offset, durable_seq: Offset) -> Self {
        Self::new(409, "resume_required", format!("stream {stream_id} was rehydrated after a reset; POST resume, then continue from seq"))
            .with("seq", seq)
            .with("durableSeq", durable_seq)
    }

    /// A producer's write or resume while the object's pump is the stream's producer (a
    /// second pump too).
    pub fn pump_running(stream_id: &str) -> Self {
        Self::new(409, "pump_running", format!("stream {stream_id} is pumping an upstream: its pump is the producer until it ends"))
    }

    /// An `x-rindle-epoch` header that is not a decimal number.
    pub fn bad_epoch(raw: &str) -> Self {
        Self::new(400, "bad_epoch", format!("x-rindle-epoch {raw:?} is not a decimal number"))
    }

    pub fn too_large(max_bytes: usize) -> Self {
        Self::new(413, "too_large", format!("an append may carry at most {max_bytes} bytes")).with("maxBytes", max_bytes)
    }

    /// A reader past `MAX_READERS` on one stream: retry once a reader has left.
    pub fn too_many_readers(stream_id: &str, max: usize) -> Self {
        Self::new(
            429,
            "too_many_readers",
            format!("stream {stream_id} has {max} readers, the most it takes (MAX_READERS); try again later"),
        )
        .with("maxReaders", max)
    }

    /// A chat's feed already has `max` readers (`FEED_MAX_READERS`).
    pub fn too_many_feed_readers(chat_id: &str, max: usize) -> Self {
        Self::new(
            429,
            "too_many_readers",
            format!("chat {chat_id} has {max} feed readers, the most it takes (FEED_MAX_READERS); try again later"),
        )
        .with("maxReaders", max)
    }

    /// A push past `MAX_STREAM_BYTES`: refused whole, and the stream ends `error` with the text
    /// it has (`seq`; `durableSeq` is what is saved so far, the seal saves the rest).
    pub fn stream_too_large(stream_id: &str, max: usize, seq: Offset, durable_seq: Offset) -> Self {
        Self::new(
            413,
            "stream_too_large",
            format!("stream {stream_id} may hold at most {max} bytes of text (MAX_STREAM_BYTES): it ends `error` with the text it has"),
        )
        .with("maxBytes", max)
        .with("seq", seq)
        .with("durableSeq", durable_seq)
    }

    /// A body past its route's bound ([`Action::max_body_bytes`]).
    pub fn body_too_large(action: Action, max_bytes: usize) -> Self {
        match action {
            Action::Append => Self::too_large(max_bytes),
            _ => Self::new(413, "too_large", format!("the {} body may carry at most {max_bytes} bytes", action.name()))
                .with("maxBytes", max_bytes),
        }
    }

    pub fn bad_utf8(e: crate::engine::text::utf8::BadUtf8) -> Self {
        Self::new(400, "bad_utf8", e.to_string())
    }

    /// Text the configured store could never hold: U+0000 in PostgreSQL's `text` (its every
    /// checkpoint would fail whole). Refused before it is pushed.
    pub fn bad_text() -> Self {
        Self::new(400, "bad_text", "the text holds U+0000, which PostgreSQL's text columns cannot store")
    }

    /// A line of a `ui` stream that is not a UI message chunk (SPEC §9), at UTF-16 `offset`.
    /// The field at fault is named in `field` where there is one (`type`, `delta`,
    /// `providerMetadata.openai`).
    pub fn bad_chunk(bad: &crate::engine::wire::ui::BadChunk) -> Self {
        let e = Self::new(400, "bad_chunk", bad.to_string()).with("offset", bad.offset);
        match bad.fault.field() {
            Some(field) => e.with("field", field),
            None => e,
        }
    }

    /// An open asked for a format other than `text` or `ui`.
    pub fn bad_format(found: &serde_json::Value) -> Self {
        Self::new(400, "bad_format", format!("the open body's \"format\" must be \"text\" or \"ui\", not {found}"))
    }

    /// `/ui` on a stream whose text is not NDJSON.
    pub fn wrong_format(stream_id: &str, format: crate::engine::wire::ui::Format) -> Self {
        Self::new(409, "wrong_format", format!("stream {stream_id} is a {} stream; /ui serves only ui streams", format.as_str()))
            .with("format", format.as_str())
    }

    /// A read of a stream this object never opened (so its format is unknown).
    pub fn no_stream(stream_id: &str) -> Self {
        Self::new(404, "no_stream", format!("stream {stream_id} was never opened"))
    }

    pub fn bad_json(what: &str, e: impl std::fmt::Display) -> Self {
        Self::new(400, "bad_json", format!("{what}: {e}"))
    }

    pub fn open_refused(stream_id: &str, reason: impl std::fmt::Display) -> Self {
        Self::new(409, "open_refused", format!("stream {stream_id}: {reason}"))
    }

    pub fn checkpoint_failed(seq: Offset, durable_seq: Offset, reason: impl std::fmt::Display) -> Self {
        Self::internal(503, "checkpoint_failed", "the checkpoint could not be committed; its cause is logged under requestId", reason)
            .with("seq", seq)
            .with("durableSeq", durable_seq)
    }

    /// A seal that could not commit: the stream still ended, `durableSeq` says what was saved.
    pub fn seal_failed(status: &str, seq: Offset, durable_seq: Offset, reason: impl std::fmt::Display) -> Self {
        Self::internal(503, "seal_failed", "the seal could not be committed; its cause is logged under requestId", reason)
            .with("status", status)
            .with("seq", seq)
            .with("durableSeq", durable_seq)
    }

    pub fn no_row(stream_id: &str) -> Self {
        Self::new(404, "no_row", format!("no message row for stream {stream_id}"))
    }

    pub fn store_unavailable(e: impl std::fmt::Display) -> Self {
        Self::internal(503, "store_unavailable", "the store could not complete the request; its error is logged under requestId", e)
    }

    /// A configuration the service refuses to run with: which setting is said only in the log
    /// (a caller, authorized or not, learns nothing of the deployment).
    pub fn misconfigured(e: impl std::fmt::Display) -> Self {
        Self::internal(500, "misconfigured", "the service is misconfigured; the setting to fix is logged under requestId", e)
    }

    pub fn bad_upstream(e: impl std::fmt::Display) -> Self {
        Self::new(400, "bad_upstream", e.to_string())
    }

    /// An open's `chat` that is refused: nothing is opened, nothing announced.
    pub fn bad_chat(e: &BadChat) -> Self {
        match e {
            BadChat::NotAnObject => Self::new(400, "bad_chat", e.to_string()),
            BadChat::BadId(_) => Self::new(400, "bad_chat_id", e.to_string()),
            BadChat::BadUserMessage(_) => Self::new(400, "bad_user_message", e.to_string()),
            BadChat::UserMessageTooLarge { .. } => {
                Self::new(400, "bad_user_message", e.to_string()).with("maxBytes", crate::engine::feed::MAX_USER_MESSAGE_BYTES)
            }
        }
    }

    /// An open naming a chat its row does not belong to.
    pub fn chat_mismatch(stream_id: &str) -> Self {
        Self::new(409, "open_refused", format!("stream {stream_id}: its row belongs to another chat than the open's chat.id"))
    }

    /// A chat lookup on a deployment that maps no chat column.
    /// An id naming a database `DATABASES` does not configure (SPEC §13).
    pub fn unknown_database(e: crate::engine::durable::UnknownDatabase) -> Self {
        Self::new(400, "unknown_database", format!("{e} (DATABASES): an id's prefix before ':' names its database"))
    }

    pub fn no_chat_column() -> Self {
        Self::new(404, "no_chat_column", "chat lookups need the message table's chat column mapped: COLUMNS = {\"chat\": \"<column>\"}")
    }
}

/// The path of an absolute URL as the runtime serializes it (`scheme://host/path?query#hash`,
/// where the path is never empty and a `?` or `#` inside it is percent-encoded), still
/// percent-encoded: what [`route`] takes. Read without a URL parser: the `url` crate's (with
/// its IDNA tables) would be a fifth of the wasm.
pub fn path_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let Some(start) = url[after_scheme..].find('/').map(|i| after_scheme + i) else { return "/" };
    let end = url[start..].find(['?', '#']).map_or(url.len(), |i| start + i);
    &url[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: &str, path: &str) -> Result<Option<Route>, ApiError> {
        route("/streams", method, path)
    }

    #[test]
    fn every_route_resolves_with_its_method() {
        for (method, action, expected) in [
            ("POST", "open", Action::Open),
            ("POST", "append", Action::Append),
            ("POST", "flush", Action::Flush),
            ("POST", "close", Action::Close),
            ("POST", "fail", Action::Fail),
            ("GET", "events", Action::Events),
            ("GET", "ui", Action::Ui),
            ("GET", "stream", Action::Stream),
            ("GET", "text", Action::Text),
            ("POST", "cancel", Action::Cancel),
            ("POST", "pump", Action::Pump),
            ("GET", "stats", Action::Stats),
            ("POST", "resume", Action::Resume),
            ("GET", "watch", Action::Watch),
        ] {
            let got = r(method, &format!("/streams/m-1/{action}")).unwrap().unwrap();
            assert_eq!(got, Route { stream_id: "m-1".into(), action: expected });
        }
    }

    #[test]
    fn the_path_is_read_from_a_serialized_url_as_it_is() {
        assert_eq!(path_of("http://127.0.0.1:8787/streams/m-1/events?from=3&token=a.b#x"), "/streams/m-1/events");
        assert_eq!(path_of("https://example.com/streams/a%2Fb/open"), "/streams/a%2Fb/open", "still percent-encoded");
        assert_eq!(path_of("https://example.com/"), "/");
        assert_eq!(path_of("https://example.com"), "/");
        assert_eq!(path_of("https://example.com?x=1"), "/");
        assert_eq!(path_of("https://example.com/a#frag"), "/a");
    }

    #[test]
    fn a_chat_lookup_is_its_own_route_and_every_other_path_is_not_one() {
        let chat = |m: &str, p: &str| chat_route("/streams", m, p);
        assert_eq!(chat("GET", "/streams/chats/c-1/stream"), Ok(Some(ChatRoute { chat_id: "c-1".into(), action: ChatAction::Stream })));
        assert_eq!(chat("GET", "/streams/chats/c-1/events"), Ok(Some(ChatRoute { chat_id: "c-1".into(), action: ChatAction::Events })));
        assert_eq!(chat("POST", "/streams/chats/c-1/events").unwrap_err().status, 405);
        assert_eq!(chat("GET", "/streams/chats/a%2Fb/events").unwrap_err().code, "bad_chat_id");
        assert_eq!(chat("OPTIONS", "/streams/chats/c-1/stream").unwrap_err().status, 405, "a preflight is the front's CORS");
        assert_eq!(chat("POST", "/streams/chats/c-1/stream").unwrap_err().status, 405);
        assert_eq!(chat("GET", "/streams/chats/a%2Fb/stream").unwrap_err().code, "bad_chat_id");
        for other in
            ["/streams/chats/stream", "/streams/chats/c1/ui", "/streams/m1/stream", "/streams/chatsx/c1/stream", "/other/chats/c1/stream"]
        {
            assert_eq!(chat("GET", other), Ok(None), "{other}");
        }
        assert_eq!(r("GET", "/streams/chats/stream").unwrap().unwrap().stream_id, "chats", "a stream may be named chats");
    }

    #[test]
    fn paths_outside_the_prefix_are_not_ours() {
        assert_eq!(r("GET", "/"), Ok(None));
        assert_eq!(r("GET", "/streamsX/m1/events"), Ok(None));
    }

    #[test]
    fn bad_paths_get_4xx_json() {
        assert_eq!(r("GET", "/streams/m1/open").unwrap_err().status, 405);
        assert_eq!(r("POST", "/streams/m1/nope").unwrap_err().status, 404);
        assert_eq!(r("POST", "/streams/m1").unwrap_err().status, 404);
        for id in ["a%00b", "a%2Fb", "..", "a%0D%0Ab", "", "x'--"] {
            let e = r("POST", &format!("/streams/{id}/open")).unwrap_err();
            assert_eq!((e.status, e.code), (400, "bad_stream_id"), "{id:?}");
        }
        assert_eq!(r("POST", "/streams/a/b/open").unwrap_err().code, "bad_stream_id");
    }

    #[test]
    fn an_encoded_colon_is_a_colon_and_no_other_escape_is_decoded() {
        for path in ["/streams/eu:a-1/open", "/streams/eu%3Aa-1/open", "/streams/eu%3aa-1/open"] {
            assert_eq!(r("POST", path).unwrap().unwrap().stream_id, "eu:a-1", "{path}");
        }
        assert_eq!(chat_route("/streams", "GET", "/streams/chats/eu%3Ac-1/stream").unwrap().unwrap().chat_id, "eu:c-1");
        for id in ["eu%253Aa", "a%3A%2Fb", "a%2F%3Ab"] {
            assert_eq!(r("POST", &format!("/streams/{id}/open")).unwrap_err().code, "bad_stream_id", "{id}");
        }
    }

    #[test]
    fn an_open_body_names_the_format_and_anything_but_text_or_ui_is_refused() {
        let parse = |v: Option<Value>| OpenRequest::parse(v);
        assert_eq!(parse(None), Ok(OpenRequest { format: Format::Text, meta: None, chat: None }));
        assert_eq!(
            parse(Some(json!({"meta": {"a": 1}}))),
            Ok(OpenRequest { format: Format::Text, meta: Some(json!({"a": 1})), chat: None })
        );
        assert_eq!(parse(Some(json!({"format": "ui"}))), Ok(OpenRequest { format: Format::Ui, meta: None, chat: None }));
        assert_eq!(parse(Some(json!({"format": null, "meta": 2}))).unwrap().format, Format::Text);
        for bad in [json!("UI"), json!("xml"), json!(""), json!(7), json!(["ui"]), json!({"ui": true})] {
            let e = parse(Some(json!({ "format": bad }))).unwrap_err();
            assert_eq!((e.status, e.code), (400, "bad_format"), "{bad}");
        }
        assert_eq!(parse(Some(json!([1]))).unwrap_err().code, "bad_json");
    }

    #[test]
    fn an_open_may_name_its_chat_and_a_bad_chat_or_user_message_is_a_400() {
        let parse = |v: Value| OpenRequest::parse(Some(v));
        let user = json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]});
        let open = parse(json!({"format": "ui", "chat": {"id": "c-1", "userMessage": user}})).unwrap();
        let chat = open.chat.unwrap();
        assert_eq!((chat.chat_id.as_str(), chat.user_message.unwrap().id()), ("c-1", "u1"));
        assert_eq!(parse(json!({"chat": null})).unwrap().chat, None);
        for (body, code) in [
            (json!({"chat": "c-1"}), "bad_chat"),
            (json!({"chat": {"id": "a/b"}}), "bad_chat_id"),
            (json!({"chat": {"id": "c", "userMessage": {"id": "u", "role": "user", "parts": []}}}), "bad_user_message"),
            (
                json!({"chat": {"id": "c", "userMessage": {"id": "u", "role": "user", "parts": [{"type": "text", "text": "x".repeat(70_000)}]}}}),
                "bad_user_message",
            ),
        ] {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!((e.status, e.code), (400, code), "{}", e.message);
        }
    }

    /// A cancel is recorded on the row before the object tries to rebuild its stream: a rebuild
    /// that fails must not lose the Stop (it answered 503 before setting the flag).
    #[test]
    fn a_cancel_records_its_flag_before_the_rebuild_and_only_reads_and_writes_rebuild_first() {
        assert_eq!(Action::Cancel.rebuild(), Rebuild::AfterItsWrite);
        for action in [Action::Open, Action::Text, Action::Stats] {
            assert_eq!(action.rebuild(), Rebuild::Never, "{action:?}");
        }
        let first = Action::ALL.iter().filter(|a| a.rebuild() == Rebuild::First).count();
        assert_eq!(first, Action::ALL.len() - 4, "every other route");
    }

    #[test]
    fn every_route_reads_a_bounded_body() {
        for action in Action::ALL {
            let max = action.max_body_bytes(1 << 20);
            assert!((1..=1 << 20).contains(&max), "{action:?}: {max}");
            let e = ApiError::body_too_large(action, max);
            assert_eq!((e.status, e.code, e.extra["maxBytes"].as_u64()), (413, "too_large", Some(max as u64)), "{action:?}");
        }
        assert_eq!(Action::Append.max_body_bytes(7), 7, "MAX_APPEND_BYTES");
        assert_eq!(Action::Open.max_body_bytes(7), 1 << 20, "a chat's user message and a meta");
        assert_eq!(Action::Fail.max_body_bytes(7), 65_536);
        assert_eq!(ApiError::body_too_large(Action::Fail, 65_536).message, "the fail body may carry at most 65536 bytes");
    }

    #[test]
    fn the_error_body_has_the_specs_shape() {
        let e = ApiError::open_refused("m1", "no row");
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v, json!({"error": "open_refused", "message": "stream m1: no row"}));
    }

    #[test]
    fn configuration_and_store_errors_keep_their_detail_out_of_the_body() {
        for e in [
            ApiError::misconfigured("configuration PUMP_SECRETS: names KEY, which is not set"),
            ApiError::store_unavailable("42703: column \"secret_col\" does not exist"),
            ApiError::checkpoint_failed(Offset(9), Offset(4), "SQLSTATE 57014: canceling statement"),
            ApiError::seal_failed("complete", Offset(9), Offset(4), "SQLSTATE 57014: canceling statement"),
        ] {
            let body = e.body();
            let detail = e.detail.as_deref().unwrap();
            assert!(
                !body.contains(detail) && !body.contains("SQLSTATE") && !body.contains("secret_col") && !body.contains("PUMP_SECRETS"),
                "{body}"
            );
            assert!(e.message.ends_with("logged under requestId"), "{}", e.message);
        }
        let v: Value = serde_json::from_str(&ApiError::checkpoint_failed(Offset(9), Offset(4), "x").body()).unwrap();
        assert_eq!((v["seq"].as_u64(), v["durableSeq"].as_u64()), (Some(9), Some(4)), "what the caller needs stays");
    }
}
