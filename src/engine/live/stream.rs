//! The live stream: phases, inputs, outputs and the reader side.

use super::checkpoint::{Checkpointer, Retry, RoundReply};
use super::lease::Holding;
use super::open::{Opener, Producer, Progress};
use super::outbox::Outbox;
use super::readers::{Dialect, Pacing, Pull, ReaderId, Readers};
use super::resume::Survival;
use crate::engine::durable::{OpenRefused, RowState};
use crate::engine::host::config::{CheckpointMode, StreamConfig};
use crate::engine::host::hook::SealCause;
use crate::engine::host::store::{Checkpoint, OpId, ReadState, Reply, SealWrite, StoreAnswer, StoreError, StoreRequest};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::buffer::TextBuffer;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, Frame};
use crate::engine::wire::ui::{BadChunk, Format, LineAssembler};
use std::marker::PhantomData;
use thiserror::Error;

/// Names one pending request (open, flush or seal) until it settles with a `T`: an
/// [`OpenOutcome`], a [`FlushOutcome`] or a [`SealOutcome`]. The type says what the settlement
/// carries, so a waiter never has to handle a settlement of another kind.
#[must_use = "a ticket names a request that settles later: await its settlement"]
pub struct Ticket<T> {
    id: u64,
    settles_with: PhantomData<fn() -> T>,
}

impl<T> Ticket<T> {
    pub(crate) fn new(id: u64) -> Self {
        Self { id, settles_with: PhantomData }
    }

    /// A number naming this request among the stream's tickets.
    pub fn id(self) -> u64 {
        self.id
    }
}

// By hand: derives would demand the same of `T`, which a ticket does not hold.
impl<T> Clone for Ticket<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ticket<T> {}
impl<T> PartialEq for Ticket<T> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl<T> Eq for Ticket<T> {}
impl<T> std::hash::Hash for Ticket<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}
impl<T> std::fmt::Debug for Ticket<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ticket({})", self.id)
    }
}

/// How an open settles.
pub type OpenOutcome = Result<(), OpenError>;
/// How a flush settles: the confirmed `durableSeq`, or why it could not be confirmed.
pub type FlushOutcome = Result<Offset, FlushError>;
/// How a seal settles.
pub type SealOutcome = Result<SealReport, SealShortfall>;

/// Something for the shell to do, drained with [`LiveStream::poll_output`].
#[derive(Debug)]
pub enum Output {
    /// Perform a store operation, and answer it with [`LiveStream::handle_store`].
    Store(StoreRequest),
    /// A parked reader has frames: pull it.
    Wake(ReaderId),
    /// Store what the lease alarm needs (the stream id and `host_token`) and set the alarm one
    /// lease from now; answer with [`LiveStream::handle_lease_armed`]. The open waits for it
    /// before it marks the row.
    ArmLease { host_token: String },
    /// Set the lease alarm one lease from now again (the stream is alive here).
    RenewLease,
    /// Undo the [`Output::ArmLease`] with `host_token`: that open was refused without marking
    /// the row, so its lease guards nothing, and its alarm must not seal a row another producer
    /// holds. The object restores what its lease held before that arming (an earlier stream's
    /// lease keeps guarding its row), or holds nothing.
    DisarmLease { host_token: String },
    /// A request settled.
    Settled(Settlement),
    /// Something worth one log line.
    Event(StreamEvent),
    /// The stream is over (refused, or its linger window passed): drop the machine.
    Retired,
}

/// A request that settled, with its ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    Opened(Ticket<OpenOutcome>, OpenOutcome),
    Flushed(Ticket<FlushOutcome>, FlushOutcome),
    Sealed(Ticket<SealOutcome>, SealOutcome),
}

/// Why an open failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpenError {
    #[error(transparent)]
    Refused(#[from] OpenRefused),
    #[error("the store failed while opening: {0}")]
    Store(StoreError),
    #[error("the lease could not be armed, so the row was not marked: {0}")]
    Lease(String),
}

/// A flush that could not be confirmed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FlushError {
    #[error("checkpoint failed with {durable_seq} of {seq} characters durable: {reason}")]
    CheckpointFailed { seq: Offset, durable_seq: Offset, reason: CheckpointError },
    #[error("the stream ended with only {durable_seq} of {seq} characters durable")]
    EndedShort { seq: Offset, durable_seq: Offset },
    #[error("the stream is not open")]
    NotOpen,
}

/// A seal that committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealReport {
    pub status: EndStatus,
    pub seq: Offset,
    pub durable_seq: Offset,
}

/// A seal that could not commit: the stream ended anyway, short of what was produced.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the seal could not commit ({reason}); {durable_seq} of {seq} characters are durable")]
pub struct SealShortfall {
    pub status: EndStatus,
    pub seq: Offset,
    pub durable_seq: Offset,
    pub reason: Shortfall,
}

/// Why a seal fell short.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Shortfall {
    /// The terminal write failed (after its retries).
    #[error(transparent)]
    Store(StoreError),
    /// An in-place seal's tail could not be committed as chunks first.
    #[error("the tail could not be committed before the seal")]
    TailNotCommitted,
    #[error("the stream is not open")]
    NotOpen,
}

