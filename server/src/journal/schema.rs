//! The journal's schema and its migrations, numbered by `PRAGMA user_version`.
//!
//! `MIGRATIONS[i]` takes a file from version `i` to `i + 1`, in one transaction with the
//! version bump, so a crash leaves a file at one version or the next, never between. A
//! file whose version is above [`VERSION`] was written by a newer build: it is refused
//! whole, never half-read, and left as it is.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rusqlite::Connection;

/// The schema this build reads and writes.
pub(super) const VERSION: u32 = 3;

/// The comments are part of the schema text, so `sqlite3 journal.sqlite3 .schema` shows an
/// owner what each column means. Times are unix milliseconds.
/// Version 1, as the first release wrote it: never edited but for its comments (a migration
/// test builds a file from it; SQLite keeps a comment as text and nothing else), only
/// followed by migrations. A file made before a comment was corrected keeps the old words.
pub(super) const V1: &str = "
CREATE TABLE entries (
    device    TEXT NOT NULL,
    key       TEXT NOT NULL,    -- m:<id> agent message, u:<id> user message, f:<id> file, p:<id> card
    seq       INTEGER NOT NULL, -- the seq of its latest change
    first_seq INTEGER NOT NULL, -- the seq of its first version
    at        INTEGER NOT NULL, -- its latest change (unix ms): MOBILE_HISTORY_DAYS counts from it
    held      INTEGER NOT NULL, -- 1: still to be sent after the device's next ready
    open      INTEGER NOT NULL, -- 1: an open card
    deadline  INTEGER,          -- an open card's expiry (unix ms)
    body      TEXT NOT NULL,    -- the gateway's own JSON
    blob      BLOB,             -- a held file's bytes, dropped once it is sent
    PRIMARY KEY (device, key)
);
CREATE INDEX entries_by_seq ON entries (device, seq);
-- Small: what the start-up snapshot reads without scanning the history.
CREATE INDEX entries_held ON entries (device, seq) WHERE held = 1;
CREATE INDEX entries_open ON entries (device, seq) WHERE open = 1;
CREATE TABLE seqs (
    device   TEXT NOT NULL PRIMARY KEY,
    reserved INTEGER NOT NULL,  -- seqs up to this may have been handed out
    used_at  INTEGER NOT NULL   -- when the device was last written (unix ms)
) WITHOUT ROWID;
CREATE TABLE dedup (
    win    INTEGER NOT NULL,    -- 1: ids received from the phone (I2), 2: deliver ids (S4)
    device TEXT NOT NULL,
    id     TEXT NOT NULL,
    at     INTEGER NOT NULL,    -- unix ms
    value  TEXT NOT NULL,
    PRIMARY KEY (win, device, id)
) WITHOUT ROWID;
-- Values of the journal as a whole. seq_floor: the largest seq reserved by a device whose
-- seqs row was dropped; a device the journal does not know goes on after it.
CREATE TABLE meta (
    name  TEXT NOT NULL PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Version 2: events owed to the agent (L64), in one b-tree keyed by `(device, key)`: a
/// turn owes its message and hands it over, so each b-tree here is about a page written
/// per turn (a rowid order with a unique index on `(device, key)` wrote 4.2 KB more per
/// text turn). `n` keeps the order they were owed: owing a key again gives it an `n` above
/// every other. Finding the largest scans the table, which holds only what the agent has
/// not had yet (the link's queue gives events up past 256 or 10 minutes).
const V2: &str = "
-- Events the agent has not had yet, handed over again after a restart until it has them.
-- Only the agent's receipt removes a row: neither the bounds nor a forget do.
CREATE TABLE owed (
    device TEXT NOT NULL,
    key    TEXT NOT NULL,       -- m:<id> a message, p:<id> a card's answer or expiry
    n      INTEGER NOT NULL,    -- the order they were owed (owed again, a key goes last)
    at     INTEGER NOT NULL,    -- when it was owed (unix ms)
    body   TEXT NOT NULL,       -- the gateway's own JSON (the event without its file's bytes)
    blob   BLOB,                -- a message's file or voice note
    PRIMARY KEY (device, key)
) WITHOUT ROWID;
";

/// Version 3: paired devices and pairing codes (issue 26). A device's token and a code are
/// kept only as their SHA-256 digests: nothing here lets anyone connect or pair.
const V3: &str = "
-- Paired devices: each connects only with its own token (hermes-mobile devices lists them).
CREATE TABLE devices (
    id        TEXT NOT NULL PRIMARY KEY,
    name      TEXT NOT NULL,
    platform  TEXT NOT NULL,
    owner     INTEGER NOT NULL, -- 1: may list and revoke devices (paired with pair --owner)
    paired_at INTEGER NOT NULL, -- unix ms
    last_seen INTEGER,          -- its latest connection or disconnection (unix ms)
    token     BLOB NOT NULL     -- SHA-256 of its token, never the token
) WITHOUT ROWID;
-- Pairing codes not yet spent (hermes-mobile pair), each for 10 minutes unless --ttl.
CREATE TABLE pair_codes (
    digest  BLOB NOT NULL PRIMARY KEY, -- SHA-256 of the code, never the code
    owner   INTEGER NOT NULL,          -- 1: pairs an owner device
    expires INTEGER NOT NULL           -- unix ms
) WITHOUT ROWID;
";

const MIGRATIONS: [&str; VERSION as usize] = [V1, V2, V3];

pub(super) fn version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

pub(super) fn newer_reason(path: &Path, version: u32) -> String {
    format!(
        "{} was made by a newer hermes-mobile (schema {version}, this build reads {VERSION})",
        path.display()
    )
}

/// What a new file needs before anything else is written to it, even the switch to WAL:
/// its [`PAGE_SIZE`], and incremental auto-vacuum, which lets the bounds hand freed pages (sent files' bytes)
/// back to the file system. SQLite fixes it when the file's first page is written.
pub(super) fn prepare_new(conn: &Connection) -> rusqlite::Result<()> {
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
}

/// Pages of 2 KiB rather than SQLite's 4 KiB: a text turn rewrites about six b-tree
/// leaves (the key index twice, the seq index, the table, `dedup`, `owed`), each a whole
/// page in the WAL, so the page is what a turn writes to the SD card. 2 KiB took a turn
/// one at a time from 35.6 to 23.0 KB and with 64 phones from 31.4 to 25.7 KB, for 2 to 4 %
/// more CPU with 64 phones and none measurable one at a time (1 KiB: 16.6 KB, but 35 % more
/// CPU). SQLite fixes the size when the file's first page is written: a journal made before
/// keeps its 4 KiB pages, which it reads as well.
pub(super) const PAGE_SIZE: i64 = 2048;

/// Brings a file at `from` (at most [`VERSION`]) up to [`VERSION`].
pub(super) fn migrate(conn: &Connection, from: u32) -> rusqlite::Result<()> {
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i as i64 + 1)?;
        tx.commit()?;
    }
    Ok(())
}

/// The `user_version` in the file's header, read without SQLite: a file from a newer
/// build is refused before SQLite opens it, so it stays byte for byte as it was (not even
/// a `-shm` beside it), even if its schema uses what this build's SQLite cannot parse.
/// `None` for a missing, empty or non-SQLite file (the checks after this decide).
pub(super) fn header_version(path: &Path) -> io::Result<Option<u32>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut head = [0u8; 100];
    match file.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    if &head[..16] != b"SQLite format 3\0" {
        return Ok(None);
    }
    Ok(Some(u32::from_be_bytes([head[60], head[61], head[62], head[63]])))
}
