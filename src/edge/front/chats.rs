//! Chats, through the message table's mapped chat column (`COLUMNS = {"chat": …}`): the resume
//! GET for a chat (`GET {prefix}/chats/{chat}/stream`, answered by the front Worker), and the
//! chat's feed (`GET {prefix}/chats/{chat}/events`, relayed from its object: `super::relay`).

use crate::edge::http::{self, unavailable};
use crate::edge::runtime::now;
use crate::edge::setup;
use crate::engine::access::api::{ApiError, ChatAction, ChatRoute};
use crate::engine::access::auth::{AuthRequest, Scope};
use crate::engine::durable::Tables;
use crate::engine::host::config::Settings;
use serde_json::json;
use std::rc::Rc;
use worker::{Env, Request, Response};

/// The mapped tables of the database `id` lives in (a chat's, or its answer's: the id names it,
/// SPEC §13), for the chat reads of one request in the front Worker (a connection to Postgres
/// serves one request there: the runtime binds a socket to the request that opened it; Hyperdrive
/// pools the connections to the database); refused when chats are not mapped (or an embedding
/// Worker keeps its checkpoints in a sink of its own).
pub fn tables(env: &Env, settings: &Settings, id: &str) -> Result<Tables, ApiError> {
    setup::chat_tables(env, settings, id)
}

/// `GET {prefix}/chats/{chat}/stream` and `…/events`: authorized for the chat first, here in the
/// front Worker (a denial never tells whether the chat has an answer, and reaches no object).
/// The feed (`events`) is answered by the chat's feed object; the resume GET (`stream`) by the
/// chat's streaming answer's object, as `GET {prefix}/{id}/stream?chat={chat}`; 204 when the
/// chat has none.
pub async fn lookup(req: Request, env: Env, settings: Rc<Settings>, chat: ChatRoute) -> Result<Response, ApiError> {
    let target = http::Target::of(&req);
    let token = http::token(req.headers(), &target, true);
    let authorizer = setup::authorizer(&env, &settings).map_err(ApiError::misconfigured)?;
    let headers = if authorizer.reads_headers() { http::header_pairs(req.headers()) } else { Vec::new() };
    let question = AuthRequest {
        token: token.as_ref().map(|(t, _)| t.as_str()),
        token_in_query: matches!(token, Some((_, http::TokenFrom::Query))),
        stream_id: "",
        chat: Some(&chat.chat_id),
        scope: Scope::Read,
        from: (chat.action == ChatAction::Stream).then(|| http::join_offset(&req, &target)),
        headers: &headers,
        meta: None,
        now_secs: now().0 / 1000,
    };
    let route = if chat.action == ChatAction::Events { "events" } else { "stream" };
    authorizer
        .authorize(&question)
        .await
        .map_err(|denied| crate::edge::gate::denial("", json!({"chat": chat.chat_id, "route": route, "reason": denied.to_string()})))?;
    // The chat's rows are in the database its id names: one that is not configured is refused.
    settings.databases.of_id(&chat.chat_id).map_err(ApiError::unknown_database)?;
    if chat.action == ChatAction::Events {
        let expires_at = authorizer.expires_at(&question).map(|secs| secs.saturating_mul(1000));
        return feed(&req, &env, &settings, &chat.chat_id, expires_at).await;
    }
    let tables = tables(&env, &settings, &chat.chat_id)?;
    let Some(stream_id) = tables.streaming_in_chat(&chat.chat_id).await.map_err(ApiError::store_unavailable)? else {
        return Response::empty().map(|r| r.with_status(204)).map_err(unavailable);
    };
    // The same URL with the stream's path and the chat added (built by hand: see `http::Target`).
    let url = req.inner().url();
    let origin = &url[..url.len() - api_path_and_after(&url).len()];
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.extend_pairs(form_urlencoded::parse(target.raw_query().as_bytes()).filter(|(k, _)| k != crate::edge::gate::CHAT_PARAM));
    query.append_pair(crate::edge::gate::CHAT_PARAM, &chat.chat_id);
    let forwarded = format!("{origin}{}/{stream_id}/stream?{}", settings.path_prefix, query.finish());
    let stub = env
        .durable_object("STREAMS")
        .and_then(|ns| ns.id_from_name(&stream_id)?.get_stub())
        .map_err(|e| ApiError::misconfigured(format!("the STREAMS Durable Object binding: {e}")))?;
    let init = worker::RequestInit { method: req.method(), headers: req.headers().clone(), ..Default::default() };
    let forwarded = Request::new_with_init(&forwarded, &init).map_err(unavailable)?;
    stub.fetch_with_request(forwarded).await.map_err(http::unavailable)
}

/// `GET {prefix}/chats/{chat}/events`, authorized: answered here with SSE, relayed from a
/// socket to the chat's feed object (which sleeps while the tab waits: `super::relay`), until the
/// token's `exp` (Unix ms).
async fn feed(req: &Request, env: &Env, settings: &Settings, chat_id: &str, expires_at: Option<u64>) -> Result<Response, ApiError> {
    let stub = env
        .durable_object(crate::edge::chat::FEEDS_BINDING)
        .and_then(|ns| ns.id_from_name(chat_id)?.get_stub())
        .map_err(|e| ApiError::misconfigured(format!("the {} Durable Object binding: {e}", crate::edge::chat::FEEDS_BINDING)))?;
    let cfg = super::relay::RelayConfig { retry: settings.sse_retry_ms, keepalive: settings.stream.keepalive_ms, expires_at };
    super::relay::relay(req, stub, cfg).await
}

/// The part of an absolute URL from its path on (`/streams/…?…`).
fn api_path_and_after(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    url[after_scheme..].find('/').map_or("", |i| &url[after_scheme + i..])
}
