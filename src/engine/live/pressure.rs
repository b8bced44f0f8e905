//! The checkpoint cadence under the database's pressure (SPEC §13).
//!
//! One database serves every stream of an app, and D1 runs one query at a time: the writes a
//! second it gives are shared by all of them. A stream sees the pressure in its own round trips:
//! a quiet database answers a checkpoint within a network round trip and a few milliseconds; a
//! busy one keeps it queued first. So after every checkpoint write the stream sets its
//! **stretch**, by which both thresholds (`CHECKPOINT_CHARS` or `UI_CHECKPOINT_CHARS`, and
//! `CHECKPOINT_INTERVAL_MS`) are multiplied: fewer, larger checkpoints, the same text.
//!
//! - **Within `CHECKPOINT_SLOW_MS`** the database is quiet: the stretch falls back by a quarter of
//!   what it exceeds 1 by, a round, and at 1 the cadence is exactly the configured one.
//! - **Past it**, the stretch the round trip calls for: it doubles with every quarter of
//!   `CHECKPOINT_SLOW_MS` past the bound. The rise is steep so that the queue the streams hold
//!   between them stays short: a seal, an open or a flush waits behind little.
//! - **An overload or a timeout**: at least twice the stretch before.
//! - Never past `CHECKPOINT_MAX_STRETCH` (1: the cadence is fixed).
//!
//! Round trips are smoothed (each one averaged with the smoothed one before), so one slow
//! answer moves the stretch half as far. Why it holds the database within what it gives: N
//! streams at stretch s send about N / (s × interval) checkpoints a second; as that nears what
//! the database runs, its queue grows, every stream's round trip grows with it, and each
//! stretches until the queue is short again. The stretch is a function of the queue, not of a
//! stream's history, so a stream that starts while the database is busy takes the same stretch
//! after its first checkpoint.

use crate::engine::host::config::StreamConfig;
use crate::engine::host::time::Millis;
use crate::engine::text::utf16::Offset;

/// The stretch is kept in sixteenths: 16 is the configured cadence.
const ONE: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cadence {
    /// The stretch, in sixteenths.
    sixteenths: u32,
    /// The checkpoint round trips seen, smoothed.
    smoothed: Option<Millis>,
}

impl Default for Cadence {
    fn default() -> Self {
        Self { sixteenths: ONE, smoothed: None }
    }
}

impl Cadence {
    /// The interval a round waits for, from the oldest un-checkpointed change.
    pub fn interval(&self, cfg: &StreamConfig) -> Millis {
        Millis(cfg.checkpoint_interval_ms.0 * u64::from(self.sixteenths) / u64::from(ONE))
    }

    /// The characters behind at which a round is due.
    pub fn due_chars(&self, cfg: &StreamConfig) -> Offset {
        Offset(cfg.checkpoint_due_chars().0 * u64::from(self.sixteenths) / u64::from(ONE))
    }

    /// The stretch as a factor (1.0: the configured cadence).
    pub fn stretch(&self) -> f64 {
        f64::from(self.sixteenths) / f64::from(ONE)
    }

    /// A checkpoint write answered after `round_trip`; `load` says it failed for load (an
    /// overload, or no answer in time).
    pub fn observe(&mut self, round_trip: Millis, load: bool, cfg: &StreamConfig) {
        let most = cfg.checkpoint_max_stretch.max(1) * ONE;
        let smoothed = Millis(self.smoothed.map_or(round_trip.0, |before| (before.0 + round_trip.0) / 2));
        self.smoothed = Some(smoothed);
        let slow = cfg.checkpoint_slow_ms.0.max(1) as f64;
        let past = smoothed.0 as f64 - slow;
        let called_for = if past > 0.0 { (f64::from(ONE) * (4.0 * past / slow).exp2()).min(f64::from(most)) as u32 } else { ONE };
        let decayed = self.sixteenths - self.sixteenths.saturating_sub(ONE).div_ceil(4);
        let floor = if load { self.sixteenths * 2 } else { ONE };
        self.sixteenths = called_for.max(decayed).max(floor).clamp(ONE, most);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> StreamConfig {
        StreamConfig::default()
    }

    fn after(round_trips: &[u64]) -> Cadence {
        let mut c = Cadence::default();
        for &rt in round_trips {
            c.observe(Millis(rt), false, &cfg());
        }
        c
    }

    #[test]
    fn a_quiet_database_keeps_the_configured_cadence_exactly() {
        let c = after(&[5, 40, 250, 120, 3]);
        assert_eq!((c.interval(&cfg()), c.due_chars(&cfg())), (Millis(750), Offset(512)));
    }

    #[test]
    fn slow_round_trips_stretch_steeply_and_quiet_ones_bring_it_back() {
        let slow = after(&[375, 375]); // half a bound past it: four times
        assert_eq!((slow.interval(&cfg()), slow.due_chars(&cfg())), (Millis(3000), Offset(2048)));
        let capped = after(&[5_000]);
        assert_eq!(capped.stretch(), 16.0, "CHECKPOINT_MAX_STRETCH");
        let mut back = capped;
        let mut rounds = 0;
        while back.stretch() > 1.0 {
            back.observe(Millis(10), false, &cfg());
            rounds += 1;
        }
        assert!((10..=30).contains(&rounds), "{rounds} quiet rounds back to the configured cadence");
        assert_eq!(back.interval(&cfg()), Millis(750));
    }

    #[test]
    fn an_overload_doubles_the_stretch_and_a_fixed_cadence_never_moves() {
        let mut c = Cadence::default();
        c.observe(Millis(20), true, &cfg());
        c.observe(Millis(20), true, &cfg());
        assert_eq!(c.stretch(), 4.0);
        let fixed = StreamConfig { checkpoint_max_stretch: 1, ..cfg() };
        let mut f = Cadence::default();
        f.observe(Millis(9_000), true, &fixed);
        assert_eq!((f.interval(&fixed), f.due_chars(&fixed)), (Millis(750), Offset(512)));
    }
}
