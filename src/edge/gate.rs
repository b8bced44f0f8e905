//! Authorization (SPEC §4, §12): the question an authorizer is asked about a request, and its
//! verdict as an answer.
//!
//! The front Worker asks before it forwards anything (`super::front`), so a request the
//! authorizer denies is answered there at once, its body cancelled unread, and no Durable Object
//! is reached or created. Only an authorizer that reads the stream's `meta`
//! ([`Authorizer::reads_meta`]) is asked in the stream's object instead, where the meta is. A read
//! made for a chat (`?chat=`, a token's `chat` claim) is also checked to be of an answer of that
//! chat, in the same place.

use crate::edge::http::{self, Target, TokenFrom};
use crate::edge::runtime::{log, now};
use crate::engine::access::api::{ApiError, Route};
use crate::engine::access::auth::{AuthRequest, Authorizer, Denied, Principal, Scope};
use crate::engine::access::memberships::ChatMemberships;
use crate::engine::durable::Tables;
use crate::engine::text::utf16::Offset;
use serde_json::json;
use worker::Headers;

/// The header the front Worker tells a stream's object, on a reader's route, when the reader's
/// token expires (Unix seconds): its connection ends then (SPEC §11). Set or cleared by the
/// front whatever the client sent.
pub const TOKEN_EXPIRES_HEADER: &str = "x-rindle-token-expires";

/// The query parameter that carries the chat of a read to the stream's object.
pub const CHAT_PARAM: &str = "chat";

/// What an authorizer is asked about one request, read from it once.
pub struct Asked {
    token: Option<(String, TokenFrom)>,
    /// The chat a read names (`?chat=`): a chat lookup's, or a token's `chat` claim's.
    chat: Option<String>,
    from: Option<Offset>,
    headers: Vec<(String, String)>,
    now_secs: u64,
}

impl Asked {
    pub fn of(headers: &Headers, target: &Target, route: &Route, authorizer: &dyn Authorizer) -> Result<Self, ApiError> {
        let chat = match target.query(CHAT_PARAM) {
            Some(chat) if route.action.scope() == Scope::Read => {
                crate::engine::access::stream_id::validate(&chat)
                    .map_err(|e| ApiError::new(400, "bad_chat_id", e.to_string().replace("stream id", "chat id")))?;
                Some(chat)
            }
            _ => None,
        };
        Ok(Self {
            token: http::token(headers, target, route.action.token_in_query()),
            chat,
            from: route.action.joins().then(|| http::join_offset_of(headers, target)),
            headers: if authorizer.reads_headers() { http::header_pairs(headers) } else { Vec::new() },
            now_secs: now().0 / 1000,
        })
    }

    /// The question about `route` (with the stream's `meta`, where the object asks).
    pub fn question<'a>(&'a self, route: &'a Route, meta: Option<&'a serde_json::Value>) -> AuthRequest<'a> {
        AuthRequest {
            token: self.token.as_ref().map(|(t, _)| t.as_str()),
            token_in_query: matches!(self.token, Some((_, TokenFrom::Query))),
            stream_id: &route.stream_id,
            chat: self.chat.as_deref(),
            scope: route.action.scope(),
            from: self.from,
            headers: &self.headers,
            meta,
            now_secs: self.now_secs,
        }
    }

    /// The chat this read is made for, which the stream must belong to.
    pub fn chat(&self) -> Option<&str> {
        self.chat.as_deref()
    }
}

/// An authorizer's verdict as an answer: a denial is the same 403 whatever its reason (which
/// goes to the log), so it never tells whether a stream exists.
pub fn verdict(route: &Route, verdict: Result<Principal, Denied>) -> Result<(), ApiError> {
    verdict.map(drop).map_err(|denied| deny(route, &denied))
}

fn deny(route: &Route, denied: &Denied) -> ApiError {
    denial(&route.stream_id, json!({"action": route.action.name(), "reason": denied.to_string()}))
}

/// The 403 every denial answers with, logged (`fields` say what was denied and why): at most one
/// line a second per isolate, saying how many went unlogged since. A flood of denied requests
/// must not become a flood of log events (a denial's line was a third of its CPU in the front
/// Worker: bench/front-auth.mjs, BENCHMARKS.md).
pub fn denial(stream_id: &str, fields: serde_json::Value) -> ApiError {
    let now = now().0;
    let logged = DENIALS.with(|d| {
        let (last, unlogged) = d.get();
        if now.saturating_sub(last) >= DENIAL_LOG_INTERVAL_MS {
            d.set((now, 0));
            Some(unlogged)
        } else {
            d.set((last, unlogged + 1));
            None
        }
    });
    if let Some(unlogged) = logged {
        let mut fields = fields;
        fields["unloggedSince"] = json!(unlogged);
        log("info", "denied", stream_id, fields);
    }
    ApiError::forbidden()
}

/// How often a denial is logged, at most, per isolate.
const DENIAL_LOG_INTERVAL_MS: u64 = 1000;

thread_local! {
    /// When a denial was last logged, and how many were not since.
    static DENIALS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A read made for `chat` must be of an answer of that chat, or it is denied alike.
pub async fn check_chat(tables: impl FnOnce() -> Result<Tables, ApiError>, route: &Route, chat: &str) -> Result<(), ApiError> {
    if belongs(tables, &route.stream_id, chat).await? {
        Ok(())
    } else {
        Err(deny(route, &Denied::NotInChat))
    }
}

/// Asks `authorizer` about `asked`, then checks its chat: the whole gate, for an authorizer
/// that may await (the front Worker asks the JWT check synchronously, see `super::front`).
pub async fn ask(
    authorizer: &dyn Authorizer,
    asked: &Asked,
    route: &Route,
    meta: Option<&serde_json::Value>,
    tables: impl FnOnce() -> Result<Tables, ApiError>,
) -> Result<(), ApiError> {
    // Nothing is borrowed while the authorizer looks (it may await a lookup of its own).
    verdict(route, authorizer.authorize(&asked.question(route, meta)).await)?;
    match asked.chat() {
        Some(chat) => check_chat(tables, route, chat).await,
        None => Ok(()),
    }
}

/// Whether stream `stream_id`'s row belongs to chat `chat_id`: remembered from an earlier read
/// in this isolate ([`ChatMemberships`]), else read (`tables`: only then is the store reached).
async fn belongs(tables: impl FnOnce() -> Result<Tables, ApiError>, stream_id: &str, chat_id: &str) -> Result<bool, ApiError> {
    if MEMBERSHIPS.with(|m| m.borrow_mut().knows(stream_id, chat_id, now())) {
        return Ok(true);
    }
    let chat = tables()?.chat_of(stream_id).await.map_err(ApiError::store_unavailable)?;
    let belongs = chat.as_deref() == Some(chat_id);
    if belongs {
        MEMBERSHIPS.with(|m| m.borrow_mut().remember(stream_id, chat_id, now()));
    }
    Ok(belongs)
}

thread_local! {
    /// The chats of answers this isolate read, so a chat page's repeated reads of one answer
    /// reach the store once (the front Worker cannot keep a connection between requests).
    static MEMBERSHIPS: std::cell::RefCell<ChatMemberships> = std::cell::RefCell::default();
}
