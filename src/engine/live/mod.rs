//! The live plane: one stream's buffer, readers and checkpoint driver, as a sans-IO state
//! machine.
//!
//! The shell feeds inputs (`push`, `flush`, `close`, `subscribe`, [`LiveStream::handle_store`],
//! [`LiveStream::handle_lease_armed`], [`LiveStream::handle_timeout`]), each with the current
//! time, then drains [`LiveStream::poll_output`] until it returns `None` and arms a timer for
//! [`LiveStream::poll_timeout`]. It performs the outputs (store operations, the lease's arming
//! and renewals, reader wakes, settled requests, notices) only after it has stopped borrowing
//! the machine. When the lease alarm fires, [`lease::decide`] says what to do.
//!
//! - `stream`: the phases (opening, live, sealing, ended) and the reader side;
//! - `open`: the open handshake (probe, arm the lease, mark, read the host);
//! - `checkpoint`: when a checkpoint round is due and one round's protocol;
//! - `lease`: the lease alarm's decision;
//! - `resume`: rehydration, the producer's resume and fence, the resume window, parked readers;
//! - `readers`: bounded queues, dialects, pacing, merging;
//! - `outbox`: where outputs wait for the shell;
//! - `slot`: the stream an object holds, and the detaches that wait while it is borrowed.

mod checkpoint;
pub mod lease;
mod open;
mod outbox;
mod readers;
mod resume;
mod slot;
mod stream;

pub use open::Producer;
pub use readers::{Dialect, DropReason, Pull, ReaderId, SharedFrame, Wire};
pub use resume::{window_expired_error, Fenced, Rehydration, ResumeGrant, ResumeRefused, FIRST_EPOCH};
pub use slot::StreamSlot;
pub use stream::*;
