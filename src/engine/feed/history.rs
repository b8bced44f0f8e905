//! The chat feed's machine: a bounded, numbered history of a chat's turns, told by the
//! answers' objects ([`FeedNotice`]), kept in the feed object's storage, announced to its
//! readers, checked against the message table, and forgotten when idle.
//!
//! ```text
//!   Started ─▶ user? + start ┐                                  ┌─▶ Announce (every reader)
//!   Ended   ─▶ (start) + end ├─▶ numbered events ─▶ history ─────┼─▶ Persist (e:<n>, the head)
//!   rows    ─▶ start / end   ┘    {generation}-{n}   (bounded)   └─▶ subscribe(after) → replay
//!   timeout ─▶ Verify (rows of answers in flight) · Forget (idle: a new generation)
//! ```
//!
//! **Ids.** An event's SSE `id:` is `{generation}-{n}`: `n` counts from 1 within a generation,
//! and a generation begins whenever the history starts empty (the first event ever, or the
//! first after the idle feed forgot everything): its number is the clock then. So a reconnect's
//! `Last-Event-ID` says exactly what the reader has: every later event of the same generation
//! is replayed, none twice; an id of another generation, or one older than the history holds,
//! is told `reload` (the app's messages are the truth) and gets the whole history again.
//!
//! **The table is the truth.** Whenever the machine is loaded (a fresh instance: after a reset,
//! or the first request after it slept) and then every `verify_ms` while it believes an answer
//! is in flight, it asks for the chat's rows ([`FeedOutput::Verify`]): an answer `streaming`
//! that it never heard of is announced (`start`, without a user message or a format), and one it
//! believes in flight whose row is sealed is ended from the row (`end` with the row's status and
//! length). So a notice lost on the way (an object reset between the seal and its notice, a
//! feed object reset between the notice and its write) costs a delay, never a turn. An answer
//! `streaming` that the feed never heard of is announced only at the check after the one that
//! found it: its notice, which brings the user message, is on its way (the stream's object keeps
//! it until the feed confirms it), and a `user` is never announced after its `start`.
//!
//! **Storage.** The head (`feed`: the generation and the chat) and one key per event (`e:<n>`),
//! whose value is the event with its generation and the time it was stored
//! (`{"g", "at", "event", "carry"?}`): a fresh instance resumes the idle clock where the last
//! event left it (however often the object was evicted), and keys a failed `delete_all` left
//! behind belong to another generation and are deleted, never read as this one's. `carry` is what
//! the bounded history no longer shows but the feed must still know: the answers in flight whose
//! start left it, and the last answers whose end left it (so a notice told again is still told
//! twice, not announced twice). It rides on the newest event, so knowing it costs no write.

use super::notice::{FeedNotice, UserMessage};
use crate::engine::durable::{ChatAnswer, MAX_CHECKED_ANSWERS};
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, STATUS_STREAMING};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::rc::Rc;

/// The version of the storage format this machine writes (in the head; a head without one is
/// the first format, whose events are plain event JSON of the head's generation).
const STORAGE_VERSION: u64 = 2;

/// The storage key of the feed's head: its generation and its chat.
pub const HEAD_KEY: &str = "feed";
/// The prefix of an event's storage key (`e:` and `n`, zero-padded so keys list in order).
pub const EVENT_PREFIX: &str = "e:";

/// The storage key of event `n`.
pub fn event_key(n: u64) -> String {
    format!("{EVENT_PREFIX}{n:020}")
}

/// The chat a stored head belongs to (the alarm carries no request to name it).
pub fn stored_chat_id(head: &str) -> Option<String> {
    serde_json::from_str::<Value>(head).ok()?.get("chatId")?.as_str().map(str::to_owned)
}

/// How much a feed keeps, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedConfig {
    /// Events kept for late readers and reconnects (`FEED_HISTORY`; a turn is two or three:
    /// the user message, the start, the end).
    pub history_events: usize,
    /// Bytes of events kept at most (as sent); the newest event is always kept.
    pub history_bytes: usize,
    /// A feed with no answer in flight and no event for this long forgets its history
    /// (`FEED_IDLE_MS`): the storage is deleted, the next event begins a new generation.
    pub idle_ms: Millis,
    /// How often the rows of answers the feed believes in flight are read back, in case their
    /// end was never told.
    pub verify_ms: Millis,
    /// The most readers (connected tabs) a chat's feed takes at once (`FEED_MAX_READERS`); one
    /// more is answered 429, as a stream's reader past `MAX_READERS` is.
    pub max_readers: usize,
}

