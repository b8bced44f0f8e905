//! Time as the engine sees it: the shell's clock, passed in with every input. The engine never
//! reads a clock; a moment ([`Timestamp`]) and a length of time ([`Millis`]) are kept apart.

use serde::{Deserialize, Serialize};
use std::ops::{Add, Div, Mul, Sub};

/// A moment on the shell's clock, in milliseconds (the Worker's clock counts from the Unix
/// epoch; a test's virtual clock from anywhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

/// A length of time, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    pub const ZERO: Millis = Millis(0);
    /// Longer than anything waits: "never".
    pub const MAX: Millis = Millis(u64::MAX);

    /// Whole seconds, rounded down (for messages).
    pub fn as_secs(self) -> u64 {
        self.0 / 1000
    }
}

/// A moment plus a length of time; saturates, so [`Millis::MAX`] later is "never".
impl Add<Millis> for Timestamp {
    type Output = Timestamp;
    fn add(self, later: Millis) -> Timestamp {
        Timestamp(self.0.saturating_add(later.0))
    }
}

/// A moment minus a length of time; saturates at the clock's origin.
impl Sub<Millis> for Timestamp {
    type Output = Timestamp;
    fn sub(self, earlier: Millis) -> Timestamp {
        Timestamp(self.0.saturating_sub(earlier.0))
    }
}

/// The time between two moments (`self` at or after `earlier`; saturates at zero).
impl Sub for Timestamp {
    type Output = Millis;
    fn sub(self, earlier: Timestamp) -> Millis {
        Millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add for Millis {
    type Output = Millis;
    fn add(self, other: Millis) -> Millis {
        Millis(self.0.saturating_add(other.0))
    }
}

impl Mul<u64> for Millis {
    type Output = Millis;
    fn mul(self, times: u64) -> Millis {
        Millis(self.0.saturating_mul(times))
    }
}

impl Div<u64> for Millis {
    type Output = Millis;
    fn div(self, parts: u64) -> Millis {
        Millis(self.0 / parts)
    }
}

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_moves_by_a_length_of_time_and_never_wraps() {
        assert_eq!(Timestamp(100) + Millis(50), Timestamp(150));
        assert_eq!(Timestamp(100) - Millis(150), Timestamp(0), "saturates at the origin");
        assert_eq!(Timestamp(7) + Millis::MAX, Timestamp(u64::MAX), "MAX later is never");
        assert_eq!(Timestamp(150) - Timestamp(100), Millis(50));
        assert_eq!(Millis(50) * 4, Millis(200));
        assert_eq!(Millis(10_000) / 2, Millis(5_000));
        assert_eq!(Millis(300_999).as_secs(), 300);
    }
}
