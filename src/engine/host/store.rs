//! The boundary between the live stream and whatever stores its text: the operations the
//! stream asks for, each with the type of its reply, and the app's own store for embedders.
//!
//! ```text
//!   LiveStream ──Output::Store(StoreRequest)──▶ shell ──▶ Tables (SQL on D1, SQLite, …)
//!        ▲                                         │   or run_on_sink (an app's CheckpointSink)
//!        └────────── handle_store(StoreAnswer) ◀───┘
//! ```
//!
//! A [`StoreRequest`] holds one [`Request`] per kind of operation, and a request is answered
//! only through its own [`Request::answer`], which takes that operation's reply type: an
//! executor answering a probe cannot hand back a host. The answer carries the operation's id,
//! which only the stream mints. A store that fails says whether the write may have committed
//! ([`StoreError`]); the stream's retries do not depend on it (every statement is idempotent),
//! but logs, hooks and timeouts do.

use crate::engine::durable::{OpenProbe, RowState};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::live::lease::{HostColumn, LeaseRow};
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::EndStatus;
use std::future::Future;
use std::pin::Pin;
use thiserror::Error;

/// Names one store operation, so its reply finds its way back. Only the stream mints one
/// (with the operation's request), so an answer cannot name an operation it was not asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub(crate) u64);

/// An operation, and what the store answers it with.
pub trait Operation {
    type Reply;
}

/// Read the row's length and status for the open verdict (mapped tables only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeOpen;

/// Mark the row `streaming`, claiming it with `host_token` where a host column is mapped. A
/// sink also gets the app's `meta` and the open's start time, and may refuse the open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkStreaming {
    pub host_token: String,
    /// The stream's format: written into the row where a format column is mapped.
    pub format: crate::engine::wire::ui::Format,
    pub meta: Option<serde_json::Value>,
    pub started_at: Timestamp,
}

/// Read the host column back: the open CAS's winner (mapped tables with a host column only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadHost;

/// One checkpoint: `text` covers `[from, to)`. The store answers what it now holds: mapped
/// tables read the row in the write's own transaction; a sink reports the length it stored
/// (normally `to`) and whether a cancel was requested.
///
/// Like a seal, it carries the fence ([`RowGuard`]): it applies only to a row still
/// `streaming` at `from` and, where a host column is mapped, held by `host_token`. A lost
/// instance's checkpoint that commits late can then neither splice its producer's text after
/// what a rebuilt stream holds (the revival claimed the row with a token of its own) nor grow a
/// row sealed meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub from: Offset,
    pub to: Offset,
    pub text: String,
    /// The token the host column must hold (`None`: no host column, or a sink).
    pub host_token: Option<String>,
}

impl Checkpoint {
    /// The condition the write applies under: `streaming`, at `from`, held by `host_token`.
    pub fn guard(&self) -> RowGuard {
        RowGuard { durable_seq: self.from, host_token: self.host_token.clone() }
    }
}

/// Read the row's stored length and cancel flag: the read-back after a checkpoint whose answer
/// failed (mapped tables only), which decides what landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadState;

/// Claim a `streaming` row for a reviving instance (SPEC §10): where a host column is mapped,
/// the row passes from `old` (the token the row holds, which the revival proved is this
/// object's) to `new`, a token no other claimant has (drawn at random by the host), and only if
/// it still holds `old`. Answers the row as the claim's own transaction leaves it (its durable
/// text and holder): the claim won when the holder is `new`, also for a replay after a lost reply
/// (the row then already holds `new`), and that text is the one to rebuild from, since no write
/// fenced by an older token can land after it. Two claimants from one token cannot both win:
/// each names its own `new`, and only the first finds `old`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimHost {
    pub old: String,
    pub new: String,
}

