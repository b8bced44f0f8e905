//! The live stream: phases, inputs, outputs and the reader side.

use super::backoff::Jitter;
use super::checkpoint::{Checkpointer, Retry, RoundReply};
use super::joins::Parked;
use super::lease::Holding;
use super::open::{Opener, Producer, Progress};
use super::outbox::Outbox;
use super::readers::{Pacing, ReaderId, Readers};
use super::resume::Survival;
use super::seal::{Ended, Sealing};
use crate::engine::durable::{OpenRefused, RowState};
use crate::engine::host::config::{CheckpointMode, StreamConfig};
use crate::engine::host::hook::SealCause;
use crate::engine::host::object_storage::StoredStream;
use crate::engine::host::store::{Checkpoint, OpId, ReadState, Reply, StoreAnswer, StoreError, StoreRequest};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::buffer::TextBuffer;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, Frame};
use crate::engine::wire::sse;
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
    /// Store what the lease alarm and a revival need (the stream id, the host token, the format
    /// and `meta`: [`KeyUpdate::arming`](crate::engine::host::object_storage::KeyUpdate::arming))
    /// and set the alarm one lease from now; answer with [`LiveStream::handle_lease_armed`]. The
    /// open waits for it before it marks the row.
    ArmLease { lease: StoredStream },
    /// Set the lease alarm one lease from now again (the stream is alive here), and with
    /// `last_write`, store the producer's last write with it: a producer that went quiet for a
    /// renewal interval (a tool call, say) has its last write kept, so a revival's window counts
    /// from it. A producer writing on is not stored at every renewal (a row write each). With a
    /// `last_write`, answer how its write went with [`LiveStream::handle_last_write_written`].
    RenewLease { last_write: Option<Timestamp> },
    /// Delete the producer's last write from the object's storage: the producer wrote again
    /// after it was stored, so it is no longer the last (a revival without one counts the idle
    /// timeout from its own time, an upper bound of any write the lost instance took). One
    /// delete per pause, at the first write after it. Answer how it went with
    /// [`LiveStream::handle_last_write_written`].
    ForgetLastWrite,
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
    /// The row was sealed by someone else meanwhile (the producer's seal of a lost instance,
    /// committed late, or the app): readers were told what the row holds.
    #[error("the row was sealed {status} at {seq} by someone else")]
    SealedElsewhere { status: String, seq: Offset },
    /// The row is held by another host (it claimed the row after this instance was given up
    /// for lost), or was rewritten: not this stream's to seal.
    #[error("the row is not this stream's any more")]
    NotOurs,
    /// The row is gone.
    #[error("the message row is gone")]
    NoRow,
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
    /// The push would take the stream's text past `MAX_STREAM_BYTES`: nothing of it was pushed,
    /// and the stream is sealing `error` with the text it has (`receipt`).
    #[error("the stream's text may not grow past {max} bytes (MAX_STREAM_BYTES)")]
    TooLarge { max: usize, receipt: PushReceipt },
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
    /// A seal that had fallen short was written after all, by the lease's retry.
    SealRepaired {
        status: EndStatus,
        durable_seq: Offset,
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
    /// Seals whose guard found the row moved on to a length within this stream's text (a
    /// checkpoint of its own whose answer was lost, or a lost instance's with the same text):
    /// that much was taken as durable and the seal written again.
    pub seals_caught_up: u64,
    /// Seals whose guard found the row longer than this stream's text (a lost instance's late
    /// checkpoint, where no host column fences it): its tail was taken in before sealing again.
    pub seals_adopted_text: u64,
    /// Seals whose guard found the row sealed by someone else (a lost instance's seal, where no
    /// host column fences it): the stream ended as the row says.
    pub seals_found_sealed: u64,
}

/// Where the stream is in its life.
#[derive(Debug)]
pub(crate) enum Phase {
    /// The open handshake is under way.
    Opening(Opener),
    Live,
    /// A seal is requested; the terminal write is pending (`live/seal.rs`).
    Sealing(Sealing),
    /// Sealed, or ended as the row says; joinable until its linger passes.
    Ended(Ended),
    /// Refused at open, or past its linger window.
    Retired,
}

/// The producer's last write, as the lease keeps it in the object's storage: stored once the
/// producer was quiet for a renewal interval, forgotten at its first write after. What is stored
/// is therefore always the true last write, up to the latency of one storage write; while none
/// is stored the producer may be writing (see [`Output::ForgetLastWrite`]). A write of it that
/// failed (a put or a delete, which may or may not have landed) leaves the storage in doubt: the
/// next renewal writes the truth again (the quiet producer's last write, or its deletion), so a
/// stale last write never shortens a revival's window for longer than a renewal interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LastWrite {
    /// What the previous renewal saw.
    pub seen: Option<Timestamp>,
    /// What is stored.
    pub stored: Option<Timestamp>,
    /// A write of it failed since the last renewal: what the storage holds is unknown.
    pub in_doubt: bool,
}

