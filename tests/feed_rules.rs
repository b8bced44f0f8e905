//! The chat feed's rules (SPEC §11), on the engine's own machine ([`ChatFeed`]), driven as the
//! Worker's object drives it (`tests/support/feed.rs`). Each rule is named for what it guards
//! against. The seeded schedules of both objects (lost, repeated and late notices, resets of
//! either object, the window overflowed, forgetting) are `tests/feed_simulator.rs`.

#[path = "support/feed.rs"]
mod support_feed;

use rindle_streams::engine::durable::ChatAnswer;
use rindle_streams::engine::feed::{ChatLink, EventId, FeedConfig, FeedNotice, FeedOutput, EVENT_PREFIX, RELOAD};
use rindle_streams::engine::host::time::Millis;
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use serde_json::json;
use support_feed::{ended, kinds, started, user, Object, CHAT, T0};

fn cfg() -> FeedConfig {
    FeedConfig { history_events: 12, history_bytes: 64 * 1024, idle_ms: Millis(60_000), verify_ms: Millis(5_000), max_readers: 100 }
}

#[test]
fn a_turn_is_announced_in_order_user_message_start_end_each_with_an_id() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    o.notice(ended("a1", EndStatus::Complete, 40));
    assert_eq!(kinds(&o.announced), ["user a1", "start a1", "end a1"]);
    let ids: Vec<_> = o.announced.iter().map(|e| EventId::parse(e.id.as_deref().unwrap()).unwrap()).collect();
    assert!(ids.iter().all(|id| id.generation == T0.0));
    assert_eq!(ids.iter().map(|id| id.n).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(o.announced[0].data["message"], user("u1", "question"));
    assert_eq!(o.announced[1].data, json!({"type": "start", "streamId": "a1", "messageId": "a1", "format": "ui"}));
    assert_eq!(o.announced[2].data, json!({"type": "end", "streamId": "a1", "status": "complete", "durableSeq": 40}));
}

/// A stream object retries a notice whose answer it lost: the second must change nothing.
#[test]
fn a_notice_told_twice_is_announced_once() {
    let mut o = Object::with(cfg());
    for _ in 0..2 {
        o.notice(started("a1", Some("u1")));
    }
    for _ in 0..2 {
        o.notice(ended("a1", EndStatus::Complete, 40));
    }
    assert_eq!(kinds(&o.announced), ["user a1", "start a1", "end a1"]);
}

/// Every answer a reader sees has a start: an end whose start was never told brings one.
#[test]
fn an_end_without_a_start_announces_the_start_first() {
    let mut o = Object::with(cfg());
    o.notice(ended("a1", EndStatus::Interrupted, 7));
    assert_eq!(kinds(&o.announced), ["start a1", "end a1"]);
    assert_eq!(o.announced[0].data["format"], "ui");
}

#[test]
fn a_new_reader_gets_the_history_then_ready_whose_id_is_the_head() {
    let mut o = Object::with(cfg());
    assert_eq!(kinds(&o.subscribe(None)), ["ready"], "an unknown chat is an empty feed, as any other");
    o.notice(started("a1", Some("u1")));
    let replay = o.subscribe(None);
    assert_eq!(kinds(&replay), ["user a1", "start a1", "ready"]);
    assert_eq!(replay[2].id.as_deref(), Some(format!("{}-2", T0.0).as_str()));
    assert_eq!(replay[..2], o.announced[..], "the replay is what live readers got, ids and all");
}

#[test]
fn a_reconnect_gets_exactly_the_events_after_its_last_event_id() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    o.notice(ended("a1", EndStatus::Complete, 4));
    o.notice(started("a2", Some("u2")));
    let all = o.announced.clone();
    for (i, seen) in all.iter().enumerate() {
        let replay = o.subscribe(seen.id.as_deref());
        assert_eq!(replay[..replay.len() - 1], all[i + 1..], "after {:?}", seen.id);
        assert_eq!(kinds(&replay).last().unwrap(), "ready");
    }
    let head = o.subscribe(None).pop().unwrap().id;
    assert_eq!(kinds(&o.subscribe(head.as_deref())), ["ready"], "caught up");
    assert_eq!(o.subscribe(Some(" ")), o.subscribe(None), "an empty Last-Event-ID is none");
}

#[test]
fn a_position_the_history_cannot_continue_from_is_told_to_reload_and_gets_the_history() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    let whole = o.subscribe(None);
    let gen = T0.0;
    for after in [format!("{}-1", gen + 1), format!("{gen}-9"), "junk".into(), "12".into(), format!("{gen}--1"), format!("+{gen}-1")] {
        let replay = o.subscribe(Some(&after));
        assert_eq!(kinds(&replay)[0], "reload", "{after}");
        assert_eq!(replay[1..], whole[..], "{after}: then the whole history");
    }
    assert!(o.feed().subscribe(Some("junk")).starts_with(RELOAD));
}