/// Why one checkpoint attempt did not confirm its slice.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CheckpointError {
    /// The write failed (whether it may have committed, the store error says; in mapped tables
    /// a read-back then decides what landed).
    #[error(transparent)]
    Store(StoreError),
    /// The write's answer failed, and so did the read-back that would have decided.
    #[error("the read-back failed: {0}")]
    ReadBack(StoreError),
    /// The store holds more than was produced here: someone else wrote to the row.
    #[error("the store holds {stored} characters but only {produced} were produced here")]
    Overclaim { stored: Offset, produced: Offset },
    /// The store confirmed less than the slice: its `from` was stale, and the guarded
    /// statements made it a no-op.
    #[error("the store confirmed {stored} of {to}")]
    Short { stored: Offset, to: Offset },
}

impl CheckpointError {
    /// The store's error, where the store failed (it says whether the write may have committed).
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            CheckpointError::Store(e) | CheckpointError::ReadBack(e) => Some(e),
            CheckpointError::Overclaim { .. } | CheckpointError::Short { .. } => None,
        }
    }
}

/// A push that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PushError {
    #[error("the stream is not open")]
    NotOpen,
    #[error("the stream is closed")]
    Closed,
    /// A `ui` stream refused a line: the lines before it were pushed (`receipt` says how far
    /// the stream got, which is where the bad line starts); it and the rest of the piece were not.
    #[error("{bad}")]
    BadChunk { bad: BadChunk, receipt: PushReceipt },
    /// Raw bytes were pushed to a `text` stream, which takes text (the shell reassembles
    /// characters split across the pieces of a body).
    #[error("raw bytes are pushed only to a ui stream")]
    NotUi,
}

/// What a producer learns from a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushReceipt {
    pub seq: Offset,
    pub durable_seq: Offset,
    pub cancelled: bool,
}

/// Observable moments, one log line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    Opened,
    OpenFailed(OpenError),
    /// One attempt failed; `will_retry` says whether another follows.
    CheckpointAttemptFailed {
        from: Offset,
        to: Offset,
        attempt: u32,
        will_retry: bool,
        error: CheckpointError,
    },
    /// A checkpoint round gave up; the text stays in the buffer.
    CheckpointFailed {
        from: Offset,
        to: Offset,
        error: CheckpointError,
    },
    Sealed {
        status: EndStatus,
        seq: Offset,
        durable_seq: Offset,
        shortfall: Option<Shortfall>,
        /// Why an `interrupted` seal happened ([`LiveStream::interrupt`]).
        cause: Option<SealCause>,
    },
    ReaderDropped {
        reader: ReaderId,
        reason: super::DropReason,
    },
}

/// Counters for `/stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub checkpoints: u64,
    pub failures: u64,
    pub retries: u64,
    pub bytes_written: u64,
    /// Writes to readers (pulls that returned bytes); merging and pacing make it smaller
    /// than frames × readers.
    pub reader_writes: u64,
}

/// Where the stream is in its life.
#[derive(Debug)]
pub(crate) enum Phase {
    /// The open handshake is under way.
    Opening(Opener),
    Live,
    /// A seal is requested; the terminal write is pending.
    Sealing(Sealing),
    /// Sealed; joinable until `linger_until`.
    Ended {
        seal: Seal,
        shortfall: Option<SealShortfall>,
        linger_until: Timestamp,
    },
    /// Refused at open, or past its linger window.
    Retired,
}

/// What the producer asked the seal to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seal {
    pub status: EndStatus,
    pub error: Option<String>,
    /// The body cannot be compacted into one row: commit the tail as chunks, then seal in place.
    pub in_place: bool,
    /// Why an `interrupted` seal happened (for the hook).
    pub cause: Option<SealCause>,
}

/// The seal in progress: one phase, holding everything only a sealing stream has.
#[derive(Debug)]
pub(crate) struct Sealing {
    pub(super) seal: Seal,
    /// An in-place seal's tail could not be committed; seal with what is durable.
    tail_abandoned: bool,
    write: SealStep,
    /// The requests (close, fail, idle timeout) waiting for the outcome.
    tickets: Vec<Ticket<SealOutcome>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SealStep {
    /// A checkpoint round must settle first: one in flight, or an in-place seal's tail.
    AwaitingRound,
    Writing {
        op: OpId,
        attempt: u32,
        compacts: bool,
    },
    Backoff {
        until: Timestamp,
        attempt: u32,
    },
}

/// What the stream reports about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    Opening,
    Live,
    Sealing,
    Ended(EndStatus),
    Retired,
}

/// One stream's live state. See the module docs for the driving loop.
#[derive(Debug)]
pub struct LiveStream {
    id: String,
    pub(super) cfg: StreamConfig,
    pub(super) phase: Phase,
    pub(super) buf: TextBuffer,
    /// A `ui` stream's unfinished last line (only complete lines enter `buf`).
    pub(super) ui_lines: Option<LineAssembler>,
    pub(super) durable_seq: Offset,
    cancelled: bool,
    pub(super) readers: Readers,
    /// The app's `meta` from the open.
    meta: Option<serde_json::Value>,
    ck: Checkpointer,
    /// When the lease is renewed next (set once the open armed it, while the stream is alive).
    pub(super) lease_renew_at: Option<Timestamp>,
    flush_waiters: Vec<(Ticket<FlushOutcome>, Offset)>,
    /// The producer's last append or flush (for the idle timeout).
    pub(super) last_activity: Timestamp,
    /// The latest time an input brought (reader pacing reads it when frames fan out).
    pub(super) clock: Timestamp,
    pub(super) out: Outbox,
    stats: Stats,
    /// The producer epoch, the resume window and the parked readers (`live/resume.rs`).
    pub(super) survival: Survival,
}

