//! The attached readers: one bounded queue each, frames encoded once and shared.
//!
//! A reader speaks a [`Dialect`]: the frames of SPEC §3 (`/events`) or the AI SDK's UI message
//! stream (`/ui`, SPEC §9). A frame is serialized once per dialect that has readers when it is
//! fanned out, and the same bytes are queued for every reader of that dialect. A reader's queue is drained by [`Readers::pull`], which merges runs of queued chunk
//! frames into one, so a reader that falls a little behind catches up in one write. A reader
//! whose queue reaches the cap is dropped with `stale`: it costs itself a rejoin, never the
//! producer's memory.
//!
//! Writes are paced: each write to a reader costs the runtime about the same whatever it
//! carries, so with many readers a reader gets on average at most one write per `pacing`
//! (a token bucket of [`Pacing::burst`] writes: a reader out of them gets its next write only
//! when one is back; its pull answers `Pending`, and the stream wakes it when due), and the
//! frames queued meanwhile go out merged in one write. The burst is what keeps pacing off
//! the latency of a stream that is not busy: two deltas that happen to arrive a little closer
//! than the pace both go out at once. The pace grows with the number of readers (see
//! [`Readers::pacing`]); with few readers it is zero and every frame goes out at once. A
//! terminal frame is never held back.
//!
//! A reader written nothing for the keep-alive interval is woken for a `: ping` comment
//! (SPEC §3): the stream's one timer serves every reader's keep-alive.
//!
//! A replay is shared too: the chunk of text a join is replayed is encoded once, and every
//! reader of that dialect that joins at the same offset while one still holds it shares that
//! frame (plus a small chunk of its own for the text produced since); a frame that large goes out
//! alone, never copied into a merged write. So 100 readers joining at 0 hold one copy of the
//! text's encoding between them, not 100 (SPEC §12).

use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::Frame;
use crate::engine::{wire::sse, wire::ui};
use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::{Rc, Weak};

/// A queued frame whose encoding is at least this large goes out in a write of its own: merged
/// with others it would be copied into bytes of one reader's own, which a shared frame's bytes
/// never are.
pub const ALONE_BYTES: usize = 64 << 10;

/// The most text a join adds, in a chunk of its own, to a replay chunk it shares with an earlier
/// join (the text produced since); past it, the join's chunk is encoded afresh and shared in turn.
const SHARED_TAIL_BYTES: usize = 64 << 10;

/// One frame of a replay: the reader's own, or a text chunk it shares with earlier joins.
#[derive(Debug)]
pub(crate) enum Replay {
    Frame(Frame),
    Shared(Rc<SharedFrame>),
}

impl From<Frame> for Replay {
    fn from(frame: Frame) -> Self {
        Replay::Frame(frame)
    }
}

/// The last replay chunk of a dialect, `[from, seq)`, held only while a reader holds it.
#[derive(Debug)]
struct ReplayChunk {
    from: Offset,
    seq: Offset,
    frame: Weak<SharedFrame>,
}

/// Names one attached reader. Only the stream mints one (a subscribe), so a reader id a shell
/// holds names a reader this stream attached; it serializes as its number, for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct ReaderId(u64);

/// What a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// The frames of SPEC §3 (`GET /events`).
    Events,
    /// The AI SDK's UI message stream (`GET /ui`, SPEC §9): each complete line of a `ui`
    /// stream's text as one event, then the ending. `open`, `durable` and `stale` frames
    /// write nothing in it.
    Ui,
}

/// The dialects that have live readers, so a frame is encoded only for those.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Dialects {
    events: bool,
    ui: bool,
}

/// A frame with its SSE encoding in each dialect, made at most once and shared by every
/// queue it sits in.
#[derive(Debug)]
pub struct SharedFrame {
    pub frame: Frame,
    /// The lines served when the frame was made: the `ui` encoding of an `end` frame depends
    /// on them (a `finish` line of the text's own, lines past the durable length).
    served: ui::Served,
    events: OnceCell<String>,
    ui: OnceCell<String>,
}

impl SharedFrame {
    fn new(frame: Frame, served: ui::Served, encode_for: Dialects) -> Rc<Self> {
        let shared = Self { frame, served, events: OnceCell::new(), ui: OnceCell::new() };
        if encode_for.events {
            shared.wire(Dialect::Events);
        }
        if encode_for.ui {
            shared.wire(Dialect::Ui);
        }
        Rc::new(shared)
    }

    /// The frame's bytes in `dialect`.
    pub fn wire(&self, dialect: Dialect) -> &str {
        match dialect {
            Dialect::Events => self.events.get_or_init(|| sse::encode(&self.frame)),
            Dialect::Ui => self.ui.get_or_init(|| ui::encode_frame(&self.frame, self.served)),
        }
    }

    /// Whether a reader of `dialect` needs this frame: a frame that writes nothing and ends
    /// nothing is not queued (a `/ui` reader is never woken for a `durable` frame).
    fn worth_queueing(&self, dialect: Dialect) -> bool {
        !self.wire(dialect).is_empty() || self.frame.is_terminal()
    }
}

#[derive(Debug)]
struct Reader {
    dialect: Dialect,
    queue: VecDeque<Rc<SharedFrame>>,
    /// A terminal frame is queued; nothing more will be offered.
    finished: bool,
    /// The last pull found nothing: the next offer must wake the shell.
    parked: bool,
    /// Its token bucket, as the time its writes are paid up to (the generic cell rate
    /// algorithm): each write adds one pace, from now at the earliest; a write is allowed while
    /// this is at most the bucket's slack ahead of now.
    paced_until: Timestamp,
    /// Parked with frames queued, waiting for its pace: woken at [`Reader::due`].
    deferred: bool,
    /// When it was last written to (or attached): a keep-alive ping is due `keepalive` later.
    idle_since: Timestamp,
    /// Woken for a keep-alive ping: the next pull with nothing queued returns one.
    ping: bool,
    /// Waits for text not here yet: offered no frames until released.
    held: bool,
    /// Its token expires then: the reader is ended (its client reconnects with a fresh token).
    expires_at: Option<Timestamp>,
}

