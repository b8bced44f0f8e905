//! A model of what one database gives a fleet of streams, in virtual time: how long each call
//! takes, how many run at once, and when the database turns a call away for load. The native
//! load harness (`bench/dbload.rs`), the load simulator (`tests/load_simulator.rs`) and the dev
//! build's model of the database run it; nothing in a production stream does.
//!
//! What it models, and from where (docs/LOAD.md has the whole argument):
//!
//! * **D1 runs one query at a time per database** ("Each individual D1 database is inherently
//!   single-threaded, and processes queries one at a time", the D1 limits FAQ,
//!   <https://developers.cloudflare.com/d1/platform/limits/>): one lane.
//! * **A write takes several milliseconds, a read under one** (the same FAQ, "Query
//!   performance": writes "need to be durably persisted across several locations"): a time per
//!   write transaction (a batch is one) and per read, holding the lane.
//! * **Past its queue, D1 answers an overload error** ("A database that receives too many
//!   concurrent requests will first attempt to queue them. If the queue becomes full, the
//!   database will return an overloaded error"; the messages `D1 DB is overloaded. Requests
//!   queued for too long.` and `D1 DB is overloaded. Too many requests queued.`,
//!   <https://developers.cloudflare.com/d1/observability/debug-d1/#error-list>): a bound on the
//!   calls waiting and on how long one waits. Cloudflare does not publish either bound; the
//!   defaults here are this model's, and each run says which it used.
//! * **Hyperdrive gives 10–20 origin connections per region** and pools in transaction mode
//!   (<https://developers.cloudflare.com/hyperdrive/platform/limits/>,
//!   <https://developers.cloudflare.com/hyperdrive/configuration/connection-pooling/>): one lane
//!   per connection, each held for a transaction's whole round trip to the origin (a slow
//!   connection is a long hold).
//!
//! The queue is first come, first served. A call's lane and start are known when it arrives
//! (every earlier call's cost is), so [`DatabaseModel::admit`] answers at once when the call
//! will run and when its answer is back, or when and why it is turned away; a driver runs the
//! call's statements on a real database at its start, in the order the model gives.

use std::collections::VecDeque;

/// What a call asks of the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// One write transaction (a D1 batch, a Postgres `BEGIN … COMMIT`), however many statements.
    Write,
    /// One read.
    Read,
}

/// Which database's words an overload is told in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ModelledBackend {
    D1,
    /// PostgreSQL behind a Hyperdrive pool.
    Postgres,
}

/// Why the database turned a call away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overload {
    /// The queue already held `max_queued` calls.
    TooManyQueued,
    /// The call would have waited longer than `max_wait_us` for a lane.
    QueuedTooLong,
}

impl Overload {
    /// The error the database answers, as its driver raises it. D1's are its own words; for
    /// Postgres, what the server says when its connections run out (SQLSTATE 53300), which is
    /// what a pool with no free connection comes to (Hyperdrive does not publish its own).
    pub fn message(self, backend: ModelledBackend) -> &'static str {
        match (backend, self) {
            (ModelledBackend::D1, Overload::TooManyQueued) => "D1_ERROR: D1 DB is overloaded. Too many requests queued.",
            (ModelledBackend::D1, Overload::QueuedTooLong) => "D1_ERROR: D1 DB is overloaded. Requests queued for too long.",
            (ModelledBackend::Postgres, Overload::TooManyQueued) => "53300: sorry, too many clients already",
            (ModelledBackend::Postgres, Overload::QueuedTooLong) => "53300: no connection of the pool came free in time",
        }
    }
}

/// What the modelled database can do. Times are in microseconds (a read takes well under the
/// engine's millisecond). Serializable: the dev build sends it with each call to the model's
/// object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Capacity {
    pub backend: ModelledBackend,
    /// Calls that run at once: 1 on D1; the pool's connections on Postgres.
    pub lanes: u32,
    /// How long a write transaction holds a lane.
    pub write_us: u64,
    /// How long a read holds a lane.
    pub read_us: u64,
    /// The network between caller and database, there and back; it holds no lane.
    pub round_trip_us: u64,
    /// Calls waiting for a lane; one more is turned away (`TooManyQueued`).
    pub max_queued: usize,
    /// The longest a call may wait for a lane; a call that would wait longer is turned away
    /// once it has waited that long (`QueuedTooLong`).
    pub max_wait_us: u64,
}