impl FeedConfig {
    /// Whether a feed with `readers` connected takes one more.
    pub fn admits_reader(&self, readers: usize) -> bool {
        readers < self.max_readers
    }
}

impl Default for FeedConfig {
    fn default() -> Self {
        Self { history_events: 96, history_bytes: 512 * 1024, idle_ms: Millis(600_000), verify_ms: Millis(30_000), max_readers: 5_000 }
    }
}

/// Where an event stands in its feed's history: its SSE `id:`, `{generation}-{n}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId {
    pub generation: u64,
    pub n: u64,
}

impl EventId {
    /// Reads an id a reader sends back (`Last-Event-ID`, or `?after=`); `None` for anything that
    /// is not two plain decimal numbers joined by `-`.
    pub fn parse(raw: &str) -> Option<Self> {
        let (generation, n) = raw.trim().split_once('-')?;
        let number = |s: &str| s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<u64>().ok()).flatten();
        Some(Self { generation: number(generation)?, n: number(n)? })
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.generation, self.n)
    }
}

/// One event of a chat's feed, as its readers get it (one JSON object with a `type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedEvent {
    /// `{"type":"user","streamId","message"}`: the user message that started the answer.
    User { stream_id: String, message: UserMessage },
    /// `{"type":"start","streamId","messageId","format"?}`: the answer's stream opened.
    Start { stream_id: String, message_id: String, format: Option<String> },
    /// `{"type":"end","streamId","status","durableSeq"}`: the answer's stream ended.
    End { stream_id: String, status: EndStatus, durable_seq: Offset },
}

impl FeedEvent {
    pub fn stream_id(&self) -> &str {
        match self {
            FeedEvent::User { stream_id, .. } | FeedEvent::Start { stream_id, .. } | FeedEvent::End { stream_id, .. } => stream_id,
        }
    }

    /// The event's JSON (one line).
    pub fn json(&self) -> String {
        match self {
            // The message is embedded as it was checked, compact.
            FeedEvent::User { stream_id, message } => {
                format!("{{\"type\":\"user\",\"streamId\":{},\"message\":{}}}", json!(stream_id), message.json())
            }
            FeedEvent::Start { stream_id, message_id, format } => {
                let mut v = json!({"type": "start", "streamId": stream_id, "messageId": message_id});
                if let Some(format) = format {
                    v["format"] = json!(format);
                }
                v.to_string()
            }
            FeedEvent::End { stream_id, status, durable_seq } => {
                json!({"type": "end", "streamId": stream_id, "status": status, "durableSeq": durable_seq}).to_string()
            }
        }
    }

    /// An event read back from storage (what [`FeedEvent::json`] wrote).
    fn parse(json: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(json).ok()?;
        let stream_id = v.get("streamId")?.as_str()?.to_owned();
        Some(match v.get("type")?.as_str()? {
            "user" => FeedEvent::User { stream_id, message: UserMessage::stored(v.get("message")?.to_string())? },
            "start" => FeedEvent::Start {
                stream_id,
                message_id: v.get("messageId")?.as_str()?.to_owned(),
                format: v.get("format").and_then(Value::as_str).map(str::to_owned),
            },
            "end" => FeedEvent::End {
                stream_id,
                status: EndStatus::parse(v.get("status")?.as_str()?)?,
                durable_seq: Offset(v.get("durableSeq")?.as_u64()?),
            },
            _ => return None,
        })
    }
}

/// An event as its key's value holds it.
struct StoredEvent {
    /// `None`: the first format (no generation, no time).
    generation: Option<u64>,
    at: Option<Timestamp>,
    event: FeedEvent,
    carry: Option<Beyond>,
}

