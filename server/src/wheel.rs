//! A single-level hashed timer wheel with lazy cancellation, over typed keys.
//!
//! Deadlines are rounded *up* to the next tick, so a timer never fires early. Each entry
//! names its owner by a key (the server's [`crate::timer::TimerKey`]: a connection with its
//! generation, a call, the core…); an owner that went away, or re-armed, leaves a stale
//! entry behind that is recognised when it fires and dropped by the caller, so cancelling
//! costs nothing. A key that has one deadline at a time (the core's, the agent's, a trim)
//! is [`Wheel::arm`]ed: the earliest arming wins and only it fires, so no owner keeps a
//! copy of its deadline beside the wheel. Entries further out than one turn of the wheel wait in their
//! slot for the right turn. The wheel decides when to wake; whoever owns a timer decides
//! what expired, from the real `now`.

use std::time::{Duration, Instant};

/// An entry: its owner's key and its tick. `once`: the key is armed at most once at a time
/// ([`Wheel::arm`]), and only its latest arming fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry<K> {
    key: K,
    tick: u64,
    once: bool,
}

#[derive(Debug)]
pub struct Wheel<K> {
    origin: Instant,
    tick: Duration,
    slots: Vec<Vec<Entry<K>>>,
    /// The armed keys and the tick each fires at (a handful: one per singleton owner).
    armed: Vec<(K, u64)>,
    /// The next tick not yet processed.
    current: u64,
    len: usize,
    /// The earliest entry's tick, while known: inserts lower it, and it is forgotten only
    /// when that tick has been processed, so most calls to `next_deadline` scan nothing.
    earliest: Option<u64>,
}

impl<K: Copy + PartialEq> Wheel<K> {
    pub fn new(origin: Instant, tick: Duration, slots: usize) -> Wheel<K> {
        Wheel {
            origin,
            tick,
            slots: (0..slots.max(1)).map(|_| Vec::new()).collect(),
            armed: Vec::new(),
            current: 0,
            len: 0,
            earliest: None,
        }
    }