/// The history is bounded: the oldest events go (their keys deleted), and a reader whose last
/// event went with them is told to reload rather than given a gap.
#[test]
fn the_history_is_bounded_and_a_reader_behind_it_reloads() {
    let mut o = Object::with(cfg());
    for i in 0..10 {
        let stream = format!("a{i}");
        o.notice(started(&stream, Some(&format!("u{i}"))));
        o.notice(ended(&stream, EndStatus::Complete, 1));
    }
    let replay = o.subscribe(None);
    assert_eq!(replay.len(), cfg().history_events + 1, "the history, then ready");
    assert_eq!(o.storage.keys().filter(|k| k.starts_with(EVENT_PREFIX)).count(), cfg().history_events, "dropped events are deleted");
    let first_kept = EventId::parse(replay[0].id.as_deref().unwrap()).unwrap();
    let just_before = EventId { n: first_kept.n - 1, ..first_kept }.to_string();
    assert_eq!(kinds(&o.subscribe(Some(&just_before)))[0], "user a6", "missed nothing: continues");
    let gone = EventId { n: first_kept.n - 2, ..first_kept }.to_string();
    assert_eq!(kinds(&o.subscribe(Some(&gone)))[0], "reload", "its next event was dropped");
}

#[test]
fn the_history_is_bounded_in_bytes_too_and_keeps_the_newest_event() {
    let mut o = Object::with(cfg());
    let big = "x".repeat(40 * 1024);
    for i in 0..3 {
        let link = ChatLink::parse(json!({"id": CHAT, "userMessage": user(&format!("u{i}"), &big)})).unwrap();
        o.notice(FeedNotice::started(&link, &format!("a{i}"), Format::Ui));
    }
    let kept = o.subscribe(None);
    assert_eq!(kinds(&kept), ["start a1", "user a2", "start a2", "ready"], "64 KiB holds one big message");
}

/// A reset loses the instance, not the history: the ids go on where they were, and a reader
/// reconnecting to the new instance misses nothing and sees nothing twice.
#[test]
fn a_reset_object_loads_its_history_and_ids_from_storage() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    let before = o.subscribe(None);
    let mid = o.announced[0].id.clone();
    o.reset();
    o.now = o.now + Millis(5);
    assert_eq!(o.subscribe(None), before, "the same history, the same ids");
    o.notice(ended("a1", EndStatus::Complete, 9));
    assert_eq!(o.announced.last().unwrap().id.as_deref(), Some(format!("{}-3", T0.0).as_str()), "numbering goes on");
    assert_eq!(kinds(&o.subscribe(mid.as_deref())), ["start a1", "end a1", "ready"]);
}

/// The table is the truth: an answer whose end was never told is ended from its row; one
/// streaming that the feed never heard of is announced; one whose row is gone ends empty.
#[test]
fn a_loaded_feed_rebuilds_what_it_missed_from_the_message_table() {
    let mut o = Object::with(cfg());
    o.table.insert("a1".into(), ("streaming".into(), 0));
    o.notice(started("a1", Some("u1")));
    o.notice(started("a3", None));
    // a1's seal and its notice were lost with the object; a2 started while nobody told the
    // feed; a3's row was deleted by the app.
    o.table.insert("a1".into(), ("cancelled".into(), 12));
    o.table.insert("a2".into(), ("streaming".into(), 3));
    o.table.insert("old".into(), ("complete".into(), 3));
    o.reset();
    o.feed();
    o.answer_rows();
    assert_eq!(kinds(&o.announced), ["user a1", "start a1", "start a3", "end a1", "end a3"], "a2's notice may be on its way");
    assert_eq!(o.announced[3].data, json!({"type": "end", "streamId": "a1", "status": "cancelled", "durableSeq": 12}));
    assert_eq!(o.announced[4].data, json!({"type": "end", "streamId": "a3", "status": "interrupted", "durableSeq": 0}));
    o.tick(cfg().verify_ms);
    assert_eq!(o.announced[5].data, json!({"type": "start", "streamId": "a2", "messageId": "a2"}), "no format: the row does not say");
    // Later, a2's start notice arrives after all, with its user message: never after its start.
    o.notice(started("a2", Some("u2")));
    assert_eq!(kinds(&o.announced).last().unwrap(), "start a2", "nothing more");
}

