//! The lease alarm (SPEC §7) as a sans-IO machine, [`LeaseAlarm`]: the object arms an alarm
//! before it marks a row `streaming` and renews it while the stream is alive here; when the
//! alarm fires, the shell (edge/lease.rs) and the simulator drive this same machine. It reads
//! the lease's keys from the object's storage, decides with [`decide`], asks the store through
//! the typed boundary ([`StoreRequest`]: the row read, a seal) and ends with a renewal or a
//! release:
//!
//! ```text
//!   the keys cannot be read (storage error, timeout) ─────────▶ Renew (never a release)
//!   nothing armed ─────────────────────────────────────────────▶ Release (forget the keys)
//!   stream alive here (opening, live, sealing) ───────────────▶ Renew
//!   sealed here ───────────────────────────────────────────────▶ Release
//!   a seal that could not commit, text still here ────────────▶ RepairSeal (the producer's own seal)
//!   nothing here (evicted, retired, refused) or too little ───▶ ReadRow, then:
//!       no row / sealed / another producer's host ────────────▶ Release
//!       not yet `streaming`, a mark may be in flight ─────────▶ Renew (keep the lease)
//!       not yet `streaming`, no mark can land any more ───────▶ Release
//!       `streaming` and ours ──────────────────────────────────▶ SealInterrupted (guarded), read again
//!   any store call fails or times out ─────────────────────────▶ Renew: retried a lease later
//! ```
//!
//! No row this object marked stays `streaming`: every failure renews, and only a row read
//! that proves the lease guards nothing releases it.
//!
//! **Ours.** With a host column mapped, the row is this object's only when the column holds the
//! token this object stored when it armed the lease (the open's CAS token), and the seal is
//! guarded by it too. Without one there is no token to compare: the object seals a `streaming`
//! row under the stream id it stored. That id stays stored only for an open that may have
//! marked the row: in tables mode it is stored after the probe passed (the row was not
//! `streaming` then), and an open refused without having marked (the host read names another
//! producer, or a custom sink refuses its first mark attempt) undoes its arming
//! (`Output::DisarmLease`). One Durable Object per stream id is the single-flight guard, so such
//! a row was marked by this object, unless a producer outside this deployment marks rows too
//! (map a host column then). Either way the seal applies only to a row still `streaming`.

use super::outbox::Outbox;
use crate::engine::host::config::StreamConfig;
use crate::engine::host::hook::{SealCause, StreamNotice};
use crate::engine::host::store::{OpId, ReadLeaseRow, Reply, SealGuard, SealWrite, StoreAnswer, StoreError, StoreRequest};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, STATUS_STREAMING};

/// The error sentence of a row sealed by the lease.
pub const INTERRUPTED: &str =
    "the live stream was lost (its Durable Object was evicted, crashed or redeployed, or its open never completed) before it was sealed";

/// What this object holds of its stream when the lease alarm fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// No stream here: this instance never opened it (the object was evicted or restarted), or
    /// it retired after its linger window or a failed open.
    Nothing,
    /// Opening, live or sealing: the stream is alive here and renews the lease itself.
    Alive,
    /// Sealed and lingering: the row has its terminal status.
    Sealed,
    /// Ended by a seal that could not commit. The write to retry, while the stream still holds
    /// what it needs (see [`LiveStream::unsealed_write`](super::LiveStream::unsealed_write)).
    Unsealed(Option<SealWrite>),
}

/// The message row as the lease reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// The durable text and status; `None`: there is no row.
    pub durable: Option<DurableText>,
    pub host: HostColumn,
}

/// The row's host column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostColumn {
    /// No host column is mapped (or the stream has a custom sink).
    Unmapped,
    /// The producer token it holds.
    Holds(Option<String>),
}

