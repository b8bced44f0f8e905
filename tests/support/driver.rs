//! Drives one `LiveStream` the way the Worker shell does (feed an input, drain outputs, run
//! store requests), but against SQLite and in virtual time, one step at a time.

use super::{Fault, SqliteDb, Store};
use rindle_streams::engine::durable::Tables;
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::object_storage::{KeyUpdate, StoredStream};
use rindle_streams::engine::host::store::{Checkpoint, MarkOutcome, MarkStreaming, OpKind, SealWrite, StoreError, StoreRequest};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::lease::{Holding, Release, Renewal};
use rindle_streams::engine::live::{
    Dialect, FlushOutcome, LiveStream, OpenOutcome, Output, Producer, Pull, PushError, PushReceipt, ReaderId, Revivals, SealOutcome,
    Settlement, StreamEvent, Ticket,
};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::Frame;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

pub const STREAM: &str = "m1";
pub const TOKEN: &str = "host-A";

pub struct Driver {
    pub stream: LiveStream,
    pub db: Rc<SqliteDb>,
    /// The mapped tables on `db`, which answer the stream's requests.
    pub tables: Tables,
    pub now: Timestamp,
    pub pending: VecDeque<StoreRequest>,
    /// Every settlement, by ticket id.
    pub settled: HashMap<u64, Settlement>,
    pub events: Vec<StreamEvent>,
    pub wakes: Vec<ReaderId>,
    pub retired: bool,
    /// The stream asked for its lease to be armed with these keys, and awaits the answer.
    pub lease_to_arm: Option<StoredStream>,
    /// The token the lease was armed with (what the object stores for its alarm); `None` again
    /// once a refused open undid it.
    pub lease_token: Option<String>,
    /// The object's storage as the stream's outputs left it (the lease's keys, its last write).
    pub storage: StoredStream,
    /// The tokens whose arming the stream asked to undo.
    pub disarmed: Vec<String>,
    /// How many times the stream renewed its lease.
    pub renewals: u32,
    /// How many times the stream stored the producer's last write, and deleted it.
    pub last_write_puts: u32,
    pub last_write_deletes: u32,
    /// How many of the next writes of the last write (a put or a delete) fail: not applied,
    /// answered with an error.
    pub failing_last_writes: u32,
}

impl Driver {
    /// A stream opened on a fresh row of a fresh database, with every open step answered.
    pub fn open(cfg: StreamConfig) -> Self {
        let db = SqliteDb::new();
        db.insert_message(STREAM);
        let mut d = Self::opening(db, cfg, TOKEN);
        d.answer_all();
        d
    }

    /// A stream whose open has been requested but not yet answered.
    pub fn opening(db: impl Into<Rc<SqliteDb>>, cfg: StreamConfig, token: &str) -> Self {
        let (stream, _ticket) =
            LiveStream::open(STREAM, cfg, Producer { host_token: token.into(), meta: None, chat: None, id: None }, Timestamp(0));
        Self::with_stream(stream, db)
    }

    /// Drives a stream made elsewhere.
    pub fn with_stream(stream: LiveStream, db: impl Into<Rc<SqliteDb>>) -> Self {
        let db = db.into();
        let mut d = Self {
            stream,
            tables: super::tables(&db),
            db,
            now: Timestamp(0),
            pending: VecDeque::new(),
            settled: HashMap::new(),
            events: Vec::new(),
            wakes: Vec::new(),
            retired: false,
            lease_to_arm: None,
            lease_token: None,
            storage: StoredStream::default(),
            disarmed: Vec::new(),
            renewals: 0,
            last_write_puts: 0,
            last_write_deletes: 0,
            failing_last_writes: 0,
        };
        d.drain();
        d
    }

