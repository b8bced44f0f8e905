//! The chat feed's rules (SPEC §11), on the engine's own machine ([`ChatFeed`]): the object's
//! storage is a map that takes exactly the writes the machine asks for, so a reset is "drop the
//! machine, load it from the map", as the Worker's object does (src/edge/chat/mod.rs). Each rule is
//! named for what it guards against. `feed_resets_and_reconnects_never_miss_or_double_a_turn`
//! runs seeded schedules of notices, lost notices, resets and reconnects (`SIM_SEED=s` replays
//! one; `FEED_SCHEDULES=n` runs more).

use rindle_streams::engine::durable::ChatAnswer;
use rindle_streams::engine::feed::{
    ChatFeed, ChatLink, EventId, FeedConfig, FeedNotice, FeedOutput, RowsUnread, StoredFeed, EVENT_PREFIX, HEAD_KEY, RELOAD,
};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const CHAT: &str = "c1";
const T0: Timestamp = Timestamp(1_700_000_000_000);

fn cfg() -> FeedConfig {
    FeedConfig { history_events: 12, history_bytes: 64 * 1024, idle_ms: Millis(60_000), verify_ms: Millis(5_000) }
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn started(stream: &str, user_id: Option<&str>) -> FeedNotice {
    let link = ChatLink::parse(json!({"id": CHAT, "userMessage": user_id.map(|u| user(u, "question"))})).unwrap();
    FeedNotice::started(&link, stream, Format::Ui)
}

fn ended(stream: &str, status: EndStatus, seq: u64) -> FeedNotice {
    FeedNotice::ended(CHAT, stream, Some(Format::Ui), status, Offset(seq))
}

/// One SSE event as a reader parses it: its `id:` and its JSON.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    id: Option<String>,
    data: Value,
}

fn parse_sse(bytes: &str) -> Vec<Event> {
    bytes
        .split("\n\n")
        .filter(|block| !block.is_empty())
        .filter_map(|block| {
            let mut id = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    assert!(data.is_none(), "one data line per event: {block:?}");
                    data = Some(serde_json::from_str(v).unwrap_or_else(|e| panic!("{e}: {v}")));
                }
            }
            data.map(|data| Event { id, data })
        })
        .collect()
}

/// The object: its storage (a map that takes the machine's writes), the machine, and what it
/// announced, with the table's rows to answer a verification from.
struct Object {
    cfg: FeedConfig,
    storage: BTreeMap<String, String>,
    feed: Option<ChatFeed>,
    announced: Vec<Event>,
    /// The message table: stream id → (status, seq). Absent: no row.
    table: BTreeMap<String, (String, u64)>,
    rows_fail: bool,
    /// Reads of the table asked for and not answered yet (a D1 query takes a while).
    pending_rows: Vec<Vec<String>>,
    now: Timestamp,
    forgets: u32,
}

impl Object {
    fn new() -> Self {
        Self::with(cfg())
    }

    fn with(cfg: FeedConfig) -> Self {
        Self {
            cfg,
            storage: BTreeMap::new(),
            feed: None,
            announced: Vec::new(),
            table: BTreeMap::new(),
            rows_fail: false,
            pending_rows: Vec::new(),
            now: T0,
            forgets: 0,
        }
    }

    /// The machine, loaded from storage as a fresh instance does when it is first needed.
    fn feed(&mut self) -> &mut ChatFeed {
        if self.feed.is_none() {
            let stored = StoredFeed {
                head: self.storage.get(HEAD_KEY).cloned(),
                events: self.storage.iter().filter(|(k, _)| k.starts_with(EVENT_PREFIX)).map(|(k, v)| (k.clone(), v.clone())).collect(),
            };
            self.feed = Some(ChatFeed::load(self.cfg, CHAT, stored, self.now));
            self.drain();
        }
        self.feed.as_mut().unwrap()
    }

    /// A reset: the instance and everything in its memory are gone; storage stays.
    fn reset(&mut self) {
        self.feed = None;
        self.pending_rows.clear();
    }

