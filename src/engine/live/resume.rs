//! Surviving the object (SPEC §10): a rebuilt stream, the producer's resume and its fence, the
//! resume window, and readers parked past the rebuilt text. The rebuild itself (reading the
//! object's keys and the row, claiming the row) is the revival machine (`live/revival.rs`).
//!
//! ```text
//!   LiveStream::open ──────────────▶ epoch 1, writes with epoch 1 (or none) admitted
//!   a new instance finds the row `streaming` (the revival):
//!   LiveStream::rehydrate(D) ──────▶ live at seq = durableSeq = D, lease armed, waiting:
//!       a write of an older epoch ────▶ Superseded (whatever the state: the fence survives resets)
//!       a write of the current one ───▶ ResumeRequired {seq, durableSeq}
//!       resume ───────────────────────▶ epoch + 1, seq = D (a line end for `ui`); writes flow
//!       a resume without an epoch ────▶ Superseded, but for the producer id it is held for
//!       the window passes ────────────▶ sealed `interrupted` (cause: the reset, or an idle producer)
//!       a cancel (or one the row ──────▶ sealed `cancelled`; a late resume learns it (Closed)
//!         recorded before the reset)
//!   resume on a live stream ───────▶ epoch + 1, its own seq; the replaced connection's
//!                                     writes get Superseded, never interleaved
//!   a pump ────────────────────────▶ holds an epoch of its own: producers' writes and resumes
//!                                     get PumpRunning until it ends
//! ```
//!
//! **The window measures the producer's absence, not the instance's**: a rebuilt stream waits
//! the larger of `RESUME_WINDOW_MS` and what remains of `IDLE_TIMEOUT_MS` since the producer's
//! last write (an object evicted while its producer waits on a long tool call is not a lost
//! producer), never less: the last write is the one the lease stored when the producer went
//! quiet (forgotten at its next write), or, with none stored, the rebuild's own time. The first
//! rebuild's window is stored, so a second reset does not restart it.
//!
//! A reader joining a rebuilt stream past its `seq` is parked (`live/joins.rs`).

use super::stream::{LiveStream, Phase};
use crate::engine::host::config::StreamConfig;
use crate::engine::host::hook::SealCause;
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::EndStatus;
use crate::engine::wire::ui::Format;
use thiserror::Error;

/// The producer epoch of a stream that was opened and never resumed.
pub const FIRST_EPOCH: u64 = 1;

/// The error sentence of a rebuilt stream whose producer never resumed.
pub fn window_expired_error(window: Millis) -> String {
    format!("the live stream was lost (its Durable Object was reset) and its producer did not resume within {} ms", window.0)
}

/// The error sentence of a stream whose producer went quiet for the idle timeout.
pub fn idle_error(idle: Millis) -> String {
    format!("the producer sent nothing for {} s", idle.as_secs())
}

/// How long a rebuilt stream waits for its producer, and why it ends if nobody comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub until: Timestamp,
    /// [`SealCause::ResumeWindowExpired`] (the reset), [`SealCause::IdleProducer`] (the
    /// producer's idle timeout ends later than the resume window), or
    /// [`SealCause::LeaseExpired`] (no window is configured).
    pub cause: SealCause,
}

impl Window {
    /// The window a stream rebuilt at `now` waits (see the module docs): the one an earlier
    /// rebuild stored, else the larger of `RESUME_WINDOW_MS` from now and what remains of
    /// `IDLE_TIMEOUT_MS` since the producer's last write. `last_write` is the one the lease
    /// stored; without one the producer may have been writing until the instance was lost, and
    /// `now` bounds that from above, so the window never ends before the true last write +
    /// `IDLE_TIMEOUT_MS`. No resume window configured: none.
    pub fn of(cfg: &StreamConfig, stored: Option<Window>, last_write: Option<Timestamp>, now: Timestamp) -> Window {
        if let Some(stored) = stored {
            return stored;
        }
        if cfg.resume_window_ms == Millis::ZERO {
            return Window { until: now, cause: SealCause::LeaseExpired };
        }
        let reset = now + cfg.resume_window_ms;
        let last_write = last_write.unwrap_or(now).min(now);
        match Some(last_write).filter(|_| cfg.idle_timeout_ms > Millis::ZERO).map(|at| at + cfg.idle_timeout_ms) {
            Some(idle) if idle > reset => Window { until: idle, cause: SealCause::IdleProducer },
            _ => Window { until: reset, cause: SealCause::ResumeWindowExpired },
        }
    }