    pub fn drain(&mut self) {
        let mut last_writes = Vec::new();
        while let Some(o) = self.stream.poll_output() {
            match o {
                Output::Store(r) => self.pending.push_back(r),
                Output::Wake(r) => self.wakes.push(r),
                Output::Settled(s) => {
                    let id = ticket_id(&s);
                    assert!(self.settled.insert(id, s).is_none(), "ticket {id} settled twice");
                }
                Output::Event(e) => self.events.push(e),
                Output::Retired => self.retired = true,
                Output::ArmLease { lease } => {
                    assert!(self.lease_to_arm.replace(lease).is_none(), "a second arm before the first was answered");
                }
                Output::DisarmLease { host_token } => {
                    if self.lease_token.as_deref() == Some(host_token.as_str()) {
                        self.lease_token = None; // the object held nothing before this open
                        self.storage = StoredStream::default();
                    }
                    self.disarmed.push(host_token);
                }
                Output::RenewLease { last_write } => {
                    self.renewals += 1;
                    if let Some(at) = last_write {
                        self.last_write_puts += 1;
                        last_writes.push(self.write_last_write(&KeyUpdate::last_write(at)));
                    }
                }
                Output::ForgetLastWrite => {
                    self.last_write_deletes += 1;
                    last_writes.push(self.write_last_write(&KeyUpdate::forget_last_write()));
                }
            }
        }
        if !last_writes.is_empty() {
            for result in last_writes {
                self.stream.handle_last_write_written(result);
            }
            self.drain();
        }
    }

    /// Applies a write of the last write to the storage, unless it is one of the failing ones.
    fn write_last_write(&mut self, update: &KeyUpdate) -> Result<(), String> {
        if self.failing_last_writes > 0 {
            self.failing_last_writes -= 1;
            return Err("injected: the object's storage failed".into());
        }
        self.storage.apply(update);
        Ok(())
    }

    /// The next store operation the stream asked for, without answering it.
    pub fn peek(&self) -> Option<&StoreRequest> {
        self.pending.front()
    }

    /// Which operation the next request is.
    pub fn peek_kind(&self) -> Option<OpKind> {
        self.peek().map(StoreRequest::kind)
    }

    /// The next request, if it is a checkpoint.
    pub fn peek_checkpoint(&self) -> Option<&Checkpoint> {
        match self.peek() {
            Some(StoreRequest::Checkpoint(r)) => Some(r.op()),
            _ => None,
        }
    }

    /// The next request, if it is a mark.
    pub fn peek_mark(&self) -> Option<&MarkStreaming> {
        match self.peek() {
            Some(StoreRequest::MarkStreaming(r)) => Some(r.op()),
            _ => None,
        }
    }

    /// The next request, if it is a seal.
    pub fn peek_seal(&self) -> Option<&SealWrite> {
        match self.peek() {
            Some(StoreRequest::Seal(r)) => Some(r.op()),
            _ => None,
        }
    }

    /// Answers the oldest pending store request with `fault` injected; returns which it was.
    pub fn answer(&mut self, fault: Fault) -> OpKind {
        let req = self.pending.pop_front().expect("a pending store request");
        let kind = req.kind();
        let answer = super::answer(&self.tables, STREAM, req, fault);
        self.stream.handle_store(answer, self.now);
        self.drain();
        kind
    }

    /// Fails the oldest pending store request with `error`, whatever the store would say (a
    /// custom sink's failures); returns which it was.
    pub fn fail_next(&mut self, error: StoreError) -> OpKind {
        let req = self.pending.pop_front().expect("a pending store request");
        let kind = req.kind();
        self.stream.handle_store(req.failed(error), self.now);
        self.drain();
        kind
    }

    /// Answers the oldest pending request, a mark, as a custom sink would: with `outcome`.
    pub fn answer_mark(&mut self, outcome: MarkOutcome) {
        let Some(StoreRequest::MarkStreaming(req)) = self.pending.pop_front() else { panic!("expected a pending mark") };
        self.stream.handle_store(req.answer(Ok(outcome)), self.now);
        self.drain();
    }

    /// Answers every pending request truthfully (the lease's arming included), including
    /// those they lead to.
    pub fn answer_all(&mut self) {
        while !self.pending.is_empty() || self.lease_to_arm.is_some() {
            if self.lease_to_arm.is_some() {
                self.arm_lease(Ok(()));
            } else {
                self.answer(Fault::None);
            }
        }
    }

