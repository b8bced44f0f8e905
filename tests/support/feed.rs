//! The chat feed's object as the tests drive it (`tests/feed_rules.rs`, `tests/feed_simulator.rs`):
//! its storage is a map that takes exactly the writes the machine asks for, so a reset is "drop
//! the machine, load it from the map", as the Worker's object does (src/edge/chat/); a reader is
//! what an `EventSource` keeps (its `Last-Event-ID`, what it was handed).
#![allow(dead_code)]

use rindle_streams::engine::durable::ChatAnswer;
use rindle_streams::engine::feed::{
    ChatFeed, ChatLink, FeedConfig, FeedNotice, FeedOutput, RowsUnread, StoredFeed, EVENT_PREFIX, HEAD_KEY,
};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub const CHAT: &str = "c1";
pub const T0: Timestamp = Timestamp(1_700_000_000_000);

pub fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

pub fn started(stream: &str, user_id: Option<&str>) -> FeedNotice {
    let link = ChatLink::parse(json!({"id": CHAT, "userMessage": user_id.map(|u| user(u, "question"))})).unwrap();
    FeedNotice::started(&link, stream, Format::Ui)
}

pub fn ended(stream: &str, status: EndStatus, seq: u64) -> FeedNotice {
    FeedNotice::ended(CHAT, stream, Some(Format::Ui), status, Offset(seq))
}

/// One SSE event as a reader parses it: its `id:` and its JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Option<String>,
    pub data: Value,
}

pub fn parse_sse(bytes: &str) -> Vec<Event> {
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
pub struct Object {
    pub cfg: FeedConfig,
    pub storage: BTreeMap<String, String>,
    pub feed: Option<ChatFeed>,
    pub announced: Vec<Event>,
    /// The message table: stream id → (status, seq). Absent: no row.
    pub table: BTreeMap<String, (String, u64)>,
    pub rows_fail: bool,
    /// Reads of the table asked for and not answered yet (a D1 query takes a while).
    pub pending_rows: Vec<Vec<String>>,
    pub now: Timestamp,
    pub forgets: u32,
    /// The next forget's `delete_all` fails: storage keeps everything.
    pub forget_fails: bool,
    /// Reads of the table asked for, over the object's life.
    pub row_reads: u32,
}

impl Object {
    pub fn with(cfg: FeedConfig) -> Self {
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
            forget_fails: false,
            row_reads: 0,
        }
    }

    /// The machine, loaded from storage as a fresh instance does when it is first needed.
    pub fn feed(&mut self) -> &mut ChatFeed {
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
    pub fn reset(&mut self) {
        self.feed = None;
        self.pending_rows.clear();
    }

    pub fn notice(&mut self, notice: FeedNotice) {
        let now = self.now;
        self.feed().handle_notice(notice, now);
        self.drain();
    }

    pub fn tick(&mut self, by: Millis) {
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
    pub fn drain(&mut self) {
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
                    self.row_reads += 1;
                    self.pending_rows.push(open);
                }
                FeedOutput::Forget => {
                    if !std::mem::take(&mut self.forget_fails) {
                        self.storage.clear();
                    }
                    self.forgets += 1;
                }
            }
        }
    }

    /// Answers the reads of the table that are out, from the table as it is now.
    pub fn answer_rows(&mut self) {
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

    pub fn subscribe(&mut self, after: Option<&str>) -> Vec<Event> {
        parse_sse(&self.feed().subscribe(after))
    }
}

pub fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e.data["type"].as_str().unwrap() {
            t @ ("user" | "start" | "end") => format!("{t} {}", e.data["streamId"].as_str().unwrap()),
            t => t.to_owned(),
        })
        .collect()
}

/// splitmix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }
}
