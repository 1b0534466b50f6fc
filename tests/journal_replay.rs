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

#[test]
fn a_live_change_made_while_the_replay_waits_for_its_seqs_comes_once() {
    // L58 (review A #2b): the replay's ceiling is the device's latest seq at `hello`, not
    // when the first page is read, or a change made in between comes twice.
    let mut h = Harness::with_journal(Config::new(TOKEN));
    let phone = h.connect("tel-1");
    h.agent(reply("r1", "before"));
    h.close(phone);
    h.restart(true);
    h.auto_commit = false;
    h.agent(reply("r2", "after the restart"));
    let conn = resume(&mut h, 0);
    h.agent(reply("live", "during the wait"));
    h.commit();
    h.commit();
    let frames = h.take(conn);
    let got = texts(&frames);
    assert_eq!(got.iter().filter(|t| *t == "during the wait").count(), 1, "{got:?}");
    assert_eq!(got.iter().filter(|t| *t == "after the restart").count(), 1, "{got:?}");
}

#[test]
fn with_history_off_a_reply_held_over_a_restart_reaches_a_phone_whose_replay_waited() {
    // Issue 24's first bullet (review A #2a): the held output is marked sent only once the
    // replay has read it, or with history off it is gone before the read.
    let mut c = Config::new(TOKEN);
    c.journal = Some(hermes_mobile::journal::JournalConfig {
        history: false,
        ..hermes_mobile::journal::JournalConfig::new()
    });
    c.push = Some(push_config());
    let mut h = Harness::with_journal(c);
    subscribe_and_lock(&mut h);
    h.restart(true);
    h.auto_commit = false;
    h.agent(reply("r2", "held after the restart"));
    h.commit();
    h.restart(true);
    h.agent(reply("r3", "held again, not yet reserved"));
    let conn = resume(&mut h, 0);
    h.commit();
    h.commit();
    let got = texts(&h.take(conn));
    assert!(got.contains(&"held after the restart".to_owned()), "{got:?}");
    assert!(got.contains(&"held again, not yet reserved".to_owned()), "{got:?}");
}

#[test]
fn a_replay_cut_short_leaves_the_held_output_held() {
    // Review A #2: the phone that dropped mid-replay gets its held output on the next hello.
    let mut c = Config::new(TOKEN);
    c.push = Some(push_config());
    let mut h = Harness::with_journal(c);
    subscribe_and_lock(&mut h);
    h.agent(reply("r1", "held while locked"));
    h.held_reads = Some(Vec::new());
    let conn = resume(&mut h, 0);
    h.close(conn);
    h.answer_held_reads();
    h.held_reads = None;
    let (_, frames) = h.connect_frames("tel-1");
    assert!(texts(&frames).contains(&"held while locked".to_owned()), "{frames:?}");
}

fn push_config() -> hermes_mobile::push::PushConfig {
    use hermes_mobile::push::{AllowList, PushConfig};
    let vapid = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";
    PushConfig::new(vapid, AllowList::new(["127.0.0.1:8443"]).unwrap())
}

/// The phone subscribes to push and locks: output for it is held (L45).
fn subscribe_and_lock(h: &mut Harness) {
    let phone = h.connect("tel-1");
    let sub = json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"https://127.0.0.1:8443/p",
        "keys":{"p256dh":"BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
        "auth":"BTBZMqHH6r4Tts7J_aSIgg"}}});
    h.send(phone, sub);
    h.take(phone);
    h.close(phone);
}

