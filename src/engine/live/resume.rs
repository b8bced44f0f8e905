//! Surviving the object (SPEC §10): rehydration, the producer's resume and its fence, the
//! resume window, and readers parked past the rehydrated text.
//!
//! ```text
//!   LiveStream::open ──────────────▶ epoch 1, writes without an epoch admitted
//!   a new instance finds the row `streaming`:
//!   LiveStream::rehydrate(D) ──────▶ live at seq = durableSeq = D, lease armed, waiting:
//!       every write ──────────────────▶ ResumeRequired {seq, durableSeq}
//!       resume ───────────────────────▶ epoch + 1, seq = D (a line end for `ui`); writes flow
//!       the window passes ────────────▶ sealed `interrupted` (cause ResumeWindowExpired)
//!       a cancel ─────────────────────▶ sealed `cancelled`; a late resume learns it (Closed)
//!   resume on a live stream ───────▶ epoch + 1, its own seq; the replaced connection's
//!                                     writes get Superseded, never interleaved
//! ```
//!
//! A reader joining a rehydrated stream past its `seq` is parked (attached, given nothing)
//! until the re-sent text reaches its offset, then served from exactly there; the stream's
//! end releases it with the text there is and the end.

use super::readers::{Dialect, ReaderId};
use super::stream::{LiveStream, Output, Phase};
use crate::engine::host::hook::SealCause;
use crate::engine::host::store::SealGuard;
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::reading::DurableText;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, Frame};
use crate::engine::wire::ui::Format;
use thiserror::Error;

/// The producer epoch of a stream that was opened and never resumed.
pub const FIRST_EPOCH: u64 = 1;

/// The error sentence of a rehydrated stream whose producer never resumed.
pub fn window_expired_error(window: Millis) -> String {
    format!("the live stream was lost (its Durable Object was reset) and its producer did not resume within {} ms", window.0)
}

/// What a stream knows about surviving: its producer epoch and, once rehydrated, the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Survival {
    pub epoch: u64,
    /// A resume happened: a write without an epoch is no longer the current producer's.
    pub resumed: bool,
    /// This instance rebuilt the stream from the store.
    pub rehydrated: bool,
    /// Rehydrated and waiting for the producer's resume until then.
    pub window: Option<Timestamp>,
    /// Readers waiting for the text to reach their offset.
    pub parked: Vec<Parked>,
    /// The host token a rehydration claimed the row with (where a host column is mapped).
    pub host_token: Option<String>,
}

impl Survival {
    pub fn opened() -> Self {
        Self { epoch: FIRST_EPOCH, resumed: false, rehydrated: false, window: None, parked: Vec::new(), host_token: None }
    }

    /// The guard of a seal no producer stands behind.
    pub fn guard(&self) -> SealGuard {
        SealGuard { host_token: self.host_token.clone() }
    }
}

/// A reader that joined past the rehydrated text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parked {
    pub reader: ReaderId,
    pub dialect: Dialect,
    pub from: Offset,
}

/// What a fresh instance rebuilds a stream from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rehydration {
    /// The row's durable text (read in one statement), its status `streaming`.
    pub durable: DurableText,
    /// The producer epoch the lost instance stored last.
    pub epoch: u64,
    /// The app's `meta` from the open (the authorizer sees it).
    pub meta: Option<serde_json::Value>,
    /// The window an earlier rehydration of this stream started (stored by the object), so a
    /// second reset does not restart it; `None`: it starts now.
    pub resume_by: Option<Timestamp>,
    /// The token the rehydration claimed the row with (where a host column is mapped): the
    /// window's seal is guarded by it.
    pub host_token: Option<String>,
}

/// A write the fence refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Fenced {
    /// A resume replaced the connection this write came on (409 `superseded`).
    #[error("a newer producer connection (epoch {current}) replaced this one")]
    Superseded { current: u64 },
    /// The stream was rehydrated and waits for its producer's resume (409 `resume_required`).
    #[error("the stream was rehydrated at {seq}: resume first")]
    ResumeRequired { seq: Offset, durable_seq: Offset },
}

/// What a resume answers: where the producer continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeGrant {
    pub seq: Offset,
    pub durable_seq: Offset,
    pub format: Format,
    pub epoch: u64,
}

/// A resume that cannot be granted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ResumeRefused {
    #[error("the stream is not open here")]
    NotOpen,
    /// The stream is sealed (or sealing) with `status`.
    #[error("the stream is {}", status.as_str())]
    Closed { status: EndStatus, seq: Offset, durable_seq: Offset },
}

impl LiveStream {
    /// Rebuilds a stream a lost instance held, from the row's durable text: live at
    /// `seq = durableSeq = D`, the durable text as the start of its buffer, the lease armed
    /// (renewed at once), and waiting for its producer's resume until the window passes.
    #[must_use = "the stream must be driven"]
    pub fn rehydrate(stream_id: &str, cfg: crate::engine::host::config::StreamConfig, from: Rehydration, now: Timestamp) -> Self {
        let window = from.resume_by.unwrap_or(now + cfg.resume_window_ms);
        let mut stream = Self::new_live(stream_id, cfg, from.meta, now);
        let (_, seq) = stream.buf.push(&from.durable.text);
        stream.durable_seq = seq;
        if let Some(retain) = stream.cfg.retain_chars {
            stream.buf.trim_below(seq.saturating_sub(retain)); // as a checkpoint would (sink mode)
        }
        if stream.format() == Format::Ui {
            stream.readers.lines_entered(seq, crate::engine::wire::ui::holds(&from.durable.text));
        }
        stream.survival = Survival {
            epoch: from.epoch.max(FIRST_EPOCH),
            resumed: false,
            rehydrated: true,
            window: Some(window),
            parked: vec![],
            host_token: from.host_token,
        };
        stream.out.push(Output::RenewLease);
        stream.lease_renew_at = Some(now + stream.cfg.lease_ms / 2);
        stream
    }

