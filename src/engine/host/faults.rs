//! Fault injection for tests of the real runtime: which store operations to break, and how.
//!
//! Compiled only into a build with the `test-faults` feature (the dev build), and honoured there
//! only with `DEV_MODE=1` (a production build refuses `TEST_FAULTS`). The spec string is
//! `rate=0.3;kinds=before,lost,readback;seed=7[;ops=mark]`:
//! - `before`: a write fails before anything commits (a read: fails);
//! - `lost`: a write commits, then its reply is lost (the caller sees a failure);
//! - `hold`: a write commits, then its reply never comes (the request hangs: a test kills the
//!   runtime between the commit and the reply);
//! - `readback`: a read-back fails (a checkpoint reads its row in its own transaction, so a
//!   separate read-back follows only a failed checkpoint write: pair it with `before` or `lost`);
//! - `ops` targets `before`, `lost` and `hold` at these operations (`probe`, `mark`,
//!   `readhost`, `append`, `readstate`, `seal`, `claim`: a revival's claim of the row, and
//!   `storage`: the read of the object's keys, where `before` fails it and `hold` never answers
//!   it; `notice`: a stream's notice to its chat's feed, where `before` never sends it, `lost`
//!   delivers it and loses the feed's answer, `hold` delivers it and never answers); without it
//!   they break checkpoints and seals.

use crate::engine::host::store::OpKind;
use std::cell::Cell;
use thiserror::Error;

/// How one operation is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    FailBeforeCommit,
    LoseReply,
    /// Commit, then never answer.
    HoldReply,
    FailReadBack,
}

/// A store operation, as `ops` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Probe,
    Mark,
    ReadHost,
    Append,
    ReadState,
    Seal,
    Claim,
    Storage,
    Notice,
}

impl Op {
    /// The operation a store call is for; `None` for the shell's own reads and writes (the
    /// durable text, the cancel flag), which no fault targets.
    fn of(op: OpKind) -> Option<Self> {
        Some(match op {
            OpKind::ProbeOpen => Op::Probe,
            OpKind::MarkStreaming => Op::Mark,
            OpKind::ReadHost => Op::ReadHost,
            OpKind::Checkpoint => Op::Append,
            OpKind::ReadState => Op::ReadState,
            OpKind::Seal => Op::Seal,
            OpKind::LeaseKeys => Op::Storage,
            OpKind::ClaimHost => Op::Claim,
            OpKind::FeedNotice => Op::Notice,
            OpKind::ReadDurable | OpKind::RequestCancel | OpKind::ReadChat => return None,
        })
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "probe" => Op::Probe,
            "mark" => Op::Mark,
            "readhost" => Op::ReadHost,
            "append" => Op::Append,
            "readstate" => Op::ReadState,
            "seal" => Op::Seal,
            "claim" => Op::Claim,
            "storage" => Op::Storage,
            "notice" => Op::Notice,
            _ => return None,
        })
    }
}

/// A malformed `TEST_FAULTS` spec.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("TEST_FAULTS {0}")]
pub struct BadFaultSpec(String);

/// Which faults to inject, at what rate, from a deterministic seed.
#[derive(Debug)]
pub struct FaultPlan {
    rate: f64,
    before: bool,
    lost: bool,
    hold: bool,
    readback: bool,
    /// The operations `before`, `lost` and `hold` break.
    ops: Vec<Op>,
    state: Cell<u64>,
    injected: Cell<u64>,
}