impl LiveStream {
    /// Starts opening `stream_id` (the open handshake, `live/open.rs`); the ticket settles with
    /// [`Settlement::Opened`].
    #[must_use = "the stream must be driven, and its ticket awaited"]
    pub fn open(stream_id: &str, cfg: StreamConfig, producer: Producer, now: Timestamp) -> (Self, Ticket<OpenOutcome>) {
        let mut stream = Self::new_live(stream_id, cfg, producer.meta.clone(), now);
        let ticket = stream.out.ticket();
        stream.phase = Phase::Opening(Opener::start(ticket, producer, &stream.cfg, now, &mut stream.out));
        (stream, ticket)
    }

    /// A stream in phase `Live` with nothing produced: what [`Self::open`] starts from (in
    /// phase `Opening`) and [`Self::rehydrate`] fills.
    pub(super) fn new_live(stream_id: &str, cfg: StreamConfig, meta: Option<serde_json::Value>, now: Timestamp) -> Self {
        let readers = Readers::new(
            cfg.max_queued_frames,
            cfg.merge_queued_chunks,
            Pacing { per_reader_us: cfg.reader_pacing_us, max_ms: cfg.reader_pacing_max_ms, burst: cfg.reader_pacing_burst },
            cfg.keepalive_ms,
        );
        let ui_lines = (cfg.format == Format::Ui).then(|| LineAssembler::new(cfg.ui_validation));
        Self {
            id: stream_id.to_owned(),
            cfg,
            phase: Phase::Live,
            buf: TextBuffer::new(),
            ui_lines,
            durable_seq: Offset::ZERO,
            cancelled: false,
            readers,
            meta,
            ck: Checkpointer::default(),
            lease_renew_at: None,
            flush_waiters: Vec::new(),
            last_activity: now,
            clock: now,
            out: Outbox::default(),
            stats: Stats::default(),
            survival: Survival::opened(),
        }
    }

    // ---- getters

    pub fn stream_id(&self) -> &str {
        &self.id
    }

    /// The produced length.
    pub fn seq(&self) -> Offset {
        self.buf.seq()
    }

    /// The app's `meta` from the open (the authorizer sees it).
    pub fn meta(&self) -> Option<&serde_json::Value> {
        self.meta.as_ref()
    }

    /// What the lease alarm finds of this stream: one rule for the renewals and the alarm
    /// (see [`super::lease::decide`]).
    pub fn holding(&self) -> Holding {
        match &self.phase {
            Phase::Opening(_) | Phase::Live | Phase::Sealing(_) => Holding::Alive,
            Phase::Ended { shortfall: None, .. } => Holding::Sealed,
            Phase::Ended { shortfall: Some(_), .. } => Holding::Unsealed(self.unsealed_write()),
            Phase::Retired => Holding::Nothing,
        }
    }

    /// What the stream's text is (SPEC §9).
    pub fn format(&self) -> Format {
        self.cfg.format
    }

    /// The confirmed durable length.
    pub fn durable_seq(&self) -> Offset {
        self.durable_seq
    }

    /// A cancel was requested (directly, or seen in a read-back).
    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    pub fn state(&self) -> StreamState {
        match &self.phase {
            Phase::Opening(_) => StreamState::Opening,
            Phase::Live => StreamState::Live,
            Phase::Sealing(_) => StreamState::Sealing,
            Phase::Ended { seal, .. } => StreamState::Ended(seal.status),
            Phase::Retired => StreamState::Retired,
        }
    }

    /// Readers receiving live frames.
    pub fn reader_count(&self) -> usize {
        self.readers.live_count()
    }

    /// The least time between two wakes of one reader now (pacing grows with the number of readers).
    pub fn reader_pacing_ms(&self) -> Millis {
        self.readers.pacing()
    }

    pub fn stats(&self) -> Stats {
        Stats { reader_writes: self.readers.writes(), ..self.stats }
    }

    /// Memory held for this stream, as an upper bound: the retained text plus the encoded
    /// frames queued for readers (a frame shared by several readers is counted for each).
    pub fn retained_bytes(&self) -> usize {
        self.buf.retained_bytes() + self.readers.queued_bytes()
    }

    // ---- producer inputs

    /// Appends produced text and fans it out at once. In a `ui` stream the text goes through
    /// the line assembler: only complete, valid lines enter the text.
    pub fn push(&mut self, text: &str, now: Timestamp) -> Result<PushReceipt, PushError> {
        self.producer_input(now)?;
        match self.ui_lines.is_some() {
            true => self.push_lines(text.as_bytes(), now)?,
            false => self.append(text, now),
        }
        Ok(self.receipt())
    }

    /// Appends a piece of a `ui` stream's NDJSON as it arrived: a piece may split a line, or a
    /// UTF-8 sequence, anywhere. A bad line is refused with the lines before it pushed.
    pub fn push_ndjson(&mut self, piece: &[u8], now: Timestamp) -> Result<PushReceipt, PushError> {
        if self.ui_lines.is_none() {
            return Err(PushError::NotUi);
        }
        self.producer_input(now)?;
        self.push_lines(piece, now)?;
        Ok(self.receipt())
    }

    /// A producer's push may come in now: the stream is live.
    fn producer_input(&mut self, now: Timestamp) -> Result<(), PushError> {
        match self.phase {
            Phase::Live => {}
            Phase::Opening(_) | Phase::Retired => return Err(PushError::NotOpen),
            Phase::Sealing(_) | Phase::Ended { .. } => return Err(PushError::Closed),
        }
        self.last_activity = now;
        self.clock = self.clock.max(now);
        Ok(())
    }

