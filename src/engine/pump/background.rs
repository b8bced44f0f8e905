//! Background mode: an `openai-responses` pump whose request asked `"background": true`.
//!
//! The provider then generates the response whether or not our connection lives, numbers its
//! events (`sequence_number`) and serves them again after any one of them
//! (`GET /v1/responses/{id}?stream=true&starting_after=N`). So a pump that lost its connection,
//! or a fresh instance of the object after a reset, re-attaches instead of ending the answer:
//!
//! ```text
//!  live      Relay ──each event──▶ the response id, and a mark per event: (event N, the offset
//!            just past its text, the pump's state after it)
//!                 └─ poll_record(durableSeq) ──▶ BackgroundRecord (the shell stores it)
//!  re-attach Reattach::after_reset(record, durable text)  or  Relay::reattach (lost connection)
//!            ── call(): GET …/{id}?stream=true&starting_after=N ── handle_answer(status) ──▶
//!              2xx       a Relay that checks the replay against the text already written,
//!                        then pushes what comes after it
//!              404, 410  Retrieve ── call(): GET …/{id} ── handle_answer ──▶ the rest of a
//!                        completed text stream, or interrupted
//!              429, 5xx  Retry (a few times), then interrupted; anything else: interrupted
//! ```
//!
//! The rules, each tested below:
//! * The record names the credential's secret and never holds a key ([`super::secrets`]).
//! * The replay starts at a mark at least [`REPLAY_OVERLAP_UNITS`] below the durable length
//!   the mark was taken at, so there is always written text to compare it with. The replayed
//!   text is compared with the text already written (after a reset: the durable text; after a
//!   lost connection: everything this relay wrote) before anything is pushed past it. A
//!   difference, a gap in the sequence numbers, or a replay that ends before it reproduced the
//!   written text seals `interrupted` at the durable text: the text is never spliced.
//! * A mark carries the pump's conversion state after its event, so a `ui` stream's writer
//!   resumes with its parts open exactly as they were, and writes the same lines again.

use super::{Pump, PumpFailure, PumpRequest, PumpStep, UpstreamFormat};
use crate::engine::host::time::Millis;
use crate::engine::text::utf16::{self, Offset};
use crate::engine::wire::ui::Format;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;
use thiserror::Error;

/// The version of [`BackgroundRecord`]'s stored shape.
pub const RECORD_VERSION: u32 = 1;

/// How far below the durable length (UTF-16 units) a replay starts at least, when there is
/// that much text: what the replay check compares.
pub const REPLAY_OVERLAP_UNITS: Offset = Offset(256);

/// Re-attaches in a row that bring no new text before the pump gives up.
pub const MAX_REATTACHES: u32 = 3;

/// The first retry's delay after a refused re-attach (429, 5xx); each later one doubles.
pub const REATTACH_BACKOFF_MS: Millis = Millis(250);

/// The most marks kept between the stored mark and the newest event: a stream whose
/// checkpoints stall does not grow this without bound (the stored mark then stays older).
const MAX_PENDING_MARKS: usize = 4096;

/// What re-attaching to a background response needs, as the object stores it. It holds the
/// NAME of the credential's secret, never a key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackgroundRecord {
    pub version: u32,
    /// The Responses endpoint the response was created at, without its query
    /// (`https://api.openai.com/v1/responses`).
    pub endpoint: String,
    /// The Worker secret whose value is the credential, read again at each call.
    pub secret: Option<String>,
    pub response_id: String,
    /// The stream offset where the pump's first text went.
    pub base: Offset,
    /// Where a replay starts.
    pub mark: Mark,
}

/// A point a replay can start from: just after upstream event `after`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mark {
    /// The last event the replay skips (`starting_after`); `None`: replay every event.
    pub after: Option<u64>,
    /// The stream offset just past the text of the events up to `after`.
    pub offset: Offset,
    /// The pump's conversion state after event `after`.
    pub pump: Pump,
}

/// A request the shell sends upstream for a background pump. It names the credential's
/// secret; the shell reads the value and adds [`UpstreamCall::credential_header`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamCall {
    pub method: CallMethod,
    pub url: String,
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMethod {
    Get,
    Post,
}

impl UpstreamCall {
    /// The header that carries the secret's `value` (the Responses API's bearer token).
    pub fn credential_header(&self, value: &str) -> (&'static str, String) {
        UpstreamFormat::OpenAiResponses.credential_header(value)
    }
}

