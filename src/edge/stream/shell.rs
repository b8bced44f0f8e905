//! The driver between a Durable Object and the pure [`LiveStream`]: borrow the state, feed one
//! input, drain the outputs, drop the borrow, and only then perform them (await the store,
//! wake readers, settle waiting requests, arm the timer).

use super::lease::LeaseStore;
use crate::edge::meter::{Hold, Meter};
use crate::edge::runtime::{log, now, with_timeout};
use crate::edge::store::Store;
use crate::engine::host::hook::{self, EventHook, StreamNotice};
use crate::engine::host::object_storage::KeyUpdate;
use crate::engine::host::store::{StoreError, StoreRequest};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::live::lease::Revived;
use crate::engine::live::{
    Attempt, Caller, Dialect, FlushOutcome, LiveStream, OpenOutcome, Output, Pull, ReaderId, SealOutcome, Settlement, SharedFrame,
    StreamEvent, StreamSlot, Ticket, Turn, Wire, ALONE_BYTES,
};
use futures::channel::oneshot;
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// A request's stream went away before settling it (the machine always settles what it
/// ticketed, so this is a runtime failure, never an answer about the stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream went away before the request settled")]
pub struct StreamDropped;

type Waiters<T> = RefCell<HashMap<Ticket<T>, oneshot::Sender<T>>>;

/// Requests waiting for their settlement, one map per kind of outcome.
#[derive(Default)]
pub struct Waiting {
    opens: Waiters<OpenOutcome>,
    flushes: Waiters<FlushOutcome>,
    seals: Waiters<SealOutcome>,
}

impl Waiting {
    fn settle(&self, settlement: Settlement) {
        fn send<T>(waiters: &Waiters<T>, ticket: Ticket<T>, outcome: T) {
            if let Some(tx) = waiters.borrow_mut().remove(&ticket) {
                let _ = tx.send(outcome); // the request may have gone away meanwhile
            }
        }
        match settlement {
            Settlement::Opened(t, o) => send(&self.opens, t, o),
            Settlement::Flushed(t, o) => send(&self.flushes, t, o),
            Settlement::Sealed(t, o) => send(&self.seals, t, o),
        }
    }
}

/// An outcome a request can wait for: each kind has its own waiters.
pub trait Awaitable: Sized + 'static {
    fn waiters(waiting: &Waiting) -> &Waiters<Self>;
}

impl Awaitable for OpenOutcome {
    fn waiters(waiting: &Waiting) -> &Waiters<Self> {
        &waiting.opens
    }
}

impl Awaitable for FlushOutcome {
    fn waiters(waiting: &Waiting) -> &Waiters<Self> {
        &waiting.flushes
    }
}

impl Awaitable for SealOutcome {
    fn waiters(waiting: &Waiting) -> &Waiters<Self> {
        &waiting.seals
    }
}

/// An attached reader's body, and whether it has room for a write.
struct ReaderBody {
    controller: web_sys::ReadableStreamDefaultController,
    /// The body holds no unread write: false from each write until the runtime asks for more
    /// (its `pull`, which the stream calls exactly when its queue has room again). Kept here
    /// instead of asking the body's `desiredSize`, a call into JavaScript per write.
    has_room: Cell<bool>,
    /// An open body keeps the object awake (billed) until it ends.
    _awake: Hold,
}

impl ReaderBody {
    /// A body, registered as open outside the instance (see [`crate::edge::sse::body_opened`]) until
    /// it is dropped: whichever way it leaves the shell (written to its end, its client gone,
    /// the stream retired), it is no longer this instance's to end.
    fn new(controller: web_sys::ReadableStreamDefaultController, awake: Hold) -> Self {
        crate::edge::sse::body_opened(&controller);
        Self { controller, has_room: Cell::new(true), _awake: awake }
    }
}

impl Drop for ReaderBody {
    fn drop(&mut self) {
        crate::edge::sse::body_ended(&self.controller);
    }
}

/// The JavaScript copy of a frame's bytes, kept while the readers woken for it are written.
struct FrameCopy {
    frame: Rc<SharedFrame>,
    dialect: Dialect,
    bytes: js_sys::Uint8Array,
}

