//! The open handshake (SPEC §5, §7): probe the row, arm the lease, mark the row `streaming`,
//! read the host back. A component with private state: the stream feeds it the replies and the
//! time, and learns when the stream is open or refused.
//!
//! - The probe is read once and judged; its verdict is never retried (a refusal is a settled
//!   statement about the app's data). Mapped tables only: a custom sink judges the open itself
//!   and may refuse the mark.
//! - The lease is armed (the object stores what its alarm needs and sets the alarm) *before*
//!   the row is marked, so a row marked `streaming` always has an alarm that will seal it, even
//!   when the object dies between the mark's commit and its reply, or every reply is lost.
//! - Each step has its own retries: a flaky probe does not use up the mark's. A failed host
//!   read retries the mark with it (write-then-read is one attempt: a replayed mark whose first
//!   reply was lost reads back its own token).
//! - A refusal that proves this open never marked the row (the host read finds another
//!   producer's token, or a sink refuses the first attempt of the mark) says so, and the stream
//!   undoes the lease it armed: it guards nothing, and its alarm must not seal a row another
//!   producer holds. A refusal after a failed attempt proves nothing (that attempt may have
//!   committed), so the lease stays.

use super::backoff::{Jitter, Retries};
use super::outbox::Outbox;
use super::stream::{OpenError, OpenOutcome, Output, Ticket};
use crate::engine::durable::{judge_host, judge_probe, OpenRefused};
use crate::engine::host::config::{CheckpointMode, StreamConfig};
use crate::engine::host::object_storage::StoredStream;
use crate::engine::host::store::{MarkOutcome, MarkStreaming, OpId, ProbeOpen, ReadHost, Reply};
use crate::engine::host::time::{Millis, Timestamp};

/// The producer that opens a stream, as the stream knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    /// This producer's claim on the row (the open CAS, and the lease's proof of ownership).
    pub host_token: String,
    /// The app's `meta` from the open body, handed to the authorizer and to the store's open
    /// operation.
    pub meta: Option<serde_json::Value>,
    /// The chat the open named and the user's message it gave (SPEC §11), stored with the
    /// lease: a fresh instance tells that chat's feed of the start and of the seal.
    pub chat: Option<crate::engine::feed::ChatLink>,
    /// The producer's own id (`x-rindle-producer`), stored with the lease as the holder of the
    /// first epoch: after a lost open answer it resumes without an epoch and gets its stream back
    /// ([`LiveStream::resume`](super::LiveStream::resume)), where another producer does not.
    pub id: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Opener {
    ticket: Ticket<OpenOutcome>,
    stream_id: String,
    producer: Producer,
    started_at: Timestamp,
    step: Step,
    /// Failed attempts of the current step.
    retries: Retries,
    /// An attempt of the mark (or of its host read) failed: it may have committed.
    mark_failed: bool,
    /// Failed attempts of every step (for `/stats`).
    pub retried: u32,
    /// When the request in flight was sent (its round trip tells the cadence how busy the
    /// database is before the first checkpoint: `live/pressure.rs`).
    sent_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Probing(OpId),
    /// Waiting for the shell to say the lease is armed.
    Arming,
    Marking(OpId),
    ReadingHost(OpId),
    /// Waiting to retry `step`.
    Backoff {
        until: Timestamp,
        step: Retry,
    },
}

/// The step a backoff resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    Probe,
    Arm,
    Mark,
}

/// Where the handshake stands after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Progress {
    Pending,
    Opened,
    /// `marked_nothing`: the failure proves that no attempt of this open marked the row.
    Failed {
        error: OpenError,
        marked_nothing: bool,
    },
}

impl Progress {
    fn refused(refused: OpenRefused, marked_nothing: bool) -> Self {
        Progress::Failed { error: refused.into(), marked_nothing }
    }
}

impl Opener {
    /// Starts the handshake: the probe (mapped tables), or the lease (a sink judges the open
    /// at the mark).
    pub fn start(
        ticket: Ticket<OpenOutcome>,
        stream_id: &str,
        producer: Producer,
        cfg: &StreamConfig,
        now: Timestamp,
        out: &mut Outbox,
    ) -> Self {
        let first = match cfg.mode {
            CheckpointMode::Tables { .. } => Retry::Probe,
            CheckpointMode::Sink => Retry::Arm,
        };
        let mut opener = Self {
            ticket,
            stream_id: stream_id.to_owned(),
            producer,
            started_at: now,
            step: Step::Arming,
            retries: Retries::default(),
            mark_failed: false,
            retried: 0,
            sent_at: now,
        };
        opener.step = opener.send(first, cfg, now, out);
        opener
    }

    pub fn ticket(&self) -> Ticket<OpenOutcome> {
        self.ticket
    }

    /// This producer's claim on the row, which the lease was armed with.
    pub fn host_token(&self) -> &str {
        &self.producer.host_token
    }

    /// The lease is armed (the steps after arming hold it).
    pub fn holds_lease(&self) -> bool {
        matches!(self.step, Step::Marking(_) | Step::ReadingHost(_) | Step::Backoff { step: Retry::Mark, .. })
    }

    /// How long the database took to answer `op`, if it is the request this handshake awaits.
    pub fn round_trip(&self, op: OpId, now: Timestamp) -> Option<Millis> {
        match self.step {
            Step::Probing(id) | Step::Marking(id) | Step::ReadingHost(id) if id == op => Some(now - self.sent_at),
            _ => None,
        }
    }

