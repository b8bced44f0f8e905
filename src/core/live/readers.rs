//! The attached readers: one bounded queue each, frames encoded once and shared.
//!
//! A frame is serialized once when it is fanned out and the same bytes are queued for every
//! reader. A reader's queue is drained by [`Readers::pull`], which merges runs of queued chunk
//! frames into one, so a reader that falls a little behind catches up in one write. A reader
//! whose queue reaches the cap is dropped with `stale`: it costs itself a rejoin, never the
//! producer's memory.

use crate::core::frame::Frame;
use crate::core::sse;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

/// Names one attached reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReaderId(pub u64);

/// A frame with its SSE encoding, shared by every queue it sits in.
#[derive(Debug)]
pub struct SharedFrame {
    pub frame: Frame,
    pub wire: String,
}

impl SharedFrame {
    pub fn new(frame: Frame) -> Rc<Self> {
        let wire = sse::encode(&frame);
        Rc::new(Self { frame, wire })
    }
}

#[derive(Debug)]
struct Reader {
    queue: VecDeque<Rc<SharedFrame>>,
    /// A terminal frame is queued; nothing more will be offered.
    finished: bool,
    /// The last pull found nothing: the next offer must wake the shell.
    parked: bool,
}

/// What a pull produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Pull {
    /// SSE bytes to write. `last` is true when they end the subscription.
    Data { wire: String, last: bool },
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

#[derive(Debug)]
pub(crate) struct Readers {
    cap: usize,
    merge: bool,
    next_id: u64,
    readers: BTreeMap<ReaderId, Reader>,
}

impl Readers {
    /// `merge`: merge queued chunk frames at pull time (see [`merge_wire`]).
    pub fn new(cap: usize, merge: bool) -> Self {
        Self { cap, merge, next_id: 0, readers: BTreeMap::new() }
    }

    /// Readers still receiving live frames.
    pub fn live_count(&self) -> usize {
        self.readers.values().filter(|r| !r.finished).count()
    }

    /// Bytes of encoded frames queued across all readers, for memory accounting. A frame
    /// shared by several queues counts once per queue, so this is an upper bound.
    pub fn queued_bytes(&self) -> usize {
        self.readers.values().flat_map(|r| r.queue.iter()).map(|f| f.wire.len()).sum()
    }

    /// Registers a reader whose queue starts with `replay` (uncapped: a replay is bounded by
    /// construction). A replay ending in a terminal frame makes a finished reader.
    pub fn attach(&mut self, replay: Vec<Frame>) -> ReaderId {
        let id = ReaderId(self.next_id);
        self.next_id += 1;
        let finished = replay.last().is_some_and(Frame::is_terminal);
        let queue = replay.into_iter().map(SharedFrame::new).collect();
        self.readers.insert(id, Reader { queue, finished, parked: false });
        id
    }

    /// Queues `frame` for every live reader. Returns the readers to wake and those dropped
    /// because their queue was full (they get `stale_frame` instead and are finished).
    pub fn fan_out(&mut self, frame: Frame, stale_frame: impl Fn() -> Frame) -> (Vec<ReaderId>, Vec<ReaderId>) {
        let shared = SharedFrame::new(frame);
        let mut wake = Vec::new();
        let mut dropped = Vec::new();
        for (id, r) in self.readers.iter_mut().filter(|(_, r)| !r.finished) {
            if r.queue.len() >= self.cap {
                // The queued frames are useless to a reader told to rejoin: free them now.
                r.queue.clear();
                r.queue.push_back(SharedFrame::new(stale_frame()));
                r.finished = true;
                dropped.push(*id);
            } else {
                r.queue.push_back(Rc::clone(&shared));
            }
            if std::mem::take(&mut r.parked) {
                wake.push(*id);
            }
        }
        (wake, dropped)
    }

    /// Queues a terminal frame for every live reader (past the cap: it is the last one).
    pub fn finish_all(&mut self, frame: Frame) -> Vec<ReaderId> {
        let shared = SharedFrame::new(frame);
        let mut wake = Vec::new();
        for (id, r) in self.readers.iter_mut().filter(|(_, r)| !r.finished) {
            r.queue.push_back(Rc::clone(&shared));
            r.finished = true;
            if std::mem::take(&mut r.parked) {
                wake.push(*id);
            }
        }
        wake
    }