/// The live side of one Durable Object.
pub struct Shell {
    pub stream_id: String,
    pub store: Rc<Store>,
    /// The stream; a reader whose client leaves while it is borrowed is detached at its next borrow.
    live: StreamSlot,
    lease: Rc<LeaseStore>,
    /// `STORE_TIMEOUT_MS`: how long a store call may take before it counts as failed.
    store_timeout: Millis,
    hook: Option<Rc<dyn EventHook>>,
    waiting: Waiting,
    /// The bodies of attached readers, which the shell writes their bytes into.
    bodies: RefCell<HashMap<ReaderId, Rc<ReaderBody>>>,
    /// Senders woken when a cancel arrives (a streaming append waits on one).
    cancel_watchers: RefCell<Vec<oneshot::Sender<()>>>,
    /// Callers waiting for the revival under way ([`Self::revival_finished`]).
    revival_waiters: RefCell<Vec<oneshot::Sender<()>>>,
    /// Producers' watches (`GET /watch`), woken once the stream has something to tell them
    /// ([`LiveStream::watch`]) or is dropped.
    watches: RefCell<Vec<oneshot::Sender<()>>>,
    /// The one timer armed for the stream's next deadline, and how to cancel it (a pending timer
    /// keeps the object from hibernating: one no deadline wants is cleared).
    timer: RefCell<Option<(Timestamp, futures::future::AbortHandle)>>,
    /// The last frame written whole, as JavaScript bytes: the readers woken for it get this copy.
    last_frame: Cell<Option<FrameCopy>>,
    /// The JavaScript copies of the large frames readers still hold (a replay's text shared by
    /// every reader joining at its offset: `Readers::replay_text`), each made once, whatever
    /// else is written between two readers' writes of it; forgotten once no reader holds it.
    large_frames: RefCell<Vec<(std::rc::Weak<SharedFrame>, Dialect, js_sys::Uint8Array)>>,
    /// The object's billing counts: reader bodies, timers and store calls hold it awake.
    meter: Rc<Meter>,
    /// The stream's chat's feed, told of its start and its end (SPEC §11).
    pub feed: Rc<super::announce::FeedLink>,
}

impl Shell {
    pub fn new(
        stream_id: String,
        store: Rc<Store>,
        lease: LeaseStore,
        store_timeout: Millis,
        hook: Option<Rc<dyn EventHook>>,
        meter: Rc<Meter>,
        feed: super::announce::FeedLink,
    ) -> Rc<Self> {
        Rc::new(Self {
            stream_id,
            store,
            live: StreamSlot::default(),
            lease: Rc::new(lease),
            store_timeout,
            hook,
            waiting: Waiting::default(),
            bodies: RefCell::default(),
            cancel_watchers: RefCell::default(),
            revival_waiters: RefCell::default(),
            watches: RefCell::default(),
            timer: RefCell::new(None),
            last_frame: Cell::new(None),
            large_frames: RefCell::default(),
            meter,
            feed: Rc::new(feed),
        })
    }

    /// Installs a freshly opened stream and waits for its open to settle; `None` (and nothing
    /// changes) when a stream is already here. One call, because tickets are numbered per
    /// stream: a refused open that registered its ticket would take the installed stream's
    /// waiter (the same number), and that open would answer 503 instead of 200.
    pub fn install(
        &self,
        stream: LiveStream,
        opened: Ticket<OpenOutcome>,
    ) -> Option<impl std::future::Future<Output = Result<OpenOutcome, StreamDropped>>> {
        self.live.put(seeded(stream)).then(|| self.await_ticket(opened))
    }

    /// Installs a stream rebuilt from the store (SPEC §10); `false` (and nothing changes) when a
    /// stream is already here.
    pub fn install_rehydrated(self: &Rc<Self>, stream: LiveStream) -> bool {
        if !self.live.put(seeded(stream)) {
            return false;
        }
        self.feed(|_, _| ()); // performs what `rehydrate` queued (the lease renewal, a seal), arms the window
        true
    }

    /// `caller`'s turn to rebuild the stream this instance does not hold (the engine's
    /// [`Revivals`](crate::engine::live::Revivals), kept with the stream's slot).
    pub fn begin_revival(&self, caller: Caller) -> Turn {
        self.live.begin_revival(caller)
    }

    /// Resolves when the revival under way finishes (then ask [`Self::begin_revival`] again).
    pub fn revival_finished(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.revival_waiters.borrow_mut().push(tx);
        rx
    }

