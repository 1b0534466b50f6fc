//! Per-device sequence numbers (issue 24, L57): handed out in order, never twice, not even
//! after a crash. Seqs are reserved on disk in blocks ahead of use; a frame may carry a seq
//! only once its block is on disk, so a seq a phone saw is never handed out again.

use std::collections::HashMap;

use crate::ids::DeviceId;

/// Seqs reserved at a time.
pub const BLOCK: u64 = 1000;
/// A new block is asked for when fewer than this many reserved seqs are left.
const REFILL_BELOW: u64 = 500;
/// Devices whose seqs are remembered; past it, the least recently used is dropped and the
/// floor rises to its reservation (a device the journal no longer knows starts above it).
pub const MAX_SEQ_DEVICES: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
struct Range {
    /// The latest seq handed out.
    last: u64,
    /// Frames may carry seqs up to this: reserved on disk, or given up on after a failed
    /// reservation (L62: a disk that fails must not stop the gateway serving).
    safe: u64,
    /// Seqs up to this were asked for (safe once committed).
    asked: u64,
    /// For least-recently-used eviction.
    used: u64,
}

/// A seq just handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next {
    pub seq: u64,
    /// Ask the store to reserve up to this (then tell [`Seqs::reserved`]).
    pub reserve: Option<u64>,
}

#[derive(Debug, Default)]
pub struct Seqs {
    devices: HashMap<DeviceId, Range>,
    floor: u64,
    clock: u64,
}

impl Seqs {
    /// From the journal at start-up: each device's latest seq, used or reserved. A crash
    /// may have lost seqs handed out up to the reservation, so each goes on above it; its
    /// next frames wait for a new block (asked for at its `hello`).
    ///
    /// Each goes on above the floor too: a device whose seq row the bounds dropped while it
    /// kept an entry (held, or an open card) is read back at that entry's seq, below the
    /// reservation it had; the floor covers that reservation (L57, never a seq twice).
    pub fn restore(&mut self, rows: &[(DeviceId, u64)], floor: u64) {
        self.floor = self.floor.max(floor);
        for (device, last) in rows {
            let last = &(*last).max(self.floor);
            self.clock += 1;
            let range = Range {
                last: *last,
                safe: *last,
                asked: *last,
                used: self.clock,
            };
            self.devices.insert(device.clone(), range);
        }
        while self.devices.len() > MAX_SEQ_DEVICES {
            self.evict_one();
        }
    }

    /// The device's latest seq, 0 when it has none (L57: `ready.seq`).
    pub fn latest(&self, device: &DeviceId) -> u64 {
        self.devices.get(device).map_or(0, |r| r.last)
    }

    /// The device's latest seq that is reserved on disk: what a client may be told it is
    /// caught up to (`ready.seq`, `resumed.seq`), since a crash can never hand it out again.
    pub fn latest_safe(&self, device: &DeviceId) -> u64 {
        self.devices.get(device).map_or(0, |r| r.last.min(r.safe))
    }

    /// Whether every seq handed out to the device is reserved on disk.
    pub fn is_safe(&self, device: &DeviceId) -> bool {
        self.devices.get(device).is_none_or(|r| r.last <= r.safe)
    }

    /// Asks for a block if the device is short of reserved seqs (a hello reserves ahead).
    pub fn top_up(&mut self, device: &DeviceId) -> Option<u64> {
        let range = self.range(device);
        Self::refill(range)
    }

    fn refill(range: &mut Range) -> Option<u64> {
        if range.asked.saturating_sub(range.last) >= REFILL_BELOW {
            return None;
        }
        range.asked = range.last.saturating_add(BLOCK);
        Some(range.asked)
    }

    /// The device's next seq.
    pub fn next(&mut self, device: &DeviceId) -> Next {
        let range = self.range(device);
        range.last += 1;
        let seq = range.last;
        Next {
            seq,
            reserve: Self::refill(range),
        }
    }

    /// The store committed a reservation up to `upto`.
    pub fn reserved(&mut self, device: &DeviceId, upto: u64) {
        if let Some(r) = self.devices.get_mut(device) {
            r.safe = r.safe.max(upto);
        }
    }