impl StoredEvent {
    fn parse(json: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(json).ok()?;
        let Some(event) = v.get("event") else {
            return Some(Self { generation: None, at: None, event: FeedEvent::parse(json)?, carry: None });
        };
        Some(Self {
            generation: Some(v.get("g")?.as_u64()?),
            at: v.get("at").and_then(Value::as_u64).map(Timestamp),
            event: FeedEvent::parse(&event.to_string())?,
            carry: v.get("carry").map(Beyond::parse),
        })
    }

    fn json(generation: u64, at: Timestamp, event: &FeedEvent, carry: &Beyond) -> String {
        let mut v = json!({"g": generation, "at": at.0, "event": serde_json::from_str::<Value>(&event.json()).unwrap_or(Value::Null)});
        if !carry.is_empty() {
            v["carry"] = carry.to_json();
        }
        v.to_string()
    }
}

/// How many answers whose end left the history the feed still knows ended: a notice told again
/// (its first answer lost, then its object reset) comes a lease or two later, and this many
/// answers do not end in one chat in that time.
const REMEMBERED_ENDS: usize = 256;

/// What the bounded history no longer shows but the feed must still know (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Beyond {
    /// Answers in flight whose start left the history, in the order they started.
    open: Vec<String>,
    /// The last answers whose end left the history, oldest first (at most [`REMEMBERED_ENDS`]).
    ended: VecDeque<String>,
}

impl Beyond {
    fn is_empty(&self) -> bool {
        self.open.is_empty() && self.ended.is_empty()
    }

    fn to_json(&self) -> Value {
        json!({"open": self.open, "ended": self.ended})
    }

    fn parse(v: &Value) -> Self {
        let ids = |key: &str| -> Vec<String> {
            v.get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        Self { open: ids("open"), ended: ids("ended").into() }
    }
}

/// The last frame of every replay: the reader is caught up. Its `id:` is the feed's head; an
/// empty one (no event yet in a generation that is not stored: a reset would begin another)
/// clears the reader's position, so it reconnects as a new reader and gets the whole history.
fn ready(head: Option<EventId>) -> String {
    let id = head.map(|h| h.to_string()).unwrap_or_default();
    format!("id: {id}\ndata: {{\"type\":\"ready\"}}\n\n")
}

/// The frame that tells a reader its position is gone (another generation, or older than the
/// history): reload the chat from the app's messages; the whole history follows.
pub const RELOAD: &str = "data: {\"type\":\"reload\"}\n\n";

/// What the feed asks its object to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedOutput {
    /// Write (and delete) these keys of the object's storage, in one call.
    Persist(StorageWrite),
    /// Send these bytes (one event, SSE-encoded) to every reader.
    Announce(Rc<str>),
    /// Read the chat's rows: its answers `streaming`, and the rows of `open` (answers the feed
    /// believes in flight); answer with [`ChatFeed::handle_rows`].
    Verify { chat_id: String, open: Vec<String> },
    /// Delete everything the object stores: the history is forgotten.
    Forget,
}

/// One storage write of the feed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageWrite {
    pub put: Vec<(String, String)>,
    pub delete: Vec<String>,
}

/// Why the chat's rows could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowsUnread {
    /// Never readable here (no chat column mapped, or an app's own checkpoint sink): answers
    /// are known from their notices alone.
    Unavailable,
    /// The store failed this time: tried again in `verify_ms`.
    Failed(String),
}

/// What the object found in its storage when it woke.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredFeed {
    /// The head key's value, if any.
    pub head: Option<String>,
    /// Every `e:` key and its value, in any order.
    pub events: Vec<(String, String)>,
}

struct Entry {
    n: u64,
    event: FeedEvent,
    /// The SSE bytes: `id: {generation}-{n}`, then the event's `data:` line.
    wire: Rc<str>,
}