/// What the lease alarm does.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the alarm performs the decision"]
pub enum LeaseDecision {
    /// The lease goes on: set the alarm one lease later.
    Renew(Renewal),
    /// Retry the producer's own seal from the lingering stream (the row gets the producer's
    /// status and the whole text), then tell the stream ([`LiveStream::seal_repaired`](super::LiveStream::seal_repaired)).
    RepairSeal(SealWrite),
    /// Read the row (durable text, status, host) and decide again.
    ReadRow,
    /// Seal the row `interrupted` from its durable text (a guarded write).
    SealInterrupted(SealWrite),
    /// Nothing to do: the lease ends.
    Release(Release),
}

/// Why the lease goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// The stream is alive here.
    Alive,
    /// The row is not `streaming` yet, but a mark sent after the lease was armed may still
    /// commit: releasing now would leave that row `streaming` with no alarm.
    MarkMayBeInFlight,
    /// The object's storage failed or did not answer: what is armed is unknown, so the lease
    /// is kept (a release could abandon a `streaming` row).
    StorageFailed(String),
    /// A store call (the row read or a seal) failed or timed out: tried again a lease later.
    StoreFailed(StoreError),
    /// The guarded seal committed but the row is still `streaming`: its guard did not hold
    /// (the row changed hands between the read and the write). Decided again a lease later,
    /// never in a loop.
    SealDidNotApply,
}

/// Why the lease ends without a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Nothing is armed here (never armed, or a refused open undid its arming).
    NothingArmed,
    /// The stream sealed here.
    Sealed,
    NoRow,
    /// The row is not `streaming` (sealed already, or never marked and no mark can land now).
    NotStreaming {
        status: String,
    },
    /// The row's host column names another producer.
    NotOurs {
        holder: Option<String>,
    },
    /// A host column is mapped but this object stored no token to compare (state from a
    /// version that did not store it): without proof of ownership the row is left alone.
    TokenUnknown,
}

/// What the lease stored in the object's storage when it was armed (see
/// [`crate::engine::host::object_storage`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArmedLease {
    pub stream_id: Option<String>,
    pub host_token: Option<String>,
    pub armed_at: Option<Timestamp>,
}

/// How long after the lease was armed a mark of that open may still commit: every attempt
/// the open makes (each bounded by the store timeout) and the backoffs between them. A store
/// call that outlives its timeout is abandoned by the shell, and the runtime's I/O does not
/// outlive the instance by more than that.
pub fn mark_window(cfg: &StreamConfig) -> Millis {
    let attempts = u64::from(cfg.retries) + 1;
    let backoffs = (1..=cfg.retries).filter_map(|r| cfg.retry_delay(r)).fold(Millis::ZERO, |a, b| a + b);
    // Arming and the probe retry too before the mark is first sent.
    Millis(cfg.store_timeout_ms.0.saturating_mul(attempts)) + backoffs + backoffs
}

/// Decides what the lease alarm does at `now`. `row` is `None` until it was read (the decision
/// asks for it with [`LeaseDecision::ReadRow`]); `armed` is what the lease stored.
pub fn decide(holding: &Holding, row: Option<&LeaseRow>, armed: &ArmedLease, cfg: &StreamConfig, now: Timestamp) -> LeaseDecision {
    match holding {
        Holding::Alive => return LeaseDecision::Renew(Renewal::Alive),
        Holding::Sealed => return LeaseDecision::Release(Release::Sealed),
        Holding::Unsealed(Some(write)) => return LeaseDecision::RepairSeal(write.clone()),
        Holding::Unsealed(None) | Holding::Nothing => {}
    }
    let Some(row) = row else { return LeaseDecision::ReadRow };
    let Some(durable) = &row.durable else { return LeaseDecision::Release(Release::NoRow) };
    if durable.status != STATUS_STREAMING {
        let not_yet_marked = EndStatus::parse(&durable.status).is_none();
        if not_yet_marked && armed.armed_at.is_some_and(|at| now < at + mark_window(cfg)) {
            return LeaseDecision::Renew(Renewal::MarkMayBeInFlight);
        }
        return LeaseDecision::Release(Release::NotStreaming { status: durable.status.clone() });
    }
    if let HostColumn::Holds(holder) = &row.host {
        match armed.host_token.as_deref() {
            None => return LeaseDecision::Release(Release::TokenUnknown),
            Some(token) if holder.as_deref() != Some(token) => return LeaseDecision::Release(Release::NotOurs { holder: holder.clone() }),
            Some(_) => {}
        }
    }
    let compacts = !cfg.seals_in_place(Offset::ZERO, durable.text.len());
    // The host token guards the write only where a host column is mapped (it was compared).
    let host_token = match row.host {
        HostColumn::Holds(_) => armed.host_token.clone(),
        HostColumn::Unmapped => None,
    };
    LeaseDecision::SealInterrupted(SealWrite {
        status: EndStatus::Interrupted,
        error: Some(INTERRUPTED.to_owned()),
        seq: durable.seq,
        from: durable.seq,
        body: compacts.then(|| durable.text.clone()),
        body_from: Offset::ZERO,
        guard: Some(SealGuard { host_token }),
    })
}