    // ---- getters

    /// The current producer epoch.
    pub fn epoch(&self) -> u64 {
        self.survival.epoch
    }

    /// This instance rebuilt the stream from the store.
    pub fn rehydrated(&self) -> bool {
        self.survival.rehydrated
    }

    /// When a rehydrated stream seals `interrupted` unless its producer resumes first.
    pub fn resume_by(&self) -> Option<Timestamp> {
        self.survival.window
    }

    /// Whether a producer's write carrying `epoch` (`None`: no header) comes from the current
    /// connection. The shell asks in the same borrow as the write, so no resume falls between.
    pub fn admit(&self, epoch: Option<u64>) -> Result<(), Fenced> {
        if self.survival.window.is_some() && matches!(self.phase, Phase::Live) {
            return Err(Fenced::ResumeRequired { seq: self.seq(), durable_seq: self.durable_seq });
        }
        let current = self.survival.epoch;
        match epoch {
            None if !self.survival.resumed => Ok(()),
            Some(e) if e == current => Ok(()),
            _ => Err(Fenced::Superseded { current }),
        }
    }

    // ---- commands

    /// The producer (a new connection, or a new instance's first) takes over: a new epoch
    /// fences the connection it replaces, the window closes, and the answer says where to
    /// continue. A `ui` stream's unfinished line is dropped (the producer re-sends it), so
    /// `seq` is at a line end. Calling it again fences again and answers the same `seq`.
    pub fn resume(&mut self, now: Timestamp) -> Result<ResumeGrant, ResumeRefused> {
        match &self.phase {
            Phase::Live => {}
            Phase::Sealing(sealing) => return Err(self.closed(sealing.seal.status)),
            Phase::Ended { seal, .. } => return Err(self.closed(seal.status)),
            Phase::Opening(_) | Phase::Retired => return Err(ResumeRefused::NotOpen),
        }
        if let Some(assembler) = self.ui_lines.as_mut() {
            let _ = assembler.take_partial();
        }
        self.survival.epoch += 1;
        self.survival.resumed = true;
        self.survival.window = None;
        self.last_activity = now;
        self.clock = self.clock.max(now);
        Ok(ResumeGrant { seq: self.seq(), durable_seq: self.durable_seq, format: self.format(), epoch: self.survival.epoch })
    }

    fn closed(&self, status: EndStatus) -> ResumeRefused {
        ResumeRefused::Closed { status, seq: self.seq(), durable_seq: self.durable_seq }
    }

    // ---- what stream.rs calls

    /// A reader joining past the text of a rehydrated stream waits for it: attached with
    /// nothing queued. `None`: serve it now.
    pub(super) fn park(&mut self, dialect: Dialect, from: Offset) -> Option<ReaderId> {
        if !self.survival.rehydrated || from <= self.seq() || !matches!(self.phase, Phase::Live | Phase::Sealing(_)) {
            return None;
        }
        let reader = self.readers.attach_held(dialect, self.clock);
        self.survival.parked.push(Parked { reader, dialect, from });
        Some(reader)
    }

    /// Releases the parked readers the text now reaches, each served from exactly its offset as
    /// a join would be. With `end` (the stream ends), all of them: each gets the text there is
    /// and the end, told (on `/ui`) that it holds lines past what was saved.
    pub(super) fn unpark(&mut self, end: Option<&Frame>) {
        if self.survival.parked.is_empty() {
            return;
        }
        let seq = self.seq();
        let (due, waiting) = self.survival.parked.drain(..).partition(|p| end.is_some() || p.from <= seq);
        self.survival.parked = waiting;
        for Parked { reader, dialect, from } in due {
            let mut replay = self.replay(dialect, from);
            replay.extend(end.cloned());
            if self.readers.release(reader, replay, from) {
                self.out.push(Output::Wake(reader));
            }
        }
    }

    /// The resume window passed with no resume: seal `interrupted`.
    pub(super) fn window_due(&self, now: Timestamp) -> bool {
        matches!(self.phase, Phase::Live) && self.survival.window.is_some_and(|at| at <= now)
    }

    pub(super) fn expire_window(&mut self, now: Timestamp) {
        self.survival.window = None;
        let error = window_expired_error(self.cfg.resume_window_ms);
        let _ = self.interrupt(SealCause::ResumeWindowExpired, error, now);
    }

    /// A cancel that finds the stream waiting for its producer seals it: nobody would carry it
    /// to a producer, and the resume that comes learns it (409 `closed`, `cancelled`).
    pub(super) fn cancel_in_gap(&mut self) {
        if self.survival.window.take().is_some() && matches!(self.phase, Phase::Live) {
            let now = self.clock;
            let _ = self.seal(EndStatus::Cancelled, None, now);
        }
    }
}