/// One chat's feed (see the module docs).
pub struct ChatFeed {
    cfg: FeedConfig,
    chat_id: String,
    generation: u64,
    /// The head (generation, chat) is in storage.
    head_stored: bool,
    /// The next event's number.
    next: u64,
    events: VecDeque<Entry>,
    bytes: usize,
    last_event_at: Timestamp,
    /// When the chat's rows are next read; `None` while a read is out, or when nothing needs one.
    verify_at: Option<Timestamp>,
    verifying: bool,
    /// The answers the read that is out was asked about.
    asked: Vec<String>,
    /// A read of the rows succeeded since this instance loaded.
    rebuilt: bool,
    /// The rows can never be read here.
    rows_unavailable: bool,
    /// What the bounded history no longer shows (see the module docs).
    beyond: Beyond,
    /// Answers a read of the table found `streaming` that no notice told of yet: announced from
    /// their row at the next check if their notice has not come by then.
    suspects: Vec<String>,
    write: StorageWrite,
    out: VecDeque<FeedOutput>,
    /// The last replay given, shared by the readers that join at its position (see [`ChatFeed::subscribe`]).
    replay: std::cell::RefCell<Option<(ReplayKey, Rc<str>)>>,
}

/// What a replay's bytes depend on: where it starts, and the head it ends at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplayKey {
    reload: bool,
    from: u64,
    head: EventId,
}

impl ChatFeed {
    /// The feed of `chat_id` as its object's storage holds it (nothing: a new generation), at
    /// `now`. It asks at once for the chat's rows, to rebuild what it may have missed.
    pub fn load(cfg: FeedConfig, chat_id: &str, stored: StoredFeed, now: Timestamp) -> Self {
        let mut feed = Self::empty(cfg, chat_id, now);
        let head = stored.head.as_deref().and_then(|h| serde_json::from_str::<Value>(h).ok());
        let generation = head.as_ref().and_then(|h| h.get("generation")?.as_u64());
        let first_format = head.as_ref().is_some_and(|h| h.get("v").is_none());
        let mut stale = Vec::new();
        match generation {
            Some(generation) => {
                feed.generation = generation;
                feed.head_stored = true;
                // The first format stored no time: the generation's start is a time no later than
                // its last event (the feed forgets no later than it should, perhaps sooner).
                feed.last_event_at = Timestamp(generation);
                let mut events: Vec<(u64, StoredEvent)> = Vec::new();
                for (key, value) in stored.events {
                    let parsed = key.strip_prefix(EVENT_PREFIX).and_then(|n| n.parse::<u64>().ok()).zip(StoredEvent::parse(&value));
                    match parsed {
                        // Another generation's (a forget whose `delete_all` failed), or the first
                        // format's under a head of this one: not this history.
                        Some((n, event)) if event.generation.map_or(first_format, |g| g == generation) => events.push((n, event)),
                        _ => stale.push(key),
                    }
                }
                events.sort_by_key(|(n, _)| *n);
                for (n, stored) in events {
                    let wire = encode(EventId { generation, n }, &stored.event);
                    feed.bytes += wire.len();
                    feed.events.push_back(Entry { n, event: stored.event, wire });
                    feed.next = n + 1;
                    feed.last_event_at = feed.last_event_at.max(stored.at.unwrap_or_default());
                    if let Some(carry) = stored.carry {
                        feed.beyond = carry;
                    } else {
                        feed.beyond = Beyond::default();
                    }
                }
            }
            // No head (or one this version cannot read): whatever else is there is not a history.
            None => stale.extend(stored.events.into_iter().map(|(key, _)| key)),
        }
        if !stale.is_empty() {
            feed.out.push_back(FeedOutput::Persist(StorageWrite { put: Vec::new(), delete: stale }));
        }
        if feed.idle_deadline().is_some_and(|at| at <= now) {
            // Woken past the idle deadline (its alarm, or a request after a long sleep): nothing
            // is in flight, every turn is in the app's messages; there is nothing to check.
            feed.forget(now);
            return feed;
        }
        feed.verify_at = Some(now);
        feed.handle_timeout(now);
        feed
    }

    fn empty(cfg: FeedConfig, chat_id: &str, now: Timestamp) -> Self {
        Self {
            cfg,
            chat_id: chat_id.to_owned(),
            generation: now.0,
            head_stored: false,
            next: 1,
            events: VecDeque::new(),
            bytes: 0,
            last_event_at: now,
            verify_at: None,
            verifying: false,
            asked: Vec::new(),
            rebuilt: false,
            rows_unavailable: false,
            beyond: Beyond::default(),
            suspects: Vec::new(),
            write: StorageWrite::default(),
            out: VecDeque::new(),
            replay: std::cell::RefCell::new(None),
        }
    }