impl Reader {
    /// When this reader may next be written to, given the bucket's `slack` (see [`Readers::slack`]).
    fn due(&self, slack: Millis) -> Timestamp {
        self.paced_until - slack
    }

    /// When this reader next needs a pull without being offered a frame: when its pace has
    /// passed (deferred), or when it is due a keep-alive ping (parked, waiting for data).
    fn next_pull(&self, slack: Millis, keepalive: Millis) -> Option<Timestamp> {
        let pull = if self.deferred {
            Some(self.due(slack))
        } else if self.parked && !self.finished {
            Some(self.idle_since + keepalive)
        } else {
            None
        };
        let expiry = self.expires_at.filter(|_| !self.finished);
        [pull, expiry].into_iter().flatten().min()
    }
}

/// The bytes one pull takes: exactly one frame's shared encoding (the common case: every
/// reader woken for a frame writes the same bytes, so the shell can give them all one copy of
/// them), or text made for this reader alone (several frames, a merged run, a ping).
#[derive(Debug, Clone)]
pub enum Wire {
    Frame(Rc<SharedFrame>, Dialect),
    Text(Cow<'static, str>),
}

impl Wire {
    pub fn as_str(&self) -> &str {
        match self {
            Wire::Frame(frame, dialect) => frame.wire(*dialect),
            Wire::Text(text) => text,
        }
    }

    /// The frame these bytes are, when they are exactly one shared frame's encoding.
    pub fn shared_frame(&self) -> Option<(&Rc<SharedFrame>, Dialect)> {
        match self {
            Wire::Frame(frame, dialect) => Some((frame, *dialect)),
            Wire::Text(_) => None,
        }
    }
}

impl std::ops::Deref for Wire {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Wire {
    fn from(text: String) -> Self {
        Wire::Text(Cow::Owned(text))
    }
}

/// Bytes are bytes, however they are held.
impl PartialEq for Wire {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Wire {}

impl PartialEq<String> for Wire {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

/// What a pull produced.
#[must_use = "a pull takes the reader's queued bytes: write them"]
#[derive(Debug, PartialEq, Eq)]
pub enum Pull {
    /// SSE bytes to write. `last` is true when they end the subscription.
    Data { wire: Wire, last: bool },
    /// Nothing queued: the reader is parked and will be named in a wake output.
    Pending,
    /// The reader is gone (drained after its terminal frame, or never existed).
    Gone,
}

/// Why a reader was dropped by the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Its queue reached the cap.
    QueueFull,
}

/// How readers are paced: on average one write per `per_reader_us` × live readers, at most
/// `max_ms`, in bursts of up to `burst` writes; a pace of 0 disables it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    pub per_reader_us: u64,
    pub max_ms: Millis,
    /// Writes a reader may take in a row, closer together than the pace (at least 1).
    pub burst: u64,
}

#[derive(Debug)]
pub(crate) struct Readers {
    cap: usize,
    merge: bool,
    pacing: Pacing,
    /// The pace for the current number of live readers, kept up to date as readers come and
    /// go (a pull reads it; counting readers there would cost O(readers) per pull).
    pace: Millis,
    next_id: u64,
    readers: BTreeMap<ReaderId, Reader>,
    /// Pulls that returned bytes, over the stream's life.
    writes: u64,
    /// The dialects live readers speak.
    dialects: Dialects,
    /// The complete lines of a `ui` stream's text so far (the `ui` encoding of `end` needs them).
    served: ui::Served,
    /// A reader written nothing for this long is due a ping.
    keepalive: Millis,
    /// The last replay chunk of each dialect (`[events, ui]`), for the next join to share.
    replays: [Option<ReplayChunk>; 2],
}

impl Readers {
    /// `merge`: merge queued chunk frames at pull time (see [`merge_wire`]).
    /// `keepalive`: the idle time after which a reader gets a `: ping`.
    pub fn new(cap: usize, merge: bool, pacing: Pacing, keepalive: Millis) -> Self {
        Self {
            keepalive,
            cap,
            merge,
            pacing,
            pace: Millis::ZERO,
            next_id: 0,
            readers: BTreeMap::new(),
            writes: 0,
            dialects: Dialects::default(),
            served: ui::Served::default(),
            replays: [None, None],
        }
    }

    /// The replay chunk of the text `[from, seq)` for a reader of `dialect` (`text(a, b)` is the
    /// text `[a, b)`): the chunk an earlier join of that dialect at `from` encoded, while a
    /// reader still holds it, followed by a chunk of its own for what was produced since (at
    /// most [`SHARED_TAIL_BYTES`]); else a chunk encoded now, which the next joins share.
    pub(crate) fn replay_text(
        &mut self,
        dialect: Dialect,
        from: Offset,
        seq: Offset,
        text: impl Fn(Offset, Offset) -> String,
    ) -> Vec<Replay> {
        let slot = &mut self.replays[dialect as usize];
        if let Some(shared) = slot.as_ref().filter(|c| c.from == from && c.seq <= seq).and_then(|c| c.frame.upgrade()) {
            let cached = slot.as_ref().map_or(from, |c| c.seq);
            if cached == seq {
                return vec![Replay::Shared(shared)];
            }
            let tail = text(cached, seq);
            if tail.len() <= SHARED_TAIL_BYTES {
                return vec![Replay::Shared(shared), Replay::Frame(Frame::Chunk { from: cached, seq, text: tail })];
            }
        }
        let only = Dialects { events: dialect == Dialect::Events, ui: dialect == Dialect::Ui };
        let shared = SharedFrame::new(Frame::Chunk { from, seq, text: text(from, seq) }, self.served, only);
        *slot = Some(ReplayChunk { from, seq, frame: Rc::downgrade(&shared) });
        vec![Replay::Shared(shared)]
    }

    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// The average time between two writes to one reader, for the current number of readers.
    pub fn pacing(&self) -> Millis {
        self.pace
    }

    /// How far ahead of now a reader's bucket may be paid and still take a write: the burst's
    /// writes beyond the first.
    fn slack(&self) -> Millis {
        self.pace * self.pacing.burst.saturating_sub(1)
    }

