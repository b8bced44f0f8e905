//! The revival (SPEC §10) as a sans-IO machine, [`Revival`]: a fresh instance of an object whose
//! stream was lost while `streaming` (a deploy, an eviction, a crash) rebuilds it. The lease
//! alarm and a request that wakes the instance drive this same machine (the shell in
//! `edge/stream/revive.rs`, the simulator in `tests/simulator.rs`), so what the simulator proves is
//! what runs.
//!
//! ```text
//!   ReadKeys (the object's storage, one call) ── nothing armed ─────────▶ Nothing(NothingArmed)
//!   ReadRow (durable text and host, one statement), judged:
//!       no row ─────────────────────────────────────────────────────────▶ Nothing(NoRow)
//!       not `streaming`, its open's mark may still land ────────────────▶ MarkMayBeInFlight
//!       not `streaming` ────────────────────────────────────────────────▶ Nothing(NotStreaming)
//!       a host column, held by a token this object never stored ────────▶ Nothing(NotOurs)
//!       no host column ─────────────────────────────────────────────────▶ rebuild from this read
//!   host column mapped: WriteKeys(claiming += a fresh token), then
//!       ClaimHost(the token the row holds → the fresh one), which answers the row after the
//!       claim, judged again:
//!           held by the fresh token ───────────────────────────────────▶ rebuild from this read
//!           held by another of this object's tokens (a lost revival's
//!           claim landed meanwhile) ────────────────────────────────────▶ ClaimHost from it again
//!   WriteKeys(hostToken, the window) ──▶ Revived(the stream, live at the durable text)
//!   any step fails or times out, or the row keeps moving ────────────────▶ Failed
//! ```
//!
//! **Every token it stored is its own.** Each revival's fresh token is stored before its claim
//! is sent, and kept (the newest [`MAX_CLAIMS`](crate::engine::host::object_storage::MAX_CLAIMS))
//! until a claim wins: a claim that timed out may still commit, even between a later revival's
//! read and its claim, and the row may then hold any of them. Each claimant draws its own token,
//! so two claimants from one token cannot both win.
//!
//! **The text comes from after the claim.** The stream is rebuilt from the row as the claim's own
//! transaction left it: every durable write is fenced by its host token, so nothing a lost
//! instance sent can land on the row after the claim, and the rebuilt text is the whole durable
//! text. A failed step never seals: the alarm renews the lease and tries again (a request answers
//! 503); only the rebuilt stream's window seals, through the stream's one sealer.

use super::lease::{mark_window, HostColumn, LeaseRow, Release};
use super::outbox::Outbox;
use super::resume::{Rehydration, Window, FIRST_EPOCH};
use super::stream::LiveStream;
use crate::engine::host::config::StreamConfig;
use crate::engine::host::object_storage::{KeyUpdate, StoredStream};
use crate::engine::host::store::{ClaimHost, OpId, ReadLeaseRow, Reply, StoreAnswer, StoreError, StoreRequest};
use crate::engine::host::time::Timestamp;
use crate::engine::text::reading::DurableText;
use crate::engine::wire::frame::{EndStatus, STATUS_STREAMING};
use thiserror::Error;

/// What the revival asks the host to do.
#[derive(Debug)]
pub enum RevivalOutput {
    /// Read every key of the object's storage ([`crate::engine::host::object_storage::KEYS`]);
    /// answer with [`Revival::handle_keys`].
    ReadKeys,
    /// A store operation (the row read, the claim); answer with [`Revival::handle_store`] (a
    /// call that times out answers `MayHaveCommitted`).
    Store(StoreRequest),
    /// Write to the object's storage; answer with [`Revival::handle_keys_written`].
    WriteKeys(KeyUpdate),
}

impl From<StoreRequest> for RevivalOutput {
    fn from(request: StoreRequest) -> Self {
        RevivalOutput::Store(request)
    }
}

/// How a revival ended.
#[derive(Debug)]
pub enum RevivalEnd {
    /// The stream is rebuilt: install it (it renews its lease and waits for its producer).
    Revived(Box<LiveStream>),
    /// Nothing here to rebuild: the lease guards nothing.
    Nothing(Release),
    /// The row is not `streaming` yet, but its open's mark may still commit: ask again later.
    MarkMayBeInFlight,
    /// A step failed or timed out: nothing was decided; try again later.
    Failed(RevivalFailure),
}

