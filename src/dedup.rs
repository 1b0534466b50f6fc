//! The idempotency window (decisions I1, I2, S4).
//!
//! Keys are `<device id>:<id>` after truncation; each device has its own window of at most
//! `DEDUP_CAPACITY` entries that live `window` long, oldest evicted first. Keeping the
//! windows per device means one chatty device cannot evict another's entries. A window that
//! empties is removed, so devices that went away cost nothing. An entry may carry a small
//! value: a `deliver` remembers which device it reached, to confirm a repeat (S4).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::ids::DeviceId;
use crate::time::Time;

#[derive(Debug)]
struct Window<V> {
    /// Insertion order, for eviction. The id is shared with `entries`, stored once.
    order: VecDeque<(Time, Arc<str>)>,
    entries: HashMap<Arc<str>, (Time, V)>,
}

impl<V> Default for Window<V> {
    fn default() -> Self {
        Window {
            order: VecDeque::new(),
            entries: HashMap::new(),
        }
    }
}

impl<V> Window<V> {
    /// Drops this window's entries older than `lifetime`; returns how many.
    fn expire(&mut self, now: Time, lifetime: Duration) -> usize {
        let mut removed = 0;
        while let Some((at, _)) = self.order.front() {
            if now.since(*at) < lifetime {
                break;
            }
            if let Some((_, key)) = self.order.pop_front() {
                self.entries.remove(&*key);
                removed += 1;
            }
        }
        removed
    }
}

#[derive(Debug)]
pub struct Dedup<V = ()> {
    windows: HashMap<DeviceId, Window<V>>,
    lifetime: Duration,
    /// Per device window.
    capacity: usize,
    /// In all, across windows (L32).
    total_capacity: usize,
    len: usize,
}

impl<V> Dedup<V> {
    pub fn new(lifetime: Duration, capacity: usize, total_capacity: usize) -> Dedup<V> {
        Dedup {
            windows: HashMap::new(),
            lifetime,
            capacity: capacity.max(1),
            total_capacity: total_capacity.max(1),
            len: 0,
        }
    }

    /// Drops the oldest entry of all windows (a scan of the windows' oldest entries: it
    /// runs only at the total cap, which only device-id minting reaches).
    fn evict_globally_oldest(&mut self) {
        let oldest = self
            .windows
            .iter()
            .filter_map(|(device, w)| w.order.front().map(|(at, _)| (*at, device)))
            .min_by_key(|(at, _)| *at)
            .map(|(_, device)| device.clone());
        let Some(device) = oldest else { return };
        if let Some(w) = self.windows.get_mut(&device) {
            if let Some((_, key)) = w.order.pop_front() {
                w.entries.remove(&*key);
                self.len -= 1;
            }
            if w.order.is_empty() {
                self.windows.remove(&device);
            }
        }
    }

    /// The value recorded for `(device, id)`, if the entry is still within the window.
    pub fn get(&self, now: Time, device: &DeviceId, id: &str) -> Option<&V> {
        let window = self.windows.get(device)?;
        let (at, value) = window.entries.get(id)?;
        // Expired entries may linger until the next sweep; they no longer count.
        (now.since(*at) < self.lifetime).then_some(value)
    }

    pub fn contains(&self, now: Time, device: &DeviceId, id: &str) -> bool {
        self.get(now, device, id).is_some()
    }

    /// Records `(device, id)`. Re-recording an existing key refreshes its value, not its age.
    pub fn insert(&mut self, now: Time, device: &DeviceId, id: &str, value: V) {
        let lifetime = self.lifetime;
        if self.len >= self.total_capacity && !self.contains(now, device, id) {
            self.evict_globally_oldest();
        }
        let window = self.windows.entry(device.clone()).or_default();
        self.len -= window.expire(now, lifetime);
        if let Some((_, existing)) = window.entries.get_mut(id) {
            *existing = value;
            return;
        }
        if window.order.len() >= self.capacity {
            if let Some((_, oldest)) = window.order.pop_front() {
                window.entries.remove(&*oldest);
                self.len -= 1;
            }
        }
        let key: Arc<str> = Arc::from(id);
        window.order.push_back((now, Arc::clone(&key)));
        window.entries.insert(key, (now, value));
        self.len += 1;
    }

    /// Forgets `(device, id)` (a delivery the journal could not keep, so that its retry
    /// is delivered rather than confirmed). A scan of the device's window: it only runs
    /// after a failed commit.
    pub fn remove(&mut self, device: &DeviceId, id: &str) {
        if let Some(w) = self.windows.get_mut(device) {
            if w.entries.remove(id).is_some() {
                w.order.retain(|(_, k)| &**k != id);
                self.len -= 1;
            }
        }
    }

    /// Drops entries older than the window, and windows left empty.
    pub fn expire(&mut self, now: Time) {
        let lifetime = self.lifetime;
        let mut removed = 0;
        self.windows.retain(|_, w| {
            removed += w.expire(now, lifetime);
            !w.order.is_empty()
        });
        self.len -= removed;
    }

    /// Entries held, fresh or not yet swept.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(s: &str) -> DeviceId {
        DeviceId(s.into())
    }

    #[test]
    fn entries_live_for_the_window_exactly() {
        // decisions I1: 600 s
        let mut d: Dedup = Dedup::new(Duration::from_secs(600), 4000, 16_384);
        d.insert(Time::ZERO, &dev("a"), "m1", ());
        assert!(d.contains(Time::from_millis(599_999), &dev("a"), "m1"));
        assert!(!d.contains(Time::from_secs(600), &dev("a"), "m1"));
        assert!(!d.contains(Time::ZERO, &dev("b"), "m1"), "keys are per device");
    }

    #[test]
    fn capacity_evicts_oldest_first() {
        // decisions I1: at most 4000 entries, oldest evicted first
        let mut d: Dedup = Dedup::new(Duration::from_secs(600), 3, 100);
        for id in ["1", "2", "3", "4"] {
            d.insert(Time::ZERO, &dev("a"), id, ());
        }
        assert!(!d.contains(Time::ZERO, &dev("a"), "1"));
        assert!(d.contains(Time::ZERO, &dev("a"), "4"));
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn the_total_cap_evicts_the_oldest_entry_of_any_device() {
        // decisions L32: minted device ids cannot grow the table past its total.
        let mut d: Dedup = Dedup::new(Duration::from_secs(600), 4000, 3);
        d.insert(Time::from_millis(1), &dev("a"), "m1", ());
        d.insert(Time::from_millis(2), &dev("b"), "m1", ());
        d.insert(Time::from_millis(3), &dev("a"), "m2", ());
        d.insert(Time::from_millis(4), &dev("c"), "m1", ());
        assert_eq!(d.len(), 3);
        assert!(!d.contains(Time::from_millis(4), &dev("a"), "m1"), "the oldest went");
        assert!(d.contains(Time::from_millis(4), &dev("b"), "m1"));
        d.insert(Time::from_millis(5), &dev("d"), "m1", ());
        assert!(!d.contains(Time::from_millis(5), &dev("b"), "m1"));
        assert!(!d.windows.contains_key(&dev("b")), "an emptied window goes too");
    }

    #[test]
    fn expiry_frees_windows() {
        let mut d: Dedup = Dedup::new(Duration::from_secs(600), 4000, 16_384);
        d.insert(Time::ZERO, &dev("a"), "m1", ());
        d.expire(Time::from_secs(601));
        assert!(d.is_empty());
        assert!(d.windows.is_empty());
    }
}
