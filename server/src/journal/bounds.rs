//! What the journal keeps at most, applied lazily: after a commit, at most once a second,
//! in a transaction of its own (a failed trim never costs the core a batch). Rows written
//! too soon after a pass for their own commit to run one get a pass a second after it,
//! even if nothing more is written (L62: within about a second, also on a quiet gateway).
//!
//! A held entry and an open card are never trimmed by count, age or the device cap: they
//! are owed to a device. An event owed to the agent (the `owed` table) is never touched
//! here at all: only the agent's receipt removes it, and the core bounds what it owes.
//! Passes are kept cheap for a Pi: the per-device count only for devices written since
//! the last pass, the device cap only when a device not counted before was written, the
//! age scan (a full scan of `entries`: no index on `at`) once an hour, the first a minute
//! after the open rather than at it, so that it neither delays the start (0.25 s for a
//! 660 MB journal in the page cache, seconds from a disk) nor the replays of the phones
//! that reconnect at once. Until it runs, reads leave out what it would delete
//! ([`Bounds::age_cutoff`]), so the age bound is seen at once all the same.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hermes_mobile::journal::Record;
use rusqlite::{params, Connection};

use super::rows::int;
use super::JournalSettings;

/// At most this many devices have entries; past it the least recently used loses them.
pub(super) const MAX_DEVICES: usize = 64;
/// At most this many devices' seqs are remembered.
pub(super) const MAX_SEQS: usize = 4096;
/// Free pages past which the file is shrunk, so that sent files' bytes go back to the file
/// system without rewriting it for every page: 512 KiB of 2 KiB pages ([`PAGE_SIZE`]) in a
/// journal made since, 1 MiB in one made before with SQLite's 4 KiB.
///
/// [`PAGE_SIZE`]: super::schema::PAGE_SIZE
const FREE_PAGES: i64 = 256;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

#[derive(Debug)]
pub(super) struct Bounds {
    history: bool,
    items: usize,
    days: u32,
    dedup_window: Duration,
    /// Devices written since the last pass, whose counts it checks.
    dirty: HashSet<String>,
    /// Rows were written since the last pass: one is due a second after it.
    pending: bool,
    /// The devices with entries at the last count: a write to another one recounts.
    counted: Option<HashSet<String>>,
    /// Passes run at most this often (tests run one after every commit).
    pub(super) every: Duration,
    last_pass: Option<Instant>,
    /// When the next pass scans for old entries (tests bring it forward).
    pub(super) next_age_scan: Instant,
}

const AGE_SCAN_EVERY: Duration = Duration::from_secs(3600);
const FIRST_AGE_SCAN: Duration = Duration::from_secs(60);

impl Bounds {
    pub(super) fn new(settings: &JournalSettings) -> Bounds {
        Bounds {
            history: settings.history,
            items: settings.items,
            days: settings.days,
            dedup_window: settings.dedup_window,
            dirty: HashSet::new(),
            pending: false,
            counted: None,
            every: Duration::from_secs(1),
            last_pass: None,
            next_age_scan: Instant::now() + FIRST_AGE_SCAN,
        }
    }

    /// Notes a record on its way in.
    pub(super) fn note(&mut self, record: &Record) {
        // Any row may bring a bound into play: a put the counts and the device cap, a
        // sent entry (history off) its deletion, a reservation the seqs cap.
        if !matches!(record, Record::Confirm { .. }) {
            self.pending = true;
        }
        if let Record::Put(entry) = record {
            if !self.dirty.contains(&entry.device.0) {
                self.dirty.insert(entry.device.0.clone());
            }
        }
    }

    pub(super) fn due(&self, now: Instant) -> bool {
        self.last_pass.is_none_or(|last| now.duration_since(last) >= self.every)
    }

    /// When the journal thread, idle, should wake for a pass: a second after the last one
    /// if rows were written since (their commit came too soon after it to run one), else
    /// at the age scan, which applies even to a journal nothing is written to.
    pub(super) fn idle_pass_at(&self) -> Instant {
        match self.last_pass {
            Some(last) if self.pending => (last + self.every).min(self.next_age_scan),
            _ => self.next_age_scan,
        }
    }

    /// Entries kept before this (unix ms) are past `MOBILE_HISTORY_DAYS`: reads leave them
    /// out at once, the age scan deletes them later.
    pub(super) fn age_cutoff(&self, now_unix: u64) -> u64 {
        now_unix.saturating_sub(DAY_MS.saturating_mul(u64::from(self.days)))
    }

