//! A Worker that embeds rindle-streams (README "Embedding"), and the fixture of the e2e test of
//! that path (tests/e2e/embed.test.mjs). It exports the stream's Durable Object, calls
//! `handle_request` from its own fetch handler, and installs, in its start event:
//!
//! - an authorizer of its own (async, as any may be): the bearer token `let-me-in`; a request
//!   may carry `x-deny-from: N` to be refused when its join offset is `N`, which shows the
//!   authorizer sees the join offset and the headers;
//! - a checkpoint sink around the mapped D1 tables that refuses an open whose `meta` says
//!   `{"refuse": "<reason>"}` (a 409, not a 503), fails every checkpoint of a stream opened
//!   with `{"failAppends": true}`, and logs what each open and seal carries;
//! - an event hook that logs every notice, and panics on a notice about a stream whose id
//!   starts with `panic-`: on wasm32 that aborts the instance, and the lease seals the lost
//!   stream's row `interrupted` (README "Embedding").
//!
//! The `refuse`, `failAppends` and `panic-` switches are the test's, not a pattern to copy.
#![cfg(target_arch = "wasm32")]

use rindle_streams::engine::auth::{AuthFuture, AuthRequest, Authorizer, Denied, Principal};
use rindle_streams::engine::durable::{Dialect, MappedSql, TableMapping};
use rindle_streams::engine::hook::{EventHook, StreamNotice};
use rindle_streams::engine::live::{StoreFailure, StoreOp, StoreReply};
use rindle_streams::engine::reading::DurableText;
use rindle_streams::engine::utf16::Offset;
use rindle_streams::{install_authorizer, install_checkpoint_sink, install_event_hook, CheckpointSink, D1Tables};
use serde_json::json;
use std::cell::RefCell;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use worker::{event, Context, Env, Request, Response};

pub use rindle_streams::StreamObject;

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    rindle_streams::handle_request(req, env).await
}

#[event(start)]
fn start() {
    install_authorizer(AppAuthorizer);
    install_checkpoint_sink(|env| {
        let db = env.d1("DB").expect("the DB binding");
        let tables = D1Tables::new(db, MappedSql::new(TableMapping::example(), Dialect::Sqlite));
        Rc::new(AppSink { tables, failing: RefCell::default() })
    });
    install_event_hook(AppHook);
}

struct AppAuthorizer;

impl Authorizer for AppAuthorizer {
    fn authorize<'a>(&'a self, request: &'a AuthRequest<'a>) -> AuthFuture<'a> {
        Box::pin(async move {
            if request.token != Some("let-me-in") {
                return Err(Denied::Custom("not the app's token".into()));
            }
            let denied_from = request.header("x-deny-from").and_then(|v| v.parse().ok()).map(Offset);
            if denied_from.is_some() && denied_from == request.from {
                return Err(Denied::Custom(format!("joining at {denied_from:?} is refused here")));
            }
            Ok(Principal { sub: "app-user".into() })
        })
    }
}

struct AppSink {
    tables: D1Tables,
    /// Streams whose checkpoints this sink fails (opened with `{"failAppends": true}`).
    failing: RefCell<HashSet<String>>,
}

type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreFailure>> + 'a>>;

impl CheckpointSink for AppSink {
    fn run<'a>(&'a self, stream_id: &'a str, op: &'a StoreOp) -> StoreFuture<'a, StoreReply> {
        Box::pin(async move {
            match op {
                StoreOp::MarkStreaming { meta, started_at, .. } => {
                    log("sink_open", stream_id, json!({"meta": meta, "startedAt": started_at}));
                    if let Some(reason) = meta.as_ref().and_then(|m| m.get("refuse")).and_then(|r| r.as_str()) {
                        return Ok(StoreReply::Refused(reason.to_owned()));
                    }
                    if meta.as_ref().and_then(|m| m.get("failAppends")) == Some(&json!(true)) {
                        self.failing.borrow_mut().insert(stream_id.to_owned());
                    }
                }
                StoreOp::Append { .. } if self.failing.borrow().contains(stream_id) => {
                    return Err(StoreFailure("the app's sink fails this stream's checkpoints".into()));
                }
                StoreOp::Seal(write) => {
                    log("sink_seal", stream_id, json!({"from": write.from, "seq": write.seq, "bodyFrom": write.body_from}))
                }
                _ => {}
            }
            self.tables.run(stream_id, op).await
        })
    }

    fn read_durable<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, Option<DurableText>> {
        self.tables.read_durable(stream_id)
    }

    fn request_cancel<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, bool> {
        self.tables.request_cancel(stream_id)
    }
}

struct AppHook;

impl EventHook for AppHook {
    fn on_event(&self, notice: &StreamNotice) {
        let stream_id = match notice {
            StreamNotice::CheckpointFailed { stream_id, .. }
            | StreamNotice::SealShortfall { stream_id, .. }
            | StreamNotice::ReaderDropped { stream_id, .. }
            | StreamNotice::Interrupted { stream_id, .. } => stream_id,
            _ => "?",
        };
        log("hook", stream_id, json!({"notice": format!("{notice:?}")}));
        if stream_id.starts_with("panic-") {
            panic!("the app's hook panics on {notice:?}");
        }
    }
}

fn log(event: &str, stream_id: &str, fields: serde_json::Value) {
    worker::console_log!("{}", json!({"event": event, "streamId": stream_id, "fields": fields}));
}
