//! The journal thread: it owns the SQLite connection, applies batches in one open
//! transaction, commits at most once per group-commit interval, serves reads inside that
//! transaction, and reports through a channel and the loop's `mio::Waker`.
//!
//! Usage rule (as with the file worker): after the waker fires, drain [`JournalWorker::poll`]
//! until it returns `None`.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hermes_mobile::journal::{Read, ReadResult, Record};
use mio::Waker;
use rusqlite::Connection;

use super::bounds::Bounds;
use super::marks::{self, Mark};
use super::open::size;
use super::{now_unix_ms, rows, ClockSource, Store};

/// What the journal thread reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// Everything up to this `Record::Confirm` is on disk.
    Committed { ticket: u64 },
    /// The first commit after a failure worked, and held no `Confirm` (one that did is
    /// reported as `Committed`): writes work again.
    Recovered,
    /// A transaction was rolled back: every record in it is lost, and so every ticket up
    /// to `ticket` (its highest `Confirm`) failed. Later batches go on. `error` is
    /// SQLite's words (`database or disk is full`), for `/healthz` (L62); the loop logs it.
    WriteFailed { ticket: Option<u64>, error: String },
    Read {
        token: u64,
        result: Result<ReadResult, String>,
    },
}

enum Job {
    Write(Vec<Record>),
    Read { token: u64, read: Read },
}

/// The loop's handle on the journal thread. Dropping it commits what is pending and
/// waits for the thread (the SIGTERM path: nothing acknowledged may be lost).
pub struct JournalWorker {
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    /// Answers made here when the thread is gone, so that no read waits for ever.
    orphaned: VecDeque<Done>,
    waker: Arc<Waker>,
    bytes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Store {
    /// Hands the connection to a thread named `journal`.
    pub fn start(self, waker: Arc<Waker>) -> io::Result<JournalWorker> {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel::<Done>();
        let bytes = Arc::new(AtomicU64::new(size(&self.path)));
        let thread = Thread {
            conn: self.conn,
            path: self.path,
            clock: self.clock,
            bounds: self.bounds,
            interval: self.interval,
            open: None,
            last_commit: None,
            done: done_tx,
            waker: waker.clone(),
            bytes: bytes.clone(),
            logged: HashSet::new(),
            damaged: false,
            failing: false,
        };
        let thread = std::thread::Builder::new()
            .name("journal".into())
            .spawn(move || thread.run(job_rx))?;
        Ok(JournalWorker {
            jobs: Some(jobs),
            done,
            orphaned: VecDeque::new(),
            waker,
            bytes,
            thread: Some(thread),
        })
    }
}

impl JournalWorker {
    /// Queues a batch (the records of one loop wake-up); an empty one is skipped.
    pub fn write(&mut self, records: Vec<Record>) {
        if !records.is_empty() {
            self.send(Job::Write(records));
        }
    }

    /// Queues a read; it sees every record written before it. Answered by `Done::Read`.
    pub fn read(&mut self, token: u64, read: Read) {
        self.send(Job::Read { token, read });
    }

    /// A finished job, if any (drain after the waker fired).
    pub fn poll(&mut self) -> Option<Done> {
        self.orphaned.pop_front().or_else(|| self.done.try_recv().ok())
    }

    /// The file and its WAL in bytes, as of the last commit (for `/healthz`).
    pub fn journal_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Commits what is pending and waits for the thread. What it reported stays to poll.
    pub fn shutdown(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                log::error!("the journal thread panicked; its last batch may be lost");
            }
        }
    }

    fn send(&mut self, job: Job) {
        let lost = match &self.jobs {
            Some(jobs) => match jobs.send(job) {
                Ok(()) => return,
                Err(e) => e.0,
            },
            None => job, // after shutdown
        };
        // The thread lives as long as the server; a send fails only if it panicked.
        if self.orphaned.is_empty() {
            log::error!("the journal thread has stopped; nothing more is kept");
        }
        let error = "the journal thread has stopped".to_owned();
        self.orphaned.push_back(match lost {
            Job::Write(records) => Done::WriteFailed {
                ticket: records.iter().filter_map(ticket).max(),
                error,
            },
            Job::Read { token, .. } => Done::Read {
                token,
                result: Err(error),
            },
        });
        let _ = self.waker.wake();
    }
}

