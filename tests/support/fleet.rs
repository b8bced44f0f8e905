//! Many answers at once on modelled databases, in virtual time: the native load harness
//! (`bench/dbload.rs`) and the load simulator (`tests/load_simulator.rs`) run this.
//!
//! Each answer is what the Worker does for one: the app inserts the message row (a write of its
//! own), the producer opens the stream, writes a token at a model's pace, flushes once where the
//! plan says, and closes. Every answer's stream is the engine's own [`LiveStream`], driven as the
//! shell drives it (feed one input, drain its outputs, perform them). Its store requests go to
//! its database's [`DatabaseModel`] (one query at a time on D1, a pool of connections on
//! Postgres, a bounded queue answering the database's own overload error), which says when each
//! runs; at that moment its statements run on a real database (SQLite, or PostgreSQL), and the
//! answer reaches the stream when the model says it is back, or as a timeout after
//! `STORE_TIMEOUT_MS` (the late answer is then ignored, as the shell ignores it). The object's own
//! storage (the lease) answers at once: it is not the database. Answers are spread over the
//! databases by a rule of the plan's (`i % databases`).
//!
//! Time is in microseconds here; the engine sees milliseconds.

use super::Store;
use rindle_streams::engine::durable::model::{Admission, Capacity, DatabaseModel, Work};
use rindle_streams::engine::durable::{Row, SqlExecutor, Statement, Tables};
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::object_storage::{kept_at_release, KeyUpdate, StoredStream};
use rindle_streams::engine::host::store::{OpId, OpKind, StoreAnswer, StoreError, StoreFuture, StoreRequest};
use rindle_streams::engine::host::time::Timestamp;
use rindle_streams::engine::live::lease::{AlarmOutput, Holding, LeaseAlarm, Revived};
use rindle_streams::engine::live::{
    LiveStream, Output, Producer, Pull, ReaderId, Revival, RevivalEnd, RevivalOutput, Settlement, StreamEvent, FIRST_EPOCH,
};
use rindle_streams::engine::text::utf16::{self, Offset};
use rindle_streams::engine::wire::frame::{EndStatus, Frame};
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::rc::Rc;

/// Tokens of a model's answer: words, punctuation, emoji (one with a skin tone, one a ZWJ
/// sequence), CJK: about 4.4 UTF-16 units a token, as BENCHMARKS' cost runs.
const TOKENS: &[&str] = &["The ", "answer", " is", " 42", ", ", "and ", "日本語", " 😀", " 👍🏽", "👩‍💻", ".\n", " streaming"];

/// When the answers start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// Every answer starts at a random moment of the first `ramp_ms`: with answers of at least
    /// `ramp_ms`, all of them stream at once for a while.
    Wave { ramp_ms: u64 },
    /// `answers` slots, each starting a new answer as soon as its last one ended, for
    /// `for_ms`: the same number streaming at once all along, opens and seals included.
    Steady { for_ms: u64 },
}

/// What a fleet run does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub answers: usize,
    /// Databases (shards): answer `i` lives on database `i % databases`.
    pub databases: usize,
    pub arrival: Arrival,
    pub tokens_per_second: u64,
    /// Each answer's length, drawn uniformly from this range.
    pub answer_ms: (u64, u64),
    /// The share of answers whose producer flushes once, at a random token.
    pub flush_share: f64,
    pub stream: StreamConfig,
    pub capacity: Capacity,
    /// Lag samples are taken this often, of every answer streaming.
    pub sample_ms: u64,
    pub seed: u64,
    /// The share of answers whose object is reset once mid-answer: the lease alarm's revival
    /// rebuilds the stream (its row reads and claim queue in the model like any call), and the
    /// producer resumes and re-sends what was not durable.
    pub resets: f64,
    /// Readers per answer, pulling after every token (they check contract S, and that the live
    /// text reached them whatever the database was doing).
    pub readers: usize,
    /// Check contract P after every call that ran, and the endings (the load simulator); a
    /// violation panics naming the seed.
    pub checked: bool,
}

impl Plan {
    /// The plan of the curve: answers at 30 tokens a second for 20-60 s, the wave arriving over
    /// 20 s (so at 20 s every answer is streaming), a third of them flushing once, on one D1
    /// database of `write_ms` a write.
    pub fn curve(answers: usize, write_ms: f64, stream: StreamConfig, seed: u64) -> Self {
        Self {
            answers,
            databases: 1,
            arrival: Arrival::Wave { ramp_ms: 20_000 },
            tokens_per_second: 30,
            answer_ms: (20_000, 60_000),
            flush_share: 0.33,
            stream,
            capacity: Capacity::d1(write_ms),
            sample_ms: 250,
            seed,
            resets: 0.0,
            readers: 0,
            checked: false,
        }
    }
}

/// splitmix64, seeded by the plan.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn between(&mut self, (lo, hi): (u64, u64)) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 + f64::EPSILON <= p
    }
}

/// Counts the statements an executor runs (a batch's each, a query one).
pub struct Counting {
    pub inner: Rc<dyn SqlExecutor>,
    pub statements: Cell<u64>,
}

impl Counting {
    fn count(&self, statements: usize) {
        self.statements.set(self.statements.get() + statements as u64);
    }
}

