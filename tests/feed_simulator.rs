//! The chat feed's simulator (SPEC §11): a chat's answers, each a stream object that keeps and
//! sends its notices (`engine::feed::Notices`, as `src/edge/stream/announce.rs` drives it), and
//! the chat's feed object (`engine::feed::ChatFeed`, driven as `tests/support/feed.rs` says), in
//! seeded schedules where:
//!
//! - notices are lost on the way, lose their answer (the feed stored them), arrive twice, and
//!   arrive out of order between answers;
//! - either object is reset at any step (a stream object loses its notices in memory and sends
//!   them again from its keys at its next revival or lease alarm; the feed object reloads its
//!   history from storage and drops its readers);
//! - answers overlap, enough to push a start out of the bounded history while it is in flight;
//! - the feed forgets when idle, and readers come back with a position from before;
//! - readers cut and reconnect with their `Last-Event-ID`.
//!
//! Checked at the end of every schedule: each answer was announced exactly once (its `user` when
//! it had one, before its `start`, before its `end`, which says what its row says); every reader
//! got every event once and in order (a `reload` only when its position was truly gone, and then
//! exactly the history from there); every stream object released its lease only once its notices
//! were confirmed. `SIM_SEED=s` replays one schedule; `FEED_SCHEDULES=n` runs n (default 400).

#[path = "support/feed.rs"]
mod support_feed;

use rindle_streams::engine::feed::{Delivery, EventId, FeedConfig, FeedEvent, NoticeKind, NoticeOutput, Notices};
use rindle_streams::engine::host::object_storage::{KeyUpdate, StoredStream};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::lease::{AlarmOutput, Release};
use rindle_streams::engine::text::reading::DurableText;
use rindle_streams::engine::wire::frame::EndStatus;
use rindle_streams::engine::wire::ui::Format;
use support_feed::{ended, kinds, started, Event, Object, Rng, CHAT};

const LEASE: Millis = Millis(10_000);

/// One answer's stream object.
struct Answer {
    id: String,
    /// Its user message's id, when the open gave one.
    user: Option<String>,
    /// The lease's keys (`None` before the open and after the release).
    keys: Option<StoredStream>,
    /// The instance's notices (`None`: no instance; the object was reset).
    notices: Option<Notices>,
    /// Which instance this is: a reply to an earlier one's request is dropped.
    instance: u32,
    alarm_at: Option<Timestamp>,
    opened: bool,
    sealed: bool,
    released: bool,
}

/// A notice on its way to the feed.
struct Wire {
    answer: usize,
    instance: u32,
    kind: NoticeKind,
    notice: rindle_streams::engine::feed::FeedNotice,
}

/// A reader, as an `EventSource` is.
#[derive(Default)]
struct Reader {
    connected: bool,
    last_id: Option<String>,
    /// Everything it was handed since its last `reload` (or its first connection), data events only.
    segment: Vec<Event>,
    segments: Vec<Vec<Event>>,
}

/// What the schedules exercised, printed at the end (so a schedule that exercises nothing shows).
#[derive(Default, Debug)]
struct Seen {
    stream_resets: u64,
    feed_resets: u64,
    lost: u64,
    answers_lost: u64,
    doubled: u64,
    forgets: u64,
    reloads: u64,
    /// Steps where an answer in flight had left the history.
    beyond_window: u64,
}

struct World {
    /// Failed deliveries in a row, per notice.
    streaks: std::collections::HashMap<(usize, NoticeKind), u32>,
    seen: Seen,
    waves: usize,
    seed: u64,
    r: Rng,
    feed: Object,
    answers: Vec<Answer>,
    wire: Vec<Wire>,
    readers: Vec<Reader>,
}

impl World {
    fn fail(&self, what: String) -> ! {
        panic!("seed {}: {what} (rerun with SIM_SEED={})", self.seed, self.seed)
    }

    fn now(&self) -> Timestamp {
        self.feed.now
    }

    /// The row of answer `i`, as a revival reads it.
    fn row(&self, i: usize) -> Option<DurableText> {
        let (status, seq) = self.feed.table.get(&self.answers[i].id)?;
        let mut row = DurableText::assemble(&"x".repeat(*seq as usize), Vec::new(), status.clone());
        row.seq = rindle_streams::engine::text::utf16::Offset(*seq);
        Some(row)
    }