    /// A reservation failed: the seqs handed out go to the client anyway, since holding
    /// frames until the disk recovers would stop the device's output for good (L62). A
    /// crash may then hand them out again, which a client reads as a new journal (its seq
    /// above `ready.seq`). The next seq asks for a block again.
    pub fn reserve_failed(&mut self, device: &DeviceId) {
        if let Some(r) = self.devices.get_mut(device) {
            r.safe = r.safe.max(r.last);
            r.asked = r.safe;
        }
    }

    fn range(&mut self, device: &DeviceId) -> &mut Range {
        self.clock += 1;
        if !self.devices.contains_key(device) && self.devices.len() >= MAX_SEQ_DEVICES {
            self.evict_one();
        }
        let (floor, clock) = (self.floor, self.clock);
        let range = self.devices.entry(device.clone()).or_insert(Range {
            last: floor,
            safe: floor,
            asked: floor,
            used: clock,
        });
        range.used = clock;
        range
    }

    fn evict_one(&mut self) {
        let Some((device, range)) = self
            .devices
            .iter()
            .min_by_key(|(_, r)| r.used)
            .map(|(d, r)| (d.clone(), *r))
        else {
            return;
        };
        self.devices.remove(&device);
        self.floor = self.floor.max(range.asked).max(range.last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(s: &str) -> DeviceId {
        DeviceId(s.into())
    }

    #[test]
    fn a_new_device_starts_at_one_and_is_safe_once_reserved() {
        // L57: seqs start at 1; a frame carries one only once its block is on disk.
        let mut s = Seqs::default();
        assert_eq!(s.latest(&dev("a")), 0);
        assert_eq!(s.top_up(&dev("a")), Some(BLOCK));
        let n = s.next(&dev("a"));
        assert_eq!(n, Next { seq: 1, reserve: None });
        assert!(!s.is_safe(&dev("a")));
        s.reserved(&dev("a"), BLOCK);
        assert!(s.is_safe(&dev("a")));
    }

    #[test]
    fn blocks_are_asked_for_before_they_run_out() {
        let mut s = Seqs::default();
        s.restore(&[(dev("a"), 10)], 0);
        assert_eq!(s.top_up(&dev("a")), Some(10 + BLOCK), "a hello asks for a block");
        s.reserved(&dev("a"), 10 + BLOCK);
        let mut asked = Vec::new();
        for _ in 0..BLOCK {
            if let Some(upto) = s.next(&dev("a")).reserve {
                asked.push(upto);
                s.reserved(&dev("a"), upto);
            }
        }
        assert_eq!(asked, vec![10 + 501 + BLOCK]);
        assert!(s.is_safe(&dev("a")), "never ran past the reservation");
    }

    #[test]
    fn a_device_read_back_below_the_floor_goes_on_above_it() {
        // Its seq row was dropped (its reservation went into the floor) but an open card of
        // it was kept, at a lower seq: it must not hand out the seqs it may have used.
        let mut s = Seqs::default();
        s.restore(&[(dev("a"), 40), (dev("b"), 5000)], 1200);
        assert_eq!(s.latest(&dev("a")), 1200);
        assert_eq!(s.next(&dev("a")).seq, 1201);
        assert_eq!(s.latest(&dev("b")), 5000, "above the floor: unchanged");
    }

    #[test]
    fn restored_devices_go_on_after_their_reservation() {
        // A crash may have lost seqs handed out up to the reservation: never reuse them.
        let mut s = Seqs::default();
        s.restore(&[(dev("a"), 1500)], 0);
        assert_eq!(s.latest(&dev("a")), 1500);
        let next = s.next(&dev("a"));
        assert_eq!(
            next,
            Next {
                seq: 1501,
                reserve: Some(1500 + BLOCK + 1)
            }
        );
        assert!(!s.is_safe(&dev("a")), "its frames wait for the new block");
    }

    #[test]
    fn an_evicted_device_raises_the_floor() {
        let mut s = Seqs::default();
        for i in 0..MAX_SEQ_DEVICES {
            s.next(&dev(&format!("d{i}")));
        }
        for _ in 0..5 {
            s.next(&dev("d1"));
        }
        s.next(&dev("new"));
        assert_eq!(s.latest(&dev("d0")), 0, "the least recently used went");
        let back = s.next(&dev("d0")).seq;
        assert!(back > BLOCK, "starts above every seq it may have had: {back}");
    }
}
