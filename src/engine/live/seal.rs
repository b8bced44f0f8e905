//! The sealer: every seal of a stream goes through here, with one guard.
//!
//! Whoever ends a stream (the producer's close or fail, the resume window's expiry, the idle
//! timeout, a cancel in the gap after a reset, the lease retrying a seal that fell short), the
//! terminal write is the one [`SealWrite`] built by [`LiveStream::seal_write`], guarded by
//! `status = 'streaming' AND seq = <the durable length this stream believes>` and the host token
//! where a host column is mapped. So a seal never shrinks the durable text, never overwrites a
//! row sealed meanwhile, and never lands on a row another host claimed.
//!
//! ```text
//!   seal requested ──▶ AwaitingRound (a round in flight settles first; an in-place seal commits
//!                       its tail as chunks) ──▶ Writing ──▶ the row, read in the same transaction:
//!     applied ──────────────────────────────────────────▶ Ended (the seal's status)
//!     failed ───────▶ Backoff ──▶ Writing … given up ───▶ Ended, short (the lease retries it)
//!     not applied, the row moved on (a checkpoint committed late, or its reply was lost):
//!       its length within our text ────────────────────▶ adopt it, Writing again
//!       longer than our text ──▶ Adopting (read the durable text, take its tail) ──▶ Writing
//!     not applied, the row sealed by someone else ──────▶ Ended as the row says
//!     not applied, the row another host's, or gone ────▶ Ended; readers told `stale`/`absent`
//! ```
//!
//! Readers' `end` frames always report what the row holds, never a status it lacks.

use super::backoff::Retries;
use super::checkpoint::Checkpointer;
use super::lease::Holding;
use super::stream::{FlushError, LiveStream, Phase, SealOutcome, SealReport, SealShortfall, Settlement, Shortfall, StreamEvent, Ticket};
use crate::engine::host::config::CheckpointMode;
use crate::engine::host::hook::SealCause;
use crate::engine::host::store::{OpId, ReadLeaseRow, Reply, RowGuard, RowSummary, SealResult, SealWrite, StoreError};
use crate::engine::host::time::Timestamp;
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::{self, Offset};
use crate::engine::wire::frame::{EndStatus, Frame, STATUS_STREAMING};
use crate::engine::wire::ui::LineAssembler;

/// How many times one seal follows a row that moved on before it gives up: each time it adopts
/// what the row holds, and a row that keeps moving is being written by someone else.
const MAX_ROW_MOVES: u32 = 4;

/// What a seal writes.
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
    pub(super) tail_abandoned: bool,
    pub(super) step: SealStep,
    /// The requests (close, fail) waiting for the outcome.
    tickets: Vec<Ticket<SealOutcome>>,
    /// The lease retries a seal that fell short (nobody waits; the hook is told).
    repair: bool,
    /// Times the row was found moved on (see [`MAX_ROW_MOVES`]).
    moves: u32,
    /// The current write's failures (counted afresh each time the seal starts over).
    retries: Retries,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SealStep {
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
    /// The row is longer than this stream's text: its durable text is read, to take its tail.
    Adopting {
        op: OpId,
        attempt: u32,
    },
}

/// How a stream ended.
#[derive(Debug)]
pub(crate) struct Ended {
    /// What readers' `end` says: this stream's seal, or the row's status when the row decided.
    pub seal: Seal,
    pub outcome: SealOutcome,
    /// This stream's own seal did not commit: the lease retries it ([`LiveStream::retry_seal`]).
    pub repairable: bool,
    pub linger_until: Timestamp,
}

impl Sealing {
    fn new(seal: Seal, tickets: Vec<Ticket<SealOutcome>>, repair: bool) -> Self {
        Self { seal, tail_abandoned: false, step: SealStep::AwaitingRound, tickets, repair, moves: 0, retries: Retries::default() }
    }

    /// When a backoff ends.
    pub(super) fn deadline(&self) -> Option<Timestamp> {
        match self.step {
            SealStep::Backoff { until, .. } => Some(until),
            _ => None,
        }
    }
}

impl LiveStream {
    // ---- commands