impl Capacity {
    /// One D1 database: one lane, `write_ms` a write transaction, half a millisecond a read,
    /// 10 ms of network each way and back, and this model's queue bounds (1,000 calls, 1 s).
    pub fn d1(write_ms: f64) -> Self {
        Self {
            backend: ModelledBackend::D1,
            lanes: 1,
            write_us: (write_ms * 1000.0) as u64,
            read_us: 500,
            round_trip_us: 10_000,
            max_queued: 1000,
            max_wait_us: 1_000_000,
        }
    }

    /// PostgreSQL through a Hyperdrive pool of `connections`, each transaction holding its
    /// connection `transaction_ms` (the round trip to the origin and the work there), a read
    /// half of that; the same queue bounds as [`Self::d1`].
    pub fn hyperdrive(connections: u32, transaction_ms: f64) -> Self {
        let write_us = (transaction_ms * 1000.0) as u64;
        Self { backend: ModelledBackend::Postgres, lanes: connections, write_us, read_us: write_us / 2, ..Self::d1(0.0) }
    }

    fn cost(&self, work: Work) -> u64 {
        match work {
            Work::Write => self.write_us,
            Work::Read => self.read_us,
        }
    }

    /// The most calls a second the database completes if it only ever ran `work`.
    pub fn calls_per_second(&self, work: Work) -> f64 {
        f64::from(self.lanes) * 1e6 / self.cost(work).max(1) as f64
    }
}

/// The variables that put the model in front of the dev build's database (docs/LOAD.md, "The
/// model in the dev build"): `DB_MODEL_WRITE_MS` turns it on; the rest default to
/// [`Capacity::d1`]'s (or [`Capacity::hyperdrive`]'s, 10 connections, on Postgres), except the
/// network, which the local runtime already has (0 unless `DB_MODEL_ROUND_TRIP_MS`).
pub const MODEL_VARS: [&str; 6] =
    ["DB_MODEL_WRITE_MS", "DB_MODEL_READ_MS", "DB_MODEL_LANES", "DB_MODEL_ROUND_TRIP_MS", "DB_MODEL_MAX_QUEUED", "DB_MODEL_MAX_WAIT_MS"];

/// A model variable that is not a number in range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("configuration {name}: {raw:?} is not a number between {min} and {max}")]
pub struct BadModelVar {
    pub name: &'static str,
    pub raw: String,
    pub min: f64,
    pub max: f64,
}

impl Capacity {
    /// The model the dev build's variables ask for, or `None` (no `DB_MODEL_WRITE_MS`): the
    /// database as it is. `postgres`: the backend is PostgreSQL behind Hyperdrive.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>, postgres: bool) -> Result<Option<Self>, BadModelVar> {
        let number = |name: &'static str, min: f64, max: f64| -> Result<Option<f64>, BadModelVar> {
            let Some(raw) = var(name).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
            match raw.trim().parse::<f64>() {
                Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(BadModelVar { name, raw, min, max }),
            }
        };
        let Some(write_ms) = number("DB_MODEL_WRITE_MS", 0.0, 10_000.0)? else { return Ok(None) };
        let base = if postgres { Capacity::hyperdrive(10, write_ms) } else { Capacity::d1(write_ms) };
        let us = |ms: f64| (ms * 1000.0) as u64;
        Ok(Some(Capacity {
            read_us: number("DB_MODEL_READ_MS", 0.0, 10_000.0)?.map_or(base.read_us, us),
            lanes: number("DB_MODEL_LANES", 1.0, 1000.0)?.map_or(base.lanes, |n| n as u32),
            round_trip_us: number("DB_MODEL_ROUND_TRIP_MS", 0.0, 10_000.0)?.map_or(0, us),
            max_queued: number("DB_MODEL_MAX_QUEUED", 1.0, 1_000_000.0)?.map_or(base.max_queued, |n| n as usize),
            max_wait_us: number("DB_MODEL_MAX_WAIT_MS", 1.0, 600_000.0)?.map_or(base.max_wait_us, us),
            ..base
        }))
    }
}

