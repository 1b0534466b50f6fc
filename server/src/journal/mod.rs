//! The journal's store (issue 24): the core's records carried out in SQLite.
//!
//! The core decides what is kept and what a device is owed ([`hermes_mobile::journal`]);
//! this module only writes its records and answers its reads, in the order they were sent.
//! It never parses an entry's body.
//!
//! - [`Store::open`] runs before the event loop: it makes the file private (0600), refuses
//!   a journal from a newer build without touching it, checks it if the last run did not
//!   stop cleanly and moves a damaged one aside, migrates, trims, and reads the
//!   [`Snapshot`] the core restores from.
//! - [`Store::start`] hands the connection to one thread, `journal`, as the file worker
//!   does with file writes: the loop sends batches and reads, and drains [`Done`] values
//!   with [`JournalWorker::poll`] after the `mio::Waker` fires. The loop never waits on disk.
//! - Group commit: records go into one open transaction as they arrive, and it commits at
//!   most once per 20 ms, so a burst costs one fsync instead of one per batch. A read is
//!   served inside that transaction, so it sees every record sent before it.
//! - An acknowledgement that promises durability waits for [`Done::Committed`]: the
//!   commit is fsynced (`synchronous=FULL`) before it is reported.
//!
//! The file is one plain schema (`sqlite3 journal.sqlite3 .schema` shows it, with
//! comments); times in it are unix milliseconds, converted from the core's [`Time`] with
//! the [`ClockSource`] given at open, which reads the wall clock afresh for each batch.

mod bounds;
pub mod devices;
mod marks;
mod open;
mod rows;
mod schema;
mod worker;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_bounds;
#[cfg(test)]
mod tests_devices;
#[cfg(test)]
mod tests_marks;
#[cfg(test)]
mod tests_open;
#[cfg(test)]
mod tests_owed;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hermes_mobile::ids::DeviceId;
use hermes_mobile::journal::{Entry, Snapshot};
use hermes_mobile::Time;
use rusqlite::{Connection, OpenFlags};

pub use worker::{Done, JournalWorker};

/// Where the journal lives and what it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSettings {
    /// `<state dir>/journal.sqlite3`.
    pub path: PathBuf,
    /// Keep sent entries as history; when false only what is held and open cards stay.
    pub history: bool,
    /// At most this many entries per device (held entries and open cards are never dropped).
    pub items: usize,
    /// Entries older than this many days go (held entries and open cards stay).
    pub days: u32,
    /// How long an idempotency window's entry is kept.
    pub dedup_window: Duration,
}

impl JournalSettings {
    /// The defaults for a journal at `path`: history on, 5000 entries, 30 days, 600 s.
    pub fn new(path: PathBuf) -> JournalSettings {
        JournalSettings {
            path,
            history: true,
            items: 5000,
            days: 30,
            dedup_window: Duration::from_secs(600),
        }
    }
}

/// Converts between the core's [`Time`] (milliseconds since this run's origin, on the
/// monotonic clock) and the unix milliseconds in the file, as of one moment: `Time::ZERO`
/// is `origin_unix_ms`. A time from before this run's origin reads back as
/// [`Time::ZERO`]: the core only compares it with later times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    pub origin_unix_ms: u64,
}

impl Clock {
    pub fn unix_ms(self, t: Time) -> u64 {
        self.origin_unix_ms.saturating_add(t.as_millis())
    }

    pub fn time(self, unix_ms: u64) -> Time {
        Time::from_millis(unix_ms.saturating_sub(self.origin_unix_ms))
    }
}

/// Where the store's [`Clock`] comes from: this run's, or one fixed for good (the CLI's,
/// unix ms as they are; in tests, a run that began long ago).
#[derive(Debug, Clone, Copy)]
pub enum ClockSource {
    /// This run, from its monotonic origin (the core's `Time::ZERO`); `wall` reads unix
    /// ms. The wall clock is read afresh for each batch, not once at the start: a Pi has
    /// no RTC and may start an hour behind until NTP steps its clock, and an offset kept
    /// from before the step would write every dedup row and card deadline that much too
    /// early (L61: they are then dropped or expire at the next start).
    Run {
        origin: Instant,
        wall: fn() -> u64,
    },
    Fixed(Clock),
}

impl ClockSource {
    /// This run's clock; `origin` is the core's `Time::ZERO`.
    pub fn run(origin: Instant) -> ClockSource {
        ClockSource::run_with_wall(origin, now_unix_ms)
    }

