//! The checkpoint driver: when a round is due, and one round's protocol (write, read-back,
//! retries). A component with private state: the stream tells it what it needs (how far behind
//! the store is, what the store answered, the time) and does what it answers (send a slice,
//! adopt a confirmed length, report a failure).
//!
//! Rules (SPEC §5–§6), each with a home below:
//! - a round is due at `checkpoint_due_chars()` behind (the format's threshold), at the interval tick, or when forced by a
//!   flush; the force is consumed when a round *starts*, so a flush landing mid-round gets a
//!   round of its own ([`Checkpointer::due`]);
//! - `durableSeq` advances only to what the store confirms (tables mode: the read of the row in
//!   the write's own transaction, or, when that answer fails, a read-back, which also absorbs a
//!   write that committed while its reply was lost) ([`Checkpointer::on_reply`]);
//! - an attempt that fails is retried on the backoff schedule (`live/backoff.rs`: a refusal's
//!   fixed retries, load's jittered patience); a round that still fails stalls to the interval
//!   cadence ([`Checkpointer::attempt_failed`], [`Checkpointer::round_failed`]);
//! - both thresholds stretch under the database's pressure, read from each write's round trip
//!   (`live/pressure.rs`); a quiet database keeps them exactly as configured.
//!
//! The seal is not a round: it is a phase of the stream (`Phase::Sealing`), which waits for an
//! in-flight round to settle and may cut a round's retries short.

use super::backoff::{Jitter, Retries};
use super::pressure::Cadence;
use super::stream::CheckpointError;
use crate::engine::durable::RowState;
use crate::engine::host::config::{CheckpointMode, StreamConfig};
use crate::engine::host::store::{OpId, Reply, StoreError};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::utf16::Offset;

#[derive(Debug, Default)]
pub(crate) struct Checkpointer {
    /// A flush or the interval tick wants a round regardless of the char threshold.
    forced: bool,
    /// The last round failed: wait for the tick (or a force) before the next.
    stalled: bool,
    tick_at: Option<Timestamp>,
    round: Option<Round>,
    /// The thresholds' stretch under the database's pressure.
    cadence: Cadence,
}

/// One round: committing the text up to `to`.
#[derive(Debug)]
struct Round {
    to: Offset,
    /// Counts from 0.
    attempt: u32,
    step: Step,
    retries: Retries,
}

#[derive(Debug)]
enum Step {
    /// The guarded insert plus CAS of `[from, to)` is in flight (in tables mode with the read of
    /// the row, in the same transaction), sent at `sent_at`.
    Writing { op: OpId, from: Offset, sent_at: Timestamp },
    /// The read-back is in flight; `write_error` is the write's failure, if it failed (its
    /// commit may still have happened: the read-back decides).
    Confirming { op: OpId, from: Offset, write_error: Option<StoreError> },
    /// Waiting to retry.
    Backoff { until: Timestamp },
}

/// What a store reply means for the round in flight.
#[derive(Debug)]
pub(crate) enum RoundReply {
    /// Tables mode: the write's answer does not say what landed (it failed, or only says it
    /// ran); read the row back.
    ReadBack { from: Offset, write_error: Option<StoreError> },
    /// The store says what the row holds (a read-back, or a sink's report).
    Confirmed { from: Offset, state: RowState, write_error: Option<StoreError> },
    /// The attempt failed.
    Failed { from: Offset, error: CheckpointError },
}

/// The outcome of a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Waiting `delay` before the next attempt.
    After { delay: Millis },
    /// No retry: the round failed.
    GivenUp,
}

impl Checkpointer {
    /// The next moment [`Self::handle_timeout`] has work to do.
    pub fn deadline(&self) -> Option<Timestamp> {
        let backoff = match &self.round {
            Some(Round { step: Step::Backoff { until }, .. }) => Some(*until),
            _ => None,
        };
        [self.tick_at, backoff].into_iter().flatten().min()
    }

    /// No round is in flight or waiting to retry.
    pub fn is_idle(&self) -> bool {
        self.round.is_none()
    }

    /// The end of the round in flight.
    pub fn round_end(&self) -> Option<Offset> {
        self.round.as_ref().map(|r| r.to)
    }

    /// How far the thresholds are stretched under the database's pressure (1: as configured).
    pub fn stretch(&self) -> f64 {
        self.cadence.stretch()
    }

    /// A store call other than a checkpoint write answered after `round_trip` (the open's):
    /// the cadence hears how busy the database is.
    pub fn observe(&mut self, round_trip: Millis, load: bool, cfg: &StreamConfig, now: Timestamp) {
        self.cadence.observe(round_trip, load, cfg, now);
    }

    /// Someone is waiting (a flush): the next round starts regardless of the threshold.
    pub fn force(&mut self) {
        self.forced = true;
    }

    /// While live and idle: is a round due, `behind` units short of the produced text, with
    /// `awaited` saying a flush waits beyond the durable length? If not, the interval tick is
    /// armed (from the oldest un-checkpointed change).
    pub fn due(&mut self, behind: Offset, awaited: bool, cfg: &StreamConfig, now: Timestamp) -> bool {
        if behind == Offset::ZERO {
            *self = Self { round: self.round.take(), cadence: self.cadence, ..Self::default() };
            return false;
        }
        if self.forced || (!self.stalled && (behind >= self.cadence.due_chars(cfg) || awaited)) {
            return true;
        }
        self.tick_at.get_or_insert(now + self.cadence.interval(cfg));
        false
    }

