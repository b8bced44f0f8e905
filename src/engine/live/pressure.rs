//! The checkpoint cadence under the database's pressure (SPEC §13).
//!
//! One database serves every stream of an app, and D1 runs one query at a time: the writes a
//! second it gives are shared by all of them. A stream sees the pressure in its own round trips:
//! a quiet database answers within a network round trip and a few milliseconds; a busy one keeps
//! the call queued first. So every answer the stream gets (its open's probe, mark and host read,
//! then each checkpoint write) sets its **stretch**, by which both thresholds
//! (`CHECKPOINT_CHARS` or `UI_CHECKPOINT_CHARS`, and `CHECKPOINT_INTERVAL_MS`) are multiplied:
//! fewer, larger checkpoints, the same text.
//!
//! - **The stretch a round trip calls for**: 1 within `CHECKPOINT_SLOW_MS` (a quiet database:
//!   the cadence is exactly the configured one); past it, doubling with every half of
//!   `CHECKPOINT_SLOW_MS`, up to [`ROUND_TRIP_STRETCH_MAX`] (at the default interval a round every
//!   4.5 s: the text is never much more than 5 s from durable).
//! - **The stretch follows it through a low-pass filter over wall time**, from the stream's first
//!   answer on: up with a time constant of [`FOLLOW_UP`] (5 s), down with [`FOLLOW_DOWN`] (40 s).
//!   One answer's round trip says little (the queue it waited in swings from empty to full within
//!   a second, and each stream hears it once a round): following every sample made the streams'
//!   stretches scatter and swing together, and a stream that fell back at once came back with
//!   the others to a queue that had emptied only because they all stretched. Rising soon and
//!   falling slowly holds them together near what the database gives (measured with
//!   `bench/dbload.rs`: docs/LOAD.md, "Choosing the law").
//! - **An overload or a timeout** is the database saying it is past what it gives: at least
//!   twice the stretch before, beyond the round trips' cap, up to `CHECKPOINT_MAX_STRETCH`; the
//!   filter brings it back.
//!
//! Why it holds the database within what it gives: N streams at stretch s send about
//! N / (s × interval) checkpoints a second; as that nears what the database runs, its queue
//! grows, every stream's round trip grows with it, and each stretches until the queue stops
//! growing. The stretch is a function of the queue, not of a stream's history, so a stream that
//! opens while the database is busy starts stretched (its open's round trips).

use crate::engine::host::config::StreamConfig;
use crate::engine::host::time::{Millis, Timestamp};
use crate::engine::text::utf16::Offset;

/// The most the round trips alone stretch the cadence: 6 × 750 ms, a round every 4.5 s at the
/// default interval. Past it only the database's overload errors (and timeouts) stretch it.
pub const ROUND_TRIP_STRETCH_MAX: f64 = 6.0;

/// The time constants of the filter the stretch follows the round trips through: rising, and
/// falling.
pub const FOLLOW_UP: Millis = Millis(5_000);
pub const FOLLOW_DOWN: Millis = Millis(40_000);

/// Within this of 1, a stretch on its way back is 1: the configured cadence, exactly.
const SNAP: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cadence {
    /// The factor on both thresholds (1: as configured).
    stretch: f64,
    /// When the last answer was heard (the filter's clock).
    heard_at: Option<Timestamp>,
}

impl Default for Cadence {
    fn default() -> Self {
        Self { stretch: 1.0, heard_at: None }
    }
}

impl Cadence {
    /// The interval a round waits for, from the oldest un-checkpointed change.
    pub fn interval(&self, cfg: &StreamConfig) -> Millis {
        Millis((cfg.checkpoint_interval_ms.0 as f64 * self.stretch).round() as u64)
    }

    /// The characters behind at which a round is due.
    pub fn due_chars(&self, cfg: &StreamConfig) -> Offset {
        Offset((cfg.checkpoint_due_chars().0 as f64 * self.stretch).round() as u64)
    }

    /// The stretch as a factor (1.0: the configured cadence).
    pub fn stretch(&self) -> f64 {
        self.stretch
    }

