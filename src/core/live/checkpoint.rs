//! The checkpoint driver: when a round is due, what it sends, how the store's replies confirm
//! it, retries, stalls, and the seal that ends the stream.
//!
//! Rules (SPEC §5–§6), each with a home below:
//! - a round is due at `checkpoint_chars` behind, at the interval tick, or when forced by a
//!   flush; the force is consumed when a round *starts*, so a flush landing mid-round gets a
//!   round of its own;
//! - `durableSeq` advances only to what the store confirms (tables mode: the read-back, which
//!   also absorbs a write that committed while its reply was lost);
//! - an attempt that fails is retried on the backoff schedule; a round that still fails rejects
//!   its waiters and stalls to the interval cadence;
//! - a seal outranks everything: it supersedes a failing round and repairs it by compaction.

use super::stream::{
    FlushError, LiveStream, Millis, OpId, Phase, SealShortfall, SealWrite, Settlement, StoreFailure, StoreOp, StoreReply, StreamEvent,
};
use crate::core::config::CheckpointMode;
use crate::core::durable::RowState;
use crate::core::frame::Frame;

#[derive(Debug, Default, Clone)]
pub(crate) struct Checkpointing {
    /// A flush or the interval tick wants a round regardless of the char threshold.
    pub forced: bool,
    /// The last round failed: wait for the tick (or a force) before the next.
    pub stalled: bool,
    pub tick_at: Option<Millis>,
    pub round: Round,
}