    /// The error a stream sealed by this window carries.
    pub fn error(&self, cfg: &StreamConfig) -> String {
        match self.cause {
            SealCause::IdleProducer => idle_error(cfg.idle_timeout_ms),
            SealCause::LeaseExpired => super::lease::INTERRUPTED.to_owned(),
            _ => window_expired_error(cfg.resume_window_ms),
        }
    }
}

/// Who writes the stream's text now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// The HTTP producer: the open's, or whoever resumed last.
    Producer,
    /// The object's own pump (`POST /pump`): producers' writes and resumes are refused until
    /// it ends.
    Pump,
}

/// What a stream knows about surviving: its producer epoch and, once rebuilt, the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Survival {
    pub epoch: u64,
    /// The producer (its `x-rindle-producer` id) the current epoch was granted to, so a resume
    /// retried after its answer was lost gets the same grant.
    pub granted_to: Option<String>,
    pub holder: Holder,
    /// This instance rebuilt the stream from the store.
    pub rehydrated: bool,
    /// Rebuilt and waiting for the producer's resume.
    pub window: Option<Window>,
}

impl Survival {
    pub fn opened() -> Self {
        Self { epoch: FIRST_EPOCH, granted_to: None, holder: Holder::Producer, rehydrated: false, window: None }
    }
}

/// What a fresh instance rebuilds a stream from (the revival gathers it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rehydration {
    /// The row's durable text (read in one statement), its status `streaming`.
    pub durable: DurableText,
    /// The producer epoch the lost instance stored last, and whom it was granted to.
    pub epoch: u64,
    pub granted_to: Option<String>,
    /// The app's `meta` from the open (the authorizer sees it).
    pub meta: Option<serde_json::Value>,
    /// How long to wait for the producer ([`Window::of`]).
    pub window: Window,
    /// The token the row is held by now (the revival's claim, where a host column is mapped):
    /// every seal is guarded by it.
    pub host_token: Option<String>,
    /// The producer's last write the object stored (the idle timeout counts from it).
    pub last_write: Option<Timestamp>,
    /// A Stop was recorded on the row before the reset: the stream seals `cancelled` at once,
    /// and its producer's resume learns it (409 `closed`, `cancelled`).
    pub cancelled: bool,
}

/// A write the fence refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Fenced {
    /// A resume replaced the connection this write came on (409 `superseded`).
    #[error("a newer producer connection (epoch {current}) replaced this one")]
    Superseded { current: u64 },
    /// The stream was rebuilt and waits for its producer's resume (409 `resume_required`).
    #[error("the stream was rebuilt at {seq}: resume first")]
    ResumeRequired { seq: Offset, durable_seq: Offset },
    /// The object's pump is the producer (409 `pump_running`).
    #[error("the stream's pump is its producer")]
    PumpRunning,
}

/// Who takes the stream with a new epoch, for what it means when that epoch cannot be stored
/// (the object's storage failed): see [`Taker::needs_stored_epoch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taker {
    /// A producer's `POST /resume`.
    Producer,
    /// The object's pump: started by its producer (`POST /pump`), or re-attached after a reset.
    Pump,
}

impl Taker {
    /// Whether the take-over may be acted on only once its epoch is stored. A producer's resume
    /// is answered 503 instead (it retries with its id and gets the same grant): a grant a reset
    /// could lose would let the producer it replaced take the stream back and write beside it.
    /// A pump goes on (the failure is logged): the producer it replaced is the one that started
    /// it, or none, and after a reset a background pump's next instance re-attaches and takes a
    /// new epoch again, fencing any producer.
    pub fn needs_stored_epoch(self) -> bool {
        self == Taker::Producer
    }
}

/// What a resume answers: where the producer continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeGrant {
    pub seq: Offset,
    pub durable_seq: Offset,
    pub format: Format,
    pub epoch: u64,
}

/// A resume that cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ResumeRefused {
    #[error("the stream is not open here")]
    NotOpen,
    /// The stream is sealed (or sealing) with `status`.
    #[error("the stream is {}", status.as_str())]
    Closed { status: EndStatus, seq: Offset, durable_seq: Offset },
    /// The caller's epoch is older than the stream's: another producer resumed since.
    #[error(transparent)]
    Fenced(Fenced),
}

impl ResumeRefused {
    /// Why a resume that finds no stream here is refused, from the row (read when the revival
    /// found nothing to rebuild): a sealed row is [`ResumeRefused::Closed`] with its status (409
    /// `closed`: a producer learns its Stop, or that its answer ended), anything else
    /// [`ResumeRefused::NotOpen`] (404 `not_open`: nothing streams here; an open that never took
    /// opens again).
    pub fn of_row(row: Option<&DurableText>) -> Self {
        match row.and_then(|row| EndStatus::parse(&row.status).map(|status| (status, row.seq))) {
            Some((status, seq)) => ResumeRefused::Closed { status, seq, durable_seq: seq },
            None => ResumeRefused::NotOpen,
        }
    }
}