    // ---- getters

    pub fn chat_id(&self) -> &str {
        &self.chat_id
    }

    /// The id of the newest event (`n` 0 when the generation has none yet).
    pub fn head(&self) -> EventId {
        EventId { generation: self.generation, n: self.next - 1 }
    }

    /// The events the history holds, oldest first.
    pub fn events(&self) -> impl Iterator<Item = (EventId, &FeedEvent)> {
        self.events.iter().map(|e| (EventId { generation: self.generation, n: e.n }, &e.event))
    }

    /// Answers the feed believes in flight: started, not ended, in the order they started (those
    /// whose start left the history first).
    pub fn in_flight(&self) -> Vec<String> {
        let mut open: Vec<String> = self.beyond.open.clone();
        for entry in &self.events {
            match &entry.event {
                FeedEvent::Start { stream_id, .. } if !open.contains(stream_id) => open.push(stream_id.clone()),
                FeedEvent::End { stream_id, .. } => open.retain(|s| s != stream_id),
                _ => {}
            }
        }
        open
    }

    /// The bytes a new reader gets at once, after the SSE preamble: the events after `after`
    /// (its `Last-Event-ID`, else its `?after=`; none: the whole history), then `ready`. A
    /// position the history cannot continue from (unreadable, another generation, older than
    /// the history, newer than the head) gets `reload` first, then the whole history.
    ///
    /// One replay is encoded once and shared: the readers that join at the same position while
    /// the history stays as it is (most often every new reader, which gets the whole history)
    /// get the same bytes.
    pub fn subscribe(&self, after: Option<&str>) -> Rc<str> {
        let oldest = self.events.front().map_or(self.next, |e| e.n);
        let from = match after.map(str::trim).filter(|a| !a.is_empty()) {
            None => Some(0),
            Some(raw) => {
                EventId::parse(raw).filter(|id| id.generation == self.generation && id.n < self.next && id.n + 1 >= oldest).map(|id| id.n)
            }
        };
        let key = ReplayKey { reload: from.is_none(), from: from.unwrap_or(0).max(oldest.saturating_sub(1)), head: self.head() };
        if let Some((cached, bytes)) = self.replay.borrow().as_ref() {
            if *cached == key && self.head_stored {
                return Rc::clone(bytes);
            }
        }
        let mut out = String::new();
        if key.reload {
            out.push_str(RELOAD);
        }
        for entry in self.events.iter().filter(|e| e.n > key.from) {
            out.push_str(&entry.wire);
        }
        out.push_str(&ready(self.head_stored.then(|| self.head())));
        let bytes: Rc<str> = Rc::from(out);
        *self.replay.borrow_mut() = Some((key, Rc::clone(&bytes)));
        bytes
    }

    // ---- inputs

    /// A stream's object told the feed something. A notice told twice (a retry whose first
    /// answer was lost) changes nothing.
    pub fn handle_notice(&mut self, notice: FeedNotice, now: Timestamp) {
        match notice {
            FeedNotice::Started { stream_id, message_id, format, user_message, .. } => {
                let message = user_message.and_then(UserMessage::stored);
                // Announced already (a retry, or the table's rows announced it without its user
                // message: a `user` after its `start` is never announced).
                if !self.knows(&stream_id) {
                    self.suspects.retain(|s| *s != stream_id);
                    if let Some(message) = message {
                        self.append(FeedEvent::User { stream_id: stream_id.clone(), message }, now);
                    }
                    self.append(FeedEvent::Start { stream_id, message_id, format: Some(format) }, now);
                }
            }
            FeedNotice::Ended { stream_id, message_id, format, status, durable_seq, .. } => {
                if self.ended(&stream_id) {
                    return;
                }
                // Its start was never told (or the history no longer holds it): announce it first,
                // so every answer a reader sees has a start.
                if !self.knows(&stream_id) {
                    self.suspects.retain(|s| *s != stream_id);
                    self.append(FeedEvent::Start { stream_id: stream_id.clone(), message_id, format }, now);
                }
                self.append(FeedEvent::End { stream_id, status, durable_seq }, now);
            }
        }
        self.schedule(now);
        self.flush_write();
    }

