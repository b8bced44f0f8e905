//! The stream's Durable Object, one per stream id: it routes and authorizes every request, then
//! runs the handlers against the stream's [`Shell`]. Its rooms:
//!
//! - `shell`: the driver between the object and the engine's live stream (borrow, feed one
//!   input, drain the outputs, drop the borrow, perform them);
//! - `append`: the append's body, pushed as it arrives;
//! - `readers`: a reader's SSE body; `ui`: `/ui` and the resume GET;
//! - `lease`: the object's storage and the lease alarm; `revive`: the revival and `/resume`;
//! - `pump`: the upstream pump; `announce`: the stream's notices to its chat's feed.

mod announce;
mod append;
mod lease;
mod pump;
mod readers;
mod revive;
mod shell;
mod ui;

use self::append::discard_unread;
use self::lease::LeaseStore;
use self::readers::ReaderSource;
use self::shell::Shell;
use crate::edge::http::{self, error, unavailable};
use crate::edge::meter::{Hold, Meter};
use crate::edge::runtime::{log, now, with_timeout};
use crate::edge::setup::Setup;
use crate::edge::sse;
use crate::engine::access::api::{self, Action, ApiError, OpenRequest, Rebuild, Route};
use crate::engine::host::config::StreamConfig;
use crate::engine::host::time::Millis;
use crate::engine::live::lease::Revived;
use crate::engine::live::{Caller, Dialect, FlushError, LiveStream, OpenError, Producer, ResumeRefused, Taker, WatchAnswer, WATCH_HOLD};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use worker::{durable_object, DurableObject, Env, Request, Response, State};

#[durable_object]
pub struct StreamObject {
    pub(crate) state: State,
    pub(crate) env: Env,
    setup: RefCell<Option<Rc<Setup>>>,
    pub(crate) object: RefCell<Option<Rc<Object>>>,
    /// What this object is billed for, counted (`/stats`, bench/cost.mjs).
    pub(crate) meter: Rc<Meter>,
    /// Readers that came before the open (the row was inserted, the stream not opened yet),
    /// woken when it opens here (see `ui::format_or_await_open`).
    pub(crate) awaiting_open: RefCell<Vec<futures::channel::oneshot::Sender<()>>>,
}

/// An object that knows its stream.
pub(crate) struct Object {
    pub(crate) setup: Rc<Setup>,
    pub(crate) shell: Rc<Shell>,
    /// An upstream pump is running (one at a time: two would interleave their text).
    pub(crate) pumping: std::cell::Cell<bool>,
    /// A stored pump's response was cancelled upstream by this instance: a Stop that rebuilds
    /// the stream (its flag read at the rebuild) and the same Stop's own request both reach
    /// [`StreamObject::cancel_stored_pump`], and the provider is asked once.
    pub(crate) stored_pump_cancelled: std::cell::Cell<bool>,
}

impl DurableObject for StreamObject {
    fn new(state: State, env: Env) -> Self {
        #[cfg(feature = "dev")]
        crate::edge::dev::object_constructed();
        // In the dev build the counts outlive the instance: an object that slept after its seal
        // still reports what it was billed for (bench/cost.mjs).
        let (meter, _) = crate::edge::meter::of_object(&state);
        Self { state, env, setup: RefCell::new(None), object: RefCell::new(None), meter, awaiting_open: RefCell::default() }
    }

    async fn fetch(&self, req: Request) -> worker::Result<Response> {
        // The same JavaScript request object (not `Request.clone()`, which would tee the body).
        let raw = <web_sys::Request as Clone>::clone(req.inner());
        let (answer, _awake) = self.handle(req).await;
        let answer = answer.or_else(|e| error(&e));
        discard_unread(&raw).await;
        answer
    }

    async fn alarm(&self) -> worker::Result<Response> {
        let _awake = self.meter.alarm();
        self.lease_expired().await?;
        Response::ok("")
    }
}

impl StreamObject {
    /// The service's settings (built once per isolate). A bad configuration is refused on every
    /// request with a message naming the setting.
    pub(crate) fn settings(&self) -> Result<Rc<crate::engine::host::config::Settings>, ApiError> {
        crate::edge::setup::settings(&self.env).map_err(ApiError::misconfigured)
    }