/// Why a re-attached pump cannot go on without a seam; the stream seals `interrupted` at its
/// durable text, and this is the row's error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Interruption {
    #[error("re-attaching the pump: the replay differs from the text already written at offset {at} (not spliced)")]
    ReplayDiffers { at: Offset },
    #[error("re-attaching the pump: the replay went from event {after:?} to event {got:?}, events are missing")]
    ReplaySkipped { after: Option<u64>, got: Option<u64> },
    #[error("re-attaching the pump: the replay ended {missing} UTF-16 units short of the text already written")]
    ReplayShort { missing: Offset },
    #[error("re-attaching the pump: its replay starts at offset {mark}, outside the durable text held ({from} to {to})")]
    DurableMissing { mark: Offset, from: Offset, to: Offset },
    #[error("re-attaching the pump: its stored record has version {0}, this code reads {RECORD_VERSION}")]
    UnknownRecord(u32),
    #[error("re-attaching the pump: the upstream answered HTTP {status}")]
    Refused { status: u16 },
    #[error("re-attaching the pump: the upstream no longer has the response (HTTP {status})")]
    Gone { status: u16 },
    #[error("re-attaching the pump: the replay expired and the stored response is {status}")]
    Expired { status: String },
    #[error("re-attaching the pump: the replay expired, and a ui stream is not rebuilt from a stored response")]
    ExpiredUi,
    #[error("re-attaching the pump: the stored response is unreadable: {0}")]
    Unreadable(String),
}

/// The pump's driver: a [`Pump`], plus in background mode what re-attaching needs, plus after
/// a re-attach the check of the replay against the text already written.
#[derive(Debug)]
pub struct Relay {
    pump: Pump,
    /// The stream offset just past the pump's text so far, in the pump's own reckoning (the
    /// replay check compares against the stream's text at these offsets).
    at: Offset,
    tracker: Option<Tracker>,
    check: Option<ReplayCheck>,
    push: String,
}

/// A background pump's bookkeeping: the response, the stored mark, and the marks it can move to.
#[derive(Debug)]
struct Tracker {
    endpoint: String,
    secret: Option<String>,
    base: Offset,
    response_id: Option<String>,
    mark: Mark,
    /// A mark per event after `mark`, oldest first.
    pending: VecDeque<Mark>,
    /// The pump's text after the mark (`[mark.offset, at)`): what a re-attach in place must see
    /// again.
    since_mark: String,
    /// Something new for the record: the response id, or a mark that moved.
    due: bool,
    /// Re-attaches since an event last brought new text.
    reattaches: u32,
}

/// A replay in progress: the text it must reproduce before anything more is pushed.
#[derive(Debug)]
struct ReplayCheck {
    /// Text already written that the replay has not reproduced yet.
    expected: String,
    /// The last event read; the next must be the one after it.
    last: Option<u64>,
}

impl Relay {
    /// The relay of a new pump into a stream of `stream_format` whose length is `offset`.
    pub fn new(req: &PumpRequest, stream_format: Format, stream_id: &str, offset: Offset) -> Self {
        let pump = Pump::for_stream(stream_format, req.format, stream_id);
        let tracker = req.background().then(|| Tracker {
            endpoint: req.redacted_url().trim_end_matches('/').to_owned(),
            secret: req.auth.as_ref().map(|a| a.secret.clone()),
            base: offset,
            response_id: None,
            mark: Mark { after: None, offset, pump: pump.clone() },
            pending: VecDeque::new(),
            since_mark: String::new(),
            due: false,
            reattaches: 0,
        });
        Relay { pump, at: offset, tracker, check: None, push: String::new() }
    }

    /// Whether this is a background pump (it can re-attach and must cancel upstream).
    pub fn background(&self) -> bool {
        self.tracker.is_some()
    }

    /// Feeds one upstream SSE event (`event` is its `event:` name, or empty).
    pub fn handle_event(&mut self, event: &str, data: &str) -> PumpStep {
        let step = self.pump.handle_event(event, data);
        let text = self.pump.take_push();
        let written_at = self.at;
        self.at += utf16::len(&text);
        let mut fresh = 0; // the byte where the text not written before starts
        if let Some(check) = &mut self.check {
            if let Err(gap) = check.follow(self.pump.cursor().and_then(|c| c.sequence)) {
                return PumpStep::Interrupted(gap);
            }
            match check.verify(&text, written_at) {
                Ok(start) => fresh = start,
                Err(differs) => return PumpStep::Interrupted(differs),
            }
            if step != PumpStep::Continue && !check.expected.is_empty() {
                return PumpStep::Interrupted(Interruption::ReplayShort { missing: utf16::len(&check.expected) });
            }
        }
        if let Some(tracker) = &mut self.tracker {
            tracker.handle_event(&self.pump, &text, self.at, fresh < text.len());
        }
        self.push.push_str(&text[fresh..]);
        step
    }

