//! Which chat an answer belongs to, remembered by the front Worker between requests.
//!
//! A read made for a chat (`?chat=`) is allowed only for an answer of that chat, which the
//! message row says. The front Worker cannot keep a database connection from one request to the
//! next (the runtime binds a socket to the request that opened it), so without a memory every
//! such read would open a connection to ask. A chat's page asks about the same few answers again
//! and again (each reconnect of its reader, each resume GET), and an answer's chat does not
//! change once its row is written, so a membership once read is remembered: the next read of
//! that answer for that chat opens nothing. Only what the row said yes to is remembered (a
//! refusal is asked again: the row may not be written yet), for [`MEMBERSHIP_TTL_MS`] at most
//! (an id the app deletes and writes again in another chat is trusted no longer than that), and
//! for at most [`MEMBERSHIPS`] answers, the least recently used going first.

use crate::engine::host::time::Timestamp;
use std::collections::VecDeque;

/// How many answers' chats are remembered, per isolate.
pub const MEMBERSHIPS: usize = 1024;

/// How long a membership is trusted once read (5 minutes: longer than a chat page's reconnects
/// and resumes of one answer take, short against an app reusing a deleted message's id).
pub const MEMBERSHIP_TTL_MS: u64 = 5 * 60 * 1000;

/// The chats of answers, as their rows said (see the module's documentation).
#[derive(Debug, Default)]
pub struct ChatMemberships {
    /// `(stream id, chat id, when the row said so)`, the least recently used first.
    known: VecDeque<(String, String, Timestamp)>,
}

impl ChatMemberships {
    /// Whether the row of `stream_id` was read to belong to `chat_id` within the last
    /// [`MEMBERSHIP_TTL_MS`]. A hit becomes the most recently used; an expired entry is dropped.
    pub fn knows(&mut self, stream_id: &str, chat_id: &str, now: Timestamp) -> bool {
        let Some(at) = self.known.iter().position(|(s, _, _)| s == stream_id) else { return false };
        let (stream, chat, read_at) = self.known.remove(at).expect("the position was just found");
        if now.0.saturating_sub(read_at.0) >= MEMBERSHIP_TTL_MS {
            return false;
        }
        let hit = chat == chat_id;
        self.known.push_back((stream, chat, read_at));
        hit
    }

    /// The row of `stream_id` was just read to belong to `chat_id`.
    pub fn remember(&mut self, stream_id: &str, chat_id: &str, now: Timestamp) {
        self.known.retain(|(s, _, _)| s != stream_id);
        if self.known.len() == MEMBERSHIPS {
            self.known.pop_front();
        }
        self.known.push_back((stream_id.to_owned(), chat_id.to_owned(), now));
    }

    /// How many answers are remembered.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_000_000);

    #[test]
    fn a_membership_read_once_is_known_for_that_chat_only() {
        let mut m = ChatMemberships::default();
        assert!(!m.knows("a1", "c1", T0), "nothing is known before a read");
        m.remember("a1", "c1", T0);
        assert!(m.knows("a1", "c1", Timestamp(T0.0 + 1)));
        assert!(!m.knows("a1", "c2", Timestamp(T0.0 + 2)), "another chat is asked of the row");
        assert!(m.knows("a1", "c1", Timestamp(T0.0 + 3)), "a miss for another chat forgets nothing");
        assert!(!m.knows("a2", "c1", T0), "another answer is asked of its row");
    }

    #[test]
    fn a_membership_is_trusted_for_the_ttl_and_then_read_again() {
        let mut m = ChatMemberships::default();
        m.remember("a1", "c1", T0);
        assert!(m.knows("a1", "c1", Timestamp(T0.0 + MEMBERSHIP_TTL_MS - 1)));
        assert!(!m.knows("a1", "c1", Timestamp(T0.0 + MEMBERSHIP_TTL_MS)), "expired at the TTL");
        assert!(m.is_empty(), "an expired membership is dropped");
        m.remember("a1", "c2", Timestamp(T0.0 + MEMBERSHIP_TTL_MS));
        assert!(m.knows("a1", "c2", Timestamp(T0.0 + MEMBERSHIP_TTL_MS + 1)), "read again, it is what the row says now");
        assert_eq!(m.len(), 1, "one entry per answer");
    }

    #[test]
    fn the_memberships_are_bounded_and_the_least_recently_used_goes_first() {
        let mut m = ChatMemberships::default();
        for i in 0..MEMBERSHIPS {
            m.remember(&format!("a{i}"), "c", T0);
        }
        assert!(m.knows("a0", "c", T0), "used again: now the most recent");
        m.remember("one-more", "c", T0);
        assert_eq!(m.len(), MEMBERSHIPS);
        assert!(!m.knows("a1", "c", T0), "the least recently used went");
        assert!(m.knows("a0", "c", T0) && m.knows("one-more", "c", T0) && m.knows(&format!("a{}", MEMBERSHIPS - 1), "c", T0));
    }
}
