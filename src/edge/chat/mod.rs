//! A chat's feed (SPEC §11), performed: one Durable Object per chat id (`CHAT_FEEDS`), which
//! keeps the engine's [`ChatFeed`] for its chat, and sleeps while its tabs wait.
//!
//! - Its readers are hibernatable WebSockets: the front Worker answers each tab's
//!   `GET {prefix}/chats/{chat}/events` with SSE and relays it from a socket to this object
//!   (`edge::front::relay`). The object accepts the socket (`acceptWebSocket`: the runtime holds
//!   it while the object sleeps), sends the replay the machine gives for the reader's
//!   `Last-Event-ID` as the socket's first message, then each event as it is announced. With
//!   tabs connected and no turn running, nothing keeps the object awake: it is billed for the
//!   events it sends, not for the time tabs stay open (docs/DESIGN.md, "The chat feed").
//! - It takes the notices of its chat's stream objects (`POST` [`NOTICE_PATH`], which only they
//!   send: the front Worker routes nothing else here) and answers once they are stored.
//! - It keeps the history in its own storage (`feed`, `e:<n>`), reads the chat's rows for the
//!   machine's checks (the mapped tables, D1 or Postgres), and sets its alarm for the machine's
//!   next check or for forgetting the history when idle.
//!
//! Like the stream's shell it feeds one input, drains the outputs, and only then performs them:
//! an input's storage write is started before its announcements are sent (the runtime holds
//! what an object sends until the writes started before it are stored).

use crate::edge::http::{self, unavailable};
use crate::edge::meter::Meter;
use crate::edge::runtime::{log, now, with_timeout};
use crate::edge::setup;
use crate::engine::access::api::{self, ApiError, ChatAction};
use crate::engine::feed::{ChatFeed, FeedNotice, FeedOutput, RowsUnread, StorageWrite, StoredFeed, EVENT_PREFIX, HEAD_KEY};
use crate::engine::host::config::Settings;
use crate::engine::host::time::Timestamp;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::JsValue;
use worker::{
    durable_object, DurableObject, Env, ListOptions, Request, Response, State, WebSocket, WebSocketIncomingMessage, WebSocketPair,
};

/// The binding of the chat feeds' Durable Object namespace (class `ChatFeedObject`).
pub const FEEDS_BINDING: &str = "CHAT_FEEDS";

/// Where a stream's object posts its notices (never a route of the API: see the module docs).
pub const NOTICE_PATH: &str = "/_rindle/feed/notice";
/// The dev build's counts of a feed object (`GET /dev/feed-stats?chat=`).
#[cfg(feature = "dev")]
pub const STATS_PATH: &str = "/_rindle/feed/stats";

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

    /// The relay sends nothing; a message is ignored (it woke the object, and is billed as one).
    async fn websocket_message(&self, _ws: WebSocket, _message: WebSocketIncomingMessage) -> worker::Result<()> {
        Ok(())
    }

    /// A tab went away (its relay closed the socket): the close is answered.
    async fn websocket_close(&self, ws: WebSocket, code: usize, reason: String, _was_clean: bool) -> worker::Result<()> {
        let _awake = self.feed.meter.hold();
        let code = u16::try_from(code).ok().filter(|c| (1000..5000).contains(c) && *c != 1005 && *c != 1006).unwrap_or(1000);
        let _ = ws.close(Some(code), Some(reason));
        Ok(())
    }

    async fn websocket_error(&self, _ws: WebSocket, _error: worker::Error) -> worker::Result<()> {
        Ok(())
    }
}

/// The feed object's state: the machine (once loaded), and its alarm. Its readers are the
/// runtime's: `getWebSockets()`.
pub struct FeedShell {
    state: State,
    env: Env,
    feed: RefCell<Option<ChatFeed>>,
    /// A load from storage is under way: later callers wait for it.
    loading: Cell<bool>,
    load_waiters: RefCell<Vec<futures::channel::oneshot::Sender<()>>>,
    alarm_at: Cell<Option<Timestamp>>,
    meter: Rc<Meter>,
    counts: Rc<RefCell<FeedCounts>>,
}