    /// Whatever answer `i`'s instance asks to send goes on the wire.
    fn drain(&mut self, i: usize) {
        let a = &mut self.answers[i];
        let Some(notices) = a.notices.as_mut() else { return };
        while let Some(output) = notices.poll_output() {
            match output {
                NoticeOutput::Send { kind, notice } => self.wire.push(Wire { answer: i, instance: a.instance, kind, notice }),
                NoticeOutput::Refused { .. } => panic!("seed {}: the feed refused a notice", self.seed),
                NoticeOutput::Told => {
                    if let Some(keys) = a.keys.as_mut() {
                        keys.apply(&KeyUpdate::told());
                    }
                }
            }
        }
    }

    /// Answer `i`'s object has no instance: a fresh one reads its keys and its row (a revival),
    /// and sends again what it may not have told.
    fn wake(&mut self, i: usize) {
        if self.answers[i].notices.is_some() {
            return;
        }
        let row = self.row(i);
        let now = self.now();
        let a = &mut self.answers[i];
        a.instance += 1;
        let mut notices = Notices::default();
        if let Some(keys) = &a.keys {
            notices.revived(keys, row.as_ref(), now);
        }
        a.notices = Some(notices);
        self.drain(i);
    }

    fn open(&mut self, i: usize) {
        let now = self.now();
        let user = self.r.chance(0.7).then(|| format!("u{i}"));
        let notice = started(&self.answers[i].id.clone(), user.as_deref());
        let user_message = match &notice {
            rindle_streams::engine::feed::FeedNotice::Started { user_message, .. } => user_message.clone(),
            _ => None,
        };
        let a = &mut self.answers[i];
        a.user = user;
        // The keys are stored before the row is marked.
        a.keys = Some(StoredStream {
            stream_id: Some(a.id.clone()),
            chat: Some(CHAT.into()),
            format: Some(Format::Ui),
            user_message,
            ..StoredStream::default()
        });
        a.opened = true;
        a.alarm_at = Some(now + LEASE);
        self.feed.table.insert(a.id.clone(), ("streaming".into(), 0));
        a.instance += 1;
        let mut notices = Notices::default();
        // The open settles, unless the instance is lost right there (its revival sends it).
        if !self.r.chance(0.15) {
            notices.opened(notice, now);
            a.notices = Some(notices);
            self.drain(i);
        }
    }

    fn seal(&mut self, i: usize) {
        self.wake(i);
        let status = [EndStatus::Complete, EndStatus::Cancelled, EndStatus::Error, EndStatus::Interrupted][self.r.below(4) as usize];
        let seq = self.r.below(500);
        let now = self.now();
        let a = &mut self.answers[i];
        a.sealed = true;
        // The last renewal set the alarm a lease ahead at most (the linger waits for no timer).
        a.alarm_at = Some(now + LEASE);
        self.feed.table.insert(a.id.clone(), (status.as_str().into(), seq));
        // The seal committed; its notice may be lost with the instance before it is queued.
        if self.r.chance(0.15) {
            a.notices = None;
            return;
        }
        if let Some(n) = a.notices.as_mut() {
            n.sealed(ended(&a.id, status, seq), now);
        }
        self.drain(i);
    }

    /// The lease alarm of answer `i`: it renews while the answer streams, and once it has ended
    /// releases, if every notice is confirmed.
    fn alarm(&mut self, i: usize) {
        self.trace(|| format!("alarm a{i}"));
        self.wake(i);
        let now = self.now();
        let a = &mut self.answers[i];
        let notices = a.notices.as_mut().unwrap();
        notices.retry_now(now);
        if a.sealed {
            match notices.before_release(AlarmOutput::Release(Release::Sealed), now) {
                AlarmOutput::Release(_) => {
                    a.keys = None;
                    a.alarm_at = None;
                    a.released = true;
                }
                _ => a.alarm_at = Some(now + LEASE),
            }
        } else {
            a.alarm_at = Some(now + LEASE);
        }
        self.drain(i);
    }

