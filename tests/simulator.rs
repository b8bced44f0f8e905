//! The deterministic simulator: thousands of random schedules of one live stream in virtual
//! time, against real SQLite behind a fault-injecting executor (failures before commit, commits
//! whose reply is lost, failed read-backs, slow replies), with text full of emoji, ZWJ
//! sequences and combining marks.
//!
//! After every store operation it checks contract P (the durable text is a prefix of the
//! produced text, never shrinks, and the stream never claims more than the store holds); for
//! every reader, joining at random offsets and times, it checks contract S (durable text up to
//! the join offset plus the frames delivered equals the produced text) and the chunk rule
//! (`text` has exactly `seq - from` UTF-16 units and chunks are contiguous).
//!
//! Even seeds run a `ui` stream (SPEC §9): the producer sends NDJSON UI message chunks cut into
//! pieces at random bytes (inside lines and inside UTF-8 sequences), with some bad lines; a
//! reference assembler (a plain `serde_json::Value` parse) says which lines the stream must
//! accept, and `/ui` readers, joining at random offsets and resuming from their last `id:`
//! when dropped, must get exactly the produced lines after their join's line start (contract S
//! at chunk granularity), then the ending of the stream's status and `[DONE]`.
//!
//! The lease (SPEC §7) runs the core's own alarm ([`LeaseAlarm`], as the shell does): the stream's lease must be
//! armed before any mark is sent; some schedules kill the object (mid-open or mid-stream, with
//! replies in flight that may or may not have committed), and the alarm that follows must seal
//! a `streaming` row `interrupted` from its durable text, after which a reopen is refused; at
//! the end of every schedule the alarm must leave no row `streaming` and never touch a row
//! already sealed. A seal that could not commit is repaired the way the alarm does it.
//!
//! Surviving the object (SPEC §10): 35% of the schedules reset the object up to three times
//! mid-stream, and a fresh instance rebuilds the stream as the Worker does (the host claim from
//! the lost token, the one-statement durable read, [`LiveStream::rehydrate`]); P must hold across
//! it, a write before the resume is refused, readers reconnect from what they hold (past the
//! rebuilt text: parked) and must still get exactly the produced text. Then the producer
//! resumes after a while and re-sends what was lost (a `ui` producer its unfinished line too),
//! or never returns (the window seals `interrupted` at the durable text), or a cancel comes
//! first (`cancelled`); either way every reader, parked ones too, gets its ending.
//!
//! The store is a parameter: the same schedules run on SQLite (the D1 dialect, 2,000 schedules
//! on 2 threads) and on a real PostgreSQL (the Postgres dialect, 300 schedules; the cluster of
//! `scripts/pg.sh`, see tests/sql_postgres.rs for when it is there) in every `cargo test`, the
//! test command's short seeded run. The proof runs, by hand, are 10,000 and 1,000
//! (`SIM_SCHEDULES=10000 SIM_BACKEND=sqlite`, `SIM_SCHEDULES=1000 SIM_BACKEND=postgres`; seeds
//! 1..=n; recorded in docs/TESTING.md).
//!
//! `SIM_SCHEDULES=n` changes the number of schedules of both (seeds 1..=n); `SIM_SEED=s` replays
//! one; `SIM_BACKEND=sqlite|postgres` runs only that store (a failure names its seed and store).

mod support;

use rindle_streams::engine::durable::{SqlExecutor, Tables};
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::object_storage::{KeyUpdate, StoredStream};
use rindle_streams::engine::host::store::{OpKind, StoreRequest};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::lease::{Holding, Release, Renewal};
use rindle_streams::engine::live::{
    Dialect, Fenced, LiveStream, OpenError, Output, Producer, Pull, PushError, ReaderId, RevivalEnd, SealOutcome, Settlement, StreamEvent,
    StreamState, Ticket, FIRST_EPOCH,
};
use rindle_streams::engine::text::utf16::{self, Offset};
use rindle_streams::engine::wire::frame::{EndStatus, Frame};
use rindle_streams::engine::wire::ui::{Format, MAX_LINE_BYTES};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use support::driver::{parse_sse, parse_ui_sse, ticket_id, Settles};
use support::pg::PgDb;
use support::{block_on, run_revival, Fault, SqliteDb, Step, Store};

const STREAM: &str = "sim";

/// splitmix64: small, fast, and the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Tokens a model might emit, including a ZWJ sequence split across two tokens and a base
/// letter whose combining accent arrives in the next token.
const TOKENS: &[&str] = &[
    "a",
    "the ",
    "stream",
    " ",
    ".",
    "\n",
    "é",
    "e",
    "\u{301}",
    "ñ",
    "日本語",
    "😀",
    "👍🏽",
    "👩‍💻",
    "👩",
    "\u{200D}💻",
    "👨‍👩‍👧",
    "🇫🇷",
    "🏳️‍🌈",
    "Z̤̈",
    "ok",
    "\"quoted\"",
    "'; DROP TABLE messages; --",
];

thread_local! {
    /// The store the schedules on this thread run on, for the replay line of a failure.
    static BACKEND: std::cell::Cell<&'static str> = const { std::cell::Cell::new("sqlite") };
}

fn die(seed: u64, what: String) -> ! {
    let backend = BACKEND.get();
    panic!("seed {seed} on {backend}: {what} (rerun with SIM_BACKEND={backend} SIM_SEED={seed})")
}

struct Reader {
    id: ReaderId,
    /// durableText(f) followed by every delivered chunk.
    text: String,
    /// The offset asked for; the open frame may move it down out of a surrogate pair.
    asked: Offset,
    opened: bool,
    done: bool,
}

/// Lines a `ui` producer sends that the stream must refuse.
const BAD_LINES: &[&[u8]] = &[
    b"not json",
    b"[{\"type\":\"text-delta\"}]",
    b"{\"kind\":\"text-delta\"}",
    b"{\"type\":7}",
    b"{\"type\":\"text-delta\",\"delta\":\"a\"}\r",
    b"{\"type\":\"text-delta\",\"delta\":\"\xff\"}",
    b"{\"type\":\"text-delta\",\"delta\":\"\xf0\x9f\"}",
    b"",
    b"{\"type\":\"text-delta\"",
    b"\"finish\"",
];

/// A `ui` producer: UI message chunk lines, now and then a bad one, sent in pieces cut at
/// random bytes.
struct LineProducer {
    bad_rate: f64,
    /// The line being sent (with its `\n`) and how much of it was sent.
    line: Vec<u8>,
    sent: usize,
}

impl LineProducer {
    fn next_line(&mut self, rng: &mut Rng) {
        self.sent = 0;
        self.line = if rng.chance(self.bad_rate) {
            rng.pick(BAD_LINES).to_vec()
        } else if rng.chance(0.03) {
            br#"{"type":"finish","finishReason":"stop"}"#.to_vec()
        } else {
            // Chunks the AI SDK's schema accepts (a `ui` stream validates strictly by default).
            let delta: String = (0..1 + rng.below(4)).map(|_| rng.pick(TOKENS)).collect();
            let line = match rng.below(4) {
                0 => serde_json::json!({"type": "text-delta", "id": "p1", "delta": delta}),
                1 => serde_json::json!({"type": "reasoning-delta", "id": "p1", "delta": delta}),
                2 => serde_json::json!({"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": delta}),
                _ => serde_json::json!({"type": "data-weather", "data": {"sky": delta}}),
            };
            line.to_string().into_bytes()
        };
        self.line.push(b'\n');
    }