    /// The object's configuration, built once, for stream `stream_id`: its store is on the
    /// database the id names (SPEC §13).
    pub(crate) fn setup(&self, stream_id: &str) -> Result<Rc<Setup>, ApiError> {
        if let Some(s) = self.setup.borrow().as_ref() {
            return Ok(Rc::clone(s));
        }
        let setup = Rc::new(Setup::from_env(&self.env, stream_id)?);
        *self.setup.borrow_mut() = Some(Rc::clone(&setup));
        Ok(setup)
    }

    /// The lease's storage and alarm.
    pub(crate) fn lease_store(&self) -> worker::Result<LeaseStore> {
        let settings = self.settings().map_err(|e| worker::Error::RustError(e.message))?;
        #[allow(unused_mut)] // the test build adds its fault plan
        let mut lease = LeaseStore::new(&self.state, &settings.stream, Rc::clone(&self.meter));
        #[cfg(feature = "test-faults")]
        {
            lease.faults = crate::edge::setup::fault_plan(&self.env).map_err(|e| worker::Error::RustError(e.to_string()))?;
        }
        Ok(lease)
    }

    pub(crate) fn object(&self, stream_id: &str) -> Result<Rc<Object>, ApiError> {
        if let Some(o) = self.object.borrow().as_ref() {
            return Ok(Rc::clone(o));
        }
        let setup = self.setup(stream_id)?;
        let lease = LeaseStore::new(&self.state, &setup.settings.stream, Rc::clone(&self.meter));
        let feeds = self.env.durable_object(crate::edge::chat::FEEDS_BINDING).ok();
        #[allow(unused_mut)] // the test build adds its fault plan
        let mut feed =
            self::announce::FeedLink::new(stream_id, &self.state, feeds, setup.settings.stream.store_timeout_ms, Rc::clone(&self.meter));
        #[cfg(feature = "test-faults")]
        {
            feed.faults = setup.faults.clone();
        }
        let shell = Shell::new(
            stream_id.to_owned(),
            Rc::clone(&setup.store),
            lease,
            setup.settings.stream.store_timeout_ms,
            setup.hook.clone(),
            Rc::clone(&self.meter),
            feed,
        );
        let object =
            Rc::new(Object { setup, shell, pumping: std::cell::Cell::new(false), stored_pump_cancelled: std::cell::Cell::new(false) });
        *self.object.borrow_mut() = Some(Rc::clone(&object));
        Ok(object)
    }

    /// Answers a request, and holds the object awake (in the meter's count) from its routing
    /// until the caller has read the rest of its body. A request the front Worker would not
    /// have routed here is not counted.
    async fn handle(&self, req: Request) -> (Result<Response, ApiError>, Option<Hold>) {
        let target = http::Target::of(&req);
        let routed = self.settings().and_then(|settings| {
            api::route(&settings.path_prefix, req.method().as_ref(), &target.path)?.ok_or_else(|| ApiError::not_found(&target.path))
        });
        match routed {
            Ok(route) => {
                let awake = self.meter.request(route.action);
                (self.answer(req, target, route).await, awake)
            }
            Err(e) => (Err(e), None),
        }
    }

