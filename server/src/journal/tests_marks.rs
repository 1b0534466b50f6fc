//! The file is read whole only when there is a reason: after a clean stop the open skips
//! the check, after an unclean one it runs `quick_check`, and a damaged page the journal
//! thread meets later fails only what touches it, is logged, and makes the next open run
//! `integrity_check` and move the file aside.

use std::fs;

use hermes_mobile::journal::{Entry, Read, Record};
use rusqlite::{Connection, OpenFlags};

use super::tests::{clock, dev, entry, open, Dir, Rig};
use super::*;

const NEEDLE: &str = "needle-5f1c0a";

/// A journal of 300 entries of device `a`, one of which (`m:150`) holds [`NEEDLE`],
/// stopped cleanly.
fn write_and_stop(settings: &JournalSettings) {
    let (store, _) = open(settings, clock());
    let mut rig = Rig::start(store);
    let body = |s: u64| match s {
        150 => format!("{{\"text\":\"{NEEDLE}\"}}"),
        _ => "x".repeat(300),
    };
    rig.worker.write(
        (1..=300)
            .map(|s| {
                Record::Put(Entry {
                    body: body(s),
                    ..entry("a", &format!("m:{s}"), s)
                })
            })
            .chain([Record::Confirm { ticket: 1 }])
            .collect(),
    );
    rig.committed(1);
}

fn marks_in(path: &std::path::Path) -> Vec<String> {
    let raw = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut stmt = raw
        .prepare("SELECT name FROM meta WHERE name IN ('clean', 'damaged') ORDER BY name")
        .unwrap();
    let names = stmt.query_map([], |row| row.get(0)).unwrap();
    names.collect::<rusqlite::Result<_>>().unwrap()
}

/// Overwrites the page that holds [`NEEDLE`]: a leaf of the `entries` table, which the
/// open never reads (it reads indexes, the small tables, and held and open entries).
fn damage_the_needle_page(path: &std::path::Path) {
    let mut bytes = fs::read(path).unwrap();
    let at = bytes
        .windows(NEEDLE.len())
        .position(|w| w == NEEDLE.as_bytes())
        .expect("the needle is in the file (the WAL was folded in at close)");
    let page = at / 4096 * 4096;
    bytes[page..page + 4096].fill(0x55);
    fs::write(path, &bytes).unwrap();
}

fn moved_aside(settings: &JournalSettings) -> MovedAside {
    match Store::open(settings, clock()) {
        Opened::Ready {
            moved_aside: Some(moved),
            ..
        } => moved,
        other => panic!("expected the journal moved aside, got {other:?}"),
    }
}

#[test]
fn a_clean_stop_skips_the_check_and_an_unclean_one_runs_it() {
    let dir = Dir::new("marks-unclean");
    let settings = dir.settings();
    write_and_stop(&settings);
    assert_eq!(marks_in(&settings.path), ["clean"]);
    damage_the_needle_page(&settings.path);
    // Not checked: the damage is still there, unseen.
    let (store, _) = open(&settings, clock());
    assert!(marks_in(&settings.path).is_empty(), "the open clears the mark");
    // Stopped without its thread ever ending in order, as a SIGKILL would.
    drop(store);
    let moved = moved_aside(&settings);
    assert!(moved.why.starts_with("quick_check: "), "{}", moved.why);
}

#[test]
fn a_damaged_page_met_later_fails_what_touches_it_and_the_next_open_moves_the_file_aside() {
    let dir = Dir::new("marks-damaged");
    let settings = dir.settings();
    write_and_stop(&settings);
    damage_the_needle_page(&settings.path);
    let (store, _) = open(&settings, clock());
    let mut rig = Rig::start(store);
    rig.worker.read(
        7,
        Read::After {
            device: dev("a"),
            after: 0,
            limit: 1000,
        },
    );
    match rig.next() {
        Done::Read {
            token: 7,
            result: Err(e),
        } => assert!(e.contains("malformed"), "{e}"),
        other => panic!("expected a failed read, got {other:?}"),
    }
    // A write to the damaged page fails its batch; others go on.
    rig.worker.write(vec![
        Record::Put(entry("a", "m:150", 301)),
        Record::Confirm { ticket: 2 },
    ]);
    match rig.next() {
        Done::WriteFailed { ticket, .. } => assert_eq!(ticket, Some(2)),
        other => panic!("expected a failed write, got {other:?}"),
    }
    rig.worker
        .write(vec![Record::Put(entry("b", "m:1", 1)), Record::Confirm { ticket: 3 }]);
    rig.committed(3);
    drop(rig);
    assert_eq!(marks_in(&settings.path), ["damaged"]);
    let moved = moved_aside(&settings);
    assert!(moved.why.starts_with("integrity_check: "), "{}", moved.why);
}