    /// The chat's rows, as [`FeedOutput::Verify`] asked: `rows` holds the chat's answers that are
    /// `streaming` and the rows of the answers it named that still exist.
    pub fn handle_rows(&mut self, rows: Result<Vec<ChatAnswer>, RowsUnread>, now: Timestamp) {
        self.verifying = false;
        match rows {
            Ok(rows) => {
                self.rebuilt = true;
                let row = |id: &str| rows.iter().find(|r| r.id == id);
                // Only what was asked, and not ended by a notice while the read was out.
                for stream_id in std::mem::take(&mut self.asked) {
                    if self.ended(&stream_id) {
                        continue;
                    }
                    let suspected = self.suspects.contains(&stream_id);
                    if suspected {
                        // Its notice did not come within a check: announced from its row.
                        self.suspects.retain(|s| *s != stream_id);
                        if self.knows(&stream_id) || row(&stream_id).is_none() {
                            continue; // told meanwhile, or deleted by the app before anyone saw it
                        }
                        self.append(FeedEvent::Start { stream_id: stream_id.clone(), message_id: stream_id.clone(), format: None }, now);
                    }
                    match row(&stream_id) {
                        Some(row) => {
                            if let Some(status) = EndStatus::parse(&row.status) {
                                self.append(FeedEvent::End { stream_id, status, durable_seq: row.seq }, now);
                            }
                        }
                        // The app deleted it: the answer is gone, as if interrupted with nothing.
                        None => self.append(FeedEvent::End { stream_id, status: EndStatus::Interrupted, durable_seq: Offset::ZERO }, now),
                    }
                }
                for row in rows.iter().filter(|r| r.status == STATUS_STREAMING) {
                    if !self.knows(&row.id) && !self.suspects.contains(&row.id) {
                        self.suspects.push(row.id.clone());
                    }
                }
            }
            Err(RowsUnread::Unavailable) => self.rows_unavailable = true,
            Err(RowsUnread::Failed(_)) => {}
        }
        self.asked.clear();
        self.schedule(now);
        self.flush_write();
    }