impl Drop for JournalWorker {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn ticket(record: &Record) -> Option<u64> {
    match record {
        Record::Confirm { ticket } => Some(*ticket),
        _ => None,
    }
}

/// The open transaction.
struct Open {
    /// Its highest `Confirm`, reported when it commits (or fails).
    ticket: Option<u64>,
}

struct Thread {
    conn: Connection,
    path: PathBuf,
    clock: ClockSource,
    bounds: Bounds,
    interval: Duration,
    open: Option<Open>,
    last_commit: Option<Instant>,
    done: Sender<Done>,
    waker: Arc<Waker>,
    bytes: Arc<AtomicU64>,
    /// Kinds of failure already logged: a full disk fails every batch, and one line says it.
    logged: HashSet<String>,
    /// SQLite reported the file damaged ([`marks`]).
    damaged: bool,
    /// The last transaction failed: the next commit is reported even if it confirms
    /// nothing, so that the loop learns that writes work again.
    failing: bool,
}

impl Thread {
    fn run(mut self, jobs: Receiver<Job>) {
        loop {
            let wait = self.deadline().saturating_duration_since(Instant::now());
            let job = match jobs.recv_timeout(wait) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    self.on_deadline();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            match job {
                Job::Write(records) => self.write(&records),
                Job::Read { token, read } => self.read(token, &read),
            }
            let now = Instant::now();
            if self.open.is_some() && now >= self.deadline_from(now) {
                self.commit();
            }
        }
        self.stop();
    }

    /// When the open transaction commits (one interval after the previous commit began),
    /// or, with none open, when an idle pass of the bounds is due.
    fn deadline(&self) -> Instant {
        self.deadline_from(Instant::now())
    }

    /// [`Self::deadline`], where "at once" is `now`.
    fn deadline_from(&self, now: Instant) -> Instant {
        match self.open {
            Some(_) => self.last_commit.map_or(now, |last| last + self.interval),
            None => self.bounds.idle_pass_at(),
        }
    }

    fn on_deadline(&mut self) {
        if self.open.is_some() {
            self.commit();
        } else {
            self.trim(Instant::now());
            self.bytes.store(size(&self.path), Ordering::Relaxed);
        }
    }

    /// The last commit, then the mark the next open reads: `clean` once every record is
    /// committed, `damaged` (again: the first may have gone with a rolled-back transaction)
    /// after a run that met a damaged page, none after a failed last commit.
    fn stop(&mut self) {
        let committed = self.commit();
        let mark = match (self.damaged, committed) {
            (true, _) => Mark::Damaged,
            (false, true) => Mark::Clean,
            (false, false) => return,
        };
        if let Err(e) = marks::mark(&self.conn, mark) {
            self.log_once("marking the stop", &e);
        }
    }

    /// Applies a batch inside the open transaction (beginning one if needed). On the first
    /// failure the whole transaction is rolled back and the rest of the batch skipped:
    /// what the core learns ("every ticket up to N failed") must cover all that was lost.
    fn write(&mut self, records: &[Record]) {
        if self.open.is_none() {
            if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
                return self.fail(records.iter().filter_map(ticket).max(), &e);
            }
            self.open = Some(Open { ticket: None });
        }
        let now = now_unix_ms();
        let clock = self.clock.now();
        for (i, record) in records.iter().enumerate() {
            self.bounds.note(record);
            if let Err(e) = rows::apply(&self.conn, record, clock, now) {
                let rest = records[i..].iter().filter_map(ticket).max();
                let open = self.open.take().and_then(|o| o.ticket);
                self.rollback();
                return self.fail(open.max(rest), &e);
            }
            if let (Some(open), Some(t)) = (self.open.as_mut(), ticket(record)) {
                open.ticket = open.ticket.max(Some(t));
            }
        }
    }