    /// The revival is over (`outcome` `None`: given up, its future dropped); its waiters ask again.
    pub fn finish_revival(&self, attempt: Attempt, outcome: Option<&Revived>) {
        self.live.finish_revival(attempt, outcome);
        for waiter in self.revival_waiters.take() {
            let _ = waiter.send(());
        }
    }

    /// Is a stream (opening, live, sealing or lingering) held here?
    pub fn holds_stream(&self) -> bool {
        self.live.borrow().is_some()
    }

    /// Reads the stream without changing it.
    pub fn inspect<R>(&self, f: impl FnOnce(&LiveStream) -> R) -> Option<R> {
        self.live.borrow().as_ref().map(f)
    }

    /// Feeds one input to the stream and performs what it asks for. `None`: no stream here.
    pub fn feed<R>(self: &Rc<Self>, input: impl FnOnce(&mut LiveStream, Timestamp) -> R) -> Option<R> {
        let now = now();
        let (result, outputs, deadline, tell_watches) = {
            let mut slot = self.live.borrow_mut();
            let stream = slot.as_mut()?;
            let result = input(stream, now);
            let outputs: Vec<Output> = std::iter::from_fn(|| stream.poll_output()).collect();
            let tell_watches = !self.watches.borrow().is_empty() && stream.watch().is_some();
            (result, outputs, stream.poll_timer(), tell_watches)
        }; // the borrow ends here, before anything is performed
        if tell_watches {
            self.wake_watches();
        }
        self.perform(outputs, now);
        self.set_timer(deadline, now);
        Some(result)
    }

    /// Registers interest in a ticket's settlement; the future resolves with the outcome the
    /// ticket's type names. Call before the outputs that may settle it are performed, i.e.
    /// inside the same `feed`.
    pub fn await_ticket<T: Awaitable>(&self, ticket: Ticket<T>) -> impl std::future::Future<Output = Result<T, StreamDropped>> {
        let (tx, rx) = oneshot::channel();
        T::waiters(&self.waiting).borrow_mut().insert(ticket, tx);
        async move { rx.await.map_err(|_| StreamDropped) }
    }

    /// A receiver that fires when a cancel reaches this stream.
    pub fn watch_cancel(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.cancel_watchers.borrow_mut().push(tx);
        rx
    }

    /// A receiver that fires once the stream has something to tell a producer's watch (see
    /// [`LiveStream::watch`]), or is dropped here.
    pub fn watch_change(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.watches.borrow_mut().push(tx);
        rx
    }

    fn wake_watches(&self) {
        for tx in self.watches.borrow_mut().drain(..) {
            let _ = tx.send(());
        }
    }

    /// Tells the live stream about a cancel, and everything waiting on one.
    pub fn cancel(self: &Rc<Self>) {
        self.feed(|s, _| s.cancel());
        for tx in self.cancel_watchers.borrow_mut().drain(..) {
            let _ = tx.send(());
        }
    }

    /// Takes a reader's body and writes its first bytes (`preamble`, then the replay).
    pub fn attach_body(self: &Rc<Self>, reader: ReaderId, controller: web_sys::ReadableStreamDefaultController, preamble: &str) {
        let body = Rc::new(ReaderBody::new(controller, self.meter.hold()));
        self.bodies.borrow_mut().insert(reader, Rc::clone(&body));
        self.write_body(reader, &body, preamble, now());
    }

    /// The runtime asks a reader's body for more (the client drained the last write): write
    /// what is queued now, if anything.
    pub fn body_drained(self: &Rc<Self>, reader: ReaderId) {
        let Some(body) = self.bodies.borrow().get(&reader).cloned() else { return };
        body.has_room.set(true);
        self.write_body(reader, &body, "", now());
    }

    /// Writes what is queued for `reader` (after `prefix`) into its body at `now`, unless the
    /// client has not drained the last write yet: then the frames wait, merged, and the body
    /// asks for them when it is drained. Nothing queued parks the reader until the stream
    /// wakes it.
    fn write_reader(self: &Rc<Self>, reader: ReaderId, prefix: &str, now: Timestamp) {
        let Some(body) = self.bodies.borrow().get(&reader).cloned() else { return };
        self.write_body(reader, &body, prefix, now);
    }