/// What a renewal writes of the producer's last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastWriteUpdate {
    Keep,
    Store(Timestamp),
    Forget,
}

impl LastWrite {
    /// At a renewal: store the last write if the producer wrote nothing since the previous
    /// renewal (it went quiet) and it is not stored yet; write the truth again after a failure.
    fn at_renewal(&mut self, last_write: Timestamp) -> LastWriteUpdate {
        let quiet = self.seen == Some(last_write);
        self.seen = Some(last_write);
        let redo = std::mem::take(&mut self.in_doubt);
        if quiet && (redo || self.stored != Some(last_write)) {
            self.stored = Some(last_write);
            LastWriteUpdate::Store(last_write)
        } else if redo && !quiet {
            self.stored = None;
            LastWriteUpdate::Forget
        } else {
            LastWriteUpdate::Keep
        }
    }

    /// The producer wrote: whether a stored last write must be forgotten.
    fn wrote(&mut self) -> bool {
        self.stored.take().is_some()
    }
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
    pub(super) ck: Checkpointer,
    /// When the lease is renewed next (set once the open armed it, while the stream is alive).
    pub(super) lease_renew_at: Option<Timestamp>,
    /// The producer's last write as the lease's renewals saw and stored it.
    pub(super) lease_writes: LastWrite,
    flush_waiters: Vec<(Ticket<FlushOutcome>, Offset)>,
    /// The producer's last append or flush (for the idle timeout).
    pub(super) last_activity: Timestamp,
    /// The latest time an input brought (reader pacing reads it when frames fan out).
    pub(super) clock: Timestamp,
    pub(super) out: Outbox,
    pub(super) stats: Stats,
    /// This stream's claim on the row (the open's CAS token, or the one a revival claimed it
    /// with): every seal is guarded by it where a host column is mapped.
    pub(super) host_token: Option<String>,
    /// The producer epoch and the resume window (`live/resume.rs`).
    pub(super) survival: Survival,
    /// Readers waiting for the text to reach their offset (`live/joins.rs`).
    pub(super) parked: Vec<Parked>,
    /// The host's randomness for this stream's retry back-off (`live/backoff.rs`).
    pub(super) jitter: Jitter,
}

