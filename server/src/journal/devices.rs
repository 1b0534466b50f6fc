//! Paired devices and pairing codes in the journal's database (issue 26): the rows behind
//! the core's device records, and what the CLI reads and writes with the gateway stopped.
//! A token and a code are kept only as their SHA-256 digests.

use std::path::Path;

use hermes_mobile::devices::{KeptCode, Paired};
use hermes_mobile::ids::DeviceId;
use hermes_mobile::journal::Record;
use rusqlite::{params, Connection};

use super::rows::{int, uint};
use super::Clock;

/// Applies a device record (inside the caller's transaction).
pub(super) fn apply(conn: &Connection, record: &Record, clock: Clock) -> rusqlite::Result<()> {
    match record {
        Record::Pair(p) => conn
            .prepare_cached(
                "INSERT INTO devices (id, name, platform, owner, paired_at, last_seen, token)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, platform = excluded.platform,
                   owner = excluded.owner, paired_at = excluded.paired_at,
                   last_seen = excluded.last_seen, token = excluded.token",
            )?
            .execute(params![
                p.id,
                p.name,
                p.platform,
                p.owner,
                int(p.paired_at),
                p.last_seen.map(int),
                &p.token_digest()[..],
            ])
            .map(drop),
        Record::Unpair { device } => unpair(conn, device),
        Record::PairCode(code) => conn
            .prepare_cached(
                "INSERT INTO pair_codes (digest, owner, expires) VALUES (?1, ?2, ?3)
                 ON CONFLICT (digest) DO UPDATE SET owner = excluded.owner, expires = excluded.expires",
            )?
            .execute(params![&code.digest[..], code.owner, int(clock.unix_ms(code.expires))])
            .map(drop),
        Record::CodeSpent { digest } => conn
            .prepare_cached("DELETE FROM pair_codes WHERE digest = ?1")?
            .execute([&digest[..]])
            .map(drop),
        Record::Seen { device, at } => conn
            .prepare_cached("UPDATE devices SET last_seen = max(coalesce(last_seen, 0), ?2) WHERE id = ?1")?
            .execute(params![device.0, int(*at)])
            .map(drop),
        _ => Ok(()),
    }
}

/// A revoked device's row goes, and what is held for it (its history stays unless it is
/// forgotten too).
fn unpair(conn: &Connection, device: &DeviceId) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM devices WHERE id = ?1")?
        .execute([&device.0])?;
    conn.prepare_cached("DELETE FROM entries WHERE device = ?1 AND held = 1")?
        .execute([&device.0])
        .map(drop)
}

/// Every paired device, by id.
pub(super) fn paired(conn: &Connection) -> rusqlite::Result<Vec<Paired>> {
    conn.prepare("SELECT id, name, platform, owner, paired_at, last_seen, token FROM devices ORDER BY id")?
        .query_map([], |row| {
            let digest: Vec<u8> = row.get(6)?;
            let mut token = [0u8; 32];
            // A digest of another length (a hand edit) matches no token.
            if digest.len() == 32 {
                token.copy_from_slice(&digest);
            }
            let id: String = row.get(0)?;
            let name: String = row.get(1)?;
            let platform: String = row.get(2)?;
            let mut p = Paired::from_digest(&id, &name, &platform, row.get(3)?, uint(row.get(4)?), token);
            p.last_seen = row.get::<_, Option<i64>>(5)?.map(uint);
            Ok(p)
        })?
        .collect()
}

/// Codes not yet expired at `now` (unix ms).
pub(super) fn codes(conn: &Connection, clock: Clock, now: u64) -> rusqlite::Result<Vec<KeptCode>> {
    conn.prepare("SELECT digest, owner, expires FROM pair_codes WHERE expires > ?1")?
        .query_map([int(now)], |row| {
            let digest: Vec<u8> = row.get(0)?;
            let mut d = [0u8; 32];
            if digest.len() == 32 {
                d.copy_from_slice(&digest);
            }
            Ok(KeptCode {
                digest: d,
                owner: row.get(1)?,
                expires: clock.time(uint(row.get(2)?)),
            })
        })?
        .collect()
}

/// One paired device as the CLI shows it with the gateway stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub device: Paired,
    /// Its journal's entries.
    pub history: u64,
}

/// Opens the journal to change it with the gateway stopped (the CLI, which holds the state
/// directory's lock meanwhile); `f` runs in one transaction.
pub fn offline<T>(path: &Path, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, String> {
    let conn = super::open::open_for_cli(path)?;
    let failed = |e: rusqlite::Error| format!("{}: {e}", path.display());
    let tx = conn.unchecked_transaction().map_err(failed)?;
    let out = f(&tx).map_err(failed)?;
    tx.commit().map_err(failed)?;
    Ok(out)
}

/// Codes past their expiry go at the gateway's open (and the CLI's): one row per `pair`
/// would otherwise stay for good.
pub(super) fn drop_expired_codes(conn: &Connection, now: u64) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM pair_codes WHERE expires <= ?1", [int(now)])
        .map(drop)
}

/// Every paired device with its journal's size.
pub fn list(conn: &Connection) -> rusqlite::Result<Vec<Listed>> {
    let mut count = conn.prepare("SELECT count(*) FROM entries WHERE device = ?1")?;
    paired(conn)?
        .into_iter()
        .map(|device| {
            let history: i64 = count.query_row([&device.id], |r| r.get(0))?;
            Ok(Listed {
                device,
                history: uint(history),
            })
        })
        .collect()
}

/// The journal sizes of these devices, read while the gateway runs.
pub fn history_sizes(conn: &Connection, ids: &[String]) -> rusqlite::Result<Vec<u64>> {
    let mut count = conn.prepare("SELECT count(*) FROM entries WHERE device = ?1")?;
    ids.iter()
        .map(|id| count.query_row([id], |r| r.get::<_, i64>(0)).map(uint))
        .collect()
}

/// Revokes a device with the gateway stopped: whether it was paired. `forget` drops its
/// journal but its open cards, as the running gateway's `forget` does.
pub fn revoke(conn: &Connection, device: &DeviceId, forget: bool) -> rusqlite::Result<bool> {
    let paired = conn
        .prepare("SELECT 1 FROM devices WHERE id = ?1")?
        .exists([&device.0])?;
    if !paired {
        return Ok(false);
    }
    unpair(conn, device)?;
    if forget {
        conn.execute("DELETE FROM entries WHERE device = ?1 AND open = 0", [&device.0])?;
    }
    Ok(true)
}

/// Keeps a pairing code with the gateway stopped (it reads it at its next start).
pub fn add_code(conn: &Connection, code: &KeptCode, expires_unix_ms: u64) -> rusqlite::Result<()> {
    drop_expired_codes(conn, super::now_unix_ms())?;
    conn.execute(
        "INSERT INTO pair_codes (digest, owner, expires) VALUES (?1, ?2, ?3)",
        params![&code.digest[..], code.owner, int(expires_unix_ms)],
    )
    .map(drop)
}

/// Codes waiting at `now` (unix ms): at most eight may.
pub fn codes_waiting(conn: &Connection, now: u64) -> rusqlite::Result<usize> {
    let n: i64 = conn.query_row("SELECT count(*) FROM pair_codes WHERE expires > ?1", [int(now)], |r| {
        r.get(0)
    })?;
    Ok(usize::try_from(n).unwrap_or(0))
}