    fn notice(&mut self, notice: FeedNotice) {
        let now = self.now;
        self.feed().handle_notice(notice, now);
        self.drain();
    }

    fn tick(&mut self, by: Millis) {
        self.now = self.now + by;
        let now = self.now;
        let feed = self.feed();
        if feed.poll_timeout().is_some_and(|at| at <= now) {
            feed.handle_timeout(now);
            self.drain();
        }
        self.answer_rows();
    }

    /// Performs the machine's outputs; a verification is answered at once from the table.
    fn drain(&mut self) {
        loop {
            let Some(output) = self.feed.as_mut().unwrap().poll_output() else { return };
            match output {
                FeedOutput::Persist(write) => {
                    for (k, v) in write.put {
                        self.storage.insert(k, v);
                    }
                    for k in write.delete {
                        assert!(self.storage.remove(&k).is_some(), "deletes only what it wrote: {k}");
                    }
                }
                FeedOutput::Announce(wire) => self.announced.extend(parse_sse(&wire)),
                FeedOutput::Verify { chat_id, open } => {
                    assert_eq!(chat_id, CHAT);
                    self.pending_rows.push(open);
                }
                FeedOutput::Forget => {
                    self.storage.clear();
                    self.forgets += 1;
                }
            }
        }
    }

    /// Answers the reads of the table that are out, from the table as it is now.
    fn answer_rows(&mut self) {
        if self.feed.is_none() {
            self.pending_rows.clear(); // asked by an instance that is gone
            return;
        }
        for open in std::mem::take(&mut self.pending_rows) {
            {
                {
                    let rows = if self.rows_fail {
                        Err(RowsUnread::Failed("store down".into()))
                    } else {
                        Ok(self
                            .table
                            .iter()
                            .filter(|(id, (status, _))| status == "streaming" || open.contains(id))
                            .map(|(id, (status, seq))| ChatAnswer { id: id.clone(), status: status.clone(), seq: Offset(*seq) })
                            .collect())
                    };
                    let now = self.now;
                    self.feed.as_mut().unwrap().handle_rows(rows, now);
                    self.drain();
                }
            }
        }
    }

    fn subscribe(&mut self, after: Option<&str>) -> Vec<Event> {
        parse_sse(&self.feed().subscribe(after))
    }
}

fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e.data["type"].as_str().unwrap() {
            t @ ("user" | "start" | "end") => format!("{t} {}", e.data["streamId"].as_str().unwrap()),
            t => t.to_owned(),
        })
        .collect()
}

#[test]
fn a_turn_is_announced_in_order_user_message_start_end_each_with_an_id() {
    let mut o = Object::new();
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
    let mut o = Object::new();
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
    let mut o = Object::new();
    o.notice(ended("a1", EndStatus::Interrupted, 7));
    assert_eq!(kinds(&o.announced), ["start a1", "end a1"]);
    assert_eq!(o.announced[0].data["format"], "ui");
}

#[test]
fn a_new_reader_gets_the_history_then_ready_whose_id_is_the_head() {
    let mut o = Object::new();
    assert_eq!(kinds(&o.subscribe(None)), ["ready"], "an unknown chat is an empty feed, as any other");
    o.notice(started("a1", Some("u1")));
    let replay = o.subscribe(None);
    assert_eq!(kinds(&replay), ["user a1", "start a1", "ready"]);
    assert_eq!(replay[2].id.as_deref(), Some(format!("{}-2", T0.0).as_str()));
    assert_eq!(replay[..2], o.announced[..], "the replay is what live readers got, ids and all");
}

