//! Timers as plain data (in the manner of quinn-proto): a min-heap of `(deadline, key)`.
//!
//! An owner that re-arms often (an upload's stall timer, a device's idle timer) keeps a
//! *slot*: the deadline of its one pending heap entry. Arming only pushes when the slot is
//! empty or the new deadline is earlier; when an entry fires, it counts only if it matches its
//! slot, and the owner then re-arms from its real deadline. So the heap holds about one entry
//! per live timer, and cancelling is free: a stale entry is recognised and dropped when it
//! comes due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::ids::{ConnId, DeviceId};
use crate::time::Time;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKey {
    Hello(ConnId),
    Uploads(ConnId),
    Idle(DeviceId),
    Hold(DeviceId),
    /// A device kept offline for its streams' sake (M2 across reconnects) may go.
    Forget(DeviceId),
    /// The earliest expiry of any open card: one heap entry for all cards, so answered
    /// cards leave nothing behind (issue 8 #3).
    Prompts,
    Sweep,
    /// A streamed reply's latest version is due to be kept (issue 24 §1).
    Unkept(DeviceId),
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Time, TimerKey)>>,
}

impl Timers {
    /// Schedules `key` at `at`, unconditionally (for fixed deadlines).
    pub fn push(&mut self, at: Time, key: TimerKey) {
        self.heap.push(Reverse((at, key)));
    }

    /// Schedules `key` at `at` unless the slot already holds an entry that fires no later.
    pub fn arm(&mut self, slot: &mut Option<Time>, at: Time, key: TimerKey) {
        if slot.is_none_or(|pending| at < pending) {
            *slot = Some(at);
            self.push(at, key);
        }
    }

    /// The earliest deadline, possibly of a stale entry (a spurious wake-up is harmless).
    pub fn next(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Removes and returns the next entry due at `now`.
    pub fn pop_due(&mut self, now: Time) -> Option<(Time, TimerKey)> {
        if self.next()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse(entry)| entry)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Keeps only the entries `live` says are still wanted, and gives back the room of the
    /// rest. Stale entries are otherwise dropped only when they come due, which for owners
    /// that come and go fast (device records evicted at their cap, L32) can be minutes of
    /// entries piling up.
    pub fn retain(&mut self, mut live: impl FnMut(Time, &TimerKey) -> bool) {
        self.heap.retain(|Reverse((at, key))| live(*at, key));
        self.heap.shrink_to_fit();
    }
}

/// Whether a fired entry at `at` is the live one for `slot`; if so the slot is emptied.
pub(crate) fn claim(slot: &mut Option<Time>, at: Time) -> bool {
    if *slot == Some(at) {
        *slot = None;
        true
    } else {
        false
    }
}