    /// Every bound over every device but the age (at open: counting entries per device
    /// walks an index, not the table).
    pub(super) fn run_all(&mut self, conn: &Connection, now_unix: u64, now: Instant) -> rusqlite::Result<()> {
        let mut over = conn.prepare("SELECT device FROM entries GROUP BY device HAVING count(*) > ?1")?;
        let devices = over
            .query_map([int(self.items as u64)], |row| row.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        self.dirty.extend(devices);
        self.counted = None;
        self.run(conn, now_unix, now)
    }

    /// One pass; `now_unix` is unix ms, for ages.
    pub(super) fn run(&mut self, conn: &Connection, now_unix: u64, now: Instant) -> rusqlite::Result<()> {
        // Cleared first: a pass that fails is tried again after the next write, not at
        // every wake.
        self.last_pass = Some(now);
        self.pending = false;
        if !self.history {
            conn.execute("DELETE FROM entries WHERE held = 0 AND open = 0", [])?;
        }
        if now >= self.next_age_scan {
            // Set first: a scan that fails is tried again in an hour, not at every wake.
            self.next_age_scan = now + AGE_SCAN_EVERY;
            let cutoff = self.age_cutoff(now_unix);
            conn.execute(
                "DELETE FROM entries WHERE at < ?1 AND held = 0 AND open = 0",
                [int(cutoff)],
            )?;
        }
        for device in &self.dirty {
            trim_device(conn, device, self.items)?;
        }
        let uncounted = match &self.counted {
            None => true,
            Some(counted) => self.dirty.iter().any(|d| !counted.contains(d)),
        };
        if uncounted {
            self.counted = Some(cap_devices(conn)?);
        }
        self.dirty.clear();
        cap_seqs(conn)?;
        let window = u64::try_from(self.dedup_window.as_millis()).unwrap_or(u64::MAX);
        conn.execute(
            "DELETE FROM dedup WHERE at < ?1",
            [int(now_unix.saturating_sub(window))],
        )?;
        shrink(conn)
    }
}

/// Drops a device's oldest entries past `items`, never a held one or an open card.
fn trim_device(conn: &Connection, device: &str, items: usize) -> rusqlite::Result<()> {
    let count: i64 = conn
        .prepare_cached("SELECT count(*) FROM entries WHERE device = ?1")?
        .query_row([device], |row| row.get(0))?;
    let excess = count.saturating_sub(int(items as u64));
    if excess > 0 {
        conn.prepare_cached(
            "DELETE FROM entries WHERE device = ?1 AND key IN (SELECT key FROM entries
             WHERE device = ?1 AND held = 0 AND open = 0 ORDER BY seq LIMIT ?2)",
        )?
        .execute(params![device, excess])?;
    }
    Ok(())
}

/// Keeps the history of the [`MAX_DEVICES`] most recently used devices; the others lose
/// it, not their seqs, and never what is still held for them or an open card (those were
/// acknowledged, and the core bounds them on its own: L32, L33), nor the events owed to
/// the agent (this never touches `owed`). Only devices with history to lose are ranked:
/// one with nothing but held entries, open cards or owed events keeps all of it and takes
/// no other device's place. Returns the devices that keep entries. Every device with
/// entries has a `seqs` row (a put writes both, and [`cap_seqs`] spares them), so this
/// walks the small `seqs` table with one index probe per row.
fn cap_devices(conn: &Connection) -> rusqlite::Result<HashSet<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT device FROM seqs s WHERE EXISTS (SELECT 1 FROM entries e
             WHERE e.device = s.device AND e.held = 0 AND e.open = 0)
         ORDER BY used_at DESC, device DESC",
    )?;
    let devices = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let total = devices.len();
    let mut kept = HashSet::new();
    for (i, device) in devices.into_iter().enumerate() {
        if i < MAX_DEVICES {
            kept.insert(device);
            continue;
        }
        conn.prepare_cached("DELETE FROM entries WHERE device = ?1 AND held = 0 AND open = 0")?
            .execute([&device])?;
        log::info!(
            "journal: {total} devices have entries, more than {MAX_DEVICES}; \
             the least recently used, {device:?}, lost its entries"
        );
    }
    Ok(kept)
}

/// Forgets the seqs of the least recently used devices past [`MAX_SEQS`], sparing those
/// with entries or owed events (as a device with entries keeps its seq row), and raises
/// `seq_floor` to the largest seq they had reserved, so that a forgotten device never
/// gets a seq it had before.
fn cap_seqs(conn: &Connection) -> rusqlite::Result<()> {
    let count: i64 = conn.query_row("SELECT count(*) FROM seqs", [], |row| row.get(0))?;
    let excess = count.saturating_sub(MAX_SEQS as i64);
    if excess <= 0 {
        return Ok(());
    }
    let mut oldest = conn.prepare_cached(
        "SELECT device, reserved FROM seqs s
         WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.device = s.device)
           AND NOT EXISTS (SELECT 1 FROM owed o WHERE o.device = s.device)
         ORDER BY used_at, device LIMIT ?1",
    )?;
    let dropped = oldest
        .query_map([excess], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut forget = conn.prepare_cached("DELETE FROM seqs WHERE device = ?1")?;
    let mut floor = 0;
    for (device, reserved) in dropped {
        forget.execute([device])?;
        floor = floor.max(reserved);
    }
    super::rows::raise_seq_floor(conn, u64::try_from(floor).unwrap_or(0))
}

/// Gives free pages back to the file system once there are enough of them.
fn shrink(conn: &Connection) -> rusqlite::Result<()> {
    let free: i64 = conn.pragma_query_value(None, "freelist_count", |row| row.get(0))?;
    if free > FREE_PAGES {
        // A pragma that frees one page per step: run it to its end.
        let mut stmt = conn.prepare("PRAGMA incremental_vacuum")?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}
