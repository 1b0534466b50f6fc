//! The store's contract: records survive a reopen, reads see what came before them, a
//! commit is reported only once another reader can see it, and a damaged, newer or
//! unreachable file never takes the gateway down.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hermes_mobile::ids::DeviceId;
use hermes_mobile::journal::{DedupRow, Entry, Read, ReadResult, Record, Snapshot, Window};
use hermes_mobile::Time;
use mio::{Events, Poll, Token, Waker};
use rusqlite::Connection;

use super::*;

/// A directory of its own under the temp dir, removed afterwards.
pub(super) struct Dir(PathBuf);

impl Dir {
    pub(super) fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("hermes-journal-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    pub(super) fn journal(&self) -> PathBuf {
        self.0.join("journal.sqlite3")
    }

    pub(super) fn settings(&self) -> JournalSettings {
        JournalSettings::new(self.journal())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o700));
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(super) fn clock() -> Clock {
    Clock {
        origin_unix_ms: now_unix_ms(),
    }
}

pub(super) fn dev(id: &str) -> DeviceId {
    DeviceId(id.into())
}

pub(super) fn entry(device: &str, key: &str, seq: u64) -> Entry {
    Entry {
        device: dev(device),
        key: key.into(),
        seq,
        first_seq: seq,
        at: Time::from_secs(1),
        held: false,
        open: false,
        deadline: None,
        body: format!("{{\"seq\":{seq}}}"),
        blob: None,
    }
}

pub(super) fn open(settings: &JournalSettings, clock: impl Into<ClockSource>) -> (Store, Snapshot) {
    match Store::open(settings, clock) {
        Opened::Ready {
            store,
            snapshot,
            moved_aside: None,
            ..
        } => (store, snapshot),
        other => panic!("the journal did not open: {other:?}"),
    }
}

pub(super) fn seqs_of(entries: &[Entry]) -> Vec<u64> {
    entries.iter().map(|e| e.seq).collect()
}

/// The loop's side: a worker whose waker wakes a real `mio::Poll`.
pub(super) struct Rig {
    poll: Poll,
    events: Events,
    pub(super) worker: JournalWorker,
}