    /// Seals with `status`; settles with [`Settlement::Sealed`]. A second seal joins the first
    /// (or, once ended, gets the first one's outcome): a stream seals once.
    pub fn seal(&mut self, status: EndStatus, error: Option<String>, now: Timestamp) -> Ticket<SealOutcome> {
        self.seal_for(status, error, None, now)
    }

    /// Seals `interrupted` for `cause`, which the hook is told.
    pub fn interrupt(&mut self, cause: SealCause, error: String, now: Timestamp) -> Ticket<SealOutcome> {
        self.seal_for(EndStatus::Interrupted, Some(error), Some(cause), now)
    }

    /// Seals `complete`, or `cancelled` when a cancel was seen.
    pub fn close(&mut self, now: Timestamp) -> Ticket<SealOutcome> {
        let status = if self.cancelled() { EndStatus::Cancelled } else { EndStatus::Complete };
        self.seal(status, None, now)
    }

    /// Seals `error` with the producer's message, or `cancelled` when a cancel was seen: the
    /// reader asked first, and a producer's error after it is most often the cancel's own
    /// consequence (its model stopped, its streaming append's connection cut by the early answer).
    pub fn fail(&mut self, error: &str, now: Timestamp) -> Ticket<SealOutcome> {
        if self.cancelled() {
            return self.seal(EndStatus::Cancelled, None, now);
        }
        self.seal(EndStatus::Error, Some(error.to_owned()), now)
    }

    pub(super) fn seal_for(
        &mut self,
        status: EndStatus,
        error: Option<String>,
        cause: Option<SealCause>,
        now: Timestamp,
    ) -> Ticket<SealOutcome> {
        let ticket = self.out.ticket();
        match &mut self.phase {
            Phase::Live => {
                // An unfinished last line is kept in the text as sent; it never becomes a chunk.
                if let Some(fragment) = self.ui_lines.as_mut().and_then(LineAssembler::take_partial) {
                    self.append(&fragment, now);
                }
                let seal = Seal { status, error, in_place: self.must_seal_in_place(), cause };
                self.phase = Phase::Sealing(Sealing::new(seal, vec![ticket], false));
                self.ck.stop_cadence();
                self.drive(now);
            }
            Phase::Sealing(sealing) => sealing.tickets.push(ticket),
            Phase::Ended(ended) => {
                let outcome = ended.outcome.clone();
                self.settle(Settlement::Sealed(ticket, outcome));
            }
            Phase::Opening(_) | Phase::Retired => {
                let shortfall = SealShortfall { status, seq: self.seq(), durable_seq: self.durable_seq, reason: Shortfall::NotOpen };
                self.settle(Settlement::Sealed(ticket, Err(shortfall)));
            }
        }
        ticket
    }

    /// The lease found this stream's seal short: write it again, from what the stream still
    /// holds. With the whole text (or an in-place seal whose tail is all durable) that is the
    /// producer's own seal; without it, an in-place `interrupted` seal at the durable length
    /// (the rest of the text is not here to write), but for a `cancelled` seal, which stays
    /// `cancelled` in place (a Stop is never lost, and a cancelled answer is cut short anyway).
    /// Nobody waits: the hook hears how it went.
    pub fn retry_seal(&mut self, now: Timestamp) {
        let Phase::Ended(Ended { seal, repairable: true, .. }) = &self.phase else { return };
        let whole_text = self.buf.floor() == Offset::ZERO || self.cfg.mode == CheckpointMode::Sink;
        let seal = match seal.in_place {
            true if self.durable_seq == self.seq() => seal.clone(),
            false if whole_text => seal.clone(),
            _ if seal.status == EndStatus::Cancelled => Seal { in_place: true, ..seal.clone() },
            _ => Seal {
                status: EndStatus::Interrupted,
                error: Some(super::lease::INTERRUPTED.to_owned()),
                in_place: true,
                cause: Some(SealCause::LeaseExpired),
            },
        };
        let mut sealing = Sealing::new(seal, vec![], true);
        sealing.tail_abandoned = true; // nothing is left to commit as chunks: seal what is durable
        self.phase = Phase::Sealing(sealing);
        self.drive(now);
    }