    pub fn deadline(&self) -> Option<Timestamp> {
        match self.step {
            Step::Backoff { until, .. } => Some(until),
            _ => None,
        }
    }

    /// A store reply; `Pending` also when the handshake does not await `op`.
    pub fn on_store_reply(
        &mut self,
        op: OpId,
        reply: Reply,
        cfg: &StreamConfig,
        jitter: Jitter,
        now: Timestamp,
        out: &mut Outbox,
    ) -> Progress {
        let (step, error) = match (self.step, reply) {
            (Step::Probing(id), Reply::Probe(result)) if id == op => match result {
                Ok(row) => {
                    return match judge_probe(row.as_ref()) {
                        Ok(()) => self.next(Retry::Arm, cfg, now, out),
                        Err(refused) => Progress::refused(refused, true),
                    }
                }
                Err(e) => (Retry::Probe, e),
            },
            (Step::Marking(id), Reply::Mark(result)) if id == op => match result {
                // The sink judged the row; after a failed attempt that may have committed, it may
                // be refusing this open's own mark.
                Ok(MarkOutcome::Refused(reason)) => return Progress::refused(OpenRefused::BySink { reason }, !self.mark_failed),
                Ok(MarkOutcome::Marked) => match cfg.mode {
                    CheckpointMode::Tables { host_cas: true } => {
                        self.step = Step::ReadingHost(out.request(ReadHost));
                        self.sent_at = now;
                        return Progress::Pending;
                    }
                    _ => return Progress::Opened,
                },
                Err(e) => {
                    self.mark_failed = true;
                    (Retry::Mark, e)
                }
            },
            (Step::ReadingHost(id), Reply::Host(result)) if id == op => match result {
                // Another producer's token: the mark's claim never applied, on any attempt.
                Ok(host) => {
                    return match judge_host(&self.producer.host_token, host.as_deref()) {
                        Ok(()) => Progress::Opened,
                        Err(refused) => Progress::refused(refused, true),
                    }
                }
                Err(e) => {
                    self.mark_failed = true;
                    (Retry::Mark, e)
                }
            },
            _ => return Progress::Pending, // a reply this handshake no longer awaits
        };
        self.failed(step, OpenError::Store(error), cfg, jitter, now)
    }

    /// The shell's answer to [`Output::ArmLease`].
    pub fn on_lease_armed(
        &mut self,
        result: Result<(), String>,
        cfg: &StreamConfig,
        jitter: Jitter,
        now: Timestamp,
        out: &mut Outbox,
    ) -> Progress {
        if self.step != Step::Arming {
            return Progress::Pending;
        }
        match result {
            Ok(()) => self.next(Retry::Mark, cfg, now, out),
            Err(reason) => self.failed(Retry::Arm, OpenError::Lease(reason), cfg, jitter, now),
        }
    }

    /// Resends a step whose backoff is over.
    pub fn handle_timeout(&mut self, cfg: &StreamConfig, now: Timestamp, out: &mut Outbox) {
        if let Step::Backoff { until, step } = self.step {
            if until <= now {
                self.step = self.send(step, cfg, now, out);
            }
        }
    }

    /// Moves on to the next step, with retries of its own.
    fn next(&mut self, step: Retry, cfg: &StreamConfig, now: Timestamp, out: &mut Outbox) -> Progress {
        self.retries = Retries::default();
        self.step = self.send(step, cfg, now, out);
        Progress::Pending
    }

    /// Sends `step`'s request at `now`.
    fn send(&mut self, step: Retry, cfg: &StreamConfig, now: Timestamp, out: &mut Outbox) -> Step {
        self.sent_at = now;
        let producer = &self.producer;
        match step {
            Retry::Probe => Step::Probing(out.request(ProbeOpen)),
            Retry::Arm => {
                // Everything a revival needs is stored before the row is marked: a reset between
                // the mark and a later write cannot rebuild a `ui` stream as `text`.
                let lease = StoredStream {
                    stream_id: Some(self.stream_id.clone()),
                    host_token: Some(producer.host_token.clone()),
                    armed_at: Some(self.started_at),
                    format: Some(cfg.format),
                    meta: producer.meta.clone(),
                    chat: producer.chat.as_ref().map(|c| c.chat_id.clone()),
                    user_message: producer.chat.as_ref().and_then(|c| c.user_message.as_ref()).map(|m| m.json().to_owned()),
                    producer: producer.id.clone(),
                    ..StoredStream::default()
                };
                out.push(Output::ArmLease { lease });
                Step::Arming
            }
            Retry::Mark => Step::Marking(out.request(MarkStreaming {
                host_token: producer.host_token.clone(),
                format: cfg.format,
                meta: producer.meta.clone(),
                started_at: self.started_at,
            })),
        }
    }

    /// A step failed: retried (patiently when the database is only busy), or the open fails.
    fn failed(&mut self, step: Retry, error: OpenError, cfg: &StreamConfig, jitter: Jitter, now: Timestamp) -> Progress {
        let load = matches!(&error, OpenError::Store(e) if e.is_load());
        match self.retries.after_failure(load, cfg, now, jitter) {
            Some(delay) => {
                self.retried += 1;
                self.step = Step::Backoff { until: now + delay, step };
                Progress::Pending
            }
            None => Progress::Failed { error, marked_nothing: false },
        }
    }
}
