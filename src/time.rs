//! Virtual time. The core never reads a clock: every input carries `now`, and the driver picks
//! the origin (the server uses its start-up instant; tests start at zero). Milliseconds are
//! fine-grained enough for every timer in the protocol and make boundaries exact in tests.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in milliseconds since an origin chosen by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(u64);

impl Time {
    pub const ZERO: Time = Time(0);

    pub const fn from_millis(ms: u64) -> Time {
        Time(ms)
    }

    pub const fn from_secs(secs: u64) -> Time {
        Time(secs.saturating_mul(1000))
    }

    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero if `earlier` is in the future.
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(ms))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Time(self.0.saturating_sub(ms))
    }
}