impl SqlExecutor for Counting {
    fn batch<'a>(&'a self, op: OpKind, statements: &'a [Statement]) -> StoreFuture<'a, Vec<u64>> {
        self.count(statements.len());
        self.inner.batch(op, statements)
    }
    fn query<'a>(&'a self, op: OpKind, statement: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        self.count(1);
        self.inner.query(op, statement)
    }
    fn batch_then_query<'a>(&'a self, op: OpKind, writes: &'a [Statement], read: &'a Statement) -> StoreFuture<'a, Vec<Row>> {
        self.count(writes.len() + 1);
        self.inner.batch_then_query(op, writes, read)
    }
}

/// One database: its model, and the real database behind it.
pub struct Shard {
    pub model: DatabaseModel,
    pub db: Rc<dyn Store>,
    pub tables: Tables,
    pub statements: Rc<Counting>,
}

impl Shard {
    /// `db` (emptied) behind a model of `capacity`.
    pub fn new<D: Store + SqlExecutor + 'static>(db: D, capacity: Capacity) -> Self {
        db.reset();
        let db = Rc::new(db);
        let statements = Rc::new(Counting { inner: Rc::clone(&db) as Rc<dyn SqlExecutor>, statements: Cell::new(0) });
        let tables = Tables::new(Rc::clone(&statements) as Rc<dyn SqlExecutor>, db.sql().clone());
        Self { model: DatabaseModel::new(capacity), db, tables, statements }
    }
}

/// How an answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Sealed `complete`, the close answered 200.
    Complete,
    /// The open was refused or failed: the answer never started.
    OpenFailed,
    /// The close answered 503: the seal could not commit.
    CloseFailed,
    /// Sealed anything but `complete` (`interrupted`, `error`).
    Interrupted,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Stage {
    /// The app inserts the message row (retried as an app would when the database turns it away).
    Inserting,
    Opening,
    Producing,
    Closing,
    Done,
}

/// Who a store call was sent for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Stream,
    /// The lease alarm's revival, rebuilding a stream a reset lost.
    Revival,
}

/// A reader of an answer, as a client holds it: the text it has, from the durable text it
/// joined at and the chunks it got.
struct Reader {
    id: ReaderId,
    text: String,
    /// Connected to the instance now holding the stream.
    connected: bool,
    /// The `end` frame came: its length.
    ended: Option<Offset>,
}

/// One answer: the producer's side, its stream, and its object's storage.
struct Answer {
    id: String,
    /// The slot it fills (a steady arrival starts the next answer in the same slot).
    slot: usize,
    shard: usize,
    stage: Stage,
    stream: Option<LiveStream>,
    /// The object's instance: a reset starts another, and the answers meant for the lost one
    /// are dropped (its calls already admitted still run: late commits).
    generation: u32,
    /// What the object's storage holds for the lease.
    storage: StoredStream,
    /// Calls admitted and not yet run.
    waiting: HashMap<OpId, (Caller, StoreRequest)>,
    tokens_left: u64,
    /// Flush once this many tokens are left; reset the object once this many are left.
    flush_at: Option<u64>,
    reset_at: Option<u64>,
    /// The producer lost its stream to a reset and waits for the rebuilt one to resume.
    lost: bool,
    epoch: u64,
    produced: String,
    /// Each push's end and when it was produced (µs), until it is durable: the lag.
    undurable: VecDeque<(Offset, u64)>,
    timer_at: Option<u64>,
    insert_failures: u32,
    /// When the open, the flush and the close were asked (each is asked at most once).
    open_since: Option<u64>,
    flush_since: Option<u64>,
    close_since: Option<u64>,
    ending: Option<Ending>,
    alarm: Option<(LeaseAlarm, Holding)>,
    revival: Option<Revival>,
    readers: Vec<Reader>,
    /// The longest durable text seen (contract P: it never shrinks).
    durable_high: Offset,
}

#[derive(Debug)]
enum Event {
    /// A new answer starts in a slot.
    Start {
        slot: usize,
    },
    /// The app sends its insert of the row.
    Insert(usize),
    /// The app's insert is answered: done (`ok`), or turned away.
    Inserted {
        answer: usize,
        ok: bool,
    },
    Token(usize),
    Timer(usize),
    /// The object's storage took the lease (of that instance).
    LeaseArmed {
        answer: usize,
        generation: u32,
    },
    /// The lease alarm fires in the answer's object.
    LeaseAlarm(usize),
    /// The object is reset: its instance and what it held in memory are gone.
    Reset(usize),
    /// The producer resumes the rebuilt stream.
    Resume(usize),
    /// A call's turn on the database: its statements run now.
    Run {
        answer: usize,
        op: OpId,
        generation: u32,
        answered_us: u64,
    },
    /// An answer reaches whoever asked, if that instance still lives.
    Answered {
        answer: usize,
        generation: u32,
        caller: Caller,
        reply: StoreAnswer,
    },
    Sample,
}

struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub answers: usize,
    pub databases: usize,
    /// The most answers streaming at once.
    pub peak_streaming: usize,
    pub complete: usize,
    pub open_failed: usize,
    pub close_failed: usize,
    pub interrupted: usize,
    /// Rows still `streaming` once every answer ended and every lease alarm ran.
    pub left_streaming: usize,
    /// Answers whose row does not hold exactly the text produced (a complete one), or a prefix
    /// of it (any other).
    pub text_mismatches: usize,
    pub flushes: usize,
    pub flushes_failed: usize,
    /// The age of the oldest character produced and not yet durable, sampled (seconds).
    pub lag_p50_s: f64,
    pub lag_p99_s: f64,
    pub lag_max_s: f64,
    pub flush_p50_ms: f64,
    pub flush_p99_ms: f64,
    pub close_p50_ms: f64,
    pub close_p99_ms: f64,
    pub open_p99_ms: f64,
    /// Resets, and how long from each to the rebuilt stream (the revival through the queue).
    pub resets: usize,
    pub revival_p99_ms: f64,
    /// Per database, averaged from the start to the last answer's end (busy time over that is
    /// the utilization; a lease alarm's calls after it count, so it can exceed 100%).
    pub statements_per_s: f64,
    pub writes_per_s: f64,
    pub reads_per_s: f64,
    pub utilization: f64,
    pub turned_away: u64,
    pub deepest_queue: usize,
    pub longest_wait_ms: f64,
    pub checkpoints_per_answer: f64,
    pub checkpoint_failures: u64,
    pub app_insert_retries: u64,
    /// The cadence's stretch, over the lag samples.
    pub mean_stretch: f64,
    pub max_stretch: f64,
    pub virtual_s: f64,
    /// Every `sample_ms`: what the fleet looked like then.
    #[serde(skip)]
    pub timeline: Vec<Moment>,
}

/// The fleet at one sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct Moment {
    pub at_s: f64,
    pub streaming: usize,
    pub mean_stretch: f64,
    /// The stretch nine in ten streams are at or below.
    pub p90_stretch: f64,
    pub max_lag_s: f64,
    pub mean_lag_s: f64,
    /// Calls waiting on the first database.
    pub queued: usize,
    /// Writes the first database completed since the previous sample, a second.
    pub writes_per_s: f64,
}

/// A fleet in virtual time (see the module docs).
pub struct Fleet {
    plan: Plan,
    shards: Vec<Shard>,
    answers: Vec<Answer>,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    now: u64,
    rng: Rng,
    lags: Vec<f64>,
    stretches: Vec<f64>,
    flush_ms: Vec<f64>,
    close_ms: Vec<f64>,
    open_ms: Vec<f64>,
    revival_ms: Vec<f64>,
    /// When each reset answer's object was reset (µs), until its stream is rebuilt.
    reset_since: HashMap<usize, u64>,
    flushes_failed: usize,
    checkpoints: u64,
    checkpoint_failures: u64,
    app_insert_retries: u64,
    peak_streaming: usize,
    streaming: usize,
    /// When the last answer ended (µs): rates are over the time answers were running, not
    /// the lease alarms' tail after them.
    last_ending: u64,
    timeline: Vec<Moment>,
    writes_before: u64,
}