/// The object's own storage failed, or did not answer within the store timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the object's storage failed: {0}")]
pub struct StorageError(pub String);

/// What the lease alarm asks the shell to do, in order.
#[derive(Debug)]
pub enum AlarmOutput {
    /// Read the lease's keys ([`crate::engine::host::object_storage::LEASE_KEYS`]); answer with
    /// [`LeaseAlarm::handle_keys`].
    ReadKeys,
    /// A store operation on the lease's stream (the row read, a seal); answer with
    /// [`LeaseAlarm::handle_store`] (a call that times out answers `MayHaveCommitted`).
    Store(StoreRequest),
    /// The repaired seal committed: tell the live stream ([`LiveStream::seal_repaired`](super::LiveStream::seal_repaired)).
    SealRepaired,
    /// Tell the event hook.
    Notice(StreamNotice),
    /// Done: set the alarm one lease later.
    Renew(Renewal),
    /// Done: the lease ends; forget its keys (see [`crate::engine::host::object_storage::kept_at_release`]).
    Release(Release),
}

impl From<StoreRequest> for AlarmOutput {
    fn from(request: StoreRequest) -> Self {
        AlarmOutput::Store(request)
    }
}

/// One run of the lease alarm, from firing to its renewal or release.
#[derive(Debug)]
pub struct LeaseAlarm {
    cfg: StreamConfig,
    armed: ArmedLease,
    row: Option<LeaseRow>,
    step: Step,
    out: Outbox<AlarmOutput>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    ReadingKeys,
    ReadingRow(OpId),
    Sealing {
        op: OpId,
        repair: Option<EndStatus>,
        durable_seq: Offset,
    },
    /// A seal of ours committed: the row is read again, and what it shows says whether the
    /// guarded write applied (the hook is told only then).
    Rereading {
        op: OpId,
        sealed_seq: Offset,
    },
    Done,
}

impl LeaseAlarm {
    /// The alarm fires at `now`: first the keys are read.
    pub fn fire(cfg: StreamConfig) -> Self {
        let mut out = Outbox::default();
        out.push(AlarmOutput::ReadKeys);
        Self { cfg, armed: ArmedLease::default(), row: None, step: Step::ReadingKeys, out }
    }

    /// The stream the lease guards (known once the keys were read).
    pub fn stream_id(&self) -> Option<&str> {
        self.armed.stream_id.as_deref()
    }

    /// The run is over (its last output was a renewal or a release).
    pub fn is_done(&self) -> bool {
        self.step == Step::Done
    }

    pub fn poll_output(&mut self) -> Option<AlarmOutput> {
        self.out.pop()
    }

