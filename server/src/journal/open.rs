//! Opening the journal, before the event loop starts: a private file, a schema this build
//! can read, a damaged file moved aside, bounds applied, the snapshot read.

use std::fs;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hermes_mobile::journal::Snapshot;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::bounds::Bounds;
use super::marks::{self, LastRun};
use super::rows::{self, Flag};
use super::schema::{self, VERSION};
use super::{now_unix_ms, sibling, Clock, ClockSource, JournalSettings, MovedAside, Opened, Store, BUSY_TIMEOUT};

/// Group commit: at most one commit per this long.
const GROUP_COMMIT: Duration = Duration::from_millis(20);
/// A checkpoint (copying the WAL's pages into the file) runs once the WAL holds this much,
/// and the WAL is cut back to it after one, so in steady use the file is reused as it is
/// and only a burst of big held files leaves it larger for a while. SQLite's default is
/// 1000 pages (2 MiB of 2 KiB pages): with many phones every commit rewrites the same
/// leaves, and a checkpoint that comes 4 times as seldom copies each of them once instead
/// of 4 times. With 64 phones, 3 to 12 % less CPU and 26 % fewer bytes written per turn;
/// one turn at a time, the same (docs/PERFORMANCE.md). A start after a crash reads it whole.
const WAL_BYTES: i64 = 8 * 1024 * 1024;

/// Why an open failed.
#[derive(Debug)]
enum Failure {
    /// Not a database, or a damaged one: moved aside and started anew.
    Damaged(String),
    /// Anything else: no journal this run.
    Unavailable(String),
}

struct Ready {
    store: Store,
    snapshot: Snapshot,
    bytes: u64,
}

impl Store {
    /// Opens (or creates) the journal and reads what the core restores from. Synchronous:
    /// call it before the loop starts.
    pub fn open(settings: &JournalSettings, clock: impl Into<ClockSource>) -> Opened {
        let clock = clock.into();
        let ready = |r: Ready, moved_aside| Opened::Ready {
            store: r.store,
            snapshot: r.snapshot,
            moved_aside,
            bytes: r.bytes,
        };
        let why = match open_once(settings, clock, None) {
            Ok(r) => return ready(r, None),
            Err(Failure::Unavailable(why)) => return Opened::Unavailable(why),
            Err(Failure::Damaged(why)) => why,
        };
        let path = &settings.path;
        let to = match move_aside(path) {
            Ok(to) => to,
            Err(e) => {
                return Opened::Unavailable(format!(
                    "{} is damaged ({why}) and could not be moved aside: {e}",
                    path.display()
                ))
            }
        };
        // The new journal's seqs go on above any the moved one can have handed out: a phone
        // that kept one resumes after it, and must still get all of the new journal (L62).
        match open_once(settings, clock, Some(now_unix_ms())) {
            Ok(r) => ready(r, Some(MovedAside { to, why })),
            Err(Failure::Damaged(again) | Failure::Unavailable(again)) => Opened::Unavailable(again),
        }
    }
}

/// `floor`: seqs start above it (a journal that replaces one moved aside).
fn open_once(settings: &JournalSettings, clock: ClockSource, floor: Option<u64>) -> Result<Ready, Failure> {
    let path = &settings.path;
    prepare_file(path)?;
    let conn = connect(path, false)?;
    let mut bounds = Bounds::new(settings);
    let now = now_unix_ms();
    let snapshot = (|| {
        let tx = conn.unchecked_transaction()?;
        marks::clear(&tx)?;
        // Not only the open that moved the damaged journal aside writes the floor: it may
        // have ended (a SIGKILL, a full disk) between the new file's schema and its floor,
        // and the next open would then start seqs at 1 again (L62). A journal with no floor
        // beside a moved one replaces it, and nothing can have been handed out from it yet.
        let floor = match floor {
            None if rows::seq_floor(&tx)? == 0 && beside_a_moved_journal(path) => Some(now),
            floor => floor,
        };
        if let Some(floor) = floor {
            rows::raise_seq_floor(&tx, floor)?;
        }
        bounds.run_all(&tx, now, Instant::now())?;
        super::devices::drop_expired_codes(&tx, now)?;
        tx.commit()?;
        read_snapshot(&conn, clock.now(), settings, now)
    })()
    .map_err(|e| classify(path, e))?;
    // The open's reads filled SQLite's page cache; the loop needs little of it at first,
    // and giving it back keeps an idle gateway under its 8 MiB (0.9 MiB less, measured).
    // The cache grows again as reads need it.
    conn.execute_batch("PRAGMA shrink_memory")
        .map_err(|e| classify(path, e))?;
    let store = Store {
        conn,
        path: path.clone(),
        clock,
        bounds,
        interval: GROUP_COMMIT,
    };
    Ok(Ready {
        store,
        snapshot,
        bytes: size(path),
    })
}