#[test]
fn a_replay_waits_for_a_slow_phone_to_read_instead_of_piling_up_its_queue() {
    // Review A #5, L22: a new client on a long journal is not dropped as too slow for what
    // the gateway read at disk speed; the replay goes on as the phone reads.
    let mut h = Harness::with_journal(Config::new(TOKEN));
    let phone = h.connect("tel-1");
    let text = "x".repeat(10_000);
    for i in 0..600 {
        h.agent(reply(&format!("r{i}"), &format!("{i} {text}")));
    }
    h.close(phone);
    let conn = h.open();
    h.unread.push(conn);
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}),
    );
    let mut got = Vec::new();
    let mut rounds = 0;
    loop {
        let frames = h.take(conn);
        let bytes: usize = frames.iter().map(|f| f.to_string().len()).sum();
        assert!(bytes < 2 * 1024 * 1024, "at most about a window unread: {bytes}");
        let done = frames.iter().any(|f| f["t"] == "resumed");
        for f in frames.iter().filter(|f| f["t"] == "message") {
            let id = f["id"].as_str().unwrap().to_owned();
            if got.last() != Some(&id) {
                got.push(id); // a long reply comes in chunks, one id
            }
        }
        if done {
            break;
        }
        rounds += 1;
        assert!(rounds < 1000, "the replay goes on as the phone reads");
        h.read_queue(conn);
    }
    assert!(rounds >= 4, "6 MB came in several windows: {rounds}");
    assert_eq!(got.len(), 600, "each once");
    let ids: Vec<String> = (0..600).map(|i| format!("r{i}")).collect();
    assert_eq!(got, ids, "in order");
}

/// A ~3 MB journal of 300 long replies, and a phone that resumes after 0 and reads slowly:
/// its replay pauses after the first window.
fn slow_replay(h: &mut Harness) -> hermes_mobile::ConnId {
    let phone = h.connect("tel-1");
    let text = "x".repeat(10_000);
    for i in 0..300 {
        h.agent(reply(&format!("r{i}"), &format!("{i} {text}")));
    }
    h.close(phone);
    let conn = h.open();
    h.unread.push(conn);
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}),
    );
    conn
}

#[test]
fn a_close_during_a_replay_sends_no_live_seq_above_what_the_replay_had_not_sent() {
    // L58 (review D #1): the client keeps the highest seq it saw; a live frame let out by
    // the close would make its next resume skip the rest of the replay.
    let mut h = Harness::with_journal(Config::new(TOKEN));
    let conn = slow_replay(&mut h);
    h.agent(reply("live", "said during the replay"));
    h.held_reads = Some(Vec::new());
    h.read_queue(conn);
    let (token, _) = h.held_reads.as_mut().unwrap().remove(0);
    h.gw.handle_journal_read(h.now, token, Err("disk I/O error".into()));
    h.advance_ms(0);
    let frames = h.take(conn);
    assert!(h.closed.contains_key(&conn));
    assert!(
        !texts(&frames).contains(&"said during the replay".to_owned()),
        "{:?}",
        texts(&frames).len()
    );
    h.held_reads = None;
    let messages = frames.iter().filter(|f| f["t"] == "message");
    let kept = messages.filter_map(|f| f["seq"].as_u64()).max().unwrap();
    let again = resume(&mut h, kept);
    let got = texts(&h.take(again));
    assert!(got.contains(&"said during the replay".to_owned()));
    assert!(
        got.iter().any(|t| t.starts_with("299 ")),
        "the rest of the replay comes after {kept}"
    );
}

#[test]
fn a_paced_replay_outlasting_the_hold_window_still_sends_what_was_held() {
    // L58, M4 (review D #4): the hold is the replay's until it ends, however long it takes.
    let mut c = Config::new(TOKEN);
    c.journal = Some(hermes_mobile::journal::JournalConfig {
        history: false,
        ..hermes_mobile::journal::JournalConfig::new()
    });
    c.push = Some(push_config());
    let mut h = Harness::with_journal(c);
    subscribe_and_lock(&mut h);
    let text = "y".repeat(10_000);
    for i in 0..200 {
        h.agent(reply(&format!("h{i}"), &format!("{i} {text}")));
    }
    let conn = h.open();
    h.unread.push(conn);
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}),
    );
    let mut got = texts(&h.take(conn));
    h.advance_ms(48 * 3600 * 1000); // past any hold window
    for _ in 0..100 {
        h.read_queue(conn);
        got.extend(texts(&h.take(conn)));
    }
    assert!(got.iter().any(|t| t.starts_with("199 ")), "the last held reply came");
}
