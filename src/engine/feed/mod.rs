//! One conversation everywhere (SPEC §11): a chat's feed of turns, so that every tab and device
//! showing a chat learns of a turn started elsewhere, in order, missing none and seeing none
//! twice.
//!
//! ```text
//!   producer ── open {chat: {id, userMessage?}} ──▶ stream object ──Started──┐
//!                                                   (seal: Ended) ───────────┤ notices
//!                                                                            ▼
//!   readers ◀── GET {prefix}/chats/{chat}/events (SSE) ── ChatFeed: history ◀─▶ object storage
//!                                                          ▲
//!                                       the message table ─┘ (rebuilt from it: Verify)
//! ```
//!
//! - `notice`: what a producer names at open (the chat, the user's `UIMessage`, checked) and
//!   what a stream's object tells the feed (started, ended);
//! - `delivery`: a stream's notices as its object keeps and sends them until the feed confirms
//!   them (order, retries, which answers are final, what a fresh instance sends again);
//! - `history`: the feed as a sans-IO machine: numbered events, bounded history, replay from a
//!   reader's `Last-Event-ID`, the rebuild from the table, forgetting when idle.
//!
//! The Worker shell performs it: `src/edge/chat/` (the chat's Durable Object) and the notices a
//! stream's object sends (`src/edge/stream/announce.rs`).

mod delivery;
mod history;
mod notice;

pub use delivery::{Delivery, NoticeKind, NoticeOutput, Notices, RETRY_DELAYS};
pub use history::{
    event_key, stored_chat_id, ChatFeed, EventId, FeedConfig, FeedEvent, FeedOutput, RowsUnread, StorageWrite, StoredFeed, EVENT_PREFIX,
    HEAD_KEY, RELOAD,
};
pub use notice::{BadChat, ChatLink, FeedNotice, UserMessage, MAX_USER_MESSAGE_BYTES};