    fn read(&mut self, token: u64, read: &Read) {
        let cutoff = self.bounds.age_cutoff(now_unix_ms());
        let result = rows::read(&self.conn, read, self.clock.now(), cutoff);
        if let Err(e) = &result {
            self.note_damage(e);
            // An I/O error or a full disk may have rolled the open transaction back under
            // us: its records are lost, and the core must hear it.
            if self.open.is_some() && self.conn.is_autocommit() {
                let ticket = self.open.take().and_then(|o| o.ticket);
                self.fail(ticket, e);
            }
        }
        let result = result.map_err(|e| e.to_string());
        self.report(Done::Read { token, result });
    }

    /// Commits the open transaction, if any; false if that failed.
    fn commit(&mut self) -> bool {
        let Some(open) = self.open.take() else {
            return true;
        };
        let now = Instant::now();
        self.last_commit = Some(now);
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            self.rollback();
            self.fail(open.ticket, &e);
            return false;
        }
        match open.ticket {
            Some(ticket) => self.report(Done::Committed { ticket }),
            None if self.failing => self.report(Done::Recovered),
            None => {}
        }
        self.failing = false;
        if self.bounds.due(now) {
            self.trim(now);
        }
        self.bytes.store(size(&self.path), Ordering::Relaxed);
        true
    }

    /// A bounds pass in a transaction of its own.
    fn trim(&mut self, now: Instant) {
        let result = self.conn.unchecked_transaction().and_then(|tx| {
            self.bounds.run(&tx, now_unix_ms(), now)?;
            tx.commit()
        });
        if let Err(e) = result {
            self.log_once("trimming", &e);
            self.note_damage(&e);
        }
    }

    fn rollback(&mut self) {
        // A failed COMMIT may already have rolled back; a failed statement has not.
        if !self.conn.is_autocommit() {
            if let Err(e) = self.conn.execute_batch("ROLLBACK") {
                self.log_once("rollback", &e);
            }
        }
    }

    /// Reports a lost transaction. Not logged here: the loop logs it once per kind, in
    /// the words `/healthz` shows (one line, not one here and one there).
    fn fail(&mut self, ticket: Option<u64>, e: &rusqlite::Error) {
        self.note_damage(e);
        self.failing = true;
        self.report(Done::WriteFailed {
            ticket,
            error: e.to_string(),
        });
    }

    fn log_once(&mut self, what: &str, e: &rusqlite::Error) {
        let kind = format!("{what}: {:?}", e.sqlite_error_code());
        if self.logged.insert(kind) {
            log::warn!("journal: {what} failed: {e} (not logged again for this kind of failure)");
        }
    }

    /// A damaged file, as SQLite reports it when a statement meets a bad page: said once,
    /// and marked at once, so that the next open checks the whole file and moves it aside
    /// if it fails, even if this run ends with a SIGKILL. The batch it failed was reported
    /// as any failed write is: nothing it held was acknowledged.
    fn note_damage(&mut self, e: &rusqlite::Error) {
        if self.damaged || !marks::is_damage(e) {
            return;
        }
        self.damaged = true;
        log::error!(
            "journal: SQLite found the file damaged ({e}); the gateway goes on, and the next start \
             checks the whole file and moves it aside if it is"
        );
        if let Err(e) = marks::mark(&self.conn, Mark::Damaged) {
            self.log_once("marking the journal damaged", &e);
        }
    }

    fn report(&self, done: Done) {
        // The worker is dropped only after the thread has ended, so this cannot fail
        // while anyone listens.
        if self.done.send(done).is_ok() {
            let _ = self.waker.wake();
        }
    }
}