impl Rig {
    pub(super) fn start(store: Store) -> Rig {
        let poll = Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), Token(0)).unwrap());
        let worker = store.start(waker).unwrap();
        Rig {
            poll,
            events: Events::with_capacity(4),
            worker,
        }
    }

    /// The next report, waiting on the waker (at most 10 s, so a lost wake-up fails).
    pub(super) fn next(&mut self) -> Done {
        for _ in 0..100 {
            if let Some(done) = self.worker.poll() {
                return done;
            }
            self.poll
                .poll(&mut self.events, Some(Duration::from_millis(100)))
                .unwrap();
        }
        panic!("the journal thread reported nothing for 10 s");
    }

    pub(super) fn committed(&mut self, ticket: u64) {
        assert_eq!(self.next(), Done::Committed { ticket });
    }

    pub(super) fn read(&mut self, token: u64, read: Read) -> ReadResult {
        self.worker.read(token, read);
        match self.next() {
            Done::Read {
                token: t,
                result: Ok(r),
            } if t == token => r,
            other => panic!("expected the answer to read {token}, got {other:?}"),
        }
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn held(e: Entry, blob: Option<Vec<u8>>) -> Entry {
    Entry { held: true, blob, ..e }
}

fn card(e: Entry, deadline: Option<Time>) -> Entry {
    Entry {
        open: true,
        deadline,
        ..e
    }
}

fn dedup(window: Window, device: &str, id: &str, secs: u64, value: &str) -> (Record, DedupRow) {
    let row = DedupRow {
        window,
        device: dev(device),
        id: id.into(),
        at: Time::from_secs(secs),
        value: value.into(),
    };
    let record = Record::Dedup {
        window,
        device: row.device.clone(),
        id: row.id.clone(),
        at: row.at,
        value: row.value.clone(),
    };
    (record, row)
}

#[test]
fn records_round_trip_through_a_reopen() {
    let dir = Dir::new("round-trip");
    let (settings, clock) = (dir.settings(), clock());
    let (store, snapshot) = open(&settings, clock);
    assert_eq!(snapshot, Snapshot::default());
    let mut rig = Rig::start(store);
    let file = held(entry("a", "f:1", 1), Some(vec![0, 1, 2, 255]));
    let a_card = card(entry("a", "p:2", 2), Some(Time::from_secs(300)));
    let b_card = card(entry("b", "p:1", 5), None);
    let (seen2, row2) = dedup(Window::Seen, "a", "t2", 3, "");
    let (seen1, row1) = dedup(Window::Seen, "a", "t1", 2, "");
    let (delivered, row3) = dedup(Window::Delivered, "b", "d1", 4, "{\"to\":\"b\"}");
    rig.worker.write(vec![
        Record::Put(file.clone()),
        Record::Put(a_card.clone()),
        Record::Put(entry("a", "m:3", 3)),
        Record::Put(b_card.clone()),
        Record::Reserve {
            device: dev("a"),
            upto: 40,
        },
        Record::Reserve {
            device: dev("c"),
            upto: 7,
        },
        seen2,
        seen1,
        delivered,
        Record::Confirm { ticket: 1 },
    ]);
    rig.committed(1);
    drop(rig);

    let (_store, snapshot) = open(&settings, clock);
    let expected = Snapshot {
        seqs: vec![(dev("a"), 40), (dev("b"), 5), (dev("c"), 7)],
        seq_floor: 0,
        held: vec![file],
        open_cards: vec![a_card, b_card],
        dedup: vec![row1, row2, row3],
        owed: Vec::new(),
        paired: Vec::new(),
        codes: Vec::new(),
    };
    assert_eq!(snapshot, expected);
    // The CLI's view: every entry in seq order, times in unix ms.
    let history = read_device(&settings.path, &dev("a")).unwrap();
    assert_eq!(seqs_of(&history), vec![1, 2, 3]);
    assert_eq!(history[2].at, Time::from_millis(clock.unix_ms(Time::from_secs(1))));
}

#[test]
fn sent_forget_and_a_lower_reservation_round_trip() {
    let dir = Dir::new("sent-forget");
    let (settings, clock) = (dir.settings(), clock());
    let (store, _) = open(&settings, clock);
    let mut rig = Rig::start(store);
    let a_card = card(entry("a", "p:2", 2), Some(Time::from_secs(300)));
    let b_card = card(entry("b", "p:1", 5), None);
    rig.worker.write(vec![
        Record::Put(held(entry("a", "f:1", 1), Some(vec![7; 100]))),
        Record::Put(a_card.clone()),
        Record::Put(held(entry("b", "m:4", 4), None)),
        Record::Put(b_card.clone()),
        Record::Reserve {
            device: dev("a"),
            upto: 40,
        },
        Record::Confirm { ticket: 1 },
    ]);
    rig.committed(1);
    // The file is sent (its bytes go), b is forgotten (its card stays), a's card changes,
    // a lower reservation changes nothing, and a second file waits.
    let a_card = Entry { seq: 6, ..a_card };
    let waiting = held(entry("a", "f:7", 7), Some(vec![9; 5000]));
    rig.worker.write(vec![
        Record::Sent {
            device: dev("a"),
            keys: vec!["f:1".into(), "f:unknown".into()],
        },
        Record::Forget { device: dev("b") },
        Record::Put(a_card.clone()),
        Record::Put(waiting.clone()),
        Record::Reserve {
            device: dev("a"),
            upto: 10,
        },
        Record::Confirm { ticket: 2 },
    ]);
    rig.committed(2);
    drop(rig);

    let (_store, snapshot) = open(&settings, clock);
    assert_eq!(snapshot.seqs, vec![(dev("a"), 40), (dev("b"), 5)]);
    assert_eq!(snapshot.held, vec![waiting]);
    assert_eq!(snapshot.open_cards, vec![a_card, b_card.clone()]);
    let a = read_device(&settings.path, &dev("a")).unwrap();
    assert_eq!(seqs_of(&a), vec![1, 6, 7]);
    assert_eq!((a[0].held, &a[0].blob), (false, &None));
    assert_eq!(seqs_of(&read_device(&settings.path, &dev("b")).unwrap()), vec![5]);
}

#[test]
fn reads_see_earlier_records_and_page_backwards() {
    let dir = Dir::new("reads");
    let path = dir.journal();
    let (mut store, _) = open(&dir.settings(), clock());
    // Long enough that the second batch is still uncommitted when the reads come.
    store.interval = Duration::from_secs(60);
    let mut rig = Rig::start(store);
    let puts = |seqs: std::ops::RangeInclusive<u64>| seqs.map(|s| Record::Put(entry("a", &format!("m:{s}"), s)));
    rig.worker
        .write(puts(1..=4).chain([Record::Confirm { ticket: 1 }]).collect());
    rig.committed(1);
    rig.worker.write(puts(5..=10).collect());

    let after = rig.read(
        1,
        Read::After {
            device: dev("a"),
            after: 7,
            limit: usize::MAX,
        },
    );
    assert_eq!((seqs_of(&after.entries), after.more), (vec![8, 9, 10], false));
    // Resume reads a page at a time: one row past the limit says more follow.
    let page = |after, limit| Read::After {
        device: dev("a"),
        after,
        limit,
    };
    for (token, (read, seqs, more)) in (2..).zip([
        (page(7, 2), vec![8, 9], true),
        (page(8, 2), vec![9, 10], false),
        (page(10, 2), vec![], false),
    ]) {
        let got = rig.read(token, read.clone());
        assert_eq!((seqs_of(&got.entries), got.more), (seqs, more), "{read:?}");
    }
    // Uncommitted: another connection still sees only the first batch.
    assert_eq!(read_device(&path, &dev("a")).unwrap().len(), 4);
    let before = |before, limit| Read::Before {
        device: dev("a"),
        before,
        limit,
    };
    let pages = [
        (before(None, 4), vec![7, 8, 9, 10], true),
        (before(Some(7), 4), vec![3, 4, 5, 6], true),
        (before(Some(3), 4), vec![1, 2], false),
        (before(Some(5), 4), vec![1, 2, 3, 4], false),
        (before(Some(1), 4), vec![], false),
        (before(None, 0), vec![], true),
    ];
    for (token, (read, seqs, more)) in (10..).zip(pages) {
        let page = rig.read(token, read.clone());
        assert_eq!((seqs_of(&page.entries), page.more), (seqs, more), "{read:?}");
    }
    let other = rig.read(
        20,
        Read::After {
            device: dev("b"),
            after: 0,
            limit: usize::MAX,
        },
    );
    assert_eq!(other, ReadResult::default());
    // Shutting down commits what is pending.
    drop(rig);
    assert_eq!(read_device(&path, &dev("a")).unwrap().len(), 10);
}

#[test]
fn batches_within_the_interval_share_one_commit_reported_once_readable() {
    let dir = Dir::new("group-commit");
    let path = dir.journal();
    let (mut store, _) = open(&dir.settings(), clock());
    store.interval = Duration::from_millis(500);
    let mut rig = Rig::start(store);
    for s in 1..=4 {
        rig.worker.write(vec![
            Record::Put(entry("a", &format!("m:{s}"), s)),
            Record::Confirm { ticket: s },
        ]);
    }
    rig.worker.write(Vec::new());
    // The first commits at once (nothing was committed before); the next three arrive
    // within the interval and share the following commit, which reports its highest ticket.
    rig.committed(1);
    assert_eq!(seqs_of(&read_device(&path, &dev("a")).unwrap())[..1], [1]);
    rig.committed(4);
    assert_eq!(seqs_of(&read_device(&path, &dev("a")).unwrap()), vec![1, 2, 3, 4]);
    assert_eq!(rig.worker.poll(), None);
    assert!(rig.worker.journal_bytes() > 0);
}

#[test]
fn a_failed_transaction_is_rolled_back_whole_and_later_batches_go_on() {
    let dir = Dir::new("write-failed");
    let path = dir.journal();
    let (mut store, _) = open(&dir.settings(), clock());
    store.interval = Duration::from_millis(500);
    // A trigger stands in for a full disk: it fails one insert, in SQLite's words for it.
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON entries WHEN NEW.key = 'bad'
             BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
        )
        .unwrap();
    let mut rig = Rig::start(store);
    let put = |key: &str, seq| Record::Put(entry("a", key, seq));
    rig.worker.write(vec![put("m:1", 1), Record::Confirm { ticket: 1 }]);
    rig.worker.write(vec![put("m:2", 2), Record::Confirm { ticket: 2 }]);
    rig.worker
        .write(vec![put("bad", 3), Record::Confirm { ticket: 3 }, put("m:4", 4)]);
    rig.worker.write(vec![put("m:5", 5), Record::Confirm { ticket: 5 }]);
    rig.committed(1);
    // L62: `/healthz` shows SQLite's own words, so the error is only those.
    let failed = |ticket| Done::WriteFailed {
        ticket,
        error: "database or disk is full".into(),
    };
    assert_eq!(rig.next(), failed(Some(3)));
    rig.committed(5);
    // After a failure, a commit that confirms nothing (a sent mark) is reported too: writes
    // work again, and `/healthz` says so.
    rig.worker.write(vec![put("bad", 6)]);
    assert_eq!(rig.next(), failed(None));
    rig.worker.write(vec![Record::Sent {
        device: dev("a"),
        keys: vec!["m:1".into()],
    }]);
    assert_eq!(rig.next(), Done::Recovered);
    drop(rig);
    assert_eq!(seqs_of(&read_device(&path, &dev("a")).unwrap()), vec![1, 5]);
}