    // ---- what stream.rs calls

    /// The one builder of a terminal write, with the one guard: the row must still be
    /// `streaming` at the durable length this stream believes (and held by its host token).
    pub(super) fn seal_write(&self, seal: &Seal) -> SealWrite {
        SealWrite {
            status: seal.status,
            error: seal.error.clone(),
            seq: self.seq(),
            from: self.durable_seq,
            body: (!seal.in_place).then(|| self.buf.as_str().to_owned()),
            body_from: self.buf.floor(),
            guard: RowGuard { durable_seq: self.durable_seq, host_token: self.fence_token() },
        }
    }

    /// What the lease alarm finds of a stream that ended here.
    pub(super) fn ended_holding(ended: &Ended) -> Holding {
        if ended.repairable {
            Holding::Unsealed
        } else {
            Holding::Sealed
        }
    }

    /// The seal's next step once no checkpoint round is in flight.
    pub(super) fn drive_seal(&mut self, now: Timestamp) {
        let Phase::Sealing(sealing) = &self.phase else { return };
        if sealing.step != SealStep::AwaitingRound {
            return;
        }
        if sealing.seal.in_place && !sealing.tail_abandoned && self.durable_seq < self.seq() {
            self.start_round(now);
        } else {
            self.send_seal(0);
        }
    }

    /// A round failed while sealing: an in-place seal settles for what is durable.
    pub(super) fn seal_round_failed(&mut self) {
        if let Phase::Sealing(sealing) = &mut self.phase {
            sealing.tail_abandoned |= sealing.seal.in_place;
        }
    }

    /// A store answer for the seal, if it is one.
    pub(super) fn handle_seal_reply(&mut self, op: OpId, reply: Reply, now: Timestamp) -> Option<Reply> {
        let Phase::Sealing(sealing) = &self.phase else { return Some(reply) };
        match (sealing.step, reply) {
            (SealStep::Writing { op: id, attempt, compacts }, Reply::Seal(result)) if id == op => {
                match result {
                    Ok(SealResult::Applied) => self.finish_seal(None, compacts, now),
                    Ok(SealResult::NotApplied(row)) => self.seal_not_applied(row, now),
                    Err(e) => self.seal_attempt_failed(e, attempt, now),
                }
                None
            }
            (SealStep::Adopting { op: id, attempt }, Reply::LeaseRow(result)) if id == op => {
                match result {
                    Ok(read) => self.adopt_row(read, now),
                    Err(e) => self.seal_attempt_failed(e, attempt, now),
                }
                None
            }
            (_, reply) => Some(reply),
        }
    }

    /// A seal whose backoff is over is sent again.
    pub(super) fn seal_timeout(&mut self, now: Timestamp) {
        if let Phase::Sealing(Sealing { step: SealStep::Backoff { until, attempt }, .. }) = self.phase {
            if until <= now {
                self.send_seal(attempt + 1);
            }
        }
    }

    // ---- internals

    /// Sends the terminal write (attempt `attempt`, from 0).
    fn send_seal(&mut self, attempt: u32) {
        let Phase::Sealing(sealing) = &self.phase else { return };
        let write = self.seal_write(&sealing.seal);
        let compacts = write.body.is_some();
        let op = self.out.request(write);
        self.seal_step(SealStep::Writing { op, attempt, compacts }, attempt);
    }

    /// Moves the seal to `step`, attempt `attempt`: a first attempt counts failures afresh.
    fn seal_step(&mut self, step: SealStep, attempt: u32) {
        if let Phase::Sealing(sealing) = &mut self.phase {
            sealing.step = step;
            if attempt == 0 {
                sealing.retries = Retries::default();
            }
        }
    }

    /// A write (or a read to adopt the row) failed: back off and write again, patiently when
    /// the database is only busy (`live/backoff.rs`), or fall short.
    fn seal_attempt_failed(&mut self, error: StoreError, attempt: u32, now: Timestamp) {
        let Phase::Sealing(sealing) = &mut self.phase else { return };
        match sealing.retries.after_failure(error.is_load(), &self.cfg, now, self.jitter) {
            Some(delay) => {
                self.stats.retries += 1;
                sealing.step = SealStep::Backoff { until: now + delay, attempt };
            }
            None => self.finish_seal(Some(Shortfall::Store(error)), false, now),
        }
    }