/// The file opened for the CLI with the gateway stopped (issue 26, L72): made, checked and
/// migrated as the gateway's open does, but nothing else: no bounds (the CLI does not know
/// the configured ones), no snapshot, and the marks left as they are (an orderly commit
/// keeps a clean stop clean). A damaged file is reported, never moved.
pub(super) fn open_for_cli(path: &Path) -> Result<Connection, String> {
    let failed = |f: Failure| match f {
        Failure::Unavailable(why) => why,
        Failure::Damaged(why) => format!(
            "{} is damaged ({why}); start the gateway, which moves it aside",
            path.display()
        ),
    };
    prepare_file(path).map_err(failed)?;
    connect(path, true).map_err(failed)
}

/// Before SQLite sees the file: a regular file (or none yet), not from a newer build,
/// and owner-only, with its side files.
fn prepare_file(path: &Path) -> Result<(), Failure> {
    let io_failed = |e: io::Error| Failure::Unavailable(format!("{}: {e}", path.display()));
    match fs::metadata(path) {
        Ok(meta) if !meta.is_file() => {
            return Err(Failure::Unavailable(format!("{}: not a regular file", path.display())))
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_failed(e)),
    }
    if let Some(newer) = schema::header_version(path)
        .map_err(io_failed)?
        .filter(|v| *v > VERSION)
    {
        return Err(Failure::Unavailable(schema::newer_reason(path, newer)));
    }
    make_private(path).map_err(io_failed)?;
    // SQLite gives the WAL and its index the file's mode when it creates them; leftovers
    // from before keep their own.
    for side in ["-wal", "-shm"] {
        tighten(&sibling(path, side)).map_err(io_failed)?;
    }
    Ok(())
}

/// Opens the file with SQLite, refuses a newer schema (one still in the WAL of a newer
/// build that crashed), checks it if the last run did not stop cleanly, switches to WAL
/// and migrates.
/// `nofollow`: a journal that is a symbolic link is refused (the CLI, run as root, in a
/// directory another user owns).
fn connect(path: &Path, nofollow: bool) -> Result<Connection, Failure> {
    let sql_failed = |e: rusqlite::Error| classify(path, e);
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if nofollow {
        flags |= OpenFlags::SQLITE_OPEN_NOFOLLOW;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(sql_failed)?;
    // Until the version is known to be ours, closing must not fold a newer build's WAL
    // into the file.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(sql_failed)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_failed)?;
    // Every statement the worker runs stays prepared (about 16 of them).
    conn.set_prepared_statement_cache_capacity(32);
    let version = schema::version(&conn).map_err(sql_failed)?;
    if version > VERSION {
        return Err(Failure::Unavailable(schema::newer_reason(path, version)));
    }
    // A new file has nothing to check (and no `meta` yet).
    let last_run = match version {
        0 => LastRun::Clean,
        _ => marks::last_run(&conn).map_err(sql_failed)?,
    };
    check(&conn, path, last_run)?;
    if version == 0 {
        schema::prepare_new(&conn).map_err(sql_failed)?;
    }
    configure(&conn, path)?;
    schema::migrate(&conn, version).map_err(sql_failed)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)
        .map_err(sql_failed)?;
    Ok(conn)
}

/// A damaged file is moved aside; anything else (a read-only directory, a full disk, a
/// lock held elsewhere) leaves the file alone and the journal off.
fn classify(path: &Path, e: rusqlite::Error) -> Failure {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => Failure::Damaged(e.to_string()),
        _ => Failure::Unavailable(format!("{}: {e}", path.display())),
    }
}

