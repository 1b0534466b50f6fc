//! The journal's side of the loop (issue 24): the wiring's batches of records go to the
//! store's thread, its reads in order behind them, and what the thread reports goes back
//! to the wiring. The loop never waits on the disk.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hermes_mobile::journal::{JournalConfig, Read, Record, Snapshot};

use super::Server;
use crate::journal::{ClockSource, Done, JournalSettings, JournalWorker, Opened, Store};

/// The journal file's name in the state directory.
pub const JOURNAL_FILE: &str = "journal.sqlite3";
/// `/healthz`'s `journal` while writes fail, before the kind of failure.
const WRITES_FAILING: &str = "writes failing: ";

/// The store's thread.
pub(super) struct JournalIo {
    worker: JournalWorker,
    /// Kinds of write failure already logged: each is logged once (issue 24 §4).
    failures_logged: HashSet<String>,
}

/// What opening the journal gave: a running store and what to restore, or why there is none
/// (for the log and `/healthz`).
pub(super) struct Opening {
    pub io: Option<JournalIo>,
    pub snapshot: Option<Snapshot>,
    /// `"ok"`, or the reason the gateway runs without a journal.
    pub status: String,
}

/// This run's clock for the file's times: the loop's origin is the core's `Time::ZERO`.
pub(super) fn clock_at(origin: Instant) -> ClockSource {
    ClockSource::run(origin)
}

/// Opens the journal before the loop starts. A journal that cannot be opened does not stop
/// the gateway (L62): it runs without one, and says why once.
pub(super) fn open(
    state_dir: &Path,
    config: JournalConfig,
    dedup_window: std::time::Duration,
    clock: ClockSource,
    waker: Arc<mio::Waker>,
) -> io::Result<Opening> {
    let mut settings = JournalSettings::new(state_dir.join(JOURNAL_FILE));
    settings.history = config.history;
    settings.items = config.items;
    settings.days = config.days;
    settings.dedup_window = dedup_window;
    match Store::open(&settings, clock) {
        Opened::Ready {
            store,
            snapshot,
            moved_aside,
            bytes,
        } => {
            if let Some(moved) = moved_aside {
                log::warn!("journal: {moved}");
            }
            log::info!(
                "journal: {} ({} KiB; {} held, {} open cards, history {})",
                settings.path.display(),
                bytes / 1024,
                snapshot.held.len(),
                snapshot.open_cards.len(),
                if config.history { "on" } else { "off" }
            );
            let worker = store.start(waker)?;
            Ok(Opening {
                io: Some(JournalIo {
                    worker,
                    failures_logged: HashSet::new(),
                }),
                snapshot: Some(snapshot),
                status: "ok".into(),
            })
        }
        Opened::Unavailable(reason) => {
            log::warn!("journal: {reason}; running without one: nothing is kept across a restart, and history is off");
            Ok(Opening {
                io: None,
                snapshot: None,
                status: reason,
            })
        }
    }
}

impl Server {
    /// The wiring's batch of records goes to the store's thread.
    pub(super) fn write_journal(&mut self, records: Vec<Record>) {
        if let Some(j) = self.journal.as_mut() {
            j.worker.write(records);
        }
    }

    /// A read, behind every record handed to the thread before it.
    pub(super) fn read_journal(&mut self, token: u64, read: Read) {
        if let Some(j) = self.journal.as_mut() {
            j.worker.read(token, read);
        }
    }

    /// What the store's thread reported: commits, failed writes and reads, to the wiring.
    pub(super) fn on_journal_done(&mut self, now: Instant) {
        let t = self.time(now);
        loop {
            let Some(done) = self.journal.as_mut().and_then(|j| j.worker.poll()) else {
                return;
            };
            match done {
                Done::Committed { ticket } => {
                    self.journal_recovered();
                    self.wiring.handle_journal_committed(t, ticket)
                }
                Done::Recovered => self.journal_recovered(),
                Done::WriteFailed { ticket, error } => {
                    self.log_journal_failure(&error);
                    if let Some(ticket) = ticket {
                        self.wiring.handle_journal_failed(t, ticket);
                    }
                }
                Done::Read { token, result } => self.wiring.handle_journal_read(t, token, result),
            }
        }
    }

    /// A commit worked: `/healthz` no longer says writes fail (L62: "until a commit works
    /// again"), whether or not the commit confirmed anything.
    fn journal_recovered(&mut self) {
        if self.journal_status.starts_with(WRITES_FAILING) {
            log::info!("journal: writes work again");
            self.journal_status = "ok".into();
        }
    }

    /// Records a failed write: logged once per kind, and shown in `/healthz`.
    fn log_journal_failure(&mut self, error: &str) {
        let Some(j) = self.journal.as_mut() else { return };
        let kind = failure_kind(error);
        // `/healthz` says so until a commit works again: an owner sees a full disk.
        self.journal_status = format!("{WRITES_FAILING}{kind}");
        if j.failures_logged.insert(kind.to_owned()) {
            log::error!(
                "journal: a write failed: {error}; the gateway goes on, and confirms nothing it could not keep \
                 (logged once for this kind of failure)"
            );
        }
    }

    /// The journal's file size, for `/healthz`.
    pub(super) fn journal_bytes(&self) -> Option<u64> {
        self.journal.as_ref().map(|j| j.worker.journal_bytes())
    }

    /// At shutdown: what is pending is committed before the process ends (the wiring hands
    /// its batch over each time it goes quiet, so nothing of it waits here).
    pub(super) fn close_journal(&mut self) {
        if let Some(j) = self.journal.as_mut() {
            j.worker.shutdown();
        }
    }
}

/// The kind of a failed write: SQLite's words before any detail (`UNIQUE constraint
/// failed: entries.key` is `UNIQUE constraint failed`), so that a full disk, which fails
/// every batch, is logged once, and `/healthz` reads `writes failing: database or disk is
/// full` (L62).
fn failure_kind(error: &str) -> &str {
    error.split([':', '(']).next().unwrap_or(error).trim()
}

#[cfg(test)]
mod tests {
    use super::failure_kind;

    #[test]
    fn the_kind_of_a_failure_is_sqlite_s_words_without_their_detail() {
        assert_eq!(failure_kind("database or disk is full"), "database or disk is full");
        assert_eq!(failure_kind("disk I/O error"), "disk I/O error");
        assert_eq!(
            failure_kind("UNIQUE constraint failed: entries.key"),
            "UNIQUE constraint failed"
        );
    }
}