    /// The guard did not hold: follow the row (see the module docs).
    fn seal_not_applied(&mut self, row: Option<RowSummary>, now: Timestamp) {
        let Phase::Sealing(sealing) = &mut self.phase else { return };
        sealing.moves += 1;
        let gave_up = sealing.moves > MAX_ROW_MOVES;
        let Some(row) = row else { return self.end_not_ours(Frame::Absent, Shortfall::NoRow, now) };
        let (seq, believed) = (self.seq(), self.durable_seq);
        if row.status != STATUS_STREAMING {
            if row.seq > seq {
                return self.read_row_to_adopt(0);
            }
            return self.end_as_row(row, now);
        }
        if gave_up || row.seq <= believed {
            // Still `streaming` at the length we believe (or shorter): the guard failed on the
            // host, or someone else rewrote the row. Not ours to seal.
            let stale = self.stale_frame();
            return self.end_not_ours(stale, Shortfall::NotOurs, now);
        }
        if row.seq <= seq {
            // A checkpoint of ours committed though its answer was lost, or a lost instance's
            // committed late, with text this stream holds: that much is durable.
            self.stats.seals_caught_up += 1;
            self.advance_durable(row.seq);
            return self.send_seal(0);
        }
        self.read_row_to_adopt(0);
    }

    fn read_row_to_adopt(&mut self, attempt: u32) {
        let op = self.out.request(ReadLeaseRow);
        self.seal_step(SealStep::Adopting { op, attempt }, attempt);
    }

    /// The row's durable text is longer than this stream's text (a lost instance's checkpoint
    /// committed after this one rebuilt from the row): its tail is taken in as produced and
    /// durable, readers get it, and the seal goes on from there (or ends as the row says).
    fn adopt_row(&mut self, read: crate::engine::live::lease::LeaseRow, now: Timestamp) {
        let Some(durable) = read.durable else { return self.end_not_ours(Frame::Absent, Shortfall::NoRow, now) };
        let DurableText { text, seq, status, error, .. } = durable;
        if seq > self.seq() {
            self.stats.seals_adopted_text += 1;
            let tail = utf16::slice(&text, self.seq(), seq).to_owned();
            self.append(&tail, now);
            if self.ui_lines.is_some() {
                // The tail ends at a line end (checkpoints of `ui` streams do).
                self.readers.lines_entered(self.seq(), crate::engine::wire::ui::holds(&tail));
            }
        }
        if seq > self.durable_seq && seq <= self.seq() {
            self.advance_durable(seq);
        }
        match status == STATUS_STREAMING {
            true => self.send_seal(0),
            false => self.end_as_row(RowSummary { status, seq, error }, now),
        }
    }

    /// The seal ends here: committed (`failure` None), or given up.
    fn finish_seal(&mut self, failure: Option<Shortfall>, compacted: bool, now: Timestamp) {
        let Phase::Sealing(sealing) = &mut self.phase else { return };
        let (tickets, seal, repair) = (std::mem::take(&mut sealing.tickets), sealing.seal.clone(), sealing.repair);
        if failure.is_none() && compacted {
            self.stats.bytes_written += self.buf.retained_bytes() as u64;
            self.durable_seq = self.seq();
        }
        let seq = self.seq();
        // A seal that did not commit is a shortfall even when every character is durable as
        // chunk rows: the row's terminal status was not written.
        let reason = failure.or_else(|| (self.durable_seq < seq).then_some(Shortfall::TailNotCommitted));
        let repairable = matches!(reason, Some(Shortfall::Store(_)));
        let shortfall = reason.map(|reason| SealShortfall { status: seal.status, seq, durable_seq: self.durable_seq, reason });
        let outcome = match &shortfall {
            Some(s) => Err(s.clone()),
            None => Ok(SealReport { status: seal.status, seq, durable_seq: self.durable_seq }),
        };
        match repair {
            true if shortfall.is_none() => self.event(StreamEvent::SealRepaired { status: seal.status, durable_seq: self.durable_seq }),
            true => {} // still short: the next alarm retries
            false => self.event(StreamEvent::Sealed {
                status: seal.status,
                seq,
                durable_seq: self.durable_seq,
                shortfall: shortfall.as_ref().map(|s| s.reason.clone()),
                cause: seal.cause,
            }),
        }
        let end = self.end_frame(&seal);
        self.end(seal, outcome, tickets, repairable, Some(end), now);
    }