/// How the database takes one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The call runs on a lane from `starts_us` to `ends_us`; its answer is back at `answered_us`.
    Runs { starts_us: u64, ends_us: u64, answered_us: u64 },
    /// Turned away: the error is back at `answered_us`; nothing of the call ran.
    TurnedAway { why: Overload, answered_us: u64 },
}

/// What the database did, for the harness's report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelCounts {
    pub writes: u64,
    pub reads: u64,
    pub turned_away: u64,
    /// Lane time used, µs (busy time over elapsed time and lanes is the utilization).
    pub busy_us: u64,
    /// The most calls ever waiting at once.
    pub deepest_queue: usize,
    /// The longest any call that ran waited for a lane, µs.
    pub longest_wait_us: u64,
}

/// One database's lanes and queue (see the module docs).
#[derive(Debug, Clone)]
pub struct DatabaseModel {
    capacity: Capacity,
    /// When each lane is next free.
    free_at: Vec<u64>,
    /// The start times of the calls admitted and not yet started, in order (first come, first
    /// served makes them nondecreasing).
    waiting: VecDeque<u64>,
    counts: ModelCounts,
}

impl DatabaseModel {
    pub fn new(capacity: Capacity) -> Self {
        Self { capacity, free_at: vec![0; capacity.lanes.max(1) as usize], waiting: VecDeque::new(), counts: ModelCounts::default() }
    }

    pub fn capacity(&self) -> &Capacity {
        &self.capacity
    }

    pub fn counts(&self) -> ModelCounts {
        self.counts
    }

    /// Calls waiting for a lane at `at_us`.
    pub fn queued(&mut self, at_us: u64) -> usize {
        while self.waiting.front().is_some_and(|&start| start <= at_us) {
            self.waiting.pop_front();
        }
        self.waiting.len()
    }