/// The terminal write of a stream: every seal (the producer's close and fail, the resume
/// window's expiry, the idle timeout, a cancel in the gap, the lease's repair) is one of these,
/// built in one place ([`LiveStream`](super::super::live::LiveStream)'s sealer) with one guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealWrite {
    pub status: EndStatus,
    pub error: Option<String>,
    /// The produced length.
    pub seq: Offset,
    /// What the store already holds: `[0, from)` was confirmed durable before this seal, so a
    /// sink that keeps its own chunks can write only the unsaved tail,
    /// `body[from - body_from..]` (in UTF-16 units).
    pub from: Offset,
    /// The body to compact into the row, covering `[body_from, seq)`; `None` seals in place
    /// (the body is too large for one row and stays as chunk rows, all already committed).
    pub body: Option<String>,
    pub body_from: Offset,
    /// The write applies only to a row still `streaming`, at the durable length this sealer
    /// believes, and held by its host token where a host column is mapped. A sink must honour
    /// it the same way.
    pub guard: RowGuard,
}

/// The fence every durable write carries (a [`Checkpoint`], a [`SealWrite`]): the row is as its
/// writer believes it. So a seal never shrinks the durable text (a checkpoint that committed
/// late moved the row's length), and no write lands on a row sealed meanwhile or on a row
/// another host claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGuard {
    /// The row's length must be this (`status = 'streaming' AND seq = durable_seq`).
    pub durable_seq: Offset,
    /// The token the host column must hold (where one is mapped): the open's, or the one a
    /// revival claimed the row with.
    pub host_token: Option<String>,
}

/// What a seal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealResult {
    /// The row now holds this seal's status and length (also when a replay finds its own first
    /// attempt committed).
    Applied,
    /// The guard did not hold: the row as it is now (`None`: there is no row). The sealer
    /// decides from it: adopt a longer durable text and seal again, or end as the row says.
    NotApplied(Option<RowSummary>),
}

/// A message row's status, length and error, read in the seal's own transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSummary {
    pub status: String,
    pub seq: Offset,
    pub error: Option<String>,
}

/// Read the row as a revival decides on it: its durable text and status, and the host column
/// where one is mapped, in one statement (one snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLeaseRow;

/// How the store answers a mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkOutcome {
    /// The row is the stream's (for mapped tables with a host column, the host read decides).
    Marked,
    /// A sink refused the open: a settled answer about the app's data, never retried (409
    /// `open_refused`), unlike a failure (503).
    Refused(String),
}

impl Operation for ProbeOpen {
    /// The row, or `None`: there is none.
    type Reply = Option<OpenProbe>;
}
impl Operation for MarkStreaming {
    type Reply = MarkOutcome;
}
impl Operation for ReadHost {
    /// The token the host column holds.
    type Reply = Option<String>;
}
impl Operation for Checkpoint {
    type Reply = RowState;
}
impl Operation for ReadState {
    type Reply = RowState;
}
impl Operation for ClaimHost {
    /// The row after the claim.
    type Reply = LeaseRow;
}
impl Operation for SealWrite {
    type Reply = SealResult;
}
impl Operation for ReadLeaseRow {
    type Reply = LeaseRow;
}

/// A failed store operation, and whether its write may have committed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StoreError {
    /// Nothing was applied: it failed before the database saw it, or the database refused it
    /// and rolled back (or it was a read).
    #[error("{0}")]
    NotCommitted(String),
    /// The outcome is unknown: the write may have committed, but its reply was lost.
    #[error("{0} (the write may have committed)")]
    MayHaveCommitted(String),
    /// The database turned the call away for load before running it (D1's `D1 DB is
    /// overloaded…`, a pool with no free connection): nothing was applied. Load, not a refusal:
    /// the stream retries it with jittered back-off for as long as `STORE_PATIENCE_MS` allows.
    #[error("the database is overloaded: {0}")]
    Overloaded(String),
    /// No answer within `STORE_TIMEOUT_MS` (the shell gave the call up): the write may have
    /// committed. Retried as load is.
    #[error("no answer in {} ms (the write may have committed)", .0.0)]
    TimedOut(Millis),
}

