//! The live plane: one stream's buffer, readers and checkpoint driver, as a sans-IO state
//! machine.
//!
//! The shell feeds inputs (`push`, `flush`, `close`, `subscribe`, [`LiveStream::handle_store`],
//! [`LiveStream::handle_lease_armed`], [`LiveStream::handle_timeout`]), each with the current
//! time, then drains [`LiveStream::poll_output`] until it returns `None` and arms a timer for
//! [`LiveStream::poll_timeout`]. It performs the outputs (store operations, the lease's arming
//! and renewals, reader wakes, settled requests, notices) only after it has stopped borrowing
//! the machine. When the lease alarm fires, [`lease::LeaseAlarm`] says what to do, and when nothing
//! is held here, [`Revival`] rebuilds the stream.
//!
//! - `stream`: the phases (opening, live, sealing, ended), checkpoints' effects, time;
//! - `open`: the open handshake (probe, arm the lease, mark, read the host);
//! - `checkpoint`: when a checkpoint round is due and one round's protocol;
//! - `pressure`: the cadence's stretch under the database's pressure;
//! - `backoff`: how a failed store call is retried (fixed, or jittered under load);
//! - `lease`: the lease alarm's decision;
//! - `seal`: the sealer, every seal's one guarded write and what follows when it does not apply;
//! - `revival`: rebuilding a stream a reset instance lost (keys, row, claim, window), driven by
//!   the lease alarm and by requests alike;
//! - `revivals`: which caller runs a revival, and what a "nothing to rebuild" answers later;
//! - `resume`: the rebuilt stream, the producer's resume and fence, the resume window;
//! - `joins`: where a reader starts (the replay, parked readers of a rebuilt stream);
//! - `readers`: bounded queues, dialects, pacing, merging;
//! - `outbox`: where outputs wait for the shell;
//! - `slot`: the stream an object holds, and the detaches that wait while it is borrowed;
//! - `watch`: what the producer's watch answers (a cancel, the end) and when.

mod backoff;
mod checkpoint;
mod joins;
pub mod lease;
mod open;
mod outbox;
mod pressure;
mod readers;
mod resume;
mod revival;
mod revivals;
mod seal;
mod slot;
mod stream;
mod watch;

pub use backoff::{patiently, Jitter, LOAD_BACKOFF_MAX};
pub use joins::replay_of_row;
pub use open::Producer;
pub use readers::{Dialect, DropReason, Pull, ReaderId, SharedFrame, Wire, ALONE_BYTES};
pub use resume::{idle_error, window_expired_error, Fenced, Holder, Rehydration, ResumeGrant, ResumeRefused, Taker, Window, FIRST_EPOCH};
pub use revival::{Revival, RevivalEnd, RevivalFailure, RevivalOutput};
pub use revivals::{Attempt, Caller, Revivals, Turn};
pub use slot::StreamSlot;
pub use stream::*;
pub use watch::{WatchAnswer, WATCH_HOLD};