/// A revival step that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RevivalFailure {
    #[error("the object's storage failed: {0}")]
    Storage(String),
    #[error(transparent)]
    Store(StoreError),
    /// The row passed from one of this object's tokens to another at every claim: lost
    /// instances' claims are still landing. Tried again later, when they have.
    #[error("the row moved between this object's own tokens at each of {0} claims")]
    RowKeptMoving(u32),
}

/// How many claims one revival sends after the row moved to another of its own tokens.
const MAX_CLAIMS_SENT: u32 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    ReadingKeys,
    ReadingRow(OpId),
    StoringClaim,
    Claiming(OpId),
    StoringOutcome,
    Done,
}

/// One attempt to rebuild the stream.
#[derive(Debug)]
pub struct Revival {
    cfg: StreamConfig,
    /// The token this revival claims the row with (drawn at random by the host).
    fresh_token: String,
    /// The fresh token is stored among the object's own (before the first claim is sent).
    fresh_stored: bool,
    claims_sent: u32,
    keys: StoredStream,
    /// The row as last read; once judged ours, what the stream is rebuilt from.
    row: Option<LeaseRow>,
    /// The row as it was read, whatever it said (what a fresh instance tells its chat's feed).
    row_read: Option<DurableText>,
    host_token: Option<String>,
    window: Option<Window>,
    step: Step,
    out: Outbox<RevivalOutput>,
    end: Option<RevivalEnd>,
}

impl Revival {
    /// Starts a revival: the keys are read first. `fresh_token` must be unique to this attempt.
    pub fn start(cfg: StreamConfig, fresh_token: String) -> Self {
        let mut out = Outbox::default();
        out.push(RevivalOutput::ReadKeys);
        Self {
            cfg,
            fresh_token,
            fresh_stored: false,
            claims_sent: 0,
            keys: StoredStream::default(),
            row: None,
            row_read: None,
            host_token: None,
            window: None,
            step: Step::ReadingKeys,
            out,
            end: None,
        }
    }

    /// The stream the keys name (known once they were read).
    pub fn stream_id(&self) -> Option<&str> {
        self.keys.stream_id.as_deref()
    }

    pub fn poll_output(&mut self) -> Option<RevivalOutput> {
        self.out.pop()
    }

    /// The keys it read (empty before they were read).
    pub fn keys(&self) -> &StoredStream {
        &self.keys
    }

    /// The row's durable text and status, as it read them (`None` before the read, or no row).
    pub fn row(&self) -> Option<&DurableText> {
        self.row_read.as_ref()
    }

    /// How it ended, once it did (taken once).
    pub fn take_end(&mut self) -> Option<RevivalEnd> {
        self.end.take()
    }

    /// The keys, read (or not) from the object's storage.
    pub fn handle_keys(&mut self, keys: Result<StoredStream, String>) {
        if self.step != Step::ReadingKeys {
            return;
        }
        match keys {
            Err(e) => self.finish(RevivalEnd::Failed(RevivalFailure::Storage(e))),
            Ok(StoredStream { stream_id: None, .. }) => self.finish(RevivalEnd::Nothing(Release::NothingArmed)),
            Ok(keys) => {
                self.keys = keys;
                self.step = Step::ReadingRow(self.out.request(ReadLeaseRow));
            }
        }
    }

    /// A store answer to one of this revival's requests.
    pub fn handle_store(&mut self, answer: StoreAnswer, now: Timestamp) {
        match (self.step.clone(), answer.reply) {
            (Step::ReadingRow(op) | Step::Claiming(op), Reply::LeaseRow(result)) if op == answer.id => match result {
                Ok(row) => self.judge_row(row, now),
                Err(e) => self.finish(RevivalEnd::Failed(RevivalFailure::Store(e))),
            },
            _ => {} // an answer this revival no longer awaits (a late or duplicated reply)
        }
    }

    /// The object's storage answered a [`RevivalOutput::WriteKeys`].
    pub fn handle_keys_written(&mut self, result: Result<(), String>, now: Timestamp) {
        match (self.step.clone(), result) {
            (Step::StoringClaim | Step::StoringOutcome, Err(e)) => self.finish(RevivalEnd::Failed(RevivalFailure::Storage(e))),
            (Step::StoringClaim, Ok(())) => {
                self.fresh_stored = true;
                self.claim();
            }
            (Step::StoringOutcome, Ok(())) => self.install(now),
            _ => {}
        }
    }