impl FaultPlan {
    pub fn parse(spec: &str) -> Result<Self, BadFaultSpec> {
        let mut plan = FaultPlan {
            rate: 0.0,
            before: false,
            lost: false,
            hold: false,
            readback: false,
            ops: vec![Op::Append, Op::Seal],
            state: Cell::new(1),
            injected: Cell::new(0),
        };
        for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| BadFaultSpec(format!("part {part:?} is not key=value")))?;
            match key.trim() {
                "rate" => {
                    plan.rate = value
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|r| (0.0..=1.0).contains(r))
                        .ok_or_else(|| BadFaultSpec(format!("rate {value:?} is not between 0 and 1")))?
                }
                "seed" => plan.state.set(value.trim().parse().map_err(|_| BadFaultSpec(format!("seed {value:?} is not an integer")))?),
                "kinds" => {
                    for kind in value.split(',').map(str::trim) {
                        match kind {
                            "before" => plan.before = true,
                            "lost" => plan.lost = true,
                            "hold" => plan.hold = true,
                            "readback" => plan.readback = true,
                            other => return Err(BadFaultSpec(format!("kind {other:?} is not before, lost, hold or readback"))),
                        }
                    }
                }
                "ops" => {
                    plan.ops = value
                        .split(',')
                        .map(|op| {
                            Op::parse(op.trim()).ok_or_else(|| {
                                BadFaultSpec(format!(
                                    "op {op:?} is not probe, mark, readhost, append, readstate, seal, claim, storage or notice"
                                ))
                            })
                        })
                        .collect::<Result<_, _>>()?;
                }
                other => return Err(BadFaultSpec(format!("key {other:?} is not rate, kinds, ops or seed"))),
            }
        }
        Ok(plan)
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.get()
    }

    fn roll(&self) -> f64 {
        let mut z = self.state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.state.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault to inject into `op`, if any.
    pub fn decide(&self, op: OpKind) -> Option<Fault> {
        let op = Op::of(op)?;
        let targeted = self.ops.contains(&op);
        let candidates = [
            (targeted && self.before, Fault::FailBeforeCommit),
            (targeted && self.lost, Fault::LoseReply),
            (targeted && self.hold, Fault::HoldReply),
            (op == Op::ReadState && self.readback, Fault::FailReadBack),
        ];
        let enabled: Vec<Fault> = candidates.iter().filter(|(on, _)| *on).map(|(_, f)| *f).collect();
        if enabled.is_empty() || self.roll() >= self.rate {
            return None;
        }
        self.injected.set(self.injected.get() + 1);
        Some(enabled[(self.roll() * enabled.len() as f64) as usize % enabled.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_parses_and_injects_at_its_rate() {
        let plan = FaultPlan::parse("rate=0.3;kinds=before,lost,readback;seed=7").unwrap();
        let hits = (0..10_000).filter(|_| plan.decide(OpKind::Checkpoint).is_some()).count();
        assert!((2_700..3_300).contains(&hits), "{hits} of 10000");
        assert_eq!(plan.injected(), hits as u64, "every fault is counted (for /stats)");
        assert_eq!(plan.decide(OpKind::ProbeOpen), None, "without ops, the open is left alone");
        assert_eq!(plan.decide(OpKind::ReadDurable), None, "the shell's own reads are never broken");
    }

    #[test]
    fn ops_target_the_faults_at_one_operation() {
        let plan = FaultPlan::parse("rate=1;kinds=hold;ops=mark").unwrap();
        assert_eq!(plan.decide(OpKind::MarkStreaming), Some(Fault::HoldReply));
        assert_eq!(plan.decide(OpKind::ProbeOpen), None);
        assert_eq!(plan.decide(OpKind::Checkpoint), None);
        let storage = FaultPlan::parse("rate=1;kinds=before;ops=storage").unwrap();
        assert_eq!(storage.decide(OpKind::LeaseKeys), Some(Fault::FailBeforeCommit));
        assert_eq!(storage.decide(OpKind::Checkpoint), None);
        let lost = FaultPlan::parse("rate=1;kinds=lost;ops=mark,readhost").unwrap();
        assert_eq!(lost.decide(OpKind::ReadHost), Some(Fault::LoseReply));
        let notice = FaultPlan::parse("rate=1;kinds=before;ops=notice").unwrap();
        assert_eq!(notice.decide(OpKind::FeedNotice), Some(Fault::FailBeforeCommit));
        assert_eq!(notice.decide(OpKind::Seal), None);
    }

    #[test]
    fn bad_specs_are_refused() {
        for bad in ["rate=2", "rate=x", "kinds=explode", "nonsense", "color=red", "ops=everything"] {
            assert!(FaultPlan::parse(bad).is_err(), "{bad}");
        }
    }
}