    /// The keys, read (or not) from the object's storage; `holding` is what the object holds
    /// of the stream now (the shell asks the live stream; nothing when it holds none).
    pub fn handle_keys(&mut self, keys: Result<ArmedLease, StorageError>, holding: &Holding, now: Timestamp) {
        if self.step != Step::ReadingKeys {
            return;
        }
        match keys {
            Err(StorageError(e)) => self.finish(AlarmOutput::Renew(Renewal::StorageFailed(e))),
            Ok(ArmedLease { stream_id: None, .. }) => self.finish(AlarmOutput::Release(Release::NothingArmed)),
            Ok(armed) => {
                self.armed = armed;
                self.decide(holding, now);
            }
        }
    }

    /// A store answer to one of this alarm's requests.
    pub fn handle_store(&mut self, answer: StoreAnswer, holding: &Holding, now: Timestamp) {
        match (self.step.clone(), answer.reply) {
            (Step::ReadingRow(op), Reply::LeaseRow(result)) if op == answer.id => match result {
                Ok(row) => {
                    self.row = Some(row);
                    self.decide(holding, now);
                }
                Err(e) => self.finish(AlarmOutput::Renew(Renewal::StoreFailed(e))),
            },
            (Step::Sealing { op, repair, durable_seq }, Reply::Seal(result)) if op == answer.id => match result {
                Ok(()) if repair.is_some() => {
                    self.out.push(AlarmOutput::SealRepaired);
                    let (stream_id, status) = (self.armed.stream_id.clone().unwrap_or_default(), repair.unwrap_or(EndStatus::Interrupted));
                    self.out.push(AlarmOutput::Notice(StreamNotice::SealRepaired { stream_id, status, durable_seq }));
                    self.row = None;
                    self.decide(&Holding::Sealed, now);
                }
                Ok(()) => {
                    let op = self.out.request(ReadLeaseRow);
                    self.step = Step::Rereading { op, sealed_seq: durable_seq };
                }
                Err(e) => self.finish(AlarmOutput::Renew(Renewal::StoreFailed(e))),
            },
            (Step::Rereading { op, sealed_seq }, Reply::LeaseRow(result)) if op == answer.id => match result {
                Ok(row) => {
                    let applied = row.durable.as_ref().is_some_and(|d| d.status == EndStatus::Interrupted.as_str() && d.seq == sealed_seq);
                    if applied {
                        let stream_id = self.armed.stream_id.clone().unwrap_or_default();
                        let notice = StreamNotice::Interrupted { stream_id, durable_seq: sealed_seq, cause: SealCause::LeaseExpired };
                        self.out.push(AlarmOutput::Notice(notice));
                    }
                    let still_streaming = row.durable.as_ref().is_some_and(|d| d.status == STATUS_STREAMING);
                    if still_streaming {
                        return self.finish(AlarmOutput::Renew(Renewal::SealDidNotApply));
                    }
                    self.row = Some(row);
                    self.decide(holding, now);
                }
                // The seal committed; the next alarm reads the row and releases.
                Err(e) => self.finish(AlarmOutput::Renew(Renewal::StoreFailed(e))),
            },
            _ => {} // an answer this run no longer awaits (a late reply after a timeout)
        }
    }

    fn decide(&mut self, holding: &Holding, now: Timestamp) {
        match decide(holding, self.row.as_ref(), &self.armed, &self.cfg, now) {
            LeaseDecision::ReadRow => self.step = Step::ReadingRow(self.out.request(ReadLeaseRow)),
            LeaseDecision::RepairSeal(write) => {
                let (durable_seq, status) = (write.seq, write.status);
                self.step = Step::Sealing { op: self.out.request(write), repair: Some(status), durable_seq };
            }
            LeaseDecision::SealInterrupted(write) => {
                let durable_seq = write.seq;
                self.step = Step::Sealing { op: self.out.request(write), repair: None, durable_seq };
            }
            LeaseDecision::Renew(why) => self.finish(AlarmOutput::Renew(why)),
            LeaseDecision::Release(why) => self.finish(AlarmOutput::Release(why)),
        }
    }

    /// Ends the run with `last`, a renewal or a release.
    fn finish(&mut self, last: AlarmOutput) {
        self.step = Step::Done;
        self.out.push(last);
    }
}