/// After an unclean stop, `PRAGMA quick_check`: the b-trees are sound. After a run that
/// met a damaged page, the full `integrity_check`, which also reads every index against
/// its table (too slow on a Pi's SD card for every start). After a clean stop, nothing:
/// SQLite still reports a damaged page when a statement meets it ([`marks`]).
fn check(conn: &Connection, path: &Path, last_run: LastRun) -> Result<(), Failure> {
    let (pragma, why) = match last_run {
        LastRun::Clean => return Ok(()),
        LastRun::Unclean => ("quick_check", "the last run did not stop cleanly"),
        LastRun::Damaged => ("integrity_check", "the last run found the file damaged"),
    };
    log::info!("journal: {why}; checking the file ({pragma})");
    let problems = (|| {
        let mut stmt = conn.prepare(&format!("PRAGMA {pragma}"))?;
        let rows = stmt.query_map([], |row| row.get::<_, String>(0))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
    })()
    .map_err(|e| match classify(path, e) {
        Failure::Damaged(e) => Failure::Damaged(format!("{pragma}: {e}")),
        other => other,
    })?;
    match problems.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        [] => Err(Failure::Damaged(format!("{pragma} gave no answer"))),
        [first, ..] => Err(Failure::Damaged(format!("{pragma}: {first}"))),
    }
}

/// WAL (a reader beside the writer; one fsync per commit) and `synchronous=FULL`: a
/// commit is on disk when it returns, so `delivered` may be sent on it.
fn configure(conn: &Connection, path: &Path) -> Result<(), Failure> {
    let mode = (|| {
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        let page: i64 = conn.pragma_query_value(None, "page_size", |row| row.get(0))?;
        conn.pragma_update_and_check(None, "wal_autocheckpoint", WAL_BYTES / page.max(512), |_| Ok(()))?;
        conn.pragma_update_and_check(None, "journal_size_limit", WAL_BYTES, |_| Ok(()))?;
        Ok(mode)
    })()
    .map_err(|e| classify(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Failure::Unavailable(format!(
            "{}: could not switch to WAL (journal mode is {mode}); is the directory writable?",
            path.display()
        )));
    }
    Ok(())
}

/// Creates the file owner-only before SQLite opens it (SQLite would make it 0644 under
/// the usual umask, and gives its WAL the same mode), or tightens one that is wider.
fn make_private(path: &Path) -> io::Result<()> {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false) // an existing journal is kept, of course
        .mode(0o600)
        .open(path)?;
    tighten(path)
}

/// Makes an existing file 0600 if it is readable or writable by others.
fn tighten(path: &Path) -> io::Result<()> {
    match fs::metadata(path) {
        Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
            fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Renames a damaged journal to `journal.sqlite3.corrupt-<unix seconds>`, its WAL beside
/// it (so `sqlite3` can still open the pair). No WAL may stay behind: SQLite would replay
/// it into the new file. The `-shm` is only an index of the WAL and is rebuilt.
fn move_aside(path: &Path) -> io::Result<PathBuf> {
    let stamp = now_unix_ms() / 1000;
    let mut to = sibling(path, &format!(".corrupt-{stamp}"));
    let mut n = 1;
    while fs::symlink_metadata(&to).is_ok() {
        to = sibling(path, &format!(".corrupt-{stamp}.{n}"));
        n += 1;
    }
    fs::rename(path, &to)?;
    let wal = sibling(path, "-wal");
    if fs::symlink_metadata(&wal).is_ok() && fs::rename(&wal, sibling(&to, "-wal")).is_err() {
        fs::remove_file(&wal)?;
    }
    match fs::remove_file(sibling(path, "-shm")) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(to),
    }
}

/// A damaged journal was moved aside from `path` ([`move_aside`]) at some time: a file
/// named `<journal>.corrupt-…` is beside it. A directory that cannot be listed says no.
fn beside_a_moved_journal(path: &Path) -> bool {
    let Some(name) = path.file_name() else {
        return false;
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let prefix = format!("{}.corrupt-", name.to_string_lossy());
    fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
    })
}

fn read_snapshot(conn: &Connection, clock: Clock, settings: &JournalSettings, now: u64) -> rusqlite::Result<Snapshot> {
    let window = u64::try_from(settings.dedup_window.as_millis()).unwrap_or(u64::MAX);
    Ok(Snapshot {
        seqs: rows::seqs(conn)?,
        seq_floor: rows::seq_floor(conn)?,
        held: rows::flagged(conn, Flag::Held, clock)?,
        open_cards: rows::flagged(conn, Flag::Open, clock)?,
        dedup: rows::dedup(conn, now.saturating_sub(window), clock)?,
        owed: rows::owed(conn, clock)?,
        paired: super::devices::paired(conn)?,
        codes: super::devices::codes(conn, clock, now)?,
    })
}

/// The file and its WAL, in bytes (for `/healthz`).
pub(super) fn size(path: &Path) -> u64 {
    let len = |p: &Path| fs::metadata(p).map_or(0, |m| m.len());
    len(path) + len(&sibling(path, "-wal"))
}