    /// The database answered a call after `round_trip`, at `now`; `load` says the call failed for
    /// load (an overload, or no answer in time).
    pub fn observe(&mut self, round_trip: Millis, load: bool, cfg: &StreamConfig, now: Timestamp) {
        let most = f64::from(cfg.checkpoint_max_stretch.max(1));
        let slow = cfg.checkpoint_slow_ms.0.max(1) as f64;
        let past = round_trip.0 as f64 - slow;
        let called_for = if past > 0.0 { (2.0 * past / slow).exp2().min(ROUND_TRIP_STRETCH_MAX) } else { 1.0 };
        let followed = match self.heard_at {
            None => called_for,
            Some(before) => {
                let follow = if called_for > self.stretch { FOLLOW_UP } else { FOLLOW_DOWN };
                let share = 1.0 - (-((now - before).0 as f64) / follow.0 as f64).exp();
                self.stretch + (called_for - self.stretch) * share
            }
        };
        self.heard_at = Some(now);
        let stretch = if load { followed.max(self.stretch * 2.0) } else { followed };
        self.stretch = if stretch < 1.0 + SNAP { 1.0 } else { stretch.min(most) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> StreamConfig {
        StreamConfig::default()
    }

    /// Round trips heard `every` ms apart.
    fn after(round_trips: &[u64], every: u64) -> Cadence {
        let mut c = Cadence::default();
        for (i, &rt) in round_trips.iter().enumerate() {
            c.observe(Millis(rt), false, &cfg(), Timestamp(i as u64 * every));
        }
        c
    }

    #[test]
    fn a_quiet_database_keeps_the_configured_cadence_exactly() {
        let c = after(&[5, 40, 250, 120, 3], 750);
        assert_eq!((c.stretch(), c.interval(&cfg()), c.due_chars(&cfg())), (1.0, Millis(750), Offset(512)));
    }

    #[test]
    fn slow_round_trips_stretch_the_cadence_up_to_a_round_every_four_and_a_half_seconds() {
        let slow = after(&[500], 0); // a whole bound past it: four times, at once for a first answer
        assert_eq!((slow.interval(&cfg()), slow.due_chars(&cfg())), (Millis(3000), Offset(2048)));
        assert_eq!(after(&[5_000], 0).stretch(), ROUND_TRIP_STRETCH_MAX);
        // A stream at 1 hearing one slow answer moves a share of the way, by how long it waited.
        let one = after(&[10, 10, 500], 4_000);
        assert!(one.stretch() > 2.0 && one.stretch() < 3.0, "{}", one.stretch()); // 1 - e^(-4/5) of the way
                                                                                  // Sustained, it gets there.
        let sustained = after(&[500; 40], 4_000);
        assert!((sustained.stretch() - 4.0).abs() < 0.01, "{}", sustained.stretch());
    }

    #[test]
    fn a_quiet_database_brings_the_stretch_back_to_exactly_one() {
        let mut c = after(&[5_000], 0);
        let mut at = Timestamp(0);
        while c.stretch() > 1.0 {
            at = at + c.interval(&cfg());
            c.observe(Millis(10), false, &cfg(), at);
        }
        assert!(at < Timestamp(240_000), "back in {at:?}");
        assert_eq!(c.interval(&cfg()), Millis(750));
    }

    #[test]
    fn an_overload_doubles_the_stretch_past_the_round_trips_cap_and_a_fixed_cadence_never_moves() {
        let mut c = Cadence::default();
        for i in 0..4 {
            c.observe(Millis(20), true, &cfg(), Timestamp(i * 100));
        }
        assert!(c.stretch() >= 15.0 && c.stretch() <= 16.0, "{}", c.stretch());
        let fixed = StreamConfig { checkpoint_max_stretch: 1, ..cfg() };
        let mut f = Cadence::default();
        f.observe(Millis(9_000), true, &fixed, Timestamp(0));
        assert_eq!((f.interval(&fixed), f.due_chars(&fixed)), (Millis(750), Offset(512)));
    }
}
