//! Events owed to the agent (L64): kept in the order they were owed, replaced at the end
//! when owed again, removed only when handed over; never by a forget nor by the bounds. And
//! the migration that added them: a journal of the first release opens with all it had.

use std::time::Duration;

use hermes_mobile::journal::{Entry, Owed, Read, Record, Snapshot};
use hermes_mobile::Time;
use rusqlite::Connection;

use super::bounds::{MAX_DEVICES, MAX_SEQS};
use super::tests::{clock, dev, entry, open, seqs_of, Dir, Rig};
use super::tests_bounds::write_and_trim;
use super::*;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

fn owed(device: &str, key: &str, secs: u64, blob: Option<Vec<u8>>) -> Owed {
    Owed {
        device: dev(device),
        key: key.into(),
        at: Time::from_secs(secs),
        body: format!("{{\"event\":\"{key}\",\"at\":{secs}}}"),
        blob,
    }
}

fn owed_keys(snapshot: &Snapshot) -> Vec<(String, String)> {
    snapshot
        .owed
        .iter()
        .map(|o| (o.device.0.clone(), o.key.clone()))
        .collect()
}

fn handed(device: &str, key: &str) -> Record {
    Record::Handed {
        device: dev(device),
        key: key.into(),
    }
}

#[test]
fn owed_events_keep_their_order_and_blobs_and_go_only_when_handed() {
    let dir = Dir::new("owed");
    let (settings, clock) = (dir.settings(), clock());
    let (store, _) = open(&settings, clock);
    let mut rig = Rig::start(store);
    let voice = owed("a", "m:1", 1, Some(vec![0, 1, 2, 255]));
    let answer = owed("b", "p:7", 2, None);
    let text = owed("a", "m:2", 3, None);
    let empty_file = owed("c", "m:9", 4, Some(Vec::new()));
    rig.worker.write(vec![
        Record::Owe(voice.clone()),
        Record::Owe(answer.clone()),
        Record::Owe(text.clone()),
        Record::Owe(empty_file.clone()),
        Record::Confirm { ticket: 1 },
    ]);
    rig.committed(1);
    // Owed again (a message re-sent after a restart): replaced, and now the last one owed.
    let voice = Owed {
        body: "{\"again\":true}".into(),
        blob: Some(vec![9; 70_000]),
        ..owed("a", "m:1", 5, None)
    };
    rig.worker.write(vec![
        Record::Owe(voice.clone()),
        handed("a", "m:2"),
        handed("a", "m:unknown"),
        handed("b", "m:1"), // another device's key
        Record::Confirm { ticket: 2 },
    ]);
    rig.committed(2);
    drop(rig);

    let (store, snapshot) = open(&settings, clock);
    assert_eq!(snapshot.owed, vec![answer, empty_file.clone(), voice.clone()]);
    let mut rig = Rig::start(store);
    rig.worker.write(vec![
        handed("b", "p:7"),
        handed("a", "m:1"),
        Record::Confirm { ticket: 3 },
    ]);
    rig.committed(3);
    drop(rig);
    let (_store, snapshot) = open(&settings, clock);
    assert_eq!(snapshot.owed, vec![empty_file]);
}

#[test]
fn owed_events_read_back_by_key_come_in_the_order_owed_and_only_if_still_owed() {
    // L64 (review D #8): lines that died in a peer's outbox are read back for the next
    // agent, uncommitted rows included (the read sees the open transaction).
    let dir = Dir::new("owed-read");
    let (store, _) = open(&dir.settings(), clock());
    let mut rig = Rig::start(store);
    let first = owed("a", "m:1", 1, Some(vec![7; 3]));
    let second = owed("b", "p:2", 2, None);
    let third = owed("a", "m:3", 3, None);
    rig.worker.write(vec![
        Record::Owe(first.clone()),
        Record::Owe(second.clone()),
        Record::Owe(third.clone()),
        handed("a", "m:3"),
    ]);
    let key = |d: &str, k: &str| hermes_mobile::journal::owed::EventKey {
        device: dev(d),
        key: k.into(),
    };
    let keys = vec![key("b", "p:2"), key("a", "m:3"), key("a", "m:1"), key("c", "m:1")];
    let read = |keys: &[_], limit, max_bytes| Read::Owed {
        keys: keys.to_vec(),
        limit,
        max_bytes,
    };
    let result = rig.read(1, read(&keys, 10, 1 << 20));
    assert_eq!(
        result.owed,
        vec![first.clone(), second],
        "handed and unknown keys are not owed"
    );
    assert!(result.entries.is_empty());
    // Bounded: what does not fit stays owed, for the next start.
    assert_eq!(rig.read(2, read(&keys, 1, 1 << 20)).owed, vec![first.clone()]);
    assert_eq!(rig.read(3, read(&keys, 10, 1)).owed, vec![first], "the first always");
}

