//! The load simulator (SPEC §13): random schedules of several answers at once on one modelled
//! database that is slow and turns calls away, in virtual time, each answer the engine's own
//! stream driven as the shell drives it (`tests/support/fleet.rs`), the statements run on real
//! SQLite at the moment the model of the database runs them.
//!
//! Each schedule draws a database (one lane or three; 1-40 ms a write; up to 400 ms of network;
//! a queue of 2 to 50 calls waiting at most 20 ms to 1 s, past which it answers D1's own
//! overload error), a store timeout (1 to 15 s: calls queued past it time out and commit late), a cadence
//! (the fixed one, or stretching 4 or 16 times from 20, 100 or 250 ms round trips), a patience
//! (30 s, or 2 s), and 1-12 answers of 0.5-5 s at 10-100 tokens a second with one or two readers
//! each, half of them flushing once, and, in half the schedules, a third of the answers losing
//! their object mid-answer (the lease alarm's revival rebuilds the stream through the same
//! queue, the producer resumes and re-sends). It checks:
//!
//! - contract P after every call that ran (a lost instance's late commits included);
//! - contract S for every reader, and that the live text reached it at once whatever the
//!   database was doing (after every token it holds all the stream has);
//! - at the end: no row left `streaming`; with the default patience, every open, flush and close
//!   answered 200 and every answer is `complete` with exactly its text (with a 2 s patience a
//!   close may answer 503, and the lease repairs the row or seals a prefix of it); every reader
//!   got `end` at a durable length it holds.
//!
//! 300 schedules in `cargo test` (the test command's short seeded run, about 10 s); the proof
//! run is 10,000 by hand (`LOAD_SCHEDULES=10000`, docs/TESTING.md). `LOAD_SEED=s` replays one.

mod support;

use rindle_streams::engine::durable::model::{Capacity, ModelledBackend};
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::time::Millis;
use rindle_streams::engine::text::utf16::Offset;
use support::fleet::{Arrival, Fleet, Plan, Report, Rng, Shard};
use support::SqliteDb;

fn pick<T: Copy>(rng: &mut Rng, of: &[T]) -> T {
    of[rng.below(of.len() as u64) as usize]
}

/// The schedule of `seed`.
fn plan(seed: u64) -> Plan {
    let mut rng = Rng::new(seed ^ 0x5EED_10AD);
    let capacity = Capacity {
        backend: ModelledBackend::D1,
        lanes: pick(&mut rng, &[1, 1, 3]),
        write_us: pick(&mut rng, &[1_000, 4_000, 20_000, 40_000]),
        read_us: pick(&mut rng, &[200, 500, 5_000]),
        round_trip_us: pick(&mut rng, &[0, 10_000, 100_000, 400_000]),
        max_queued: pick(&mut rng, &[2, 8, 50]),
        max_wait_us: pick(&mut rng, &[20_000, 200_000, 1_000_000]),
    };
    let stream = StreamConfig {
        checkpoint_chars: Offset(pick(&mut rng, &[8, 64, 512])),
        checkpoint_interval_ms: Millis(pick(&mut rng, &[10, 100, 750])),
        checkpoint_slow_ms: Millis(pick(&mut rng, &[20, 100, 250])),
        checkpoint_max_stretch: pick(&mut rng, &[1, 4, 16]),
        store_patience_ms: Millis(pick(&mut rng, &[30_000, 30_000, 2_000])),
        store_timeout_ms: Millis(pick(&mut rng, &[1_000, 2_000, 15_000])),
        lease_ms: Millis(pick(&mut rng, &[1_000, 10_000])),
        max_slice_bytes: pick(&mut rng, &[64, 1024, 256 * 1024]),
        // Readers pull after every token: no pacing to hold their frames back.
        reader_pacing_us: 0,
        ..StreamConfig::default()
    };
    Plan {
        answers: 1 + rng.below(12) as usize,
        databases: 1,
        arrival: Arrival::Wave { ramp_ms: 2_000 },
        tokens_per_second: pick(&mut rng, &[10, 30, 100]),
        answer_ms: (500, 5_000),
        flush_share: 0.5,
        stream,
        capacity,
        sample_ms: 250,
        seed,
        resets: pick(&mut rng, &[0.0, 0.33]),
        readers: pick(&mut rng, &[1, 2]),
        checked: true,
    }
}

#[derive(Default)]
struct Totals {
    schedules: u64,
    answers: usize,
    turned_away: u64,
    resets: usize,
    close_failed: usize,
    flushes: usize,
    flushes_failed: usize,
    stretched: u64,
}

impl Totals {
    fn add(&mut self, r: &Report) {
        self.schedules += 1;
        self.answers += r.answers;
        self.turned_away += r.turned_away;
        self.resets += r.resets;
        self.close_failed += r.close_failed;
        self.flushes += r.flushes;
        self.flushes_failed += r.flushes_failed;
        self.stretched += u64::from(r.max_stretch > 1.0);
    }
}

#[test]
fn the_adaptive_cadence_keeps_every_answer_under_overloads_and_slow_answers() {
    let schedules: u64 = std::env::var("LOAD_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let seeds: Vec<u64> = match std::env::var("LOAD_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => (1..=schedules).collect(),
    };
    let started = std::time::Instant::now();
    let totals: Vec<Totals> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let seeds = &seeds;
                scope.spawn(move || {
                    let mut totals = Totals::default();
                    for &seed in seeds.iter().skip(t).step_by(2) {
                        let plan = plan(seed);
                        let shard = Shard::new(SqliteDb::new(), plan.capacity);
                        totals.add(&Fleet::new(plan, vec![shard]).run());
                    }
                    totals
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    let mut all = Totals::default();
    for t in totals {
        all.schedules += t.schedules;
        all.answers += t.answers;
        all.turned_away += t.turned_away;
        all.resets += t.resets;
        all.close_failed += t.close_failed;
        all.flushes += t.flushes;
        all.flushes_failed += t.flushes_failed;
        all.stretched += t.stretched;
    }
    println!(
        "{} schedules in {:.1} s: {} answers, {} calls turned away, {} objects reset and rebuilt, {} closes answered 503 (repaired by the lease), \
         {} flushes ({} answered 503 past a short patience), {} schedules stretched the cadence",
        all.schedules,
        started.elapsed().as_secs_f64(),
        all.answers,
        all.turned_away,
        all.resets,
        all.close_failed,
        all.flushes,
        all.flushes_failed,
        all.stretched
    );
    assert_eq!(all.schedules, seeds.len() as u64);
    if seeds.len() >= 100 {
        assert!(all.turned_away > 0 && all.resets > 0 && all.stretched > 0, "the schedules overload, reset and stretch");
    }
}