#[test]
fn a_new_journal_is_at_the_current_schema_and_private() {
    let dir = Dir::new("fresh");
    let path = dir.journal();
    let (store, _) = open(&dir.settings(), clock());
    let mut rig = Rig::start(store);
    rig.worker
        .write(vec![Record::Put(entry("a", "m:1", 1)), Record::Confirm { ticket: 1 }]);
    rig.committed(1);
    // 0600 under the usual 022 umask, and SQLite's side files take the file's mode.
    for file in [path.clone(), sibling(&path, "-wal"), sibling(&path, "-shm")] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    drop(rig);
    let raw = Connection::open(&path).unwrap();
    let pragma = |name| raw.pragma_query_value(None, name, |row| row.get::<_, i64>(0)).unwrap();
    assert_eq!(pragma("user_version"), i64::from(schema::VERSION));
    assert_eq!(pragma("auto_vacuum"), 2); // incremental
    assert_eq!(pragma("page_size"), schema::PAGE_SIZE); // a turn writes fewer bytes
    let mode_name: String = raw.pragma_query_value(None, "journal_mode", |row| row.get(0)).unwrap();
    assert_eq!(mode_name, "wal");
    drop(raw);

    // A journal left wider (an older build, a copy) is made private again.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(sibling(&path, "-wal"), b"").unwrap();
    fs::set_permissions(sibling(&path, "-wal"), fs::Permissions::from_mode(0o666)).unwrap();
    let (_store, snapshot) = open(&dir.settings(), clock());
    assert_eq!(snapshot.seqs, vec![(dev("a"), 1)]);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&sibling(&path, "-wal")), 0o600);
}