    /// [`Self::write_reader`] with the reader's body at hand.
    fn write_body(self: &Rc<Self>, reader: ReaderId, body: &ReaderBody, prefix: &str, now: Timestamp) {
        if prefix.is_empty() && !body.has_room.get() {
            return;
        }
        let (wire, done) = match self.pull(reader, now) {
            Pull::Data { wire, last } if prefix.is_empty() => (wire, last),
            // A shared frame's bytes stay shared: the prefix goes out as a write of its own.
            Pull::Data { wire, last } if wire.shared_frame().is_some() => {
                body.has_room.set(false);
                self.enqueue(body, &Wire::from(prefix.to_owned()));
                (wire, last)
            }
            Pull::Data { wire, last } => (Wire::from(format!("{prefix}{}", wire.as_str())), last),
            Pull::Pending => (Wire::from(prefix.to_owned()), false),
            Pull::Gone => (Wire::from(prefix.to_owned()), true),
        };
        if !wire.is_empty() {
            // Before the write: the runtime may ask for more from inside it.
            body.has_room.set(false);
            self.enqueue(body, &wire);
        }
        if done {
            self.bodies.borrow_mut().remove(&reader);
            let _ = body.controller.close();
        }
    }

    /// Writes `wire` into a reader's body. A frame that goes to several readers is copied out of
    /// wasm memory once, for the first of them, and that one JavaScript copy is written into
    /// every body it goes to (the runtime copies what it sends; nothing writes to it after).
    fn enqueue(&self, body: &ReaderBody, wire: &Wire) {
        // Fails only when the client is gone, which cancels the body and detaches the reader.
        let Some((frame, dialect)) = wire.shared_frame() else {
            let _ = body.controller.enqueue_with_chunk(&js_sys::Uint8Array::from(wire.as_bytes()));
            return;
        };
        if wire.len() >= ALONE_BYTES {
            let mut large = self.large_frames.borrow_mut();
            large.retain(|(f, _, _)| f.strong_count() > 0);
            let held = large.iter().find(|(f, d, _)| *d == dialect && f.upgrade().is_some_and(|f| Rc::ptr_eq(&f, frame)));
            let bytes = match held {
                Some((_, _, bytes)) => bytes.clone(),
                None => {
                    let bytes = js_sys::Uint8Array::from(wire.as_bytes());
                    large.push((Rc::downgrade(frame), dialect, bytes.clone()));
                    bytes
                }
            };
            drop(large); // the runtime may ask for more from inside the write
            let _ = body.controller.enqueue_with_chunk(&bytes);
            return;
        }
        let copy = match self.last_frame.take() {
            Some(copy) if Rc::ptr_eq(&copy.frame, frame) && copy.dialect == dialect => copy,
            _ => FrameCopy { frame: Rc::clone(frame), dialect, bytes: js_sys::Uint8Array::from(wire.as_bytes()) },
        };
        let _ = body.controller.enqueue_with_chunk(&copy.bytes);
        // A write the runtime asked for from inside this one may have kept a newer frame: keep that.
        let newer = self.last_frame.take();
        self.last_frame.set(newer.or(Some(copy)));
    }

    /// Pulls a reader's queued bytes (no outputs come from a pull, so no `feed`). A `Pending`
    /// pull arms a timer for when that reader next needs one (its pace, or its keep-alive):
    /// only its own deadline, not the stream's (which would cost O(readers) on every pull).
    fn pull(self: &Rc<Self>, reader: ReaderId, now: Timestamp) -> Pull {
        let (pull, due) = match self.live.borrow_mut().as_mut() {
            Some(s) => {
                let pull = s.pull(reader, now);
                let due = if pull == Pull::Pending { s.reader_due(reader) } else { None };
                (pull, due)
            }
            None => return Pull::Gone,
        };
        self.arm_timer(due, now);
        pull
    }

    /// Forgets a reader whose client went away. The runtime may cancel a body at any time, even
    /// from inside a write while the stream is borrowed: the slot then detaches it at the
    /// stream's next borrow ([`StreamSlot::detach`]), never leaves it attached.
    pub fn detach(&self, reader: ReaderId) {
        self.bodies.borrow_mut().remove(&reader);
        self.live.detach(reader);
    }

