//! Where a reader starts: the reader side of the live stream. A join replays, in one step,
//! `open`, the text from its offset, a `durable` and (if ended) `end`, then registers the reader
//! for live frames, so no delta can fall between replay and live tail (SPEC §3). A reader
//! joining a rebuilt stream past its text is parked (attached, given nothing) until the re-sent
//! text reaches its offset, then served from exactly there; the stream's end releases it with
//! the text there is and the end. Queues, dialects, pacing and merging are the readers'
//! component (`live/readers.rs`).

use super::readers::{Dialect, Pull, ReaderId, Replay};
use super::stream::{LiveStream, Output, Phase};
use crate::engine::host::time::Timestamp;
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::{self, Offset};
use crate::engine::wire::frame::{EndStatus, Frame};

/// A reader that joined past the rebuilt text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parked {
    pub reader: ReaderId,
    pub dialect: Dialect,
    pub from: Offset,
}

impl LiveStream {
    /// Attaches an `/events` reader at UTF-16 offset `from` (see [`Self::subscribe_as`]).
    #[must_use = "a reader's frames queue until it is pulled or detached"]
    pub fn subscribe(&mut self, from: Offset) -> ReaderId {
        self.subscribe_as(Dialect::Events, from)
    }

    /// Attaches a reader of `dialect` at UTF-16 offset `from`: replays `open`, the text from
    /// there, a `durable` and (if ended) `end` in this one step, then registers it for live
    /// frames, so no delta can fall between replay and live tail. A `ui` reader joins at the
    /// start of the line holding `from`.
    #[must_use = "a reader's frames queue until it is pulled or detached"]
    pub fn subscribe_as(&mut self, dialect: Dialect, from: Offset) -> ReaderId {
        if matches!(self.phase, Phase::Retired) {
            return self.readers.attach(dialect, vec![Frame::Absent.into()], self.clock);
        }
        if let Some(parked) = self.park(dialect, from) {
            return parked;
        }
        let replay = self.replay(dialect, from);
        self.readers.attach(dialect, replay, self.clock)
    }

    /// What a reader joining at `from` is replayed: `open`, the text from there (a chunk shared
    /// with the joins before it, where one still holds it: `Readers::replay_text`), a `durable`
    /// and (if ended) `end`; `stale` when the text there is no longer held.
    pub(super) fn replay(&mut self, dialect: Dialect, from: Offset) -> Vec<Replay> {
        let ended = match &self.phase {
            // A reader that joins while the stream opens is attached (the text is empty so
            // far); it gets `absent` only if the open fails.
            Phase::Opening(_) | Phase::Live | Phase::Sealing(_) | Phase::Retired => None,
            Phase::Ended(ended) => Some(ended.seal.clone()),
        };
        let seq = self.seq();
        let wanted = from.min(seq);
        let at = match dialect {
            _ if wanted < self.buf.floor() => None,
            Dialect::Events => Some(self.buf.char_floor(wanted)),
            Dialect::Ui => self.buf.line_start(wanted),
        };
        let Some(at) = at else { return vec![self.stale_frame().into()] };
        let mut replay: Vec<Replay> = vec![Frame::Open {
            stream_id: self.stream_id().to_owned(),
            from: at,
            seq,
            durable_seq: self.durable_seq,
            ended: ended.is_some(),
        }
        .into()];
        if seq > at {
            let buf = &self.buf;
            replay.extend(self.readers.replay_text(dialect, at, seq, |a, b| buf.slice(a, b).to_owned()));
        }
        if self.durable_seq > at {
            replay.push(Frame::Durable { seq: self.durable_seq }.into());
        }
        if let Some(seal) = ended {
            replay.push(self.end_frame(&seal).into());
        }
        replay
    }

    /// Takes what is queued for a reader, as SSE bytes (`Pending` while it waits for data or
    /// for its pace; a wake output names it when it should pull again).
    pub fn pull(&mut self, reader: ReaderId, now: Timestamp) -> Pull {
        self.readers.pull(reader, now)
    }

    /// When `reader`, after a `Pending` pull, next needs a pull: when its pace has passed, or
    /// when it is due a keep-alive ping. The shell arms a timer for it (the stream's other
    /// deadlines are armed already).
    pub fn reader_due(&self, reader: ReaderId) -> Option<Timestamp> {
        self.readers.due_of(reader)
    }

    /// Ends `reader` at `at`, its token's `exp` (SPEC §11: no connection outlives its token): its
    /// body then ends with nothing more, and its client reconnects from its last `id:` with a
    /// fresh token, missing nothing.
    pub fn expire_reader(&mut self, reader: ReaderId, at: Timestamp) {
        self.readers.expire_at(reader, at);
    }

    /// A reader's client went away.
    pub fn detach(&mut self, reader: ReaderId) {
        self.readers.detach(reader);
    }

    // ---- what the rest of the stream calls

    /// A reader joining past the text of a rebuilt stream waits for it: attached with nothing
    /// queued. `None`: serve it now.
    pub(super) fn park(&mut self, dialect: Dialect, from: Offset) -> Option<ReaderId> {
        if !self.survival.rehydrated || from <= self.seq() || !matches!(self.phase, Phase::Live | Phase::Sealing(_)) {
            return None;
        }
        let reader = self.readers.attach_held(dialect, self.clock);
        self.parked.push(Parked { reader, dialect, from });
        Some(reader)
    }

    /// Releases the parked readers the text now reaches, each served from exactly its offset as
    /// a join would be. With `end` (the stream ends), all of them: each gets the text there is
    /// and the end, told (on `/ui`) that it holds lines past what was saved.
    pub(super) fn unpark(&mut self, end: Option<&Frame>) {
        if self.parked.is_empty() {
            return;
        }
        let seq = self.seq();
        let (due, waiting) = self.parked.drain(..).partition(|p| end.is_some() || p.from <= seq);
        self.parked = waiting;
        for Parked { reader, dialect, from } in due {
            let mut replay = self.replay(dialect, from);
            replay.extend(end.cloned().map(Replay::from));
            if self.readers.release(reader, replay, from) {
                self.out.push(Output::Wake(reader));
            }
        }
    }
}

/// What a reader joining an answer that ended is replayed when no live stream holds it any more
/// (its object slept after the seal, or retired it): the same frames a lingering stream replays,
/// from its row (`open`, the text from `from`, `durable`, `end`). `None` while the row has not
/// ended: then there is no answer to give but `absent`.
pub fn replay_of_row(stream_id: &str, row: &DurableText, from: Offset) -> Option<Vec<Frame>> {
    let status = EndStatus::parse(&row.status)?;
    let at = utf16::floor(&row.text, from.min(row.seq));
    let mut frames = vec![Frame::Open { stream_id: stream_id.to_owned(), from: at, seq: row.seq, durable_seq: row.seq, ended: true }];
    if row.seq > at {
        frames.push(Frame::Chunk { from: at, seq: row.seq, text: utf16::slice(&row.text, at, row.seq).to_owned() });
        frames.push(Frame::Durable { seq: row.seq });
    }
    frames.push(Frame::End { seq: row.seq, status, error: row.error.clone() });
    Some(frames)
}