impl LiveStream {
    /// Starts opening `stream_id` (the open handshake, `live/open.rs`); the ticket settles with
    /// [`Settlement::Opened`].
    #[must_use = "the stream must be driven, and its ticket awaited"]
    pub fn open(stream_id: &str, cfg: StreamConfig, producer: Producer, now: Timestamp) -> (Self, Ticket<OpenOutcome>) {
        let mut stream = Self::new_live(stream_id, cfg, producer.meta.clone(), now);
        stream.host_token = Some(producer.host_token.clone());
        stream.survival.granted_to = producer.id.clone();
        let ticket = stream.out.ticket();
        stream.phase = Phase::Opening(Opener::start(ticket, stream_id, producer, &stream.cfg, now, &mut stream.out));
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
            lease_writes: LastWrite::default(),
            flush_waiters: Vec::new(),
            last_activity: now,
            clock: now,
            out: Outbox::default(),
            stats: Stats::default(),
            host_token: None,
            survival: Survival::opened(),
            parked: Vec::new(),
            jitter: Jitter::of_stream(stream_id),
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

    /// The text this stream still holds, and the offset it starts at (0 unless retention
    /// trimmed it).
    pub fn retained_text(&self) -> (Offset, &str) {
        (self.buf.floor(), self.buf.as_str())
    }

    /// The app's `meta` from the open (the authorizer sees it).
    pub fn meta(&self) -> Option<&serde_json::Value> {
        self.meta.as_ref()
    }

    /// What the lease alarm finds of this stream: one rule for the renewals and the alarm
    /// (see [`super::lease::LeaseAlarm`]).
    pub fn holding(&self) -> Holding {
        match &self.phase {
            Phase::Opening(_) | Phase::Live | Phase::Sealing(_) => Holding::Alive,
            Phase::Ended(ended) => Self::ended_holding(ended),
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
            Phase::Ended(ended) => StreamState::Ended(ended.seal.status),
            Phase::Retired => StreamState::Retired,
        }
    }

    /// The error an ended stream's `end` carries (its seal's, or the row's when the row decided).
    pub fn end_error(&self) -> Option<&str> {
        match &self.phase {
            Phase::Ended(ended) => ended.seal.error.as_deref(),
            _ => None,
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

    /// How far the checkpoint cadence is stretched under the database's pressure (1: exactly
    /// as configured; `live/pressure.rs`).
    pub fn checkpoint_stretch(&self) -> f64 {
        self.ck.stretch()
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
        self.within_max_bytes(text.as_bytes(), now)?;
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
        self.within_max_bytes(piece, now)?;
        self.push_lines(piece, now)?;
        Ok(self.receipt())
    }

    /// Whether `more` fits under `MAX_STREAM_BYTES`, counted as readers receive the text (a JSON
    /// string: a control character takes 6 bytes, a quote 2), with a `ui` stream's unfinished
    /// line. When it does not, the stream seals `error` keeping the text it has (through the one
    /// sealer: the durable text is kept, the live tail committed with it) and the push is refused
    /// whole: an object's memory is bounded by its text and the one encoding of its replay,
    /// whatever a producer sends.
    fn within_max_bytes(&mut self, more: &[u8], now: Timestamp) -> Result<(), PushError> {
        let pending = self.ui_lines.as_ref().map_or(0, |a| sse::json_string_body_len(a.partial()));
        let max = self.cfg.max_stream_bytes;
        if self.buf.wire_bytes() + pending + sse::json_string_body_len(more) <= max {
            return Ok(());
        }
        let error = format!(
            "the stream's text reached its maximum of {max} bytes as readers receive it (MAX_STREAM_BYTES); the producer sent more"
        );
        let _sealing = self.seal(EndStatus::Error, Some(error), now);
        Err(PushError::TooLarge { max, receipt: self.receipt() })
    }

    /// A producer's push may come in now: the stream is live.
    fn producer_input(&mut self, now: Timestamp) -> Result<(), PushError> {
        match self.phase {
            Phase::Live => {}
            Phase::Opening(_) | Phase::Retired => return Err(PushError::NotOpen),
            Phase::Sealing(_) | Phase::Ended(_) => return Err(PushError::Closed),
        }
        self.producer_active(now);
        self.clock = self.clock.max(now);
        Ok(())
    }

    /// The producer wrote, flushed or resumed at `now`: the idle timeout counts from here, and a
    /// last write the lease stored is no longer the last.
    pub(super) fn producer_active(&mut self, now: Timestamp) {
        self.last_activity = now;
        if self.lease_writes.wrote() {
            self.out.push(Output::ForgetLastWrite);
        }
    }

    pub(super) fn append(&mut self, text: &str, now: Timestamp) {
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
            self.producer_active(now);
        }
        let settled = match &self.phase {
            Phase::Opening(_) | Phase::Retired => Some(Err(FlushError::NotOpen)),
            _ if self.durable_seq >= at => Some(Ok(self.durable_seq)),
            // After a failed seal the shortfall is permanent: nothing will retry it.
            Phase::Ended(_) => Some(Err(FlushError::EndedShort { seq: at, durable_seq: self.durable_seq })),
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

    /// Seeds this stream's retry jitter from the host's randomness (the engine draws none).
    /// Without it the stream id seeds it.
    pub fn seed_jitter(&mut self, seed: u64) {
        self.jitter = Jitter::from_seed(seed);
    }

    /// Records a cancel request; the producer learns it from its next receipt.
    pub fn cancel(&mut self) {
        self.cancelled = true;
        self.cancel_in_gap();
    }

    // ---- store replies

    /// Feeds the store's answer to one of the stream's requests (an answer to a request no
    /// longer awaited, such as a late reply after its failure was answered, changes nothing).
    pub fn handle_store(&mut self, answer: StoreAnswer, now: Timestamp) {
        self.clock = self.clock.max(now);
        let StoreAnswer { id: op, reply } = answer;
        match (&self.phase, reply) {
            (Phase::Opening(opener), reply) => {
                // The open's round trips are the first word on how busy the database is.
                if let Some(round_trip) = opener.round_trip(op, now) {
                    self.ck.observe(round_trip, reply.failed_for_load(), &self.cfg, now);
                }
                let jitter = self.jitter;
                self.open_progress(|opener, cfg, out| opener.on_store_reply(op, reply, cfg, jitter, now, out), now)
            }
            (Phase::Sealing(_), reply) => {
                if let Some(reply) = self.handle_seal_reply(op, reply, now) {
                    self.handle_round_reply(op, reply, now);
                }
            }
            (_, reply) => self.handle_round_reply(op, reply, now),
        }
    }

    /// A store answer for the checkpoint round.
    fn handle_round_reply(&mut self, op: OpId, reply: Reply, now: Timestamp) {
        match self.ck.on_reply(op, reply, &self.cfg, now) {
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
            Phase::Live => [self.idle_deadline(), self.resume_by()].into_iter().flatten().min(),
            Phase::Sealing(sealing) => sealing.deadline(),
            Phase::Ended(ended) => Some(ended.linger_until),
            _ => None,
        };
        [phase_deadline, self.lease_renew_at, self.ck.deadline(), self.readers.next_due()].into_iter().flatten().min()
    }

    /// The next deadline that needs the object awake, for the shell's in-memory timer: every
    /// deadline of [`Self::poll_timeout`] but those of an ended stream (its linger, and the lease
    /// renewal the seal made moot). A pending timer keeps an object from hibernating, and an
    /// ended stream has no work to do: its object sleeps, the lease alarm (which does not keep
    /// it awake) releases its keys, and a late reader is served from memory while the object
    /// still holds the stream, from the row after that.
    #[must_use]
    pub fn poll_timer(&self) -> Option<Timestamp> {
        match &self.phase {
            Phase::Ended(_) | Phase::Retired => [self.ck.deadline(), self.readers.next_due()].into_iter().flatten().min(),
            _ => self.poll_timeout(),
        }
    }

    /// Does whatever is due at `now`.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.clock = self.clock.max(now);
        for reader in self.readers.wake_due(now) {
            self.out.push(Output::Wake(reader));
        }
        match self.phase {
            Phase::Opening(ref mut opener) => opener.handle_timeout(&self.cfg, now, &mut self.out),
            Phase::Sealing(_) => self.seal_timeout(now),
            Phase::Ended(Ended { linger_until, .. }) if linger_until <= now => {
                self.phase = Phase::Retired;
                self.out.push(Output::Retired);
            }
            Phase::Live if self.window_due(now) => self.expire_window(now),
            Phase::Live if self.idle_deadline().is_some_and(|d| d <= now) => {
                // Nobody awaits this seal's ticket: its outcome is logged and framed.
                let _ = self.interrupt(SealCause::IdleProducer, super::resume::idle_error(self.cfg.idle_timeout_ms), now);
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

    /// The lease alarm released an ended stream's keys: the stream retires (its late readers are
    /// served from the row). No timer waited for its linger: its object sleeps from the seal on.
    pub fn lease_released(&mut self) {
        if matches!(self.phase, Phase::Ended(_)) {
            self.phase = Phase::Retired;
            self.out.push(Output::Retired);
        }
    }

    // ---- outputs

    /// The next thing for the shell to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop()
    }

    // ---- internals

    pub(super) fn settle(&mut self, s: Settlement) {
        self.out.push(Output::Settled(s));
    }

    pub(super) fn event(&mut self, e: StreamEvent) {
        self.out.push(Output::Event(e));
    }

    pub(super) fn stale_frame(&self) -> Frame {
        Frame::Stale { floor_seq: self.buf.floor(), durable_seq: self.durable_seq }
    }

    pub(super) fn end_frame(&self, seal: &super::seal::Seal) -> Frame {
        Frame::End { seq: self.durable_seq, status: seal.status, error: seal.error.clone() }
    }

    pub(super) fn fan_out(&mut self, frame: Frame) {
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

    pub(super) fn finish_readers(&mut self, frame: Frame) {
        for reader in self.readers.finish_all(frame) {
            self.out.push(Output::Wake(reader));
        }
    }

    /// When the idle timeout seals the stream. A rebuilt stream waiting for its producer has
    /// none: its window already waits the larger of the resume window and what is left of it.
    fn idle_deadline(&self) -> Option<Timestamp> {
        if self.resume_by().is_some() {
            return None;
        }
        (self.cfg.idle_timeout_ms > Millis::ZERO).then(|| self.last_activity + self.cfg.idle_timeout_ms)
    }

    pub(super) fn must_seal_in_place(&self) -> bool {
        self.cfg.seals_in_place(self.buf.floor(), self.buf.retained_bytes())
    }

    // ---- checkpoints (the driver decides; the stream sends, adopts and reports)

    /// Starts whatever is due. Called after every change.
    pub(super) fn drive(&mut self, now: Timestamp) {
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
            Phase::Sealing(_) => self.drive_seal(now),
            Phase::Live => {
                let behind = self.seq() - self.durable_seq;
                let awaited = self.flush_waiters.iter().any(|&(_, at)| at > self.durable_seq);
                if self.ck.due(behind, awaited, &self.cfg, now) {
                    self.start_round(now);
                }
            }
            _ => {}
        }
    }

    pub(super) fn start_round(&mut self, now: Timestamp) {
        let from = self.durable_seq;
        let mut to = self.buf.capped_end(from, self.seq(), self.cfg.max_slice_bytes);
        if self.ui_lines.is_some() && to < self.seq() {
            // A `ui` checkpoint ends at a line end, so a stream rehydrated from it resumes at
            // one: the last within the cap, or, for one line longer than the cap, that line's
            // end (a line is at most MAX_LINE_BYTES, well inside a D1 row).
            let seq = self.seq();
            to = self.buf.last_line_end(from, to).or_else(|| self.buf.first_line_end(to, seq)).unwrap_or(to);
        }
        let op = self.out.request(self.checkpoint(from, to));
        self.ck.start(to, op, from, now);
    }

    /// Sends the round's next attempt, from the current `durableSeq`: a retry after a read-back
    /// adopted a higher length re-covers only what is still missing.
    fn send_slice(&mut self, now: Timestamp) {
        let Some(to) = self.ck.round_end() else { return };
        let from = self.durable_seq;
        if from >= to {
            return self.round_succeeded(now);
        }
        let op = self.out.request(self.checkpoint(from, to));
        self.ck.sent(op, from, now);
    }

    /// The checkpoint of `[from, to)`, fenced by this stream's host token.
    fn checkpoint(&self, from: Offset, to: Offset) -> Checkpoint {
        Checkpoint { from, to, text: self.buf.slice(from, to).to_owned(), host_token: self.fence_token() }
    }

    /// The token every durable write of this stream is fenced by: its claim on the row, where
    /// the tables map a host column (a sink has none).
    pub(super) fn fence_token(&self) -> Option<String> {
        self.host_token.clone().filter(|_| self.cfg.mode == CheckpointMode::Tables { host_cas: true })
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
        let (attempt, retry) = self.ck.attempt_failed(&error, superseded, &self.cfg, now, self.jitter);
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
            Phase::Sealing(_) => {
                // The seal settles the waiters; an in-place seal settles for what is durable.
                self.seal_round_failed();
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
    pub(super) fn advance_durable(&mut self, seq: Offset) {
        self.stats.bytes_written += self.buf.slice(self.durable_seq, seq).len() as u64;
        self.durable_seq = seq;
        self.fan_out(Frame::Durable { seq });
        if let Some(retain) = self.cfg.retain_chars {
            self.buf.trim_below(seq.saturating_sub(retain));
        }
        self.settle_waiters(|at| (at <= seq).then_some(Ok(seq)));
    }

    /// Settles the flush waiters for which `verdict(at)` has an answer.
    pub(super) fn settle_waiters(&mut self, verdict: impl Fn(Offset) -> Option<Result<Offset, FlushError>>) {
        let waiters = std::mem::take(&mut self.flush_waiters);
        for (ticket, at) in waiters {
            match verdict(at) {
                Some(result) => self.settle(Settlement::Flushed(ticket, result)),
                None => self.flush_waiters.push((ticket, at)),
            }
        }
    }

    // ---- the open handshake and the lease

    /// The shell's answer to a write of the producer's last write ([`Output::RenewLease`] with
    /// one, [`Output::ForgetLastWrite`]): a failure leaves the storage in doubt, and the next
    /// renewal writes it again (see `LastWrite`).
    pub fn handle_last_write_written(&mut self, result: Result<(), String>) {
        if result.is_err() {
            self.lease_writes.in_doubt = true;
        }
    }

    /// The shell's answer to [`Output::ArmLease`]: the lease is armed (or could not be).
    pub fn handle_lease_armed(&mut self, result: Result<(), String>, now: Timestamp) {
        self.clock = self.clock.max(now);
        if matches!(self.phase, Phase::Opening(_)) {
            let jitter = self.jitter;
            self.open_progress(|opener, cfg, out| opener.on_lease_armed(result, cfg, jitter, now, out), now);
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
    /// the alarm that follows decides (see [`super::lease::LeaseAlarm`]).
    pub(super) fn renew_lease(&mut self, now: Timestamp) {
        match self.holding() {
            Holding::Alive => {
                let last_write = match self.lease_writes.at_renewal(self.last_activity) {
                    LastWriteUpdate::Store(at) => Some(at),
                    LastWriteUpdate::Forget => {
                        self.out.push(Output::ForgetLastWrite);
                        None
                    }
                    LastWriteUpdate::Keep => None,
                };
                self.out.push(Output::RenewLease { last_write });
                self.lease_renew_at = Some(now + self.cfg.lease_ms / 2);
            }
            _ => self.lease_renew_at = None,
        }
    }
}
