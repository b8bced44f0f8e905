//! Fault injection for tests of the real runtime: which store operations to break, and how.
//!
//! Honoured only in a test configuration (the Worker refuses `TEST_FAULTS` unless `DEV_MODE`
//! is on; the default `wrangler.toml` sets neither). The spec string is
//! `rate=0.3;kinds=before,lost,readback;seed=7`:
//! - `before`: a checkpoint or seal write fails before anything commits;
//! - `lost`: a write commits, then its reply is lost (the caller sees a failure);
//! - `readback`: a post-checkpoint read-back fails.

use crate::core::live::StoreOp;
use std::cell::Cell;
use thiserror::Error;

/// How one operation is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    FailBeforeCommit,
    LoseReply,
    FailReadBack,
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
    readback: bool,
    state: Cell<u64>,
    injected: Cell<u64>,
}

impl FaultPlan {
    pub fn parse(spec: &str) -> Result<Self, BadFaultSpec> {
        let mut plan = FaultPlan { rate: 0.0, before: false, lost: false, readback: false, state: Cell::new(1), injected: Cell::new(0) };
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
                            "readback" => plan.readback = true,
                            other => return Err(BadFaultSpec(format!("kind {other:?} is not before, lost or readback"))),
                        }
                    }
                }
                other => return Err(BadFaultSpec(format!("key {other:?} is not rate, kinds or seed"))),
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

    /// The fault to inject into `op`, if any. Opening is left alone: the faults under test are
    /// those of a stream's checkpoints and seal.
    pub fn decide(&self, op: &StoreOp) -> Option<Fault> {
        let candidates: &[(bool, Fault)] = match op {
            StoreOp::Append { .. } | StoreOp::Seal(_) => &[(self.before, Fault::FailBeforeCommit), (self.lost, Fault::LoseReply)],
            StoreOp::ReadState => &[(self.readback, Fault::FailReadBack)],
            _ => &[],
        };
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
        let append = StoreOp::Append { from: 0, to: 1, text: "a".into() };
        let hits = (0..10_000).filter(|_| plan.decide(&append).is_some()).count();
        assert!((2_700..3_300).contains(&hits), "{hits} of 10000");
        assert_eq!(plan.decide(&StoreOp::ProbeOpen), None);
    }

    #[test]
    fn bad_specs_are_refused() {
        for bad in ["rate=2", "rate=x", "kinds=explode", "nonsense", "color=red"] {
            assert!(FaultPlan::parse(bad).is_err(), "{bad}");
        }
    }
}