impl LiveStream {
    /// Rebuilds a stream a lost instance held, from the row's durable text: live at
    /// `seq = durableSeq = D`, the durable text as the start of its buffer, the lease armed
    /// (renewed at once), and waiting for its producer's resume until the window passes.
    #[must_use = "the stream must be driven"]
    pub fn rehydrate(stream_id: &str, cfg: StreamConfig, from: Rehydration, now: Timestamp) -> Self {
        let mut stream = Self::new_live(stream_id, cfg, from.meta, now);
        let (_, seq) = stream.buf.push(&from.durable.text);
        stream.durable_seq = seq;
        if let Some(retain) = stream.cfg.retain_chars {
            stream.buf.trim_below(seq.saturating_sub(retain)); // as a checkpoint would (sink mode)
        }
        if stream.format() == Format::Ui {
            stream.readers.lines_entered(seq, crate::engine::wire::ui::holds(&from.durable.text));
        }
        stream.host_token = from.host_token;
        stream.last_activity = from.last_write.unwrap_or(now).min(now);
        stream.lease_writes.stored = from.last_write;
        stream.survival = Survival {
            epoch: from.epoch.max(FIRST_EPOCH),
            granted_to: from.granted_to,
            holder: Holder::Producer,
            rehydrated: true,
            window: Some(from.window),
        };
        stream.renew_lease(now);
        if from.cancelled {
            stream.cancel(); // in the gap: sealed through the one sealer
        }
        stream
    }

    // ---- getters

    /// The current producer epoch.
    pub fn epoch(&self) -> u64 {
        self.survival.epoch
    }

    /// Who writes the text now.
    pub fn holder(&self) -> Holder {
        self.survival.holder
    }

    /// This instance rebuilt the stream from the store.
    pub fn rehydrated(&self) -> bool {
        self.survival.rehydrated
    }

    /// When a rebuilt stream seals `interrupted` unless its producer resumes first.
    pub fn resume_by(&self) -> Option<Timestamp> {
        self.survival.window.map(|w| w.until)
    }

    /// Whether a producer's write carrying `epoch` (`None`: no header) comes from the current
    /// connection. An older (or unknown) epoch is fenced whatever the state, so a producer a
    /// resume replaced stays fenced across a reset; only then does a rebuilt stream ask for a
    /// resume. The shell asks in the same borrow as the write, so no resume falls between.
    pub fn admit(&self, epoch: Option<u64>) -> Result<(), Fenced> {
        if self.survival.holder == Holder::Pump {
            return Err(Fenced::PumpRunning);
        }
        self.admit_epoch(epoch)
    }

    /// Whether a producer's flush carrying `epoch` may go in. While the pump is the producer a
    /// flush is taken from whoever has write scope: it writes no text (nothing to interleave),
    /// and the pump's starter may want what was pumped so far made durable.
    pub fn admit_flush(&self, epoch: Option<u64>) -> Result<(), Fenced> {
        match self.survival.holder {
            Holder::Pump => Ok(()),
            Holder::Producer => self.admit(epoch),
        }
    }

    /// Whether a push of the pump holding `epoch` may go in.
    pub fn admit_pump(&self, epoch: u64) -> Result<(), Fenced> {
        match self.survival.holder {
            Holder::Pump => self.admit_epoch(Some(epoch)),
            Holder::Producer => Err(Fenced::Superseded { current: self.survival.epoch }),
        }
    }

    fn admit_epoch(&self, epoch: Option<u64>) -> Result<(), Fenced> {
        let current = self.survival.epoch;
        match epoch {
            Some(e) if e != current => return Err(Fenced::Superseded { current }),
            // A write without an epoch is the first producer's; after a resume it is not.
            None if current > FIRST_EPOCH => return Err(Fenced::Superseded { current }),
            _ => {}
        }
        if self.survival.window.is_some() && matches!(self.phase, Phase::Live) {
            return Err(Fenced::ResumeRequired { seq: self.seq(), durable_seq: self.durable_seq });
        }
        Ok(())
    }

    // ---- commands