    /// Complete lines entered a `ui` stream's text, which now ends at `end`; `holds`: the chunks
    /// among them that matter to the ending (a `finish`, an `error`: the end then adds none).
    pub fn lines_entered(&mut self, end: Offset, holds: ui::Holds) {
        self.served.held = end;
        self.served.holds = self.served.holds.and(holds);
    }

    fn readers_changed(&mut self) {
        let mut readers = 0;
        self.dialects = Dialects::default();
        for r in self.readers.values().filter(|r| !r.finished) {
            readers += 1;
            match r.dialect {
                Dialect::Events => self.dialects.events = true,
                Dialect::Ui => self.dialects.ui = true,
            }
        }
        let pace = Millis(readers * self.pacing.per_reader_us / 1000).min(self.pacing.max_ms);
        if pace < self.pace {
            // Buckets paid at the old, slower pace would hold readers back longer than the new
            // one allows (with the pace down to 0, they would wait at all): refill them.
            for r in self.readers.values_mut() {
                r.paced_until = Timestamp::default();
            }
        }
        self.pace = pace;
    }

    fn share(&self, frame: Frame) -> Rc<SharedFrame> {
        SharedFrame::new(frame, self.served, self.dialects)
    }

    /// When the next reader needs a pull that no frame will bring: its pace has passed, or it
    /// is due a keep-alive ping.
    pub fn next_due(&self) -> Option<Timestamp> {
        let slack = self.slack();
        self.readers.values().filter_map(|r| r.next_pull(slack, self.keepalive)).min()
    }

    /// When reader `id` next needs a pull that no frame will bring (see [`Self::next_due`]).
    pub fn due_of(&self, id: ReaderId) -> Option<Timestamp> {
        self.readers.get(&id).and_then(|r| r.next_pull(self.slack(), self.keepalive))
    }

    /// Wakes the deferred readers whose pace has passed, and the parked ones due a ping.
    pub fn wake_due(&mut self, now: Timestamp) -> Vec<ReaderId> {
        let (slack, keepalive) = (self.slack(), self.keepalive);
        let mut wake = Vec::new();
        let mut expired = false;
        for (id, r) in self.readers.iter_mut() {
            if r.next_pull(slack, keepalive).is_none_or(|at| at > now) {
                continue;
            }
            if r.expires_at.is_some_and(|at| at <= now) && !r.finished {
                // Its token expired: nothing more is written, and its body ends (no ending: the
                // client reconnects from its last `id:`, with a fresh token).
                r.queue.clear();
                r.finished = true;
                r.held = false;
                r.deferred = false;
                r.parked = false;
                expired = true;
                wake.push(*id);
                continue;
            }
            r.ping = !r.deferred;
            r.deferred = false;
            r.parked = false;
            wake.push(*id);
        }
        if expired {
            self.readers_changed();
        }
        wake
    }

    /// Ends reader `id` at `at` (its token's `exp`), unless it ends first.
    pub fn expire_at(&mut self, id: ReaderId, at: Timestamp) {
        if let Some(r) = self.readers.get_mut(&id) {
            r.expires_at = Some(at);
        }
    }

    /// Readers still receiving live frames.
    pub fn live_count(&self) -> usize {
        self.readers.values().filter(|r| !r.finished).count()
    }

    /// Bytes of encoded frames queued across all readers, for memory accounting. A frame
    /// shared by several queues counts once per queue, so this is an upper bound.
    pub fn queued_bytes(&self) -> usize {
        self.readers.values().map(|r| r.queue.iter().map(|f| f.wire(r.dialect).len()).sum::<usize>()).sum()
    }

    /// The queue a replay makes for a reader of `dialect`: its own frames encoded now, shared
    /// chunks as they are.
    fn queue_of(replay: Vec<Replay>, dialect: Dialect, served: ui::Served) -> (VecDeque<Rc<SharedFrame>>, bool) {
        let only = Dialects { events: dialect == Dialect::Events, ui: dialect == Dialect::Ui };
        let frames: Vec<Rc<SharedFrame>> = replay
            .into_iter()
            .map(|r| match r {
                Replay::Frame(f) => SharedFrame::new(f, served, only),
                Replay::Shared(shared) => shared,
            })
            .collect();
        let finished = frames.last().is_some_and(|f| f.frame.is_terminal());
        (frames.into_iter().filter(|f| f.worth_queueing(dialect)).collect(), finished)
    }

    /// Registers a reader of `dialect` whose queue starts with `replay` (uncapped: a replay is
    /// bounded by construction). A replay ending in a terminal frame makes a finished reader.
    pub(crate) fn attach(&mut self, dialect: Dialect, replay: Vec<Replay>, now: Timestamp) -> ReaderId {
        let id = ReaderId(self.next_id);
        self.next_id += 1;
        let (queue, finished) = Self::queue_of(replay, dialect, self.served);
        self.readers.insert(
            id,
            Reader {
                dialect,
                queue,
                finished,
                parked: false,
                paced_until: Timestamp::default(),
                deferred: false,
                idle_since: now,
                ping: false,
                held: false,
                expires_at: None,
            },
        );
        self.readers_changed();
        id
    }

    /// Registers a reader that gets nothing until [`Self::release`] (it waits for text that is
    /// not here yet); it is pinged while it waits.
    pub fn attach_held(&mut self, dialect: Dialect, now: Timestamp) -> ReaderId {
        let id = self.attach(dialect, vec![], now);
        if let Some(r) = self.readers.get_mut(&id) {
            r.held = true;
        }
        id
    }

    /// Gives a held reader its replay and the live frames from now on; `true`: wake it (it
    /// was parked waiting for data). `held`: the offset the reader holds lines up to (an ending
    /// in the replay tells a `/ui` reader holding more than was saved so).
    pub(crate) fn release(&mut self, id: ReaderId, replay: Vec<Replay>, held: Offset) -> bool {
        let served = ui::Served { held: self.served.held.max(held), ..self.served };
        let Some(r) = self.readers.get_mut(&id) else { return false };
        (r.queue, r.finished) = Self::queue_of(replay, r.dialect, served);
        r.held = false;
        std::mem::take(&mut r.parked)
    }

