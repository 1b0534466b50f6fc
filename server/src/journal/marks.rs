//! How the last run ended, as rows of `meta`, so that the open reads the whole file only
//! when there is a reason to.
//!
//! `PRAGMA quick_check` reads every page: 0.56 s for a 660 MB journal even in the page
//! cache, seconds from an SD card. A journal that was committed and closed in order is as
//! sound as when it was last checked, so the journal thread writes `clean` after its last
//! commit at an orderly stop, and the open deletes it (in the commit it makes anyway). A
//! start that finds no `clean` (a SIGKILL, a power cut, a panic, the first start of a
//! journal from the first release) checks the file. SQLite also reports a damaged page
//! whenever a statement meets it: the journal thread then writes `damaged`, and the next
//! open runs the full `integrity_check` (which also compares each index with its table,
//! what `quick_check` leaves out) and moves the file aside if it fails.
//!
//! Neither costs a turn anything: `clean` is written once per run, at its end.

use rusqlite::{Connection, ErrorCode};

use super::now_unix_ms;
use super::rows::int;

/// What the open learns from the marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LastRun {
    /// Stopped in order after its last commit: nothing to check.
    Clean,
    /// Stopped without saying so (killed, crashed, or a file of the first release).
    Unclean,
    /// SQLite reported the file damaged while it ran.
    Damaged,
}

/// A mark the journal thread leaves.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mark {
    Clean,
    Damaged,
}

impl Mark {
    fn name(self) -> &'static str {
        match self {
            Mark::Clean => "clean",
            Mark::Damaged => "damaged",
        }
    }
}

/// Reads the marks (of a file at schema 1 or later).
pub(super) fn last_run(conn: &Connection) -> rusqlite::Result<LastRun> {
    let mut stmt = conn.prepare("SELECT name FROM meta WHERE name IN ('clean', 'damaged')")?;
    let names = stmt
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(if names.iter().any(|n| n == "damaged") {
        LastRun::Damaged
    } else if names.iter().any(|n| n == "clean") {
        LastRun::Clean
    } else {
        LastRun::Unclean
    })
}

/// Deletes both marks: from now on this run is under way (and, if it ends badly, unclean).
pub(super) fn clear(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM meta WHERE name IN ('clean', 'damaged')", [])
        .map(drop)
}

/// Writes a mark (its value is when, in unix ms, for an owner reading the file).
pub(super) fn mark(conn: &Connection, mark: Mark) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)")?
        .execute(rusqlite::params![mark.name(), int(now_unix_ms())])
        .map(drop)
}

/// SQLite's word that the file itself is damaged (not a full disk, a lock, an I/O error).
pub(super) fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}
