//! The journal's promises when the disk fails or the process dies between a change and its
//! commit (issue 24 §2, §4; decisions-local L57, L58, L62; review A of the journal): nothing
//! is confirmed before it is kept, and a failing disk never stops the gateway serving.
mod common;

use common::*;
use hermes_mobile::push::{AllowList, PushConfig};
use hermes_mobile::{AgentCommand, AgentEvent, Config, DeviceId, MessageId, PromptId, PromptRequest};
use serde_json::{json, Value};

const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const VAPID: &str = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";
const SERVICE: &str = "cron-token-0123456789";

fn harness() -> Harness {
    let mut c = Config::new(TOKEN);
    c.deliver_tokens = vec![SERVICE.into()];
    c.push = Some(PushConfig::new(VAPID, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    Harness::with_journal(c)
}

fn reply(device: &str, id: &str, text: &str) -> AgentCommand {
    AgentCommand::Reply {
        device: DeviceId::from(device),
        message: MessageId::from(id),
        text: text.into(),
        done: true,
    }
}

fn hello_resume(h: &mut Harness, device: &str, after: u64) -> (hermes_mobile::ConnId, Vec<Value>) {
    let conn = h.open();
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":device},"resume":{"after":after}}),
    );
    let frames = h.take(conn);
    (conn, frames)
}

fn subscribed_and_gone(h: &mut Harness, device: &str) {
    let phone = h.connect(device);
    let sub = json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"https://127.0.0.1:8443/p","keys":{"p256dh":KEY,"auth":AUTH}}});
    h.send(phone, sub);
    h.take(phone);
    h.close(phone);
}

fn service(h: &mut Harness) -> hermes_mobile::ConnId {
    let c = h.open();
    h.send(c, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    h.take(c);
    c
}

#[test]
fn a_disk_that_keeps_failing_does_not_stop_the_device_s_output() {
    // L62 (review A #1): a reservation that fails lets the frames waiting for it go.
    let mut h = harness();
    let p = h.connect("tel-1");
    h.close(p);
    h.restart(false);
    h.auto_commit = false;
    let phone = h.connect("tel-1");
    h.fail_commit();
    h.agent(reply("tel-1", "r1", "hello"));
    h.send(phone, json!({"t":"ping","ts":1}));
    for _ in 0..3 {
        h.fail_commit();
    }
    let got = h.take(phone);
    assert!(got.iter().any(|f| f["text"] == "hello"), "goes on serving: {got:?}");
    assert!(got.iter().any(|f| f["t"] == "pong"), "{got:?}");
    assert!(!h.closed.contains_key(&phone), "not closed: {:?}", h.closed);
}

#[test]
fn a_card_answer_is_confirmed_only_once_it_is_on_disk() {
    // Review A #3: `prompt_done` before the commit, then a SIGKILL, would show the card
    // answered while the agent never gets the answer.
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.agent(AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("c1"),
        request: PromptRequest::ExecApproval {
            command: "rm -rf build".into(),
            description: "clean".into(),
            options: vec![],
        },
        ttl_secs: Some(300),
    });
    h.take(phone);
    h.auto_commit = false;
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"once"}));
    assert!(only(h.take(phone), "prompt_done").is_empty(), "not before the commit");
    h.commit();
    let done = only(h.take(phone), "prompt_done");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["option_id"], "once");
    let answered = h
        .take_events()
        .iter()
        .any(|e| matches!(e, AgentEvent::PromptAnswered { .. }));
    assert!(answered);
}

#[test]
fn a_card_answered_just_before_a_sigkill_is_open_again_after_it() {
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.agent(AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("c1"),
        request: PromptRequest::ExecApproval {
            command: "make".into(),
            description: "build".into(),
            options: vec![],
        },
        ttl_secs: Some(300),
    });
    h.take(phone);
    h.auto_commit = false;
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"once"}));
    assert!(only(h.take(phone), "prompt_done").is_empty());
    h.restart(true);
    h.auto_commit = true;
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"once"}));
    assert_eq!(
        only(h.take(phone), "prompt_done").len(),
        1,
        "the card could be answered again"
    );
    let answered = h
        .take_events()
        .iter()
        .any(|e| matches!(e, AgentEvent::PromptAnswered { .. }));
    assert!(answered);
}