#[test]
fn a_forget_keeps_what_the_agent_is_owed() {
    let dir = Dir::new("owed-forget");
    let (settings, clock) = (dir.settings(), clock());
    let (store, _) = open(&settings, clock);
    let mut rig = Rig::start(store);
    let message = owed("a", "m:1", 1, Some(vec![1; 10]));
    rig.worker.write(vec![
        Record::Put(entry("a", "u:1", 1)),
        Record::Owe(message.clone()),
        Record::Forget { device: dev("a") },
        Record::Confirm { ticket: 1 },
    ]);
    rig.committed(1);
    drop(rig);
    let (_store, snapshot) = open(&settings, clock);
    assert!(read_device(&settings.path, &dev("a")).unwrap().is_empty());
    assert_eq!(snapshot.owed, vec![message]);
}

#[test]
fn the_bounds_never_drop_what_the_agent_is_owed() {
    let dir = Dir::new("owed-bounds");
    let settings = JournalSettings {
        items: 1,
        days: 30,
        history: false,
        ..dir.settings()
    };
    // This run began 40 days ago: what was owed at its start is 40 days old.
    let old_run = Clock {
        origin_unix_ms: clock().origin_unix_ms - 40 * DAY_MS,
    };
    let old = owed("a", "m:1", 0, Some(vec![5; 100]));
    let records = vec![
        Record::Owe(old.clone()),
        Record::Put(entry("a", "u:1", 1)),
        Record::Put(entry("a", "u:2", 2)),
        Record::Owe(owed("a", "m:2", 1, None)),
    ];
    write_and_trim(&settings, old_run, records);
    let (_store, snapshot) = open(&settings, old_run);
    assert!(read_device(&settings.path, &dev("a")).unwrap().is_empty());
    assert_eq!(
        owed_keys(&snapshot),
        [("a".into(), "m:1".into()), ("a".into(), "m:2".into())]
    );
    assert_eq!(snapshot.owed[0], old);
}

#[test]
fn past_64_devices_what_the_agent_is_owed_stays_and_takes_no_place() {
    let dir = Dir::new("owed-devices");
    let settings = dir.settings();
    let (mut store, _) = open(&settings, clock());
    store.bounds.every = Duration::ZERO;
    let mut rig = Rig::start(store);
    let name = |i: usize| format!("dev-{i:02}");
    let mut records: Vec<Record> = (0..MAX_DEVICES)
        .map(|i| Record::Put(entry(&name(i), "u:1", 1)))
        .collect();
    records.push(Record::Owe(owed("dev-30", "m:1", 1, None)));
    // A device with nothing but an owed event: no entries, no seqs row.
    records.push(Record::Owe(owed("lonely", "p:1", 1, None)));
    records.push(Record::Confirm { ticket: 1 });
    rig.worker.write(records);
    rig.committed(1);
    let raw = Connection::open(&settings.path).unwrap();
    raw.busy_timeout(Duration::from_secs(5)).unwrap();
    raw.execute("UPDATE seqs SET used_at = 1 WHERE device = 'dev-30'", [])
        .unwrap();
    drop(raw);
    rig.worker.write(vec![
        Record::Put(entry("dev-64", "u:1", 1)),
        Record::Confirm { ticket: 2 },
    ]);
    rig.committed(2);
    drop(rig);
    assert!(read_device(&settings.path, &dev("dev-30")).unwrap().is_empty());
    // Only dev-30 lost its history: the lonely device took no place among the 64.
    for kept in ["dev-00", "dev-29", "dev-31", "dev-63", "dev-64"] {
        assert_eq!(read_device(&settings.path, &dev(kept)).unwrap().len(), 1, "{kept}");
    }
    let (_store, snapshot) = open(&settings, clock());
    let expected = [("dev-30".into(), "m:1".into()), ("lonely".into(), "p:1".into())];
    assert_eq!(owed_keys(&snapshot), expected);
}

