//! A chat's feed (SPEC §11), performed: one Durable Object per chat id (`CHAT_FEEDS`), which
//! keeps the engine's [`ChatFeed`] for its chat and
//!
//! - answers `GET {prefix}/chats/{chat}/events` (routed here by the front Worker) with SSE:
//!   the replay the machine gives for the reader's `Last-Event-ID` (or `?after=`), then every
//!   event as it is announced, a `: ping` every `KEEPALIVE_MS` in between;
//! - takes the notices of its chat's stream objects (`POST` [`NOTICE_PATH`], which only they
//!   send: the front Worker routes nothing else here) and answers once they are stored;
//! - keeps the history in its own storage (`feed`, `e:<n>`), reads the chat's rows for the
//!   machine's checks (the mapped tables, D1 or Postgres), and sets its alarm for the
//!   machine's next check or for forgetting the history when idle.
//!
//! Like the stream's shell it feeds one input, drains the outputs, and only then performs them.

use crate::edge::http::{self, unavailable};
use crate::edge::meter::{Hold, Meter};
use crate::edge::runtime::{log, now, with_timeout};
use crate::edge::setup;
use crate::engine::access::api::{self, ApiError, ChatAction};
use crate::engine::feed::{ChatFeed, FeedNotice, FeedOutput, RowsUnread, StorageWrite, StoredFeed, EVENT_PREFIX, HEAD_KEY};
use crate::engine::host::config::Settings;
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::wire::sse;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::JsValue;
use worker::{durable_object, DurableObject, Env, ListOptions, Request, Response, ResponseBody, State};

/// The binding of the chat feeds' Durable Object namespace (class `ChatFeedObject`).
pub const FEEDS_BINDING: &str = "CHAT_FEEDS";

/// Where a stream's object posts its notices (never a route of the API: see the module docs).
pub const NOTICE_PATH: &str = "/_rindle/feed/notice";
/// The dev build's counts of a feed object (`GET /dev/feed-stats?chat=`).
#[cfg(feature = "dev")]
pub const STATS_PATH: &str = "/_rindle/feed/stats";

/// A reader whose body holds this many unread writes is dropped: it reconnects with its
/// `Last-Event-ID` and misses nothing.
const MAX_UNREAD_WRITES: f64 = 256.0;

#[durable_object]
pub struct ChatFeedObject {
    feed: Rc<FeedShell>,
}

impl DurableObject for ChatFeedObject {
    fn new(state: State, env: Env) -> Self {
        Self { feed: Rc::new(FeedShell::new(state, env)) }
    }

    async fn fetch(&self, req: Request) -> worker::Result<Response> {
        // The stats (the meter's own reader) hold nothing, so reading them does not change them.
        #[cfg(feature = "dev")]
        let stats = req.path() == STATS_PATH;
        #[cfg(not(feature = "dev"))]
        let stats = false;
        let _awake = (!stats).then(|| self.feed.meter.hold());
        let answer = Rc::clone(&self.feed).handle(req).await;
        answer.or_else(|e| http::error(&e))
    }

    async fn alarm(&self) -> worker::Result<Response> {
        let _awake = self.feed.meter.alarm();
        Rc::clone(&self.feed).alarm().await;
        Response::ok("")
    }
}

/// The feed object's state: the machine (once loaded), its readers and its alarm.
pub struct FeedShell {
    state: State,
    env: Env,
    feed: RefCell<Option<ChatFeed>>,
    /// A load from storage is under way: later callers wait for it.
    loading: Cell<bool>,
    load_waiters: RefCell<Vec<futures::channel::oneshot::Sender<()>>>,
    readers: RefCell<BTreeMap<u64, FeedReader>>,
    next_reader: Cell<u64>,
    alarm_at: Cell<Option<Timestamp>>,
    pinging: Cell<bool>,
    meter: Rc<Meter>,
    counts: RefCell<FeedCounts>,
}

struct FeedReader {
    body: web_sys::ReadableStreamDefaultController,
    /// An open body keeps the object awake (billed) until it ends.
    _awake: Hold,
}

/// What the feed object did, for the dev build's stats (bench/cost.mjs).
#[derive(Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct FeedCounts {
    notices: u64,
    subscribes: u64,
    /// Keys written (each a row written on a SQLite-backed object) and deleted.
    keys_written: u64,
    keys_deleted: u64,
    /// Keys read when the object loaded its history.
    keys_read: u64,
    loads: u64,
    /// Reads of the chat's rows, and the rows they returned.
    row_reads: u64,
    rows_returned: u64,
    forgets: u64,
}