    async fn answer(&self, mut req: Request, target: http::Target, route: Route) -> Result<Response, ApiError> {
        let o = self.object(&route.stream_id)?;
        // Authorization comes before anything that could reveal whether the stream exists. The
        // front Worker asked every authorizer but one that reads the stream's meta: that one is
        // asked here, where the meta is (`super::gate`).
        if o.setup.authorizer.reads_meta() {
            let asked = crate::edge::gate::Asked::of(req.headers(), &target, &route, &*o.setup.authorizer)?;
            let meta = o.shell.inspect(|s| s.meta().cloned()).flatten();
            let tables = || match &o.setup.executor {
                Some(executor) if o.setup.settings.mapping.chat.is_some() => Ok(executor.tables(&o.setup.settings)),
                _ => Err(ApiError::no_chat_column()),
            };
            crate::edge::gate::ask(&*o.setup.authorizer, &asked, &route, meta.as_ref(), tables).await?;
        }
        // Every body but an append's is small: read now, against its bound (an append's body is
        // read as it is pushed, see `append`).
        let body = match route.action {
            Action::Append => Vec::new(),
            action => http::read_limited(&req, action, action.max_body_bytes(o.settings().max_append_bytes)).await?,
        };
        // A fresh instance whose stream was lost while streaming rebuilds it, whoever woke it
        // (SPEC §10), when the engine says (`Action::rebuild`): first for most requests, after
        // its own write for a cancel, never for an open, `/text` or `/stats`.
        if route.action.rebuild() == Rebuild::First {
            self.revive_for_request(&o).await?;
        }
        let r = match route.action {
            Action::Open => self.open(&o, &route, &req, &body).await,
            Action::Append => {
                let epoch = self::revive::epoch_of(&req)?;
                o.append(&route, &mut req, epoch).await
            }
            Action::Flush => o.flush(&route, self::revive::epoch_of(&req)?).await,
            Action::Close => o.seal(&route, None, self::revive::epoch_of(&req)?).await,
            Action::Fail => {
                let epoch = self::revive::epoch_of(&req)?;
                let body = http::small_json(&body, "the fail body must be {\"error\": \"…\"}")?;
                let message =
                    body.as_ref().and_then(|b| b.get("error")).and_then(|e| e.as_str()).unwrap_or("the producer failed the stream");
                // A message U+0000 the store cannot keep is kept with U+FFFD in its place.
                o.seal(&route, Some(o.settings().backend.storable(message).into_owned()), epoch).await
            }
            Action::Resume => self.resume_producer(&o, &route, &req).await,
            Action::Events => o.events(&req, &target).await,
            Action::Ui => self.ui(&o, &req, &target, &route).await,
            Action::Stream => self.resume(&o, &req, &target, &route).await,
            Action::Text => self.text(&o, &route).await,
            Action::Cancel => {
                // The row's flag first (a Stop is kept even when the stream cannot be rebuilt
                // now: every rebuild reads it), then the rebuild, which does not fail the cancel.
                let answer = o.cancel(&route).await;
                if answer.is_ok() {
                    if let Revived::Failed(e) = self.revive(&o, Caller::Request).await {
                        log("warn", "cancel_recorded_not_rebuilt", &route.stream_id, json!({"error": e.to_string()}));
                    }
                    o.shell.cancel(); // a stream rebuilt just now (its row's flag may be unmapped)
                    if !o.pumping.get() {
                        self.cancel_stored_pump(&o);
                    }
                }
                answer
            }
            Action::Stats => o.stats(&route, &self.meter),
            Action::Watch => o.watch(&route).await,
            Action::Pump => self.pump(&o, &route, &req, &body).await,
        };
        r
    }

    async fn open(&self, o: &Rc<Object>, route: &Route, req: &Request, body: &[u8]) -> Result<Response, ApiError> {
        let body = http::small_json(body, "the open body must be {\"format\": \"text\" | \"ui\", \"meta\": …}")?;
        let OpenRequest { format, meta, chat } = OpenRequest::parse(body)?;
        if let Some(link) = &chat {
            check_open(&o.setup.store, &route.stream_id, &link.chat_id).await?;
        }
        let cfg = StreamConfig { format, ..o.setup.settings.stream.clone() };
        let (stream, ticket) = LiveStream::open(
            &route.stream_id,
            cfg,
            Producer {
                host_token: random_token(),
                meta,
                chat: chat.clone(),
                // Its own id: after a lost open answer it resumes without an epoch, as its own.
                id: req.headers().get(self::revive::PRODUCER_HEADER).ok().flatten(),
            },
            now(),
        );
        let Some(settled) = o.shell.install(stream, ticket) else {
            return Err(ApiError::open_refused(&route.stream_id, crate::engine::durable::OpenRefused::AlreadyOpenHere));
        };
        // Readers waiting for the open join now (the stream is held here, opening).
        for waiter in self.awaiting_open.take() {
            let _ = waiter.send(());
        }
        o.shell.feed(|_, _| ()); // performs the first request queued by `open`
        match settled.await.map_err(unavailable)? {
            // The format, `meta` and chat were stored with the lease's keys, before the row was marked.
            Ok(()) => {
                o.shell.feed.opened(chat.as_ref(), format);
                http::json(200, &json!({"streamId": route.stream_id, "seq": 0, "durableSeq": 0, "epoch": crate::engine::live::FIRST_EPOCH}))
                    .map_err(unavailable)
            }
            Err(OpenError::Refused(reason)) => Err(ApiError::open_refused(&route.stream_id, reason)),
            Err(OpenError::Store(e)) => Err(ApiError::store_unavailable(e)),
            Err(e @ OpenError::Lease(_)) => Err(unavailable(e)),
        }
    }

