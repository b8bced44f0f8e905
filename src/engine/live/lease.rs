//! The lease alarm (SPEC §7) as a sans-IO machine, [`LeaseAlarm`]: the object arms an alarm
//! before it marks a row `streaming` and renews it while the stream is alive here; when the
//! alarm fires, the shell (edge/stream/lease.rs) and the simulator drive this same machine. It reads
//! the object's keys, looks at what the object holds, and ends with a renewal or a release:
//!
//! ```text
//!   the keys cannot be read (storage error, timeout) ─────────▶ Renew (never a release)
//!   nothing armed ─────────────────────────────────────────────▶ Release
//!   stream alive here (opening, live, sealing) ───────────────▶ Renew
//!   sealed here (or ended as its row says) ───────────────────▶ Release: forget every key
//!   its seal could not commit ─────────────────────────────────▶ RetrySeal (the stream's own
//!                                                                sealer writes it again), Renew
//!   nothing here (evicted, reset, retired) ───────────────────▶ Revive (live/revival.rs), then:
//!       rebuilt: the stream waits for its producer ───────────▶ Renew (its window seals it)
//!       nothing to rebuild (no row, sealed, not ours) ────────▶ Release: forget every key
//!       a mark may still land ─────────────────────────────────▶ Renew
//!       a step failed or timed out ────────────────────────────▶ Renew: retried a lease later
//! ```
//!
//! The alarm never writes the row itself: every seal is the rebuilt (or lingering) stream's,
//! through its one guarded sealer (`live/seal.rs`), so a seal never shrinks the durable text and
//! never lands before the resume window has passed. No row this object marked stays
//! `streaming`: every failure renews, and only a row read that proves the lease guards nothing
//! releases it.
//!
//! **Ours.** With a host column mapped, the row is this object's only when the column holds a
//! token this object stored (the open's CAS token, or a revival's claim). Without one there is
//! no token to compare: the object rebuilds a `streaming` row under the stream id it stored. That
//! id stays stored only for an open that may have marked the row (an open refused without having
//! marked undoes its arming, `Output::DisarmLease`). One Durable Object per stream id is the
//! single-flight guard, so such a row was marked by this object, unless a producer outside this
//! deployment marks rows too (map a host column then).

use super::revival::{RevivalEnd, RevivalFailure};
use crate::engine::host::config::StreamConfig;
use crate::engine::host::object_storage::StoredStream;
use crate::engine::host::time::Millis;
use crate::engine::text::reading::DurableText;
use std::collections::VecDeque;

/// The error sentence of a rebuilt stream sealed at once (no resume window is configured), or
/// of a seal retried without the text it had.
pub const INTERRUPTED: &str =
    "the live stream was lost (its Durable Object was evicted, crashed or redeployed, or its open never completed) before it was sealed";

/// What this object holds of its stream when the lease alarm fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// No stream here: this instance never opened it (the object was evicted or restarted), or
    /// it retired after its linger window or a failed open.
    Nothing,
    /// Opening, live or sealing: the stream is alive here and renews the lease itself.
    Alive,
    /// Sealed and lingering (or ended as its row says): the row has its terminal status.
    Sealed,
    /// Ended by a seal that could not commit: the stream writes it again when told
    /// ([`LiveStream::retry_seal`](super::LiveStream::retry_seal)).
    Unsealed,
}

/// The message row as a revival reads it (and a seal that must adopt a longer text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// The durable text and status; `None`: there is no row.
    pub durable: Option<DurableText>,
    pub host: HostColumn,
    /// A Stop is recorded on the row (its cancel column, where mapped): a stream rebuilt from it
    /// seals `cancelled`.
    pub cancel: bool,
}

/// The row's host column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostColumn {
    /// No host column is mapped (or the stream has a custom sink).
    Unmapped,
    /// The producer token it holds.
    Holds(Option<String>),
}

impl LeaseRow {
    /// The token the host column holds, if one is mapped and set.
    pub fn host_holder(&self) -> Option<String> {
        match &self.host {
            HostColumn::Holds(holder) => holder.clone(),
            HostColumn::Unmapped => None,
        }
    }
}

/// Why the lease goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// The stream is alive here (or was just rebuilt).
    Alive,
    /// The stream's seal fell short and it is writing it again.
    RetryingSeal,
    /// The row is not `streaming` yet, but a mark sent after the lease was armed may still
    /// commit: releasing now would leave that row `streaming` with no alarm.
    MarkMayBeInFlight,
    /// The object's storage failed or did not answer: what is armed is unknown, so the lease
    /// is kept (a release could abandon a `streaming` row).
    StorageFailed(String),
    /// A revival's step failed or timed out: tried again a lease later.
    RevivalFailed(RevivalFailure),
    /// The stream's notices to its chat's feed are not all confirmed: the keys they are sent
    /// again from are kept (`engine::feed::Notices`).
    NoticesUnconfirmed,
}

/// Why the lease ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Nothing is armed here (never armed, or a refused open undid its arming).
    NothingArmed,
    /// The stream sealed here (or ended as its row says).
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