impl FeedShell {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            feed: RefCell::new(None),
            loading: Cell::new(false),
            load_waiters: RefCell::default(),
            readers: RefCell::default(),
            next_reader: Cell::new(0),
            alarm_at: Cell::new(None),
            pinging: Cell::new(false),
            meter: Rc::default(),
            counts: RefCell::default(),
        }
    }

    fn settings(&self) -> Result<Rc<Settings>, ApiError> {
        setup::settings(&self.env).map_err(ApiError::misconfigured)
    }

    async fn handle(self: Rc<Self>, mut req: Request) -> Result<Response, ApiError> {
        let settings = self.settings()?;
        let target = http::Target::of(&req);
        let method = req.method();
        if target.path == NOTICE_PATH && method == worker::Method::Post {
            let notice: FeedNotice =
                req.json().await.map_err(|e| ApiError::bad_json("the feed notice", e)).map_err(|e| self.refused(e, "notice"))?;
            return self.notice(notice).await;
        }
        #[cfg(feature = "dev")]
        if target.path == STATS_PATH {
            return http::json(200, &json!({"counts": *self.counts.borrow(), "meter": self.meter.snapshot()})).map_err(unavailable);
        }
        match api::chat_route(&settings.path_prefix, method.as_ref(), &target.path)? {
            Some(route) if route.action == ChatAction::Events => self.subscribe(&req, &target, &settings, &route.chat_id).await,
            _ => Err(ApiError::not_found(&target.path)),
        }
    }

    fn refused(&self, e: ApiError, what: &str) -> ApiError {
        log("error", "feed_refused", "", json!({"what": what, "error": e.message}));
        e
    }

    /// A stream's object told the feed something: answered once it is stored.
    async fn notice(self: Rc<Self>, notice: FeedNotice) -> Result<Response, ApiError> {
        self.counts.borrow_mut().notices += 1;
        let chat_id = notice.chat_id().to_owned();
        crate::engine::access::stream_id::validate(&chat_id).map_err(|e| ApiError::new(400, "bad_chat_id", e.to_string()))?;
        self.load(&chat_id).await?;
        let write = self.feed_input(|f, now| f.handle_notice(notice, now));
        if let Some(write) = write {
            if let Err(e) = self.persist(write).await {
                // The history in memory is ahead of storage: forget it, so the notice's retry
                // is applied again to what storage holds (the same events, the same ids).
                self.feed.borrow_mut().take();
                return Err(ApiError::store_unavailable(e));
            }
        }
        http::json(200, &json!({"ok": true})).map_err(unavailable)
    }

    /// `GET {prefix}/chats/{chat}/events`, which the front Worker authorized for the chat
    /// (every denial the same 403 there, whether or not the chat has a feed): the replay and
    /// the live events.
    async fn subscribe(
        self: Rc<Self>,
        req: &Request,
        target: &http::Target,
        settings: &Settings,
        chat_id: &str,
    ) -> Result<Response, ApiError> {
        let sse_headers = crate::edge::sse::headers(crate::engine::live::Dialect::Events);
        if req.method() == worker::Method::Head {
            return Response::empty().map(|r| r.with_headers(sse_headers)).map_err(unavailable);
        }
        self.counts.borrow_mut().subscribes += 1;
        self.load(chat_id).await?;
        let last_event_id = req.headers().get("last-event-id").ok().flatten().filter(|id| !id.trim().is_empty());
        let after = last_event_id.or_else(|| target.query("after"));
        let replay = self.feed.borrow().as_ref().map(|f| f.subscribe(after.as_deref())).unwrap_or_default();
        let first = format!("{}{replay}", sse::preamble(settings.sse_retry_ms));
        let id = self.next_reader.get();
        self.next_reader.set(id + 1);
        let source = FeedReaderSource { shell: Rc::clone(&self), id, first };
        let source: js_sys::Object = wasm_bindgen::JsCast::unchecked_into(JsValue::from(source));
        let body = web_sys::ReadableStream::new_with_underlying_source(&source).map_err(|e| unavailable(worker::Error::from(e)))?;
        self.keep_alive(settings.stream.keepalive_ms);
        Ok(Response::from_body(ResponseBody::Stream(body)).map_err(unavailable)?.with_headers(sse_headers))
    }

    /// The machine, loaded from storage once per instance (single flight). The load asks for
    /// the chat's rows: what the feed missed while it was away is rebuilt from them.
    async fn load(self: &Rc<Self>, chat_id: &str) -> Result<(), ApiError> {
        loop {
            if self.feed.borrow().is_some() {
                return Ok(());
            }
            if !self.loading.get() {
                break;
            }
            let (tx, rx) = futures::channel::oneshot::channel();
            self.load_waiters.borrow_mut().push(tx);
            let _ = rx.await;
        }
        self.loading.set(true);
        let stored = self.stored().await;
        self.loading.set(false);
        for waiter in self.load_waiters.take() {
            let _ = waiter.send(());
        }
        let stored = stored.map_err(ApiError::store_unavailable)?;
        let settings = self.settings()?;
        self.counts.borrow_mut().loads += 1;
        if self.feed.borrow().is_none() {
            *self.feed.borrow_mut() = Some(ChatFeed::load(settings.feed, chat_id, stored, now()));
            // A history this version cannot read is deleted.
            if let Some(write) = self.feed_input(|_, _| ()) {
                self.persist_logged(write).await;
            }
        }
        Ok(())
    }

    /// The history as the object's storage holds it.
    async fn stored(&self) -> worker::Result<StoredFeed> {
        let storage = self.state.storage();
        let head = storage.get::<String>(HEAD_KEY).await?;
        let listed = storage.list_with_options(ListOptions::new().prefix(EVENT_PREFIX)).await?;
        let mut events = Vec::new();
        listed.for_each(&mut |value, key| {
            if let (Some(key), Some(value)) = (key.as_string(), value.as_string()) {
                events.push((key, value));
            }
        });
        let mut counts = self.counts.borrow_mut();
        counts.keys_read += 1 + events.len() as u64;
        self.meter.storage(|s| s.gets += 1 + events.len() as u64);
        Ok(StoredFeed { head, events })
    }

    /// The alarm: the machine's next check, or forgetting the history when idle.
    async fn alarm(self: Rc<Self>) {
        if self.feed.borrow().is_none() {
            let head = self.state.storage().get::<String>(HEAD_KEY).await.ok().flatten();
            let chat_id = head.as_deref().and_then(crate::engine::feed::stored_chat_id);
            let Some(chat_id) = chat_id else {
                // Nothing stored: nothing to check or to forget.
                return;
            };
            if let Err(e) = self.load(&chat_id).await {
                log("error", "feed_load_failed", "", json!({"chat": chat_id, "error": e.message}));
                return;
            }
        }
        self.alarm_at.set(None);
        if let Some(write) = self.feed_input(|f, now| f.handle_timeout(now)) {
            self.persist_logged(write).await;
        }
    }

    /// Feeds one input, performs its outputs (announcements at once, checks and forgetting in
    /// tasks), arms the alarm; the storage write it asks for, if any, is returned to be awaited
    /// (the runtime holds the announcements until it is stored).
    fn feed_input(self: &Rc<Self>, input: impl FnOnce(&mut ChatFeed, Timestamp)) -> Option<StorageWrite> {
        let now = now();
        let (outputs, timeout) = {
            let mut slot = self.feed.borrow_mut();
            let feed = slot.as_mut()?;
            input(feed, now);
            let outputs: Vec<FeedOutput> = std::iter::from_fn(|| feed.poll_output()).collect();
            (outputs, feed.poll_timeout())
        };
        let mut write: Option<StorageWrite> = None;
        for output in outputs {
            match output {
                FeedOutput::Persist(w) => match &mut write {
                    Some(pending) => {
                        pending.put.extend(w.put);
                        pending.delete.extend(w.delete);
                    }
                    None => write = Some(w),
                },
                FeedOutput::Announce(wire) => self.announce(&wire),
                FeedOutput::Verify { chat_id, open } => {
                    let shell = Rc::clone(self);
                    let awake = self.meter.hold();
                    wasm_bindgen_futures::spawn_local(async move {
                        let _awake = awake;
                        shell.check_rows(chat_id, open).await;
                    });
                }
                FeedOutput::Forget => {
                    self.counts.borrow_mut().forgets += 1;
                    let shell = Rc::clone(self);
                    let awake = self.meter.hold();
                    wasm_bindgen_futures::spawn_local(async move {
                        let _awake = awake;
                        let storage = shell.state.storage();
                        if let Err(e) = storage.delete_all().await {
                            log("error", "feed_forget_failed", "", json!({"error": e.to_string()}));
                        }
                        let _ = storage.delete_alarm().await;
                        shell.alarm_at.set(None);
                    });
                }
            }
        }
        self.arm_alarm(timeout);
        write
    }

    /// Reads the chat's rows for the machine, bounded by `STORE_TIMEOUT_MS`.
    async fn check_rows(self: Rc<Self>, chat_id: String, open: Vec<String>) {
        let rows = match self.settings() {
            Err(e) => Err(RowsUnread::Failed(e.message)),
            Ok(settings) if settings.mapping.chat.is_none() || setup::custom_sink_installed() => Err(RowsUnread::Unavailable),
            // The chat's rows are in the database its id names (SPEC §13).
            Ok(settings) => match setup::chat_tables(&self.env, &settings, &chat_id) {
                Err(e) => Err(RowsUnread::Failed(e.message)),
                Ok(tables) => {
                    self.counts.borrow_mut().row_reads += 1;
                    match with_timeout(settings.stream.store_timeout_ms, tables.chat_answers(&chat_id, &open)).await {
                        Some(Ok(Some(rows))) => {
                            self.counts.borrow_mut().rows_returned += rows.len() as u64;
                            Ok(rows)
                        }
                        Some(Ok(None)) => Err(RowsUnread::Unavailable),
                        Some(Err(e)) => Err(RowsUnread::Failed(e.to_string())),
                        None => Err(RowsUnread::Failed(format!("no answer in {} ms", settings.stream.store_timeout_ms.0))),
                    }
                }
            },
        };
        if let Err(RowsUnread::Failed(e)) = &rows {
            log("warn", "feed_rows_unread", "", json!({"chat": chat_id, "error": e}));
        }
        if let Some(write) = self.feed_input(|f, now| f.handle_rows(rows, now)) {
            self.persist_logged(write).await;
        }
    }

    /// Writes the machine's storage write: its puts in one call, then its deletes.
    async fn persist(&self, write: StorageWrite) -> worker::Result<()> {
        let storage = self.state.storage();
        if !write.put.is_empty() {
            let values = js_sys::Object::new();
            for (key, value) in &write.put {
                js_sys::Reflect::set(&values, &JsValue::from_str(key), &JsValue::from_str(value))?;
            }
            self.counts.borrow_mut().keys_written += write.put.len() as u64;
            self.meter.storage(|s| s.puts += write.put.len() as u64);
            storage.put_multiple_raw(values).await?;
        }
        if !write.delete.is_empty() {
            self.counts.borrow_mut().keys_deleted += write.delete.len() as u64;
            self.meter.storage(|s| s.deletes += write.delete.len() as u64);
            storage.delete_multiple(write.delete).await?;
        }
        Ok(())
    }

    /// [`Self::persist`], for a write no request waits on: on failure the history in memory is
    /// forgotten (loaded again from storage by the next request, and checked against the table).
    async fn persist_logged(&self, write: StorageWrite) {
        if let Err(e) = self.persist(write).await {
            log("error", "feed_write_failed", "", json!({"error": e.to_string()}));
            self.feed.borrow_mut().take();
        }
    }

    /// Sets the object's alarm for the machine's next deadline, unless it is set for then.
    fn arm_alarm(self: &Rc<Self>, at: Option<Timestamp>) {
        let Some(at) = at else { return };
        if self.alarm_at.get() == Some(at) {
            return;
        }
        self.alarm_at.set(Some(at));
        self.meter.storage(|s| s.set_alarms += 1);
        let shell = Rc::clone(self);
        let awake = self.meter.hold();
        wasm_bindgen_futures::spawn_local(async move {
            let _awake = awake;
            let when = worker::ScheduledTime::new(js_sys::Date::new(&JsValue::from_f64(at.0 as f64)));
            if let Err(e) = shell.state.storage().set_alarm(when).await {
                log("error", "feed_alarm_failed", "", json!({"error": e.to_string()}));
                shell.alarm_at.set(None);
            }
        });
    }

    /// Writes one event to every reader; a reader that stopped reading is dropped.
    fn announce(&self, wire: &str) {
        let bytes = js_sys::Uint8Array::from(wire.as_bytes());
        self.readers.borrow_mut().retain(|_, reader| {
            let stuck = reader.body.desired_size().is_some_and(|d| d < -MAX_UNREAD_WRITES);
            if stuck {
                let _ = reader.body.close();
                return false;
            }
            reader.body.enqueue_with_chunk(&bytes).is_ok()
        });
    }

    /// Pings every reader each `interval` while any is attached.
    fn keep_alive(self: &Rc<Self>, interval: Millis) {
        if self.pinging.replace(true) {
            return;
        }
        let shell = Rc::clone(self);
        wasm_bindgen_futures::spawn_local(async move {
            loop {
                // A pending timer keeps the object awake: counted as such.
                let awake = shell.meter.hold();
                worker::Delay::from(Duration::from_millis(interval.0)).await;
                drop(awake);
                if shell.readers.borrow().is_empty() {
                    break;
                }
                shell.announce(sse::PING);
            }
            shell.pinging.set(false);
        });
    }
}

/// The underlying source of one feed reader's body.
#[wasm_bindgen]
pub struct FeedReaderSource {
    shell: Rc<FeedShell>,
    id: u64,
    first: String,
}

#[wasm_bindgen]
impl FeedReaderSource {
    /// The body is set up: the preamble and the replay go out, and the reader joins.
    pub fn start(&self, body: web_sys::ReadableStreamDefaultController) {
        let _ = body.enqueue_with_chunk(&js_sys::Uint8Array::from(self.first.as_bytes()));
        let reader = FeedReader { body, _awake: self.shell.meter.hold() };
        self.shell.readers.borrow_mut().insert(self.id, reader);
    }

    /// The client went away.
    pub fn cancel(self) {
        self.shell.readers.borrow_mut().remove(&self.id);
    }
}