    /// `GET /text`: the durable text from D1, and the stream's format (`text` when this object
    /// never opened it).
    async fn text(&self, o: &Object, route: &Route) -> Result<Response, ApiError> {
        let durable = o.setup.read_durable(&route.stream_id).await.map_err(ApiError::store_unavailable)?;
        let durable = durable.ok_or_else(|| ApiError::no_row(&route.stream_id))?;
        let format = self.format(o, Some(&durable)).await?.unwrap_or_default();
        http::json(200, &TextAnswer { durable: &durable, format }).map_err(unavailable)
    }

    async fn pump(&self, o: &Rc<Object>, route: &Route, req: &Request, body: &[u8]) -> Result<Response, ApiError> {
        o.require_live(route)?;
        // The pump becomes the producer: only the current producer can start one.
        let epoch = self::revive::epoch_of(req)?;
        if let Some(Err(fenced)) = o.shell.inspect(|s| s.admit(epoch)) {
            return Err(self::revive::fenced(&route.stream_id, fenced));
        }
        let (pump, upstream) = self::pump::upstream_request(body, &o.setup.settings, &self.env)?;
        if o.pumping.get() {
            return Err(ApiError::pump_running(&route.stream_id));
        }
        // The pump's epoch fences the producer that started it, and is stored as a resume's is.
        let grant = match o.shell.feed(|s, now| s.admit(epoch).map_err(ResumeRefused::Fenced).and_then(|()| s.start_pump(now))) {
            Some(Ok(grant)) => grant,
            Some(Err(ResumeRefused::Fenced(f))) => return Err(self::revive::fenced(&route.stream_id, f)),
            Some(Err(e)) => return Err(self::revive::refused(&route.stream_id, e)),
            None => return Err(ApiError::not_open(&route.stream_id)),
        };
        self.store_takeover(o, &grant, None, Taker::Pump).await?;
        o.pumping.set(true);
        let object = Rc::clone(o);
        let run = self::pump::PumpRun::new(Rc::clone(&o.shell), grant.epoch, &self.state, self.env.clone(), Rc::clone(&self.meter));
        let awake = self.meter.hold();
        self.state.wait_until(async move {
            let _awake = awake;
            self::pump::run(run, pump, upstream).await;
            object.pumping.set(false);
        });
        http::json(202, &json!({"streamId": route.stream_id, "pumping": true, "epoch": grant.epoch})).map_err(unavailable)
    }
}

impl Object {
    pub(crate) fn settings(&self) -> &crate::engine::host::config::Settings {
        &self.setup.settings
    }

    /// Refuses producer calls on a stream that is not live here: 409 `closed` with the status it
    /// ends with (a Stop reaches the producer as `cancelled`), or 404 `not_open`.
    pub(crate) fn require_live(&self, route: &Route) -> Result<(), ApiError> {
        match self.shell.inspect(LiveStream::takes_producers) {
            Some(result) => result.map_err(|e| self::revive::refused(&route.stream_id, e)),
            None => Err(ApiError::not_open(&route.stream_id)),
        }
    }

    /// A producer's call that found the stream closed: as [`Self::require_live`] answers it.
    pub(crate) fn not_live(&self, route: &Route) -> ApiError {
        self.require_live(route).err().unwrap_or_else(|| ApiError::closed(&route.stream_id))
    }

    async fn flush(&self, route: &Route, epoch: Option<u64>) -> Result<Response, ApiError> {
        let shell = &self.shell;
        let settled = shell
            .feed(|s, now| s.admit_flush(epoch).map(|()| shell.await_ticket(s.flush(now))))
            .ok_or_else(|| ApiError::not_open(&route.stream_id))?
            .map_err(|f| self::revive::fenced(&route.stream_id, f))?;
        match settled.await.map_err(unavailable)? {
            Ok(durable_seq) => {
                let seq = shell.inspect(LiveStream::seq).unwrap_or(durable_seq);
                http::json(200, &json!({"seq": seq, "durableSeq": durable_seq})).map_err(unavailable)
            }
            Err(FlushError::NotOpen) => Err(ApiError::not_open(&route.stream_id)),
            Err(e @ (FlushError::CheckpointFailed { seq, durable_seq, .. } | FlushError::EndedShort { seq, durable_seq })) => {
                Err(ApiError::checkpoint_failed(seq, durable_seq, e))
            }
        }
    }

