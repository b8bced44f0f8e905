//! How a failed store call is retried (SPEC §5, §13). Two schedules:
//!
//! - **A refusal or a lost reply** keeps the fixed one: `CHECKPOINT_RETRIES` retries, 50 ms
//!   doubling, then the caller is told.
//! - **Load** (the database overloaded, a call that did not answer in time:
//!   `StoreError::is_load`) is retried with jittered back-off, 50 ms doubling up to
//!   [`LOAD_BACKOFF_MAX`], for as long as `STORE_PATIENCE_MS` allows from the first such
//!   failure. A busy database is not a failed answer: the open, the flush or the close waits
//!   longer, honestly, and answers once the write committed (or the patience ran out).
//!
//! The jitter spreads the retries of streams that failed together so they do not come back
//! together. The engine draws no randomness: the host supplies a seed ([`Jitter`]), from which
//! each delay is derived.

use crate::engine::host::config::StreamConfig;
use crate::engine::host::store::StoreError;
use crate::engine::host::time::{Millis, Timestamp};

/// The longest wait between two retries of a call failing for load.
pub const LOAD_BACKOFF_MAX: Millis = Millis(2_000);

/// The host's randomness for one stream's back-off: a seed, from which every delay is derived
/// deterministically (so a test replays exactly). The shell seeds it from the runtime's random
/// source; without a seed it comes from the stream id, which already differs between streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jitter(u64);

impl Jitter {
    pub fn from_seed(seed: u64) -> Self {
        Self(seed)
    }