#[test]
fn a_repeated_deliver_waits_for_the_first_one_s_commit_and_shares_its_failure() {
    // Issue 24 §2, S4 (review A #4).
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    let (a, b) = (service(&mut h), service(&mut h));
    let d = json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"x"});
    h.send(a, d.clone());
    h.send(b, d.clone());
    h.send(b, d);
    assert!(
        h.take(b).is_empty(),
        "a repeat is not confirmed before the first is kept"
    );
    h.fail_commit();
    let got = h.take(b);
    assert_eq!(got.len(), 1, "answered once: {got:?}");
    assert_eq!(error_of(&got)["code"], "device_offline");
    assert_eq!(error_of(&h.take(a))["code"], "device_offline");
}

#[test]
fn a_repeated_deliver_is_confirmed_with_the_first_once_it_is_kept() {
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    let (a, b) = (service(&mut h), service(&mut h));
    let d = json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"x"});
    h.send(a, d.clone());
    h.send(b, d);
    h.commit();
    for conn in [a, b] {
        let got = only(h.take(conn), "delivered");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["held"], true);
    }
}

#[test]
fn a_delivery_too_big_for_the_hold_as_a_whole_is_refused_and_nothing_of_it_is_kept() {
    // Review A #9: text and file are checked together, before either is kept.
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    let svc = service(&mut h);
    let data = vec![7u8; 8 * 1024 * 1024];
    let d = json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"the report",
        "media":{"kind":"document","mime":"application/octet-stream","filename":"r.bin","data":b64(&data)}});
    h.send(svc, d);
    assert_eq!(error_of(&h.take(svc))["code"], "device_offline");
    let entries = h.journal.as_ref().unwrap().entries(&DeviceId::from("tel-1"));
    assert!(entries.iter().all(|e| !e.held), "nothing held on disk: {entries:?}");
    h.restart(false);
    let (_, frames) = h.connect_frames("tel-1");
    assert!(
        !frames.iter().any(|f| f["t"] == "media" || f["t"] == "message"),
        "refused means not sent: {frames:?}"
    );
}

#[test]
fn a_device_forgotten_past_the_cap_leaves_nothing_held_on_disk() {
    // L32 (review A #6): an evicted device is forgotten with what it held, restarts too.
    let mut h = harness();
    for i in 0..=256 {
        let d = format!("v{i}");
        h.advance_ms(1);
        subscribed_and_gone(&mut h, &d);
        h.agent(reply(&d, "r", "x"));
    }
    let v0 = h.journal.as_ref().unwrap().entries(&DeviceId::from("v0"));
    assert!(v0.iter().all(|e| !e.held), "still held on disk: {v0:?}");
}

#[test]
fn held_output_after_a_restart_goes_to_a_hello_without_resume_only_once_its_seq_is_reserved() {
    // L57 (review A #7): a SIGKILL before the reservation must not hand the same seq out.
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.restart(true);
    h.auto_commit = false;
    h.agent(reply("tel-1", "r1", "one"));
    let (phone, frames) = h.connect_frames("tel-1");
    assert!(only(frames, "message").is_empty(), "not before its seq is on disk");
    h.commit();
    h.commit();
    let s1 = only(h.take(phone), "message")[0]["seq"].as_u64().unwrap();
    h.close(phone);
    h.restart(true);
    h.auto_commit = true;
    h.agent(reply("tel-1", "r2", "two"));
    let (_, f) = h.connect_frames("tel-1");
    let s2 = only(f, "message")[0]["seq"].as_u64().unwrap();
    assert!(s2 > s1, "never a seq twice: {s1} then {s2}");
}

#[test]
fn a_flood_of_forgets_while_the_disk_is_slow_queues_a_bounded_few() {
    // Review A #8, B #5: each `forget` used to queue a record, a waiter, a sweep of the
    // media directory and a log line, without bound while the commit waited.
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.auto_commit = false;
    h.commit();
    for i in 0..1000 {
        h.send(phone, json!({"t":"forget","id":format!("f{i}")}));
    }
    let refused = h.take(phone);
    assert_eq!(refused.len(), 996, "all but four are refused at once");
    assert!(refused
        .iter()
        .all(|f| f["code"] == "internal_error" && f["fatal"] == false));
    h.commit();
    let forgotten = only(h.take(phone), "forgotten");
    assert_eq!(forgotten.len(), 4);
    h.send(phone, json!({"t":"forget","id":"later"}));
    h.commit();
    assert_eq!(
        only(h.take(phone), "forgotten").len(),
        1,
        "one at a time is never refused"
    );
}