    /// Someone else sealed the row: the stream ends as the row says (readers get its status and
    /// length). The producer's own seal succeeded only if the row holds exactly what it asked.
    fn end_as_row(&mut self, row: RowSummary, now: Timestamp) {
        let Phase::Sealing(sealing) = &mut self.phase else { return };
        self.stats.seals_found_sealed += 1;
        let tickets = std::mem::take(&mut sealing.tickets);
        let ours = sealing.seal.clone();
        let status = EndStatus::parse(&row.status).unwrap_or(EndStatus::Interrupted);
        if row.seq > self.durable_seq && row.seq <= self.seq() {
            self.durable_seq = row.seq;
        }
        let seq = self.seq();
        let seal = Seal { status, error: row.error.clone(), in_place: ours.in_place, cause: ours.cause };
        let outcome = match status == ours.status && row.seq == seq {
            true => Ok(SealReport { status, seq, durable_seq: self.durable_seq }),
            false => Err(SealShortfall {
                status: ours.status,
                seq,
                durable_seq: self.durable_seq,
                reason: Shortfall::SealedElsewhere { status: row.status.clone(), seq: row.seq },
            }),
        };
        self.event(StreamEvent::Sealed {
            status,
            seq,
            durable_seq: self.durable_seq,
            shortfall: outcome.as_ref().err().map(|s| s.reason.clone()),
            cause: ours.cause,
        });
        let end = Frame::End { seq: row.seq, status, error: row.error };
        self.end(seal, outcome, tickets, false, Some(end), now);
    }

    /// The row is not this stream's to seal (another host holds it, or it is gone): the stream
    /// ends here without a status of its own; readers are told `farewell` (`stale`: rejoin from
    /// the durable text; `absent`: nothing is here).
    fn end_not_ours(&mut self, farewell: Frame, reason: Shortfall, now: Timestamp) {
        let Phase::Sealing(sealing) = &mut self.phase else { return };
        let (tickets, seal) = (std::mem::take(&mut sealing.tickets), sealing.seal.clone());
        let shortfall = SealShortfall { status: seal.status, seq: self.seq(), durable_seq: self.durable_seq, reason };
        self.event(StreamEvent::Sealed {
            status: seal.status,
            seq: self.seq(),
            durable_seq: self.durable_seq,
            shortfall: Some(shortfall.reason.clone()),
            cause: seal.cause,
        });
        self.end(seal, Err(shortfall), tickets, false, Some(farewell), now);
    }

    /// Every ending: tickets and flushes settle, readers (parked ones too) get `last`, and the
    /// stream lingers.
    fn end(
        &mut self,
        seal: Seal,
        outcome: SealOutcome,
        tickets: Vec<Ticket<SealOutcome>>,
        repairable: bool,
        last: Option<Frame>,
        now: Timestamp,
    ) {
        self.ck = Checkpointer::default();
        for ticket in tickets {
            self.settle(Settlement::Sealed(ticket, outcome.clone()));
        }
        let (seq, durable_seq) = (self.seq(), self.durable_seq);
        self.settle_waiters(|at| Some(if at <= durable_seq { Ok(durable_seq) } else { Err(FlushError::EndedShort { seq, durable_seq }) }));
        // Readers parked past the text get what there is, then the end.
        self.unpark(last.as_ref());
        if let Some(last) = last {
            self.finish_readers(last);
        }
        self.phase = Phase::Ended(Ended { seal, outcome, repairable, linger_until: now + self.cfg.linger_ms });
    }
}