    /// One notice off the wire: delivered, or lost; its answer reaches the instance that sent it,
    /// or is lost.
    fn deliver(&mut self, at: usize) {
        let w = self.wire.remove(at);
        let now = self.now();
        self.trace(|| format!("deliver {:?} of a{} (instance {})", w.kind, w.answer, w.instance));
        // Failures are transient: a notice that failed twice in a row gets through (a feed
        // unreachable for longer than its checks is announced from the table, without its user
        // message: docs/DESIGN.md, "The chat feed").
        let streak = self.streaks.entry((w.answer, w.kind)).or_default();
        let arrives = *streak >= 2 || !self.r.chance(0.2);
        if arrives {
            self.feed.notice(w.notice.clone());
            if self.r.chance(0.1) {
                self.seen.doubled += 1;
                self.feed.notice(w.notice.clone()); // a retry that crossed the first's answer
            }
        } else {
            self.seen.lost += 1;
        }
        let answered = arrives && (*streak >= 2 || !self.r.chance(0.15));
        *streak = if answered { 0 } else { *streak + 1 };
        self.seen.answers_lost += u64::from(arrives && !answered);
        let a = &mut self.answers[w.answer];
        if a.instance != w.instance {
            return; // the instance that sent it is gone
        }
        if let Some(n) = a.notices.as_mut() {
            let delivery = if answered { Delivery::Stored } else { Delivery::Failed("lost".into()) };
            n.handle_delivery(w.kind, delivery, now);
        }
        self.drain(w.answer);
    }

    /// Time passes: the feed's checks, the stream objects' retries and alarms.
    fn pass(&mut self, by: Millis) {
        // In steps of at most a second, each doing what is due (the retries, the alarms).
        let mut left = by;
        while left > Millis::ZERO {
            let step = left.min(Millis(1_000));
            left = Millis(left.0 - step.0);
            self.pass_step(step);
        }
    }

    fn pass_step(&mut self, by: Millis) {
        // A request is answered (or has failed) within the store timeout: nothing stays on the
        // wire while time passes.
        while !self.wire.is_empty() {
            let at = self.r.below(self.wire.len() as u64) as usize;
            self.deliver(at);
        }
        self.feed.tick(by);
        let now = self.now();
        for i in 0..self.answers.len() {
            if let Some(n) = self.answers[i].notices.as_mut() {
                if n.poll_timeout().is_some_and(|at| at <= now) {
                    n.handle_timeout(now);
                }
            }
            self.drain(i);
            if self.answers[i].alarm_at.is_some_and(|at| at <= now) {
                self.alarm(i);
            }
        }
    }

    /// A reader connects with its `Last-Event-ID`: a `reload` only when its position is gone.
    fn connect(&mut self, n: usize) {
        let after = self.readers[n].last_id.clone();
        let feed = self.feed.feed();
        let head = feed.head();
        let oldest = feed.events().next().map_or(head.n + 1, |(id, _)| id.n);
        let continues = after.as_deref().and_then(EventId::parse).is_none_or(|id| id.generation == head.generation && id.n + 1 >= oldest);
        let replay = self.feed.subscribe(after.as_deref());
        let reloaded = replay.first().is_some_and(|e| e.data["type"] == "reload");
        if reloaded == continues && after.is_some() {
            self.fail(format!("reader {n} at {after:?} (head {head}, oldest {oldest}): reload {reloaded}"));
        }
        if reloaded {
            self.seen.reloads += 1;
        }
        let reader = &mut self.readers[n];
        if reloaded {
            reader.segments.push(std::mem::take(&mut reader.segment));
        }
        reader.connected = true;
        reader.take(replay);
    }

    fn trace(&self, what: impl FnOnce() -> String) {
        if std::env::var("SIM_TRACE").is_ok() {
            eprintln!("{:>8} {}", self.now().0 % 10_000_000, what());
        }
    }