#[test]
fn a_flood_of_re_sent_messages_while_the_disk_is_slow_is_confirmed_once() {
    // Review A #8: a duplicate whose `received` is already on its way adds nothing.
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.send(phone, json!({"t":"text","id":"m1","text":"hello"}));
    assert_eq!(only(h.take(phone), "received").len(), 1);
    h.auto_commit = false;
    for _ in 0..1000 {
        h.send(phone, json!({"t":"text","id":"m1","text":"hello"}));
    }
    let pending = h.journal.as_ref().unwrap().pending_records();
    assert!(pending <= 2, "records waiting for the commit: {pending}");
    h.commit();
    assert_eq!(only(h.take(phone), "received").len(), 1);
}

#[test]
fn held_output_the_journal_could_not_keep_is_not_sent_as_well() {
    // Review A #12: the agent hears `not_kept` and sends it again; the first copy must not
    // reach the phone too.
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    h.agent(reply("tel-1", "r1", "the answer"));
    h.fail_commit();
    h.auto_commit = true;
    h.agent(reply("tel-1", "r1", "the answer"));
    let (_, frames) = h.connect_frames("tel-1");
    let n = frames.iter().filter(|f| f["text"] == "the answer").count();
    assert_eq!(n, 1, "{frames:?}");
}

/// tel-1 subscribed and locked its phone; commits wait for `commit()`.
fn gone_with_commits_held() -> Harness {
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    h
}

/// A version of tel-1's reply r1.
fn version(text: &str, done: bool) -> AgentCommand {
    AgentCommand::Reply {
        device: DeviceId::from("tel-1"),
        message: MessageId::from("r1"),
        text: text.into(),
        done,
    }
}

#[test]
fn a_later_version_kept_after_an_earlier_one_failed_stays_held() {
    // Review D #5: version 1's transaction is rolled back, the final version is applied
    // in the next one, which commits; the failure heard after it must not take the final
    // version out of the hold (L45, issue 24 §4).
    let mut h = gone_with_commits_held();
    h.agent(version("v1", false));
    let lost = h
        .journal
        .as_mut()
        .unwrap()
        .crash()
        .expect("version 1 waited for a commit");
    h.agent(version("v1 and the end", true));
    h.gw.handle_journal_failed(h.now, lost);
    h.commit();
    h.auto_commit = true;
    let (_, frames) = h.connect_frames("tel-1");
    let texts: Vec<_> = only(frames, "message").iter().map(|f| f["text"].clone()).collect();
    assert_eq!(texts, ["v1 and the end"]);
}

#[test]
fn a_failed_version_leaves_a_later_final_version_sent_live_finished() {
    // Review E #4: version 1 was held and its commit failed; the phone came back and got
    // the final version live before the failure was heard. Undoing version 1 must not let
    // the agent's re-sent version 1 replace the final reply (M2).
    let mut h = gone_with_commits_held();
    h.agent(version("v1", false));
    let lost = h
        .journal
        .as_mut()
        .unwrap()
        .crash()
        .expect("version 1 waited for a commit");
    let (_phone, _) = h.connect_frames("tel-1");
    h.agent(version("v1 and the end", true));
    h.gw.handle_journal_failed(h.now, lost);
    let again = h.try_agent(version("v1", false));
    assert!(
        matches!(again, Err(hermes_mobile::CommandError::MessageFinished)),
        "{again:?}"
    );
}

#[test]
fn a_held_file_the_journal_could_not_keep_is_not_sent_as_well() {
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    let file = |id: &str| AgentCommand::SendFile {
        device: DeviceId::from("tel-1"),
        file: hermes_mobile::OutgoingFile {
            kind: hermes_mobile::wire::DownloadKind::Document,
            mime: "text/plain".into(),
            filename: format!("{id}.txt"),
            caption: None,
            data: b"report".to_vec(),
            reply_to: None,
        },
    };
    h.agent(file("report"));
    h.fail_commit();
    h.auto_commit = true;
    h.agent(file("report"));
    let (_, frames) = h.connect_frames("tel-1");
    assert_eq!(only(frames, "media").len(), 1);
}