    /// `close` (error `None`) or `fail`. A seal that cannot commit still ends the stream:
    /// readers get `end` with the durable length, and the caller gets a 503 with the shortfall.
    async fn seal(&self, route: &Route, error: Option<String>, epoch: Option<u64>) -> Result<Response, ApiError> {
        let shell = &self.shell;
        let settled = shell
            .feed(|s, now| {
                s.admit(epoch)?;
                let ticket = match error {
                    Some(e) => s.fail(&e, now),
                    None => s.close(now),
                };
                Ok(shell.await_ticket(ticket))
            })
            .ok_or_else(|| ApiError::not_open(&route.stream_id))?
            .map_err(|f| self::revive::fenced(&route.stream_id, f))?;
        match settled.await.map_err(unavailable)? {
            Ok(r) => http::json(200, &json!({"status": r.status, "seq": r.seq, "durableSeq": r.durable_seq})).map_err(unavailable),
            Err(short) => Err(ApiError::seal_failed(short.status.as_str(), short.seq, short.durable_seq, &short)),
        }
    }

    /// `GET /events`: a live reader; with no live stream here, an ended answer's tail and end
    /// from its row (what the stream replayed while it lingered: its object sleeps after the
    /// seal), else `absent`.
    async fn events(&self, req: &Request, target: &http::Target) -> Result<Response, ApiError> {
        let from = match self.subscribe(Dialect::Events, req, target) {
            self::readers::Subscription::Answered(response) => return response,
            self::readers::Subscription::NoLiveStream { from } => from,
        };
        let retry = self.settings().sse_retry_ms;
        let row = self.setup.read_durable(&self.shell.stream_id).await.map_err(ApiError::store_unavailable)?;
        match row.as_ref().and_then(|row| crate::engine::live::replay_of_row(&self.shell.stream_id, row, from)) {
            Some(frames) => sse::complete(retry, &frames).map_err(unavailable),
            None => sse::absent(retry).map_err(unavailable),
        }
    }

    /// Attaches a reader of `dialect` at the request's join offset (`Last-Event-ID` over
    /// `from`), unless no live stream is here. A `HEAD` gets the headers a GET would get and
    /// attaches nothing: it has no body to stream.
    pub(crate) fn subscribe(&self, dialect: Dialect, req: &Request, target: &http::Target) -> self::readers::Subscription {
        if req.method() == worker::Method::Head {
            return self::readers::Subscription::Answered(
                Response::empty().map(|r| r.with_headers(sse::headers(dialect))).map_err(unavailable),
            );
        }
        let from = http::join_offset(req, target);
        let cfg = &self.settings().stream;
        if self.shell.inspect(|s| cfg.admits_reader(s.reader_count())) == Some(false) {
            return self::readers::Subscription::Answered(Err(ApiError::too_many_readers(&self.shell.stream_id, cfg.max_readers)));
        }
        // The front Worker says when the reader's token expires: its connection ends then.
        let expires_at =
            req.headers().get(crate::edge::gate::TOKEN_EXPIRES_HEADER).ok().flatten().and_then(|s| s.trim().parse::<u64>().ok());
        let subscribed = self.shell.feed(|s, _| {
            let reader = s.subscribe_as(dialect, from);
            if let Some(secs) = expires_at {
                s.expire_reader(reader, crate::engine::host::time::Timestamp(secs.saturating_mul(1000)));
            }
            reader
        });
        match subscribed {
            Some(reader) => self::readers::Subscription::Answered(
                ReaderSource::response(Rc::clone(&self.shell), reader, dialect, self.settings().sse_retry_ms).map_err(unavailable),
            ),
            None => self::readers::Subscription::NoLiveStream { from },
        }
    }

    async fn cancel(&self, route: &Route) -> Result<Response, ApiError> {
        // The live stream learns at once; the row's flag reaches a producer elsewhere (and this
        // one's next read-back).
        let live = self.shell.holds_stream();
        self.shell.cancel();
        match self.setup.request_cancel(&route.stream_id).await {
            Ok(true) => {}
            Ok(false) if !live => return Err(ApiError::no_row(&route.stream_id)),
            Ok(false) => {}
            Err(e) => return Err(ApiError::store_unavailable(e)),
        }
        http::json(200, &json!({"cancelled": true, "live": live})).map_err(unavailable)
    }