    fn step(&mut self, max_open: usize) {
        let before = self.feed.announced.len();
        let open = self.answers.iter().filter(|a| a.opened && !a.sealed).count();
        match self.r.below(20) {
            0..=2 => {
                // Answers come in waves: a wave starts once the one before is over (its leases
                // released), so the feed may forget between them.
                let next = self.answers.iter().position(|a| !a.opened);
                let wave = |i: usize| i * self.waves / self.answers.len();
                let ready = next.is_some_and(|i| self.answers.iter().enumerate().all(|(j, a)| wave(j) >= wave(i) || a.released));
                match next {
                    Some(i) if open < max_open && ready => self.open(i),
                    _ => {}
                }
            }
            3..=4 => {
                let streaming: Vec<usize> =
                    (0..self.answers.len()).filter(|&i| self.answers[i].opened && !self.answers[i].sealed).collect();
                if !streaming.is_empty() {
                    let i = streaming[self.r.below(streaming.len() as u64) as usize];
                    self.seal(i);
                }
            }
            5..=9 => {
                if !self.wire.is_empty() {
                    let at = self.r.below(self.wire.len() as u64) as usize;
                    self.deliver(at);
                }
            }
            10 => {
                let i = self.r.below(self.answers.len() as u64) as usize;
                self.trace(|| format!("reset a{i}"));
                self.answers[i].notices = None; // a stream object reset
                self.seen.stream_resets += 1;
            }
            11 => {
                self.feed.reset(); // the feed object reset: its readers' connections die with it
                self.seen.feed_resets += 1;
                self.readers.iter_mut().for_each(|r| r.connected = false);
            }
            12..=14 => {
                let by = Millis(self.r.below(4_000));
                self.pass(by);
            }
            15 => {
                // Idle: nothing in flight, nothing to tell: long enough for the feed to forget.
                // Or a long pause mid-answer (a tool call): the feed must not forget then.
                let quiet = self.answers.iter().all(|a| !a.opened || a.released);
                if quiet && self.wire.is_empty() || self.r.chance(0.3) {
                    let by = self.feed.cfg.idle_ms;
                    self.pass(by);
                }
            }
            _ => {
                let n = self.r.below(self.readers.len() as u64) as usize;
                if self.readers[n].connected {
                    self.readers[n].connected = false;
                } else {
                    self.connect(n);
                }
            }
        }
        let fresh = self.feed.announced[before..].to_vec();
        if !fresh.is_empty() {
            self.trace(|| format!("announced {:?}", kinds(&fresh)));
        }
        for reader in self.readers.iter_mut().filter(|r| r.connected) {
            reader.take(fresh.clone());
        }
        // An answer in flight (by what was announced) whose start the history no longer holds.
        let announced = &self.feed.announced;
        let in_flight = self.answers.iter().filter(|a| {
            let has = |t: &str| announced.iter().any(|e| e.data["type"] == t && e.data["streamId"] == a.id.as_str());
            has("start") && !has("end")
        });
        let in_flight: Vec<String> = in_flight.map(|a| a.id.clone()).collect();
        let feed = self.feed.feed();
        let shown: Vec<String> =
            feed.events().filter(|(_, e)| matches!(e, FeedEvent::Start { .. })).map(|(_, e)| e.stream_id().to_owned()).collect();
        if in_flight.iter().any(|s| !shown.contains(s)) {
            self.seen.beyond_window += 1;
        }
    }

    /// Everything ends: every answer sealed, every notice delivered, every lease released, every
    /// reader back.
    fn settle(&mut self) {
        // Every reader follows the end live.
        for n in 0..self.readers.len() {
            if !self.readers[n].connected {
                self.connect(n);
            }
        }
        for i in 0..self.answers.len() {
            if !self.answers[i].opened {
                self.open(i);
            }
            if !self.answers[i].sealed {
                self.seal(i);
            }
        }
        for round in 0.. {
            if round > 200 {
                let left: Vec<_> = self.answers.iter().filter(|a| !a.released).map(|a| a.id.clone()).collect();
                self.fail(format!("leases never released: {left:?}"));
            }
            if self.answers.iter().all(|a| a.released) && self.wire.is_empty() {
                break;
            }
            let before = self.feed.announced.len();
            while !self.wire.is_empty() {
                self.deliver(0);
            }
            self.pass(LEASE);
            let fresh = self.feed.announced[before..].to_vec();
            for reader in self.readers.iter_mut().filter(|r| r.connected) {
                reader.take(fresh.clone());
            }
        }
        // The feed's last checks, then every reader catches up.
        let before = self.feed.announced.len();
        self.pass(self.feed.cfg.verify_ms);
        self.pass(self.feed.cfg.verify_ms);
        let fresh = self.feed.announced[before..].to_vec();
        for reader in self.readers.iter_mut().filter(|r| r.connected) {
            reader.take(fresh.clone());
        }
        self.check_caught_up();
        // A reconnect now gets nothing new (or, if the feed forgot meanwhile, `reload`).
        for n in 0..self.readers.len() {
            self.readers[n].connected = false;
            let before = self.readers[n].segment.len();
            self.connect(n);
            if self.readers[n].segment.len() > before && self.readers[n].segments.is_empty() {
                self.fail(format!("reader {n} was caught up, and its reconnect got more"));
            }
        }
    }

    fn check_caught_up(&mut self) {
        let all = self.feed.announced.clone();
        // The feed may have forgotten since (nothing announced in its generation yet): a reader
        // told to reload then holds nothing of it.
        let head = self.feed.feed().head();
        let forgotten = head.n == 0;
        for (n, reader) in self.readers.iter().enumerate() {
            let caught_up = reader.segment.last() == all.last() || forgotten && reader.segment.is_empty();
            if !caught_up {
                self.fail(format!("reader {n} is not caught up: {:?}", kinds(&reader.segment)));
            }
        }
    }