#[test]
fn a_stream_that_stops_is_kept_at_the_version_the_phone_saw_last() {
    // Issue 24 §1 "at its final (or latest) version" (review A #11): a version not kept
    // because it came within a second of the last kept one is kept when its second is up.
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    let version = |text: &str| AgentCommand::Reply {
        device: DeviceId::from("tel-1"),
        message: MessageId::from("r1"),
        text: text.into(),
        done: false,
    };
    h.agent(version("v1"));
    h.advance_ms(500);
    h.agent(version("v1 v2"));
    let seen = only(h.take(phone), "message");
    assert_eq!(seen.last().unwrap()["text"], "v1 v2");
    h.advance_ms(60_000);
    h.take(phone);
    h.send(phone, json!({"t":"history","id":"h1"}));
    let page = only(h.take(phone), "history").remove(0);
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.last().unwrap()["text"], "v1 v2", "{items:?}");
    let after = seen.last().unwrap()["seq"].as_u64().unwrap();
    h.restart(true);
    let (_, frames) = hello_resume(&mut h, "tel-1", after);
    let replayed = only(frames, "message");
    assert_eq!(
        replayed.len(),
        1,
        "the later version is a change after what the phone had"
    );
    assert_eq!(replayed[0]["text"], "v1 v2");
}

#[test]
fn held_output_waiting_for_a_reservation_survives_a_connection_gone_before_it() {
    // L57 (review D #3): a hello without resume while seqs wait leaves the hold in place
    // until the frames may go.
    let mut c = Config::new(TOKEN);
    c.journal = Some(hermes_mobile::journal::JournalConfig {
        history: false,
        ..hermes_mobile::journal::JournalConfig::new()
    });
    c.push = Some(PushConfig::new(VAPID, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    let mut h = Harness::with_journal(c);
    subscribed_and_gone(&mut h, "tel-1");
    h.restart(true);
    h.auto_commit = false;
    h.agent(reply("tel-1", "r1", "held after the restart"));
    let a = h.open();
    h.send(a, json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"}}));
    h.close(a);
    h.auto_commit = true;
    h.commit();
    let (_, frames) = h.connect_frames("tel-1");
    assert!(
        frames.iter().any(|f| f["text"] == "held after the restart"),
        "{frames:?}"
    );
}

#[test]
fn frames_after_a_card_answer_wait_behind_its_prompt_done_so_seqs_leave_in_order() {
    // L61 (review D #7): a live frame made within the answer's commit must not overtake
    // its prompt_done, or a drop in between hides the card's close from the next resume.
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.agent(AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("c1"),
        request: PromptRequest::ExecApproval {
            command: "make".into(),
            description: "build".into(),
            options: vec![],
        },
        ttl_secs: Some(300),
    });
    h.take(phone);
    h.auto_commit = false;
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"once"}));
    h.agent(reply("tel-1", "r9", "other"));
    let early: Vec<u64> = h.take(phone).iter().filter_map(|f| f["seq"].as_u64()).collect();
    assert!(
        early.is_empty(),
        "nothing with a seq before the answer's commit: {early:?}"
    );
    h.commit();
    let frames = h.take(phone);
    let seqs: Vec<u64> = frames.iter().filter_map(|f| f["seq"].as_u64()).collect();
    assert_eq!(frames.iter().find(|f| f["seq"].is_u64()).unwrap()["t"], "prompt_done");
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "in seq order: {seqs:?}");
}

#[test]
fn the_agent_s_repeated_deliver_waits_for_the_first_one_s_commit() {
    // S4, issue 24 §2 (review D #6): the agent's repeat is not confirmed before the first
    // delivery is kept.
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    let d = || AgentCommand::Deliver {
        sender: "a".into(),
        id: "d1".into(),
        target: "mobile:tel-1".into(),
        text: Some("x".into()),
        file: None,
    };
    let first = h.try_agent(d());
    let repeat = h.try_agent(d());
    assert!(matches!(first, Ok(hermes_mobile::Accepted::Kept { .. })), "{first:?}");
    assert!(
        matches!(repeat, Ok(hermes_mobile::Accepted::Kept { .. })),
        "a repeat waits: {repeat:?}"
    );
}