    /// [`ClockSource::run`] with a wall clock a test can step.
    pub(crate) fn run_with_wall(origin: Instant, wall: fn() -> u64) -> ClockSource {
        ClockSource::Run { origin, wall }
    }

    /// The conversion as the wall clock says now: one batch's times all convert alike.
    pub fn now(self) -> Clock {
        match self {
            ClockSource::Fixed(clock) => clock,
            ClockSource::Run { origin, wall } => {
                let since_origin = u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
                Clock {
                    origin_unix_ms: wall().saturating_sub(since_origin),
                }
            }
        }
    }
}

impl From<Clock> for ClockSource {
    fn from(clock: Clock) -> ClockSource {
        ClockSource::Fixed(clock)
    }
}

/// The result of [`Store::open`].
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // made once, at start-up
pub enum Opened {
    Ready {
        store: Store,
        snapshot: Snapshot,
        /// The journal was damaged and a new one was started: log it (one line).
        moved_aside: Option<MovedAside>,
        /// The file and its WAL, in bytes.
        bytes: u64,
    },
    /// No journal this run (a newer file, a read-only directory, a full disk…): one line
    /// that says why, for the log. The gateway runs with history off.
    Unavailable(String),
}

/// A damaged journal, renamed so that an owner can still look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedAside {
    pub to: PathBuf,
    /// What was wrong with it (SQLite's words).
    pub why: String,
}

impl fmt::Display for MovedAside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the journal was damaged ({}); it was moved to {} and a new one started",
            self.why,
            self.to.display()
        )
    }
}

/// An open journal, not yet handed to its thread.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    clock: ClockSource,
    bounds: bounds::Bounds,
    /// Group commit: at most one commit per this long. Tests lengthen it so that "these
    /// batches share a commit" does not depend on how fast the machine is.
    interval: Duration,
}

impl Store {
    /// Where this store's file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Every entry of `device`, in seq order, read through a read-only connection: the CLI's
/// `history` while the gateway runs (WAL lets a reader in beside the writer). Times are
/// unix milliseconds (a [`Clock`] with origin 0).
pub fn read_device(path: &Path, device: &DeviceId) -> Result<Vec<Entry>, String> {
    // Versions 2 and 3 added tables beside `entries`; a file the gateway has not migrated
    // yet reads the same.
    with_reader(path, |conn, _| {
        rows::device_entries(conn, device, Clock { origin_unix_ms: 0 })
    })
}

/// Every paired device with its journal's size, read-only (issue 26: `hermes-mobile
/// devices` with the gateway stopped).
pub fn read_devices(path: &Path) -> Result<Vec<devices::Listed>, String> {
    with_reader(path, |conn, version| match version {
        3.. => devices::list(conn),
        _ => Ok(Vec::new()), // no device was ever paired
    })
}

/// The journal sizes of these devices, read-only (beside a running gateway).
pub fn read_history_sizes(path: &Path, ids: &[String]) -> Result<Vec<u64>, String> {
    with_reader(path, |conn, _| devices::history_sizes(conn, ids))
}

/// Runs `f` on a read-only connection, with the file's schema version; a file made but
/// never written reads as empty (`T::default()`).
fn with_reader<T: Default>(path: &Path, f: impl FnOnce(&Connection, u32) -> rusqlite::Result<T>) -> Result<T, String> {
    let failed = |e: rusqlite::Error| format!("{}: {e}", path.display());
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(reader_uri(path), flags).map_err(failed)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(failed)?;
    match schema::version(&conn).map_err(failed)? {
        0 => Ok(T::default()), // created, never written
        v @ 1..=schema::VERSION => f(&conn, v).map_err(failed),
        newer => Err(schema::newer_reason(path, newer)),
    }
}

/// The URI a reader opens `path` by. A reader of a WAL file makes its `-wal` and `-shm`
/// and leaves them behind, even read-only; with no `-wal` there (the gateway is stopped: its
/// last connection folds the WAL into the file and removes both), the whole journal is in
/// the file, so it is opened `immutable`: no locks and no side files. A gateway that starts
/// during the read writes to a new WAL first, not to the file, until its first checkpoint.
fn reader_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => uri.push(char::from(b)),
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    if !sibling(path, "-wal").exists() {
        uri.push_str("?immutable=1");
    }
    uri
}

/// How long a statement waits for a lock held by another connection (the CLI reading, or
/// a checkpoint) before it fails; only the journal thread waits, never the loop.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `path` with `suffix` appended to its file name (`journal.sqlite3-wal`).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
