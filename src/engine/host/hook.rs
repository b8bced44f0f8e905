//! The event hook an embedding Worker may install: what the seed's `onCheckpointError` told
//! an app, and more. Every notice is also a log line; the hook is for apps that alert on them,
//! count them or repair something of their own.
//!
//! **Panics.** A hook must not take the stream down with it. The shell calls it only after it
//! stopped borrowing the stream's state (the notice is an output of an input already applied),
//! and [`notify`] contains a panic with `catch_unwind` where the target unwinds: natively, and
//! on wasm32 when the Worker is built with `worker-build --panic-unwind` (nightly, `std` rebuilt
//! with `panic=unwind`). A default wasm32 build (`panic=abort`, as `scripts/build.sh` builds)
//! cannot unwind: a panic aborts the WebAssembly instance. workers-rs 0.8.7 then reinitializes
//! the instance on the next event (its abort handler), as new Durable Object instances, so the
//! object's live stream is lost as in an eviction, and the lease armed before the row was
//! marked seals it `interrupted` within `LEASE_MS`: nothing durable is lost, and no row stays
//! `streaming`, but the stream ends early. Keep hooks panic-free.

use crate::engine::live::{CheckpointError, DropReason, ReaderId, Shortfall, StreamEvent};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::EndStatus;
use std::panic::{catch_unwind, AssertUnwindSafe};
use thiserror::Error;

/// Something an embedding Worker may want to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamNotice {
    /// A checkpoint round gave up (after its retries): `[from, to)` is not durable yet. The text
    /// stays in memory; a later round, or the seal, tries again.
    CheckpointFailed { stream_id: String, from: Offset, to: Offset, error: CheckpointError },
    /// A seal could not commit what was produced: `durable_seq` of `seq` UTF-16 units are
    /// durable (the caller got a 503; the lease repairs the row if it can).
    SealShortfall { stream_id: String, status: EndStatus, seq: Offset, durable_seq: Offset, reason: Shortfall },
    /// A reader was dropped with `stale` (it stopped draining and its queue filled up).
    ReaderDropped { stream_id: String, reader: ReaderId, reason: DropReason },
    /// A stream was sealed `interrupted`, with `durable_seq` units of text, for `cause`.
    Interrupted { stream_id: String, durable_seq: Offset, cause: SealCause },
    /// A seal that had fallen short (see [`StreamNotice::SealShortfall`]) was written by the
    /// lease alarm's retry after all: the row has `status` and `durable_seq` units.
    SealRepaired { stream_id: String, status: EndStatus, durable_seq: Offset },
}

/// Why a stream was sealed `interrupted`. Open: more causes come (a resume window that ran out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SealCause {
    /// Its producer sent nothing for `IDLE_TIMEOUT_MS` (counted across resets: a stream rebuilt
    /// after an eviction waits for what remains of it).
    IdleProducer,
    /// The upstream a pump read from was lost (the object was its own producer).
    UpstreamLost,
    /// Its live stream was lost (evicted, crashed, redeployed, or its open never completed) and,
    /// with no resume window configured (`RESUME_WINDOW_MS = 0`), the lease alarm's revival
    /// sealed the row from its durable text at once.
    LeaseExpired,
    /// Its live stream was lost, a new instance rehydrated it, and its producer did not resume
    /// within `RESUME_WINDOW_MS` (SPEC §10).
    ResumeWindowExpired,
}

impl StreamNotice {
    /// The notices a stream event carries (none, one, or two: an interrupted seal that also fell
    /// short). An `interrupted` seal is told with its cause; one without a cause (a producer's
    /// own `seal(Interrupted)`) is not a notice.
    pub fn of(stream_id: &str, event: &StreamEvent) -> Vec<StreamNotice> {
        let id = || stream_id.to_owned();
        match event {
            StreamEvent::CheckpointFailed { from, to, error } => {
                vec![StreamNotice::CheckpointFailed { stream_id: id(), from: *from, to: *to, error: error.clone() }]
            }
            StreamEvent::ReaderDropped { reader, reason } => {
                vec![StreamNotice::ReaderDropped { stream_id: id(), reader: *reader, reason: *reason }]
            }
            StreamEvent::Sealed { status, seq, durable_seq, shortfall, cause } => {
                let mut notices = Vec::new();
                if let (EndStatus::Interrupted, Some(cause)) = (status, cause) {
                    notices.push(StreamNotice::Interrupted { stream_id: id(), durable_seq: *durable_seq, cause: *cause });
                }
                if let Some(reason) = shortfall {
                    notices.push(StreamNotice::SealShortfall {
                        stream_id: id(),
                        status: *status,
                        seq: *seq,
                        durable_seq: *durable_seq,
                        reason: reason.clone(),
                    });
                }
                notices
            }
            StreamEvent::SealRepaired { status, durable_seq } => {
                vec![StreamNotice::SealRepaired { stream_id: id(), status: *status, durable_seq: *durable_seq }]
            }
            StreamEvent::Opened | StreamEvent::OpenFailed(_) | StreamEvent::CheckpointAttemptFailed { .. } => vec![],
        }
    }
}

/// Receives the [`StreamNotice`]s of every stream of this Worker.
pub trait EventHook {
    fn on_event(&self, notice: &StreamNotice);
}

/// The hook panicked, and the panic was contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the event hook panicked (the panic was contained)")]
pub struct HookPanicked;

/// Calls `hook`, containing a panic where the target unwinds (see the module docs).
pub fn notify(hook: &dyn EventHook, notice: &StreamNotice) -> Result<(), HookPanicked> {
    catch_unwind(AssertUnwindSafe(|| hook.on_event(notice))).map_err(|_| HookPanicked)
}
