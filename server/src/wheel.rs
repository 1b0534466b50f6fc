//! A single-level hashed timer wheel with lazy cancellation.
//!
//! Deadlines are rounded *up* to the next tick, so a timer never fires early. Each entry
//! names its owner `(slab key, generation)`; an owner that went away, or re-armed, leaves a
//! stale entry behind that is recognised when it fires and dropped by the caller, so
//! cancelling costs nothing. Entries further out than one turn of the wheel wait in their
//! slot for the right turn. The wheel decides when to wake; whoever owns a timer decides
//! what expired, from the real `now`.

use std::time::{Duration, Instant};

/// What a timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKind {
    /// The core's earliest deadline (hello, idle, cards, uploads, hold, dedup sweeps).
    Core,
    /// The agent's earliest deadline (the demo agent's streaming).
    Agent,
    /// The HTTP request head must be complete by now (decisions H7: inside the hello timeout).
    HttpHead,
    /// Keep-alive: ping a quiet connection, close a silent one (decisions K2).
    KeepAlive,
    /// A closing connection that has not finished its close handshake.
    Linger,
    /// Retry `accept` after it failed for lack of resources (EMFILE).
    AcceptRetry,
    /// Hand freed heap pages back to the kernel, a little after memory was let go.
    Trim,
    /// Start the `exec:` agent again after it exited.
    AgentRestart,
    /// Reap (or kill) an `exec:` agent that was told to stop.
    AgentReap,
    /// A Unix socket peer of the agent link must have said hello by now (key: its peer id).
    AgentHello,
    /// A deadline of an HTTP agent's call (key: the call's slot): connect, first byte, idle.
    Upstream,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub kind: TimerKind,
    pub key: usize,
    pub generation: u32,
    tick: u64,
}

#[derive(Debug)]
pub struct Wheel {
    origin: Instant,
    tick: Duration,
    slots: Vec<Vec<Entry>>,
    /// The next tick not yet processed.
    current: u64,
    len: usize,
    /// The earliest entry's tick, while known: inserts lower it, and it is forgotten only
    /// when that tick has been processed, so most calls to `next_deadline` scan nothing.
    earliest: Option<u64>,
}

impl Wheel {
    pub fn new(origin: Instant, tick: Duration, slots: usize) -> Wheel {
        Wheel {
            origin,
            tick,
            slots: (0..slots.max(1)).map(|_| Vec::new()).collect(),
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

    pub fn insert(&mut self, at: Instant, kind: TimerKind, key: usize, generation: u32) {
        let tick = self.tick_of(at).max(self.current);
        let slot = (tick % self.slots.len() as u64) as usize;
        self.slots[slot].push(Entry {
            kind,
            key,
            generation,
            tick,
        });
        self.len += 1;
        if self.len == 1 || self.earliest.is_some() {
            self.earliest = Some(self.earliest.map_or(tick, |e| e.min(tick)));
        }
    }

    /// Removes every entry due at `now` into `due`.
    pub fn expire(&mut self, now: Instant, due: &mut Vec<Entry>) {
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
            let before = slot.len();
            slot.retain(|e| {
                if e.tick <= now_tick {
                    due.push(*e);
                    false
                } else {
                    true
                }
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
        w.insert(t0 + Duration::from_millis(25), TimerKind::Core, 1, 0);
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
        w.insert(t0 + Duration::from_millis(1000), TimerKind::KeepAlive, 7, 3);
        w.insert(t0 + Duration::from_millis(20), TimerKind::Core, 1, 0);
        assert_eq!(w.next_deadline(), Some(t0 + Duration::from_millis(20)));
        let mut due = Vec::new();
        w.expire(t0 + Duration::from_millis(500), &mut due);
        assert_eq!(due.iter().map(|e| e.key).collect::<Vec<_>>(), [1]);
        assert_eq!(w.next_deadline(), Some(t0 + Duration::from_millis(1000)));
        due.clear();
        w.expire(t0 + Duration::from_millis(1000), &mut due);
        assert_eq!((due[0].key, due[0].generation), (7, 3));
    }

    #[test]
    fn the_cached_earliest_follows_inserts_and_expiry() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut w = Wheel::new(t0, Duration::from_millis(10), 16);
        w.insert(ms(500), TimerKind::Core, 1, 0);
        assert_eq!(w.next_deadline(), Some(ms(500)));
        w.insert(ms(200), TimerKind::Core, 2, 0);
        assert_eq!(w.next_deadline(), Some(ms(200)));
        let mut due = Vec::new();
        w.expire(ms(250), &mut due);
        assert_eq!(due.len(), 1);
        assert_eq!(w.next_deadline(), Some(ms(500)), "rescanned after the earliest fired");
        w.insert(ms(300), TimerKind::Core, 3, 0);
        assert_eq!(w.next_deadline(), Some(ms(300)));
    }
}