    /// The next piece: 1–80 bytes, cut anywhere.
    fn piece(&mut self, rng: &mut Rng) -> Vec<u8> {
        let want = 1 + rng.below(80) as usize;
        let mut piece = Vec::with_capacity(want);
        while piece.len() < want {
            if self.sent == self.line.len() {
                self.next_line(rng);
            }
            let take = (want - piece.len()).min(self.line.len() - self.sent);
            piece.extend_from_slice(&self.line[self.sent..self.sent + take]);
            self.sent += take;
        }
        piece
    }

    /// After a refusal the producer starts again at a fresh line.
    fn resync(&mut self) {
        self.sent = self.line.len();
    }
}

/// The reference for which lines a `ui` stream accepts: the obvious algorithm, with a full
/// `serde_json::Value` parse per line.
#[derive(Default)]
struct ReferenceLines {
    partial: Vec<u8>,
    finish_seen: bool,
}

impl ReferenceLines {
    fn valid(line: &[u8]) -> Option<bool> {
        let text = std::str::from_utf8(line).ok().filter(|t| t.len() <= MAX_LINE_BYTES && !t.contains('\r'))?;
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        value.as_object()?.get("type")?.as_str().map(|ty| ty == "finish")
    }

    /// The text a piece adds, and whether it was refused.
    fn feed(&mut self, piece: &[u8]) -> (String, bool) {
        let mut bytes = std::mem::take(&mut self.partial);
        bytes.extend_from_slice(piece);
        let mut accepted = String::new();
        let mut start = 0;
        while let Some(nl) = bytes[start..].iter().position(|&b| b == b'\n') {
            let line = &bytes[start..start + nl];
            let Some(finish) = Self::valid(line) else { return (accepted, true) };
            self.finish_seen |= finish;
            accepted.push_str(std::str::from_utf8(line).unwrap());
            accepted.push('\n');
            start += nl + 1;
        }
        let rest = &bytes[start..];
        let broken_utf8 = std::str::from_utf8(rest).is_err_and(|e| e.error_len().is_some());
        if rest.len() > MAX_LINE_BYTES || rest.contains(&b'\r') || broken_utf8 {
            return (accepted, true);
        }
        self.partial = rest.to_vec();
        (accepted, false)
    }
}

/// A `/ui` reader, resuming like an `EventSource`: from its last `id:` when its body ends
/// without `[DONE]`.
struct UiReader {
    id: ReaderId,
    /// Where the next line must start: the join's line start, then each line's `id:`.
    cursor: Offset,
    /// The offset to rejoin from: the original ask until an `id:` arrives.
    resume_from: Offset,
    /// The ending chunk, once it arrived.
    ending: Option<String>,
    done: bool,
}

struct Sim {
    rng: Rng,
    seed: u64,
    stream: LiveStream,
    cfg: StreamConfig,
    db: Rc<dyn Store>,
    /// The mapped tables on `db`, which answer the stream's requests.
    tables: Tables,
    now: Timestamp,
    in_flight: VecDeque<(Timestamp, StoreRequest)>,
    /// The stream asked for its lease (answered at the time given).
    arming: Option<(Timestamp, StoredStream)>,
    /// The object's own storage: what its lease armed, its revivals and resumes stored. It
    /// survives every reset.
    storage: StoredStream,
    /// No instance holds the stream (the object died): only the lease alarm's revival rebuilds it.
    dead: bool,
    /// The producer's epoch, as it knows it, and the epochs of producers a resume replaced.
    epoch: u64,
    replaced: Vec<u64>,
    /// Fresh claim tokens drawn so far (each revival draws its own).
    tokens: u64,
    /// The lease sealed the row `interrupted`.
    interrupted: bool,
    fault_rate: f64,
    max_latency: u64,
    produced: String,
    readers: Vec<Reader>,
    /// A `ui` stream's producer, its reference, and its `/ui` readers.
    ui: Option<(LineProducer, ReferenceLines)>,
    ui_readers: Vec<UiReader>,
    bad_lines: u64,
    /// `/ui` readers that ended with the error saying what was saved (shown past the durable length).
    unsaved_endings: u64,
    durable_high: Offset,
    /// Every settlement, by ticket id.
    settled: HashMap<u64, Settlement>,
    retired: bool,
    store_ops: u64,
    seal_ticket: Option<Ticket<SealOutcome>>,
    cancelled_at_close: bool,
    /// The lease re-ran a seal that could not commit, and it committed.
    repaired: bool,
    /// Fresh instances that rebuilt the stream (SPEC §10), and the producer's resumes.
    rehydrations: u64,
    resumes: u64,
    /// Checkpoints of a lost instance that committed after the new instance read the row.
    late_commits: u64,
    /// Revivals cut short by the instance dying at one of their steps, or failing one.
    revival_deaths: u64,
    revival_failures: u64,
    /// Producers replaced by a resume while the stream was live.
    replacements: u64,
    /// Readers that rejoined a rebuilt stream past its text, and were parked.
    parked: u64,
    /// After a rehydration the producer never came back (or a cancel came first): the stream
    /// ended without its seal, at its durable text.
    abandoned: Option<EndStatus>,
    /// The text an abandoned stream ended with (what its readers hold at its end): the durable
    /// text it knew, which a lost instance's late commit may have outgrown in the row.
    ended_text: Option<String>,
}

impl Sim {
    /// A schedule on `backend`, whose tables it empties first.
    fn new(seed: u64, Backend { db, tables }: Backend) -> Self {
        let mut rng = Rng(seed);
        let checkpoint_chars = rng.pick(&[1, 8, 64, 512]);
        let cfg = StreamConfig {
            checkpoint_chars: Offset(checkpoint_chars),
            // A `ui` schedule draws the same threshold (a fixed one would leave its small
            // values, the most checkpoint rounds, untested).
            ui_checkpoint_chars: Offset(checkpoint_chars),
            checkpoint_interval_ms: Millis(rng.pick(&[10, 100, 750])),
            max_slice_bytes: rng.pick(&[8, 64, 1024, 256 * 1024]),
            max_compact_bytes: rng.pick(&[64, 1_900_000]),
            max_queued_frames: rng.pick(&[4, 16, 1024]),
            linger_ms: Millis(30_000),
            // With an idle timeout, a rebuilt stream waits what remains of it when that is longer
            // than the resume window (the producer's absence, not the instance's, counts).
            idle_timeout_ms: Millis(rng.pick(&[0, 60_000, 300_000])),
            ..StreamConfig::default()
        };
        let fault_rate = rng.pick(&[0.0, 0.05, 0.2, 0.5]);
        let max_latency = rng.pick(&[0, 5, 50, 400]);
        // Seed parity picks the format, so the text schedules draw exactly what they always did.
        let ui = (seed % 2 == 0).then(|| {
            let bad_rate = rng.pick(&[0.0, 0.02, 0.1]);
            (LineProducer { bad_rate, line: Vec::new(), sent: 0 }, ReferenceLines::default())
        });
        let cfg = StreamConfig { format: if ui.is_some() { Format::Ui } else { Format::Text }, ..cfg };
        db.reset();
        db.insert_message(STREAM);
        let (stream, _) = LiveStream::open(
            STREAM,
            cfg.clone(),
            Producer { host_token: "sim-host".into(), meta: None, chat: None, id: None },
            Timestamp(0),
        );
        let mut sim = Sim {
            rng,
            seed,
            stream,
            cfg,
            db,
            tables,
            now: Timestamp(0),
            in_flight: VecDeque::new(),
            arming: None,
            storage: StoredStream::default(),
            dead: false,
            epoch: FIRST_EPOCH,
            replaced: vec![],
            tokens: 0,
            interrupted: false,
            fault_rate,
            max_latency,
            produced: String::new(),
            readers: Vec::new(),
            ui,
            ui_readers: Vec::new(),
            bad_lines: 0,
            unsaved_endings: 0,
            durable_high: Offset(0),
            settled: HashMap::new(),
            retired: false,
            store_ops: 0,
            seal_ticket: None,
            cancelled_at_close: false,
            repaired: false,
            rehydrations: 0,
            resumes: 0,
            late_commits: 0,
            revival_deaths: 0,
            revival_failures: 0,
            replacements: 0,
            parked: 0,
            abandoned: None,
            ended_text: None,
        };
        sim.drain();
        sim
    }

