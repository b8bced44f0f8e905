//! Development-only endpoints (the `dev` feature: absent from the production build), answered
//! only when `DEV_MODE=1`: `POST /dev/session` creates a message row and mints tokens for the
//! demo page; `GET /dev/feed-stats?chat=` answers what a chat's feed object did (its requests,
//! storage and row reads, awake time: bench/cost.mjs); `GET /dev/objects` counts the stream
//! objects this isolate constructed (the proof that a denied request creates none:
//! `tests/e2e/hostile.test.mjs`).

use crate::edge::http::{self, unavailable};
use crate::edge::setup::{dev_mode, var};
use crate::engine::access::api::ApiError;
use crate::engine::durable::{Statement, Value};
use crate::engine::host::store::OpKind;
use serde_json::json;
use worker::{Env, Request, Response};

thread_local! {
    /// Stream objects constructed in this isolate (the local runtime runs the front Worker and
    /// its objects in one isolate).
    static OBJECTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A stream object was constructed.
pub fn object_constructed() {
    OBJECTS.with(|n| n.set(n.get() + 1));
}

/// How long a development token lives.
const DEV_TOKEN_SECS: u64 = 3600;

pub async fn handle(req: Request, env: &Env) -> Result<Response, ApiError> {
    let path = req.path();
    if !dev_mode(env) {
        return Err(ApiError::not_found(&path));
    }
    match (req.method().as_ref(), path.as_str()) {
        ("POST", "/dev/session") => session(env).await,
        (_, "/dev/session") => Err(ApiError::method_not_allowed(req.method().as_ref(), "POST")),
        ("GET", "/dev/feed-stats") => feed_stats(&req, env).await,
        ("GET", "/dev/objects") => http::json(200, &json!({"constructed": OBJECTS.with(std::cell::Cell::get)})).map_err(unavailable),
        (_, path) => Err(ApiError::not_found(path)),
    }
}

async fn session(env: &Env) -> Result<Response, ApiError> {
    let secret = var(env, "STREAM_JWT_SECRET").ok_or_else(|| ApiError::misconfigured("STREAM_JWT_SECRET is not set"))?;
    let now = (js_sys::Date::now() / 1000.0) as u64;
    let stream_id = format!("demo-{now}-{}", (js_sys::Math::random() * 1e9) as u64);
    let settings = crate::edge::setup::settings(env).map_err(|e| ApiError::misconfigured(e.to_string()))?;
    // The demo's ids carry no database prefix: its row is in the default database.
    let database = settings.databases.default_database().map_err(ApiError::unknown_database)?;
    let executor =
        crate::edge::setup::Executor::from_env(env, settings.backend, database).map_err(|e| ApiError::misconfigured(e.to_string()))?;
    let table = var(env, "MESSAGE_TABLE").unwrap_or_else(|| "messages".into());
    let table = crate::engine::durable::Ident::new(&table).map_err(ApiError::misconfigured)?;
    let dialect = settings.backend.dialect();
    let insert = Statement {
        sql: format!(
            "INSERT INTO {table} (id, chat_id, role) VALUES ({}, {}, 'assistant')",
            dialect.placeholder(1),
            dialect.placeholder(2)
        ),
        params: vec![Value::Text(stream_id.clone()), Value::Text("demo-chat".into())],
    };
    // The row the stream will open (the demo's stand-in for the app's own insert).
    executor.sql().batch(OpKind::MarkStreaming, &[insert]).await.map_err(ApiError::store_unavailable)?;
    let token = |scope: &str| {
        let claims = json!({"sub": "demo", "stream": stream_id, "scope": scope, "exp": now + DEV_TOKEN_SECS});
        crate::engine::access::auth::mint_hs256(&claims, secret.as_bytes()).map_err(unavailable)
    };
    http::json(
        200,
        &json!({
            "streamId": stream_id,
            "writeToken": token("write")?,
            "readToken": token("read")?,
            "cancelToken": token("cancel")?,
            "mockUrl": var(env, "DEV_MOCK_MODEL_URL").unwrap_or_else(|| "http://127.0.0.1:8788".into()),
        }),
    )
    .map_err(unavailable)
}

/// A chat feed object's counts (the object answers them on an internal path).
async fn feed_stats(req: &Request, env: &Env) -> Result<Response, ApiError> {
    let chat = http::Target::of(req).query("chat").unwrap_or_default();
    crate::engine::access::stream_id::validate(&chat).map_err(|e| ApiError::new(400, "bad_chat_id", e.to_string()))?;
    let stub = env
        .durable_object(crate::edge::chat::FEEDS_BINDING)
        .and_then(|ns| ns.id_from_name(&chat)?.get_stub())
        .map_err(|e| ApiError::misconfigured(format!("the {} binding: {e}", crate::edge::chat::FEEDS_BINDING)))?;
    stub.fetch_with_str(&format!("https://chat-feed{}", crate::edge::chat::STATS_PATH)).await.map_err(unavailable)
}