#[test]
fn a_damaged_journal_is_moved_aside_and_a_new_one_started() {
    let dir = Dir::new("damaged");
    let path = dir.journal();
    let text = b"not a database, only text\n".repeat(200);
    fs::write(&path, &text).unwrap();
    fs::write(sibling(&path, "-wal"), b"junk").unwrap();
    let opened_at = super::now_unix_ms();
    let moved = match Store::open(&dir.settings(), clock()) {
        Opened::Ready {
            moved_aside: Some(moved),
            snapshot,
            ..
        } => {
            // L62: the new journal's seqs go on above any the old one can have handed out
            // (its unix ms), so a phone that kept one still gets all of the new journal.
            assert!(snapshot.seq_floor >= opened_at, "{snapshot:?}");
            assert_eq!(
                Snapshot {
                    seq_floor: 0,
                    ..snapshot
                },
                Snapshot::default()
            );
            moved
        }
        other => panic!("expected a new journal, got {other:?}"),
    };
    let name = moved.to.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("journal.sqlite3.corrupt-"), "{name}");
    assert_eq!(fs::read(&moved.to).unwrap(), text);
    assert_eq!(fs::read(sibling(&moved.to, "-wal")).unwrap(), b"junk");
    assert!(moved.to_string().contains("was damaged"), "{moved}");

    // A real journal whose pages were overwritten: quick_check (or the first read) finds it.
    let (store, _) = open(&dir.settings(), clock());
    let mut rig = Rig::start(store);
    let body = "x".repeat(300);
    rig.worker.write(
        (1..=200)
            .map(|s| {
                Record::Put(Entry {
                    body: body.clone(),
                    ..entry("a", &format!("m:{s}"), s)
                })
            })
            .chain([Record::Confirm { ticket: 1 }])
            .collect(),
    );
    rig.committed(1);
    drop(rig);
    let mut bytes = fs::read(&path).unwrap();
    assert!(bytes.len() > 8 * 4096);
    let end = bytes.len() - 4096;
    bytes[2 * 4096..end].fill(0x55);
    fs::write(&path, &bytes).unwrap();
    match Store::open(&dir.settings(), clock()) {
        Opened::Ready {
            moved_aside: Some(moved),
            snapshot,
            ..
        } => {
            assert!(snapshot.seq_floor > 200, "{snapshot:?}");
            assert_eq!(
                Snapshot {
                    seq_floor: 0,
                    ..snapshot
                },
                Snapshot::default()
            );
            assert_eq!(fs::read(&moved.to).unwrap(), bytes);
        }
        other => panic!("expected a new journal, got {other:?}"),
    }
}