    fn tick_of(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.origin).as_nanos();
        let tick = self.tick.as_nanos().max(1);
        u64::try_from(nanos.div_ceil(tick)).unwrap_or(u64::MAX)
    }

    fn instant_of(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * self.tick.as_nanos();
        self.origin + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Adds a deadline for `key`; it fires however many others the key has.
    pub fn insert(&mut self, at: Instant, key: K) {
        let tick = self.tick_of(at).max(self.current);
        self.push(Entry { key, tick, once: false });
    }

    /// Arms `key`'s one deadline: kept if it is armed earlier already, moved earlier
    /// otherwise. Only the latest arming fires; an earlier one left behind is dropped.
    pub fn arm(&mut self, at: Instant, key: K) {
        let tick = self.tick_of(at).max(self.current);
        match self.armed.iter_mut().find(|(k, _)| *k == key) {
            Some((_, armed)) if *armed <= tick => return,
            Some((_, armed)) => *armed = tick,
            None => self.armed.push((key, tick)),
        }
        self.push(Entry { key, tick, once: true });
    }

    fn push(&mut self, entry: Entry<K>) {
        let tick = entry.tick;
        let slot = (tick % self.slots.len() as u64) as usize;
        self.slots[slot].push(entry);
        self.len += 1;
        if self.len == 1 || self.earliest.is_some() {
            self.earliest = Some(self.earliest.map_or(tick, |e| e.min(tick)));
        }
    }

    /// Removes every entry due at `now`, and puts the keys of those that fire into `due`.
    pub fn expire(&mut self, now: Instant, due: &mut Vec<K>) {
        // `tick_of` rounds up; an entry at tick t is due once now >= instant_of(t).
        let now_tick = {
            let nanos = now.saturating_duration_since(self.origin).as_nanos();
            u64::try_from(nanos / self.tick.as_nanos().max(1)).unwrap_or(u64::MAX)
        };
        if now_tick < self.current {
            return;
        }
        let n = self.slots.len() as u64;
        // One turn of the wheel visits every slot; more would only revisit them.
        let last = now_tick.min(self.current + n - 1);
        for tick in self.current..=last {
            let slot = &mut self.slots[(tick % n) as usize];
            let armed = &mut self.armed;
            let before = slot.len();
            slot.retain(|e| {
                if e.tick > now_tick {
                    return true;
                }
                if !e.once {
                    due.push(e.key);
                } else if let Some(at) = armed.iter().position(|(k, t)| *k == e.key && *t == e.tick) {
                    armed.swap_remove(at);
                    due.push(e.key);
                }
                false
            });
            self.len -= before - slot.len();
        }
        self.current = now_tick + 1;
        if self.earliest.is_some_and(|e| e <= now_tick) {
            self.earliest = None;
        }
    }

    /// When the next entry is due, if any. Scans at most one turn of the wheel, and only
    /// when the earliest entry is not already known.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        if let Some(tick) = self.earliest {
            return Some(self.instant_of(tick));
        }
        let n = self.slots.len() as u64;
        let mut best: Option<u64> = None;
        for offset in 0..n {
            let tick = self.current + offset;
            let slot = &self.slots[(tick % n) as usize];
            if let Some(min) = slot.iter().map(|e| e.tick).min() {
                best = Some(best.map_or(min, |b| b.min(min)));
                if min <= tick {
                    // Nothing in a later slot of this turn can be earlier than this one.
                    break;
                }
            }
        }
        self.earliest = best;
        best.map(|t| self.instant_of(t))
    }

    /// Entries on the wheel, live or lazily cancelled.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_at_the_deadline_never_before() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, Duration::from_millis(10), 64);
        w.insert(t0 + Duration::from_millis(25), 1u32);
        let mut due = Vec::new();
        w.expire(t0 + Duration::from_millis(29), &mut due);
        assert!(due.is_empty());
        assert_eq!(w.next_deadline(), Some(t0 + Duration::from_millis(30)));
        w.expire(t0 + Duration::from_millis(30), &mut due);
        assert_eq!(due.len(), 1);
        assert_eq!(w.entries(), 0);
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn entries_beyond_one_turn_wait_for_their_turn() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, Duration::from_millis(10), 8);
        w.insert(t0 + Duration::from_millis(1000), (7u32, 3u32));
        w.insert(t0 + Duration::from_millis(20), (1, 0));
        assert_eq!(w.next_deadline(), Some(t0 + Duration::from_millis(20)));
        let mut due = Vec::new();
        w.expire(t0 + Duration::from_millis(500), &mut due);
        assert_eq!(due, [(1, 0)]);
        assert_eq!(w.next_deadline(), Some(t0 + Duration::from_millis(1000)));
        due.clear();
        w.expire(t0 + Duration::from_millis(1000), &mut due);
        assert_eq!(due, [(7, 3)]);
    }

    #[test]
    fn the_cached_earliest_follows_inserts_and_expiry() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut w = Wheel::new(t0, Duration::from_millis(10), 16);
        w.insert(ms(500), 1u32);
        assert_eq!(w.next_deadline(), Some(ms(500)));
        w.insert(ms(200), 2);
        assert_eq!(w.next_deadline(), Some(ms(200)));
        let mut due = Vec::new();
        w.expire(ms(250), &mut due);
        assert_eq!(due.len(), 1);
        assert_eq!(w.next_deadline(), Some(ms(500)), "rescanned after the earliest fired");
        w.insert(ms(300), 3);
        assert_eq!(w.next_deadline(), Some(ms(300)));
    }

    #[test]
    fn an_armed_key_fires_once_at_its_earliest_arming() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut w = Wheel::new(t0, Duration::from_millis(10), 16);
        w.arm(ms(500), 'c');
        w.arm(ms(800), 'c'); // later: kept at 500
        w.arm(ms(200), 'c'); // earlier: moved
        let mut due = Vec::new();
        w.expire(ms(1000), &mut due);
        assert_eq!(due, ['c'], "one firing, whatever was left behind");
        w.arm(ms(1500), 'c');
        w.expire(ms(1500), &mut due);
        assert_eq!(due, ['c', 'c'], "armed again once it fired");
        assert_eq!(w.entries(), 0);
    }
}
