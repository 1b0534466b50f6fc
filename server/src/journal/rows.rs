//! The core's records and reads as SQL: the one place that knows the columns.
//!
//! Integers cross as i64 with saturating conversions, so no value the core sends and no
//! value a hand-edited file holds can panic here; anything else SQLite refuses comes back
//! as an error for the caller to report.

use hermes_mobile::ids::DeviceId;
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::journal::{DedupRow, Entry, Owed, Read, ReadResult, Record, Window};
use rusqlite::{params, Connection, Row};

use super::Clock;

/// The columns of `entries` in the order [`entry`] reads them.
macro_rules! columns {
    () => {
        "device, key, seq, first_seq, at, held, open, deadline, body, blob"
    };
}

/// A u64 as SQLite's i64 (saturating: seqs and unix times are far below it).
pub(super) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// An i64 from the file as a u64 (a negative, which only a hand edit could put there, is 0).
pub(super) fn uint(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn window_code(window: Window) -> i64 {
    match window {
        Window::Seen => 1,
        Window::Delivered => 2,
    }
}

fn window(code: i64) -> Option<Window> {
    match code {
        1 => Some(Window::Seen),
        2 => Some(Window::Delivered),
        _ => None,
    }
}

fn entry(row: &Row<'_>, clock: Clock) -> rusqlite::Result<Entry> {
    Ok(Entry {
        device: DeviceId(row.get(0)?),
        key: row.get(1)?,
        seq: uint(row.get(2)?),
        first_seq: uint(row.get(3)?),
        at: clock.time(uint(row.get(4)?)),
        held: row.get::<_, i64>(5)? != 0,
        open: row.get::<_, i64>(6)? != 0,
        deadline: row.get::<_, Option<i64>>(7)?.map(|d| clock.time(uint(d))),
        body: row.get(8)?,
        blob: row.get(9)?,
    })
}

/// Applies one record (inside the caller's transaction). `now` is unix ms, for `used_at`.
pub(super) fn apply(conn: &Connection, record: &Record, clock: Clock, now: u64) -> rusqlite::Result<()> {
    match record {
        Record::Put(e) => {
            conn.prepare_cached(concat!(
                "INSERT INTO entries (",
                columns!(),
                ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                 ON CONFLICT (device, key) DO UPDATE SET seq = excluded.seq,
                   first_seq = excluded.first_seq, at = excluded.at, held = excluded.held,
                   open = excluded.open, deadline = excluded.deadline, body = excluded.body,
                   blob = excluded.blob"
            ))?
            .execute(params![
                e.device.0,
                e.key,
                int(e.seq),
                int(e.first_seq),
                int(clock.unix_ms(e.at)),
                e.held,
                e.open,
                e.deadline.map(|d| int(clock.unix_ms(d))),
                e.body,
                e.blob,
            ])?;
            reserve(conn, &e.device, e.seq, now)
        }
        Record::Sent { device, keys } => {
            let mut sent =
                conn.prepare_cached("UPDATE entries SET held = 0, blob = NULL WHERE device = ?1 AND key = ?2")?;
            for key in keys {
                sent.execute(params![device.0, key])?;
            }
            Ok(())
        }
        Record::Reserve { device, upto } => reserve(conn, device, *upto, now),
        Record::Dedup {
            window,
            device,
            id,
            at,
            value,
        } => conn
            .prepare_cached(
                "INSERT INTO dedup (win, device, id, at, value) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (win, device, id) DO UPDATE SET at = excluded.at, value = excluded.value",
            )?
            .execute(params![
                window_code(*window),
                device.0,
                id,
                int(clock.unix_ms(*at)),
                value
            ])
            .map(drop),
        // Open cards outlive a forget: the agent still waits for their answer.
        Record::Forget { device } => conn
            .prepare_cached("DELETE FROM entries WHERE device = ?1 AND open = 0")?
            .execute([&device.0])
            .map(drop),
        Record::Owe(owed) => owe(conn, owed, clock),
        Record::Handed { device, key } => conn
            .prepare_cached("DELETE FROM owed WHERE device = ?1 AND key = ?2")?
            .execute(params![device.0, key])
            .map(drop),
        Record::Confirm { .. } => Ok(()),
        Record::Pair(_)
        | Record::Unpair { .. }
        | Record::PairCode(_)
        | Record::CodeSpent { .. }
        | Record::Seen { .. } => super::devices::apply(conn, record, clock),
    }
}

/// Owes an event; owing its key again replaces the row and moves it to the end.
fn owe(conn: &Connection, owed: &Owed, clock: Clock) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO owed (device, key, n, at, body, blob)
         VALUES (?1, ?2, (SELECT coalesce(max(n), 0) + 1 FROM owed), ?3, ?4, ?5)
         ON CONFLICT (device, key) DO UPDATE SET n = excluded.n, at = excluded.at,
           body = excluded.body, blob = excluded.blob",
    )?
    .execute(params![
        owed.device.0,
        owed.key,
        int(clock.unix_ms(owed.at)),
        owed.body,
        owed.blob,
    ])
    .map(drop)
}