/// While an answer is believed in flight its row is read every `verify_ms`, so an end that was
/// never told (the object gone for good) still reaches the readers.
#[test]
fn an_answer_in_flight_is_checked_against_its_row_until_it_ends() {
    let mut o = Object::with(cfg());
    o.feed();
    o.answer_rows();
    o.table.insert("a1".into(), ("streaming".into(), 0));
    o.notice(started("a1", None));
    assert_eq!(o.feed().poll_timeout(), Some(o.now + cfg().verify_ms));
    o.tick(cfg().verify_ms);
    assert_eq!(kinds(&o.announced), ["start a1"], "still streaming: nothing to add");
    o.rows_fail = true;
    o.table.insert("a1".into(), ("interrupted".into(), 5));
    o.tick(cfg().verify_ms);
    assert_eq!(kinds(&o.announced), ["start a1"], "a failed read decides nothing");
    o.rows_fail = false;
    o.tick(cfg().verify_ms);
    assert_eq!(kinds(&o.announced), ["start a1", "end a1"]);
    assert_eq!(o.feed().poll_timeout(), Some(o.now + cfg().idle_ms), "nothing in flight: only the idle deadline");
}

/// A notice that ends the answer while its row is being read must not end it twice.
#[test]
fn an_end_told_while_the_rows_are_read_is_not_ended_again_by_them() {
    let mut o = Object::with(cfg());
    o.feed();
    o.answer_rows();
    o.notice(started("a1", None));
    o.table.insert("a1".into(), ("complete".into(), 5));
    o.now = o.now + cfg().verify_ms;
    let now = o.now;
    let feed = o.feed.as_mut().unwrap();
    feed.handle_timeout(now);
    let Some(FeedOutput::Verify { open, .. }) = feed.poll_output() else { panic!("a verification") };
    assert_eq!(open, ["a1"]);
    feed.handle_notice(ended("a1", EndStatus::Complete, 5), now);
    feed.handle_rows(Ok(vec![ChatAnswer { id: "a1".into(), status: "complete".into(), seq: Offset(5) }]), now);
    o.drain();
    assert_eq!(kinds(&o.announced), ["start a1", "end a1"]);
}

/// Nothing in the feed outlives its usefulness: idle, the history and its keys go, and the next
/// turn begins a new generation, so an old position is told to reload.
#[test]
fn an_idle_feed_forgets_everything_and_starts_a_new_generation() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    o.tick(cfg().idle_ms);
    assert_eq!(o.forgets, 0, "never while an answer is in flight");
    o.notice(ended("a1", EndStatus::Complete, 3));
    let old = o.announced.last().unwrap().id.clone();
    o.tick(Millis(cfg().idle_ms.0 - 1));
    assert_eq!(o.forgets, 0);
    o.tick(Millis(1));
    assert_eq!(o.forgets, 1);
    assert!(o.storage.is_empty(), "nothing kept");
    assert_eq!(o.feed().poll_timeout(), None, "and nothing to wake for");
    o.notice(started("a2", None));
    let id = EventId::parse(o.announced.last().unwrap().id.as_deref().unwrap()).unwrap();
    assert!(id.generation > T0.0 && id.n == 1, "{id}");
    assert_eq!(kinds(&o.subscribe(old.as_deref())), ["reload", "start a2", "ready"]);
}

/// The idle deadline counts from the last event's stored time, however often the object was
/// evicted meanwhile: a fresh instance does not start the clock again.
#[test]
fn an_idle_feed_reset_during_its_idle_period_forgets_on_time() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    o.notice(ended("a1", EndStatus::Complete, 3));
    let deadline = o.now + cfg().idle_ms;
    for _ in 0..4 {
        o.tick(Millis(cfg().idle_ms.0 / 5));
        o.reset(); // evicted: the next wake is a fresh instance
        o.feed();
        o.answer_rows();
        assert_eq!(o.feed().poll_timeout(), Some(deadline), "the deadline stays where the last event put it");
    }
    o.tick(Millis(deadline.0 - o.now.0));
    assert_eq!(o.forgets, 1, "forgot at the deadline");
    assert!(o.storage.is_empty());
}

/// A fresh instance woken past the idle deadline (its alarm) forgets at once, without asking the
/// table; after forgetting it holds nothing, sets no alarm and reads nothing until a notice or a
/// reader comes.
#[test]
fn a_feed_woken_past_its_idle_deadline_forgets_without_reading_and_then_stays_asleep() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    o.notice(ended("a1", EndStatus::Complete, 3));
    o.answer_rows();
    o.reset();
    o.now = o.now + cfg().idle_ms + Millis(1);
    let reads = o.row_reads;
    o.feed();
    o.answer_rows();
    assert_eq!(o.forgets, 1);
    assert_eq!(o.row_reads, reads, "nothing to check: the history is forgotten");
    assert!(o.storage.is_empty());
    assert_eq!(o.feed().poll_timeout(), None, "no alarm");
    o.tick(Millis(10 * cfg().verify_ms.0));
    assert_eq!(o.row_reads, reads, "and no read while idle");
}

