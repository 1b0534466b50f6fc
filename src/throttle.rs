//! Failed `hello`s, throttled per source address (issue 23 #3, decisions L52).
//!
//! A guesser gets [`FREE_FAILURES`] tries a minute from one address. After that every
//! failure blocks the address for a time that doubles with each one (1 s, 2 s, 4 s … up to
//! [`MAX_BLOCK`]), and a `hello` from a blocked address is refused without its token being
//! looked at, so a block is never a guess. The address is forgotten after
//! [`FORGET_AFTER`] without a failure. A correct `hello` from another address is never
//! delayed: nothing here is global but the table's size.
//!
//! Pure and on virtual time, like the rest of the core: the server passes the address in as
//! a [`SourceKey`] and the time as `now`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use crate::time::Time;

/// Failures allowed from one address within [`WINDOW`] before blocks begin.
pub const FREE_FAILURES: u32 = 10;
/// The window the free failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The longest one block lasts.
pub const MAX_BLOCK: Duration = Duration::from_secs(300);
/// An address with no failure for this long starts afresh.
pub const FORGET_AFTER: Duration = Duration::from_secs(600);
/// Addresses remembered at most; past it the one whose last failure is oldest goes.
pub const MAX_SOURCES: usize = 4096;

/// Where a connection comes from, as far as guessing goes: an IPv4 address, or an IPv6
/// address's /64 (one home or phone gets a whole /64, so single IPv6 addresses cost an
/// attacker nothing). `SourceKey::default()` is "unknown" and shares one entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SourceKey(u128);

impl SourceKey {
    pub fn of(ip: IpAddr) -> SourceKey {
        // IPv4 as its mapped IPv6 address (low 64 bits never zero), IPv6 as its /64 (low
        // 64 bits zero): the two never meet.
        match ip {
            IpAddr::V4(v4) => SourceKey(u128::from(v4.to_ipv6_mapped())),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => SourceKey(u128::from(v4.to_ipv6_mapped())),
                None => SourceKey(u128::from(v6) & !u128::from(u64::MAX)),
            },
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    window_start: Time,
    failures_in_window: u32,
    /// Failures since blocks began: the next block is 2^(strikes-1) s.
    strikes: u32,
    blocked_until: Time,
    last_failure: Time,
}

/// The failed-hello table.
#[derive(Debug, Default)]
pub struct Throttle {
    sources: HashMap<SourceKey, Entry>,
}

impl Throttle {
    /// How long `source` is still blocked at `now`, if it is.
    pub fn blocked(&self, source: SourceKey, now: Time) -> Option<Duration> {
        let e = self.sources.get(&source)?;
        (now < e.blocked_until).then(|| e.blocked_until.since(now))
    }

    /// A `hello` from `source` failed authentication at `now`. Returns the block it started,
    /// if any.
    pub fn record_failure(&mut self, source: SourceKey, now: Time) -> Option<Duration> {
        if !self.sources.contains_key(&source) && self.sources.len() >= MAX_SOURCES {
            self.forget_oldest();
        }
        let e = self.sources.entry(source).or_insert(Entry {
            window_start: now,
            failures_in_window: 0,
            strikes: 0,
            blocked_until: now,
            last_failure: now,
        });
        if now.since(e.last_failure) >= FORGET_AFTER {
            e.strikes = 0;
            e.failures_in_window = 0;
            e.window_start = now;
        }
        if now.since(e.window_start) >= WINDOW {
            e.window_start = now;
            e.failures_in_window = 0;
        }
        e.failures_in_window = e.failures_in_window.saturating_add(1);
        e.last_failure = now;
        if e.strikes == 0 && e.failures_in_window < FREE_FAILURES {
            return None;
        }
        e.strikes = e.strikes.saturating_add(1);
        let block = Duration::from_secs(1u64 << (e.strikes - 1).min(20)).min(MAX_BLOCK);
        e.blocked_until = now + block;
        Some(block)
    }

    /// Addresses remembered.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Drops addresses with nothing left to remember at `now`.
    pub fn sweep(&mut self, now: Time) {
        self.sources
            .retain(|_, e| now < e.blocked_until || now.since(e.last_failure) < FORGET_AFTER);
    }

    fn forget_oldest(&mut self) {
        let oldest = self.sources.iter().min_by_key(|(_, e)| e.last_failure).map(|(k, _)| *k);
        if let Some(key) = oldest {
            self.sources.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> SourceKey {
        SourceKey::of(s.parse().unwrap())
    }

    fn at(secs: f64) -> Time {
        Time::ZERO + Duration::from_secs_f64(secs)
    }

    #[test]
    fn ten_failures_a_minute_are_free_then_blocks_double() {
        // decisions L52
        let mut t = Throttle::default();
        let a = ip("203.0.113.7");
        for i in 0..9 {
            assert_eq!(t.record_failure(a, at(i as f64)), None);
            assert_eq!(t.blocked(a, at(i as f64)), None);
        }
        assert_eq!(t.record_failure(a, at(9.0)), Some(Duration::from_secs(1)));
        assert_eq!(t.blocked(a, at(9.5)), Some(Duration::from_millis(500)));
        assert_eq!(t.blocked(a, at(10.0)), None);
        assert_eq!(t.record_failure(a, at(10.0)), Some(Duration::from_secs(2)));
        assert_eq!(t.record_failure(a, at(12.0)), Some(Duration::from_secs(4)));
        assert_eq!(t.record_failure(a, at(16.0)), Some(Duration::from_secs(8)));
        // Still blocking after the minute: the blocks go on doubling up to the cap.
        let mut now = 24.0;
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            last = t.record_failure(a, at(now)).unwrap();
            now += last.as_secs_f64();
        }
        assert_eq!(last, MAX_BLOCK);
        // Ten quiet minutes and the address starts afresh.
        let later = now + FORGET_AFTER.as_secs_f64();
        assert_eq!(t.record_failure(a, at(later)), None);
    }

    #[test]
    fn a_block_holds_only_its_own_address() {
        let mut t = Throttle::default();
        let (a, b) = (ip("198.51.100.1"), ip("198.51.100.2"));
        for i in 0..FREE_FAILURES {
            t.record_failure(a, at(f64::from(i) * 0.1));
        }
        assert!(t.blocked(a, at(1.0)).is_some());
        assert_eq!(t.blocked(b, at(1.0)), None);
        // Slow guessing stays free: nine a minute never blocks.
        let mut t = Throttle::default();
        for i in 0..100 {
            assert_eq!(t.record_failure(a, at(f64::from(i) * 6.7)), None);
        }
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(ip("2001:db8:1:2::1"), ip("2001:db8:1:2:ffff::9"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
        assert_ne!(ip("::1"), ip("0.0.0.1"));
    }

    #[test]
    fn the_table_is_bounded_and_swept() {
        let mut t = Throttle::default();
        for i in 0..(MAX_SOURCES as u32 + 50) {
            let key = SourceKey::of(IpAddr::V4(std::net::Ipv4Addr::from(i)));
            t.record_failure(key, at(f64::from(i) * 0.001));
        }
        assert_eq!(t.len(), MAX_SOURCES);
        t.sweep(at(10.0 + FORGET_AFTER.as_secs_f64()));
        assert!(t.is_empty());
    }
}
