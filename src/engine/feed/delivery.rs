//! A stream's notices to its chat's feed (SPEC §11), as the stream's object keeps and sends them:
//! what to send, in which order, when to try again, which answers are final, and when they are
//! all confirmed (the lease is released only then). A sans-IO machine: the stream's shell and the
//! feed's simulator (`tests/feed_simulator.rs`) drive it alike.
//!
//! ```text
//!   opened ─▶ Started ┐                    2xx ─▶ confirmed
//!   sealed ─▶ Ended   ├─▶ Send (one at a time, ─▶ 408 / 429 / 5xx / no answer ─▶ again after
//!   revived (stored)  ┘    Started first)        100, 400, 1600, 6400 ms, then at each lease alarm
//!                                            ─▶ another 4xx ─▶ refused: final, logged
//! ```
//!
//! **Nothing is lost between the objects.** The open stores what the Started notice needs with
//! the lease's keys, before the row is marked (the chat, the user's message): a fresh instance's
//! revival, or its lease alarm, sends it again from there, and the Ended notice from the row when
//! the row has ended. The lease is not released (its keys, its alarm) while a notice is
//! unconfirmed. A notice the feed already has changes nothing there, so re-sending one whose
//! confirmation was lost costs a request, never a doubled turn. Once the end is confirmed, the
//! keys they are sent again from are deleted: the feed may forget the turn later, and must not
//! hear of it again.

use super::notice::FeedNotice;
use crate::engine::host::object_storage::StoredStream;
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::live::lease::{AlarmOutput, Renewal};
use crate::engine::text::reading::DurableText;
use crate::engine::wire::frame::{EndStatus, STATUS_STREAMING};
use std::collections::VecDeque;

/// The delays before a failed notice is sent again while the object is awake; after the last,
/// it waits for the lease alarm ([`Notices::retry_now`]).
pub const RETRY_DELAYS: [Millis; 4] = [Millis(100), Millis(400), Millis(1_600), Millis(6_400)];

/// Which of a stream's two notices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeKind {
    Started,
    Ended,
}

/// How one attempt to deliver a notice went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The feed stored it (a 2xx).
    Stored,
    /// The feed refused it for good (a 4xx other than 408 and 429): it will not change.
    Refused(u16),
    /// Worth another try: a 408, 429 or 5xx, a network error, no answer in time.
    Failed(String),
}

impl Delivery {
    /// The verdict of an HTTP status from the feed's object.
    pub fn of_status(status: u16) -> Self {
        match status {
            200..=299 => Delivery::Stored,
            408 | 429 => Delivery::Failed(format!("status {status}")),
            400..=499 => Delivery::Refused(status),
            _ => Delivery::Failed(format!("status {status}")),
        }
    }
}

/// What the machine asks its shell to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoticeOutput {
    /// Post this notice to its chat's feed object; answer with [`Notices::handle_delivery`].
    Send { kind: NoticeKind, notice: FeedNotice },
    /// The feed refused a notice for good: worth a log line.
    Refused { kind: NoticeKind, notice: FeedNotice, status: u16 },
    /// The end is told: forget the keys a fresh instance would send the notices again from
    /// ([`KeyUpdate::told`](crate::engine::host::object_storage::KeyUpdate::told)). Sent again
    /// after the feed forgot its history, they would announce the turn a second time. (The release
    /// deletes them anyway: this deletes them sooner, at no more rows written.)
    Told,
}

#[derive(Debug, Clone)]
struct Pending {
    kind: NoticeKind,
    notice: FeedNotice,
    /// Failed attempts since the last send the alarm asked for.
    failures: usize,
    /// When to send it again; `None` while it is out, or once the delays ran out.
    retry_at: Option<Timestamp>,
    out: bool,
}

/// One stream's notices (see the module docs).
#[derive(Debug, Default)]
pub struct Notices {
    /// Unconfirmed, in the order they must reach the feed (Started before Ended).
    pending: VecDeque<Pending>,
    /// Confirmed (or refused) by this instance: a revival does not send them again.
    done: Vec<NoticeKind>,
    out: VecDeque<NoticeOutput>,
}