#[test]
fn a_reconnect_gets_exactly_the_events_after_its_last_event_id() {
    let mut o = Object::new();
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
    let mut o = Object::new();
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
    let mut o = Object::new();
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
    let mut o = Object::new();
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
    let mut o = Object::new();
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
    let mut o = Object::new();
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
    assert_eq!(kinds(&o.announced), ["user a1", "start a1", "start a3", "end a1", "end a3", "start a2"]);
    assert_eq!(o.announced[3].data, json!({"type": "end", "streamId": "a1", "status": "cancelled", "durableSeq": 12}));
    assert_eq!(o.announced[4].data, json!({"type": "end", "streamId": "a3", "status": "interrupted", "durableSeq": 0}));
    assert_eq!(o.announced[5].data, json!({"type": "start", "streamId": "a2", "messageId": "a2"}), "no format: the row does not say");
    // Later, a2's start notice arrives after all, with its user message.
    o.notice(started("a2", Some("u2")));
    assert_eq!(kinds(&o.announced).last().unwrap(), "user a2", "the user message it brings; no second start");
}

/// While an answer is believed in flight its row is read every `verify_ms`, so an end that was
/// never told (the object gone for good) still reaches the readers.
#[test]
fn an_answer_in_flight_is_checked_against_its_row_until_it_ends() {
    let mut o = Object::new();
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
    let mut o = Object::new();
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
    let mut o = Object::new();
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

// ---- seeded schedules

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }
}

/// A reader as an `EventSource` is: its `Last-Event-ID`, and everything it was handed.
struct Reader {
    connected: bool,
    last_id: Option<String>,
    got: Vec<Event>,
    reloads: u32,
}

impl Reader {
    fn take(&mut self, events: Vec<Event>) {
        for e in events {
            if e.id.is_some() {
                self.last_id = e.id.clone();
            }
            if e.data["type"] == "reload" {
                self.reloads += 1;
            }
            self.got.push(e);
        }
    }
}

/// Seeded schedules of a chat's answers (one at a time, as the example app allows, or
/// overlapping), their notices told, retried or lost, resets of the feed's object, readers
/// cutting and reconnecting with their `Last-Event-ID`, and time passing (verification, never
/// long enough to forget: that is the rule above). At most one of an answer's two notices is
/// lost: an answer whose start and end both never reach the feed, and that no load or check of
/// the feed saw streaming, is not in the feed (the table says nothing of when a finished
/// answer was written; docs/DESIGN.md, "The chat feed"). Every reader must end with every event of the feed exactly once, in
/// order, never told to reload; and once the table has settled every answer must have exactly
/// one start and one end matching its row.
#[test]
fn feed_resets_and_reconnects_never_miss_or_double_a_turn() {
    let schedules: u64 = std::env::var("FEED_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(500);
    let seeds: Vec<u64> = match std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (1..=schedules).collect(),
    };
    for seed in seeds {
        run_schedule(seed);
    }
}