    /// Performs what one input asked for; `now` is the input's time (a reader woken by it is
    /// written at that time).
    fn perform(self: &Rc<Self>, outputs: Vec<Output>, now: Timestamp) {
        for output in outputs {
            match output {
                Output::Store(request) => wasm_bindgen_futures::spawn_local(Rc::clone(self).run_store(request)),
                Output::Wake(reader) => self.write_reader(reader, "", now),
                Output::Settled(settlement) => self.waiting.settle(settlement),
                Output::ArmLease { lease } => wasm_bindgen_futures::spawn_local(Rc::clone(self).arm_lease(lease)),
                Output::DisarmLease { host_token } => {
                    let shell = Rc::clone(self);
                    let awake = self.meter.hold();
                    wasm_bindgen_futures::spawn_local(async move {
                        let _awake = awake;
                        if let Err(e) = shell.lease.disarm(&host_token).await {
                            log("error", "lease_disarm_failed", &shell.stream_id, json!({"error": e.to_string()}));
                        }
                    });
                }
                Output::RenewLease { last_write } => {
                    // The renewal is also when unconfirmed notices are sent again (the alarm
                    // never fires while the stream is alive here).
                    self.feed.retry_now();
                    let shell = Rc::clone(self);
                    let awake = self.meter.hold();
                    wasm_bindgen_futures::spawn_local(async move {
                        let _awake = awake;
                        let result = shell.lease.renew(last_write).await.map_err(|e| e.to_string());
                        if let Err(e) = &result {
                            log("error", "lease_renewal_failed", &shell.stream_id, json!({"error": e}));
                        }
                        if last_write.is_some() {
                            shell.feed(|s, _| s.handle_last_write_written(result));
                        }
                    });
                }
                Output::ForgetLastWrite => {
                    let shell = Rc::clone(self);
                    let awake = self.meter.hold();
                    wasm_bindgen_futures::spawn_local(async move {
                        let _awake = awake;
                        let result = shell.lease.write_keys(&KeyUpdate::forget_last_write()).await.map_err(|e| e.to_string());
                        if let Err(e) = &result {
                            log("error", "last_write_not_forgotten", &shell.stream_id, json!({"error": e}));
                        }
                        shell.feed(|s, _| s.handle_last_write_written(result));
                    });
                }
                Output::Event(event) => self.log_event(event),
                Output::Retired => self.retire(),
            }
        }
    }

    async fn arm_lease(self: Rc<Self>, lease: crate::engine::host::object_storage::StoredStream) {
        let _awake = self.meter.hold();
        let result = self.lease.arm(&lease).await.map_err(|e| e.to_string());
        if let Err(e) = &result {
            log("error", "lease_failed", &self.stream_id, json!({"error": e}));
        }
        self.feed(|s, now| s.handle_lease_armed(result, now));
    }

    async fn run_store(self: Rc<Self>, request: StoreRequest) {
        let _awake = self.meter.hold();
        let answer = self.run_bounded(request).await;
        self.feed(|s, now| s.handle_store(answer, now));
    }

    /// Performs one store request, answered as failed (`MayHaveCommitted`: it may still land)
    /// when the store gives no answer within `STORE_TIMEOUT_MS`; a later reply is dropped, and
    /// the operation is retried like any failure.
    pub async fn run_bounded(&self, request: StoreRequest) -> crate::engine::host::store::StoreAnswer {
        let limit = self.store_timeout;
        let (kind, timed_out) = (request.kind(), request.failed(StoreError::TimedOut(limit)));
        match with_timeout(limit, self.store.run(&self.stream_id, request)).await {
            Some(answer) => answer,
            None => {
                log("error", "store_timeout", &self.stream_id, json!({"op": format!("{kind:?}"), "timeoutMs": limit.0}));
                timed_out
            }
        }
    }

    /// Drops the stream after its linger window (or a refused open). The lease alarm that
    /// follows finds the row sealed (or repairs it, after a seal that could not commit).
    fn retire(&self) {
        self.live.take();
        self.last_frame.take();
        self.wake_watches(); // a watch held now reads how the row ended
        let bodies: Vec<_> = self.bodies.borrow_mut().drain().collect();
        for (_, body) in bodies {
            let _ = body.controller.close();
        }
    }