    /// The producer (a new connection, or a new instance's first) takes over: a new epoch
    /// fences the connection it replaces, the window closes, and the answer says where to
    /// continue. `epoch` is the caller's: an older one is refused, so a replaced producer cannot
    /// take the stream back. `producer` is the caller's id: the same producer retrying a resume
    /// whose answer it lost gets the same grant. A `ui` stream's unfinished line is dropped (the
    /// producer re-sends it), so `seq` is at a line end.
    ///
    /// **Without an epoch** the caller never learned one: its open's answer was lost, so it wrote
    /// nothing. It takes the stream only where that loses nothing: the stream is held for its id
    /// (the opener's `x-rindle-producer`, or the last resume's), or nothing was written yet on a
    /// stream this instance opened (a rebuilt stream may still meet a lost instance's write).
    /// Anyone else is [`Fenced::Superseded`]: a retried invocation never takes a stream another
    /// producer wrote, and never continues at a `seq` past what it wrote.
    pub fn resume(&mut self, epoch: Option<u64>, producer: Option<&str>, now: Timestamp) -> Result<ResumeGrant, ResumeRefused> {
        self.resumable()?;
        if self.survival.holder == Holder::Pump {
            return Err(ResumeRefused::Fenced(Fenced::PumpRunning));
        }
        let current = self.survival.epoch;
        let holder = producer.is_some() && producer == self.survival.granted_to.as_deref();
        let untouched = self.seq() == Offset::ZERO && !self.survival.rehydrated;
        match epoch {
            Some(e) if holder && e + 1 == current => {} // its lost answer, granted again
            Some(e) if e != current => return Err(ResumeRefused::Fenced(Fenced::Superseded { current })),
            None if !holder && !untouched => return Err(ResumeRefused::Fenced(Fenced::Superseded { current })),
            _ => {
                self.survival.epoch += 1;
                self.survival.granted_to = producer.map(str::to_owned);
            }
        }
        Ok(self.take_over(now))
    }

    /// The object's pump becomes the producer: after the current producer asked for it
    /// (`POST /pump`, admitted by [`Self::admit`]), or when a background pump re-attaches to a
    /// rebuilt stream. It gets an epoch of its own; producers are refused until it ends.
    pub fn start_pump(&mut self, now: Timestamp) -> Result<ResumeGrant, ResumeRefused> {
        self.resumable()?;
        self.survival.epoch += 1;
        self.survival.granted_to = None;
        self.survival.holder = Holder::Pump;
        Ok(self.take_over(now))
    }

    /// Whether the stream takes a producer now (a write, a resume, a pump): it is live, or it is
    /// [`ResumeRefused::Closed`] with the status it ends with (a producer learns a Stop from it),
    /// or not open here.
    pub fn takes_producers(&self) -> Result<(), ResumeRefused> {
        self.resumable()
    }

    fn resumable(&self) -> Result<(), ResumeRefused> {
        match &self.phase {
            Phase::Live => Ok(()),
            Phase::Sealing(sealing) => Err(self.closed(sealing.seal.status)),
            Phase::Ended(ended) => Err(self.closed(ended.seal.status)),
            Phase::Opening(_) | Phase::Retired => Err(ResumeRefused::NotOpen),
        }
    }

    fn take_over(&mut self, now: Timestamp) -> ResumeGrant {
        if let Some(assembler) = self.ui_lines.as_mut() {
            let _ = assembler.take_partial();
        }
        self.survival.window = None;
        self.producer_active(now);
        self.clock = self.clock.max(now);
        ResumeGrant { seq: self.seq(), durable_seq: self.durable_seq, format: self.format(), epoch: self.survival.epoch }
    }

    fn closed(&self, status: EndStatus) -> ResumeRefused {
        ResumeRefused::Closed { status, seq: self.seq(), durable_seq: self.durable_seq }
    }

    // ---- what stream.rs calls

    /// The window passed with no resume.
    pub(super) fn window_due(&self, now: Timestamp) -> bool {
        matches!(self.phase, Phase::Live) && self.survival.window.is_some_and(|w| w.until <= now)
    }

    /// The window passed: seal `interrupted`, naming the true cause.
    pub(super) fn expire_window(&mut self, now: Timestamp) {
        let Some(window) = self.survival.window.take() else { return };
        let error = window.error(&self.cfg);
        let _ = self.interrupt(window.cause, error, now);
    }

    /// A cancel that finds the stream waiting for its producer seals it: nobody would carry it
    /// to a producer, and the resume that comes learns it (409 `closed`, `cancelled`).
    pub(super) fn cancel_in_gap(&mut self) {
        if self.survival.window.take().is_some() && matches!(self.phase, Phase::Live) {
            let now = self.clock;
            let _ = self.seal(EndStatus::Cancelled, None, now);
        }
    }
}
