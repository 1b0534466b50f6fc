//! The journal's side of the loop (issue 24): the core's records go to the store's thread
//! in one batch per wake-up, its reads in order behind them, and what the thread reports
//! goes back to the core. The loop never waits on the disk.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hermes_mobile::journal::{JournalConfig, Record, Snapshot};
use hermes_mobile::Output;

use super::Server;
use crate::journal::{Clock, Done, JournalSettings, JournalWorker, Opened, Store};

/// The journal file's name in the state directory.
pub const JOURNAL_FILE: &str = "journal.sqlite3";

/// The store's thread and the records of this wake-up not yet handed to it.
pub(super) struct JournalIo {
    worker: JournalWorker,
    batch: Vec<Record>,
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

/// The unix time of the loop's origin, for the file's times.
pub(super) fn clock_at(origin: Instant) -> Clock {
    let now_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let since_origin = u64::try_from(origin.elapsed().as_millis()).unwrap_or(0);
    Clock {
        origin_unix_ms: now_unix.saturating_sub(since_origin),
    }
}

/// Opens the journal before the loop starts. A journal that cannot be opened does not stop
/// the gateway (L62): it runs without one, and says why once.
pub(super) fn open(
    state_dir: &Path,
    config: JournalConfig,
    dedup_window: std::time::Duration,
    clock: Clock,
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
                    batch: Vec::new(),
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
    /// A record joins this wake-up's batch; a read sends the batch first, so that it sees
    /// every record before it.
    pub(super) fn on_journal_output(&mut self, out: Output) {
        let Some(j) = self.journal.as_mut() else { return };
        match out {
            Output::Journal(record) => j.batch.push(record),
            Output::JournalRead { token, read } => {
                if !j.batch.is_empty() {
                    j.worker.write(std::mem::take(&mut j.batch));
                }
                j.worker.read(token, read);
            }
            _ => {}
        }
    }

    /// Hands this wake-up's records to the store's thread: one batch per wake-up.
    pub(super) fn flush_journal(&mut self) {
        if let Some(j) = self.journal.as_mut().filter(|j| !j.batch.is_empty()) {
            j.worker.write(std::mem::take(&mut j.batch));
        }
    }

    /// What the store's thread reported: commits, failed writes and reads, to the core.
    pub(super) fn on_journal_done(&mut self, now: Instant) {
        let t = self.time(now);
        loop {
            let Some(done) = self.journal.as_mut().and_then(|j| j.worker.poll()) else {
                return;
            };
            match done {
                Done::Committed { ticket } => {
                    self.core.handle_journal_committed(t, ticket);
                    self.agent.handle_committed(t, ticket, true);
                }
                Done::WriteFailed { ticket, error } => {
                    self.log_journal_failure(&error);
                    if let Some(ticket) = ticket {
                        self.core.handle_journal_failed(t, ticket);
                        self.agent.handle_committed(t, ticket, false);
                    }
                }
                Done::Read { token, result } => self.core.handle_journal_read(t, token, result),
            }
        }
    }

    fn log_journal_failure(&mut self, error: &str) {
        let Some(j) = self.journal.as_mut() else { return };
        // The kind: SQLite's words before any detail, so a full disk is logged once.
        let kind: String = error.split([':', '(']).next().unwrap_or(error).trim().to_owned();
        if j.failures_logged.insert(kind) {
            log::error!(
                "journal: a write failed ({error}); the gateway goes on, and confirms nothing it could not keep"
            );
        }
    }

    /// The journal's file size, for `/healthz`.
    pub(super) fn journal_bytes(&self) -> Option<u64> {
        self.journal.as_ref().map(|j| j.worker.journal_bytes())
    }

    /// At shutdown: what is pending is committed before the process ends.
    pub(super) fn close_journal(&mut self) {
        self.flush_journal();
        if let Some(j) = self.journal.as_mut() {
            j.worker.shutdown();
        }
    }
}