    /// The row decides whether there is a stream to rebuild, and whose it is: after the first
    /// read, and again after each claim (which answers the row as it left it).
    fn judge_row(&mut self, row: LeaseRow, now: Timestamp) {
        self.row_read = row.durable.clone();
        let Some(durable) = &row.durable else { return self.finish(RevivalEnd::Nothing(Release::NoRow)) };
        if durable.status != STATUS_STREAMING {
            let not_yet_marked = EndStatus::parse(&durable.status).is_none();
            if not_yet_marked && self.keys.armed_at.is_some_and(|at| now < at + mark_window(&self.cfg)) {
                return self.finish(RevivalEnd::MarkMayBeInFlight);
            }
            return self.finish(RevivalEnd::Nothing(Release::NotStreaming { status: durable.status.clone() }));
        }
        let holder = match &row.host {
            HostColumn::Unmapped => {
                self.host_token = self.keys.host_token.clone();
                self.row = Some(row);
                return self.store_outcome(now);
            }
            HostColumn::Holds(holder) => holder.clone(),
        };
        if holder.as_deref() == Some(self.fresh_token.as_str()) {
            // Claimed: this read is from after the claim, under the fresh token.
            self.host_token = Some(self.fresh_token.clone());
            self.row = Some(row);
            return self.store_outcome(now);
        }
        if self.keys.own_tokens().next().is_none() {
            return self.finish(RevivalEnd::Nothing(Release::TokenUnknown));
        }
        let Some(ours) = holder.filter(|h| self.keys.own_tokens().any(|t| t == h)) else {
            return self.finish(RevivalEnd::Nothing(Release::NotOurs { holder: row.host_holder() }));
        };
        if self.claims_sent >= MAX_CLAIMS_SENT {
            return self.finish(RevivalEnd::Failed(RevivalFailure::RowKeptMoving(self.claims_sent)));
        }
        self.row = Some(LeaseRow { host: HostColumn::Holds(Some(ours)), ..row });
        if self.fresh_stored {
            self.claim();
        } else {
            self.out.push(RevivalOutput::WriteKeys(KeyUpdate::claiming(&self.keys, &self.fresh_token)));
            self.step = Step::StoringClaim;
        }
    }

    /// Claims the row from the token it was last seen holding (one of this object's).
    fn claim(&mut self) {
        let old = self.row.as_ref().and_then(LeaseRow::host_holder).unwrap_or_default();
        self.claims_sent += 1;
        let op = self.out.request(ClaimHost { old, new: self.fresh_token.clone() });
        self.step = Step::Claiming(op);
    }

    /// Stores the claim's token and the window, before the stream exists.
    fn store_outcome(&mut self, now: Timestamp) {
        let window = Window::of(&self.cfg, self.keys.window, self.keys.last_write, now);
        self.window = Some(window);
        let claimed = self.host_token.as_deref().filter(|t| *t == self.fresh_token);
        self.out.push(RevivalOutput::WriteKeys(KeyUpdate::revived(claimed, window)));
        self.step = Step::StoringOutcome;
    }

    fn install(&mut self, now: Timestamp) {
        let (Some(row), Some(window)) = (self.row.take(), self.window) else { return };
        let Some(durable) = row.durable else { return };
        let stream_id = self.keys.stream_id.clone().unwrap_or_default();
        let cfg = StreamConfig { format: self.keys.format.unwrap_or_default(), ..self.cfg.clone() };
        let from = Rehydration {
            durable,
            epoch: self.keys.epoch.unwrap_or(FIRST_EPOCH),
            granted_to: self.keys.producer.clone(),
            meta: self.keys.meta.clone(),
            window,
            host_token: self.host_token.clone(),
            last_write: self.keys.last_write,
            cancelled: row.cancel,
        };
        let stream = LiveStream::rehydrate(&stream_id, cfg, from, now);
        self.finish(RevivalEnd::Revived(Box::new(stream)));
    }

    fn finish(&mut self, end: RevivalEnd) {
        self.step = Step::Done;
        self.end = Some(end);
    }
}
