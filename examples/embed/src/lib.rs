//! A Worker that embeds rindle-streams (docs/EMBEDDING.md), and the fixture of the e2e test of
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
//!   stream's row `interrupted` (docs/EMBEDDING.md).
//!
//! The `refuse`, `failAppends` and `panic-` switches are the test's, not a pattern to copy.
#![cfg(target_arch = "wasm32")]

use rindle_streams::engine::access::auth::{AuthFuture, AuthRequest, Authorizer, Denied, Principal};
use rindle_streams::engine::durable::{Dialect, MappedSql, RowState, TableMapping};
use rindle_streams::engine::host::hook::{EventHook, StreamNotice};
use rindle_streams::engine::host::store::{Checkpoint, MarkOutcome, MarkStreaming, SealWrite, StoreError, StoreFuture};
use rindle_streams::engine::text::reading::DurableText;
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::{install_authorizer, install_checkpoint_sink, install_event_hook, CheckpointSink, Tables, D1};
use serde_json::json;
use std::cell::RefCell;
use std::collections::HashSet;
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
        let tables = Tables::new(Rc::new(D1::new(db)), MappedSql::new(TableMapping::example(), Dialect::Sqlite));
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
    tables: Tables,
    /// Streams whose checkpoints this sink fails (opened with `{"failAppends": true}`).
    failing: RefCell<HashSet<String>>,
}

impl CheckpointSink for AppSink {
    fn open<'a>(&'a self, stream_id: &'a str, open: &'a MarkStreaming) -> StoreFuture<'a, MarkOutcome> {
        log("sink_open", stream_id, json!({"meta": open.meta, "startedAt": open.started_at}));
        let meta = open.meta.as_ref();
        if let Some(reason) = meta.and_then(|m| m.get("refuse")).and_then(|r| r.as_str()) {
            return Box::pin(std::future::ready(Ok(MarkOutcome::Refused(reason.to_owned()))));
        }
        if meta.and_then(|m| m.get("failAppends")) == Some(&json!(true)) {
            self.failing.borrow_mut().insert(stream_id.to_owned());
        }
        self.tables.open(stream_id, open)
    }

    fn checkpoint<'a>(&'a self, stream_id: &'a str, slice: &'a Checkpoint) -> StoreFuture<'a, RowState> {
        if self.failing.borrow().contains(stream_id) {
            let failure = StoreError::NotCommitted("the app's sink fails this stream's checkpoints".into());
            return Box::pin(std::future::ready(Err(failure)));
        }
        self.tables.checkpoint(stream_id, slice)
    }

    fn seal<'a>(&'a self, stream_id: &'a str, write: &'a SealWrite) -> StoreFuture<'a, ()> {
        log("sink_seal", stream_id, json!({"from": write.from, "seq": write.seq, "bodyFrom": write.body_from}));
        self.tables.seal(stream_id, write)
    }

    fn read_durable<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, Option<DurableText>> {
        CheckpointSink::read_durable(&self.tables, stream_id)
    }

    fn request_cancel<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, bool> {
        CheckpointSink::request_cancel(&self.tables, stream_id)
    }
}

struct AppHook;

impl EventHook for AppHook {
    fn on_event(&self, notice: &StreamNotice) {
        let stream_id = match notice {
            StreamNotice::CheckpointFailed { stream_id, .. }
            | StreamNotice::SealShortfall { stream_id, .. }
            | StreamNotice::ReaderDropped { stream_id, .. }
            | StreamNotice::Interrupted { stream_id, .. }
            | StreamNotice::SealRepaired { stream_id, .. } => stream_id,
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
