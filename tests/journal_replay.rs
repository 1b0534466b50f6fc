//! A resume's replay, a page at a time (issue 24, L58), on virtual time with the journal in
//! memory: a long journal comes whole, in seq order, each entry once, and a change made while
//! the replay is under way comes once, after it, as a live frame.
mod common;

use common::*;
use hermes_mobile::journal::Read;
use hermes_mobile::{AgentCommand, Config, DeviceId, MessageId};
use serde_json::{json, Value};

fn reply(id: &str, text: &str) -> AgentCommand {
    streamed(id, text, true)
}

fn streamed(id: &str, text: &str, done: bool) -> AgentCommand {
    AgentCommand::Reply {
        device: DeviceId::from("tel-1"),
        message: MessageId::from(id),
        text: text.into(),
        done,
    }
}

fn resume(h: &mut Harness, after: u64) -> hermes_mobile::ConnId {
    let conn = h.open();
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":after}}),
    );
    conn
}

fn texts(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["t"] == "message")
        .map(|f| f["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_journal_longer_than_a_page_is_replayed_whole_in_order_each_entry_once() {
    let mut h = Harness::with_journal(Config::new(TOKEN));
    let phone = h.connect("tel-1");
    for i in 0..150 {
        h.agent(reply(&format!("r{i}"), &format!("text {i}")));
    }
    h.close(phone);
    h.held_reads = Some(Vec::new());
    let conn = resume(&mut h, 0);
    let mut reads = 0;
    while h.held_reads.as_ref().is_some_and(|r| !r.is_empty()) {
        let limits: Vec<usize> = h
            .held_reads
            .as_ref()
            .unwrap()
            .iter()
            .map(|(_, r)| match r {
                Read::After { limit, .. } => *limit,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(limits.iter().all(|l| *l < 150), "paged: {limits:?}");
        reads += limits.len();
        h.answer_held_reads();
    }
    assert!(reads >= 3, "150 entries take several pages: {reads}");
    let frames = h.take(conn);
    let expected: Vec<String> = (0..150).map(|i| format!("text {i}")).collect();
    assert_eq!(texts(&frames), expected);
    let seqs: Vec<u64> = frames
        .iter()
        .filter(|f| f["t"] == "message")
        .filter_map(|f| f["seq"].as_u64())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "seq order");
    assert_eq!(frames.last().unwrap()["t"], "resumed");
}

#[test]
fn a_change_during_the_replay_comes_once_after_it() {
    let mut h = Harness::with_journal(Config::new(TOKEN));
    let phone = h.connect("tel-1");
    for i in 0..100 {
        h.agent(streamed(&format!("r{i}"), &format!("text {i}"), i != 90));
    }
    h.close(phone);
    h.held_reads = Some(Vec::new());
    let conn = resume(&mut h, 0);
    h.answer_held_reads(); // the first page is out; the second is being read
    h.agent(streamed("r90", "text 90, edited", true)); // an entry of the second page changes
    h.agent(reply("new", "brand new"));
    while h.held_reads.as_ref().is_some_and(|r| !r.is_empty()) {
        h.answer_held_reads();
    }
    let frames = h.take(conn);
    let got = texts(&frames);
    assert_eq!(got.iter().filter(|t| t.starts_with("text 90")).count(), 1, "{got:?}");
    assert_eq!(got.iter().filter(|t| *t == "brand new").count(), 1);
    let resumed = frames.iter().position(|f| f["t"] == "resumed").unwrap();
    let edited = frames.iter().position(|f| f["text"] == "text 90, edited").unwrap();
    assert!(edited > resumed, "live, after the replay");
    assert!(!got.contains(&"text 90".to_owned()), "its old version is not replayed");
}

#[test]
fn a_replay_waits_for_its_seqs_on_disk_and_ready_never_names_an_unreserved_seq() {
    // L57: a crash must never hand out again a seq a phone was shown, in a frame, in
    // `ready.seq` or in `resumed.seq`.
    let mut h = Harness::with_journal(Config::new(TOKEN));
    let phone = h.connect("tel-1");
    h.agent(reply("r1", "before"));
    h.close(phone);
    h.restart(true);
    h.auto_commit = false;
    h.agent(reply("r2", "after the restart")); // a seq above the reservation: not yet on disk
    let conn = resume(&mut h, 0);
    let frames = h.take(conn);
    assert_eq!(Harness::types(&frames), ["ready"], "nothing replayed before the commit");
    let ready_seq = frames[0]["seq"].as_u64().unwrap();
    h.commit();
    let frames = h.take(conn);
    let second = frames
        .iter()
        .find(|f| f["text"] == "after the restart")
        .expect("replayed");
    assert!(
        second["seq"].as_u64().unwrap() > ready_seq,
        "ready named only seqs on disk"
    );
    let resumed = frames.last().unwrap();
    assert_eq!(resumed["t"], "resumed");
    assert!(resumed["seq"].as_u64() >= second["seq"].as_u64());
}