    fn fail(&self, what: String) -> ! {
        die(self.seed, what)
    }

    fn drain(&mut self) {
        while let Some(o) = self.stream.poll_output() {
            match o {
                Output::Store(r) => {
                    if r.kind() == OpKind::MarkStreaming && self.storage.stream_id.is_none() {
                        self.fail("the row is marked before the lease that would seal it is armed".into());
                    }
                    let at = self.now + Millis(self.rng.below(self.max_latency + 1));
                    self.in_flight.push_back((at, r));
                }
                Output::ArmLease { lease } => {
                    let at = self.now + Millis(self.rng.below(self.max_latency + 1));
                    self.arming = Some((at, lease));
                }
                Output::Settled(s) => {
                    let id = ticket_id(&s);
                    if self.settled.insert(id, s).is_some() {
                        self.fail(format!("ticket {id} settled twice"));
                    }
                }
                Output::Retired => self.retired = true,
                // A refused open undoes its arming (the object held nothing before it).
                Output::DisarmLease { host_token } if self.storage.host_token.as_deref() == Some(host_token.as_str()) => {
                    self.storage = StoredStream::default();
                }
                Output::RenewLease { last_write: Some(at) } => self.storage.apply(&KeyUpdate::last_write(at)),
                Output::ForgetLastWrite => self.storage.apply(&KeyUpdate::forget_last_write()),
                Output::Event(StreamEvent::SealRepaired { .. }) => self.repaired = true,
                Output::Wake(_) | Output::Event(_) | Output::DisarmLease { .. } | Output::RenewLease { .. } => {}
            }
        }
    }

    fn fault(&mut self) -> Fault {
        if !self.rng.chance(self.fault_rate) {
            return Fault::None;
        }
        if self.rng.chance(0.5) {
            Fault::FailBeforeCommit
        } else {
            Fault::CommitThenLoseReply
        }
    }

    fn answer_next(&mut self) {
        let (_, req) = self.in_flight.pop_front().unwrap();
        let fault = self.fault();
        let answer = support::answer(&self.tables, STREAM, req, fault);
        self.store_ops += 1;
        self.stream.handle_store(answer, self.now);
        self.drain();
        self.check_prefix();
    }

    /// Contract P, plus: the stream never claims more than the store holds, and the row's
    /// length always equals the length of its durable text.
    fn check_prefix(&mut self) {
        let durable = self.db.durable_text(STREAM);
        let len = utf16::len(&durable);
        if !self.produced.starts_with(&durable) {
            self.fail(format!("P: durable text {durable:?} is not a prefix of {:?}", self.produced));
        }
        if len < self.durable_high {
            self.fail(format!("P: durable length went back from {} to {len}", self.durable_high));
        }
        self.durable_high = len;
        if self.stream.durable_seq() > len {
            self.fail(format!("overclaim: durableSeq {} but the store holds {len}", self.stream.durable_seq()));
        }
        let row_seq = self.db.message_column(STREAM, "seq").as_offset();
        if row_seq != Some(len) {
            self.fail(format!("the row's seq {row_seq:?} differs from its durable text's length {len}"));
        }
    }

    /// The object's storage answers the lease request (it fails at the fault rate).
    fn answer_arming(&mut self) {
        let (_, lease) = self.arming.take().unwrap();
        let result = match self.rng.chance(self.fault_rate) {
            true => Err("injected: the object's storage failed".to_owned()),
            false => {
                self.storage.apply(&KeyUpdate::arming(&lease));
                Ok(())
            }
        };
        self.stream.handle_lease_armed(result, self.now);
        self.drain();
    }

    fn advance(&mut self, dt: u64) {
        let target = self.now + Millis(dt);
        if self.dead {
            self.now = target; // nothing runs in an object no instance holds
            return;
        }
        loop {
            let reply = self.in_flight.front().map(|(at, _)| *at);
            let arming = self.arming.as_ref().map(|(at, _)| *at);
            let timer = self.stream.poll_timeout();
            let next = [reply, arming, timer].into_iter().flatten().min();
            match next {
                Some(t) if t <= target => {
                    self.now = self.now.max(t);
                    if arming == Some(t) {
                        self.answer_arming();
                    } else if reply == Some(t) {
                        self.answer_next();
                    } else {
                        self.stream.handle_timeout(self.now);
                        self.drain();
                    }
                }
                _ => break,
            }
        }
        self.now = target;
    }

    fn push(&mut self) {
        if self.ui.is_some() {
            return self.push_ui();
        }
        let n = 1 + self.rng.below(12);
        let text: String = (0..n).map(|_| self.rng.pick(TOKENS)).collect();
        if let Err(e) = self.stream.admit(Some(self.epoch)) {
            self.fail(format!("the current producer (epoch {}) was not admitted: {e}", self.epoch));
        }
        match self.stream.push(&text, self.now) {
            Ok(receipt) => {
                self.produced.push_str(&text);
                assert_eq!(receipt.seq, utf16::len(&self.produced), "seed {}", self.seed);
            }
            Err(e) => self.fail(format!("push refused while live: {e}")),
        }
        self.drain();
    }

    /// The `ui` producer sends its next piece, as raw bytes or (when it is whole UTF-8) as text.
    fn push_ui(&mut self) {
        if let Err(e) = self.stream.admit(Some(self.epoch)) {
            self.fail(format!("the current producer (epoch {}) was not admitted: {e}", self.epoch));
        }
        let (producer, reference) = self.ui.as_mut().unwrap();
        let piece = producer.piece(&mut self.rng);
        let (accepted, refused) = reference.feed(&piece);
        let as_text = std::str::from_utf8(&piece).ok().filter(|_| self.rng.chance(0.5));
        let result = match as_text {
            Some(text) => self.stream.push(text, self.now),
            None => self.stream.push_ndjson(&piece, self.now),
        };
        self.produced.push_str(&accepted);
        let seq = utf16::len(&self.produced);
        match (result, refused) {
            (Ok(receipt), false) if receipt.seq == seq => {}
            (Err(PushError::BadChunk { bad, receipt }), true) if bad.offset == seq && receipt.seq == seq => {
                self.bad_lines += 1;
                self.ui.as_mut().unwrap().0.resync();
            }
            (other, refused) => self.fail(format!("push of {piece:?}: {other:?}; the reference refused: {refused}, at {seq}")),
        }
        self.drain();
    }

    /// A `/ui` reader joins at any offset (a `from` or a `Last-Event-ID`).
    fn join_ui(&mut self) {
        let asked = Offset(self.rng.below(self.stream.seq().0 + 1));
        let id = self.stream.subscribe_as(Dialect::Ui, asked);
        self.drain();
        let before = utf16::slice(&self.produced, Offset(0), asked);
        let cursor = before.rfind('\n').map_or(Offset(0), |nl| utf16::len(&before[..=nl]));
        self.ui_readers.push(UiReader { id, cursor, resume_from: asked, ending: None, done: false });
    }