    fn append(&mut self, text: &str, now: Timestamp) {
        if !text.is_empty() {
            let (from, seq) = self.buf.push(text);
            self.fan_out(Frame::Chunk { from, seq, text: text.to_owned() });
            self.unpark(None);
            self.drive(now);
        }
    }

    fn push_lines(&mut self, piece: &[u8], now: Timestamp) -> Result<(), PushError> {
        let Some(assembler) = self.ui_lines.as_mut() else { return Ok(()) };
        let out = assembler.feed(piece);
        self.append(&out.lines, now);
        self.readers.lines_entered(self.buf.seq(), out.holds);
        match out.fault {
            Some(fault) => Err(PushError::BadChunk { bad: BadChunk { offset: self.seq(), fault }, receipt: self.receipt() }),
            None => Ok(()),
        }
    }

    pub fn receipt(&self) -> PushReceipt {
        PushReceipt { seq: self.seq(), durable_seq: self.durable_seq, cancelled: self.cancelled }
    }

    /// Asks for everything produced so far to be durable; settles with [`Settlement::Flushed`].
    /// Every flush a live stream accepts counts as producer activity (a producer keeping a long
    /// tool call alive with flushes is not idle).
    pub fn flush(&mut self, now: Timestamp) -> Ticket<FlushOutcome> {
        let ticket = self.out.ticket();
        let at = self.seq();
        if matches!(self.phase, Phase::Live) {
            self.last_activity = now;
        }
        let settled = match &self.phase {
            Phase::Opening(_) | Phase::Retired => Some(Err(FlushError::NotOpen)),
            _ if self.durable_seq >= at => Some(Ok(self.durable_seq)),
            // After a failed seal the shortfall is permanent: nothing will retry it.
            Phase::Ended { .. } => Some(Err(FlushError::EndedShort { seq: at, durable_seq: self.durable_seq })),
            Phase::Live | Phase::Sealing(_) => None,
        };
        match settled {
            Some(result) => self.settle(Settlement::Flushed(ticket, result)),
            None => {
                self.flush_waiters.push((ticket, at));
                self.ck.force();
                self.drive(now);
            }
        }
        ticket
    }

    /// Seals `complete`, or `cancelled` when a cancel was seen.
    pub fn close(&mut self, now: Timestamp) -> Ticket<SealOutcome> {
        let status = if self.cancelled { EndStatus::Cancelled } else { EndStatus::Complete };
        self.seal(status, None, now)
    }

    /// Seals `error` with the producer's message, or `cancelled` when a cancel was seen: the
    /// reader asked first, and a producer's error after it is most often the cancel's own
    /// consequence (its model stopped, its streaming append's connection cut by the early answer).
    pub fn fail(&mut self, error: &str, now: Timestamp) -> Ticket<SealOutcome> {
        if self.cancelled {
            return self.seal(EndStatus::Cancelled, None, now);
        }
        self.seal(EndStatus::Error, Some(error.to_owned()), now)
    }

    /// Seals with `status`; settles with [`Settlement::Sealed`]. A second seal joins the first
    /// (or, once ended, gets the first one's outcome): a stream seals once.
    pub fn seal(&mut self, status: EndStatus, error: Option<String>, now: Timestamp) -> Ticket<SealOutcome> {
        self.seal_for(status, error, None, now)
    }

    /// Seals `interrupted` for `cause`, which the hook is told.
    pub fn interrupt(&mut self, cause: SealCause, error: String, now: Timestamp) -> Ticket<SealOutcome> {
        self.seal_for(EndStatus::Interrupted, Some(error), Some(cause), now)
    }

    fn seal_for(&mut self, status: EndStatus, error: Option<String>, cause: Option<SealCause>, now: Timestamp) -> Ticket<SealOutcome> {
        let ticket = self.out.ticket();
        match &mut self.phase {
            Phase::Live => {
                // An unfinished last line is kept in the text as sent; it never becomes a chunk.
                if let Some(fragment) = self.ui_lines.as_mut().and_then(LineAssembler::take_partial) {
                    self.append(&fragment, now);
                }
                let seal = Seal { status, error, in_place: self.must_seal_in_place(), cause };
                self.phase = Phase::Sealing(Sealing { seal, tail_abandoned: false, write: SealStep::AwaitingRound, tickets: vec![ticket] });
                self.ck.stop_cadence();
                self.drive(now);
            }
            Phase::Sealing(sealing) => sealing.tickets.push(ticket),
            Phase::Ended { seal, shortfall, .. } => {
                let (status, shortfall) = (seal.status, shortfall.clone());
                let outcome = self.seal_outcome(status, shortfall);
                self.settle(Settlement::Sealed(ticket, outcome));
            }
            Phase::Opening(_) | Phase::Retired => {
                let shortfall = SealShortfall { status, seq: self.seq(), durable_seq: self.durable_seq, reason: Shortfall::NotOpen };
                self.settle(Settlement::Sealed(ticket, Err(shortfall)));
            }
        }
        ticket
    }