/// The messages a database answers when it turns a call away for load, as they appear in the
/// error the driver raises. D1's two (https://developers.cloudflare.com/d1/observability/debug-d1/#error-list,
/// the same words a Durable Object uses for its own queue); PostgreSQL's SQLSTATE 53300
/// `too_many_connections` and 53400 `configuration_limit_exceeded`, as the Postgres executor
/// describes a server error (`<SQLSTATE>: <message>`).
const OVERLOAD_MARKS: [&str; 4] = ["D1 DB is overloaded", "Too many requests queued", "53300: ", "53400: "];

impl StoreError {
    pub fn may_have_committed(&self) -> bool {
        matches!(self, StoreError::MayHaveCommitted(_) | StoreError::TimedOut(_))
    }

    /// The database is busy, not refusing: an overload or a call that did not answer in time.
    /// Such a failure is retried patiently and widens the checkpoint cadence
    /// (`live/pressure.rs`); every other failure keeps its fixed retries.
    pub fn is_load(&self) -> bool {
        matches!(self, StoreError::Overloaded(_) | StoreError::TimedOut(_))
    }

    /// Types a database driver's failure from its message: an overload (see `OVERLOAD_MARKS`)
    /// is [`StoreError::Overloaded`] whatever was sent (the database ran none of it); anything
    /// else is [`StoreError::MayHaveCommitted`] when `may_have_committed`, else
    /// [`StoreError::NotCommitted`]. The executors call it, so which failure is load is the
    /// engine's rule, not the shell's.
    pub fn from_database(message: String, may_have_committed: bool) -> Self {
        if OVERLOAD_MARKS.iter().any(|mark| message.contains(mark)) {
            StoreError::Overloaded(message)
        } else if may_have_committed {
            StoreError::MayHaveCommitted(message)
        } else {
            StoreError::NotCommitted(message)
        }
    }
}

/// Which store call runs: the operations of [`StoreRequest`], and the shell's own reads and
/// writes. An executor may log it; a test build's fault plan targets by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    ProbeOpen,
    MarkStreaming,
    ReadHost,
    Checkpoint,
    ReadState,
    Seal,
    /// `GET /text`, `/ui` from the store, the lease's row read.
    ReadDurable,
    /// `POST /cancel`'s flag.
    RequestCancel,
    /// A chat's streaming answer, or an answer's chat (the chat column's reads).
    ReadChat,
    /// A rehydrating instance's claim of the row ([`ClaimHost`]).
    ClaimHost,
    /// The lease alarm's read of its keys from the object's own storage (not D1).
    LeaseKeys,
    /// A stream's notice to its chat's feed object (not D1: an internal request).
    FeedNotice,
}

/// One operation the stream asked for, answered only with [`Request::answer`].
#[derive(Debug)]
#[must_use = "a store request must be answered (LiveStream::handle_store), or the stream waits for it"]
pub struct Request<Op> {
    id: OpId,
    op: Op,
}

impl<Op> Request<Op> {
    pub(crate) fn new(id: OpId, op: Op) -> Self {
        Self { id, op }
    }

    pub fn id(&self) -> OpId {
        self.id
    }

    /// What is asked.
    pub fn op(&self) -> &Op {
        &self.op
    }
}

/// What the stream asks the store to do ([`Output::Store`](crate::engine::live::Output::Store)).
#[derive(Debug)]
#[must_use = "a store request must be answered (LiveStream::handle_store), or the stream waits for it"]
pub enum StoreRequest {
    ProbeOpen(Request<ProbeOpen>),
    MarkStreaming(Request<MarkStreaming>),
    ReadHost(Request<ReadHost>),
    Checkpoint(Request<Checkpoint>),
    ReadState(Request<ReadState>),
    Seal(Request<SealWrite>),
    /// The row as a revival reads it (durable text and host), or a seal adopting a longer text.
    ReadLeaseRow(Request<ReadLeaseRow>),
    /// A revival's claim of the row (a host column is mapped).
    ClaimHost(Request<ClaimHost>),
}

/// A store's answer to one request, fed back with
/// [`LiveStream::handle_store`](crate::engine::live::LiveStream::handle_store).
#[derive(Debug)]
pub struct StoreAnswer {
    pub(crate) id: OpId,
    pub(crate) reply: Reply,
}