/// How long after the lease was armed a mark of that open may still commit: every attempt
/// the open makes (each bounded by the store timeout) and the backoffs between them. A store
/// call that outlives its timeout is abandoned by the shell, and the runtime's I/O does not
/// outlive the instance by more than that.
pub fn mark_window(cfg: &StreamConfig) -> Millis {
    let attempts = u64::from(cfg.retries) + 1;
    let backoffs = (1..=cfg.retries).filter_map(|r| cfg.retry_delay(r)).fold(Millis::ZERO, |a, b| a + b);
    // Arming and the probe retry too before the mark is first sent.
    let refused = Millis(cfg.store_timeout_ms.0.saturating_mul(attempts)) + backoffs + backoffs;
    // Under load the probe and the mark each retry for up to `STORE_PATIENCE_MS` from their
    // first failure, the last attempt bounded by the store timeout (`live/backoff.rs`).
    let loaded = match cfg.store_patience_ms {
        Millis::ZERO => Millis::ZERO,
        patience => (patience + cfg.store_timeout_ms + super::LOAD_BACKOFF_MAX) * 2,
    };
    refused + loaded
}

/// The object's own storage failed, or did not answer within the store timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the object's storage failed: {0}")]
pub struct StorageError(pub String);

/// What the lease alarm asks the shell to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlarmOutput {
    /// Read the object's keys; answer with [`LeaseAlarm::handle_keys`].
    ReadKeys,
    /// Nothing is held here: run a revival ([`super::Revival`], the same one a request runs)
    /// and answer how it went with [`LeaseAlarm::handle_revival`].
    Revive,
    /// Tell the live stream its seal fell short: [`LiveStream::retry_seal`](super::LiveStream::retry_seal).
    RetrySeal,
    /// Done: set the alarm one lease later.
    Renew(Renewal),
    /// Done: the lease ends; forget every key (see
    /// [`crate::engine::host::object_storage::kept_at_release`]) and the alarm.
    Release(Release),
}

/// How a revival the alarm asked for went (the rebuilt stream itself goes to the shell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revived {
    Rebuilt,
    Nothing(Release),
    MarkMayBeInFlight,
    Failed(RevivalFailure),
}

impl From<&RevivalEnd> for Revived {
    fn from(end: &RevivalEnd) -> Self {
        match end {
            RevivalEnd::Revived(_) => Revived::Rebuilt,
            RevivalEnd::Nothing(release) => Revived::Nothing(release.clone()),
            RevivalEnd::MarkMayBeInFlight => Revived::MarkMayBeInFlight,
            RevivalEnd::Failed(e) => Revived::Failed(e.clone()),
        }
    }
}

/// One run of the lease alarm, from firing to its renewal or release.
#[derive(Debug)]
pub struct LeaseAlarm {
    stream_id: Option<String>,
    step: Step,
    out: VecDeque<AlarmOutput>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    ReadingKeys,
    Reviving,
    Done,
}

impl LeaseAlarm {
    /// The alarm fires: first the keys are read.
    pub fn fire() -> Self {
        Self { stream_id: None, step: Step::ReadingKeys, out: VecDeque::from([AlarmOutput::ReadKeys]) }
    }

    /// The stream the lease guards (known once the keys were read).
    pub fn stream_id(&self) -> Option<&str> {
        self.stream_id.as_deref()
    }

    /// The run is over (its last output was a renewal or a release).
    pub fn is_done(&self) -> bool {
        self.step == Step::Done
    }

    pub fn poll_output(&mut self) -> Option<AlarmOutput> {
        self.out.pop_front()
    }

    /// The keys, read (or not) from the object's storage; `holding` is what the object holds
    /// of the stream now.
    pub fn handle_keys(&mut self, keys: Result<StoredStream, StorageError>, holding: Holding) {
        if self.step != Step::ReadingKeys {
            return;
        }
        let keys = match keys {
            Err(StorageError(e)) => return self.finish(AlarmOutput::Renew(Renewal::StorageFailed(e))),
            Ok(keys) => keys,
        };
        let Some(stream_id) = keys.stream_id else { return self.finish(AlarmOutput::Release(Release::NothingArmed)) };
        self.stream_id = Some(stream_id);
        match holding {
            Holding::Alive => self.finish(AlarmOutput::Renew(Renewal::Alive)),
            Holding::Sealed => self.finish(AlarmOutput::Release(Release::Sealed)),
            Holding::Unsealed => {
                self.out.push_back(AlarmOutput::RetrySeal);
                self.finish(AlarmOutput::Renew(Renewal::RetryingSeal));
            }
            Holding::Nothing => {
                self.step = Step::Reviving;
                self.out.push_back(AlarmOutput::Revive);
            }
        }
    }

    /// How the revival went.
    pub fn handle_revival(&mut self, revived: Revived) {
        if self.step != Step::Reviving {
            return;
        }
        self.finish(match revived {
            Revived::Rebuilt => AlarmOutput::Renew(Renewal::Alive),
            Revived::Nothing(release) => AlarmOutput::Release(release),
            Revived::MarkMayBeInFlight => AlarmOutput::Renew(Renewal::MarkMayBeInFlight),
            Revived::Failed(e) => AlarmOutput::Renew(Renewal::RevivalFailed(e)),
        });
    }

    /// Ends the run with `last`, a renewal or a release.
    fn finish(&mut self, last: AlarmOutput) {
        self.step = Step::Done;
        self.out.push_back(last);
    }
}