    /// After a seal that could not commit: the terminal write to try again, while this stream
    /// still holds what it needs (the whole text for a compaction; for an in-place seal, a
    /// tail that is all durable). The lease alarm retries it before sealing the row
    /// `interrupted`; `None` when there is nothing to retry or too little to retry it with.
    pub fn unsealed_write(&self) -> Option<SealWrite> {
        let Phase::Ended { seal, shortfall: Some(_), .. } = &self.phase else { return None };
        // A compaction needs the whole text; a sink is given `from` and `body_from` and takes
        // what the buffer retained.
        let whole_text = self.buf.floor() == Offset::ZERO || self.cfg.mode == CheckpointMode::Sink;
        let body = match seal.in_place {
            true if self.durable_seq == self.seq() => None,
            false if whole_text => Some(self.buf.as_str().to_owned()),
            _ => return None,
        };
        Some(SealWrite {
            status: seal.status,
            error: seal.error.clone(),
            seq: self.seq(),
            from: self.durable_seq,
            body,
            body_from: self.buf.floor(),
            guard: None,
        })
    }

    /// The write from [`Self::unsealed_write`] committed: the stream is sealed after all, with
    /// everything durable.
    pub fn seal_repaired(&mut self) {
        if let Phase::Ended { shortfall, .. } = &mut self.phase {
            if shortfall.take().is_some() {
                self.durable_seq = self.buf.seq();
            }
        }
    }

    /// Records a cancel request; the producer learns it from its next receipt.
    pub fn cancel(&mut self) {
        self.cancelled = true;
        self.cancel_in_gap();
    }

    // ---- reader inputs

    /// Attaches an `/events` reader at UTF-16 offset `from` (see [`Self::subscribe_as`]).
    #[must_use = "a reader's frames queue until it is pulled or detached"]
    pub fn subscribe(&mut self, from: Offset) -> ReaderId {
        self.subscribe_as(Dialect::Events, from)
    }

    /// Attaches a reader of `dialect` at UTF-16 offset `from`: replays `open`, the text from
    /// there, a `durable` and (if ended) `end` in this one step, then registers it for live
    /// frames, so no delta can fall between replay and live tail. A `ui` reader joins at the
    /// start of the line holding `from`.
    #[must_use = "a reader's frames queue until it is pulled or detached"]
    pub fn subscribe_as(&mut self, dialect: Dialect, from: Offset) -> ReaderId {
        if matches!(self.phase, Phase::Retired) {
            return self.readers.attach(dialect, vec![Frame::Absent], self.clock);
        }
        if let Some(parked) = self.park(dialect, from) {
            return parked;
        }
        let replay = self.replay(dialect, from);
        self.readers.attach(dialect, replay, self.clock)
    }

    /// What a reader joining at `from` is replayed: `open`, the text from there, a `durable`
    /// and (if ended) `end`; `stale` when the text there is no longer held.
    pub(super) fn replay(&self, dialect: Dialect, from: Offset) -> Vec<Frame> {
        let ended = match &self.phase {
            // A reader that joins while the stream opens is attached (the text is empty so
            // far); it gets `absent` only if the open fails.
            Phase::Opening(_) | Phase::Live | Phase::Sealing(_) | Phase::Retired => None,
            Phase::Ended { seal, .. } => Some(seal.clone()),
        };
        let seq = self.seq();
        let wanted = from.min(seq);
        let at = match dialect {
            _ if wanted < self.buf.floor() => None,
            Dialect::Events => Some(self.buf.char_floor(wanted)),
            Dialect::Ui => self.buf.line_start(wanted),
        };
        let Some(at) = at else { return vec![self.stale_frame()] };
        let mut replay =
            vec![Frame::Open { stream_id: self.id.clone(), from: at, seq, durable_seq: self.durable_seq, ended: ended.is_some() }];
        if seq > at {
            replay.push(Frame::Chunk { from: at, seq, text: self.buf.tail(at).to_owned() });
        }
        if self.durable_seq > at {
            replay.push(Frame::Durable { seq: self.durable_seq });
        }
        if let Some(seal) = ended {
            replay.push(self.end_frame(&seal));
        }
        replay
    }

    /// Takes what is queued for a reader, as SSE bytes (`Pending` while it waits for data or
    /// for its pace; a wake output names it when it should pull again).
    pub fn pull(&mut self, reader: ReaderId, now: Timestamp) -> Pull {
        self.readers.pull(reader, now)
    }

    /// When `reader`, after a `Pending` pull, next needs a pull: when its pace has passed, or
    /// when it is due a keep-alive ping. The shell arms a timer for it (the stream's other
    /// deadlines are armed already).
    pub fn reader_due(&self, reader: ReaderId) -> Option<Timestamp> {
        self.readers.due_of(reader)
    }

    /// A reader's client went away.
    pub fn detach(&mut self, reader: ReaderId) {
        self.readers.detach(reader);
    }

    // ---- store replies

    /// Feeds the store's answer to one of the stream's requests (an answer to a request no
    /// longer awaited, such as a late reply after its failure was answered, changes nothing).
    pub fn handle_store(&mut self, answer: StoreAnswer, now: Timestamp) {
        self.clock = self.clock.max(now);
        let StoreAnswer { id: op, reply } = answer;
        match (&self.phase, reply) {
            (Phase::Opening(_), reply) => self.open_progress(|opener, cfg, out| opener.on_store_reply(op, reply, cfg, now, out), now),
            (Phase::Sealing(Sealing { write: SealStep::Writing { op: id, attempt, compacts }, .. }), Reply::Seal(result)) if *id == op => {
                let (attempt, compacts) = (*attempt, *compacts);
                self.on_seal_reply(result, attempt, compacts, now)
            }
            (_, reply) => self.handle_round_reply(op, reply, now),
        }
    }