/// An answer's reply, of the kind its operation asked for (the only way to build one).
#[derive(Debug)]
pub(crate) enum Reply {
    Probe(Result<Option<OpenProbe>, StoreError>),
    Mark(Result<MarkOutcome, StoreError>),
    Host(Result<Option<String>, StoreError>),
    Checkpoint(Result<RowState, StoreError>),
    State(Result<RowState, StoreError>),
    Seal(Result<SealResult, StoreError>),
    LeaseRow(Result<LeaseRow, StoreError>),
}

impl Reply {
    /// The store failed for load (`StoreError::is_load`).
    pub(crate) fn failed_for_load(&self) -> bool {
        let error = match self {
            Reply::Probe(Err(e)) | Reply::Mark(Err(e)) | Reply::Host(Err(e)) | Reply::Checkpoint(Err(e)) | Reply::State(Err(e)) => e,
            Reply::Seal(Err(e)) | Reply::LeaseRow(Err(e)) => e,
            _ => return false,
        };
        error.is_load()
    }
}

/// Each operation's `answer`, its variant of [`StoreRequest`] and its reply.
macro_rules! requests {
    ($($op:ident => $variant:ident, $reply:ident;)*) => {$(
        impl Request<$op> {
            /// Answers the request with the store's reply, or its failure.
            pub fn answer(self, reply: Result<<$op as Operation>::Reply, StoreError>) -> StoreAnswer {
                StoreAnswer { id: self.id, reply: Reply::$reply(reply) }
            }
        }

        impl From<Request<$op>> for StoreRequest {
            fn from(request: Request<$op>) -> Self {
                StoreRequest::$variant(request)
            }
        }
    )*

        impl StoreRequest {
            pub fn id(&self) -> OpId {
                match self {
                    $(StoreRequest::$variant(r) => r.id,)*
                }
            }

            /// An answer to this request saying it failed with `error`, made without giving
            /// the request up: a shell whose store gave no answer (a lost reply, a timeout)
            /// answers with it. Of two answers to one request the stream takes the first.
            pub fn failed(&self, error: StoreError) -> StoreAnswer {
                match self {
                    $(StoreRequest::$variant(r) => StoreAnswer { id: r.id, reply: Reply::$reply(Err(error)) },)*
                }
            }
        }
    };
}

requests! {
    ProbeOpen => ProbeOpen, Probe;
    MarkStreaming => MarkStreaming, Mark;
    ReadHost => ReadHost, Host;
    Checkpoint => Checkpoint, Checkpoint;
    ReadState => ReadState, State;
    SealWrite => Seal, Seal;
    ReadLeaseRow => ReadLeaseRow, LeaseRow;
    ClaimHost => ClaimHost, LeaseRow;
}

impl StoreRequest {
    /// Which store call this is.
    pub fn kind(&self) -> OpKind {
        match self {
            StoreRequest::ProbeOpen(_) => OpKind::ProbeOpen,
            StoreRequest::MarkStreaming(_) => OpKind::MarkStreaming,
            StoreRequest::ReadHost(_) => OpKind::ReadHost,
            StoreRequest::Checkpoint(_) => OpKind::Checkpoint,
            StoreRequest::ReadState(_) => OpKind::ReadState,
            StoreRequest::Seal(_) => OpKind::Seal,
            StoreRequest::ReadLeaseRow(_) => OpKind::ReadDurable,
            StoreRequest::ClaimHost(_) => OpKind::ClaimHost,
        }
    }
}

/// A store call in progress.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + 'a>>;