impl Fleet {
    /// A fleet of `plan`, on these shards (one per database of the plan).
    pub fn new(plan: Plan, shards: Vec<Shard>) -> Self {
        assert_eq!(shards.len(), plan.databases, "a shard per database");
        let mut fleet = Self {
            rng: Rng::new(plan.seed),
            plan,
            shards,
            answers: vec![],
            queue: BinaryHeap::new(),
            seq: 0,
            now: 0,
            lags: vec![],
            stretches: vec![],
            flush_ms: vec![],
            close_ms: vec![],
            open_ms: vec![],
            revival_ms: vec![],
            reset_since: HashMap::new(),
            flushes_failed: 0,
            checkpoints: 0,
            checkpoint_failures: 0,
            app_insert_retries: 0,
            peak_streaming: 0,
            streaming: 0,
            last_ending: 0,
            timeline: vec![],
            writes_before: 0,
        };
        for slot in 0..fleet.plan.answers {
            let spread = match fleet.plan.arrival {
                Arrival::Wave { ramp_ms } => ramp_ms,
                // Staggered over one answer's shortest length, so the slots do not end together.
                Arrival::Steady { .. } => fleet.plan.answer_ms.0,
            };
            let at = fleet.rng.below(spread * 1000);
            fleet.schedule(at, Event::Start { slot });
        }
        fleet.schedule(0, Event::Sample);
        fleet
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled { at: at.max(self.now), seq: self.seq, event }));
    }

    fn ms(&self) -> Timestamp {
        Timestamp(self.now / 1000)
    }

    /// A contract broke: the seed replays it.
    fn fail(&self, a: usize, what: String) -> ! {
        panic!("seed {}: answer {} at {:.3} s: {what}", self.plan.seed, self.answers[a].id, self.now as f64 / 1e6)
    }

    /// `full` µs spread over `[full / 2, full]`.
    fn jittered(&mut self, full: u64) -> u64 {
        full / 2 + self.rng.below(full / 2 + 1)
    }

    /// Runs until every answer ended and every lease alarm released; the report.
    pub fn run(mut self) -> Report {
        while let Some(Reverse(Scheduled { at, event, .. })) = self.queue.pop() {
            self.now = at;
            match event {
                Event::Start { slot } => self.start(slot),
                Event::Insert(a) => self.insert_row(a),
                Event::Inserted { answer, ok } => self.inserted(answer, ok),
                Event::Token(a) => self.token(a),
                Event::Timer(a) => {
                    self.answers[a].timer_at = None;
                    self.feed(a, |s, now| s.handle_timeout(now));
                }
                Event::LeaseArmed { answer, generation } if generation == self.answers[answer].generation => {
                    self.feed(answer, |s, now| s.handle_lease_armed(Ok(()), now));
                }
                Event::LeaseArmed { .. } => {}
                Event::LeaseAlarm(a) => self.lease_alarm(a),
                Event::Reset(a) => self.reset(a),
                Event::Resume(a) => self.resume(a),
                Event::Run { answer, op, generation, answered_us } => self.run_call(answer, op, generation, answered_us),
                Event::Answered { answer, generation, caller, reply } => self.answered(answer, generation, caller, reply),
                Event::Sample => self.sample(),
            }
        }
        if self.plan.checked {
            self.check_endings();
        }
        self.report()
    }

    fn start(&mut self, slot: usize) {
        if let Arrival::Steady { for_ms } = self.plan.arrival {
            if self.now >= for_ms * 1000 {
                return;
            }
        }
        let index = self.answers.len();
        let ms = self.rng.between(self.plan.answer_ms);
        let tokens = (ms * self.plan.tokens_per_second / 1000).max(2);
        let flush_at = self.rng.chance(self.plan.flush_share).then(|| self.rng.below(tokens));
        let reset_at = self.rng.chance(self.plan.resets).then(|| 1 + self.rng.below(tokens - 1));
        self.answers.push(Answer {
            id: format!("answer-{index}"),
            slot,
            shard: slot % self.plan.databases,
            stage: Stage::Inserting,
            stream: None,
            generation: 0,
            storage: StoredStream::default(),
            waiting: HashMap::new(),
            tokens_left: tokens,
            flush_at,
            reset_at,
            lost: false,
            epoch: FIRST_EPOCH,
            produced: String::new(),
            undurable: VecDeque::new(),
            timer_at: None,
            insert_failures: 0,
            open_since: None,
            flush_since: None,
            close_since: None,
            ending: None,
            alarm: None,
            revival: None,
            readers: vec![],
            durable_high: Offset::ZERO,
        });
        self.insert_row(index);
    }

    /// The app inserts the answer's row before it opens the stream: a write of its own on the
    /// same database (SPEC §5).
    fn insert_row(&mut self, a: usize) {
        let shard = &mut self.shards[self.answers[a].shard];
        match shard.model.admit(Work::Write, self.now) {
            Admission::Runs { answered_us, .. } => {
                // Nothing else touches this row before the insert answers: it runs now.
                shard.db.insert_message(&self.answers[a].id);
                self.schedule(answered_us, Event::Inserted { answer: a, ok: true });
            }
            Admission::TurnedAway { answered_us, .. } => self.schedule(answered_us, Event::Inserted { answer: a, ok: false }),
        }
    }

    fn inserted(&mut self, a: usize, ok: bool) {
        if !ok {
            // The app retries an overload with jittered back-off, 50 ms doubling to 2 s.
            self.answers[a].insert_failures += 1;
            self.app_insert_retries += 1;
            let full = (50_000u64 << self.answers[a].insert_failures.min(6)).min(2_000_000);
            let at = self.now + self.jittered(full);
            return self.schedule(at, Event::Insert(a));
        }
        let producer = Producer { host_token: format!("host-{a}"), meta: None, chat: None, id: None };
        let (mut stream, _opened) = LiveStream::open(&self.answers[a].id, self.plan.stream.clone(), producer, self.ms());
        stream.seed_jitter(self.rng.next());
        let answer = &mut self.answers[a];
        answer.stage = Stage::Opening;
        answer.open_since = Some(self.now);
        answer.stream = Some(stream);
        self.feed(a, |_, _| ());
    }

    /// The producer writes its next token (and flushes, closes, or loses its object where its
    /// plan says).
    fn token(&mut self, a: usize) {
        let token = TOKENS[self.rng.below(TOKENS.len() as u64) as usize];
        let answer = &mut self.answers[a];
        if answer.stage != Stage::Producing || answer.lost {
            return;
        }
        answer.tokens_left -= 1;
        let (flush, close, reset) =
            (answer.flush_at == Some(answer.tokens_left), answer.tokens_left == 0, answer.reset_at == Some(answer.tokens_left));
        answer.produced.push_str(token);
        answer.undurable.push_back((utf16::len(&answer.produced), self.now));
        let epoch = answer.epoch;
        self.feed(a, |s, now| {
            s.admit(Some(epoch)).and_then(|()| s.push(token, now).map_err(|e| panic!("a live stream refused its producer: {e}")))
        })
        .expect("a live stream")
        .unwrap_or_else(|e| panic!("the current producer was fenced: {e}"));
        self.pull_readers(a);
        let now = self.now;
        if flush {
            self.answers[a].flush_since = Some(now);
            self.feed(a, |s, at| s.flush(at));
        }
        if close {
            self.answers[a].stage = Stage::Closing;
            self.answers[a].close_since = Some(now);
            self.feed(a, |s, at| s.close(at));
        } else if reset {
            self.schedule(now, Event::Reset(a));
        } else {
            self.schedule(now + 1_000_000 / self.plan.tokens_per_second, Event::Token(a));
        }
    }

    /// Feeds one input to answer `a`'s stream and performs what it asks for (the shell's loop).
    fn feed<R>(&mut self, a: usize, input: impl FnOnce(&mut LiveStream, Timestamp) -> R) -> Option<R> {
        let now = self.ms();
        let stream = self.answers[a].stream.as_mut()?;
        let result = input(stream, now);
        let outputs: Vec<Output> = std::iter::from_fn(|| stream.poll_output()).collect();
        let deadline = stream.poll_timeout();
        for output in outputs {
            self.perform(a, output);
        }
        if let Some(at) = deadline.map(|t| t.0 * 1000) {
            let answer = &mut self.answers[a];
            if answer.stream.is_some() && answer.timer_at.is_none_or(|armed| at < armed) {
                answer.timer_at = Some(at);
                self.schedule(at, Event::Timer(a));
            }
        }
        Some(result)
    }

    fn perform(&mut self, a: usize, output: Output) {
        match output {
            Output::Store(request) => self.send(a, Caller::Stream, request),
            // The object's own storage, not the database: it answers in a millisecond.
            Output::ArmLease { lease } => {
                self.answers[a].storage.apply(&KeyUpdate::arming(&lease));
                let generation = self.answers[a].generation;
                self.schedule(self.now + 1000, Event::LeaseArmed { answer: a, generation });
            }
            Output::DisarmLease { .. } => self.answers[a].storage = StoredStream::default(),
            // The object's storage never fails here: its writes are answered at once.
            Output::RenewLease { last_write: Some(at) } => self.answers[a].storage.apply(&KeyUpdate::last_write(at)),
            Output::ForgetLastWrite => self.answers[a].storage.apply(&KeyUpdate::forget_last_write()),
            Output::Settled(settlement) => self.settled(a, settlement),
            Output::Event(StreamEvent::CheckpointFailed { .. }) => self.checkpoint_failures += 1,
            Output::Retired => self.answers[a].stream = None,
            Output::Wake(_) | Output::RenewLease { .. } | Output::Event(_) => {}
        }
    }

    /// A store call goes to its answer's database: the model says when it runs and when its
    /// answer is back, or turns it away; past `STORE_TIMEOUT_MS` the caller hears a timeout
    /// first, as from the shell (the late answer is then ignored).
    fn send(&mut self, a: usize, caller: Caller, request: StoreRequest) {
        let work = match request.kind() {
            OpKind::ProbeOpen | OpKind::ReadHost | OpKind::ReadState | OpKind::ReadDurable | OpKind::ReadChat => Work::Read,
            _ => Work::Write,
        };
        let (limit, generation) = (self.plan.stream.store_timeout_ms, self.answers[a].generation);
        let shard = &mut self.shards[self.answers[a].shard];
        match shard.model.admit(work, self.now) {
            Admission::Runs { starts_us, answered_us, .. } => {
                if answered_us - self.now > limit.0 * 1000 {
                    let late = request.failed(StoreError::TimedOut(limit));
                    self.schedule(self.now + limit.0 * 1000, Event::Answered { answer: a, generation, caller, reply: late });
                }
                let op = request.id();
                self.answers[a].waiting.insert(op, (caller, request));
                self.schedule(starts_us, Event::Run { answer: a, op, generation, answered_us });
            }
            Admission::TurnedAway { why, answered_us } => {
                let error = StoreError::from_database(why.message(shard.model.capacity().backend).to_owned(), false);
                self.schedule(answered_us, Event::Answered { answer: a, generation, caller, reply: request.failed(error) });
            }
        }
    }

    /// A call's turn: its statements run on the real database now (also a lost instance's:
    /// a late commit), and contract P is checked.
    fn run_call(&mut self, a: usize, op: OpId, generation: u32, answered_us: u64) {
        let waiting = &mut self.answers[a].waiting;
        let Some((caller, request)) = waiting.remove(&op) else { return };
        self.checkpoints += u64::from(request.kind() == OpKind::Checkpoint);
        let answer = &self.answers[a];
        let reply = super::block_on(self.shards[answer.shard].tables.run(&answer.id, request));
        if self.plan.checked {
            self.check_prefix(a);
        }
        self.schedule(answered_us, Event::Answered { answer: a, generation, caller, reply });
    }

    fn answered(&mut self, a: usize, generation: u32, caller: Caller, reply: StoreAnswer) {
        if generation != self.answers[a].generation {
            return; // the instance that asked is gone
        }
        match caller {
            Caller::Stream => {
                self.feed(a, |s, now| s.handle_store(reply, now));
            }
            Caller::Revival => {
                if let Some(revival) = self.answers[a].revival.as_mut() {
                    revival.handle_store(reply, Timestamp(self.now / 1000));
                    self.drive_revival(a);
                }
            }
        }
    }

    fn settled(&mut self, a: usize, settlement: Settlement) {
        let since_ms = |since: Option<u64>, now: u64| since.map(|at| (now - at) as f64 / 1000.0);
        let answer = &mut self.answers[a];
        match settlement {
            Settlement::Opened(_, outcome) => {
                self.open_ms.extend(since_ms(answer.open_since.take(), self.now));
                if outcome.is_err() {
                    return self.end(a, Ending::OpenFailed);
                }
                answer.stage = Stage::Producing;
                self.streaming += 1;
                self.peak_streaming = self.peak_streaming.max(self.streaming);
                for _ in 0..self.plan.readers {
                    let id = answer.stream.as_mut().expect("an open stream").subscribe(Offset::ZERO);
                    answer.readers.push(Reader { id, text: String::new(), connected: true, ended: None });
                }
                self.schedule(self.now + 1_000_000 / self.plan.tokens_per_second, Event::Token(a));
            }
            Settlement::Flushed(_, outcome) => {
                self.flush_ms.extend(since_ms(answer.flush_since.take(), self.now));
                self.flushes_failed += usize::from(outcome.is_err());
            }
            // An interrupted seal nobody asked for (a rebuilt stream's window) settles too.
            Settlement::Sealed(_, outcome) => {
                let Some(close) = since_ms(answer.close_since.take(), self.now) else { return };
                self.close_ms.push(close);
                self.streaming -= 1;
                let ending = match outcome {
                    Ok(report) if report.status == EndStatus::Complete => Ending::Complete,
                    Ok(_) => Ending::Interrupted,
                    Err(_) => Ending::CloseFailed,
                };
                self.pull_readers(a);
                self.end(a, ending);
            }
        }
    }

    fn end(&mut self, a: usize, ending: Ending) {
        self.last_ending = self.last_ending.max(self.now);
        let answer = &mut self.answers[a];
        answer.stage = Stage::Done;
        answer.ending = Some(ending);
        let slot = answer.slot;
        if ending == Ending::Complete && self.plan.readers == 0 {
            answer.stream = None; // sealed: nothing of it touches the database again
        } else {
            // What the lease does for a stream that could not open or seal (and, with readers,
            // what it does after any linger).
            let at = self.now + self.plan.stream.lease_ms.0 * 1000;
            self.schedule(at, Event::LeaseAlarm(a));
        }
        if matches!(self.plan.arrival, Arrival::Steady { .. }) {
            self.schedule(self.now, Event::Start { slot });
        }
    }

    /// The object is reset mid-answer: its stream, its readers' connections and every answer
    /// on its way to it are gone; its storage stays; its calls already admitted still run. The
    /// lease alarm it armed fires within a lease.
    fn reset(&mut self, a: usize) {
        let lease = self.plan.stream.lease_ms.0 * 1000;
        let at = self.now + lease / 2 + self.rng.below(lease / 2);
        let answer = &mut self.answers[a];
        answer.generation += 1;
        answer.stream = None;
        answer.timer_at = None;
        answer.lost = true;
        for reader in &mut answer.readers {
            reader.connected = false;
        }
        self.reset_since.insert(a, self.now);
        self.schedule(at, Event::LeaseAlarm(a));
    }

    /// The lease alarm: the core's own machine ([`LeaseAlarm`]), its revival's calls through the
    /// model like any other.
    fn lease_alarm(&mut self, a: usize) {
        if self.answers[a].alarm.is_some() {
            return;
        }
        let holding = self.answers[a].stream.as_ref().map_or(Holding::Nothing, LiveStream::holding);
        self.answers[a].alarm = Some((LeaseAlarm::fire(), holding));
        self.drive_alarm(a);
    }

    fn drive_alarm(&mut self, a: usize) {
        while let Some(output) = self.answers[a].alarm.as_mut().and_then(|(alarm, _)| alarm.poll_output()) {
            let answer = &mut self.answers[a];
            let Some((alarm, holding)) = answer.alarm.as_mut() else { return };
            match output {
                AlarmOutput::ReadKeys => alarm.handle_keys(Ok(answer.storage.clone()), *holding),
                AlarmOutput::Revive => {
                    let token = format!("revival-{a}-{}", self.now);
                    answer.revival = Some(Revival::start(self.plan.stream.clone(), token));
                    return self.drive_revival(a);
                }
                AlarmOutput::RetrySeal => {
                    self.feed(a, |s, now| s.retry_seal(now));
                }
                AlarmOutput::Renew(_) => {
                    answer.alarm = None;
                    let at = self.now + self.plan.stream.lease_ms.0 * 1000;
                    return self.schedule(at, Event::LeaseAlarm(a));
                }
                AlarmOutput::Release(_) => {
                    answer.alarm = None;
                    let keep = kept_at_release(answer.storage.format, self.shards[answer.shard].tables.sql().has_format_column());
                    let storage = answer.storage.clone();
                    answer.storage = StoredStream::from_values(|key| keep.contains(&key).then(|| storage.value(key)).flatten());
                    return;
                }
            }
        }
    }

    /// Drives the revival until it waits on the database or ends; a rebuilt stream is installed
    /// and its producer comes back to resume it.
    fn drive_revival(&mut self, a: usize) {
        loop {
            let answer = &mut self.answers[a];
            let Some(revival) = answer.revival.as_mut() else { return };
            match revival.poll_output() {
                Some(RevivalOutput::ReadKeys) => revival.handle_keys(Ok(answer.storage.clone())),
                Some(RevivalOutput::WriteKeys(update)) => {
                    answer.storage.apply(&update);
                    revival.handle_keys_written(Ok(()), Timestamp(self.now / 1000));
                }
                Some(RevivalOutput::Store(request)) => self.send(a, Caller::Revival, request),
                None => break,
            }
        }
        let answer = &mut self.answers[a];
        let Some(end) = answer.revival.as_mut().and_then(Revival::take_end) else { return };
        answer.revival = None;
        if let Some((alarm, _)) = answer.alarm.as_mut() {
            alarm.handle_revival(Revived::from(&end));
        }
        if let RevivalEnd::Revived(mut stream) = end {
            stream.seed_jitter(self.rng.next());
            answer.stream = Some(*stream);
            if let Some(since) = self.reset_since.remove(&a) {
                self.revival_ms.push((self.now - since) as f64 / 1000.0);
            }
            self.feed(a, |_, _| ());
            self.reconnect_readers(a);
            if self.answers[a].lost {
                let at = self.now + self.rng.below(2_000_000);
                self.schedule(at, Event::Resume(a));
            }
        }
        self.drive_alarm(a);
    }

    /// The producer comes back to the rebuilt stream: it resumes (a new epoch) and re-sends
    /// what the stream lacks, then writes on.
    fn resume(&mut self, a: usize) {
        let now = self.ms();
        let answer = &mut self.answers[a];
        let producer = format!("producer-{a}");
        let Some(stream) = answer.stream.as_mut() else { return };
        let grant = match stream.resume(Some(answer.epoch), Some(&producer), now) {
            Ok(grant) => grant,
            Err(e) => self.fail(a, format!("the producer's resume was refused: {e}")),
        };
        answer.epoch = grant.epoch;
        answer.storage.apply(&KeyUpdate::resumed(grant.epoch, Some(&producer)));
        answer.lost = false;
        let lacking = utf16::slice(&answer.produced, grant.seq, Offset::MAX).to_owned();
        let epoch = answer.epoch;
        self.feed(a, |s, now| {
            s.admit(Some(epoch)).expect("the resumed producer");
            if !lacking.is_empty() {
                s.push(&lacking, now).expect("a resumed stream takes the re-sent text");
            }
        });
        self.pull_readers(a);
        self.schedule(self.now + 1_000_000 / self.plan.tokens_per_second, Event::Token(a));
    }

    /// Readers whose connection died with an instance reconnect from what they hold.
    fn reconnect_readers(&mut self, a: usize) {
        let answer = &mut self.answers[a];
        let Some(stream) = answer.stream.as_mut() else { return };
        for reader in answer.readers.iter_mut().filter(|r| !r.connected && r.ended.is_none()) {
            reader.id = stream.subscribe(utf16::len(&reader.text));
            reader.connected = true;
        }
        self.pull_readers(a);
    }

    /// Every connected reader takes what is queued for it. The live text reaches it whatever
    /// the database is doing: after a pull it holds at least all the stream has.
    fn pull_readers(&mut self, a: usize) {
        if self.plan.readers == 0 {
            return;
        }
        let now = self.ms();
        let answer = &mut self.answers[a];
        let Some(stream) = answer.stream.as_mut() else { return };
        let mut broken = None;
        for reader in answer.readers.iter_mut().filter(|r| r.connected && r.ended.is_none()) {
            while let Pull::Data { wire, .. } = stream.pull(reader.id, now) {
                for frame in super::driver::parse_sse(&wire) {
                    match frame {
                        Frame::Open { from, .. } => reader.text = utf16::slice(&reader.text, Offset::ZERO, from).to_owned(),
                        Frame::Chunk { from, text, .. } if from == utf16::len(&reader.text) => reader.text.push_str(&text),
                        Frame::Chunk { from, .. } => broken = Some(format!("a chunk from {from} after {}", utf16::len(&reader.text))),
                        Frame::End { seq, .. } => reader.ended = Some(seq),
                        Frame::Durable { .. } | Frame::Stale { .. } | Frame::Absent => {}
                    }
                }
            }
            if !answer.produced.starts_with(&reader.text) {
                broken = Some(format!("S: a reader holds {:?}, not a prefix of the produced text", reader.text));
            }
            if reader.ended.is_none() && utf16::len(&reader.text) < stream.seq() {
                broken =
                    Some(format!("a reader holds {} of the {} produced: the live text waited", utf16::len(&reader.text), stream.seq()));
            }
        }
        if let Some(what) = broken.filter(|_| self.plan.checked) {
            self.fail(a, what);
        }
    }

    /// Contract P for answer `a`: its durable text is a prefix of what was produced, never
    /// shrinks, and its stream never claims more than the store holds.
    fn check_prefix(&mut self, a: usize) {
        let answer = &self.answers[a];
        let durable = self.shards[answer.shard].db.durable_text(&answer.id);
        let len = utf16::len(&durable);
        if !answer.produced.starts_with(&durable) {
            self.fail(a, format!("P: the durable text {durable:?} is not a prefix of the produced"));
        }
        if len < answer.durable_high {
            self.fail(a, format!("P: the durable length went back from {} to {len}", answer.durable_high));
        }
        if answer.stream.as_ref().is_some_and(|s| s.durable_seq() > len) {
            self.fail(a, format!("the stream claims more durable than the {len} the store holds"));
        }
        self.answers[a].durable_high = len;
    }

    /// Once everything ran: no row left `streaming`; with the default patience, every open, flush
    /// and close answered 200 and every answer is `complete` with exactly its text (with a short
    /// patience a close may answer 503: the lease repairs the row, or seals it with a prefix);
    /// every reader got its `end` at a length it holds and the row holds.
    fn check_endings(&self) {
        let patient = self.plan.stream.store_patience_ms >= StreamConfig::default().store_patience_ms;
        if patient && self.flushes_failed > 0 {
            panic!("seed {}: {} flushes answered 503 on a database that was only busy", self.plan.seed, self.flushes_failed);
        }
        for (a, answer) in self.answers.iter().enumerate() {
            let db = &self.shards[answer.shard].db;
            let (status, durable) = (db.status(&answer.id), db.durable_text(&answer.id));
            if status == "streaming" {
                self.fail(a, "the row was left streaming".into());
            }
            match answer.ending {
                Some(Ending::OpenFailed | Ending::CloseFailed | Ending::Interrupted) if patient => {
                    self.fail(a, format!("ended {:?} on a database that was only busy", answer.ending))
                }
                _ => {}
            }
            let closed = matches!(answer.ending, Some(Ending::Complete | Ending::CloseFailed));
            if closed && patient && (status != "complete" || durable != answer.produced) {
                self.fail(
                    a,
                    format!("its producer closed, and the row is {status} with {} of {} bytes", durable.len(), answer.produced.len()),
                );
            }
            for reader in &answer.readers {
                let Some(seq) = reader.ended else { self.fail(a, "a reader never got its end".into()) };
                let held = utf16::slice(&durable, Offset::ZERO, seq);
                if seq > utf16::len(&durable) || !reader.text.starts_with(held) {
                    self.fail(
                        a,
                        format!("a reader ended at {seq} holding {} bytes; the row holds {} of them", reader.text.len(), durable.len()),
                    );
                }
            }
        }
    }

    /// Every answer producing: how old its oldest character not yet durable is.
    fn sample(&mut self) {
        let mut moment = Moment { at_s: self.now as f64 / 1e6, ..Moment::default() };
        let from = self.stretches.len();
        for answer in &mut self.answers {
            let Some(stream) = answer.stream.as_ref().filter(|_| matches!(answer.stage, Stage::Producing | Stage::Closing)) else {
                continue;
            };
            let durable = stream.durable_seq();
            while answer.undurable.front().is_some_and(|&(end, _)| end <= durable) {
                answer.undurable.pop_front();
            }
            let age = answer.undurable.front().map_or(0, |&(_, at)| self.now - at) as f64 / 1e6;
            self.lags.push(age);
            self.stretches.push(stream.checkpoint_stretch());
            moment.streaming += 1;
            moment.mean_stretch += stream.checkpoint_stretch();
            moment.mean_lag_s += age;
            moment.max_lag_s = moment.max_lag_s.max(age);
        }
        let n = moment.streaming.max(1) as f64;
        (moment.mean_stretch, moment.mean_lag_s) = (moment.mean_stretch / n, moment.mean_lag_s / n);
        let mut now_stretches = self.stretches[from..].to_vec();
        now_stretches.sort_by(f64::total_cmp);
        moment.p90_stretch = now_stretches.get(now_stretches.len() * 9 / 10).copied().unwrap_or(0.0);
        let first = &mut self.shards[0].model;
        moment.queued = first.queued(self.now);
        let writes = first.counts().writes;
        moment.writes_per_s = (writes - self.writes_before) as f64 / (self.plan.sample_ms as f64 / 1000.0);
        self.writes_before = writes;
        self.timeline.push(moment);
        if !self.queue.is_empty() {
            self.schedule(self.now + self.plan.sample_ms * 1000, Event::Sample);
        }
    }

    fn report(&self) -> Report {
        let mut report = Report {
            answers: self.answers.len(),
            databases: self.plan.databases,
            peak_streaming: self.peak_streaming,
            flushes: self.flush_ms.len(),
            flushes_failed: self.flushes_failed,
            checkpoint_failures: self.checkpoint_failures,
            app_insert_retries: self.app_insert_retries,
            resets: self.answers.iter().filter(|a| a.generation > 0).count(),
            virtual_s: self.now as f64 / 1e6,
            timeline: self.timeline.clone(),
            ..Report::default()
        };
        for answer in &self.answers {
            match answer.ending {
                Some(Ending::Complete) => report.complete += 1,
                Some(Ending::OpenFailed) => report.open_failed += 1,
                Some(Ending::CloseFailed) => report.close_failed += 1,
                Some(Ending::Interrupted) | None => report.interrupted += 1,
            }
            let db = &self.shards[answer.shard].db;
            let status = db.status(&answer.id);
            report.left_streaming += usize::from(status == "streaming");
            let durable = db.durable_text(&answer.id);
            let exact = match answer.ending {
                Some(Ending::Complete) => status == "complete" && durable == answer.produced,
                _ => answer.produced.starts_with(&durable),
            };
            report.text_mismatches += usize::from(!exact);
        }
        (report.lag_p50_s, report.lag_p99_s, report.lag_max_s) = percentiles(&self.lags);
        (report.flush_p50_ms, report.flush_p99_ms, _) = percentiles(&self.flush_ms);
        (report.close_p50_ms, report.close_p99_ms, _) = percentiles(&self.close_ms);
        (_, report.open_p99_ms, _) = percentiles(&self.open_ms);
        (_, report.revival_p99_ms, _) = percentiles(&self.revival_ms);
        report.mean_stretch = self.stretches.iter().sum::<f64>() / self.stretches.len().max(1) as f64;
        report.max_stretch = self.stretches.iter().copied().fold(1.0, f64::max);
        let (seconds, shards) = (self.last_ending.max(1) as f64 / 1e6, self.shards.len() as f64);
        for shard in &self.shards {
            let counts = shard.model.counts();
            report.writes_per_s += counts.writes as f64 / seconds / shards;
            report.reads_per_s += counts.reads as f64 / seconds / shards;
            report.statements_per_s += shard.statements.statements.get() as f64 / seconds / shards;
            report.utilization += counts.busy_us as f64 / 1e6 / (seconds * f64::from(shard.model.capacity().lanes)) / shards;
            report.turned_away += counts.turned_away;
            report.deepest_queue = report.deepest_queue.max(counts.deepest_queue);
            report.longest_wait_ms = report.longest_wait_ms.max(counts.longest_wait_us as f64 / 1000.0);
        }
        report.checkpoints_per_answer = self.checkpoints as f64 / self.answers.len().max(1) as f64;
        report
    }
}

/// p50, p99 and the maximum of `values` (0 for none).
pub fn percentiles(values: &[f64]) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), sorted[sorted.len() - 1])
}