    /// The time given by [`ChatFeed::poll_timeout`] came (or any later time).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.verify_at.is_some_and(|at| at <= now) && !self.verifying {
            self.verify_at = None;
            self.verifying = true;
            let mut open = self.in_flight();
            open.extend(self.suspects.iter().filter(|s| !open.contains(s)).cloned().collect::<Vec<_>>());
            open.truncate(MAX_CHECKED_ANSWERS);
            self.asked = open.clone();
            self.out.push_back(FeedOutput::Verify { chat_id: self.chat_id.clone(), open });
        }
        if self.idle_deadline().is_some_and(|at| at <= now) {
            self.forget(now);
        }
    }

    // ---- outputs

    /// The next thing to do, in order; `None` when there is nothing more.
    pub fn poll_output(&mut self) -> Option<FeedOutput> {
        self.out.pop_front()
    }

    /// When [`ChatFeed::handle_timeout`] is next due (the object's alarm).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match (self.verify_at, self.idle_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---- the rules

    /// The history was forgotten when nothing is in flight and no event came for `idle_ms`
    /// (nothing to forget before the first event).
    fn idle_deadline(&self) -> Option<Timestamp> {
        let holds = self.head_stored || !self.events.is_empty();
        let quiet = self.in_flight().is_empty() && self.suspects.is_empty();
        (holds && !self.verifying && quiet).then(|| self.last_event_at + self.cfg.idle_ms)
    }

    /// Reads the rows again in `verify_ms` while an answer is in flight, or until one read
    /// succeeded after the load.
    fn schedule(&mut self, now: Timestamp) {
        if self.verifying || self.rows_unavailable {
            self.verify_at = None;
            return;
        }
        let wanted = !self.rebuilt || !self.in_flight().is_empty() || !self.suspects.is_empty();
        self.verify_at = wanted.then(|| self.verify_at.unwrap_or(now + self.cfg.verify_ms));
    }

    /// Forgets the history: the object deletes everything it stores and its alarm, and nothing is
    /// read again until a notice or a reader comes (every turn is in the app's messages by now).
    fn forget(&mut self, now: Timestamp) {
        let fresh = Self::empty(self.cfg, &self.chat_id, now);
        // The next generation's number is greater than this one's, even on a clock that moved back.
        let generation = now.0.max(self.generation + 1);
        let out = std::mem::take(&mut self.out);
        *self = Self { generation, rebuilt: true, rows_unavailable: self.rows_unavailable, out, ..fresh };
        self.out.push_back(FeedOutput::Forget);
    }

    /// The feed announced this answer's start (its start or its end may have left the history).
    fn knows(&self, stream_id: &str) -> bool {
        self.events
            .iter()
            .any(|e| matches!(&e.event, FeedEvent::Start { stream_id: s, .. } | FeedEvent::End { stream_id: s, .. } if s == stream_id))
            || self.beyond.open.iter().any(|s| s == stream_id)
            || self.beyond.ended.iter().any(|s| s == stream_id)
    }

    /// The feed announced this answer's end (it may have left the history).
    fn ended(&self, stream_id: &str) -> bool {
        self.events.iter().any(|e| matches!(&e.event, FeedEvent::End { stream_id: s, .. } if s == stream_id))
            || self.beyond.ended.iter().any(|s| s == stream_id)
    }

    /// Numbers `event`, keeps it (dropping the oldest past the bounds, and remembering what they
    /// said that the feed must still know) and announces it.
    fn append(&mut self, event: FeedEvent, now: Timestamp) {
        if !self.head_stored {
            self.head_stored = true;
            let head = json!({"generation": self.generation, "chatId": self.chat_id, "v": STORAGE_VERSION});
            self.write.put.push((HEAD_KEY.to_owned(), head.to_string()));
        }
        let n = self.next;
        self.next += 1;
        let wire = encode(EventId { generation: self.generation, n }, &event);
        if let FeedEvent::End { stream_id, .. } = &event {
            self.beyond.open.retain(|s| s != stream_id);
        }
        self.bytes += wire.len();
        self.events.push_back(Entry { n, event: event.clone(), wire: Rc::clone(&wire) });
        self.out.push_back(FeedOutput::Announce(wire));
        self.last_event_at = now;
        while self.events.len() > self.cfg.history_events.max(1) || (self.bytes > self.cfg.history_bytes && self.events.len() > 1) {
            let Some(old) = self.events.pop_front() else { break };
            self.bytes -= old.wire.len();
            match old.event {
                FeedEvent::Start { stream_id, .. } if !self.ended(&stream_id) && !self.beyond.open.contains(&stream_id) => {
                    self.beyond.open.push(stream_id)
                }
                FeedEvent::End { stream_id, .. } => {
                    self.beyond.ended.push_back(stream_id);
                    while self.beyond.ended.len() > REMEMBERED_ENDS {
                        self.beyond.ended.pop_front();
                    }
                }
                _ => {}
            }
            let key = event_key(old.n);
            // An event dropped in the input that wrote it is never written.
            match self.write.put.iter().position(|(k, _)| *k == key) {
                Some(i) => drop(self.write.put.remove(i)),
                None => self.write.delete.push(key),
            }
        }
        // The newest event is never dropped: it carries what the history no longer shows.
        self.write.put.push((event_key(n), StoredEvent::json(self.generation, now, &event, &self.beyond)));
    }

    /// The input's storage write goes out before its announcements (the runtime holds what an
    /// object sends until the writes before it are stored).
    fn flush_write(&mut self) {
        let write = std::mem::take(&mut self.write);
        if !write.put.is_empty() || !write.delete.is_empty() {
            let first_announce = self.out.iter().position(|o| matches!(o, FeedOutput::Announce(_))).unwrap_or(self.out.len());
            self.out.insert(first_announce, FeedOutput::Persist(write));
        }
    }
}

fn encode(id: EventId, event: &FeedEvent) -> Rc<str> {
    Rc::from(format!("id: {id}\ndata: {}\n\n", event.json()))
}