    /// Queues `frame` for every live reader. Returns the readers to wake now (parked ones
    /// whose pace has passed; the others are deferred, see [`Self::next_due`]) and those
    /// dropped because their queue was full (they get `stale_frame` instead and are finished).
    pub fn fan_out(&mut self, frame: Frame, stale_frame: impl Fn() -> Frame, now: Timestamp) -> (Vec<ReaderId>, Vec<ReaderId>) {
        let shared = self.share(frame);
        let worth_ui = self.dialects.ui && shared.worth_queueing(Dialect::Ui);
        let (served, dialects) = (self.served, self.dialects);
        let mut stale = None;
        let slack = self.slack();
        let mut wake = Vec::new();
        let mut dropped = Vec::new();
        for (id, r) in self.readers.iter_mut().filter(|(_, r)| !r.finished && !r.held) {
            if r.dialect == Dialect::Ui && !worth_ui {
                continue;
            }
            if r.queue.len() >= self.cap {
                // The queued frames are useless to a reader told to rejoin: free them now.
                r.queue.clear();
                let stale = stale.get_or_insert_with(|| SharedFrame::new(stale_frame(), served, dialects));
                r.queue.push_back(Rc::clone(stale));
                r.finished = true;
                r.deferred = false;
                dropped.push(*id);
                continue; // the caller wakes it with the drop
            }
            r.queue.push_back(Rc::clone(&shared));
            if !r.parked || r.deferred {
                continue;
            }
            if r.due(slack) <= now {
                r.parked = false;
                wake.push(*id);
            } else {
                r.deferred = true;
            }
        }
        if !dropped.is_empty() {
            self.readers_changed();
        }
        (wake, dropped)
    }

    /// Queues a terminal frame for every live reader (past the cap: it is the last one).
    pub fn finish_all(&mut self, frame: Frame) -> Vec<ReaderId> {
        let shared = self.share(frame);
        let mut wake = Vec::new();
        for (id, r) in self.readers.iter_mut().filter(|(_, r)| !r.finished) {
            r.queue.push_back(Rc::clone(&shared));
            r.finished = true;
            r.deferred = false; // the end goes out at once
            if std::mem::take(&mut r.parked) {
                wake.push(*id);
            }
        }
        self.readers_changed();
        wake
    }

    /// Takes everything queued for `id` as one SSE write, unless its pace has not passed
    /// (then it is `Pending` and named in a wake when due).
    pub fn pull(&mut self, id: ReaderId, now: Timestamp) -> Pull {
        let (pace, slack) = (self.pacing(), self.slack());
        let merge = self.merge;
        let Some(r) = self.readers.get_mut(&id) else { return Pull::Gone };
        if r.queue.is_empty() {
            if r.finished {
                self.readers.remove(&id);
                return Pull::Gone;
            }
            if std::mem::take(&mut r.ping) {
                r.idle_since = now;
                self.writes += 1;
                return Pull::Data { wire: Wire::Text(Cow::Borrowed(sse::PING)), last: false };
            }
            r.parked = true;
            return Pull::Pending;
        }
        if !r.finished && r.due(slack) > now {
            r.parked = true;
            r.deferred = true;
            return Pull::Pending;
        }
        r.deferred = false;
        r.ping = false; // the write keeps the connection alive too
        r.paced_until = r.paced_until.max(now) + pace;
        r.idle_since = now;
        self.writes += 1;
        let dialect = r.dialect;
        // A large frame goes out alone (its shared bytes), and what is queued before it first.
        let alone = r.queue.iter().position(|f| f.wire(dialect).len() >= ALONE_BYTES);
        let take = match alone {
            Some(0) => 1,
            Some(at) => at,
            None => r.queue.len(),
        };
        let last = r.finished && take == r.queue.len();
        let wire = match take {
            // One frame, merged or not, is its own encoding: the bytes every reader shares.
            1 => Wire::Frame(r.queue.pop_front().expect("one frame is queued"), dialect),
            _ => {
                let frames: Vec<_> = r.queue.drain(..take).collect();
                Wire::from(match dialect {
                    Dialect::Events if merge => merge_wire(&frames),
                    // A `ui` event is one line: a run of them is already as merged as it gets.
                    _ => frames.iter().map(|f| f.wire(dialect)).collect::<String>(),
                })
            }
        };
        if last {
            self.readers.remove(&id); // finished readers are not counted: the pace stands
        }
        Pull::Data { wire, last }
    }