    /// Answers the stream's request to arm its lease (the object's storage and alarm).
    pub fn arm_lease(&mut self, result: Result<(), String>) {
        let lease = self.lease_to_arm.take().expect("the stream asked for its lease");
        if result.is_ok() {
            self.lease_token = lease.host_token.clone();
            self.storage.apply(&KeyUpdate::arming(&lease));
        }
        self.stream.handle_lease_armed(result, self.now);
        self.drain();
    }

    /// The lease alarm fires while this object holds its stream (as it holds it now): a run of
    /// the core's alarm, as the shell drives it; a seal it asks to retry is retried at once.
    pub fn lease_alarm(&mut self) -> Result<Release, Renewal> {
        let holding = self.stream.holding();
        let run = super::run_alarm(
            &mut Revivals::default(),
            &self.tables,
            &self.cfg(),
            &mut self.storage,
            false,
            holding,
            "fresh-alarm",
            self.now,
            &mut std::iter::empty(),
        )
        .expect("no step dies");
        if run.retry_seal {
            self.stream.retry_seal(self.now);
            self.drain();
        }
        run.ended
    }

    /// The object is reset (its stream and every request in flight gone, its storage kept) and
    /// the lease alarm fires in the fresh instance: it runs the revival, and a stream it rebuilds
    /// is the one this driver drives from then on.
    pub fn alarm_after_reset(&mut self, cfg: &StreamConfig) -> Result<Release, Renewal> {
        self.pending.clear();
        self.settled.clear(); // the lost instance's requests died with it; tickets number anew
        let run = super::run_alarm(
            &mut Revivals::default(),
            &self.tables,
            cfg,
            &mut self.storage,
            false,
            Holding::Nothing,
            "fresh-1",
            self.now,
            &mut std::iter::empty(),
        )
        .expect("no step dies");
        if let Some(stream) = run.revived {
            self.stream = stream;
            self.retired = false;
            self.drain();
        }
        run.ended
    }

    fn cfg(&self) -> StreamConfig {
        StreamConfig { format: self.stream.format(), ..StreamConfig::default() }
    }

    /// Moves virtual time forward by `ms` milliseconds, firing every timer due on the way in order.
    pub fn advance(&mut self, ms: u64) {
        let target = self.now + Millis(ms);
        while let Some(t) = self.stream.poll_timeout().filter(|&t| t <= target) {
            self.now = self.now.max(t);
            self.stream.handle_timeout(self.now);
            self.drain();
        }
        self.now = target;
    }

    pub fn push(&mut self, text: &str) -> PushReceipt {
        let r = self.stream.push(text, self.now).expect("push accepted");
        self.drain();
        r
    }

    /// A piece of a `ui` stream's body, as it arrived.
    pub fn push_ndjson(&mut self, piece: &[u8]) -> Result<PushReceipt, PushError> {
        let r = self.stream.push_ndjson(piece, self.now);
        self.drain();
        r
    }

    pub fn flush(&mut self) -> Ticket<FlushOutcome> {
        let t = self.stream.flush(self.now);
        self.drain();
        t
    }

    pub fn close(&mut self) -> Ticket<SealOutcome> {
        let t = self.stream.close(self.now);
        self.drain();
        t
    }

    pub fn subscribe(&mut self, from: Offset) -> ReaderId {
        let r = self.stream.subscribe(from);
        self.drain();
        r
    }

    pub fn subscribe_ui(&mut self, from: Offset) -> ReaderId {
        let r = self.stream.subscribe_as(Dialect::Ui, from);
        self.drain();
        r
    }

    /// Everything queued for a `/ui` reader, parsed back from its SSE bytes; `None` when
    /// nothing is queued.
    pub fn read_ui(&mut self, reader: ReaderId) -> Option<Vec<UiEvent>> {
        let events = match self.stream.pull(reader, self.now) {
            Pull::Data { wire, .. } => Some(parse_ui_sse(&wire)),
            Pull::Pending | Pull::Gone => None,
        };
        self.drain();
        events
    }

