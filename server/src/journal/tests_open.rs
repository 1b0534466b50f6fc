//! Opening what an earlier run left: a journal that replaced a damaged one keeps its seq
//! floor however that run ended, and the CLI reads a stopped gateway's journal as it is.

use std::fs;

use hermes_mobile::journal::Record;
use rusqlite::Connection;

use super::tests::{clock, dev, entry, open, seqs_of, Dir, Rig};
use super::*;

// decisions L62: a journal started in place of a damaged one goes on above the unix ms of
// its start, even if the run that moved the damaged one aside never wrote that floor (a
// SIGKILL between the new file's schema and its floor, or a full disk that failed the
// open): a phone that kept a seq of the old journal must still get all of the new one.
#[test]
fn a_replacement_journal_keeps_its_floor_though_the_open_that_made_it_did_not_write_it() {
    let dir = Dir::new("floor-lost");
    let path = dir.journal();
    fs::write(&path, b"not a database, only text\n".repeat(200)).unwrap();
    let opened_at = now_unix_ms();
    match Store::open(&dir.settings(), clock()) {
        Opened::Ready {
            moved_aside: Some(_), ..
        } => {}
        other => panic!("expected a new journal, got {other:?}"),
    }
    // What a SIGKILL between the migration's commit and the floor's leaves.
    Connection::open(&path)
        .unwrap()
        .execute("DELETE FROM meta WHERE name = 'seq_floor'", [])
        .unwrap();
    let (store, snapshot) = open(&dir.settings(), clock());
    assert!(snapshot.seq_floor >= opened_at, "{snapshot:?}");
    drop(store);
    // What an open that failed before the schema leaves: an empty file.
    for file in [path.clone(), sibling(&path, "-wal"), sibling(&path, "-shm")] {
        let _ = fs::remove_file(file);
    }
    fs::write(&path, b"").unwrap();
    let (_store, snapshot) = open(&dir.settings(), clock());
    assert!(snapshot.seq_floor >= opened_at, "{snapshot:?}");
}

// `hermes-mobile history` only reads: on the journal of a stopped gateway it leaves no
// `-wal` or `-shm` behind (SQLite makes both for a reader of a WAL file, and keeps them).
#[test]
fn reading_a_stopped_gateway_s_journal_leaves_nothing_beside_it() {
    // A name a URI must escape.
    let dir = Dir::new("read only?%#");
    let path = dir.journal();
    let (store, _) = open(&dir.settings(), clock());
    let mut rig = Rig::start(store);
    rig.worker
        .write(vec![Record::Put(entry("a", "m:1", 1)), Record::Confirm { ticket: 1 }]);
    rig.committed(1);
    drop(rig);
    let sides = || ["-wal", "-shm"].map(|side| sibling(&path, side).exists());
    assert_eq!(sides(), [false, false], "a clean stop leaves the file alone");
    assert_eq!(seqs_of(&read_device(&path, &dev("a")).unwrap()), vec![1]);
    assert_eq!(sides(), [false, false], "nothing left beside the journal");
}

// The WAL is checkpointed once it holds 8 MiB, in pages of the file's own size: a journal
// made with 4 KiB pages before 2 KiB became the default checkpoints at the same bytes.
#[test]
fn the_wal_is_checkpointed_at_8_mib_whatever_the_page_size() {
    let pragma =
        |store: &Store, name: &str| -> i64 { store.conn.pragma_query_value(None, name, |row| row.get(0)).unwrap() };
    let dir = Dir::new("wal-size");
    let (store, _) = open(&dir.settings(), clock());
    assert_eq!(pragma(&store, "wal_autocheckpoint"), 4096);
    assert_eq!(pragma(&store, "journal_size_limit"), 8 << 20);
    drop(store);
    let old = Dir::new("wal-size-4k");
    let conn = Connection::open(old.journal()).unwrap();
    conn.pragma_update(None, "page_size", 4096).unwrap();
    conn.execute_batch("CREATE TABLE made_before(x)").unwrap();
    drop(conn);
    match Store::open(&old.settings(), clock()) {
        Opened::Ready { store, .. } => assert_eq!(pragma(&store, "wal_autocheckpoint"), 2048),
        other => panic!("expected the journal open, got {other:?}"),
    }
}
