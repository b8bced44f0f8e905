//! The revival (SPEC §10) as a sans-IO machine, [`Revival`]: a fresh instance of an object whose
//! stream was lost while `streaming` (a deploy, an eviction, a crash) rebuilds it. The lease
//! alarm and a request that wakes the instance drive this same machine (the shell in
//! `edge/stream/revive.rs`, the simulator in `tests/simulator.rs`), so what the simulator proves is
//! what runs.
//!
//! ```text
//!   ReadKeys (the object's storage, one call) ── nothing armed ─────────▶ Nothing(NothingArmed)
//!   ReadRow (durable text and host, one snapshot):
//!       no row ─────────────────────────────────────────────────────────▶ Nothing(NoRow)
//!       not `streaming`, its open's mark may still land ────────────────▶ MarkMayBeInFlight
//!       not `streaming` ────────────────────────────────────────────────▶ Nothing(NotStreaming)
//!       a host column, held by a token that is not this object's ───────▶ Nothing(NotOurs)
//!   host column mapped: WriteKeys(claiming = a fresh token), then
//!       ClaimHost(the token it holds → the fresh one) ── lost ───────────▶ Nothing(NotOurs)
//!   WriteKeys(hostToken, the window) ──▶ Revived(the stream, live at the durable text)
//!   any step fails or times out ────────────────────────────────────────▶ Failed
//! ```
//!
//! The fresh token is stored before the claim: an instance lost after its claim committed but
//! before it stored the outcome leaves the next revival both tokens to recognize. Each claimant
//! draws its own token, so two claimants from one token cannot both win. A failed step never
//! seals: the alarm renews the lease and tries again (a request answers 503); only the rebuilt
//! stream's window seals, through the stream's one sealer.

use super::lease::{mark_window, HostColumn, LeaseRow, Release};
use super::outbox::Outbox;
use super::resume::{Rehydration, Window, FIRST_EPOCH};
use super::stream::LiveStream;
use crate::engine::host::config::StreamConfig;
use crate::engine::host::object_storage::{KeyUpdate, StoredStream};
use crate::engine::host::store::{ClaimHost, OpId, ReadLeaseRow, Reply, StoreAnswer, StoreError, StoreRequest};
use crate::engine::host::time::Timestamp;
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
}

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
    keys: StoredStream,
    row: Option<LeaseRow>,
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
            keys: StoredStream::default(),
            row: None,
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
            (Step::ReadingRow(op), Reply::LeaseRow(result)) if op == answer.id => match result {
                Ok(row) => self.judge_row(row, now),
                Err(e) => self.finish(RevivalEnd::Failed(RevivalFailure::Store(e))),
            },
            (Step::Claiming(op), Reply::Host(result)) if op == answer.id => match result {
                Ok(holder) if holder.as_deref() == Some(self.fresh_token.as_str()) => {
                    self.host_token = Some(self.fresh_token.clone());
                    self.store_outcome(now);
                }
                Ok(holder) => self.finish(RevivalEnd::Nothing(Release::NotOurs { holder })),
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
                let old = self.held_token().unwrap_or_default();
                let op = self.out.request(ClaimHost { old, new: self.fresh_token.clone() });
                self.step = Step::Claiming(op);
            }
            (Step::StoringOutcome, Ok(())) => self.install(now),
            _ => {}
        }
    }

    fn held_token(&self) -> Option<String> {
        match &self.row {
            Some(LeaseRow { host: HostColumn::Holds(holder), .. }) => holder.clone(),
            _ => None,
        }
    }

    /// The row decides whether there is a stream to rebuild, and whose it is.
    fn judge_row(&mut self, row: LeaseRow, now: Timestamp) {
        let Some(durable) = &row.durable else { return self.finish(RevivalEnd::Nothing(Release::NoRow)) };
        if durable.status != STATUS_STREAMING {
            let not_yet_marked = EndStatus::parse(&durable.status).is_none();
            if not_yet_marked && self.keys.armed_at.is_some_and(|at| now < at + mark_window(&self.cfg)) {
                return self.finish(RevivalEnd::MarkMayBeInFlight);
            }
            return self.finish(RevivalEnd::Nothing(Release::NotStreaming { status: durable.status.clone() }));
        }
        let claim = match &row.host {
            HostColumn::Unmapped => false,
            HostColumn::Holds(holder) => {
                let ours = [&self.keys.host_token, &self.keys.claiming];
                if ours.iter().all(|t| t.is_none()) {
                    return self.finish(RevivalEnd::Nothing(Release::TokenUnknown));
                }
                if holder.is_none() || !ours.iter().any(|t| t.is_some() && t.as_deref() == holder.as_deref()) {
                    return self.finish(RevivalEnd::Nothing(Release::NotOurs { holder: holder.clone() }));
                }
                true
            }
        };
        self.host_token = self.keys.host_token.clone();
        self.row = Some(row);
        if claim {
            let held = self.held_token().unwrap_or_default();
            self.out.push(RevivalOutput::WriteKeys(KeyUpdate::claiming(&held, &self.fresh_token)));
            self.step = Step::StoringClaim;
        } else {
            self.store_outcome(now);
        }
    }

    /// Stores the claim's token and the window, before the stream exists.
    fn store_outcome(&mut self, now: Timestamp) {
        let window = Window::of(&self.cfg, self.keys.window, self.keys.last_write.or(self.keys.armed_at), now);
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
        };
        let stream = LiveStream::rehydrate(&stream_id, cfg, from, now);
        self.finish(RevivalEnd::Revived(Box::new(stream)));
    }

    fn finish(&mut self, end: RevivalEnd) {
        self.step = Step::Done;
        self.end = Some(end);
    }
}