/// The app's own checkpoint store (the seed's "commit" mode), which an embedding Worker
/// installs in place of the mapped tables. A stream with a sink opens with [`Self::open`]
/// (after the lease is armed), checkpoints with [`Self::checkpoint`] and ends with
/// [`Self::seal`]; it never probes, reads a host or reads back. The mapped tables are one
/// implementation ([`Tables`](crate::engine::durable::Tables)), for a sink that wraps them.
pub trait CheckpointSink {
    /// A stream opens: mark its message as streaming. `open.meta` is the app's `meta` from the
    /// open body and `open.started_at` the open's start time. [`MarkOutcome::Refused`] refuses
    /// the open (409, never retried); an error is retried, then answered 503.
    fn open<'a>(&'a self, stream_id: &'a str, open: &'a MarkStreaming) -> StoreFuture<'a, MarkOutcome>;

    /// One checkpoint of `[slice.from, slice.to)`: answers the length the store now holds
    /// (`slice.to` when the whole slice committed) and whether a cancel was requested. An error
    /// is retried.
    fn checkpoint<'a>(&'a self, stream_id: &'a str, slice: &'a Checkpoint) -> StoreFuture<'a, RowState>;

    /// The terminal write. Honour [`SealWrite::guard`]: write only a row still streaming at
    /// `guard.durable_seq` (its `Ok` means the seal is written).
    fn seal<'a>(&'a self, stream_id: &'a str, write: &'a SealWrite) -> StoreFuture<'a, ()>;

    /// The durable text of a stream, or `None` when it has no row.
    fn read_durable<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, Option<DurableText>>;

    /// Sets the row's cancel flag; `false` when there is no such row.
    fn request_cancel<'a>(&'a self, stream_id: &'a str) -> StoreFuture<'a, bool>;
}

/// Answers a request of a stream whose store is `sink` (`CheckpointMode::Sink`).
pub async fn run_on_sink(sink: &dyn CheckpointSink, stream_id: &str, request: StoreRequest) -> StoreAnswer {
    match request {
        StoreRequest::MarkStreaming(r) => {
            let reply = sink.open(stream_id, r.op()).await;
            r.answer(reply)
        }
        StoreRequest::Checkpoint(r) => {
            let reply = sink.checkpoint(stream_id, r.op()).await;
            r.answer(reply)
        }
        // A sink honours the guard itself: its `Ok` says the seal is written.
        StoreRequest::Seal(r) => {
            let reply = sink.seal(stream_id, r.op()).await.map(|()| SealResult::Applied);
            r.answer(reply)
        }
        // A sink has no host column (and reports a cancel at its next checkpoint): the row is the
        // durable text.
        StoreRequest::ReadLeaseRow(r) => {
            let reply = sink.read_durable(stream_id).await.map(|durable| LeaseRow { durable, host: HostColumn::Unmapped, cancel: false });
            r.answer(reply)
        }
        // A stream with a sink never asks these (its open is the mark; its checkpoint's answer
        // is the truth): a failure, never a made-up row.
        other @ (StoreRequest::ProbeOpen(_) | StoreRequest::ReadHost(_) | StoreRequest::ReadState(_) | StoreRequest::ClaimHost(_)) => {
            let kind = other.kind();
            other.failed(StoreError::NotCommitted(format!("a checkpoint sink is never asked for {kind:?}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overload_is_load_whatever_was_sent_and_everything_else_keeps_its_kind() {
        for message in [
            "D1_ERROR: D1 DB is overloaded. Requests queued for too long.",
            "D1_ERROR: D1 DB is overloaded. Too many requests queued.",
            "Error: Durable Object is overloaded. Too many requests queued.",
            "53300: sorry, too many clients already",
        ] {
            for may_have_committed in [false, true] {
                let e = StoreError::from_database(message.to_owned(), may_have_committed);
                assert!(matches!(e, StoreError::Overloaded(_)) && e.is_load() && !e.may_have_committed(), "{message}: {e:?}");
            }
        }
        let lost = StoreError::from_database("Network connection lost.".into(), true);
        assert_eq!(lost, StoreError::MayHaveCommitted("Network connection lost.".into()));
        assert!(!lost.is_load(), "a lost reply keeps its fixed retries");
        let refused = StoreError::from_database("D1_ERROR: UNIQUE constraint failed".into(), false);
        assert!(matches!(refused, StoreError::NotCommitted(_)) && !refused.is_load());
        let late = StoreError::TimedOut(Millis(15_000));
        assert!(late.is_load() && late.may_have_committed());
        assert_eq!(late.to_string(), "no answer in 15000 ms (the write may have committed)");
    }
}