    fn check(&self) {
        let all = &self.feed.announced;
        let at = |e: &Event| all.iter().position(|x| x == e);
        for a in &self.answers {
            let of = |t: &str| all.iter().filter(|e| e.data["type"] == t && e.data["streamId"] == a.id.as_str()).collect::<Vec<_>>();
            let (users, starts, ends) = (of("user"), of("start"), of("end"));
            if starts.len() != 1 || ends.len() != 1 || users.len() != usize::from(a.user.is_some()) {
                self.fail(format!("{}: {} user, {} start, {} end: {:?}", a.id, users.len(), starts.len(), ends.len(), kinds(all)));
            }
            if users.first().is_some_and(|u| at(u) > at(starts[0])) || at(ends[0]) < at(starts[0]) {
                self.fail(format!("{}: out of order: {:?}", a.id, kinds(all)));
            }
            let (status, seq) = &self.feed.table[&a.id];
            if ends[0].data["status"] != status.as_str() || ends[0].data["durableSeq"] != *seq {
                self.fail(format!("{}: ended {} but the row says {status} {seq}", a.id, ends[0].data));
            }
        }
        for (n, reader) in self.readers.iter().enumerate() {
            let segments = reader.segments.iter().chain([&reader.segment]).filter(|s| !s.is_empty());
            for segment in segments {
                // A contiguous run of what the feed announced: none missed, none twice, in order.
                let first = at(&segment[0]).unwrap_or_else(|| self.fail(format!("reader {n} got {:?}, never announced", segment[0])));
                if all.get(first..first + segment.len()) != Some(&segment[..]) {
                    self.fail(format!("reader {n} got {:?}\nthe feed announced {:?}", kinds(segment), kinds(&all[first..])));
                }
            }
        }
    }
}

impl Reader {
    fn take(&mut self, events: Vec<Event>) {
        for e in events {
            // An `EventSource`: an `id:` line sets its `Last-Event-ID` (an empty one clears it).
            if let Some(id) = &e.id {
                self.last_id = (!id.is_empty()).then(|| id.clone());
            }
            if e.data["type"] != "ready" && e.data["type"] != "reload" {
                self.segment.push(e);
            }
        }
    }
}

fn run(seed: u64) -> Seen {
    let mut r = Rng(seed);
    // A small history, so overlapping answers push starts out of it; checks every 3 leases.
    let history_events = 6 + r.below(8) as usize;
    let cfg = FeedConfig { history_events, history_bytes: 1 << 20, idle_ms: Millis(120_000), verify_ms: LEASE * 3, max_readers: 100 };
    let answers = 4 + r.below(10) as usize;
    let max_open = 1 + r.below(6) as usize;
    let waves = 1 + r.below(3) as usize;
    let mut w = World {
        streaks: Default::default(),
        waves,
        seen: Seen::default(),
        seed,
        r,
        feed: Object::with(cfg),
        answers: (0..answers)
            .map(|i| Answer {
                id: format!("a{i}"),
                user: None,
                keys: None,
                notices: None,
                instance: 0,
                alarm_at: None,
                opened: false,
                sealed: false,
                released: false,
            })
            .collect(),
        wire: Vec::new(),
        readers: (0..3).map(|_| Reader::default()).collect(),
    };
    for _ in 0..600 {
        w.step(max_open);
    }
    w.settle();
    w.check();
    w.seen.forgets = u64::from(w.feed.forgets);
    w.seen
}

#[test]
fn every_turn_reaches_every_reader_once_in_order_whatever_is_lost_or_reset() {
    let schedules: u64 = std::env::var("FEED_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(400);
    let seeds: Vec<u64> = match std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (1..=schedules).collect(),
    };
    let mut total = Seen::default();
    let n = seeds.len();
    for seed in seeds {
        let seen = run(seed);
        total.stream_resets += seen.stream_resets;
        total.feed_resets += seen.feed_resets;
        total.lost += seen.lost;
        total.answers_lost += seen.answers_lost;
        total.doubled += seen.doubled;
        total.forgets += seen.forgets;
        total.reloads += seen.reloads;
        total.beyond_window += seen.beyond_window;
    }
    eprintln!("{n} schedules: {total:?}");
    assert!(
        n < 50 || total.forgets > 0 && total.beyond_window > 0 && total.reloads > 0,
        "the schedules exercise forgetting and the window: {total:?}"
    );
}