/// What the feed object did, for the dev build's stats (bench/feed.mjs, bench/cost.mjs); in the
/// dev build counted across the object's instances, as its meter is ([`crate::edge::meter::of_object`]).
#[derive(Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct FeedCounts {
    /// Instances of this object (in the dev build, counted across them: a new one after an idle
    /// stretch is the runtime's proof the object slept).
    constructions: u64,
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
        let (meter, constructions) = crate::edge::meter::of_object(&state);
        let counts = counts_of(&state);
        counts.borrow_mut().constructions = constructions;
        Self {
            state,
            env,
            feed: RefCell::new(None),
            loading: Cell::new(false),
            load_waiters: RefCell::default(),
            alarm_at: Cell::new(None),
            meter,
            counts,
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
            let body =
                json!({"counts": *self.counts.borrow(), "meter": self.meter.snapshot(), "sockets": self.state.get_websockets().len()});
            return http::json(200, &body).map_err(unavailable);
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
        if let Some(stored) = self.feed_input(|f, now| f.handle_notice(notice, now)) {
            if let Err(e) = stored.await {
                // The history in memory is ahead of storage: forget it, so the notice's retry
                // is applied again to what storage holds (the same events, the same ids).
                self.feed.borrow_mut().take();
                return Err(ApiError::store_unavailable(e));
            }
        }
        http::json(200, &json!({"ok": true})).map_err(unavailable)
    }

    /// A reader of `GET {prefix}/chats/{chat}/events`, which the front Worker authorized for the
    /// chat (every denial the same 403 there, whether or not the chat has a feed) and relays:
    /// a hibernatable socket whose first message is the replay, then every event as it is
    /// announced. Past `FEED_MAX_READERS` sockets, 429.
    async fn subscribe(
        self: Rc<Self>,
        req: &Request,
        target: &http::Target,
        settings: &Settings,
        chat_id: &str,
    ) -> Result<Response, ApiError> {
        if req.headers().get("upgrade").ok().flatten().is_none_or(|u| !u.eq_ignore_ascii_case("websocket")) {
            return Err(ApiError::new(
                426,
                "upgrade_required",
                "the feed's object serves its readers over a WebSocket (the front Worker relays it)",
            ));
        }
        let readers = self.state.get_websockets().len();
        if !settings.feed.admits_reader(readers) {
            return Err(ApiError::too_many_feed_readers(chat_id, settings.feed.max_readers));
        }
        self.counts.borrow_mut().subscribes += 1;
        self.load(chat_id).await?;
        let last_event_id = req.headers().get("last-event-id").ok().flatten().filter(|id| !id.trim().is_empty());
        let after = last_event_id.or_else(|| target.query("after"));
        // The replay and the socket's registration in one synchronous step: no event can fall
        // between them (an announcement goes to every socket the runtime holds).
        let replay = self.feed.borrow().as_ref().map(|f| f.subscribe(after.as_deref()));
        let pair = WebSocketPair::new().map_err(unavailable)?;
        self.state.accept_web_socket(&pair.server);
        if let Some(replay) = replay {
            pair.server.send_with_bytes(replay.as_bytes()).map_err(unavailable)?;
        }
        Response::from_websocket(pair.client).map_err(unavailable)
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
            // A history this version cannot read is deleted; one past its idle deadline forgotten.
            if let Some(stored) = self.feed_input(|_, _| ()) {
                self.logged(stored.await);
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
        if let Some(stored) = self.feed_input(|f, now| f.handle_timeout(now)) {
            self.logged(stored.await);
        }
    }

    /// Feeds one input and performs its outputs: the storage write first (started now, awaited
    /// by the caller through the future returned), then the announcements to every socket, the
    /// checks and forgetting in tasks, the alarm.
    fn feed_input(
        self: &Rc<Self>,
        input: impl FnOnce(&mut ChatFeed, Timestamp),
    ) -> Option<impl std::future::Future<Output = worker::Result<()>>> {
        let now = now();
        let (outputs, timeout) = {
            let mut slot = self.feed.borrow_mut();
            let feed = slot.as_mut()?;
            input(feed, now);
            let outputs: Vec<FeedOutput> = std::iter::from_fn(|| feed.poll_output()).collect();
            (outputs, feed.poll_timeout())
        };
        let mut write = StorageWrite::default();
        let mut announcements = Vec::new();
        for output in outputs {
            match output {
                FeedOutput::Persist(w) => {
                    write.put.extend(w.put);
                    write.delete.extend(w.delete);
                }
                FeedOutput::Announce(wire) => announcements.push(wire),
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
        // Started before anything is sent: the runtime holds the sends until it is stored.
        let stored = (!write.put.is_empty() || !write.delete.is_empty()).then(|| self.persist(write));
        // One message per socket for the input's events (a turn's `user` and `start` together):
        // each message is a delivery into every tab's relay.
        match announcements.as_slice() {
            [] => {}
            [one] => self.announce(one),
            many => self.announce(&many.concat()),
        }
        self.arm_alarm(timeout);
        let stored = stored?;
        Some(async move {
            match stored {
                Ok(calls) => {
                    for call in calls {
                        wasm_bindgen_futures::JsFuture::from(call).await?;
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
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
        if let Some(stored) = self.feed_input(|f, now| f.handle_rows(rows, now)) {
            self.logged(stored.await);
        }
    }

    /// Starts the machine's storage write: its puts in one call, then its deletes, each started
    /// now (the promises are awaited by the caller).
    fn persist(&self, write: StorageWrite) -> worker::Result<Vec<js_sys::Promise>> {
        let storage = self.state.storage();
        let storage = storage.as_raw();
        let mut calls = Vec::new();
        if !write.put.is_empty() {
            let values = js_sys::Object::new();
            for (key, value) in &write.put {
                js_sys::Reflect::set(&values, &JsValue::from_str(key), &JsValue::from_str(value))?;
            }
            self.counts.borrow_mut().keys_written += write.put.len() as u64;
            self.meter.storage(|s| s.puts += write.put.len() as u64);
            calls.push(storage.put_multiple(values.into())?);
        }
        if !write.delete.is_empty() {
            self.counts.borrow_mut().keys_deleted += write.delete.len() as u64;
            self.meter.storage(|s| s.deletes += write.delete.len() as u64);
            calls.push(storage.delete_multiple(write.delete.iter().map(|k| JsValue::from_str(k)).collect())?);
        }
        Ok(calls)
    }

    /// A write no request waits on: on failure the history in memory is forgotten (loaded again
    /// from storage by the next request, and checked against the table).
    fn logged(&self, stored: worker::Result<()>) {
        if let Err(e) = stored {
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

    /// Sends one event to every reader's socket. A socket the runtime cannot send on is closing:
    /// its relay reconnects, and misses nothing.
    fn announce(&self, wire: &str) {
        // One JavaScript copy of the bytes for every socket (the runtime copies what it sends).
        let bytes = js_sys::Uint8Array::from(wire.as_bytes());
        for socket in self.state.get_websockets() {
            let raw: &web_sys::WebSocket = socket.as_ref();
            let _ = raw.send_with_array_buffer_view(&bytes);
        }
    }
}

/// The object's counts: in the dev build kept across its instances (an object that slept still
/// reports what it did before), otherwise its instance's own.
fn counts_of(state: &State) -> Rc<RefCell<FeedCounts>> {
    #[cfg(feature = "dev")]
    {
        thread_local! {
            static COUNTS: RefCell<std::collections::HashMap<String, Rc<RefCell<FeedCounts>>>> = RefCell::default();
        }
        COUNTS.with(|c| Rc::clone(c.borrow_mut().entry(state.id().to_string()).or_default()))
    }
    #[cfg(not(feature = "dev"))]
    {
        let _ = state;
        Rc::default()
    }
}