impl Checkpointing {
    pub fn deadline(&self) -> Option<Millis> {
        let backoff = match &self.round {
            Round::Checkpoint { step: Step::Backoff { until }, .. } | Round::Seal { step: SealStep::Backoff { until }, .. } => Some(*until),
            _ => None,
        };
        [self.tick_at, backoff].into_iter().flatten().min()
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum Round {
    #[default]
    Idle,
    /// Committing the text up to `to`; `attempt` counts from 0.
    Checkpoint {
        to: u64,
        attempt: u32,
        step: Step,
    },
    Seal {
        attempt: u32,
        step: SealStep,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The guarded insert plus CAS of `[from, to)` is in flight.
    Writing {
        op: OpId,
        from: u64,
    },
    /// The read-back is in flight; `write_error` is the write's failure, if it failed (its
    /// commit may still have happened: the read-back decides).
    Confirming {
        op: OpId,
        from: u64,
        write_error: Option<String>,
    },
    Backoff {
        until: Millis,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SealStep {
    Writing { op: OpId, compacts: bool },
    Backoff { until: Millis },
}

impl LiveStream {
    /// Feeds the store's answer to operation `op`.
    pub fn handle_store(&mut self, op: OpId, result: Result<StoreReply, StoreFailure>, now: Millis) {
        self.clock = self.clock.max(now);
        if matches!(self.phase, Phase::Opening { .. }) {
            return self.handle_open_reply(op, result, now);
        }
        match self.ck.round.clone() {
            Round::Checkpoint { step: Step::Writing { op: id, from }, .. } if id == op => self.on_written(from, result, now),
            Round::Checkpoint { step: Step::Confirming { op: id, from, write_error }, .. } if id == op => match result {
                Ok(StoreReply::State(state)) => self.on_confirmed(from, state, write_error, now),
                Ok(other) => self.attempt_failed(from, write_error.unwrap_or(format!("unexpected read-back reply {other:?}")), now),
                Err(e) => self.attempt_failed(from, write_error.unwrap_or(format!("the read-back failed: {e}")), now),
            },
            Round::Seal { step: SealStep::Writing { op: id, compacts }, attempt } if id == op => match result {
                Ok(_) => self.finish_seal(None, compacts, now),
                Err(e) => match self.cfg.retry_delay(attempt + 1) {
                    Some(delay) => {
                        self.stats.retries += 1;
                        self.ck.round = Round::Seal { attempt, step: SealStep::Backoff { until: now + delay } };
                    }
                    None => self.finish_seal(Some(e.0), compacts, now),
                },
            },
            _ => {} // the reply of an operation no longer awaited
        }
    }

    /// Starts whatever round is due. Called after every change.
    pub(crate) fn drive(&mut self, now: Millis) {
        // A seal that compacts supersedes a round waiting out a retry backoff.
        if let (Phase::Sealing(seal), Round::Checkpoint { step: Step::Backoff { .. }, .. }) = (&self.phase, &self.ck.round) {
            if !seal.in_place {
                self.ck.round = Round::Idle;
            }
        }
        if self.ck.round != Round::Idle {
            return;
        }
        match &self.phase {
            Phase::Sealing(seal) => {
                if seal.in_place && !seal.tail_abandoned && self.durable_seq < self.seq() {
                    self.start_checkpoint();
                } else {
                    self.start_seal();
                }
            }
            Phase::Live => {
                let behind = self.seq() - self.durable_seq;
                if behind == 0 {
                    self.ck.forced = false;
                    self.ck.stalled = false;
                    self.ck.tick_at = None;
                    return;
                }
                let awaited = self.flush_waiters.iter().any(|&(_, at)| at > self.durable_seq);
                if self.ck.forced || (!self.ck.stalled && (behind >= self.cfg.checkpoint_chars || awaited)) {
                    self.start_checkpoint();
                } else if self.ck.tick_at.is_none() {
                    self.ck.tick_at = Some(now + self.cfg.checkpoint_interval_ms);
                }
            }
            _ => {}
        }
    }

    /// Timers of the checkpoint driver: the interval tick and retry backoffs.
    pub(crate) fn checkpoint_timeout(&mut self, now: Millis) {
        if self.ck.tick_at.is_some_and(|t| t <= now) {
            self.ck.tick_at = None;
            self.ck.forced = true;
        }
        match self.ck.round.clone() {
            Round::Checkpoint { to, attempt, step: Step::Backoff { until } } if until <= now => {
                self.ck.round = Round::Checkpoint { to, attempt: attempt + 1, step: Step::Backoff { until } };
                self.send_append(now);
            }
            Round::Seal { attempt, step: SealStep::Backoff { until } } if until <= now => {
                self.ck.round = Round::Seal { attempt: attempt + 1, step: SealStep::Backoff { until } };
                self.send_seal();
            }
            _ => {}
        }
        self.drive(now);
    }

    fn start_checkpoint(&mut self) {
        self.ck.forced = false;
        self.ck.stalled = false;
        self.ck.tick_at = None;
        let to = self.buf.capped_end(self.durable_seq, self.seq(), self.cfg.max_slice_bytes);
        self.ck.round = Round::Checkpoint { to, attempt: 0, step: Step::Backoff { until: 0 } };
        self.send_append(0);
    }

    /// Sends (or re-sends) the current round's slice, from the current `durableSeq`: a retry
    /// after a read-back adopted a higher length re-covers only what is still missing.
    fn send_append(&mut self, now: Millis) {
        let Round::Checkpoint { to, attempt, .. } = self.ck.round else { return };
        let from = self.durable_seq;
        if from >= to {
            return self.round_succeeded(now);
        }
        let text = self.buf.slice(from, to).to_owned();
        let op = self.request(StoreOp::Append { from, to, text });
        self.ck.round = Round::Checkpoint { to, attempt, step: Step::Writing { op, from } };
    }

    fn on_written(&mut self, from: u64, result: Result<StoreReply, StoreFailure>, now: Millis) {
        let Round::Checkpoint { to, attempt, .. } = self.ck.round else { return };
        match (&self.cfg.mode, result) {
            (_, Ok(StoreReply::State(state))) => self.on_confirmed(from, state, None, now),
            (CheckpointMode::Sink, Ok(_)) => self.on_confirmed(from, RowState { seq: to, cancel: false }, None, now),
            (CheckpointMode::Sink, Err(e)) => self.attempt_failed(from, e.0, now),
            // Tables: the write says nothing about what landed; only the read-back does.
            (CheckpointMode::Tables { .. }, result) => {
                let write_error = result.err().map(|e| e.0);
                let op = self.request(StoreOp::ReadState);
                self.ck.round = Round::Checkpoint { to, attempt, step: Step::Confirming { op, from, write_error } };
            }
        }
    }

    fn on_confirmed(&mut self, from: u64, state: RowState, write_error: Option<String>, now: Millis) {
        let Round::Checkpoint { to, .. } = self.ck.round else { return };
        if state.cancel {
            self.cancelled = true;
        }
        if state.seq > self.seq() {
            let error = format!("the store holds {} characters but only {} were produced here", state.seq, self.seq());
            return self.attempt_failed(from, error, now);
        }
        if state.seq > self.durable_seq {
            self.advance_durable(state.seq);
        }
        if self.durable_seq >= to {
            self.round_succeeded(now);
        } else {
            // A confirmation short of the slice: this slice's `from` was stale, the guarded
            // statements made it a no-op, and the retry re-covers from the confirmed length.
            let error = write_error.unwrap_or_else(|| format!("the store confirmed {} of {to}", state.seq));
            self.attempt_failed(from, error, now);
        }
    }

    fn attempt_failed(&mut self, from: u64, error: String, now: Millis) {
        let Round::Checkpoint { to, attempt, .. } = self.ck.round else { return };
        // A pending seal (other than an in-place one, which needs these chunks) writes the whole
        // body anyway, so it supersedes and repairs this slice: no retry.
        let superseded = matches!(&self.phase, Phase::Sealing(seal) if !seal.in_place);
        let delay = if superseded { None } else { self.cfg.retry_delay(attempt + 1) };
        self.event(StreamEvent::CheckpointAttemptFailed { from, to, attempt, will_retry: delay.is_some(), error: error.clone() });
        match delay {
            Some(delay) => {
                self.stats.retries += 1;
                self.ck.round = Round::Checkpoint { to, attempt, step: Step::Backoff { until: now + delay } };
            }
            None => self.round_failed(from, to, error, now),
        }
    }

    fn round_failed(&mut self, from: u64, to: u64, error: String, now: Millis) {
        self.stats.failures += 1;
        self.ck.round = Round::Idle;
        self.event(StreamEvent::CheckpointFailed { from, to, error: error.clone() });
        match &mut self.phase {
            Phase::Sealing(seal) if seal.in_place => seal.tail_abandoned = true,
            Phase::Sealing(_) => {} // the seal settles the waiters
            _ => {
                let (seq, durable_seq) = (self.seq(), self.durable_seq);
                self.settle_waiters(|at| {
                    (at <= to).then(|| Err(FlushError::CheckpointFailed { seq: at.min(seq), durable_seq, reason: error.clone() }))
                });
                // A flush that arrived during the failed round earns one immediate re-attempt
                // (someone is waiting on it); otherwise wait out the interval, not a hot loop.
                if !self.ck.forced {
                    self.ck.stalled = true;
                    self.ck.tick_at = Some(now + self.cfg.checkpoint_interval_ms);
                }
            }
        }
        self.drive(now);
    }

    fn round_succeeded(&mut self, now: Millis) {
        self.stats.checkpoints += 1;
        self.ck.round = Round::Idle;
        self.drive(now);
    }

    /// The one place durable progress is recorded: position, `durable` frame, trim, waiters.
    fn advance_durable(&mut self, seq: u64) {
        self.stats.bytes_written += self.buf.slice(self.durable_seq, seq).len() as u64;
        self.durable_seq = seq;
        self.fan_out(Frame::Durable { seq });
        if let Some(retain) = self.cfg.retain_chars {
            self.buf.trim_below(seq.saturating_sub(retain));
        }
        self.settle_waiters(|at| (at <= seq).then_some(Ok(seq)));
    }

    /// Settles the flush waiters for which `verdict(at)` has an answer.
    fn settle_waiters(&mut self, verdict: impl Fn(u64) -> Option<Result<u64, FlushError>>) {
        let waiters = std::mem::take(&mut self.flush_waiters);
        for (ticket, at) in waiters {
            match verdict(at) {
                Some(result) => self.settle(ticket, Settlement::Flushed(result)),
                None => self.flush_waiters.push((ticket, at)),
            }
        }
    }

    fn start_seal(&mut self) {
        self.ck.tick_at = None;
        self.ck.forced = false;
        self.ck.round = Round::Seal { attempt: 0, step: SealStep::Backoff { until: 0 } };
        self.send_seal();
    }

    fn send_seal(&mut self) {
        let (Phase::Sealing(seal), Round::Seal { attempt, .. }) = (&self.phase, &self.ck.round) else { return };
        let attempt = *attempt;
        let body = if seal.in_place { None } else { Some(self.buf.as_str().to_owned()) };
        let compacts = body.is_some();
        let write = SealWrite { status: seal.status, error: seal.error.clone(), seq: self.seq(), body, body_from: self.buf.floor() };
        let op = self.request(StoreOp::Seal(write));
        self.ck.round = Round::Seal { attempt, step: SealStep::Writing { op, compacts } };
    }

    fn finish_seal(&mut self, failure: Option<String>, compacted: bool, now: Millis) {
        let Phase::Sealing(seal) = self.phase.clone() else { return };
        if failure.is_none() && compacted {
            self.bytes_compacted();
            self.durable_seq = self.seq();
        }
        let seq = self.seq();
        // A seal that did not commit is a shortfall even when every character is durable as
        // chunk rows: the row's terminal status was not written.
        let reason = match failure {
            Some(reason) => Some(reason),
            None => (self.durable_seq < seq).then(|| "the tail could not be committed before the seal".to_owned()),
        };
        let shortfall = reason.map(|reason| SealShortfall { status: seal.status, seq, durable_seq: self.durable_seq, reason });
        self.ck = Default::default();
        self.event(StreamEvent::Sealed {
            status: seal.status,
            seq,
            durable_seq: self.durable_seq,
            shortfall: shortfall.as_ref().map(|s| s.reason.clone()),
        });
        let outcome = self.seal_outcome(seal.status, shortfall.clone());
        for ticket in std::mem::take(&mut self.seal_tickets) {
            self.settle(ticket, Settlement::Sealed(outcome.clone()));
        }
        let durable_seq = self.durable_seq;
        self.settle_waiters(|at| Some(if at <= durable_seq { Ok(durable_seq) } else { Err(FlushError::EndedShort { seq, durable_seq }) }));
        let end = self.end_frame(&seal);
        self.finish_readers(end);
        self.phase = Phase::Ended { seal, shortfall, linger_until: now + self.cfg.linger_ms };
    }

    fn bytes_compacted(&mut self) {
        self.stats.bytes_written += self.buf.retained_bytes() as u64;
    }
}
