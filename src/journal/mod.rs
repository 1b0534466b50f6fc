//! The journal's vocabulary (issue 24): what the core asks the server to keep, what it asks
//! to read back, and what the server hands it at start-up.
//!
//! The core decides what is kept and what is replayed; the server's store (SQLite, one
//! worker thread) only carries these records out in order. The store never looks inside
//! an entry's `body`: that JSON is the core's, written and read back by the core alone.
//!
//! Order is the contract: the store applies records and serves reads in the order the core
//! emitted them, so a read sees every record emitted before it, committed or not.

use crate::ids::DeviceId;
use crate::time::Time;

pub mod body;
pub mod memory;
pub mod owed;
pub mod seqs;

/// `MOBILE_HISTORY*`: what the journal keeps (the core's part of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalConfig {
    /// `MOBILE_HISTORY`: keep the conversation after it is delivered.
    pub history: bool,
    /// `MOBILE_HISTORY_ITEMS`, per device.
    pub items: usize,
    /// `MOBILE_HISTORY_DAYS`.
    pub days: u32,
}

impl JournalConfig {
    /// The defaults: history on, 5,000 entries and 30 days per device.
    pub fn new() -> JournalConfig {
        JournalConfig {
            history: true,
            items: 5000,
            days: 30,
        }
    }
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// One thing the journal keeps for a device: a message (either way), a file, a card.
/// Keyed by `(device, key)`: writing the same key again replaces the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub device: DeviceId,
    /// Unique within the device: `m:<id>` an agent message, `u:<id>` the user's own
    /// message, `f:<id>` a file, `p:<id>` a card.
    pub key: String,
    /// The `seq` of its latest change.
    pub seq: u64,
    /// The `seq` of its first version (a card's opening).
    pub first_seq: u64,
    /// Its latest change (`MOBILE_HISTORY_DAYS` counts from it).
    pub at: Time,
    /// Still to be sent after the device's next `ready` (M4, L45).
    pub held: bool,
    /// An open card.
    pub open: bool,
    /// An open card's expiry.
    pub deadline: Option<Time>,
    /// The core's own JSON; the store keeps it as text and never parses it.
    pub body: String,
    /// A held file's bytes, kept only while it is held.
    pub blob: Option<Vec<u8>>,
}

/// Which idempotency window an entry of the dedup table belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// I2: a user's `text`, `audio` and `media` ids.
    Seen,
    /// S4: `deliver` ids, with the device each reached.
    Delivered,
}

/// What the core asks the store to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// Insert or replace the entry at `(device, key)`.
    Put(Entry),
    /// These entries were sent to the device: they are held no more (their blob goes).
    Sent { device: DeviceId, keys: Vec<String> },
    /// Seqs up to `upto` may be handed out for this device: kept before any frame carries
    /// one, so that a seq is never reused, not even after a crash.
    Reserve { device: DeviceId, upto: u64 },
    /// An entry of an idempotency window, as of `at`.
    Dedup {
        window: Window,
        device: DeviceId,
        id: String,
        at: Time,
        value: String,
    },
    /// Drop a device's entries and what is held for it; its open cards, its dedup window
    /// and its seq stay.
    Forget { device: DeviceId },
    /// The agent is owed this event: kept in the same commit as the change that promised
    /// it (a message's dedup entry, a card's close), so that a crash before the agent has
    /// it cannot lose it (it is handed over again at start-up, or to the next agent when
    /// its line died unwritten, flagged `redelivered`).
    Owe(Owed),
    /// The agent has the event `(device, key)` (or it was given up): it is owed no more.
    Handed { device: DeviceId, key: String },
    /// Report `Committed { ticket }` once everything before this is on disk.
    Confirm { ticket: u64 },
    /// Pair a device, or pair it again: its row (its token's digest) replaces the old one
    /// (issue 26).
    Pair(crate::devices::Paired),
    /// A device is revoked: its row goes, and what is held for it.
    Unpair { device: DeviceId },
    /// A pairing code waits (its digest, never the code itself).
    PairCode(crate::devices::KeptCode),
    /// A pairing code was spent.
    CodeSpent { digest: [u8; 32] },
    /// A paired device was seen at `at` (unix ms).
    Seen { device: DeviceId, at: u64 },
}

/// A read the core needs answered, in order with the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The first `limit` entries of the device with `seq > after`, in `seq` order, and
    /// whether more follow (resume, a page at a time).
    After { device: DeviceId, after: u64, limit: usize },
    /// The newest `limit` entries with `seq < before` (all, when `None`), oldest first,
    /// and whether older ones remain (history).
    Before {
        device: DeviceId,
        before: Option<u64>,
        limit: usize,
    },
    /// Those of these events still owed, in the order they were owed, as many as fit in
    /// `limit` events and `max_bytes` of bodies and files (the first always): events whose
    /// lines never reached the agent (its process or connection ended with them queued) go
    /// to the next agent in the same run (L64).
    Owed {
        keys: Vec<owed::EventKey>,
        limit: usize,
        max_bytes: usize,
    },
}

/// The answer to a [`Read`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadResult {
    pub entries: Vec<Entry>,
    /// `Before` only: older entries remain.
    pub more: bool,
    /// `Owed` only.
    pub owed: Vec<Owed>,
}

/// One entry of an idempotency window, as read at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupRow {
    pub window: Window,
    pub device: DeviceId,
    pub id: String,
    pub at: Time,
    pub value: String,
}

/// An event the agent has not had yet ([`Record::Owe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owed {
    pub device: DeviceId,
    /// Unique within the device: `m:<id>` a message, `p:<id>` a card's answer or expiry.
    /// Owing the same key again replaces the row.
    pub key: String,
    /// When it was owed.
    pub at: Time,
    /// The core's own JSON (the event without its file's bytes); the store never parses it.
    pub body: String,
    /// A message's file or voice note.
    pub blob: Option<Vec<u8>>,
}

/// What the server reads before the loop starts, to restore the core.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Each device's reserved seqs (`Record::Reserve`'s `upto`) and the seq of its newest
    /// entry: the device goes on after the larger.
    pub seqs: Vec<(DeviceId, u64)>,
    /// The largest seq of any device whose seq row was dropped (bounds): a device the
    /// journal does not know goes on after it, so that no seq is ever handed out twice.
    pub seq_floor: u64,
    /// Entries still held, in `seq` order.
    pub held: Vec<Entry>,
    /// Open cards, in `seq` order.
    pub open_cards: Vec<Entry>,
    /// The idempotency windows' entries, oldest first.
    pub dedup: Vec<DedupRow>,
    /// Events the agent is still owed, in the order they were owed. Never dropped by the
    /// bounds nor by `Forget`: only `Handed` removes one.
    pub owed: Vec<Owed>,
    /// Paired devices (issue 26).
    pub paired: Vec<crate::devices::Paired>,
    /// Pairing codes not yet spent nor expired.
    pub codes: Vec<crate::devices::KeptCode>,
}