    /// A store answer for the checkpoint round.
    fn handle_round_reply(&mut self, op: OpId, reply: Reply, now: Timestamp) {
        match self.ck.on_reply(op, reply, &self.cfg.mode) {
            None => {} // the reply of an operation no longer awaited
            Some(RoundReply::ReadBack { from, write_error }) => {
                let op = self.out.request(ReadState);
                self.ck.reading_back(op, from, write_error);
            }
            Some(RoundReply::Confirmed { from, state, write_error }) => self.on_confirmed(from, state, write_error, now),
            Some(RoundReply::Failed { from, error }) => self.attempt_failed(from, error, now),
        }
    }

    // ---- time

    /// The next moment [`Self::handle_timeout`] has work to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let phase_deadline = match &self.phase {
            Phase::Opening(opener) => opener.deadline(),
            Phase::Live => [self.idle_deadline(), self.survival.window].into_iter().flatten().min(),
            Phase::Sealing(Sealing { write: SealStep::Backoff { until, .. }, .. }) => Some(*until),
            Phase::Ended { linger_until, .. } => Some(*linger_until),
            _ => None,
        };
        [phase_deadline, self.lease_renew_at, self.ck.deadline(), self.readers.next_due()].into_iter().flatten().min()
    }

    /// Does whatever is due at `now`.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.clock = self.clock.max(now);
        for reader in self.readers.wake_due(now) {
            self.out.push(Output::Wake(reader));
        }
        match self.phase {
            Phase::Opening(ref mut opener) => opener.handle_timeout(now, &mut self.out),
            Phase::Sealing(Sealing { write: SealStep::Backoff { until, attempt }, .. }) if until <= now => self.send_seal(attempt + 1),
            Phase::Ended { linger_until, .. } if linger_until <= now => {
                self.phase = Phase::Retired;
                self.out.push(Output::Retired);
            }
            Phase::Live if self.window_due(now) => self.expire_window(now),
            Phase::Live if self.idle_deadline().is_some_and(|d| d <= now) => {
                let idle_s = self.cfg.idle_timeout_ms.as_secs();
                // Nobody awaits this seal's ticket: its outcome is logged and framed.
                let _ = self.interrupt(SealCause::IdleProducer, format!("the producer sent nothing for {idle_s} s"), now);
            }
            _ => {}
        }
        if self.lease_renew_at.is_some_and(|at| at <= now) {
            self.renew_lease(now);
        }
        if self.ck.handle_timeout(now) {
            self.send_slice(now);
        }
        self.drive(now);
    }

    // ---- outputs

    /// The next thing for the shell to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop()
    }

    // ---- internals

    fn settle(&mut self, s: Settlement) {
        self.out.push(Output::Settled(s));
    }

    fn event(&mut self, e: StreamEvent) {
        self.out.push(Output::Event(e));
    }

    fn stale_frame(&self) -> Frame {
        Frame::Stale { floor_seq: self.buf.floor(), durable_seq: self.durable_seq }
    }

    fn end_frame(&self, seal: &Seal) -> Frame {
        Frame::End { seq: self.durable_seq, status: seal.status, error: seal.error.clone() }
    }

    fn fan_out(&mut self, frame: Frame) {
        let stale = self.stale_frame();
        let (wake, dropped) = self.readers.fan_out(frame, || stale.clone(), self.clock);
        for reader in wake {
            self.out.push(Output::Wake(reader));
        }
        for reader in dropped {
            self.out.push(Output::Wake(reader));
            self.event(StreamEvent::ReaderDropped { reader, reason: super::DropReason::QueueFull });
        }
    }

    fn finish_readers(&mut self, frame: Frame) {
        for reader in self.readers.finish_all(frame) {
            self.out.push(Output::Wake(reader));
        }
    }

    fn idle_deadline(&self) -> Option<Timestamp> {
        (self.cfg.idle_timeout_ms > Millis::ZERO).then(|| self.last_activity + self.cfg.idle_timeout_ms)
    }

    fn must_seal_in_place(&self) -> bool {
        self.cfg.seals_in_place(self.buf.floor(), self.buf.retained_bytes())
    }

    fn seal_outcome(&self, status: EndStatus, shortfall: Option<SealShortfall>) -> Result<SealReport, SealShortfall> {
        match shortfall {
            Some(s) => Err(s),
            None => Ok(SealReport { status, seq: self.seq(), durable_seq: self.durable_seq }),
        }
    }

    // ---- checkpoints (the driver decides; the stream sends, adopts and reports)

    /// Starts whatever is due. Called after every change.
    fn drive(&mut self, now: Timestamp) {
        if let Phase::Sealing(sealing) = &self.phase {
            if !sealing.seal.in_place {
                // A seal that compacts writes the whole body: a round waiting to retry is moot.
                self.ck.drop_waiting_retry();
            }
        }
        if !self.ck.is_idle() {
            return;
        }
        match &self.phase {
            Phase::Sealing(Sealing { seal, tail_abandoned, write: SealStep::AwaitingRound, .. }) => {
                if seal.in_place && !tail_abandoned && self.durable_seq < self.seq() {
                    self.start_round();
                } else {
                    self.send_seal(0);
                }
            }
            Phase::Live => {
                let behind = self.seq() - self.durable_seq;
                let awaited = self.flush_waiters.iter().any(|&(_, at)| at > self.durable_seq);
                if self.ck.due(behind, awaited, &self.cfg, now) {
                    self.start_round();
                }
            }
            _ => {}
        }
    }

    fn start_round(&mut self) {
        let from = self.durable_seq;
        let mut to = self.buf.capped_end(from, self.seq(), self.cfg.max_slice_bytes);
        if self.ui_lines.is_some() && to < self.seq() {
            // A `ui` checkpoint ends at a line end, so a stream rehydrated from it resumes at
            // one: the last within the cap, or, for one line longer than the cap, that line's
            // end (a line is at most MAX_LINE_BYTES, well inside a D1 row).
            let seq = self.seq();
            to = self.buf.last_line_end(from, to).or_else(|| self.buf.first_line_end(to, seq)).unwrap_or(to);
        }
        let op = self.out.request(Checkpoint { from, to, text: self.buf.slice(from, to).to_owned() });
        self.ck.start(to, op, from);
    }

    /// Sends the round's next attempt, from the current `durableSeq`: a retry after a read-back
    /// adopted a higher length re-covers only what is still missing.
    fn send_slice(&mut self, now: Timestamp) {
        let Some(to) = self.ck.round_end() else { return };
        let from = self.durable_seq;
        if from >= to {
            return self.round_succeeded(now);
        }
        let op = self.out.request(Checkpoint { from, to, text: self.buf.slice(from, to).to_owned() });
        self.ck.sent(op, from);
    }

    fn on_confirmed(&mut self, from: Offset, state: RowState, write_error: Option<StoreError>, now: Timestamp) {
        let Some(to) = self.ck.round_end() else { return };
        if state.cancel {
            self.cancelled = true;
        }
        if state.seq > self.seq() {
            return self.attempt_failed(from, CheckpointError::Overclaim { stored: state.seq, produced: self.seq() }, now);
        }
        if state.seq > self.durable_seq {
            self.advance_durable(state.seq);
        }
        if self.durable_seq >= to {
            self.round_succeeded(now);
        } else {
            // A confirmation short of the slice: this slice's `from` was stale, the guarded
            // statements made it a no-op, and the retry re-covers from the confirmed length.
            let error = write_error.map_or(CheckpointError::Short { stored: state.seq, to }, CheckpointError::Store);
            self.attempt_failed(from, error, now);
        }
    }

    fn attempt_failed(&mut self, from: Offset, error: CheckpointError, now: Timestamp) {
        let Some(to) = self.ck.round_end() else { return };
        // A pending seal (other than an in-place one, which needs these chunks) writes the whole
        // body anyway, so it supersedes and repairs this slice: no retry.
        let superseded = matches!(&self.phase, Phase::Sealing(sealing) if !sealing.seal.in_place);
        let (attempt, retry) = self.ck.attempt_failed(superseded, &self.cfg, now);
        let will_retry = matches!(retry, Retry::After { .. });
        self.event(StreamEvent::CheckpointAttemptFailed { from, to, attempt, will_retry, error: error.clone() });
        match retry {
            Retry::After { .. } => self.stats.retries += 1,
            Retry::GivenUp => self.round_failed(from, to, error, now),
        }
    }

    fn round_failed(&mut self, from: Offset, to: Offset, error: CheckpointError, now: Timestamp) {
        self.stats.failures += 1;
        self.event(StreamEvent::CheckpointFailed { from, to, error: error.clone() });
        let stall = match &mut self.phase {
            Phase::Sealing(sealing) => {
                // The seal settles the waiters; an in-place seal settles for what is durable.
                sealing.tail_abandoned |= sealing.seal.in_place;
                false
            }
            _ => {
                let (seq, durable_seq) = (self.seq(), self.durable_seq);
                self.settle_waiters(|at| {
                    (at <= to).then(|| Err(FlushError::CheckpointFailed { seq: at.min(seq), durable_seq, reason: error.clone() }))
                });
                true
            }
        };
        self.ck.round_failed(stall, &self.cfg, now);
        self.drive(now);
    }

    fn round_succeeded(&mut self, now: Timestamp) {
        self.stats.checkpoints += 1;
        self.ck.round_succeeded();
        self.drive(now);
    }

    /// The one place durable progress is recorded: position, `durable` frame, trim, waiters.
    fn advance_durable(&mut self, seq: Offset) {
        self.stats.bytes_written += self.buf.slice(self.durable_seq, seq).len() as u64;
        self.durable_seq = seq;
        self.fan_out(Frame::Durable { seq });
        if let Some(retain) = self.cfg.retain_chars {
            self.buf.trim_below(seq.saturating_sub(retain));
        }
        self.settle_waiters(|at| (at <= seq).then_some(Ok(seq)));
    }

    /// Settles the flush waiters for which `verdict(at)` has an answer.
    fn settle_waiters(&mut self, verdict: impl Fn(Offset) -> Option<Result<Offset, FlushError>>) {
        let waiters = std::mem::take(&mut self.flush_waiters);
        for (ticket, at) in waiters {
            match verdict(at) {
                Some(result) => self.settle(Settlement::Flushed(ticket, result)),
                None => self.flush_waiters.push((ticket, at)),
            }
        }
    }

    // ---- the seal

    /// Sends the terminal write (attempt `attempt`, from 0).
    fn send_seal(&mut self, attempt: u32) {
        let Phase::Sealing(sealing) = &self.phase else { return };
        let body = (!sealing.seal.in_place).then(|| self.buf.as_str().to_owned());
        let compacts = body.is_some();
        let (status, error) = (sealing.seal.status, sealing.seal.error.clone());
        // No producer stands behind a resume window's seal: it is guarded as the lease's is, so
        // it lands only on a row still `streaming` and held by the token this instance claimed.
        let guard = (sealing.seal.cause == Some(SealCause::ResumeWindowExpired)).then(|| self.survival.guard());
        let write = SealWrite { status, error, seq: self.seq(), from: self.durable_seq, body, body_from: self.buf.floor(), guard };
        let op = self.out.request(write);
        if let Phase::Sealing(sealing) = &mut self.phase {
            sealing.write = SealStep::Writing { op, attempt, compacts };
        }
    }

    fn on_seal_reply(&mut self, result: Result<(), StoreError>, attempt: u32, compacts: bool, now: Timestamp) {
        match (result, self.cfg.retry_delay(attempt + 1)) {
            (Ok(_), _) => self.finish_seal(None, compacts, now),
            (Err(_), Some(delay)) => {
                self.stats.retries += 1;
                if let Phase::Sealing(sealing) = &mut self.phase {
                    sealing.write = SealStep::Backoff { until: now + delay, attempt };
                }
            }
            (Err(e), None) => self.finish_seal(Some(e), compacts, now),
        }
    }

    fn finish_seal(&mut self, failure: Option<StoreError>, compacted: bool, now: Timestamp) {
        let Phase::Sealing(sealing) = &mut self.phase else { return };
        let tickets = std::mem::take(&mut sealing.tickets);
        let seal = sealing.seal.clone();
        if failure.is_none() && compacted {
            self.stats.bytes_written += self.buf.retained_bytes() as u64;
            self.durable_seq = self.seq();
        }
        let seq = self.seq();
        // A seal that did not commit is a shortfall even when every character is durable as
        // chunk rows: the row's terminal status was not written.
        let reason = match failure {
            Some(e) => Some(Shortfall::Store(e)),
            None => (self.durable_seq < seq).then_some(Shortfall::TailNotCommitted),
        };
        let shortfall = reason.map(|reason| SealShortfall { status: seal.status, seq, durable_seq: self.durable_seq, reason });
        self.ck = Checkpointer::default();
        self.event(StreamEvent::Sealed {
            status: seal.status,
            seq,
            durable_seq: self.durable_seq,
            shortfall: shortfall.as_ref().map(|s| s.reason.clone()),
            cause: seal.cause,
        });
        let outcome = self.seal_outcome(seal.status, shortfall.clone());
        for ticket in tickets {
            self.settle(Settlement::Sealed(ticket, outcome.clone()));
        }
        let durable_seq = self.durable_seq;
        self.settle_waiters(|at| Some(if at <= durable_seq { Ok(durable_seq) } else { Err(FlushError::EndedShort { seq, durable_seq }) }));
        let end = self.end_frame(&seal);
        // Readers parked past the text get what there is, then the end.
        self.unpark(Some(&end));
        self.finish_readers(end);
        self.phase = Phase::Ended { seal, shortfall, linger_until: now + self.cfg.linger_ms };
    }

    // ---- the open handshake and the lease

    /// The shell's answer to [`Output::ArmLease`]: the lease is armed (or could not be).
    pub fn handle_lease_armed(&mut self, result: Result<(), String>, now: Timestamp) {
        self.clock = self.clock.max(now);
        if matches!(self.phase, Phase::Opening(_)) {
            self.open_progress(|opener, cfg, out| opener.on_lease_armed(result, cfg, now, out), now);
        }
    }

    /// Feeds one input to the open handshake and acts on where it stands.
    fn open_progress(&mut self, input: impl FnOnce(&mut Opener, &StreamConfig, &mut Outbox) -> Progress, now: Timestamp) {
        let Phase::Opening(opener) = &mut self.phase else { return };
        let progress = input(opener, &self.cfg, &mut self.out);
        if opener.holds_lease() && self.lease_renew_at.is_none() {
            self.lease_renew_at = Some(now + self.cfg.lease_ms / 2);
        }
        let (ticket, retried) = (opener.ticket(), opener.retried);
        // An open that armed its lease and is refused without having marked the row: the lease
        // guards nothing (and another producer may hold the row), so it is undone.
        let disarm = match &progress {
            Progress::Failed { marked_nothing: true, .. } if opener.holds_lease() => Some(opener.host_token().to_owned()),
            _ => None,
        };
        match progress {
            Progress::Pending => {}
            Progress::Opened => {
                self.stats.retries += u64::from(retried);
                self.phase = Phase::Live;
                self.event(StreamEvent::Opened);
                self.settle(Settlement::Opened(ticket, Ok(())));
            }
            Progress::Failed { error: e, .. } => {
                self.stats.retries += u64::from(retried);
                self.phase = Phase::Retired;
                self.lease_renew_at = None;
                if let Some(host_token) = disarm {
                    self.out.push(Output::DisarmLease { host_token });
                }
                self.event(StreamEvent::OpenFailed(e.clone()));
                self.settle(Settlement::Opened(ticket, Err(e)));
                self.finish_readers(Frame::Absent);
                self.out.push(Output::Retired);
            }
        }
    }

    /// Renews the lease while the stream is alive here; once it ended, the renewals stop and
    /// the alarm that follows decides (see [`super::lease::decide`]).
    fn renew_lease(&mut self, now: Timestamp) {
        match self.holding() {
            Holding::Alive => {
                self.out.push(Output::RenewLease);
                self.lease_renew_at = Some(now + self.cfg.lease_ms / 2);
            }
            _ => self.lease_renew_at = None,
        }
    }
}