/// Raises the device's reserved seq (never lowers it) and marks it used now, at most once
/// a minute: a put within the reservation (the usual case: seqs are reserved in blocks)
/// then leaves the row, and its page, untouched. `used_at` only ranks devices for the caps.
fn reserve(conn: &Connection, device: &DeviceId, upto: u64, now: u64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO seqs (device, reserved, used_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (device) DO UPDATE SET reserved = max(reserved, excluded.reserved), used_at = excluded.used_at
         WHERE excluded.reserved > reserved OR excluded.used_at >= used_at + ?4",
    )?
    .execute(params![device.0, int(upto), int(now), USED_AT_EVERY_MS])
    .map(drop)
}

/// How stale a device's `used_at` may get before a put rewrites it.
const USED_AT_EVERY_MS: i64 = 60_000;

/// Answers a read.
pub(super) fn read(conn: &Connection, read: &Read, clock: Clock, cutoff: u64) -> rusqlite::Result<ReadResult> {
    match read {
        Read::After { device, after, limit } => {
            let (entries, more) = page(conn, device, Page::After(*after), *limit, clock, cutoff)?;
            Ok(ReadResult {
                entries,
                more,
                ..ReadResult::default()
            })
        }
        Read::Before { device, before, limit } => {
            let (entries, more) = page(conn, device, Page::Before(*before), *limit, clock, cutoff)?;
            Ok(ReadResult {
                entries,
                more,
                ..ReadResult::default()
            })
        }
        Read::Owed { keys, limit, max_bytes } => {
            let owed = owed_of(conn, keys, *limit, *max_bytes, clock)?;
            Ok(ReadResult {
                owed,
                ..ReadResult::default()
            })
        }
    }
}

enum Page {
    After(u64),
    /// Without a seq, the newest: below every seq.
    Before(Option<u64>),
}

/// A page of a device's entries in seq order, and whether more remain past it; both kinds
/// walk the `(device, seq)` index. An entry kept before `cutoff` (unix ms) is past
/// `MOBILE_HISTORY_DAYS` and left out, so the bound is seen at once though the scan that
/// deletes it runs hourly (L62); a held entry or an open card is never past it, as that
/// scan spares them.
fn page(
    conn: &Connection,
    device: &DeviceId,
    page: Page,
    limit: usize,
    clock: Clock,
    cutoff: u64,
) -> rusqlite::Result<(Vec<Entry>, bool)> {
    // One row past the limit tells whether more remain.
    let take = int(u64::try_from(limit).unwrap_or(u64::MAX)).saturating_add(1);
    let map = |row: &Row<'_>| entry(row, clock);
    let mut entries: Vec<Entry> = match page {
        Page::After(after) => conn
            .prepare_cached(concat!(
                "SELECT ",
                columns!(),
                " FROM entries WHERE device = ?1 AND seq > ?2",
                " AND (at >= ?4 OR held = 1 OR open = 1) ORDER BY seq LIMIT ?3"
            ))?
            .query_map(params![device.0, int(after), take, int(cutoff)], map)?
            .collect::<rusqlite::Result<_>>()?,
        Page::Before(before) => conn
            .prepare_cached(concat!(
                "SELECT ",
                columns!(),
                " FROM entries WHERE device = ?1 AND seq < ?2",
                " AND (at >= ?4 OR held = 1 OR open = 1) ORDER BY seq DESC LIMIT ?3"
            ))?
            .query_map(params![device.0, before.map_or(i64::MAX, int), take, int(cutoff)], map)?
            .collect::<rusqlite::Result<_>>()?,
    };
    let more = entries.len() > limit;
    entries.truncate(limit);
    if matches!(page, Page::Before(_)) {
        entries.reverse();
    }
    Ok((entries, more))
}

/// Every entry of a device in seq order (the CLI's history).
pub(super) fn device_entries(conn: &Connection, device: &DeviceId, clock: Clock) -> rusqlite::Result<Vec<Entry>> {
    conn.prepare(concat!(
        "SELECT ",
        columns!(),
        " FROM entries WHERE device = ?1 ORDER BY seq"
    ))?
    .query_map([&device.0], |row| entry(row, clock))?
    .collect()
}