/// A `delete_all` that failed leaves the old history's keys behind: the next generation must
/// never read them as its own.
#[test]
fn a_failed_forget_leaves_nothing_the_next_generation_reads_as_its_own() {
    let mut o = Object::with(cfg());
    for i in 0..3 {
        o.notice(started(&format!("a{i}"), Some(&format!("u{i}"))));
        o.notice(ended(&format!("a{i}"), EndStatus::Complete, 3));
    }
    o.answer_rows();
    o.forget_fails = true;
    o.tick(cfg().idle_ms);
    assert_eq!(o.forgets, 1);
    o.notice(started("b1", None));
    o.reset();
    assert_eq!(kinds(&o.subscribe(None)), ["start b1", "ready"], "only the new generation's events");
}

/// A rebuild from the table never announces a `user` after its `start`: an answer streaming
/// that the feed never heard of waits one check for its notice (it is on its way: the stream's
/// object keeps it until confirmed), and is announced from its row only if none came.
#[test]
fn the_rebuild_from_the_table_keeps_user_before_start() {
    let mut o = Object::with(cfg());
    o.table.insert("a1".into(), ("streaming".into(), 0));
    o.feed();
    o.answer_rows();
    o.notice(started("a1", Some("u1")));
    assert_eq!(kinds(&o.announced), ["user a1", "start a1"]);
    // No notice ever comes for a2: announced from its row at the next check.
    o.table.insert("a2".into(), ("streaming".into(), 0));
    o.reset();
    o.feed();
    o.answer_rows();
    assert_eq!(kinds(&o.announced), ["user a1", "start a1"], "a2 is waited for");
    o.tick(cfg().verify_ms);
    assert_eq!(kinds(&o.announced), ["user a1", "start a1", "start a2"]);
    // Its notice comes after all: a user message after its start is never announced.
    o.notice(started("a2", Some("u2")));
    assert_eq!(kinds(&o.announced), ["user a1", "start a1", "start a2"]);
}

/// Concurrent answers push a start out of the bounded history while its answer is in flight:
/// the feed still knows it started (no second start for its end or a retried notice), still
/// checks its row, and never forgets while it is in flight, across a reset too.
#[test]
fn an_answer_whose_start_left_the_history_is_still_known_and_in_flight() {
    let mut o = Object::with(cfg());
    o.table.insert("long".into(), ("streaming".into(), 0));
    o.notice(started("long", Some("u0")));
    for i in 0..cfg().history_events {
        o.notice(started(&format!("a{i}"), None));
        o.notice(ended(&format!("a{i}"), EndStatus::Complete, 1));
    }
    assert!(o.subscribe(None).iter().all(|e| e.data["streamId"] != "long"), "its start left the history");
    for reset in [false, true] {
        if reset {
            o.reset();
            o.feed();
            o.answer_rows();
        }
        assert_eq!(o.feed().in_flight(), ["long"], "reset: {reset}");
        o.notice(started("long", Some("u0")));
        assert!(o.announced.iter().filter(|e| e.data["streamId"] == "long").count() == 2, "no second user or start (reset: {reset})");
    }
    o.tick(cfg().idle_ms);
    assert_eq!(o.forgets, 0, "in flight: never forgotten");
    o.notice(ended("long", EndStatus::Complete, 9));
    o.notice(ended("long", EndStatus::Complete, 9));
    let long: Vec<_> = kinds(&o.announced).into_iter().filter(|k| k.ends_with(" long")).collect();
    assert_eq!(long, ["user long", "start long", "end long"]);
    // Its end leaves the history too; a late retry of it still changes nothing, after a reset too.
    for i in 0..cfg().history_events {
        o.notice(ended(&format!("b{i}"), EndStatus::Complete, 1));
    }
    o.reset();
    o.notice(ended("long", EndStatus::Complete, 9));
    o.notice(started("long", Some("u0")));
    assert_eq!(kinds(&o.announced).into_iter().filter(|k| k.ends_with(" long")).count(), 3);
}

/// One replay is encoded once: readers joining at the same position while the history stays as
/// it is share its bytes (250 tabs of a full history held 250 copies of it before).
#[test]
fn readers_joining_at_one_position_share_one_replay() {
    let mut o = Object::with(cfg());
    o.notice(started("a1", Some("u1")));
    let feed = o.feed();
    let (a, b) = (feed.subscribe(None), feed.subscribe(None));
    assert!(std::rc::Rc::ptr_eq(&a, &b), "one encoding for both");
    let head = feed.head().to_string();
    assert!(std::rc::Rc::ptr_eq(&feed.subscribe(Some(&head)), &feed.subscribe(Some(&head))));
    o.notice(ended("a1", EndStatus::Complete, 1));
    let c = o.feed().subscribe(None);
    assert!(!std::rc::Rc::ptr_eq(&a, &c), "the history changed: a new replay");
    assert_eq!(kinds(&support_feed::parse_sse(&c)), ["user a1", "start a1", "end a1", "ready"]);
}