    /// What to push into the stream now: only text the stream has not had.
    pub fn take_push(&mut self) -> String {
        std::mem::take(&mut self.push)
    }

    /// The record to store now that `durable_seq` of the stream is durable: `Some` when the
    /// response id became known or the mark moved since the last one.
    pub fn poll_record(&mut self, durable_seq: Offset) -> Option<BackgroundRecord> {
        let tracker = self.tracker.as_mut()?;
        tracker.advance(durable_seq);
        let due = std::mem::take(&mut tracker.due);
        due.then(|| tracker.record()).flatten()
    }

    /// The upstream call that cancels the response (background mode, once its id is known).
    pub fn cancel_call(&self) -> Option<UpstreamCall> {
        self.tracker.as_ref()?.record().map(|r| r.cancel_call())
    }

    /// The response id, once the upstream named it (background mode).
    pub fn response_id(&self) -> Option<&str> {
        self.tracker.as_ref()?.response_id.as_deref()
    }

    /// The connection to the upstream was lost (a transport error, or the body ended before the
    /// response's final event): a background response is re-attached from the stored mark, and
    /// the replay checked against everything this relay wrote after it. `Err` gives the relay
    /// back when it cannot be (the pump then fails, as any pump whose connection is lost): not
    /// background, the response id not known yet, or [`MAX_REATTACHES`] in a row brought no new
    /// text.
    pub fn reattach(self) -> Result<Reattach, Box<Relay>> {
        match &self.tracker {
            Some(t) if t.response_id.is_some() && t.reattaches < MAX_REATTACHES => {}
            _ => return Err(Box::new(self)),
        }
        let Relay { tracker, check, .. } = self;
        let mut tracker = tracker.expect("checked above");
        tracker.reattaches += 1;
        // What a replay cut short still had to reproduce comes after what it did reproduce.
        let mut expected = std::mem::take(&mut tracker.since_mark);
        expected.push_str(&check.map(|c| c.expected).unwrap_or_default());
        tracker.pending.clear();
        Ok(Reattach::from_mark(tracker, expected))
    }
}

impl ReplayCheck {
    /// The replay's next event must be the one after the last.
    fn follow(&mut self, sequence: Option<u64>) -> Result<(), Interruption> {
        let next = self.last.map_or(0, |n| n + 1);
        match sequence {
            Some(n) if n == next => {
                self.last = Some(n);
                Ok(())
            }
            got => Err(Interruption::ReplaySkipped { after: self.last, got }),
        }
    }

    /// Compares an event's `text` (written at offset `at`) with what is expected: the byte of
    /// `text` where what was not written before starts, or where the two differ.
    fn verify(&mut self, text: &str, at: Offset) -> Result<usize, Interruption> {
        let n = self.expected.len().min(text.len());
        if self.expected.as_bytes()[..n] != text.as_bytes()[..n] {
            let same = self.expected.bytes().zip(text.bytes()).take_while(|(a, b)| a == b).count();
            let same = &text[..floor_char_boundary(text, same)];
            return Err(Interruption::ReplayDiffers { at: at + utf16::len(same) });
        }
        // Equal bytes up to the end of either string end on a character boundary of both.
        self.expected.drain(..n);
        Ok(n)
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl Tracker {
    fn handle_event(&mut self, pump: &Pump, text: &str, at: Offset, fresh: bool) {
        let cursor = pump.cursor();
        if self.response_id.is_none() {
            // The id goes into URLs: anything but an id's characters is not re-attachable.
            let id = cursor.and_then(|c| c.response_id.as_deref());
            if let Some(id) =
                id.filter(|id| !id.is_empty() && id.len() <= 256 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)))
            {
                self.response_id = Some(id.to_owned());
                self.due = true;
            }
        }
        self.since_mark.push_str(text);
        if fresh {
            self.reattaches = 0;
        }
        if let Some(after) = cursor.and_then(|c| c.sequence) {
            if self.pending.len() == MAX_PENDING_MARKS {
                self.pending.pop_front();
            }
            self.pending.push_back(Mark { after: Some(after), offset: at, pump: pump.clone() });
        }
    }

