//! The journal as its owner meets it, over the real binary: `/healthz` while writes fail,
//! and the `history` command on the journal of a stopped gateway (issue 24, L62).
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn journal_file(dir: &Path) -> PathBuf {
    dir.join("journal.sqlite3")
}

fn side_file(dir: &Path, suffix: &str) -> PathBuf {
    dir.join(format!("journal.sqlite3{suffix}"))
}

fn health(server: &Server) -> Value {
    let response = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).expect("healthz is JSON")
}

fn wait_for_health(server: &Server, journal: &str) {
    wait_until(&format!("healthz journal {journal:?}"), Duration::from_secs(5), || {
        health(server)["journal"] == journal
    });
}

// decisions L62: `/healthz` `journal` is "writes failing: <kind>" in SQLite's words while
// writes fail, the failure is logged once per kind, and it is "ok" again once a commit works.
#[test]
fn healthz_shows_sqlite_s_words_while_writes_fail_and_ok_once_they_work() {
    let server = Server::start(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    let mut text = |id: &str| {
        phone.send(json!({"t":"text","id":id,"text":"hello"}));
        phone.until("message");
    };
    text("m1");
    assert_eq!(health(&server)["journal"], "ok");
    // A trigger stands in for a full disk: every new entry is refused in SQLite's words for it.
    let raw = rusqlite::Connection::open(journal_file(&server.state_dir)).unwrap();
    raw.busy_timeout(Duration::from_secs(5)).unwrap();
    raw.execute_batch(
        "CREATE TRIGGER full BEFORE INSERT ON entries
         BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
    )
    .unwrap();
    text("m2");
    text("m3");
    wait_for_health(&server, "writes failing: database or disk is full");
    raw.execute_batch("DROP TRIGGER full").unwrap();
    text("m4");
    wait_for_health(&server, "ok");
    server.wait_for_log("writes work again");
    let log = server.log_text();
    let said = log.lines().filter(|l| l.contains("database or disk is full")).count();
    assert_eq!(said, 1, "one line for the kind, however many writes failed: {log}");
}

// The `history` command only reads: on a stopped gateway's journal it leaves no `-wal` or
// `-shm` behind (SQLite would create both for a reader of a WAL file, and keep them).
#[test]
fn the_history_command_leaves_nothing_beside_a_stopped_gateway_s_journal() {
    let mut server = Server::start(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    phone.send(json!({"t":"text","id":"m1","text":"what is kept?"}));
    phone.until("message");
    drop(phone);
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let _ = server.child.wait();
    let dir = std::mem::take(&mut server.state_dir);
    drop(server);
    let sides = || [side_file(&dir, "-wal"), side_file(&dir, "-shm")].map(|f| f.exists());
    assert_eq!(sides(), [false, false], "a clean stop leaves the file alone");
    let out = std::process::Command::new(binary())
        .env_clear()
        .args(["history", "--device", "tel-1", "--state-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("echo: what is kept?"), "{text}");
    assert_eq!(sides(), [false, false], "nothing left beside the journal");
    let _ = std::fs::remove_dir_all(&dir);
}