impl Notices {
    // ---- getters

    /// Every notice is confirmed (or refused): the lease may be released.
    pub fn settled(&self) -> bool {
        self.pending.is_empty()
    }

    // ---- inputs

    /// The open that named a chat settled: the answer started.
    pub fn opened(&mut self, started: FeedNotice, now: Timestamp) {
        self.queue(NoticeKind::Started, started, now);
    }

    /// The stream was sealed: the answer ended.
    pub fn sealed(&mut self, ended: FeedNotice, now: Timestamp) {
        self.queue(NoticeKind::Ended, ended, now);
    }

    /// A fresh instance read the object's keys (a revival, the lease alarm) and, when it got that
    /// far, the row: what this object may not have told its chat yet is sent again. The start,
    /// whenever the open stored a chat; the end, when the row has ended (a seal's notice lost
    /// with the instance). A notice already queued here is not queued twice.
    pub fn revived(&mut self, keys: &StoredStream, row: Option<&DurableText>, now: Timestamp) {
        let (Some(stream_id), Some(chat_id), Some(row)) = (&keys.stream_id, &keys.chat, row) else { return };
        // A row not marked yet (or gone): the open never completed; nothing started.
        let ended = EndStatus::parse(&row.status);
        if ended.is_none() && row.status != STATUS_STREAMING {
            return;
        }
        let format = keys.format.unwrap_or_default();
        let started = FeedNotice::Started {
            chat_id: chat_id.clone(),
            stream_id: stream_id.clone(),
            message_id: stream_id.clone(),
            format: format.as_str().to_owned(),
            user_message: keys.user_message.clone(),
        };
        self.queue(NoticeKind::Started, started, now);
        if let Some(status) = ended {
            self.queue(NoticeKind::Ended, FeedNotice::ended(chat_id, stream_id, Some(format), status, row.seq), now);
        }
    }

    /// How the delivery of the notice `kind` went.
    pub fn handle_delivery(&mut self, kind: NoticeKind, delivery: Delivery, now: Timestamp) {
        let Some(i) = self.pending.iter().position(|p| p.kind == kind && p.out) else { return };
        match delivery {
            Delivery::Stored => {
                self.pending.remove(i);
                self.done.push(kind);
                if kind == NoticeKind::Ended {
                    self.out.push_back(NoticeOutput::Told);
                }
            }
            Delivery::Refused(status) => {
                if let Some(p) = self.pending.remove(i) {
                    self.done.push(kind);
                    self.out.push_back(NoticeOutput::Refused { kind, notice: p.notice, status });
                }
            }
            Delivery::Failed(_) => {
                let p = &mut self.pending[i];
                p.out = false;
                p.retry_at = RETRY_DELAYS.get(p.failures).map(|d| now + *d);
                p.failures += 1;
            }
        }
        self.send_next(now);
    }

    /// The lease alarm's last word, once the notices had theirs: a release (its keys and its
    /// alarm forgotten) waits while a notice is unconfirmed, since a fresh instance would send it
    /// again from those keys. They are sent again now, and the lease is renewed.
    pub fn before_release(&mut self, last: AlarmOutput, now: Timestamp) -> AlarmOutput {
        match last {
            AlarmOutput::Release(_) if !self.settled() => {
                self.retry_now(now);
                AlarmOutput::Renew(Renewal::NoticesUnconfirmed)
            }
            other => other,
        }
    }

    /// The lease alarm fired, or the live stream renewed its lease: every notice not confirmed
    /// is sent again now, its delays afresh.
    pub fn retry_now(&mut self, now: Timestamp) {
        for p in self.pending.iter_mut().filter(|p| !p.out) {
            p.failures = 0;
            p.retry_at = Some(now);
        }
        self.send_next(now);
    }