    /// Moves the mark to the last event at least [`REPLAY_OVERLAP_UNITS`] below `durable`.
    fn advance(&mut self, durable: Offset) {
        let target = durable.saturating_sub(REPLAY_OVERLAP_UNITS);
        let Some(last) = self.pending.iter().rposition(|m| m.offset <= target) else { return };
        let mark = self.pending.drain(..=last).next_back().expect("rposition found one");
        let cut = utf16::locate(&self.since_mark, mark.offset - self.mark.offset).byte;
        self.since_mark.drain(..cut);
        self.mark = mark;
        self.due = true;
    }

    fn record(&self) -> Option<BackgroundRecord> {
        Some(BackgroundRecord {
            version: RECORD_VERSION,
            endpoint: self.endpoint.clone(),
            secret: self.secret.clone(),
            response_id: self.response_id.clone()?,
            base: self.base,
            mark: self.mark.clone(),
        })
    }
}

impl BackgroundRecord {
    fn call(&self, method: CallMethod, path: &str) -> UpstreamCall {
        UpstreamCall { method, url: format!("{}/{}{path}", self.endpoint, self.response_id), secret: self.secret.clone() }
    }

    /// `POST {endpoint}/{id}/cancel`.
    pub fn cancel_call(&self) -> UpstreamCall {
        self.call(CallMethod::Post, "/cancel")
    }
}

/// A re-attach about to be sent: from a stored record after a reset, or from a relay that lost
/// its connection.
#[derive(Debug)]
pub struct Reattach {
    relay: Relay,
    record: BackgroundRecord,
}

/// What comes of a re-attach's answer.
#[derive(Debug)]
pub enum ReattachNext {
    /// Stream the answer's events through this relay.
    Relay(Relay),
    /// The replay is gone (expired): ask for the stored response.
    Retrieve(Retrieve),
    /// A passing refusal (429, 5xx): send the re-attach again after `after_ms`.
    Retry { reattach: Reattach, after_ms: Millis },
    /// Give up: seal `interrupted` at the durable text.
    Interrupt(Interruption),
}

impl Reattach {
    /// THE SEAM FOR REHYDRATION. A fresh instance of the object that rebuilt the stream from
    /// D1 and found `record` in its storage re-attaches with this. `durable_text` is the
    /// stream's durable text from offset `durable_from` (0 for the whole text) to the durable
    /// length; the replay's start (`record.mark.offset`) must lie within it, or the answer is
    /// `Err` (seal `interrupted`). Then send [`Self::call`] and feed its status to
    /// [`Self::handle_answer`].
    pub fn after_reset(record: BackgroundRecord, durable_from: Offset, durable_text: &str) -> Result<Self, Interruption> {
        if record.version != RECORD_VERSION {
            return Err(Interruption::UnknownRecord(record.version));
        }
        let to = durable_from + utf16::len(durable_text);
        let mark = record.mark.offset;
        if mark < durable_from || mark > to || utf16::floor(durable_text, mark - durable_from) != mark - durable_from {
            return Err(Interruption::DurableMissing { mark, from: durable_from, to });
        }
        let expected = utf16::slice(durable_text, mark - durable_from, to - durable_from).to_owned();
        let tracker = Tracker {
            endpoint: record.endpoint,
            secret: record.secret,
            base: record.base,
            response_id: Some(record.response_id),
            mark: record.mark,
            pending: VecDeque::new(),
            since_mark: String::new(),
            due: false,
            reattaches: 1,
        };
        Ok(Reattach::from_mark(tracker, expected))
    }

    fn from_mark(tracker: Tracker, expected: String) -> Self {
        let record = tracker.record().expect("a re-attach knows its response id");
        let relay = Relay {
            pump: tracker.mark.pump.clone(),
            at: tracker.mark.offset,
            check: Some(ReplayCheck { expected, last: tracker.mark.after }),
            tracker: Some(tracker),
            push: String::new(),
        };
        Reattach { relay, record }
    }

    /// `GET {endpoint}/{id}?stream=true[&starting_after=N]`.
    pub fn call(&self) -> UpstreamCall {
        let after = self.record.mark.after.map(|n| format!("&starting_after={n}")).unwrap_or_default();
        self.record.call(CallMethod::Get, &format!("?stream=true{after}"))
    }

    /// The record this re-attach works from (to cancel the response instead).
    pub fn record(&self) -> &BackgroundRecord {
        &self.record
    }