    /// Contract S at chunk granularity: every line a `/ui` reader gets is the produced line
    /// that starts at its cursor, with the offset after it as `id:`; then the ending, `[DONE]`.
    fn pull_ui(&mut self, i: usize) {
        let (wire, last) = match self.stream.pull(self.ui_readers[i].id, self.now) {
            Pull::Data { wire, last } => (wire, last),
            Pull::Pending | Pull::Gone => return,
        };
        self.drain();
        let finish_seen = self.ui.as_ref().unwrap().1.finish_seen;
        let status = match self.stream.state() {
            StreamState::Ended(status) => Some(status),
            _ => None,
        };
        // The durable length the stream ended with (the `end` frame's seq). Readers are drained
        // before the lease may repair a seal that fell short, so it is still the seal's.
        let durable_at_end = self
            .seal_outcome()
            .map(|o| match o {
                Ok(report) => report.durable_seq,
                Err(shortfall) => shortfall.durable_seq,
            })
            .or(self.abandoned.map(|_| self.stream.durable_seq()));
        // Only a rebuilt stream's window seals a simulated stream `interrupted`: its error names
        // the cause (the reset, or the producer's idle timeout).
        let window_error = self.stream.end_error().unwrap_or_default().to_owned();
        let abandoned = self.abandoned.is_some();
        let held = |r: &UiReader| if abandoned { r.cursor.max(r.resume_from) } else { r.cursor };
        let (seed, produced) = (self.seed, &self.produced);
        let r = &mut self.ui_readers[i];
        let mut unsaved = false;
        for event in parse_ui_sse(&wire) {
            match (event.id, &r.ending) {
                (Some(id), None) => {
                    let rest = utf16::slice(produced, r.cursor, Offset::MAX);
                    let Some(line) = rest.split_inclusive('\n').next().filter(|l| l.ends_with('\n')) else {
                        die(seed, format!("ui reader got line {} at {} past the produced lines", event.data, r.cursor));
                    };
                    let end = r.cursor + utf16::len(line);
                    if (id, event.data.as_str()) != (end, line.trim_end_matches('\n')) {
                        die(seed, format!("ui reader at {} got id {id} {:?}, produced {line:?} ending at {end}", r.cursor, event.data));
                    }
                    (r.cursor, r.resume_from) = (end, end);
                }
                (None, None) => {
                    if !event.ending {
                        die(seed, format!("an ending's first event {:?} without id: done", event.data));
                    }
                    let (Some(status), Some(durable)) = (status, durable_at_end) else {
                        die(seed, format!("an ending {:?} before the end", event.data))
                    };
                    let expected = match status {
                        // Shown lines past what was saved: an error that says so, whatever the status.
                        // A reader parked past the text of a stream that ended without its
                        // producer holds what it asked for (its line start lay past the text).
                        _ if held(r) > durable => {
                            unsaved = true;
                            let reason = match status {
                                EndStatus::Error => ": model error".to_owned(),
                                EndStatus::Interrupted => format!(": {window_error}"),
                                _ => String::new(),
                            };
                            format!(
                                r#"{{"type":"error","errorText":"only part of the answer shown was saved ({durable} of {} UTF-16 units): the stream ended {}{reason}; reload to see the saved answer"}}"#,
                                held(r),
                                status.as_str()
                            )
                        }
                        EndStatus::Complete if finish_seen => "[DONE]".to_owned(),
                        EndStatus::Complete => r#"{"type":"finish"}"#.to_owned(),
                        EndStatus::Cancelled => r#"{"type":"abort"}"#.to_owned(),
                        EndStatus::Error => r#"{"type":"error","errorText":"model error"}"#.to_owned(),
                        // Only the resume window seals a simulated stream `interrupted`.
                        EndStatus::Interrupted => {
                            format!(r#"{{"type":"error","errorText":{}}}"#, serde_json::Value::from(window_error.as_str()))
                        }
                    };
                    if event.data != expected {
                        die(seed, format!("ui ending {:?} for {status:?}, expected {expected:?}", event.data));
                    }
                    r.ending = Some(event.data);
                }
                (None, Some(_)) if event.data == "[DONE]" && !event.ending && !r.done => r.done = true,
                (id, ending) => die(seed, format!("ui event {id:?} {:?} after the ending {ending:?}", event.data)),
            }
            if r.ending.as_deref() == Some("[DONE]") {
                r.done = true;
            }
        }
        self.unsaved_endings += u64::from(unsaved);
        let r = &mut self.ui_readers[i];
        if last && !r.done {
            // Dropped as stale (or no live stream): the body just ends; resume from the last id.
            if self.retired {
                die(seed, "a ui reader's body ended without [DONE] after the stream retired".into());
            }
            let from = r.resume_from;
            r.id = self.stream.subscribe_as(Dialect::Ui, from);
            self.drain();
        }
    }

    /// A reader joins the way a client does: it reads the durable text, picks an offset at or
    /// below its end, keeps the text up to there, and subscribes from it.
    fn join(&mut self) {
        let durable = self.db.durable_text(STREAM);
        let asked = Offset(self.rng.below(utf16::len(&durable).0 + 1));
        let id = self.stream.subscribe(asked);
        self.drain();
        let text = utf16::slice(&durable, Offset(0), asked).to_owned();
        self.readers.push(Reader { id, text, asked, opened: false, done: false });
    }

    fn pull(&mut self, i: usize) {
        let reader_id = self.readers[i].id;
        let wire = match self.stream.pull(reader_id, self.now) {
            Pull::Data { wire, .. } => wire,
            Pull::Pending | Pull::Gone => return,
        };
        self.drain();
        let durable_now = utf16::len(&self.db.durable_text(STREAM));
        let mut rejoin = false;
        let (seed, produced) = (self.seed, &self.produced);
        // A reader parked past the text of a stream that then ended without its producer gets
        // what there is: its join moves down to the end of the text.
        let ended_at = self.abandoned.map(|_| self.stream.seq());
        let ended_text = self.ended_text.as_ref();
        for frame in parse_sse(&wire) {
            let r = &mut self.readers[i];
            let have = utf16::len(&r.text);
            match frame {
                Frame::Open { from, .. } => {
                    if r.opened || from > r.asked || (from + Offset(1) < r.asked && ended_at != Some(from)) {
                        die(seed, format!("bad open from {from} for asked {}", r.asked));
                    }
                    r.text = utf16::slice(&r.text, Offset(0), from).to_owned();
                    r.opened = true;
                }
                Frame::Chunk { from, seq, text } => {
                    if utf16::len(&text) != seq - from {
                        die(seed, format!("chunk [{from},{seq}) carries {} units", utf16::len(&text)));
                    }
                    if from != have {
                        die(seed, format!("chunk from {from} but the reader holds {have}: a gap or an overlap"));
                    }
                    r.text.push_str(&text);
                }
                Frame::Durable { seq } => {
                    if seq > durable_now {
                        die(seed, format!("durable frame {seq} but the store holds {durable_now}"));
                    }
                }
                Frame::End { seq, .. } => {
                    r.done = true;
                    if seq > durable_now {
                        die(seed, format!("end frame says {seq} durable but the store holds {durable_now}"));
                    }
                    if r.text != *ended_text.unwrap_or(produced) {
                        die(seed, format!("S: reader ended with {:?}, produced {:?}", r.text, produced));
                    }
                }
                Frame::Stale { .. } | Frame::Absent => {
                    r.done = true;
                    rejoin = true;
                }
            }
            let r = &self.readers[i];
            if !produced.starts_with(&r.text) {
                die(seed, format!("S: reader text {:?} is not a prefix of {:?}", r.text, produced));
            }
        }
        if rejoin && !self.retired {
            self.join();
        }
    }

    fn run(&mut self) {
        // Some objects die: mid-open or mid-stream.
        let crash = self.rng.chance(0.15);
        let crash_in_open = crash && self.rng.chance(0.3);
        // Open: answered like any other store traffic, faults included.
        while matches!(self.stream.state(), StreamState::Opening) {
            if crash_in_open && self.rng.chance(0.3) {
                return self.crash();
            }
            let dt = 1 + self.rng.below(50);
            self.advance(dt);
        }
        if !matches!(self.stream.state(), StreamState::Live) {
            // The store failed the open four times: a clean refusal. The alarm follows.
            self.check_lease_leaves_nothing_streaming();
            return;
        }
        let steps = 20 + self.rng.below(200);
        let crash_at = (crash && !crash_in_open).then(|| self.rng.below(steps));
        // Some objects are reset and rebuilt by a fresh instance (SPEC §10), up to three times.
        let resets: Vec<u64> = match self.rng.chance(0.35) {
            true => (0..1 + self.rng.below(3)).map(|_| self.rng.below(steps)).collect(),
            false => vec![],
        };
        for step in 0..steps {
            if crash_at == Some(step) {
                return self.crash();
            }
            if resets.contains(&step) && !self.reset_and_rehydrate() {
                return;
            }
            match self.rng.below(100) {
                0..=34 => self.push(),
                35..=59 => {
                    let dt = self.rng.pick(&[0, 1, 10, 60, 300]);
                    self.advance(dt);
                }
                60..=64 => {
                    let _ = self.stream.flush(self.now);
                    self.drain();
                }
                65..=72 if self.ui.is_some() && self.rng.chance(0.5) => self.join_ui(),
                65..=72 => self.join(),
                73..=96 if !self.ui_readers.is_empty() && self.rng.chance(0.5) => {
                    let i = self.rng.below(self.ui_readers.len() as u64) as usize;
                    self.pull_ui(i);
                }
                73..=96 if !self.readers.is_empty() => {
                    let i = self.rng.below(self.readers.len() as u64) as usize;
                    self.pull(i);
                }
                97 if !self.ui_readers.is_empty() && self.rng.chance(0.5) => {
                    let i = self.rng.below(self.ui_readers.len() as u64) as usize;
                    self.stream.detach(self.ui_readers[i].id);
                    self.ui_readers.swap_remove(i);
                }
                97 if !self.readers.is_empty() => {
                    let i = self.rng.below(self.readers.len() as u64) as usize;
                    self.stream.detach(self.readers[i].id);
                    self.readers.swap_remove(i);
                }
                98 if self.rng.chance(0.5) => self.replace_producer(),
                98 => assert!(block_on(self.tables.request_cancel(STREAM)).expect("the cancel flag is set"), "the row exists"),
                _ => self.stream.cancel(),
            }
        }
        self.cancelled_at_close = self.stream.cancelled();
        let ticket = if self.rng.chance(0.8) { self.stream.close(self.now) } else { self.stream.fail("model error", self.now) };
        self.seal_ticket = Some(ticket);
        self.drain();
        // A close keeps a `ui` stream's unfinished line in the text as it was sent.
        if let Some((_, reference)) = &mut self.ui {
            self.produced.push_str(&String::from_utf8_lossy(&std::mem::take(&mut reference.partial)));
        }
        // Let every retry and backoff play out, then drain every reader.
        while !matches!(self.stream.state(), StreamState::Ended(_)) {
            self.advance(100);
        }
        for _ in 0..4 {
            for i in 0..self.readers.len() {
                self.pull(i);
            }
            for i in 0..self.ui_readers.len() {
                self.pull_ui(i);
            }
        }
        self.check_end();
        // The lease alarm fires while the stream lingers (renewals stopped at the seal): it
        // releases, retrying a seal that fell short first, and forgets every key.
        // (Alarms whose key reads fail past the linger find the stream retired: then the
        // revival reads the sealed row.)
        let sealed_as = match self.seal_outcome() {
            Some(Ok(report)) => Some(report.status.as_str().to_owned()),
            _ => None,
        };
        let release = self.lease_alarm();
        match (&sealed_as, &release) {
            (None, _) | (Some(_), Release::Sealed) => {}
            (Some(sealed), Release::NotStreaming { status }) if status == sealed && self.retired => {}
            _ => self.fail(format!("the alarm after a committed seal did {release:?}")),
        }
        self.check_repaired();
        self.check_forgotten();
        self.advance(30_000);
        if !self.retired {
            self.fail("not retired after the linger window".into());
        }
        // And again after the stream retired: nothing is armed any more.
        if let r @ (Release::Sealed | Release::NoRow | Release::NotOurs { .. } | Release::TokenUnknown | Release::NotStreaming { .. }) =
            self.lease_alarm()
        {
            self.fail(format!("the alarm after the release found something armed: {r:?}"));
        }
    }

    /// A released lease left nothing in the object's storage.
    fn check_forgotten(&mut self) {
        if self.db.status(STREAM) == "streaming" {
            self.fail("the lease was released with the row streaming".into());
        }
        if self.storage != StoredStream::default() {
            self.fail(format!("a finished stream left keys behind: {:?}", self.storage));
        }
    }

    /// The object is reset (a deploy, an eviction): its instance and every reply in flight are
    /// lost; each in-flight write committed before the reset, commits late (after the next
    /// instance read the row), or never. The next instance's revival ([`Revival`], driven as the
    /// shell drives it) rebuilds the stream, itself dying or failing at any step now and then.
    /// Its readers reconnect from what they hold (past the rebuilt text: parked). Then the
    /// producer resumes after a while and re-sends what the old instance lost (most schedules),
    /// or never comes back (the window seals `interrupted`), or a cancel comes first
    /// (`cancelled`). Producers a resume replaced before the reset stay fenced. `false`: the
    /// stream ended, the schedule is over.
    fn reset_and_rehydrate(&mut self) -> bool {
        if !matches!(self.stream.state(), StreamState::Live) {
            return true;
        }
        let late = self.lose_instance();
        if self.db.status(STREAM) != "streaming" {
            self.fail(format!("a live stream's row is {}", self.db.status(STREAM)));
        }
        let Some(stream) = self.revive() else { self.fail("the revival never rebuilt the stream".into()) };
        let d = stream.durable_seq();
        if stream.seq() != d || utf16::slice(&self.produced, Offset(0), d).len() != stream.retained_text().1.len() {
            self.fail(format!("rehydrated at {} / {d}, not the durable text", stream.seq()));
        }
        self.install(stream);
        self.commit_late(late);
        // A Stop recorded on the row before the reset: the rebuilt stream seals `cancelled`.
        let stopped = self.row_cancelled();
        let epoch = self.epoch;
        if !stopped && self.stream.admit(Some(epoch)) != Err(Fenced::ResumeRequired { seq: d, durable_seq: d }) {
            self.fail(format!("a write of the current epoch before the resume: {:?}", self.stream.admit(Some(epoch))));
        }
        for old in self.replaced.clone().into_iter().filter(|_| !stopped) {
            if self.stream.admit(Some(old)) != Err(Fenced::Superseded { current: epoch }) {
                self.fail(format!("a replaced producer (epoch {old}) was not fenced after the reset: {:?}", self.stream.admit(Some(old))));
            }
            if self.stream.resume(Some(old), None, self.now).is_ok() {
                self.fail(format!("a replaced producer (epoch {old}) took the stream back after the reset"));
            }
        }
        // The readers' connections died with the instance: each reconnects from what it holds.
        self.readers.retain(|r| !r.done);
        for i in 0..self.readers.len() {
            let asked = utf16::len(&self.readers[i].text);
            self.parked += u64::from(asked > d);
            let id = self.stream.subscribe(asked);
            let r = &mut self.readers[i];
            (r.id, r.asked, r.opened) = (id, asked, false);
        }
        self.ui_readers.retain(|r| !r.done);
        for i in 0..self.ui_readers.len() {
            let from = self.ui_readers[i].resume_from;
            self.parked += u64::from(from > d);
            self.ui_readers[i].id = self.stream.subscribe_as(Dialect::Ui, from);
        }
        self.drain();
        if stopped {
            return self.abandon(EndStatus::Cancelled);
        }
        match self.rng.below(10) {
            0 => {
                self.stream.cancel();
                self.drain();
                self.abandon(EndStatus::Cancelled)
            }
            1 => {
                let until = self.stream.resume_by().unwrap_or_else(|| self.fail("a rebuilt stream without a window".into()));
                self.advance(until.0.saturating_sub(self.now.0));
                self.abandon(EndStatus::Interrupted)
            }
            _ => {
                let delay = self.rng.pick(&[0, 10, 300, 2000]);
                self.advance(delay);
                self.resume(d);
                true
            }
        }
    }

    /// The instance is lost: each reply in flight with it. Every write in flight committed
    /// already, commits late (returned: after the next instance read the row), or never. A lease
    /// being armed may or may not have been stored.
    fn lose_instance(&mut self) -> Vec<StoreRequest> {
        let mut late = vec![];
        for (_, req) in std::mem::take(&mut self.in_flight) {
            match self.rng.below(4) {
                0 | 1 => drop(support::answer(&self.tables, STREAM, req, Fault::None)),
                2 => late.push(req),
                _ => {}
            }
        }
        if let Some((_, lease)) = self.arming.take() {
            if self.rng.chance(0.5) {
                self.storage.apply(&KeyUpdate::arming(&lease));
            }
        }
        self.dead = true;
        self.check_prefix();
        late
    }

    /// The lost instance's writes that were still on their way commit now, after the new
    /// instance read the row: P must hold, and no seal of the new instance may shrink the text.
    fn commit_late(&mut self, late: Vec<StoreRequest>) {
        for req in late {
            let _ = support::answer(&self.tables, STREAM, req, Fault::None);
            self.late_commits += 1;
            self.check_prefix();
        }
    }

    /// One step of a revival as the schedule's faults have it: now and then a failure, a lost
    /// or duplicated answer, or the instance dying before or after the step applied.
    fn revival_steps(&mut self) -> Vec<Step> {
        (0..6)
            .map(|_| match self.rng.chance(self.fault_rate / 2.0 + 0.02) {
                false => Step::Ok,
                true => self.rng.pick(&[Step::Fail, Step::ApplyThenLose, Step::Duplicate, Step::Die, Step::DieAfterApply]),
            })
            .collect()
    }

    fn fresh_token(&mut self) -> String {
        self.tokens += 1;
        format!("fresh-{}-{}", self.seed, self.tokens)
    }

    /// Fresh instances try to rebuild the stream until one does: each revival that dies or
    /// fails is followed by another (a request's, or the alarm's a lease later). None may seal
    /// the row before its window.
    fn revive(&mut self) -> Option<LiveStream> {
        for _ in 0..50 {
            let steps = self.revival_steps();
            let fresh = self.fresh_token();
            let end = run_revival(&self.tables, &self.cfg, &mut self.storage, &fresh, self.now, &mut steps.into_iter());
            self.store_ops += 6;
            match end {
                Some(RevivalEnd::Revived(stream)) => return Some(*stream),
                None => self.revival_deaths += 1,
                Some(RevivalEnd::Failed(_)) => self.revival_failures += 1,
                Some(other) => self.fail(format!("the revival of a streaming row of ours ended {other:?}")),
            }
            if self.db.status(STREAM) != "streaming" {
                self.fail("a failed revival sealed the row".into());
            }
            self.now = self.now + Millis(self.rng.pick(&[1, 50, 1000]));
        }
        None
    }

    /// A rebuilt stream is the one this object holds from now on.
    fn install(&mut self, stream: LiveStream) {
        self.stream = stream;
        self.dead = false;
        self.retired = false;
        self.settled.clear(); // the lost instance's requests died with it; tickets number anew
        self.rehydrations += 1;
        self.drain();
    }

    /// The producer resumes and re-sends everything past the answered `seq` (it kept what was
    /// not durable: a `ui` producer also its unfinished line). Now and then it lost the answer
    /// to its first resume and retries it, with the same id: the same grant.
    fn resume(&mut self, d: Offset) {
        let (epoch, id) = (self.epoch, format!("producer-{}", self.epoch));
        let grant = self.stream.resume(Some(epoch), Some(&id), self.now).unwrap_or_else(|e| self.fail(format!("resume refused: {e}")));
        if self.rng.chance(0.2) {
            let again = self.stream.resume(Some(epoch), Some(&id), self.now);
            if again != Ok(grant) {
                self.fail(format!("a resume retried after a lost answer got {again:?}, first {grant:?}"));
            }
        }
        self.storage.apply(&KeyUpdate::resumed(grant.epoch, Some(&id)));
        self.drain();
        if (grant.seq, grant.epoch) != (d, epoch + 1) {
            self.fail(format!("resume answered {grant:?}, rehydrated at {d} with epoch {epoch}"));
        }
        self.epoch = grant.epoch;
        self.resumes += 1;
        self.resend_from(d);
    }

    /// A second producer replaces the live one (a new connection of the same answer): it resumes
    /// at the stream's own `seq`, the replaced one is fenced from then on, across resets too.
    fn replace_producer(&mut self) {
        let old = self.epoch;
        let id = format!("producer-{}", old + 1);
        let grant = match self.stream.resume(Some(old), Some(&id), self.now) {
            Ok(grant) => grant,
            Err(e) => self.fail(format!("a live stream refused its producer's resume: {e}")),
        };
        self.storage.apply(&KeyUpdate::resumed(grant.epoch, Some(&id)));
        self.drain();
        self.epoch = grant.epoch;
        self.replaced.push(old);
        self.replacements += 1;
        if self.stream.admit(Some(old)) != Err(Fenced::Superseded { current: grant.epoch }) {
            self.fail("the replaced producer was not fenced".into());
        }
        self.resend_from(grant.seq);
    }

    /// Re-sends everything the producer made past `from` (a `ui` producer's unfinished line too).
    fn resend_from(&mut self, from: Offset) {
        let kept = utf16::slice(&self.produced, Offset(0), from).len();
        let mut lost = self.produced.split_off(kept).into_bytes();
        if let Some((_, reference)) = &mut self.ui {
            lost.extend(std::mem::take(&mut reference.partial));
        }
        if self.stream.admit(Some(self.epoch)).is_err() {
            self.fail("the resumed producer was not admitted".into());
        }
        let result = match &mut self.ui {
            Some((_, reference)) => {
                let (accepted, refused) = reference.feed(&lost);
                self.produced.push_str(&accepted);
                assert!(!refused, "seed {}: a re-sent line was refused by the reference", self.seed);
                self.stream.push_ndjson(&lost, self.now)
            }
            None => {
                let text = String::from_utf8(lost).expect("text");
                self.produced.push_str(&text);
                self.stream.push(&text, self.now)
            }
        };
        match result {
            Ok(receipt) if receipt.seq == utf16::len(&self.produced) => {}
            other => self.fail(format!("the re-sent text was pushed as {other:?}")),
        }
        self.drain();
    }

    /// The stream ends without its producer, at its durable text (longer than the rebuilt one
    /// when a lost instance's checkpoint committed late): every reader (parked ones too) gets
    /// that text and the end, the row holds exactly it, and the lease finds it sealed.
    fn abandon(&mut self, status: EndStatus) -> bool {
        while !matches!(self.stream.state(), StreamState::Ended(_)) {
            self.advance(100);
        }
        self.abandoned = Some(status);
        let ended_as = self.stream.state();
        let ended_text = utf16::slice(&self.produced, Offset(0), self.stream.seq()).to_owned();
        self.ended_text = Some(ended_text.clone());
        if let Some((_, reference)) = &mut self.ui {
            reference.partial.clear();
        }
        for _ in 0..4 {
            for i in 0..self.readers.len() {
                self.pull(i);
            }
            for i in 0..self.ui_readers.len() {
                self.pull_ui(i);
            }
        }
        // The stream's own seal may have fallen short (store faults): the alarm retries it, and
        // the retry adopts what a late commit left in the row.
        let short = matches!(self.stream.holding(), Holding::Unsealed);
        let release = self.lease_alarm();
        self.interrupted |= status == EndStatus::Interrupted;
        let (row, durable) = (self.db.status(STREAM), self.db.durable_text(STREAM));
        let text_ok = match short {
            false => durable == ended_text,
            true => durable.starts_with(&ended_text) && self.produced.starts_with(&durable),
        };
        if ended_as != StreamState::Ended(status) || row != status.as_str() || !text_ok {
            self.fail(format!(
                "abandoned ({status:?}): the stream was {ended_as:?} with {ended_text:?}, the row {row} with {durable:?} after {release:?} (short: {short})"
            ));
        }
        self.produced = durable;
        if let Some(r) = self.readers.iter().find(|r| !r.done) {
            self.fail(format!("reader {:?} never got a terminal frame", r.id));
        }
        if let Some(r) = self.ui_readers.iter().find(|r| !r.done) {
            self.fail(format!("ui reader {:?} never got [DONE]", r.id));
        }
        if self.stream.resume(Some(self.epoch), None, self.now).is_ok() {
            self.fail("a resume of the ended stream was granted".into());
        }
        if release != Release::Sealed && !short && !self.retired {
            self.fail(format!("the alarm after the abandoned stream's committed seal did {release:?}"));
        }
        self.check_forgotten();
        false
    }

    /// The object dies and its producer with it: the lease alarm's revival rebuilds the stream
    /// (or finds nothing to rebuild: an open that never marked the row), nobody resumes, and the
    /// window seals the row `interrupted` from its durable text (what the lost instance had
    /// committed, late commits included); a reopen is then refused.
    fn crash(&mut self) {
        let late = self.lose_instance();
        self.commit_late(late);
        let before = self.db.durable_text(STREAM);
        let was_streaming = self.db.status(STREAM) == "streaming";
        if was_streaming && self.storage.stream_id.is_none() {
            self.fail("a row marked streaming with no lease armed".into());
        }
        if self.storage.stream_id.is_none() {
            return; // no alarm was ever set, and no row was marked
        }
        self.lease_alarm();
        let (status, after) = (self.db.status(STREAM), self.db.durable_text(STREAM));
        // A Stop recorded on the row is never lost: the rebuild reads it.
        let expected = if self.row_cancelled() { "cancelled" } else { "interrupted" };
        if was_streaming && (status != expected || after != before) {
            self.fail(format!("after the object died the row is {status} with {after:?} (durable was {before:?})"));
        }
        if status == "streaming" {
            self.fail("the object died and its row stayed streaming".into());
        }
        self.interrupted |= was_streaming && expected == "interrupted";
        self.check_forgotten();
        if was_streaming {
            // A regeneration is a new message id: the sealed row is not reopened.
            let request = Producer { host_token: "sim-host-2".into(), meta: None, chat: None, id: None };
            let (mut again, _) = LiveStream::open(STREAM, self.cfg.clone(), request, self.now);
            while let Some(o) = again.poll_output() {
                match o {
                    Output::Store(r) => {
                        let answer = support::answer(&self.tables, STREAM, r, Fault::None);
                        again.handle_store(answer, self.now);
                    }
                    Output::ArmLease { .. } => again.handle_lease_armed(Ok(()), self.now),
                    Output::Settled(Settlement::Opened(_, Err(OpenError::Refused(_)))) => return,
                    Output::Settled(other) => self.fail(format!("a reopen of the interrupted row settled {other:?}")),
                    _ => {}
                }
            }
            self.fail("a reopen of the interrupted row did not settle".into());
        }
    }

    /// The lease alarm: the core's [`LeaseAlarm`], driven as the shell drives it (its revival
    /// too), with the object's storage and the store failing at the fault rate and the instance
    /// dying mid-revival now and then. A run that renews fires again a lease later (the stream
    /// it rebuilt, or the one lingering here, runs meanwhile), until one releases.
    fn lease_alarm(&mut self) -> Release {
        for _ in 0..200 {
            let holding = if self.dead { Holding::Nothing } else { self.stream.holding() };
            let keys_fail = self.rng.chance(self.fault_rate / 2.0);
            let steps = self.revival_steps();
            let fresh = self.fresh_token();
            let run = support::run_alarm(
                &self.tables,
                &self.cfg,
                &mut self.storage,
                keys_fail,
                holding,
                &fresh,
                self.now,
                &mut steps.into_iter(),
            );
            self.store_ops += 2;
            match run {
                None => self.revival_deaths += 1, // the instance died mid-revival: the alarm fires again
                Some(run) => {
                    if run.retry_seal {
                        self.stream.retry_seal(self.now);
                        self.drain();
                    }
                    if let Some(stream) = run.revived {
                        self.install(stream);
                    }
                    match run.ended {
                        Ok(release) => return release,
                        Err(Renewal::Alive) if matches!(holding, Holding::Sealed | Holding::Unsealed) => {
                            self.fail("the alarm found the stream alive after it ended".into())
                        }
                        Err(_) => {}
                    }
                }
            }
            // Renewed: the alarm fires again one lease later.
            self.advance(self.cfg.lease_ms.0);
        }
        self.fail("the lease did not settle the row in 200 alarms".into())
    }

    /// A Stop is recorded on the row (its cancel column).
    fn row_cancelled(&self) -> bool {
        self.db.message_column(STREAM, "cancel").is_truthy()
    }

    /// A refused open: the alarm that follows leaves no row `streaming`.
    fn check_lease_leaves_nothing_streaming(&mut self) {
        if self.storage.stream_id.is_some() {
            self.lease_alarm();
        }
        if self.db.status(STREAM) == "streaming" {
            self.fail("a failed open left the row streaming".into());
        }
    }

    /// After the alarm, a seal that could not commit was repaired: the row holds the
    /// producer's status and exactly the produced text (or, when the stream no longer held what
    /// the repair needs, it was sealed `interrupted` from its durable text).
    fn check_repaired(&mut self) {
        let Some(Err(shortfall)) = self.seal_outcome() else { return };
        let (status, durable) = (self.db.status(STREAM), self.db.durable_text(STREAM));
        if self.repaired && status == shortfall.status.as_str() {
            if durable != self.produced || self.stream.durable_seq() != utf16::len(&self.produced) {
                self.fail(format!("after the repair the row is {status} with {durable:?}; produced {:?}", self.produced));
            }
        } else if self.repaired && status != "interrupted" {
            // Without the whole text the retry seals `interrupted` in place at the durable text.
            self.fail(format!("a repair that could not write the producer's seal left the row {status}"));
        } else if status == "streaming" {
            self.fail("an unrepairable seal left the row streaming".into());
        } else {
            self.interrupted |= status == "interrupted";
        }
    }

    /// How the producer's seal settled, if it did.
    fn seal_outcome(&self) -> Option<SealOutcome> {
        self.settled.get(&self.seal_ticket?.id()).and_then(SealOutcome::of).cloned()
    }

    fn check_end(&mut self) {
        let outcome = self.seal_outcome();
        let durable = self.db.durable_text(STREAM);
        match outcome {
            Some(Ok(report)) => {
                if durable != self.produced {
                    self.fail(format!("sealed OK but the durable text is {durable:?}, produced {:?}", self.produced));
                }
                if report.durable_seq != utf16::len(&self.produced) {
                    self.fail("sealed OK but short".into());
                }
                let status = self.db.status(STREAM);
                if status != report.status.as_str() {
                    self.fail(format!("row status {status}, sealed {:?}", report.status));
                }
                if report.status == EndStatus::Complete && self.cancelled_at_close {
                    self.fail("a cancelled stream sealed complete".into());
                }
            }
            Some(Err(shortfall)) => {
                if shortfall.durable_seq > utf16::len(&durable) || shortfall.durable_seq > shortfall.seq {
                    self.fail(format!("a shortfall that overclaims: {shortfall:?} with {} in the store", utf16::len(&durable)));
                }
            }
            None => self.fail("the seal did not settle".into()),
        }
        for r in &self.readers {
            if !r.done {
                self.fail(format!("reader {:?} never got a terminal frame", r.id));
            }
        }
        let lines_end = self.produced.rfind('\n').map_or(Offset(0), |nl| utf16::len(&self.produced[..=nl]));
        for r in &self.ui_readers {
            if !r.done || r.cursor < lines_end {
                self.fail(format!("ui reader {:?} ended at {} of {lines_end} without [DONE] ({:?})", r.id, r.cursor, r.ending));
            }
        }
    }
}

/// What a run of schedules exercised, summed over its threads.
#[derive(Default)]
struct Totals {
    schedules: u64,
    ops: u64,
    readers: usize,
    sealed_short: u64,
    repaired: u64,
    interrupted: u64,
    ui_schedules: u64,
    ui_readers: usize,
    bad_lines: u64,
    unsaved_endings: u64,
    rehydrations: u64,
    resumes: u64,
    /// Checkpoints of a lost instance that committed after the new instance read the row.
    late_commits: u64,
    /// Revivals cut short by the instance dying at one of their steps, or failing one.
    revival_deaths: u64,
    revival_failures: u64,
    /// Producers replaced by a resume while the stream was live.
    replacements: u64,
    parked: u64,
    abandoned: u64,
}

impl Totals {
    fn add(&mut self, sim: &Sim) {
        self.schedules += 1;
        self.ops += sim.store_ops;
        self.readers += sim.readers.len();
        self.sealed_short += u64::from(matches!(sim.seal_outcome(), Some(Err(_))));
        self.repaired += u64::from(sim.repaired);
        self.interrupted += u64::from(sim.interrupted);
        self.ui_schedules += u64::from(sim.ui.is_some());
        self.ui_readers += sim.ui_readers.len();
        self.bad_lines += sim.bad_lines;
        self.unsaved_endings += sim.unsaved_endings;
        self.rehydrations += sim.rehydrations;
        self.resumes += sim.resumes;
        self.parked += sim.parked;
        self.abandoned += u64::from(sim.abandoned.is_some());
        self.late_commits += sim.late_commits;
        self.revival_deaths += sim.revival_deaths;
        self.revival_failures += sim.revival_failures;
        self.replacements += sim.replacements;
    }