    /// Starts a round up to `to` with its first slice, sent at `now`.
    pub fn start(&mut self, to: Offset, first_send: OpId, from: Offset, now: Timestamp) {
        self.forced = false;
        self.stalled = false;
        self.tick_at = None;
        self.round =
            Some(Round { to, attempt: 0, step: Step::Writing { op: first_send, from, sent_at: now }, retries: Retries::default() });
    }

    /// The slice of the current attempt was sent as `op`, from `from`, at `now`.
    pub fn sent(&mut self, op: OpId, from: Offset, now: Timestamp) {
        if let Some(round) = &mut self.round {
            round.step = Step::Writing { op, from, sent_at: now };
        }
    }

    /// The read-back of the current attempt was sent as `op`.
    pub fn reading_back(&mut self, op: OpId, from: Offset, write_error: Option<StoreError>) {
        if let Some(round) = &mut self.round {
            round.step = Step::Confirming { op, from, write_error };
        }
    }

    /// Interprets the store's answer to `op` at `now`; `None` when the round does not await it.
    /// A write's answer also tells the cadence how long the database took.
    pub fn on_reply(&mut self, op: OpId, reply: Reply, cfg: &StreamConfig, now: Timestamp) -> Option<RoundReply> {
        let round = self.round.as_ref()?;
        if let (Step::Writing { op: id, sent_at, .. }, Reply::Checkpoint(result)) = (&round.step, &reply) {
            if *id == op {
                let load = result.as_ref().is_err_and(StoreError::is_load);
                self.cadence.observe(now - *sent_at, load, cfg, now);
            }
        }
        let (round, mode) = (self.round.as_ref()?, &cfg.mode);
        Some(match (&round.step, reply) {
            (Step::Writing { op: id, from, .. }, Reply::Checkpoint(result)) if *id == op => match (mode, result) {
                (_, Ok(state)) => RoundReply::Confirmed { from: *from, state, write_error: None },
                (CheckpointMode::Sink, Err(e)) => RoundReply::Failed { from: *from, error: CheckpointError::Store(e) },
                // Turned away for load: the database ran none of it, and a read-back would
                // only queue one more call behind the load.
                (_, Err(e @ StoreError::Overloaded(_))) => RoundReply::Failed { from: *from, error: CheckpointError::Store(e) },
                (CheckpointMode::Tables { .. }, Err(e)) => RoundReply::ReadBack { from: *from, write_error: Some(e) },
            },
            (Step::Confirming { op: id, from, write_error }, Reply::State(result)) if *id == op => match result {
                Ok(state) => RoundReply::Confirmed { from: *from, state, write_error: write_error.clone() },
                // A read-back that failed for load says why nothing could be decided: the
                // database is busy, and the round is retried as load is.
                Err(e) if e.is_load() => RoundReply::Failed { from: *from, error: CheckpointError::ReadBack(e) },
                Err(e) => RoundReply::Failed {
                    from: *from,
                    error: write_error.clone().map_or(CheckpointError::ReadBack(e), CheckpointError::Store),
                },
            },
            _ => return None,
        })
    }

    /// The current attempt failed with `error` (the store's, where the store failed).
    /// `superseded`: a pending seal writes the whole body anyway, so no retry is worth it.
    pub fn attempt_failed(
        &mut self,
        error: &CheckpointError,
        superseded: bool,
        cfg: &StreamConfig,
        now: Timestamp,
        jitter: Jitter,
    ) -> (u32, Retry) {
        let Some(round) = &mut self.round else { return (0, Retry::GivenUp) };
        let attempt = round.attempt;
        // A short confirmation or an overclaim is no store failure: it spends a fixed retry.
        let load = error.store_error().is_some_and(StoreError::is_load);
        match round.retries.after_failure(load, cfg, now, jitter).filter(|_| !superseded) {
            Some(delay) => {
                round.step = Step::Backoff { until: now + delay };
                (attempt, Retry::After { delay })
            }
            None => (attempt, Retry::GivenUp),
        }
    }

    /// The round gave up. `stall`: wait out the interval before the next one (no flush is
    /// waiting on a re-attempt).
    pub fn round_failed(&mut self, stall: bool, cfg: &StreamConfig, now: Timestamp) {
        self.round = None;
        // A flush that arrived during the failed round earns one immediate re-attempt (someone
        // is waiting on it); otherwise wait out the interval, not a hot loop.
        if stall && !self.forced {
            self.stalled = true;
            self.tick_at = Some(now + cfg.checkpoint_interval_ms);
        }
    }

    pub fn round_succeeded(&mut self) {
        self.round = None;
    }

    /// A seal that compacts supersedes a round waiting out a retry backoff: drop it.
    pub fn drop_waiting_retry(&mut self) {
        if matches!(self.round, Some(Round { step: Step::Backoff { .. }, .. })) {
            self.round = None;
        }
    }

    /// The stream is sealing or over: no more cadence.
    pub fn stop_cadence(&mut self) {
        self.forced = false;
        self.tick_at = None;
    }

    /// Time passed: the interval tick forces a round; returns `true` when the round's backoff
    /// is over and its next attempt should be sent.
    pub fn handle_timeout(&mut self, now: Timestamp) -> bool {
        if self.tick_at.is_some_and(|t| t <= now) {
            self.tick_at = None;
            self.forced = true;
        }
        match &mut self.round {
            Some(round) if matches!(round.step, Step::Backoff { until } if until <= now) => {
                round.attempt += 1;
                true
            }
            _ => false,
        }
    }
}