    /// Everything queued for `reader`, parsed back from its SSE bytes.
    pub fn read(&mut self, reader: ReaderId) -> Vec<Frame> {
        let frames = match self.stream.pull(reader, self.now) {
            Pull::Data { wire, .. } => parse_sse(&wire),
            Pull::Pending | Pull::Gone => vec![],
        };
        self.drain();
        frames
    }

    /// How the request of ticket `t` settled, if it did.
    pub fn outcome<T: Settles>(&self, t: Ticket<T>) -> Option<&T> {
        T::of(self.settled.get(&t.id())?)
    }

    pub fn appends_pending(&self) -> usize {
        self.pending.iter().filter(|r| r.kind() == OpKind::Checkpoint).count()
    }
}

/// The ticket id a settlement answers.
pub fn ticket_id(s: &Settlement) -> u64 {
    match s {
        Settlement::Opened(t, _) => t.id(),
        Settlement::Flushed(t, _) => t.id(),
        Settlement::Sealed(t, _) => t.id(),
    }
}

/// An outcome a ticket settles with, read out of its settlement.
pub trait Settles: Sized {
    fn of(s: &Settlement) -> Option<&Self>;
}

impl Settles for OpenOutcome {
    fn of(s: &Settlement) -> Option<&Self> {
        match s {
            Settlement::Opened(_, o) => Some(o),
            _ => None,
        }
    }
}

impl Settles for FlushOutcome {
    fn of(s: &Settlement) -> Option<&Self> {
        match s {
            Settlement::Flushed(_, o) => Some(o),
            _ => None,
        }
    }
}

impl Settles for SealOutcome {
    fn of(s: &Settlement) -> Option<&Self> {
        match s {
            Settlement::Sealed(_, o) => Some(o),
            _ => None,
        }
    }
}

/// Parses SSE events back into frames, checking the `id:` rule on the way.
pub fn parse_sse(wire: &str) -> Vec<Frame> {
    let mut frames = Vec::new();
    for event in wire.split("\n\n").filter(|e| !e.is_empty()) {
        let mut id = None;
        let mut data = None;
        for line in event.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(Offset(v.parse().unwrap()));
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(v);
            }
        }
        let frame: Frame = serde_json::from_str(data.expect("a data line")).unwrap();
        assert_eq!(id, frame.resume_point(), "id line of {frame:?}");
        frames.push(frame);
    }
    frames
}

/// One event of the `/ui` wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiEvent {
    pub id: Option<Offset>,
    /// The event carries `id: done`: the first event of an ending (not an offset).
    pub ending: bool,
    pub data: String,
}

impl UiEvent {
    /// A line of the text, with the offset just after it.
    pub fn line(id: Offset, data: &str) -> Self {
        Self { id: Some(id), ending: false, data: data.to_owned() }
    }

    /// The first event of an ending: `id: done`.
    pub fn ending(data: &str) -> Self {
        Self { id: None, ending: true, data: data.to_owned() }
    }

    /// An added event after an ending's first (`[DONE]` after an ending chunk): no `id:`.
    pub fn added(data: &str) -> Self {
        Self { id: None, ending: false, data: data.to_owned() }
    }
}

/// Parses `/ui` SSE bytes: each event is at most one `id:` line and exactly one `data:` line.
pub fn parse_ui_sse(wire: &str) -> Vec<UiEvent> {
    let mut events = Vec::new();
    for event in wire.split("\n\n").filter(|e| !e.is_empty()) {
        let mut id = None;
        let mut ending = false;
        let mut data = None;
        for line in event.split('\n') {
            if line == "id: done" {
                assert!(!ending && id.is_none(), "two id lines in {event:?}");
                ending = true;
            } else if let Some(v) = line.strip_prefix("id: ") {
                assert!(!ending && id.replace(Offset(v.parse().unwrap())).is_none(), "two id lines in {event:?}");
            } else if let Some(v) = line.strip_prefix("data: ") {
                assert!(data.replace(v.to_owned()).is_none(), "two data lines in {event:?}");
            } else {
                panic!("unexpected line {line:?} in {event:?}");
            }
        }
        events.push(UiEvent { id, ending, data: data.expect("a data line") });
    }
    events
}