    fn merge(&mut self, other: Totals) {
        self.schedules += other.schedules;
        self.ops += other.ops;
        self.readers += other.readers;
        self.sealed_short += other.sealed_short;
        self.repaired += other.repaired;
        self.interrupted += other.interrupted;
        self.ui_schedules += other.ui_schedules;
        self.ui_readers += other.ui_readers;
        self.bad_lines += other.bad_lines;
        self.unsaved_endings += other.unsaved_endings;
        self.rehydrations += other.rehydrations;
        self.resumes += other.resumes;
        self.parked += other.parked;
        self.abandoned += other.abandoned;
        self.late_commits += other.late_commits;
        self.revival_deaths += other.revival_deaths;
        self.revival_failures += other.revival_failures;
        self.replacements += other.replacements;
    }
}

/// Runs the schedules on `backend`, split over `threads` threads, each on its own store from
/// `open` (`None`: the store is not there, said loudly by `open`). A schedule is a function of
/// its seed alone, so the split changes nothing but the time. Nothing runs when `SIM_BACKEND`
/// names the other store.
fn run_schedules(backend: &'static str, default_schedules: u64, threads: u64, open: impl Fn() -> Option<Backend> + Sync) {
    if std::env::var("SIM_BACKEND").is_ok_and(|b| b != backend) {
        return;
    }
    let schedules: u64 = std::env::var("SIM_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(default_schedules);
    let seeds: Vec<u64> = match std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (1..=schedules).collect(),
    };
    let started = std::time::Instant::now();
    let mut totals = Totals::default();
    let parts: Vec<Option<Totals>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (seeds, open) = (&seeds, &open);
                scope.spawn(move || {
                    BACKEND.set(backend);
                    let backend = open()?;
                    let mut totals = Totals::default();
                    for seed in seeds.iter().skip(t as usize).step_by(threads as usize) {
                        let mut sim = Sim::new(*seed, backend.clone());
                        sim.run();
                        totals.add(&sim);
                    }
                    Some(totals)
                })
            })
            .collect();
        // A failing schedule's panic (its seed and store) is the test's failure.
        workers.into_iter().map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    for part in parts {
        let Some(part) = part else { return };
        totals.merge(part);
    }
    let Totals {
        schedules,
        ops,
        readers,
        sealed_short,
        repaired,
        interrupted,
        ui_schedules,
        ui_readers,
        bad_lines,
        unsaved_endings,
        rehydrations,
        resumes,
        parked,
        abandoned,
        late_commits,
        revival_deaths,
        revival_failures,
        replacements,
    } = totals;
    println!(
        "{backend}: {schedules} schedules ({ui_schedules} ui streams) on {threads} threads in {:.1} s, {ops} store operations, {readers} readers and {ui_readers} /ui readers, \
         {bad_lines} bad lines refused, {unsaved_endings} /ui endings saying the lines shown were not all saved, {sealed_short} seals short ({repaired} repaired by the lease), \
         {interrupted} rows sealed interrupted (by the lease or the resume window), {rehydrations} rehydrations ({resumes} resumed, {parked} readers parked, \
         {abandoned} streams abandoned in the gap, {late_commits} late commits of lost instances, {revival_deaths} instances dead \
         mid-revival, {revival_failures} revival steps failed, {replacements} producers replaced)",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(schedules, seeds.len() as u64);
    assert!(ops > schedules, "the simulator exercised the store");
    assert!(seeds.len() < 100 || (resumes > 0 && parked > 0 && abandoned > 0), "the schedules reset, resume, park and abandon");
    assert!(
        seeds.len() < 100 || (late_commits > 0 && revival_deaths > 0 && revival_failures > 0 && replacements > 0),
        "the schedules commit late, kill and fail revivals, and replace producers"
    );
}

/// The database a thread's schedules run on, and the mapped tables on it.
#[derive(Clone)]
struct Backend {
    db: Rc<dyn Store>,
    tables: Tables,
}

impl Backend {
    fn new<D: Store + SqlExecutor + 'static>(db: D) -> Self {
        let db = Rc::new(db);
        Self { tables: support::tables(&db), db }
    }
}

#[test]
fn contracts_s_and_p_hold_over_random_faulty_schedules() {
    // The short run (about 14 s on 2 cores in `cargo test`'s optimized profile, debug assertions
    // on); the proof run is SIM_SCHEDULES=10000 (docs/TESTING.md).
    run_schedules("sqlite", 2_000, 2, || Some(Backend::new(SqliteDb::new())));
}

#[test]
fn contracts_s_and_p_hold_over_random_faulty_schedules_on_postgres() {
    // Four connections: a schedule on Postgres waits on round trips, not on the CPU.
    // The short run; the proof run is SIM_SCHEDULES=1000 (docs/TESTING.md).
    run_schedules("postgres", 300, 4, || PgDb::new("simulator").map(Backend::new));
}