    /// `GET /watch`: held until the producer must hear something (a reader's cancel, the
    /// stream's end: [`LiveStream::watch`]), at most [`WATCH_HOLD`], then answered with where
    /// the stream stands. With no stream here the row says how it ended (`not_open` while it
    /// has not: nothing streams here).
    async fn watch(&self, route: &Route) -> Result<Response, ApiError> {
        let until = now() + WATCH_HOLD;
        let answer = loop {
            let change = match self.shell.inspect(LiveStream::watch) {
                Some(Some(answer)) => break answer,
                Some(None) => self.shell.watch_change(),
                None => {
                    let row = self.setup.read_durable(&route.stream_id).await.map_err(ApiError::store_unavailable)?;
                    break row.as_ref().and_then(WatchAnswer::of_row).ok_or_else(|| ApiError::not_open(&route.stream_id))?;
                }
            };
            if with_timeout(Millis(until.0.saturating_sub(now().0)), change).await.is_none() {
                if let Some(held) = self.shell.inspect(LiveStream::watch_held) {
                    break held;
                }
            }
        };
        let answer =
            json!({"status": answer.status_str(), "cancelled": answer.cancelled, "seq": answer.seq, "durableSeq": answer.durable_seq});
        http::json(200, &answer).map_err(unavailable)
    }

    /// The live stream's counters, and the object's billing counts and D1 traffic. With no
    /// stream held here (never opened, or retired after its linger) the answer is 404
    /// `not_open`, still carrying the object's counts.
    fn stats(&self, route: &Route, meter: &Meter) -> Result<Response, ApiError> {
        // The executor's traffic under its backend's name ("d1" or "postgres"; `d1: null` with
        // a custom sink).
        let (backend, counters) = match self.setup.executor.as_ref().map(|e| e.counters()) {
            Some((name, counters)) => (name, Some(counters)),
            None => ("d1", None),
        };
        let stats = self.shell.inspect(|s| {
            let st = s.stats();
            #[allow(unused_mut)] // the test and heap-stats builds add to it
            let mut stats = json!({
                "state": format!("{:?}", s.state()),
                "seq": s.seq(),
                "durableSeq": s.durable_seq(),
                "readers": s.reader_count(),
                "checkpoints": st.checkpoints,
                "failures": st.failures,
                "retries": st.retries,
                "checkpointStretch": s.checkpoint_stretch(),
                "bytesWritten": st.bytes_written,
                "readerWrites": st.reader_writes,
                "readerPacingMs": s.reader_pacing_ms(),
                "retainedBytes": s.retained_bytes(),
                "epoch": s.epoch(),
                "rehydrated": s.rehydrated(),
                "meter": meter.snapshot(),
            });
            stats[backend] = json!(counters);
            #[cfg(feature = "test-faults")]
            {
                stats["faultsInjected"] = json!(self.setup.faults.as_ref().map(|f| f.injected()));
            }
            #[cfg(feature = "heap-stats")]
            {
                stats["wasmHeap"] = json!(crate::edge::dev::heap::wasm_heap());
            }
            stats
        });
        match stats {
            Some(stats) => http::json(200, &stats).map_err(unavailable),
            None => Err(ApiError::not_open(&route.stream_id)
                .with(backend, serde_json::to_value(counters).unwrap_or_default())
                .with("meter", meter.snapshot())),
        }
    }
}

/// The `/text` answer: `{text, seq, status, format}`.
#[derive(serde::Serialize)]
struct TextAnswer<'a> {
    #[serde(flatten)]
    durable: &'a crate::engine::text::reading::DurableText,
    format: crate::engine::wire::ui::Format,
}

/// A random claim token: the open's CAS, and a revival's claim (unique per claimant).
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // The host token only needs to differ between producers; the clock is a fallback.
        return format!("host-{}", js_sys::Date::now());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An open that names chat `chat_id` (SPEC §11): refused when the row belongs to another chat,
/// where a chat column is mapped (without one, or with an app's own sink, there is nothing to
/// check against). Read through the stream's own store, so its traffic counts as the stream's.
async fn check_open(store: &crate::edge::store::Store, stream_id: &str, chat_id: &str) -> Result<(), ApiError> {
    let crate::edge::store::Store::Tables(tables) = store else { return Ok(()) };
    match tables.chat_of(stream_id).await.map_err(ApiError::store_unavailable)? {
        Some(chat) if chat != chat_id => Err(ApiError::chat_mismatch(stream_id)),
        _ => Ok(()),
    }
}