    /// Takes everything queued for `id` as one SSE write.
    pub fn pull(&mut self, id: ReaderId) -> Pull {
        let Some(r) = self.readers.get_mut(&id) else { return Pull::Gone };
        if r.queue.is_empty() {
            if r.finished {
                self.readers.remove(&id);
                return Pull::Gone;
            }
            r.parked = true;
            return Pull::Pending;
        }
        let frames: Vec<_> = r.queue.drain(..).collect();
        let last = r.finished;
        if last {
            self.readers.remove(&id);
        }
        let wire = if self.merge { merge_wire(&frames) } else { frames.iter().map(|f| f.wire.as_str()).collect() };
        Pull::Data { wire, last }
    }

    /// Forgets a reader (its client went away).
    pub fn detach(&mut self, id: ReaderId) {
        self.readers.remove(&id);
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
            [one] => out.push_str(&one.wire),
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
            out.push_str(&d.wire);
        }
    };
    for f in frames {
        match &f.frame {
            Frame::Chunk { .. } => run.push(f),
            Frame::Durable { .. } => durable = Some(f),
            _ => {
                flush(&mut out, &mut run, &mut durable);
                out.push_str(&f.wire);
            }
        }
    }
    flush(&mut out, &mut run, &mut durable);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::frame::EndStatus;

    fn chunk(from: u64, text: &str) -> Frame {
        Frame::Chunk { from, seq: from + crate::core::utf16::len(text), text: text.into() }
    }

    fn stale() -> Frame {
        Frame::Stale { floor_seq: 0, durable_seq: 0 }
    }

    #[test]
    fn a_pull_merges_queued_chunks_and_keeps_the_highest_durable() {
        let mut rs = Readers::new(16, true);
        let id = rs.attach(vec![]);
        rs.fan_out(chunk(0, "a😀"), stale);
        rs.fan_out(Frame::Durable { seq: 1 }, stale);
        rs.fan_out(chunk(3, "b"), stale);
        rs.fan_out(Frame::Durable { seq: 3 }, stale);
        let Pull::Data { wire, last } = rs.pull(id) else { panic!("expected data") };
        assert!(!last);
        assert_eq!(wire, format!("{}{}", sse::encode(&chunk(0, "a😀b")), sse::encode(&Frame::Durable { seq: 3 })));
        assert_eq!(rs.pull(id), Pull::Pending);
    }

    #[test]
    fn without_merging_a_pull_sends_each_queued_frame_as_it_was_encoded() {
        let mut rs = Readers::new(16, false);
        let id = rs.attach(vec![]);
        rs.fan_out(chunk(0, "a😀"), stale);
        rs.fan_out(chunk(3, "b"), stale);
        let Pull::Data { wire, .. } = rs.pull(id) else { panic!("expected data") };
        assert_eq!(wire, format!("{}{}", sse::encode(&chunk(0, "a😀")), sse::encode(&chunk(3, "b"))));
    }

    #[test]
    fn a_full_queue_ends_in_stale_and_frees_its_frames() {
        let mut rs = Readers::new(2, true);
        let slow = rs.attach(vec![]);
        rs.fan_out(chunk(0, "a"), stale);
        rs.fan_out(chunk(1, "b"), stale);
        let (_, dropped) = rs.fan_out(chunk(2, "c"), stale);
        assert_eq!(dropped, vec![slow]);
        assert_eq!(rs.live_count(), 0);
        assert_eq!(rs.pull(slow), Pull::Data { wire: sse::encode(&stale()), last: true });
        assert_eq!(rs.pull(slow), Pull::Gone);
    }

    #[test]
    fn an_offer_to_a_parked_reader_wakes_it_once() {
        let mut rs = Readers::new(8, true);
        let id = rs.attach(vec![]);
        assert_eq!(rs.pull(id), Pull::Pending);
        assert_eq!(rs.fan_out(chunk(0, "a"), stale).0, vec![id]);
        assert!(rs.fan_out(chunk(1, "b"), stale).0.is_empty());
        let end = Frame::End { seq: 2, status: EndStatus::Complete, error: None };
        rs.finish_all(end.clone());
        let Pull::Data { wire, last } = rs.pull(id) else { panic!() };
        assert!(last);
        assert!(wire.ends_with(&sse::encode(&end)));
    }
}