    /// A seed from the stream id (FNV-1a): streams that fail together still spread apart.
    pub fn of_stream(stream_id: &str) -> Self {
        Self(stream_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)))
    }

    /// `delay` spread over `[delay / 2, delay]`, by `salt` (what tells two draws apart).
    pub fn spread(self, salt: u64, delay: Millis) -> Millis {
        let half = delay.0 / 2;
        Millis(delay.0 - half + splitmix(self.0 ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % (half + 1))
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One operation's failures so far (a checkpoint round, a seal, a step of the open), and when
/// the next attempt goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Retries {
    /// Failures of any kind.
    failures: u32,
    /// Failures that were not load: these spend `CHECKPOINT_RETRIES`.
    refusals: u32,
    /// The first load failure: the patience counts from it.
    loaded_since: Option<Timestamp>,
}

impl Retries {
    /// A failure at `now` (`load`: `StoreError::is_load`): the delay before the next attempt,
    /// or `None` (tell the caller).
    pub fn after_failure(&mut self, load: bool, cfg: &StreamConfig, now: Timestamp, jitter: Jitter) -> Option<Millis> {
        self.failures += 1;
        if load && cfg.store_patience_ms > Millis::ZERO {
            let since = *self.loaded_since.get_or_insert(now);
            if now - since >= cfg.store_patience_ms {
                return None;
            }
            let doubling = cfg.retry_backoff_ms * (1 << (self.failures - 1).min(16));
            return Some(jitter.spread(now.0 ^ (u64::from(self.failures) << 48), doubling.min(LOAD_BACKOFF_MAX)));
        }
        self.refusals += 1;
        cfg.retry_delay(self.refusals)
    }
}

/// Runs a store call the shell makes for a request (a read for `/text`, `/ui` or a chat; the
/// cancel flag, idempotent) the way a stream's own calls are retried under load: an overload or
/// a timeout is retried with jittered back-off until the waits add up to `STORE_PATIENCE_MS`;
/// anything else (and everything, with no patience configured) answers at once, as before.
/// `sleep` is the host's wait: the engine keeps no clock.
pub async fn patiently<T, Call, Fut, Sleep, Wait>(cfg: &StreamConfig, jitter: Jitter, sleep: Sleep, mut call: Call) -> Result<T, StoreError>
where
    Call: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
    Sleep: Fn(Millis) -> Wait,
    Wait: std::future::Future<Output = ()>,
{
    let (mut retries, mut waited) = (Retries::default(), Timestamp(0));
    loop {
        match call().await {
            Err(e) if e.is_load() && cfg.store_patience_ms > Millis::ZERO => match retries.after_failure(true, cfg, waited, jitter) {
                Some(delay) => {
                    sleep(delay).await;
                    waited = waited + delay;
                }
                None => return Err(e),
            },
            answer => return answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_is_retried_jittered_until_the_patience_runs_out_and_a_refusal_keeps_three_fixed_retries() {
        let cfg = StreamConfig { store_patience_ms: Millis(10_000), ..StreamConfig::default() };
        let overloaded = StoreError::Overloaded("D1 DB is overloaded. Too many requests queued.".into());
        let mut load = Retries::default();
        let mut now = Timestamp(1_000);
        let mut delays = vec![];
        while let Some(delay) = load.after_failure(overloaded.is_load(), &cfg, now, Jitter::from_seed(7)) {
            delays.push(delay);
            now = now + delay;
        }
        assert!(now - Timestamp(1_000) >= Millis(10_000), "retried for the whole patience: {delays:?}");
        for (i, d) in delays.iter().enumerate() {
            let full = Millis(50 << i.min(16)).min(LOAD_BACKOFF_MAX);
            assert!(*d >= full / 2 && *d <= full, "retry {i}: {d} within [{}, {full}]", full / 2);
        }
        assert!(delays.iter().rev().take(3).all(|d| *d <= LOAD_BACKOFF_MAX));

        let mut refused = Retries::default();
        let lost = StoreError::MayHaveCommitted("reply lost".into());
        let fixed: Vec<_> = (0..4).map(|_| refused.after_failure(lost.is_load(), &cfg, now, Jitter::from_seed(7))).collect();
        assert_eq!(fixed, [Some(Millis(50)), Some(Millis(100)), Some(Millis(200)), None], "SPEC §5's schedule, no jitter");
    }

    #[test]
    fn without_patience_load_is_retried_like_any_failure() {
        let cfg = StreamConfig { store_patience_ms: Millis::ZERO, ..StreamConfig::default() };
        let mut r = Retries::default();
        let late = StoreError::TimedOut(Millis(15_000));
        let fixed: Vec<_> = (0..4).map(|_| r.after_failure(late.is_load(), &cfg, Timestamp(0), Jitter::from_seed(1))).collect();
        assert_eq!(fixed, [Some(Millis(50)), Some(Millis(100)), Some(Millis(200)), None]);
    }

    #[test]
    fn a_request_s_read_waits_out_an_overload_and_a_refusal_answers_at_once() {
        use std::cell::{Cell, RefCell};
        let block_on = |f: std::pin::Pin<&mut dyn std::future::Future<Output = Result<u32, StoreError>>>| match f
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        {
            std::task::Poll::Ready(answer) => answer,
            std::task::Poll::Pending => panic!("nothing here waits"),
        };
        let (calls, slept) = (Cell::new(0), RefCell::new(vec![]));
        let sleep = |d: Millis| {
            slept.borrow_mut().push(d);
            std::future::ready(())
        };
        let overloaded = || StoreError::Overloaded("D1 DB is overloaded. Too many requests queued.".into());
        let cfg = StreamConfig::default();
        let read = patiently(&cfg, Jitter::from_seed(1), sleep, || {
            calls.set(calls.get() + 1);
            std::future::ready(if calls.get() < 5 { Err(overloaded()) } else { Ok(7) })
        });
        assert_eq!(block_on(std::pin::pin!(read)), Ok(7));
        assert_eq!((calls.get(), slept.borrow().len()), (5, 4), "four overloads waited out");
        calls.set(0);
        let refused = patiently(&cfg, Jitter::from_seed(1), sleep, || {
            calls.set(calls.get() + 1);
            std::future::ready(Err::<u32, _>(StoreError::NotCommitted("no such table".into())))
        });
        assert!(block_on(std::pin::pin!(refused)).is_err());
        assert_eq!(calls.get(), 1, "a refusal is not retried");
        let impatient = StreamConfig { store_patience_ms: Millis::ZERO, ..cfg };
        calls.set(0);
        let today = patiently(&impatient, Jitter::from_seed(1), sleep, || {
            calls.set(calls.get() + 1);
            std::future::ready(Err::<u32, _>(overloaded()))
        });
        assert!(block_on(std::pin::pin!(today)).is_err());
        assert_eq!(calls.get(), 1, "without patience, as before: at once");
    }

    #[test]
    fn streams_that_fail_together_come_back_apart() {
        let delays: std::collections::BTreeSet<_> =
            (0..100).map(|i| Jitter::of_stream(&format!("answer-{i}")).spread(0, Millis(1000))).collect();
        assert!(delays.len() > 80, "{} distinct delays of 100", delays.len());
        assert!(delays.iter().all(|d| (Millis(500)..=Millis(1000)).contains(d)));
        assert_eq!(Jitter::from_seed(3).spread(9, Millis(800)), Jitter::from_seed(3).spread(9, Millis(800)), "a seed replays");
    }
}