/// Held entries or open cards (`which` is `held` or `open`), by device and then seq;
/// the partial indexes make this a walk over only those rows.
pub(super) fn flagged(conn: &Connection, which: Flag, clock: Clock) -> rusqlite::Result<Vec<Entry>> {
    let sql = match which {
        Flag::Held => concat!(
            "SELECT ",
            columns!(),
            " FROM entries WHERE held = 1 ORDER BY device, seq"
        ),
        Flag::Open => concat!(
            "SELECT ",
            columns!(),
            " FROM entries WHERE open = 1 ORDER BY device, seq"
        ),
    };
    conn.prepare(sql)?.query_map([], |row| entry(row, clock))?.collect()
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Flag {
    Held,
    Open,
}

/// Each device's next seq floor: its reservation or its newest entry, whichever is larger.
pub(super) fn seqs(conn: &Connection) -> rusqlite::Result<Vec<(DeviceId, u64)>> {
    let mut seqs = std::collections::BTreeMap::<String, u64>::new();
    let sources = [
        "SELECT device, reserved FROM seqs",
        "SELECT device, max(seq) FROM entries GROUP BY device",
    ];
    for sql in sources {
        let mut stmt = conn.prepare(sql)?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let seq = uint(row.get(1)?);
            let slot = seqs.entry(row.get(0)?).or_default();
            *slot = (*slot).max(seq);
        }
    }
    Ok(seqs.into_iter().map(|(device, seq)| (DeviceId(device), seq)).collect())
}

/// The largest reserved seq of the devices whose `seqs` rows were dropped.
/// Seqs of devices the journal does not know go on above `floor` from now on.
pub(super) fn raise_seq_floor(conn: &Connection, floor: u64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO meta (name, value) VALUES ('seq_floor', ?1)
         ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)",
    )?
    .execute([int(floor)])
    .map(drop)
}

pub(super) fn seq_floor(conn: &Connection) -> rusqlite::Result<u64> {
    let floor = conn.query_row("SELECT max(value) FROM meta WHERE name = 'seq_floor'", [], |row| {
        row.get::<_, Option<i64>>(0)
    })?;
    Ok(floor.map_or(0, uint))
}

/// Every owed event, in the order it was owed.
pub(super) fn owed(conn: &Connection, clock: Clock) -> rusqlite::Result<Vec<Owed>> {
    conn.prepare("SELECT device, key, at, body, blob FROM owed ORDER BY n")?
        .query_map([], |row| owed_row(row, clock))?
        .collect()
}

/// Those of `keys` still owed, in the order they were owed, as many as fit in `limit` and
/// `max_bytes` (the first always). Their sizes are read first (`length` reads a row's
/// header, not its file), so that what does not fit is never loaded.
fn owed_of(
    conn: &Connection,
    keys: &[EventKey],
    limit: usize,
    max_bytes: usize,
    clock: Clock,
) -> rusqlite::Result<Vec<Owed>> {
    let mut sizes = conn.prepare_cached(
        "SELECT n, length(body) + coalesce(length(blob), 0) FROM owed WHERE device = ?1 AND key = ?2",
    )?;
    let mut found: Vec<(i64, u64, &EventKey)> = Vec::new();
    for k in keys {
        let mut rows = sizes.query(params![k.device.0, k.key])?;
        if let Some(row) = rows.next()? {
            found.push((row.get(0)?, uint(row.get(1)?), k));
        }
    }
    found.sort_by_key(|(n, _, _)| *n);
    let mut bytes = 0u64;
    let fit = found
        .iter()
        .take(limit)
        .take_while(|(_, size, _)| {
            bytes += size;
            bytes <= max_bytes as u64
        })
        .count()
        .max(1);
    let mut stmt =
        conn.prepare_cached("SELECT device, key, at, body, blob FROM owed WHERE device = ?1 AND key = ?2")?;
    let mut owed = Vec::new();
    for (_, _, k) in found.iter().take(fit) {
        owed.push(stmt.query_row(params![k.device.0, k.key], |row| owed_row(row, clock))?);
    }
    Ok(owed)
}

fn owed_row(row: &Row<'_>, clock: Clock) -> rusqlite::Result<Owed> {
    Ok(Owed {
        device: DeviceId(row.get(0)?),
        key: row.get(1)?,
        at: clock.time(uint(row.get(2)?)),
        body: row.get(3)?,
        blob: row.get(4)?,
    })
}

/// The idempotency windows' rows kept since `since` (unix ms), oldest first. A row of a
/// window this build does not know is skipped.
pub(super) fn dedup(conn: &Connection, since: u64, clock: Clock) -> rusqlite::Result<Vec<DedupRow>> {
    let mut stmt =
        conn.prepare("SELECT win, device, id, at, value FROM dedup WHERE at >= ?1 ORDER BY at, win, device, id")?;
    let mut rows = stmt.query([int(since)])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let Some(window) = window(row.get(0)?) else {
            continue;
        };
        out.push(DedupRow {
            window,
            device: DeviceId(row.get(1)?),
            id: row.get(2)?,
            at: clock.time(uint(row.get(3)?)),
            value: row.get(4)?,
        });
    }
    Ok(out)
}