    /// The time given by [`Notices::poll_timeout`] came.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.send_next(now);
    }

    // ---- outputs

    pub fn poll_output(&mut self) -> Option<NoticeOutput> {
        self.out.pop_front()
    }

    /// When a notice is next due to be sent again while the object is awake (`None`: nothing to
    /// wait for, or only the lease alarm).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match self.pending.front() {
            Some(p) if !p.out => p.retry_at,
            _ => None,
        }
    }

    // ---- the rules

    fn queue(&mut self, kind: NoticeKind, notice: FeedNotice, now: Timestamp) {
        if self.done.contains(&kind) {
            return;
        }
        if let Some(p) = self.pending.iter_mut().find(|p| p.kind == kind) {
            // The same notice again (a revival's): keep the one queued; an Ended with the row's
            // final word replaces an earlier one not sent yet.
            if !p.out && kind == NoticeKind::Ended {
                p.notice = notice;
            }
            return;
        }
        let pending = Pending { kind, notice, failures: 0, retry_at: Some(now), out: false };
        // Started goes first, whenever it was queued.
        match kind {
            NoticeKind::Started => {
                let at = self.pending.iter().position(|p| !p.out).unwrap_or(self.pending.len());
                self.pending.insert(at, pending);
            }
            NoticeKind::Ended => self.pending.push_back(pending),
        }
        self.send_next(now);
    }

    /// Sends the first unconfirmed notice when it is due and nothing is out: one at a time, in
    /// order, so the feed hears a start before its end.
    fn send_next(&mut self, now: Timestamp) {
        let Some(first) = self.pending.front_mut() else { return };
        if first.out || first.retry_at.is_none_or(|at| at > now) {
            return;
        }
        first.out = true;
        first.retry_at = None;
        self.out.push_back(NoticeOutput::Send { kind: first.kind, notice: first.notice.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::feed::ChatLink;
    use crate::engine::text::utf16::Offset;
    use crate::engine::wire::ui::Format;
    use serde_json::json;

    const T: Timestamp = Timestamp(1_000_000);

    fn started() -> FeedNotice {
        let link =
            ChatLink::parse(json!({"id": "c", "userMessage": {"id": "u", "role": "user", "parts": [{"type": "text", "text": "q"}]}}));
        FeedNotice::started(&link.unwrap(), "a", Format::Ui)
    }

    fn ended() -> FeedNotice {
        FeedNotice::ended("c", "a", Some(Format::Ui), EndStatus::Complete, Offset(5))
    }

    fn sends(n: &mut Notices) -> Vec<NoticeKind> {
        std::iter::from_fn(|| n.poll_output())
            .filter_map(|o| match o {
                NoticeOutput::Send { kind, .. } => Some(kind),
                NoticeOutput::Refused { .. } | NoticeOutput::Told => None,
            })
            .collect()
    }

    #[test]
    fn notices_go_one_at_a_time_started_first_and_settle_once_stored() {
        let mut n = Notices::default();
        n.sealed(ended(), T);
        n.opened(started(), T);
        assert_eq!(sends(&mut n), [NoticeKind::Ended], "the first queued goes at once");
        // An Ended out before its Started (a seal seen first): the Started still goes before
        // anything else that waits.
        n.handle_delivery(NoticeKind::Ended, Delivery::Stored, T);
        assert_eq!(sends(&mut n), [NoticeKind::Started]);
        assert!(!n.settled());
        n.handle_delivery(NoticeKind::Started, Delivery::Stored, T);
        assert!(n.settled());

        let mut n = Notices::default();
        n.opened(started(), T);
        n.sealed(ended(), T);
        assert_eq!(sends(&mut n), [NoticeKind::Started], "the end waits for its start");
        n.handle_delivery(NoticeKind::Started, Delivery::Stored, T);
        assert_eq!(sends(&mut n), [NoticeKind::Ended]);
    }

    #[test]
    fn a_failed_notice_is_sent_again_after_each_delay_then_at_the_lease_alarm() {
        let mut n = Notices::default();
        n.opened(started(), T);
        assert_eq!(sends(&mut n).len(), 1);
        let mut now = T;
        for delay in RETRY_DELAYS {
            n.handle_delivery(NoticeKind::Started, Delivery::Failed("503".into()), now);
            assert_eq!(n.poll_timeout(), Some(now + delay));
            now = now + delay;
            n.handle_timeout(now);
            assert_eq!(sends(&mut n), [NoticeKind::Started]);
        }
        n.handle_delivery(NoticeKind::Started, Delivery::Failed("503".into()), now);
        assert_eq!(n.poll_timeout(), None, "no timer keeps the object awake: the lease alarm tries again");
        assert!(!n.settled(), "the lease is kept");
        n.retry_now(now + Millis(10_000));
        assert_eq!(sends(&mut n), [NoticeKind::Started]);
    }

    #[test]
    fn the_lease_is_released_only_once_every_notice_is_confirmed() {
        use crate::engine::live::lease::Release;
        let mut n = Notices::default();
        n.sealed(ended(), T);
        let _ = sends(&mut n);
        let release = AlarmOutput::Release(Release::Sealed);
        assert_eq!(n.before_release(release.clone(), T), AlarmOutput::Renew(Renewal::NoticesUnconfirmed));
        n.handle_delivery(NoticeKind::Ended, Delivery::Stored, T);
        assert_eq!(n.poll_output(), Some(NoticeOutput::Told), "the keys to send it again from go");
        assert_eq!(n.before_release(release.clone(), T), release);
        // Confirmed here: a revival in this instance does not send it again.
        let keys = StoredStream { stream_id: Some("a".into()), chat: Some("c".into()), ..StoredStream::default() };
        n.revived(&keys, Some(&DurableText::assemble("x", Vec::new(), "complete".into())), T);
        assert_eq!(sends(&mut n), [NoticeKind::Started], "only what this instance has not confirmed");
    }

    #[test]
    fn which_answers_are_final() {
        for (status, verdict) in [
            (200, Delivery::Stored),
            (204, Delivery::Stored),
            (400, Delivery::Refused(400)),
            (403, Delivery::Refused(403)),
            (408, Delivery::Failed("status 408".into())),
            (429, Delivery::Failed("status 429".into())),
            (500, Delivery::Failed("status 500".into())),
            (503, Delivery::Failed("status 503".into())),
        ] {
            assert_eq!(Delivery::of_status(status), verdict, "{status}");
        }
        let mut n = Notices::default();
        n.opened(started(), T);
        let _ = sends(&mut n);
        n.handle_delivery(NoticeKind::Started, Delivery::Refused(400), T);
        assert!(matches!(n.poll_output(), Some(NoticeOutput::Refused { status: 400, .. })));
        assert!(n.settled(), "refused for good: nothing to wait for");
    }

    #[test]
    fn a_fresh_instance_sends_the_start_from_its_keys_and_the_end_from_an_ended_row() {
        let keys = StoredStream {
            stream_id: Some("a".into()),
            chat: Some("c".into()),
            format: Some(Format::Ui),
            user_message: match started() {
                FeedNotice::Started { user_message, .. } => user_message,
                FeedNotice::Ended { .. } => None,
            },
            ..StoredStream::default()
        };
        let row = DurableText::assemble("hello", Vec::new(), "complete".into());
        let mut n = Notices::default();
        n.revived(&keys, Some(&row), T);
        let mut got = Vec::new();
        while let Some(output) = n.poll_output() {
            if let NoticeOutput::Send { kind, notice } = output {
                got.push(notice);
                n.handle_delivery(kind, Delivery::Stored, T);
            }
        }
        assert_eq!(got, [started(), ended()]);
        let streaming = DurableText { status: "streaming".into(), ..row.clone() };
        let mut n = Notices::default();
        n.revived(&keys, Some(&streaming), T);
        assert_eq!(sends(&mut n), [NoticeKind::Started]);
        n.handle_delivery(NoticeKind::Started, Delivery::Stored, T);
        assert!(n.settled(), "a stream still streaming has not ended");
        let mut n = Notices::default();
        n.revived(&StoredStream { chat: None, ..keys.clone() }, Some(&row), T);
        assert!(n.settled(), "no chat named at the open: nothing to tell");
        for row in [None, Some(DurableText::assemble("", Vec::new(), "pending".into()))] {
            n.revived(&keys, row.as_ref(), T);
            assert!(n.settled(), "the open never marked the row: nothing started ({row:?})");
        }
    }
}