    /// The re-attach was answered `status`.
    pub fn handle_answer(self, status: u16) -> ReattachNext {
        match status {
            200..=299 => ReattachNext::Relay(self.relay),
            404 | 410 => ReattachNext::Retrieve(Retrieve { relay: self.relay, record: self.record }),
            408 | 429 | 500..=599 => {
                let tracker = self.relay.tracker.as_ref().expect("a re-attach tracks");
                if tracker.reattaches >= MAX_REATTACHES {
                    return ReattachNext::Interrupt(Interruption::Refused { status });
                }
                let after_ms = REATTACH_BACKOFF_MS * (1 << (tracker.reattaches - 1).min(10));
                let mut reattach = self;
                if let Some(t) = reattach.relay.tracker.as_mut() {
                    t.reattaches += 1;
                }
                ReattachNext::Retry { reattach, after_ms }
            }
            _ => ReattachNext::Interrupt(Interruption::Refused { status }),
        }
    }
}

/// The replay expired: the stored response (`GET {endpoint}/{id}`) may still finish a text
/// stream, checked against the written text like a replay.
#[derive(Debug)]
pub struct Retrieve {
    relay: Relay,
    record: BackgroundRecord,
}

/// What the stored response gave: text to push, then how the stream ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieved {
    pub push: String,
    pub step: PumpStep,
}

impl Retrieve {
    /// `GET {endpoint}/{id}`.
    pub fn call(&self) -> UpstreamCall {
        self.record.call(CallMethod::Get, "")
    }

    /// The stored response was answered `status` with `body`. A `completed` one finishes a
    /// `text` stream (its output text, checked against the written text); `failed` and
    /// `incomplete` do too, then fail it as the live pump would have; anything else
    /// (`in_progress`, `cancelled`, a `ui` stream, a refusal) is interrupted.
    pub fn handle_answer(self, status: u16, body: &[u8]) -> Retrieved {
        let interrupted = |i| Retrieved { push: String::new(), step: PumpStep::Interrupted(i) };
        match status {
            200..=299 => {}
            404 | 410 => return interrupted(Interruption::Gone { status }),
            _ => return interrupted(Interruption::Refused { status }),
        }
        if self.relay.pump.writes_ui() {
            return interrupted(Interruption::ExpiredUi);
        }
        let response: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return interrupted(Interruption::Unreadable(e.to_string())),
        };
        let state = response.get("status").and_then(Value::as_str).unwrap_or("unknown");
        let end = match state {
            "completed" => PumpStep::Complete,
            "failed" => {
                let message = response.pointer("/error/message").and_then(Value::as_str).unwrap_or("response.failed");
                PumpStep::Failed(PumpFailure::Upstream(message.to_owned()))
            }
            "incomplete" => {
                let reason = response.pointer("/incomplete_details/reason").and_then(Value::as_str).unwrap_or("response.incomplete");
                PumpStep::Failed(PumpFailure::Upstream(reason.to_owned()))
            }
            other => return interrupted(Interruption::Expired { status: other.to_owned() }),
        };
        let text = output_text(&response);
        let Relay { at, check, .. } = self.relay;
        let expected = check.map(|c| c.expected).unwrap_or_default();
        let from = at - self.record.base;
        let start = utf16::locate(&text, from);
        if start.unit != from {
            return interrupted(Interruption::ReplayShort { missing: utf16::len(&expected) });
        }
        let rest = &text[start.byte..];
        match rest.strip_prefix(expected.as_str()) {
            Some(push) => Retrieved { push: push.to_owned(), step: end },
            None if expected.starts_with(rest) => {
                interrupted(Interruption::ReplayShort { missing: utf16::len(&expected) - utf16::len(rest) })
            }
            None => {
                let mut check = ReplayCheck { expected, last: None };
                interrupted(check.verify(rest, at).err().unwrap_or(Interruption::ReplayDiffers { at }))
            }
        }
    }
}

/// The text of a Responses API response object: its messages' `output_text` parts in order
/// (what a text pump writes from the `response.output_text.delta` events).
fn output_text(response: &Value) -> String {
    let items = response.get("output").and_then(Value::as_array).into_iter().flatten();
    let messages = items.filter(|item| item.get("type").and_then(Value::as_str) == Some("message"));
    let parts = messages.flat_map(|m| m.get("content").and_then(Value::as_array).into_iter().flatten());
    parts
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("output_text"))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect()
}