    /// Arms one timeout task for the stream's next deadline, unless one already fires first.
    fn arm_timer(self: &Rc<Self>, deadline: Option<Timestamp>, now: Timestamp) {
        let Some(at) = deadline else { return };
        if self.timer.borrow().as_ref().is_some_and(|(armed, _)| *armed <= at) {
            return;
        }
        self.cancel_timer();
        let (cancel, registration) = futures::future::AbortHandle::new_pair();
        *self.timer.borrow_mut() = Some((at, cancel));
        let shell = Rc::clone(self);
        // A pending timer keeps the object from hibernating: billed awake until it fires.
        let awake = self.meter.hold();
        wasm_bindgen_futures::spawn_local(async move {
            let _awake = awake;
            let delay = worker::Delay::from(Duration::from_millis(at.0.saturating_sub(now.0)));
            if futures::future::Abortable::new(delay, registration).await.is_err() {
                return; // cleared: the `Delay` dropped with it clears the runtime's timeout
            }
            if shell.timer.borrow().as_ref().is_some_and(|(armed, _)| *armed == at) {
                shell.timer.borrow_mut().take();
            }
            shell.feed(|s, now| s.handle_timeout(now));
        });
    }

    /// The timer for the stream's next deadline: armed as [`Self::arm_timer`] does, and cleared
    /// when the stream wants none (an ended stream: nothing keeps its object awake).
    fn set_timer(self: &Rc<Self>, deadline: Option<Timestamp>, now: Timestamp) {
        match deadline {
            Some(_) => self.arm_timer(deadline, now),
            None => self.cancel_timer(),
        }
    }

    fn cancel_timer(&self) {
        if let Some((_, cancel)) = self.timer.borrow_mut().take() {
            cancel.abort();
        }
    }

    /// Tells the installed hook, if any. Runs while performing outputs, never with the state
    /// borrowed; a panic is contained where the target unwinds (see [`crate::engine::host::hook`]).
    pub fn notify(&self, notice: StreamNotice) {
        let Some(h) = &self.hook else { return };
        if let Err(e) = hook::notify(h.as_ref(), &notice) {
            log("error", "event_hook_panicked", &self.stream_id, json!({"error": e.to_string(), "notice": format!("{notice:?}")}));
        }
    }

    /// Logs a stream event, then tells the hook its notices (a hook that aborts the instance
    /// cannot take the log line with it).
    fn log_event(&self, event: StreamEvent) {
        let notices = StreamNotice::of(&self.stream_id, &event);
        let id = &self.stream_id;
        match event {
            StreamEvent::Opened => log("info", "opened", id, json!({})),
            StreamEvent::OpenFailed(e) => log("warn", "open_failed", id, json!({"error": e.to_string()})),
            StreamEvent::CheckpointAttemptFailed { from, to, attempt, will_retry, error } => log(
                "warn",
                "checkpoint_attempt_failed",
                id,
                json!({
                    "from": from,
                    "to": to,
                    "attempt": attempt,
                    "willRetry": will_retry,
                    "error": error.to_string(),
                    "mayHaveCommitted": error.store_error().map(StoreError::may_have_committed),
                }),
            ),
            StreamEvent::CheckpointFailed { from, to, error } => {
                log("error", "checkpoint_failed", id, json!({"from": from, "to": to, "error": error.to_string()}))
            }
            StreamEvent::Sealed { status, seq, durable_seq, shortfall, cause } => {
                if let Some(cause) = cause.filter(|_| status == crate::engine::wire::frame::EndStatus::Interrupted) {
                    log("warn", "interrupted", id, json!({"durableSeq": durable_seq, "cause": format!("{cause:?}")}));
                }
                self.feed.sealed(self.inspect(LiveStream::format), status, durable_seq);
                log(
                    if shortfall.is_some() { "error" } else { "info" },
                    "sealed",
                    id,
                    json!({"status": status, "seq": seq, "durableSeq": durable_seq, "shortfall": shortfall.map(|s| s.to_string())}),
                )
            }
            StreamEvent::SealRepaired { status, durable_seq } => {
                log("warn", "seal_repaired", id, json!({"status": status, "durableSeq": durable_seq}))
            }
            StreamEvent::ReaderDropped { reader, reason } => {
                log("warn", "reader_dropped", id, json!({"reader": reader, "reason": format!("{reason:?}")}))
            }
        }
        for notice in notices {
            self.notify(notice);
        }
    }
}

/// A stream given this instance's own jitter: objects backing off from one busy database spread
/// their retries instead of returning together.
fn seeded(mut stream: LiveStream) -> LiveStream {
    stream.seed_jitter(crate::edge::runtime::random_u64());
    stream
}
