//! The producer's watch (`GET /watch`): what a producer must hear at once even while it sends
//! nothing, or while its streaming append cannot be answered (a client's fetch may not read an
//! answer before it has sent its whole request body): a reader's cancel, and the stream's end.
//! The shell holds the request until [`LiveStream::watch`] says to answer, or until
//! [`WATCH_HOLD`] has passed, when it answers [`LiveStream::watch_held`] and the producer asks
//! again.

use super::{LiveStream, StreamState};
use crate::engine::host::time::Millis;
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::EndStatus;

/// How long a watch is held while nothing happens. Below the idle timeouts of the proxies
/// between a producer and the Worker (Cloudflare's own is 100 s), so a held watch is never cut
/// for silence.
pub const WATCH_HOLD: Millis = Millis(20_000);

/// A watch's answer: `{status, cancelled, seq, durableSeq}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchAnswer {
    /// The stream's end, or `None` while it streams.
    pub status: Option<EndStatus>,
    /// A reader cancelled it: the producer stops its model.
    pub cancelled: bool,
    pub seq: Offset,
    pub durable_seq: Offset,
}

impl WatchAnswer {
    /// The answer of a watch that finds no stream held here (a fresh instance with nothing to
    /// rebuild, or one that retired it after its linger): how the row ended, or `None` when it
    /// has not (nothing streams here: the producer learns why at its next write).
    pub fn of_row(row: &DurableText) -> Option<Self> {
        let status = EndStatus::parse(&row.status)?;
        Some(Self { status: Some(status), cancelled: status == EndStatus::Cancelled, seq: row.seq, durable_seq: row.seq })
    }

    /// The status as the API names it (`streaming` until the end).
    pub fn status_str(&self) -> &'static str {
        self.status.map_or(crate::engine::wire::frame::STATUS_STREAMING, EndStatus::as_str)
    }
}

impl LiveStream {
    /// What a watch answers now, or `None`: hold it (nothing the producer must hear yet).
    pub fn watch(&self) -> Option<WatchAnswer> {
        Some(self.watch_held()).filter(|a| a.cancelled || a.status.is_some())
    }

    /// The answer of a watch held for [`WATCH_HOLD`] (or answered now).
    pub fn watch_held(&self) -> WatchAnswer {
        let status = match self.state() {
            StreamState::Ended(status) => Some(status),
            StreamState::Opening | StreamState::Live | StreamState::Sealing | StreamState::Retired => None,
        };
        WatchAnswer {
            status,
            cancelled: self.cancelled() || status == Some(EndStatus::Cancelled),
            seq: self.seq(),
            durable_seq: self.durable_seq(),
        }
    }
}
