//! What a stream's Durable Object is billed for, as counts: the requests it serves by route,
//! its alarm invocations, its own storage operations, and the wall-clock time it is awake.
//!
//! Cloudflare bills a Durable Object's duration while it is active or idle but unable to
//! hibernate: a request or response body in flight, a pending `setTimeout`, awaited I/O.
//! [`AwakeClock`] adds up the time during which at least one such hold was open; the shell
//! opens one for each request (a reader's body until it ends), each armed timer, and each
//! store or storage call it makes outside a request. `bench/cost.mjs` reads the counts
//! through `/stats`.

use crate::engine::access::api::Action;
use crate::engine::host::time::{Millis, Timestamp};

/// The wall-clock time during which at least one hold kept the object awake.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AwakeClock {
    holds: u32,
    /// When the holds went from none to one (meaningful while `holds > 0`).
    since: Timestamp,
    /// Awake time of the spans that have ended.
    ended_ms: Millis,
}

impl AwakeClock {
    /// A hold begins at `now`.
    pub fn hold(&mut self, now: Timestamp) {
        if self.holds == 0 {
            self.since = now;
        }
        self.holds += 1;
    }

    /// A hold ends at `now`. The clock may read a little earlier than `since` (the runtime's
    /// clock stands still between I/O): such a span counts as zero, never as negative.
    pub fn release(&mut self, now: Timestamp) {
        debug_assert!(self.holds > 0, "a release without a hold");
        self.holds = self.holds.saturating_sub(1);
        if self.holds == 0 {
            self.ended_ms = self.ended_ms + (now - self.since);
        }
    }

    /// Holds open now.
    pub fn holds(&self) -> u32 {
        self.holds
    }

    /// The time awake up to `now`, the open span included.
    pub fn awake_ms(&self, now: Timestamp) -> Millis {
        let open = if self.holds > 0 { now - self.since } else { Millis::ZERO };
        self.ended_ms + open
    }
}

/// The object's own storage calls (the lease's keys and alarm, the remembered format). On a
/// SQLite-backed object each `get` is billed as a row read, each `put`, `delete` and
/// `setAlarm` as a row written.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageCounts {
    pub gets: u64,
    pub puts: u64,
    pub deletes: u64,
    pub set_alarms: u64,
}

/// The requests an object served, by route (the request that reads these counts, `/stats`,
/// is counted too, under its own name, so a reader can leave it out).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RequestCounts([u64; Action::ALL.len()]);

impl RequestCounts {
    pub fn count(&mut self, action: Action) {
        self.0[action as usize] += 1;
    }

    /// `(route name, count)` for every route served at least once.
    pub fn served(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Action::ALL.iter().map(|a| (a.name(), self.0[*a as usize])).filter(|(_, n)| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_holds_count_their_union_once() {
        let mut c = AwakeClock::default();
        c.hold(Timestamp(100)); // a streaming append
        c.hold(Timestamp(150)); // a reader joins
        c.release(Timestamp(400)); // the reader ends
        assert_eq!(c.awake_ms(Timestamp(450)), Millis(350), "the open span counts up to now");
        c.release(Timestamp(500)); // the append ends
        assert_eq!(c.holds(), 0);
        assert_eq!(c.awake_ms(Timestamp(10_000)), Millis(400), "asleep time does not count");
        c.hold(Timestamp(10_000)); // the alarm
        c.release(Timestamp(10_020));
        assert_eq!(c.awake_ms(Timestamp(20_000)), Millis(420));
    }

    #[test]
    fn a_clock_that_reads_earlier_counts_zero() {
        let mut c = AwakeClock::default();
        c.hold(Timestamp(1_000));
        c.release(Timestamp(999));
        assert_eq!(c.awake_ms(Timestamp(999)), Millis(0));
    }

    #[test]
    fn every_route_has_its_own_count() {
        for (i, a) in Action::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i, "Action::ALL is in declaration order");
            assert_eq!(crate::engine::access::api::route("/s", a.method(), &format!("/s/x/{}", a.name())).unwrap().unwrap().action, *a);
        }
    }

    #[test]
    fn requests_are_counted_by_route() {
        let mut r = RequestCounts::default();
        r.count(Action::Open);
        r.count(Action::Events);
        r.count(Action::Events);
        assert_eq!(r.served().collect::<Vec<_>>(), vec![("open", 1), ("events", 2)]);
    }
}