    /// Forgets a reader (its client went away).
    pub fn detach(&mut self, id: ReaderId) {
        self.readers.remove(&id);
        self.readers_changed();
    }
}

/// Encodes a drained queue, merging each run of chunk frames (and the durable frames between
/// them) into one chunk followed by the highest durable. Both are still true when sent late,
/// and a lagging reader catches up in one event instead of hundreds.
fn merge_wire(frames: &[Rc<SharedFrame>]) -> String {
    let mut out = String::new();
    let mut run: Vec<&Rc<SharedFrame>> = Vec::new();
    let mut durable: Option<&Rc<SharedFrame>> = None;
    let flush = |out: &mut String, run: &mut Vec<&Rc<SharedFrame>>, durable: &mut Option<&Rc<SharedFrame>>| {
        match run.as_slice() {
            [] => {}
            [one] => out.push_str(one.wire(Dialect::Events)),
            many => {
                let (Frame::Chunk { from, .. }, Frame::Chunk { seq, .. }) = (&many[0].frame, &many[many.len() - 1].frame) else {
                    unreachable!("runs hold only chunk frames")
                };
                let mut text = String::new();
                for f in many.iter() {
                    if let Frame::Chunk { text: t, .. } = &f.frame {
                        text.push_str(t);
                    }
                }
                out.push_str(&sse::encode(&Frame::Chunk { from: *from, seq: *seq, text }));
            }
        }
        run.clear();
        if let Some(d) = durable.take() {
            out.push_str(d.wire(Dialect::Events));
        }
    };
    for f in frames {
        match &f.frame {
            Frame::Chunk { .. } => run.push(f),
            Frame::Durable { .. } => durable = Some(f),
            _ => {
                flush(&mut out, &mut run, &mut durable);
                out.push_str(f.wire(Dialect::Events));
            }
        }
    }
    flush(&mut out, &mut run, &mut durable);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::wire::frame::EndStatus;

    fn chunk(from: u64, text: &str) -> Frame {
        Frame::Chunk { from: Offset(from), seq: Offset(from) + crate::engine::text::utf16::len(text), text: text.into() }
    }

    const NO_PACING: Pacing = Pacing { per_reader_us: 0, max_ms: Millis(0), burst: 1 };
    /// A keep-alive interval no test reaches.
    const NO_KEEPALIVE: Millis = Millis::MAX;

    #[test]
    fn with_many_readers_a_reader_written_recently_gets_its_next_write_at_its_pace_merged() {
        // 10 readers × 1000 µs, no burst: one write per reader per 10 ms at most.
        let mut rs = Readers::new(64, true, Pacing { per_reader_us: 1000, max_ms: Millis(50), burst: 1 }, NO_KEEPALIVE);
        let ids: Vec<_> = (0..10).map(|_| rs.attach(Dialect::Events, vec![], Timestamp(0))).collect();
        for &id in &ids {
            assert_eq!(rs.pull(id, Timestamp(99)), Pull::Pending);
        }
        assert_eq!(rs.pacing(), Millis(10));
        assert_eq!(rs.fan_out(chunk(0, "a"), stale, Timestamp(100)).0, ids, "the first frame goes out at once");
        for &id in &ids {
            assert!(matches!(rs.pull(id, Timestamp(100)), Pull::Data { .. }));
            assert_eq!(rs.pull(id, Timestamp(100)), Pull::Pending);
        }
        assert_eq!(rs.due_of(ids[0]), Some(Timestamp(0) + NO_KEEPALIVE), "not held back: parked, waiting for data (or its keep-alive)");
        assert!(rs.fan_out(chunk(1, "b"), stale, Timestamp(103)).0.is_empty(), "written 3 ms ago: deferred");
        assert_eq!(rs.pull(ids[0], Timestamp(104)), Pull::Pending, "a pull before the pace is due waits too");
        assert_eq!(rs.due_of(ids[0]), Some(Timestamp(110)), "held back by its pace: the shell arms a timer for 110");
        assert!(rs.fan_out(chunk(2, "c"), stale, Timestamp(106)).0.is_empty());
        assert_eq!(rs.next_due(), Some(Timestamp(110)));
        assert!(rs.wake_due(Timestamp(109)).is_empty());
        assert_eq!(rs.wake_due(Timestamp(110)), ids);
        assert_eq!(rs.next_due(), None);
        let Pull::Data { wire, .. } = rs.pull(ids[0], Timestamp(110)) else { panic!("expected data") };
        assert_eq!(wire, sse::encode(&chunk(1, "bc")), "the deferred frames go out merged");
        assert_eq!(rs.writes(), 11);
    }

    #[test]
    fn a_frame_that_goes_out_alone_is_the_same_shared_bytes_for_every_reader_and_a_run_is_a_readers_own() {
        let mut rs = Readers::new(64, true, NO_PACING, NO_KEEPALIVE);
        let ids: Vec<_> = (0..3).map(|_| rs.attach(Dialect::Events, vec![], Timestamp(0))).collect();
        for &id in &ids {
            assert_eq!(rs.pull(id, Timestamp(0)), Pull::Pending);
        }
        assert_eq!(rs.fan_out(chunk(0, "a"), stale, Timestamp(1)).0, ids);
        let wires: Vec<Wire> = ids
            .iter()
            .map(|&id| match rs.pull(id, Timestamp(1)) {
                Pull::Data { wire, last: false } => wire,
                other => panic!("expected data, got {other:?}"),
            })
            .collect();
        let Some((first, Dialect::Events)) = wires[0].shared_frame() else { panic!("one frame alone is its shared encoding") };
        for wire in &wires {
            let (frame, _) = wire.shared_frame().expect("shared");
            assert!(Rc::ptr_eq(frame, first), "every reader gets the one encoding the shell copies once");
            assert_eq!(*wire, sse::encode(&chunk(0, "a")));
        }
        // Two frames queued: the reader's own write, merged.
        rs.fan_out(chunk(1, "b"), stale, Timestamp(2));
        rs.fan_out(chunk(2, "c"), stale, Timestamp(3));
        let Pull::Data { wire, .. } = rs.pull(ids[0], Timestamp(3)) else { panic!("expected data") };
        assert!(wire.shared_frame().is_none());
        assert_eq!(wire, sse::encode(&chunk(1, "bc")));
    }

    #[test]
    fn a_burst_goes_out_at_once_and_only_a_reader_written_faster_than_its_pace_waits() {
        // 10 readers × 1000 µs: a 10 ms pace, in bursts of 3.
        let mut rs = Readers::new(64, true, Pacing { per_reader_us: 1000, max_ms: Millis(50), burst: 3 }, NO_KEEPALIVE);
        let ids: Vec<_> = (0..10).map(|_| rs.attach(Dialect::Events, vec![], Timestamp(0))).collect();
        let id = ids[0];
        for &r in &ids {
            assert_eq!(rs.pull(r, Timestamp(0)), Pull::Pending);
        }
        let write = |rs: &mut Readers, n: u64, now: u64| -> bool {
            let now = Timestamp(now);
            let woken = rs.fan_out(chunk(n, "x"), stale, now).0.contains(&id);
            if woken {
                assert!(matches!(rs.pull(id, now), Pull::Data { .. }));
                assert_eq!(rs.pull(id, now), Pull::Pending);
            }
            woken
        };
        // Deltas 10 ms apart, as paced, with two of them 1 ms apart: nobody waits.
        assert!(write(&mut rs, 0, 100));
        assert!(write(&mut rs, 1, 110));
        assert!(write(&mut rs, 2, 111), "closer than the pace, but within the burst: at once");
        assert!(write(&mut rs, 3, 121));
        // Four deltas in 3 ms: the bucket (3 writes, refilled one per 10 ms) runs out.
        assert!(write(&mut rs, 4, 200));
        assert!(write(&mut rs, 5, 201));
        assert!(write(&mut rs, 6, 202));
        assert!(!write(&mut rs, 7, 203), "a fourth write within the burst's span waits");
        assert_eq!(rs.due_of(id), Some(Timestamp(210)), "one pace after the burst began, a write is back");
        assert!(rs.wake_due(Timestamp(209)).is_empty());
        assert_eq!(rs.wake_due(Timestamp(210)), vec![id], "the others were offered every frame and never pulled: nothing to wake");
        let Pull::Data { wire, .. } = rs.pull(id, Timestamp(210)) else { panic!("expected data") };
        assert_eq!(wire, sse::encode(&chunk(7, "x")));
        assert_eq!(rs.pull(id, Timestamp(210)), Pull::Pending);
        // On average the pace holds: 40 deltas 1 ms apart get 3 + 40 / 10 writes or so.
        let before = rs.writes();
        let mut now = Timestamp(300);
        for n in 8..48 {
            now = now + Millis(1);
            write(&mut rs, n, now.0);
            for r in rs.wake_due(now) {
                if r == id {
                    assert!(matches!(rs.pull(id, now), Pull::Data { .. }));
                    assert_eq!(rs.pull(id, now), Pull::Pending);
                }
            }
        }
        let writes = rs.writes() - before;
        assert!((5..=8).contains(&writes), "40 deltas in 40 ms at a 10 ms pace: {writes} writes to one reader");
    }

    #[test]
    fn when_readers_leave_and_the_pace_drops_nobody_waits_on_the_old_pace() {
        // 20 readers × 500 µs, no burst: a 10 ms pace; one reader left: none.
        let mut rs = Readers::new(64, true, Pacing { per_reader_us: 500, max_ms: Millis(50), burst: 1 }, NO_KEEPALIVE);
        let ids: Vec<_> = (0..20).map(|_| rs.attach(Dialect::Events, vec![], Timestamp(0))).collect();
        let id = ids[0];
        rs.fan_out(chunk(0, "a"), stale, Timestamp(100));
        assert!(matches!(rs.pull(id, Timestamp(100)), Pull::Data { .. }));
        rs.fan_out(chunk(1, "b"), stale, Timestamp(101));
        assert_eq!(rs.pull(id, Timestamp(101)), Pull::Pending, "paced: due at 110");
        for &other in &ids[1..] {
            rs.detach(other);
        }
        assert_eq!(rs.pacing(), Millis(0));
        assert!(matches!(rs.pull(id, Timestamp(101)), Pull::Data { .. }), "alone now: at once");
    }

    #[test]
    fn with_few_readers_nothing_waits_and_the_end_never_waits() {
        let mut rs = Readers::new(64, true, Pacing { per_reader_us: 300, max_ms: Millis(50), burst: 1 }, NO_KEEPALIVE);
        let id = rs.attach(Dialect::Events, vec![], Timestamp(0));
        assert_eq!(rs.pull(id, Timestamp(5)), Pull::Pending);
        assert_eq!(rs.pacing(), Millis(0), "one reader × 300 µs rounds to no pace");
        assert_eq!(rs.fan_out(chunk(0, "a"), stale, Timestamp(5)).0, vec![id]);
        assert!(matches!(rs.pull(id, Timestamp(5)), Pull::Data { .. }));
        assert_eq!(rs.pull(id, Timestamp(5)), Pull::Pending);
        assert_eq!(rs.fan_out(chunk(1, "b"), stale, Timestamp(5)).0, vec![id], "same millisecond, still at once");

        let mut paced = Readers::new(64, true, Pacing { per_reader_us: 10_000, max_ms: Millis(50), burst: 1 }, NO_KEEPALIVE);
        let id = paced.attach(Dialect::Events, vec![], Timestamp(0));
        assert_eq!(paced.pull(id, Timestamp(1)), Pull::Pending);
        paced.fan_out(chunk(0, "a"), stale, Timestamp(1));
        assert!(matches!(paced.pull(id, Timestamp(1)), Pull::Data { .. }));
        assert_eq!(paced.pull(id, Timestamp(1)), Pull::Pending);
        assert!(paced.fan_out(chunk(1, "b"), stale, Timestamp(2)).0.is_empty(), "deferred");
        let end = Frame::End { seq: Offset(2), status: EndStatus::Complete, error: None };
        assert_eq!(paced.finish_all(end), vec![id], "the end wakes at once");
        assert_eq!(paced.next_due(), None);
        assert!(matches!(paced.pull(id, Timestamp(2)), Pull::Data { last: true, .. }), "and is pulled at once");
    }

    #[test]
    fn a_reader_written_nothing_for_the_keepalive_interval_is_woken_for_a_ping() {
        let mut rs = Readers::new(16, true, NO_PACING, Millis(15_000));
        let idle = rs.attach(Dialect::Events, vec![], Timestamp(1_000));
        let busy = rs.attach(Dialect::Events, vec![], Timestamp(1_000));
        assert_eq!(rs.pull(idle, Timestamp(1_000)), Pull::Pending);
        assert_eq!(rs.pull(busy, Timestamp(1_000)), Pull::Pending);
        assert_eq!(rs.next_due(), Some(Timestamp(16_000)), "15 s after attaching");
        assert_eq!(rs.fan_out(chunk(0, "a"), stale, Timestamp(5_000)).0, vec![idle, busy]);
        assert!(matches!(rs.pull(busy, Timestamp(5_000)), Pull::Data { .. }));
        assert_eq!(rs.pull(busy, Timestamp(5_000)), Pull::Pending);
        // `idle` was offered a frame but has not pulled it: it needs no ping, it needs a pull.
        assert_eq!(rs.due_of(idle), None);
        assert!(matches!(rs.pull(idle, Timestamp(6_000)), Pull::Data { .. }));
        assert_eq!(rs.pull(idle, Timestamp(6_000)), Pull::Pending);
        assert_eq!((rs.due_of(idle), rs.due_of(busy)), (Some(Timestamp(21_000)), Some(Timestamp(20_000))), "a write restarts the interval");
        assert!(rs.wake_due(Timestamp(19_999)).is_empty());
        assert_eq!(rs.wake_due(Timestamp(20_000)), vec![busy]);
        assert_eq!(rs.pull(busy, Timestamp(20_000)), Pull::Data { wire: sse::PING.to_owned().into(), last: false });
        assert_eq!(rs.pull(busy, Timestamp(20_000)), Pull::Pending);
        assert_eq!(rs.next_due(), Some(Timestamp(21_000)));
        // A frame that arrives before the woken reader pulls goes out instead of the ping.
        assert_eq!(rs.wake_due(Timestamp(21_000)), vec![idle]);
        rs.fan_out(chunk(1, "b"), stale, Timestamp(21_001));
        assert_eq!(rs.pull(idle, Timestamp(21_002)), Pull::Data { wire: sse::encode(&chunk(1, "b")).into(), last: false });
        assert_eq!(rs.pull(idle, Timestamp(21_002)), Pull::Pending);
        // A finished reader is never pinged.
        rs.finish_all(Frame::End { seq: Offset(2), status: EndStatus::Complete, error: None });
        assert!(matches!(rs.pull(idle, Timestamp(21_003)), Pull::Data { last: true, .. }));
        assert!(matches!(rs.pull(busy, Timestamp(21_003)), Pull::Data { last: true, .. }));
        assert_eq!(rs.next_due(), None);
        assert_eq!(rs.writes(), 6);
    }

    #[test]
    fn a_reader_whose_token_expires_is_ended_then_with_nothing_more() {
        let mut rs = Readers::new(16, true, NO_PACING, Millis(15_000));
        let id = rs.attach(Dialect::Events, vec![], Timestamp(0));
        rs.expire_at(id, Timestamp(6_000));
        assert_eq!(rs.pull(id, Timestamp(0)), Pull::Pending);
        assert_eq!(rs.next_due(), Some(Timestamp(6_000)), "before its ping");
        rs.fan_out(chunk(0, "a"), stale, Timestamp(5_999));
        assert!(matches!(rs.pull(id, Timestamp(5_999)), Pull::Data { .. }));
        assert_eq!(rs.pull(id, Timestamp(5_999)), Pull::Pending);
        assert_eq!(rs.wake_due(Timestamp(6_000)), vec![id]);
        assert_eq!(rs.live_count(), 0);
        assert_eq!(rs.pull(id, Timestamp(6_000)), Pull::Gone, "its body ends, with no ending frame");
        assert_eq!(rs.next_due(), None);
    }

    fn stale() -> Frame {
        Frame::Stale { floor_seq: Offset(0), durable_seq: Offset(0) }
    }

    #[test]
    fn a_pull_merges_queued_chunks_and_keeps_the_highest_durable() {
        let mut rs = Readers::new(16, true, NO_PACING, NO_KEEPALIVE);
        let id = rs.attach(Dialect::Events, vec![], Timestamp(0));
        rs.fan_out(chunk(0, "a😀"), stale, Timestamp(1));
        rs.fan_out(Frame::Durable { seq: Offset(1) }, stale, Timestamp(1));
        rs.fan_out(chunk(3, "b"), stale, Timestamp(1));
        rs.fan_out(Frame::Durable { seq: Offset(3) }, stale, Timestamp(1));
        let Pull::Data { wire, last } = rs.pull(id, Timestamp(1)) else { panic!("expected data") };
        assert!(!last);
        assert_eq!(wire, format!("{}{}", sse::encode(&chunk(0, "a😀b")), sse::encode(&Frame::Durable { seq: Offset(3) })));
        assert_eq!(rs.pull(id, Timestamp(1)), Pull::Pending);
    }

    #[test]
    fn without_merging_a_pull_sends_each_queued_frame_as_it_was_encoded() {
        let mut rs = Readers::new(16, false, NO_PACING, NO_KEEPALIVE);
        let id = rs.attach(Dialect::Events, vec![], Timestamp(0));
        rs.fan_out(chunk(0, "a😀"), stale, Timestamp(1));
        rs.fan_out(chunk(3, "b"), stale, Timestamp(1));
        let Pull::Data { wire, .. } = rs.pull(id, Timestamp(1)) else { panic!("expected data") };
        assert_eq!(wire, format!("{}{}", sse::encode(&chunk(0, "a😀")), sse::encode(&chunk(3, "b"))));
    }

    #[test]
    fn a_full_queue_ends_in_stale_and_frees_its_frames() {
        let mut rs = Readers::new(2, true, NO_PACING, NO_KEEPALIVE);
        let slow = rs.attach(Dialect::Events, vec![], Timestamp(0));
        rs.fan_out(chunk(0, "a"), stale, Timestamp(1));
        rs.fan_out(chunk(1, "b"), stale, Timestamp(1));
        let (_, dropped) = rs.fan_out(chunk(2, "c"), stale, Timestamp(1));
        assert_eq!(dropped, vec![slow]);
        assert_eq!(rs.live_count(), 0);
        assert_eq!(rs.pull(slow, Timestamp(1)), Pull::Data { wire: sse::encode(&stale()).into(), last: true });
        assert_eq!(rs.pull(slow, Timestamp(1)), Pull::Gone);
    }

    /// The text `[a, b)` of a text of `x`s.
    fn xs(a: Offset, b: Offset) -> String {
        "x".repeat((b.0 - a.0) as usize)
    }

    fn shared(replay: &[Replay]) -> Vec<Option<&Rc<SharedFrame>>> {
        replay.iter().map(|r| if let Replay::Shared(f) = r { Some(f) } else { None }).collect()
    }

    #[test]
    fn a_replay_chunk_is_encoded_once_and_shared_by_the_joins_at_its_offset_while_one_holds_it() {
        let mut rs = Readers::new(16, true, NO_PACING, NO_KEEPALIVE);
        let big = Offset(1 << 20);
        let first = rs.replay_text(Dialect::Events, Offset(0), big, xs);
        let again = rs.replay_text(Dialect::Events, Offset(0), big, |_, _| panic!("no text read: shared"));
        assert!(Rc::ptr_eq(shared(&first)[0].unwrap(), shared(&again)[0].unwrap()), "one encoding for both");
        // Text produced since: the shared chunk, and a small one of the join's own.
        let grown = rs.replay_text(Dialect::Events, Offset(0), big + Offset(10), xs);
        assert!(Rc::ptr_eq(shared(&grown)[0].unwrap(), shared(&first)[0].unwrap()));
        assert!(matches!(&grown[1], Replay::Frame(Frame::Chunk { from, seq, .. }) if (*from, *seq) == (big, big + Offset(10))));
        // Another offset, or another dialect: a chunk of their own.
        let elsewhere = rs.replay_text(Dialect::Events, Offset(5), big, xs);
        assert!(!Rc::ptr_eq(shared(&elsewhere)[0].unwrap(), shared(&first)[0].unwrap()));
        let ui = rs.replay_text(Dialect::Ui, Offset(0), big, xs);
        assert!(!Rc::ptr_eq(shared(&ui)[0].unwrap(), shared(&first)[0].unwrap()));
        // Nobody holds a chunk any more: it is gone (never kept for joins that may not come).
        let weak = Rc::downgrade(shared(&ui)[0].unwrap());
        drop(ui);
        assert!(weak.upgrade().is_none());
        // Much text since: the join's chunk is encoded whole, and shared in turn.
        let far = big + Offset(SHARED_TAIL_BYTES as u64 + 1);
        let (held, fresh) = (first, rs.replay_text(Dialect::Events, Offset(0), far, xs));
        assert_eq!(fresh.len(), 1);
        assert!(!Rc::ptr_eq(shared(&fresh)[0].unwrap(), shared(&held)[0].unwrap()));
        let next = rs.replay_text(Dialect::Events, Offset(0), far, |_, _| panic!("shared"));
        assert!(Rc::ptr_eq(shared(&next)[0].unwrap(), shared(&fresh)[0].unwrap()));
    }

    #[test]
    fn a_large_frame_goes_out_alone_as_the_bytes_every_reader_shares() {
        let mut rs = Readers::new(16, true, NO_PACING, NO_KEEPALIVE);
        let text = rs.replay_text(Dialect::Events, Offset(0), Offset(ALONE_BYTES as u64), xs);
        let big = Rc::clone(shared(&text)[0].unwrap());
        let open = Frame::Open { stream_id: "s".into(), from: Offset(0), seq: Offset(0), durable_seq: Offset(0), ended: false };
        let replay = |text: Vec<Replay>| {
            let mut r = vec![Replay::from(open.clone())];
            r.extend(text);
            r.push(Frame::Durable { seq: Offset(3) }.into());
            r
        };
        let a = rs.attach(Dialect::Events, replay(text), Timestamp(0));
        let b = rs.attach(Dialect::Events, replay(vec![Replay::Shared(Rc::clone(&big))]), Timestamp(0));
        for id in [a, b] {
            let Pull::Data { wire, .. } = rs.pull(id, Timestamp(1)) else { panic!("the open") };
            assert!(wire.as_str().contains("\"type\":\"open\""), "{}", wire.as_str());
            let Pull::Data { wire, .. } = rs.pull(id, Timestamp(1)) else { panic!("the text") };
            assert!(wire.shared_frame().is_some_and(|(f, _)| Rc::ptr_eq(f, &big)), "the shared bytes, alone");
            let Pull::Data { wire, .. } = rs.pull(id, Timestamp(1)) else { panic!("the durable") };
            assert_eq!(wire.as_str(), "data: {\"type\":\"durable\",\"seq\":3}\n\n");
        }
    }

    #[test]
    fn a_frame_is_encoded_once_for_each_dialect_that_has_readers() {
        let mut rs = Readers::new(16, true, NO_PACING, NO_KEEPALIVE);
        let events = rs.attach(Dialect::Events, vec![], Timestamp(0));
        rs.fan_out(chunk(0, "{\"type\":\"a\"}\n"), stale, Timestamp(1));
        let only_events = &rs.readers[&events].queue[0];
        assert!(only_events.events.get().is_some() && only_events.ui.get().is_none(), "no ui reader, no ui encoding");
        let ui = rs.attach(Dialect::Ui, vec![], Timestamp(0));
        rs.fan_out(chunk(13, "{\"type\":\"b\"}\n"), stale, Timestamp(1));
        let (a, b) = (&rs.readers[&events].queue[1], &rs.readers[&ui].queue[0]);
        assert!(Rc::ptr_eq(a, b), "one frame shared by the readers of both dialects");
        assert!(a.events.get().is_some() && a.ui.get().is_some());
        assert_eq!(rs.pull(ui, Timestamp(1)), Pull::Data { wire: "id: 26\ndata: {\"type\":\"b\"}\n\n".to_owned().into(), last: false });
    }

    #[test]
    fn an_offer_to_a_parked_reader_wakes_it_once() {
        let mut rs = Readers::new(8, true, NO_PACING, NO_KEEPALIVE);
        let id = rs.attach(Dialect::Events, vec![], Timestamp(0));
        assert_eq!(rs.pull(id, Timestamp(1)), Pull::Pending);
        assert_eq!(rs.fan_out(chunk(0, "a"), stale, Timestamp(1)).0, vec![id]);
        assert!(rs.fan_out(chunk(1, "b"), stale, Timestamp(1)).0.is_empty());
        let end = Frame::End { seq: Offset(2), status: EndStatus::Complete, error: None };
        rs.finish_all(end.clone());
        let Pull::Data { wire, last } = rs.pull(id, Timestamp(1)) else { panic!() };
        assert!(last);
        assert!(wire.ends_with(&sse::encode(&end)));
    }
}
