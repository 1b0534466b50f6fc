//! The bounds: per-device count and age, history off, the device and seqs caps, the
//! idempotency window. What is owed to a device (held entries, open cards) stays.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hermes_mobile::journal::{Entry, Read, Record, Window};
use hermes_mobile::Time;
use rusqlite::Connection;

use super::bounds::{MAX_DEVICES, MAX_SEQS};
use super::tests::{clock, dev, entry, open, seqs_of, Dir, Rig};
use super::*;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// Waits until `done` holds, at most 5 s: a pass is due about a second after the writes
/// that need it, so this polls rather than sleeping a fixed time and then asserting.
fn within_seconds(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 5 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn puts(device: &str, seqs: std::ops::RangeInclusive<u64>, ticket: u64) -> Vec<Record> {
    seqs.map(|s| Record::Put(entry(device, &format!("m:{s}"), s)))
        .chain([Record::Confirm { ticket }])
        .collect()
}

/// Starts a worker that trims after every commit, writes `records` and a confirm, and
/// stops it (the pass runs on the thread before it ends).
pub(super) fn write_and_trim(settings: &JournalSettings, clock: Clock, records: Vec<Record>) {
    let (mut store, _) = open(settings, clock);
    store.bounds.every = Duration::ZERO;
    let mut rig = Rig::start(store);
    rig.worker
        .write(records.into_iter().chain([Record::Confirm { ticket: 1 }]).collect());
    rig.committed(1);
}

#[test]
fn a_device_keeps_its_newest_items_and_everything_it_is_owed() {
    let dir = Dir::new("items");
    let settings = JournalSettings {
        items: 3,
        ..dir.settings()
    };
    let held = Entry {
        held: true,
        ..entry("a", "f:1", 1)
    };
    let card = Entry {
        open: true,
        ..entry("a", "p:2", 2)
    };
    let mut records = vec![Record::Put(held), Record::Put(card)];
    records.extend((3..=6).map(|s| Record::Put(entry("a", &format!("m:{s}"), s))));
    records.extend((1..=3).map(|s| Record::Put(entry("b", &format!("m:{s}"), s))));
    write_and_trim(&settings, clock(), records);
    assert_eq!(seqs_of(&read_device(&settings.path, &dev("a")).unwrap()), vec![1, 2, 6]);
    assert_eq!(seqs_of(&read_device(&settings.path, &dev("b")).unwrap()), vec![1, 2, 3]);
}

// decisions L62: bounds are applied within about a second, also on a gateway that goes
// quiet right after a burst (the pass after a commit runs at most once a second, so the
// burst's own commits may all come too soon after the last one).
#[test]
fn the_item_bound_applies_within_about_a_second_of_the_last_write() {
    let dir = Dir::new("items-quiet");
    let settings = JournalSettings {
        items: 2,
        ..dir.settings()
    };
    let (store, _) = open(&settings, clock());
    assert_eq!(store.bounds.every, Duration::from_secs(1), "the real pace");
    let mut rig = Rig::start(store);
    let seqs = || seqs_of(&read_device(&settings.path, &dev("a")).unwrap());
    // Within a second of the open's pass, and then nothing more is written.
    rig.worker.write(puts("a", 1..=3, 1));
    rig.committed(1);
    within_seconds("the first burst trimmed", || seqs() == [2, 3]);
    // Again within a second of that pass.
    rig.worker.write(puts("a", 4..=5, 2));
    rig.committed(2);
    within_seconds("the second burst trimmed", || seqs() == [4, 5]);
}

// decisions L62: with history off, a delivered entry leaves the file within about a
// second, though nothing is written after its delivery.
#[test]
fn with_history_off_a_delivered_entry_goes_within_about_a_second() {
    let dir = Dir::new("no-history-quiet");
    let settings = JournalSettings {
        history: false,
        ..dir.settings()
    };
    let (store, _) = open(&settings, clock());
    let mut rig = Rig::start(store);
    let held = Entry {
        held: true,
        ..entry("a", "m:1", 1)
    };
    rig.worker.write(vec![Record::Put(held), Record::Confirm { ticket: 1 }]);
    rig.committed(1);
    rig.worker.write(vec![
        Record::Sent {
            device: dev("a"),
            keys: vec!["m:1".into()],
        },
        Record::Confirm { ticket: 2 },
    ]);
    rig.committed(2);
    within_seconds("the delivered entry dropped", || {
        read_device(&settings.path, &dev("a")).unwrap().is_empty()
    });
}

#[test]
fn entries_older_than_the_days_go_at_the_first_pass_after_the_open_not_at_it() {
    let dir = Dir::new("days");
    let settings = JournalSettings {
        days: 30,
        ..dir.settings()
    };
    // This run began 40 days ago: `Time::ZERO` is 40 days old, the last is a minute old.
    let now = clock().origin_unix_ms;
    let old_run = Clock {
        origin_unix_ms: now - 40 * DAY_MS,
    };
    let at = |e: Entry, t| Entry { at: t, ..e };
    let records = vec![
        Record::Put(at(entry("a", "m:1", 1), Time::ZERO)),
        Record::Put(at(
            Entry {
                held: true,
                ..entry("a", "f:2", 2)
            },
            Time::ZERO,
        )),
        Record::Put(at(entry("a", "m:3", 3), Time::from_millis(40 * DAY_MS - 60_000))),
    ];
    write_and_trim(&settings, old_run, records);
    // The open leaves the scan (of the whole table) to the journal thread.
    let (mut store, snapshot) = open(&settings, clock());
    assert_eq!(seqs_of(&read_device(&settings.path, &dev("a")).unwrap()), vec![1, 2, 3]);
    // Older than this run's origin reads back as zero.
    assert_eq!(snapshot.held[0].at, Time::ZERO);
    // Its first pass runs even if nothing is written.
    store.bounds.next_age_scan = Instant::now();
    let _rig = Rig::start(store);
    let deadline = Instant::now() + Duration::from_secs(10);
    while read_device(&settings.path, &dev("a")).unwrap().len() == 3 {
        assert!(Instant::now() < deadline, "no pass in 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(seqs_of(&read_device(&settings.path, &dev("a")).unwrap()), vec![2, 3]);
}

// decisions L62: MOBILE_HISTORY_DAYS is seen at once: `history` and a resume leave out an
// entry past it, though the scan that deletes it runs a minute after the open, then hourly.
#[test]
fn reads_leave_out_entries_older_than_the_days_at_once() {
    let dir = Dir::new("days-reads");
    let settings = JournalSettings {
        days: 30,
        ..dir.settings()
    };
    // This run began 31 days ago: `Time::ZERO` is 31 days old, the last is a minute old.
    let old_run = Clock {
        origin_unix_ms: clock().origin_unix_ms - 31 * DAY_MS,
    };
    let old = |e: Entry| Record::Put(Entry { at: Time::ZERO, ..e });
    let records = vec![
        old(entry("a", "m:1", 1)),
        old(Entry {
            held: true,
            ..entry("a", "f:2", 2)
        }),
        old(Entry {
            open: true,
            ..entry("a", "p:3", 3)
        }),
        old(entry("a", "m:4", 4)),
        Record::Put(Entry {
            at: Time::from_millis(31 * DAY_MS - 60_000),
            ..entry("a", "m:5", 5)
        }),
    ];
    write_and_trim(&settings, old_run, records);
    let (store, _) = open(&settings, clock());
    let mut rig = Rig::start(store);
    let before = |before, limit| Read::Before {
        device: dev("a"),
        before,
        limit,
    };
    let after = |after, limit| Read::After {
        device: dev("a"),
        after,
        limit,
    };
    // What is owed to the device (a held entry, an open card) is never past the bound.
    let pages = [
        (before(None, 50), vec![2, 3, 5], false),
        (before(Some(5), 1), vec![3], true),
        (before(Some(3), 1), vec![2], false),
        (after(0, 50), vec![2, 3, 5], false),
        (after(3, 1), vec![5], false),
    ];
    for (token, (read, seqs, more)) in (1..).zip(pages) {
        let page = rig.read(token, read.clone());
        assert_eq!((seqs_of(&page.entries), page.more), (seqs, more), "{read:?}");
    }
}

#[test]
fn with_history_off_only_what_is_owed_stays() {
    let dir = Dir::new("no-history");
    let settings = JournalSettings {
        history: false,
        ..dir.settings()
    };
    let records = vec![
        Record::Put(Entry {
            held: true,
            ..entry("a", "m:1", 1)
        }),
        Record::Put(entry("a", "m:2", 2)),
        Record::Put(Entry {
            open: true,
            ..entry("a", "p:3", 3)
        }),
        Record::Sent {
            device: dev("a"),
            keys: vec!["m:1".into()],
        },
        Record::Put(Entry {
            held: true,
            ..entry("a", "m:4", 4)
        }),
    ];
    write_and_trim(&settings, clock(), records);
    assert_eq!(seqs_of(&read_device(&settings.path, &dev("a")).unwrap()), vec![3, 4]);
    let (_store, snapshot) = open(&settings, clock());
    assert_eq!(snapshot.seqs, vec![(dev("a"), 4)]);
}

#[test]
fn past_64_devices_the_least_recently_used_loses_its_history_not_its_seq_nor_what_it_is_owed() {
    let dir = Dir::new("devices");
    let settings = dir.settings();
    let (mut store, _) = open(&settings, clock());
    store.bounds.every = Duration::ZERO;
    let mut rig = Rig::start(store);
    let name = |i: usize| format!("dev-{i:02}");
    let mut records: Vec<Record> = (0..MAX_DEVICES)
        .map(|i| Record::Put(entry(&name(i), "m:1", 1)))
        .collect();
    // What is held for it was acknowledged (a held `deliver`): never dropped by this bound.
    records.push(Record::Put(Entry {
        held: true,
        ..entry("dev-30", "m:held", 1)
    }));
    records.push(Record::Confirm { ticket: 1 });
    rig.worker.write(records);
    rig.committed(1);
    // dev-30 was used longest ago.
    let raw = Connection::open(&settings.path).unwrap();
    raw.busy_timeout(Duration::from_secs(5)).unwrap();
    raw.execute("UPDATE seqs SET used_at = 1 WHERE device = 'dev-30'", [])
        .unwrap();
    drop(raw);
    rig.worker.write(vec![
        Record::Put(entry("dev-64", "m:1", 1)),
        Record::Confirm { ticket: 2 },
    ]);
    rig.committed(2);
    drop(rig);
    let left: Vec<String> = read_device(&settings.path, &dev("dev-30"))
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(left, ["m:held"], "its history went, what it is owed stayed");
    for kept in ["dev-00", "dev-29", "dev-31", "dev-63", "dev-64"] {
        assert_eq!(read_device(&settings.path, &dev(kept)).unwrap().len(), 1, "{kept}");
    }
    let (_store, snapshot) = open(&settings, clock());
    assert_eq!(snapshot.seqs.len(), MAX_DEVICES + 1);
    assert!(snapshot.seqs.contains(&(dev("dev-30"), 1)));
}

#[test]
fn seqs_are_capped_sparing_devices_with_entries() {
    let dir = Dir::new("seqs");
    let settings = dir.settings();
    let mut records = vec![Record::Put(entry("s-0000", "m:1", 1))];
    records.extend((1..MAX_SEQS + 5).map(|i| Record::Reserve {
        device: dev(&format!("s-{i:04}")),
        upto: 100 + i as u64,
    }));
    write_and_trim(&settings, clock(), records);
    let (_store, snapshot) = open(&settings, clock());
    assert_eq!(snapshot.seqs.len(), MAX_SEQS);
    assert_eq!(snapshot.seqs[0], (dev("s-0000"), 1));
    // The oldest without entries went, and a device the journal forgot goes on after
    // the largest seq they had.
    assert_eq!(snapshot.seqs[1], (dev("s-0006"), 106));
    assert_eq!(snapshot.seq_floor, 105);
}

#[test]
fn idempotency_rows_older_than_the_window_are_dropped() {
    let dir = Dir::new("dedup");
    let settings = dir.settings();
    let hour_ago = Clock {
        origin_unix_ms: clock().origin_unix_ms - 3_600_000,
    };
    let dedup = |id: &str, at| Record::Dedup {
        window: Window::Seen,
        device: dev("a"),
        id: id.into(),
        at,
        value: String::new(),
    };
    let records = vec![dedup("old", Time::ZERO), dedup("new", Time::from_secs(3600))];
    write_and_trim(&settings, hour_ago, records);
    let raw = Connection::open(&settings.path).unwrap();
    let rows: i64 = raw
        .query_row("SELECT count(*) FROM dedup", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 1);
    drop(raw);
    let (_store, snapshot) = open(&settings, hour_ago);
    let ids: Vec<_> = snapshot.dedup.iter().map(|row| row.id.as_str()).collect();
    assert_eq!(ids, ["new"]);
}

// decisions L61: the I2 and S4 windows and a card's deadline survive a restart with their
// real ages, even when the wall clock was stepped after the start (a Pi has no RTC: it may
// boot an hour behind, and NTP set it right once the gateway runs).
#[test]
fn a_wall_clock_step_after_the_start_does_not_age_what_is_written() {
    static BEHIND_MS: AtomicU64 = AtomicU64::new(3_600_000);
    fn wall() -> u64 {
        now_unix_ms() - BEHIND_MS.load(Ordering::Relaxed)
    }
    let dir = Dir::new("clock-step");
    let settings = dir.settings();
    let origin = Instant::now();
    let (mut store, _) = open(&settings, ClockSource::run_with_wall(origin, wall));
    store.bounds.every = Duration::ZERO;
    let mut rig = Rig::start(store);
    BEHIND_MS.store(0, Ordering::Relaxed); // NTP steps the clock forward
    let now = Time::from_millis(u64::try_from(origin.elapsed().as_millis()).unwrap());
    let card = Entry {
        open: true,
        deadline: Some(now + Duration::from_secs(300)),
        ..entry("a", "p:1", 1)
    };
    rig.worker.write(vec![
        Record::Dedup {
            window: Window::Seen,
            device: dev("a"),
            id: "t1".into(),
            at: now,
            value: String::new(),
        },
        Record::Put(card),
        Record::Confirm { ticket: 1 },
    ]);
    rig.committed(1);
    drop(rig);
    let (_store, snapshot) = open(&settings, clock());
    let ids: Vec<_> = snapshot.dedup.iter().map(|row| row.id.as_str()).collect();
    assert_eq!(ids, ["t1"], "a moment old, not an hour");
    let left = snapshot.open_cards[0].deadline.unwrap();
    assert!(left > Time::from_secs(290), "the card has its 5 minutes left: {left:?}");
}

#[test]
fn a_put_within_the_reservation_leaves_the_seqs_row_alone_for_a_minute() {
    let dir = Dir::new("used-at");
    let settings = dir.settings();
    let (store, _) = open(&settings, clock());
    let mut rig = Rig::start(store);
    let mut ticket = 0;
    let mut put = |rig: &mut Rig, seq: u64| {
        ticket += 1;
        rig.worker.write(vec![
            Record::Put(entry("a", &format!("m:{seq}"), seq)),
            Record::Confirm { ticket },
        ]);
        rig.committed(ticket);
    };
    rig.worker.write(vec![
        Record::Reserve {
            device: dev("a"),
            upto: 1000,
        },
        Record::Confirm { ticket: 100 },
    ]);
    rig.committed(100);
    let raw = Connection::open(&settings.path).unwrap();
    raw.busy_timeout(Duration::from_secs(5)).unwrap();
    let row = || -> (i64, i64) {
        raw.query_row("SELECT reserved, used_at FROM seqs WHERE device = 'a'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
    };
    let set_used_at = |ms_ago: u64| {
        let at = rows::int(now_unix_ms() - ms_ago);
        raw.execute("UPDATE seqs SET used_at = ?1 WHERE device = 'a'", [at])
            .unwrap();
        at
    };
    let recent = set_used_at(30_000);
    put(&mut rig, 1);
    assert_eq!(
        row(),
        (1000, recent),
        "within the reservation and the minute: untouched"
    );
    set_used_at(61_000);
    put(&mut rig, 2);
    let (reserved, used_at) = row();
    assert_eq!(reserved, 1000);
    assert!(used_at > recent + 20_000, "rewritten once a minute old");
    let recent = set_used_at(1_000);
    put(&mut rig, 1500);
    assert_eq!(row().0, 1500, "a seq above the reservation raises it");
    assert!(row().1 > recent);
}