    /// A call sent at `sent_us` asking `work`: when it runs and is answered, or why it is
    /// turned away. Calls must be admitted in the order they are sent.
    pub fn admit(&mut self, work: Work, sent_us: u64) -> Admission {
        let one_way = self.capacity.round_trip_us / 2;
        let arrives = sent_us + one_way;
        if self.queued(arrives) >= self.capacity.max_queued {
            self.counts.turned_away += 1;
            return Admission::TurnedAway { why: Overload::TooManyQueued, answered_us: arrives + one_way };
        }
        let (lane, &free) = self.free_at.iter().enumerate().min_by_key(|&(_, &free)| free).expect("a database has a lane");
        let starts = free.max(arrives);
        if starts - arrives > self.capacity.max_wait_us {
            self.counts.turned_away += 1;
            return Admission::TurnedAway { why: Overload::QueuedTooLong, answered_us: arrives + self.capacity.max_wait_us + one_way };
        }
        let cost = self.capacity.cost(work);
        let ends = starts + cost;
        self.free_at[lane] = ends;
        if starts > arrives {
            self.waiting.push_back(starts);
        }
        let counts = &mut self.counts;
        match work {
            Work::Write => counts.writes += 1,
            Work::Read => counts.reads += 1,
        }
        counts.busy_us += cost;
        counts.deepest_queue = counts.deepest_queue.max(self.waiting.len());
        counts.longest_wait_us = counts.longest_wait_us.max(starts - arrives);
        Admission::Runs { starts_us: starts, ends_us: ends, answered_us: ends + one_way }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d1() -> DatabaseModel {
        DatabaseModel::new(Capacity { round_trip_us: 0, max_queued: 3, max_wait_us: 10_000, ..Capacity::d1(4.0) })
    }

    #[test]
    fn one_lane_runs_one_call_at_a_time_in_arrival_order() {
        let mut db = d1();
        assert_eq!(db.admit(Work::Write, 0), Admission::Runs { starts_us: 0, ends_us: 4000, answered_us: 4000 });
        assert_eq!(db.admit(Work::Read, 100), Admission::Runs { starts_us: 4000, ends_us: 4500, answered_us: 4500 });
        assert_eq!(db.admit(Work::Write, 200), Admission::Runs { starts_us: 4500, ends_us: 8500, answered_us: 8500 });
        assert_eq!(db.queued(300), 2, "two calls wait behind the first");
        assert_eq!(db.admit(Work::Read, 9000), Admission::Runs { starts_us: 9000, ends_us: 9500, answered_us: 9500 }, "idle again");
        let counts = db.counts();
        assert_eq!((counts.writes, counts.reads, counts.busy_us, counts.longest_wait_us), (2, 2, 9000, 4300));
    }

    #[test]
    fn past_its_queue_the_database_turns_calls_away_in_d1s_words() {
        let mut db = DatabaseModel::new(Capacity { max_wait_us: u64::MAX, ..d1().capacity });
        for _ in 0..4 {
            assert!(matches!(db.admit(Work::Write, 0), Admission::Runs { .. }));
            // one runs, three wait
        }
        assert_eq!(db.admit(Work::Write, 0), Admission::TurnedAway { why: Overload::TooManyQueued, answered_us: 0 });
        assert_eq!(Overload::TooManyQueued.message(ModelledBackend::D1), "D1_ERROR: D1 DB is overloaded. Too many requests queued.");
        assert!(matches!(db.admit(Work::Write, 4000), Admission::Runs { starts_us: 16_000, .. }), "room again once one started");

        let mut db = DatabaseModel::new(Capacity { max_queued: usize::MAX, ..d1().capacity });
        assert!(matches!(db.admit(Work::Write, 0), Admission::Runs { starts_us: 0, .. }));
        assert!(matches!(db.admit(Work::Write, 0), Admission::Runs { starts_us: 4000, .. }));
        assert!(matches!(db.admit(Work::Write, 0), Admission::Runs { starts_us: 8000, .. }), "8 ms of waiting, within 10");
        // The next would start at 12 ms, 12 ms after it arrived: turned away once it waited 10.
        assert_eq!(db.admit(Work::Write, 0), Admission::TurnedAway { why: Overload::QueuedTooLong, answered_us: 10_000 });
        assert!(matches!(db.admit(Work::Read, 3000), Admission::Runs { starts_us: 12_000, .. }), "it held no lane");
        assert_eq!(db.counts().turned_away, 1);
        assert!(Overload::QueuedTooLong.message(ModelledBackend::D1).contains("Requests queued for too long"));
    }

    #[test]
    fn the_dev_builds_variables_choose_the_model_and_a_bad_one_is_refused_by_name() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(Capacity::from_vars(vars(&[]), false), Ok(None), "no write time: no model");
        let d1 = Capacity::from_vars(vars(&[("DB_MODEL_WRITE_MS", "40")]), false).unwrap().unwrap();
        assert_eq!((d1.lanes, d1.write_us, d1.read_us, d1.round_trip_us, d1.max_wait_us), (1, 40_000, 500, 0, 1_000_000));
        let pg = Capacity::from_vars(vars(&[("DB_MODEL_WRITE_MS", "4"), ("DB_MODEL_LANES", "20"), ("DB_MODEL_MAX_WAIT_MS", "250")]), true)
            .unwrap()
            .unwrap();
        assert_eq!((pg.backend, pg.lanes, pg.write_us, pg.max_wait_us), (ModelledBackend::Postgres, 20, 4000, 250_000));
        let bad = Capacity::from_vars(vars(&[("DB_MODEL_WRITE_MS", "4"), ("DB_MODEL_LANES", "0")]), false).unwrap_err();
        assert_eq!(bad.to_string(), r#"configuration DB_MODEL_LANES: "0" is not a number between 1 and 1000"#);
    }

    #[test]
    fn a_pool_runs_its_connections_at_once_and_the_network_holds_no_lane() {
        let mut pool = DatabaseModel::new(Capacity { round_trip_us: 2000, ..Capacity::hyperdrive(2, 10.0) });
        let a = pool.admit(Work::Write, 0);
        let b = pool.admit(Work::Write, 0);
        let c = pool.admit(Work::Write, 0);
        assert_eq!(a, Admission::Runs { starts_us: 1000, ends_us: 11_000, answered_us: 12_000 });
        assert_eq!(b, a, "the second connection runs beside the first");
        assert_eq!(c, Admission::Runs { starts_us: 11_000, ends_us: 21_000, answered_us: 22_000 }, "the third waits for one");
        assert_eq!(Capacity::hyperdrive(10, 20.0).calls_per_second(Work::Write), 500.0);
        assert_eq!(Capacity::d1(4.0).calls_per_second(Work::Write), 250.0);
        assert!(Overload::TooManyQueued.message(ModelledBackend::Postgres).starts_with("53300: "));
    }
}
