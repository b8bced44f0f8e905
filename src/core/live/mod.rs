//! The live plane: one stream's buffer, readers and checkpoint driver, as a sans-IO state
//! machine.
//!
//! The shell feeds inputs (`push`, `flush`, `close`, `subscribe`, [`LiveStream::handle_store`],
//! [`LiveStream::handle_timeout`]), each with the current time, then drains
//! [`LiveStream::poll_output`] until it returns `None` and arms a timer for
//! [`LiveStream::poll_timeout`]. It performs the outputs (store operations, reader wakes,
//! settled requests) only after it has stopped borrowing the machine.

mod checkpoint;
pub mod lease;
mod open;
mod outbox;
mod readers;
mod stream;

pub use open::Producer;
pub use readers::{Dialect, DropReason, Pull, ReaderId};
pub use stream::*;