#[test]
fn a_journal_from_a_newer_build_is_refused_and_left_as_it_was() {
    let dir = Dir::new("newer");
    let path = dir.journal();
    drop(open(&dir.settings(), clock()));
    // A newer build crashed before its version change reached the file: it is in the WAL.
    let raw = Connection::open(&path).unwrap();
    raw.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .unwrap();
    raw.pragma_update(None, "user_version", 8).unwrap();
    drop(raw);
    let wal = sibling(&path, "-wal");
    let (db_before, wal_before) = (fs::read(&path).unwrap(), fs::read(&wal).unwrap());
    match Store::open(&dir.settings(), clock()) {
        Opened::Unavailable(why) => assert!(
            why.ends_with(&format!(
                "journal.sqlite3 was made by a newer hermes-mobile (schema 8, this build reads {})",
                schema::VERSION
            )),
            "{why}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(fs::read(&path).unwrap(), db_before);
    assert_eq!(fs::read(&wal).unwrap(), wal_before);

    // The usual case: the newer build closed cleanly, its version is in the header.
    let raw = Connection::open(&path).unwrap();
    raw.pragma_update(None, "user_version", 7).unwrap();
    drop(raw);
    let _ = fs::remove_file(sibling(&path, "-shm"));
    assert!(!wal.exists());
    let before = fs::read(&path).unwrap();
    match Store::open(&dir.settings(), clock()) {
        Opened::Unavailable(why) => assert!(
            why.contains(&format!("(schema 7, this build reads {})", schema::VERSION)),
            "{why}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(fs::read(&path).unwrap(), before);
    assert!(!wal.exists() && !sibling(&path, "-shm").exists());
    let refused = read_device(&path, &dev("a")).unwrap_err();
    assert!(refused.contains("newer hermes-mobile"), "{refused}");
}

#[test]
fn a_read_only_directory_leaves_the_journal_unavailable() {
    let dir = Dir::new("read-only");
    fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o500)).unwrap();
    // Root writes anywhere it has permission bits for; /sys refuses even root.
    let writable = |d: &Path| {
        let probe = d.join("journal-probe");
        let ok = fs::write(&probe, b"").is_ok();
        let _ = fs::remove_file(&probe);
        ok
    };
    let Some(read_only) = [dir.0.as_path(), Path::new("/sys")].into_iter().find(|d| !writable(d)) else {
        eprintln!("skipped: no directory here refuses this user's writes");
        return;
    };
    let settings = JournalSettings::new(read_only.join("journal.sqlite3"));
    match Store::open(&settings, clock()) {
        Opened::Unavailable(why) => {
            assert!(why.contains("journal.sqlite3") && !why.contains('\n'), "{why}");
        }
        other => panic!("expected no journal, got {other:?}"),
    }
    assert!(read_device(&settings.path, &dev("a")).is_err());
}
