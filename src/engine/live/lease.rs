//! The lease alarm's decision (SPEC §7). The object arms an alarm before it marks a row
//! `streaming` and renews it while the stream is alive here; when the alarm fires, this decides
//! what to do, and the shell only performs it:
//!
//! ```text
//!   stream alive here (opening, live, sealing) ───────────────▶ Renew
//!   sealed here ───────────────────────────────────────────────▶ Release
//!   a seal that could not commit, text still here ────────────▶ RepairSeal (the producer's own seal)
//!   nothing here (evicted, retired, refused) or too little ───▶ ReadRow, then:
//!       no row / not `streaming` / another producer's host ───▶ Release
//!       `streaming` and ours ──────────────────────────────────▶ SealInterrupted (from its durable text)
//! ```
//!
//! A write that fails is retried a lease later by the shell (the alarm re-arms itself), so no
//! row this object marked stays `streaming`.
//!
//! **Ours.** With a host column mapped, the row is this object's only when the column holds the
//! token this object stored when it armed the lease (the open's CAS token). Without one there is
//! no token to compare: the object seals a `streaming` row under the stream id it stored. That
//! id stays stored only for an open that may have marked the row: in tables mode it is stored
//! after the probe passed (the row was not `streaming` then), and an open refused without having
//! marked (the host read names another producer, or a custom sink refuses its first mark
//! attempt) undoes its arming (`Output::DisarmLease`). One Durable Object per stream id is the
//! single-flight guard, so such a row was marked by this object, unless a producer outside this
//! deployment marks rows too (map a host column then).

use crate::engine::config::StreamConfig;
use crate::engine::frame::{EndStatus, STATUS_STREAMING};
use crate::engine::reading::DurableText;
use crate::engine::store::SealWrite;
use crate::engine::utf16::Offset;

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
#[must_use = "the shell performs the decision"]
pub enum LeaseDecision {
    /// The stream is alive here: set the alarm one lease later.
    Renew,
    /// Retry the producer's own seal from the lingering stream (the row gets the producer's
    /// status and the whole text), then tell the stream ([`LiveStream::seal_repaired`](super::LiveStream::seal_repaired)).
    RepairSeal(SealWrite),
    /// Read the row (durable text, status, host) and decide again.
    ReadRow,
    /// Seal the row `interrupted` from its durable text.
    SealInterrupted(SealWrite),
    /// Nothing to do: the lease ends.
    Release(Release),
}

/// Why the lease ends without a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// The stream sealed here.
    Sealed,
    NoRow,
    /// The row is not `streaming` (sealed already, or never marked).
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

/// Decides what the lease alarm does. `row` is `None` until it was read (the decision asks
/// for it with [`LeaseDecision::ReadRow`]); `own_token` is the token this object stored when it
/// armed the lease.
pub fn decide(holding: &Holding, row: Option<&LeaseRow>, own_token: Option<&str>, cfg: &StreamConfig) -> LeaseDecision {
    match holding {
        Holding::Alive => return LeaseDecision::Renew,
        Holding::Sealed => return LeaseDecision::Release(Release::Sealed),
        Holding::Unsealed(Some(write)) => return LeaseDecision::RepairSeal(write.clone()),
        Holding::Unsealed(None) | Holding::Nothing => {}
    }
    let Some(row) = row else { return LeaseDecision::ReadRow };
    let Some(durable) = &row.durable else { return LeaseDecision::Release(Release::NoRow) };
    if durable.status != STATUS_STREAMING {
        return LeaseDecision::Release(Release::NotStreaming { status: durable.status.clone() });
    }
    if let HostColumn::Holds(holder) = &row.host {
        match own_token {
            None => return LeaseDecision::Release(Release::TokenUnknown),
            Some(token) if holder.as_deref() != Some(token) => return LeaseDecision::Release(Release::NotOurs { holder: holder.clone() }),
            Some(_) => {}
        }
    }
    let compacts = !cfg.seals_in_place(Offset::ZERO, durable.text.len());
    LeaseDecision::SealInterrupted(SealWrite {
        status: EndStatus::Interrupted,
        error: Some(INTERRUPTED.to_owned()),
        seq: durable.seq,
        from: durable.seq,
        body: compacts.then(|| durable.text.clone()),
        body_from: Offset::ZERO,
    })
}