#[test]
fn a_device_the_agent_is_owed_keeps_its_seqs() {
    let dir = Dir::new("owed-seqs");
    let settings = dir.settings();
    let mut records = vec![
        Record::Reserve {
            device: dev("s-0000"),
            upto: 50,
        },
        Record::Owe(owed("s-0000", "m:1", 1, None)),
    ];
    records.extend((1..MAX_SEQS + 5).map(|i| Record::Reserve {
        device: dev(&format!("s-{i:04}")),
        upto: 100 + i as u64,
    }));
    write_and_trim(&settings, clock(), records);
    let (_store, snapshot) = open(&settings, clock());
    assert_eq!(snapshot.seqs.len(), MAX_SEQS);
    assert_eq!(snapshot.seqs[0], (dev("s-0000"), 50));
    assert_eq!(snapshot.seq_floor, 105);
    assert_eq!(snapshot.owed.len(), 1);
}

/// A file as the first release left it: schema 1 in WAL mode, with a row in every table.
fn write_v1(path: &std::path::Path, clock: Clock) {
    let raw = Connection::open(path).unwrap();
    raw.pragma_update(None, "auto_vacuum", "INCREMENTAL").unwrap();
    raw.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))
        .unwrap();
    raw.execute_batch(schema::V1).unwrap();
    raw.pragma_update(None, "user_version", 1).unwrap();
    let at = |secs| rows::int(clock.unix_ms(Time::from_secs(secs)));
    let insert = "INSERT INTO entries (device, key, seq, first_seq, at, held, open, deadline, body, blob)
                  VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
    let mut put = raw.prepare(insert).unwrap();
    let file: Option<Vec<u8>> = Some(vec![3; 5000]);
    put.execute(rusqlite::params![
        "a",
        "f:1",
        1,
        at(1),
        1,
        0,
        None::<i64>,
        "{\"f\":1}",
        file
    ])
    .unwrap();
    put.execute(rusqlite::params![
        "a",
        "p:2",
        2,
        at(2),
        0,
        1,
        at(300),
        "{\"p\":2}",
        None::<Vec<u8>>
    ])
    .unwrap();
    put.execute(rusqlite::params![
        "a",
        "m:3",
        3,
        at(3),
        0,
        0,
        None::<i64>,
        "{\"m\":3}",
        None::<Vec<u8>>
    ])
    .unwrap();
    drop(put);
    raw.execute_batch(&format!(
        "INSERT INTO seqs VALUES ('a', 1000, {now}), ('b', 77, {now});
         INSERT INTO dedup VALUES (1, 'a', 't1', {now}, '');
         INSERT INTO meta VALUES ('seq_floor', 12);",
        now = at(4)
    ))
    .unwrap();
}

#[test]
fn a_journal_of_schema_1_is_migrated_and_keeps_everything() {
    let dir = Dir::new("migrate-1");
    let (settings, clock) = (dir.settings(), clock());
    write_v1(&settings.path, clock);
    let (store, snapshot) = open(&settings, clock);
    let held = Entry {
        held: true,
        body: "{\"f\":1}".into(),
        blob: Some(vec![3; 5000]),
        ..entry("a", "f:1", 1)
    };
    let card = Entry {
        open: true,
        deadline: Some(Time::from_secs(300)),
        body: "{\"p\":2}".into(),
        at: Time::from_secs(2),
        ..entry("a", "p:2", 2)
    };
    assert_eq!(snapshot.seqs, vec![(dev("a"), 1000), (dev("b"), 77)]);
    assert_eq!(snapshot.seq_floor, 12);
    assert_eq!(snapshot.held, vec![held]);
    assert_eq!(snapshot.open_cards, vec![card]);
    assert_eq!(snapshot.dedup.len(), 1);
    assert!(snapshot.owed.is_empty());
    assert_eq!(seqs_of(&read_device(&settings.path, &dev("a")).unwrap()), vec![1, 2, 3]);

    // The new table is there and kept.
    let mut rig = Rig::start(store);
    let message = owed("a", "m:4", 4, Some(vec![1, 2]));
    rig.worker
        .write(vec![Record::Owe(message.clone()), Record::Confirm { ticket: 1 }]);
    rig.committed(1);
    drop(rig);
    let (_store, snapshot) = open(&settings, clock);
    assert_eq!(snapshot.owed, vec![message]);
    let raw = Connection::open(&settings.path).unwrap();
    let version: u32 = raw.pragma_query_value(None, "user_version", |row| row.get(0)).unwrap();
    assert_eq!(version, schema::VERSION);
}