fn run_schedule(seed: u64) {
    let fail = |what: String| -> ! { panic!("seed {seed}: {what} (rerun with SIM_SEED={seed})") };
    let mut r = Rng(seed);
    let cfg = FeedConfig { history_events: 200, history_bytes: 1 << 20, idle_ms: Millis(u64::MAX / 4), verify_ms: Millis(5_000) };
    let mut o = Object::with(cfg);
    let mut readers: Vec<Reader> = (0..3).map(|_| Reader { connected: false, last_id: None, got: Vec::new(), reloads: 0 }).collect();
    let answers = 3 + r.below(5);
    // Each answer: not started, streaming (told or not), ended (told or not).
    let mut state: Vec<u8> = vec![0; answers as usize];
    // Which of its two notices each answer loses (0: none, 1: the start, 2: the end).
    let loses: Vec<u64> = (0..answers).map(|_| if r.chance(0.4) { 1 + r.below(2) } else { 0 }).collect();
    let mut steps = 0;
    while state.iter().any(|s| *s < 2) && steps < 400 {
        steps += 1;
        let delivered_before = o.announced.len();
        match r.below(10) {
            0..=3 => {
                // An answer moves on; one at a time most of the time.
                let busy = state.contains(&1);
                let i = match state.iter().position(|s| *s == 1) {
                    Some(i) if !busy || r.chance(0.8) => i,
                    _ => match state.iter().position(|s| *s == 0) {
                        Some(i) => i,
                        None => continue,
                    },
                };
                let stream = format!("a{i}");
                let lost = loses[i] == u64::from(state[i]) + 1;
                if state[i] == 0 {
                    o.table.insert(stream.clone(), ("streaming".into(), 0));
                    state[i] = 1;
                    if !lost {
                        let u = format!("u{i}");
                        o.notice(started(&stream, r.chance(0.7).then_some(u.as_str())));
                        if r.chance(0.2) {
                            o.notice(started(&stream, Some(u.as_str())));
                        }
                    }
                } else {
                    let status = [EndStatus::Complete, EndStatus::Cancelled, EndStatus::Error, EndStatus::Interrupted][r.below(4) as usize];
                    let seq = r.below(500);
                    o.table.insert(stream.clone(), (status.as_str().into(), seq));
                    state[i] = 2;
                    if !lost {
                        o.notice(ended(&stream, status, seq));
                        if r.chance(0.2) {
                            o.notice(ended(&stream, status, seq));
                        }
                    }
                }
            }
            4 => {
                // The connections die with the instance.
                o.reset();
                readers.iter_mut().for_each(|r| r.connected = false);
            }
            5 => o.tick(Millis(r.below(3 * cfg.verify_ms.0))),
            _ => {
                let reader = &mut readers[r.below(3) as usize];
                if reader.connected {
                    reader.connected = false;
                } else {
                    let after = reader.last_id.clone();
                    reader.take(o.subscribe(after.as_deref()));
                    reader.connected = true;
                }
            }
        }
        // Live readers get what was announced in this step.
        let fresh = o.announced[delivered_before..].to_vec();
        for reader in readers.iter_mut().filter(|r| r.connected) {
            reader.take(fresh.clone());
        }
    }
    // Settle: a reset and a verification see the final table; every reader reconnects.
    o.reset();
    readers.iter_mut().for_each(|r| r.connected = false);
    o.feed();
    o.tick(cfg.verify_ms);
    for reader in &mut readers {
        let after = reader.last_id.clone();
        if !reader.connected {
            reader.take(o.subscribe(after.as_deref()));
        } else {
            // Its connection was live throughout; it has everything announced.
            let mut replay = o.subscribe(after.as_deref());
            replay.retain(|e| e.data["type"] != "ready");
            if !replay.is_empty() {
                fail(format!("a live reader at {after:?} was missing {replay:?}"));
            }
        }
    }
    let feed_events: Vec<Event> = o.announced.clone();
    if o.forgets > 0 {
        fail("the feed forgot while answers were in flight or recent".into());
    }
    for (n, reader) in readers.iter().enumerate() {
        if reader.reloads > 0 {
            fail(format!("reader {n} was told to reload"));
        }
        let got: Vec<Event> = reader.got.iter().filter(|e| e.data["type"] != "ready").cloned().collect();
        if got != feed_events {
            fail(format!("reader {n} got {:?}\nthe feed announced {:?}", kinds(&got), kinds(&feed_events)));
        }
    }
    for (i, _) in state.iter().enumerate() {
        let stream = format!("a{i}");
        let of = |t: &str| feed_events.iter().filter(|e| e.data["type"] == t && e.data["streamId"] == stream.as_str()).collect::<Vec<_>>();
        let (starts, ends) = (of("start"), of("end"));
        if starts.len() != 1 || ends.len() != 1 {
            fail(format!("{stream}: {} starts, {} ends: {:?}", starts.len(), ends.len(), kinds(&feed_events)));
        }
        let (status, seq) = &o.table[&stream];
        if ends[0].data["status"] != status.as_str() || ends[0].data["durableSeq"] != *seq {
            fail(format!("{stream}: ended {} but the row says {status} {seq}", ends[0].data));
        }
        let at = |e: &Event| feed_events.iter().position(|x| x == e).unwrap();
        if at(ends[0]) < at(starts[0]) {
            fail(format!("{stream}: end before start"));
        }
        if of("user").len() > 1 {
            fail(format!("{stream}: its user message twice"));
        }
    }
}
