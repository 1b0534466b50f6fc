//! The journal in the core (issue 24, docs/decisions-local.md L56–L62), on virtual time with
//! the journal in memory: what is kept, what a restart (clean or SIGKILL) restores, `seq`,
//! `resume`, `received`, `history` and `forget`.
mod common;

use common::*;
use hermes_mobile::push::{AllowList, PushConfig};
use hermes_mobile::{AgentCommand, AgentEvent, Config, DeviceId, MessageId, PromptId, PromptRequest, Time};
use serde_json::{json, Value};

const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const VAPID: &str = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";
const SERVICE: &str = "cron-token-0123456789";

fn config() -> Config {
    let mut c = Config::new(TOKEN);
    c.deliver_tokens = vec![SERVICE.into()];
    c.push = Some(PushConfig::new(VAPID, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    c
}

fn harness() -> Harness {
    Harness::with_journal(config())
}

fn reply(device: &str, id: &str, text: &str, done: bool) -> AgentCommand {
    AgentCommand::Reply {
        device: DeviceId::from(device),
        message: MessageId::from(id),
        text: text.into(),
        done,
    }
}

fn card(device: &str, prompt: &str, ttl: u64) -> AgentCommand {
    AgentCommand::OpenPrompt {
        device: DeviceId::from(device),
        prompt: PromptId::from(prompt),
        request: PromptRequest::ExecApproval {
            command: "rm -rf build".into(),
            description: "clean".into(),
            options: vec![],
        },
        ttl_secs: Some(ttl),
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

/// A phone that subscribed to push and locked its screen.
fn subscribed_and_gone(h: &mut Harness, device: &str) {
    let phone = h.connect(device);
    let sub = json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"https://127.0.0.1:8443/p","keys":{"p256dh":KEY,"auth":AUTH}}});
    h.send(phone, sub);
    h.take(phone);
    h.close(phone);
}

fn received_ids(h: &mut Harness) -> Vec<String> {
    h.take_events()
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::MessageReceived { id, .. } => Some(id),
            _ => None,
        })
        .collect()
}

#[test]
fn ready_says_the_seq_and_history_and_frames_carry_seqs() {
    // L56: ready.seq is 0 for a device with no entries; capabilities.history says the bounds.
    let mut h = harness();
    let (phone, frames) = h.connect_frames("tel-1");
    assert_eq!(frames[0]["seq"], 0);
    assert_eq!(frames[0]["capabilities"]["history"], json!({"items":5000,"days":30}));
    h.agent(reply("tel-1", "r1", "first", false));
    h.agent(reply("tel-1", "r1", "first and last", true));
    let messages = only(h.take(phone), "message");
    let seqs: Vec<u64> = messages.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert!(seqs[0] >= 1 && seqs[1] > seqs[0], "{seqs:?}");
    let (_, again) = h.connect_frames("tel-1");
    assert_eq!(again[0]["seq"], seqs[1], "ready.seq is the latest");
}

#[test]
fn without_a_journal_nothing_changes() {
    let mut h = Harness::with_config(config());
    let (phone, frames) = h.connect_frames("tel-1");
    assert!(frames[0].get("seq").is_none());
    assert!(frames[0]["capabilities"].get("history").is_none());
    h.agent(reply("tel-1", "r1", "hi", true));
    assert!(h.take(phone)[0].get("seq").is_none());
}

#[test]
fn received_waits_for_the_commit_and_repeats_with_the_same_seq() {
    // L58: `received` only once the message is on disk; a re-send gets it again, same seq.
    let mut h = harness();
    h.auto_commit = false;
    h.commit();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.commit();
    h.take(phone);
    h.send(phone, json!({"t":"text","id":"m1","text":"hello"}));
    assert!(only(h.take(phone), "received").is_empty(), "not before the commit");
    h.commit();
    let received = only(h.take(phone), "received");
    assert_eq!(received.len(), 1);
    let seq = received[0]["seq"].clone();
    h.send(phone, json!({"t":"text","id":"m1","text":"hello"}));
    h.commit();
    assert_eq!(
        only(h.take(phone), "received"),
        vec![json!({"t":"received","id":"m1","seq":seq})]
    );
    assert_eq!(received_ids(&mut h), vec!["m1"], "I2: the agent got it once");
}

#[test]
fn a_client_without_resume_gets_no_new_frames() {
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"text","id":"m1","text":"hello"}));
    let types = Harness::types(&h.take(phone));
    assert!(!types.contains(&"received".to_owned()), "{types:?}");
}

#[test]
fn the_dedup_window_survives_a_sigkill() {
    // I2 across a restart: a re-send within 600 s never reaches the agent twice.
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"text","id":"m1","text":"rm it"}));
    assert_eq!(received_ids(&mut h), vec!["m1"]);
    h.restart(true);
    h.advance_ms(300_000);
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"text","id":"m1","text":"rm it"}));
    assert!(received_ids(&mut h).is_empty(), "dropped after the restart");
    h.advance_ms(301_000);
    h.send(phone, json!({"t":"text","id":"m1","text":"rm it"}));
    assert_eq!(received_ids(&mut h), vec!["m1"], "after the window it is new");
}

#[test]
fn a_held_reply_survives_a_sigkill_and_goes_after_ready() {
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.close(phone);
    h.agent(reply("tel-1", "r1", "the answer", true));
    h.restart(true);
    let (_, frames) = h.connect_frames("tel-1");
    let messages = only(frames, "message");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["text"], "the answer");
    assert!(messages[0]["seq"].as_u64().unwrap() >= 1);
    let (_, again) = h.connect_frames("tel-1");
    assert!(only(again, "message").is_empty(), "sent once");
}

#[test]
fn a_reply_not_committed_before_a_sigkill_is_lost_but_its_seq_is_never_reused() {
    // L57: a frame's seq is reserved on disk before it is sent.
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.auto_commit = false;
    h.agent(reply("tel-1", "r1", "seen", true));
    let seen = h.take(phone)[0]["seq"].as_u64().unwrap();
    h.restart(true);
    h.auto_commit = true;
    let phone = h.connect("tel-1");
    h.agent(reply("tel-1", "r2", "after", true));
    let after = h.take(phone)[0]["seq"].as_u64().unwrap();
    assert!(after > seen, "{after} > {seen}");
}

#[test]
fn a_held_deliver_is_confirmed_only_after_its_commit_and_survives() {
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    let cron = h.open();
    h.send(cron, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    h.take(cron);
    h.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"backup done"}),
    );
    assert!(h.take(cron).is_empty(), "not before the commit");
    h.commit();
    assert_eq!(
        h.take(cron),
        vec![json!({"t":"delivered","id":"d1","device":"tel-1","held":true})]
    );
    h.restart(true);
    h.auto_commit = true;
    let (_, frames) = h.connect_frames("tel-1");
    let messages = only(frames, "message");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["text"], "backup done");
}

#[test]
fn a_deliver_whose_commit_failed_is_refused_so_cron_retries() {
    let mut h = harness();
    subscribed_and_gone(&mut h, "tel-1");
    h.auto_commit = false;
    h.commit();
    let cron = h.open();
    h.send(cron, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    h.take(cron);
    h.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"x"}),
    );
    h.fail_commit();
    let frames = h.take(cron);
    assert_eq!(error_of(&frames)["code"], "device_offline");
    assert_eq!(h.gw.stats().held_bytes, 0, "nothing held that was not kept");
}

#[test]
fn an_open_card_survives_a_restart_with_its_time_left_and_expires_on_time() {
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.agent(card("tel-1", "c1", 300));
    let opened = h.take(phone);
    assert_eq!(opened[0]["t"], "prompt");
    h.close(phone);
    h.advance_ms(100_000);
    h.restart(true);
    let (_, frames) = h.connect_frames("tel-1");
    let prompts = only(frames, "prompt");
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0]["timeout_seconds"], 200);
    assert_eq!(prompts[0]["command"], "rm -rf build");
    h.take_events();
    h.advance_ms(200_000);
    let expired = h.take_events();
    assert!(
        expired.iter().any(|e| matches!(e, AgentEvent::PromptExpired { .. })),
        "{expired:?}"
    );
}

#[test]
fn an_answer_after_a_restart_reaches_the_agent() {
    let mut h = harness();
    h.connect("tel-1");
    h.agent(card("tel-1", "c1", 300));
    h.restart(false);
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"once"}));
    let done = only(h.take(phone), "prompt_done");
    assert_eq!(done[0]["option_id"], "once");
    assert!(done[0]["seq"].as_u64().is_some());
    let events = h.take_events();
    assert!(events
        .iter()
        .any(|e| matches!(e, AgentEvent::PromptAnswered { option_id, .. } if option_id == "once")));
}

#[test]
fn resume_replays_what_changed_after_the_seq_then_says_resumed() {
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.agent(reply("tel-1", "r1", "one", true));
    let first = h.take(phone)[0]["seq"].as_u64().unwrap();
    h.agent(reply("tel-1", "r2", "two", true));
    h.agent(card("tel-1", "c1", 300));
    h.close(phone);
    h.agent(reply("tel-1", "r3", "three", true));
    let (_, frames) = hello_resume(&mut h, "tel-1", first);
    let types = Harness::types(&frames);
    assert_eq!(
        types,
        ["ready", "message", "prompt", "message", "resumed"],
        "{frames:?}"
    );
    assert_eq!(frames[1]["text"], "two");
    assert_eq!(frames[3]["text"], "three");
    let last = frames[3]["seq"].as_u64().unwrap();
    assert_eq!(frames[4], json!({"t":"resumed","seq":last}));
    assert_eq!(frames[0]["seq"], last);
    // Nothing twice: a resume after the latest replays nothing.
    let (_, again) = hello_resume(&mut h, "tel-1", last);
    assert_eq!(Harness::types(&again), ["ready", "resumed"]);
}

#[test]
fn a_card_closed_since_comes_as_prompt_then_prompt_done() {
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.agent(card("tel-1", "c1", 300));
    h.take(phone);
    h.close(phone);
    h.advance_ms(301_000);
    let (_, frames) = hello_resume(&mut h, "tel-1", 0);
    assert_eq!(Harness::types(&frames), ["ready", "prompt", "prompt_done", "resumed"]);
    assert!(frames[2]["seq"].as_u64() > frames[1]["seq"].as_u64());
    assert_eq!(frames[2]["expired"], true);
}

#[test]
fn history_pages_back_oldest_first() {
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"text","id":"u1","text":"question"}));
    for i in 0..5 {
        h.agent(reply("tel-1", &format!("r{i}"), &format!("answer {i}"), true));
    }
    h.take(phone);
    h.send(phone, json!({"t":"history","id":"h1","limit":3}));
    let page = h.take(phone).remove(0);
    assert_eq!(page["t"], "history");
    assert_eq!(page["more"], true);
    let items = page["items"].as_array().unwrap();
    let texts: Vec<&str> = items.iter().map(|i| i["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["answer 2", "answer 3", "answer 4"]);
    let before = items[0]["seq"].as_u64().unwrap();
    h.send(phone, json!({"t":"history","id":"h2","before":before}));
    let page = h.take(phone).remove(0);
    assert_eq!(page["more"], false);
    let items = page["items"].as_array().unwrap();
    assert_eq!(
        items[0],
        json!({"t":"text","from":"user","id":"u1","text":"question","seq":items[0]["seq"]})
    );
    assert_eq!(items.len(), 3);
}

#[test]
fn with_history_off_history_is_refused_but_resume_works_on_what_is_kept() {
    let mut c = config();
    c.journal = Some(hermes_mobile::journal::JournalConfig {
        history: false,
        ..Default::default()
    });
    let mut h = Harness::with_journal(c);
    let (phone, frames) = h.connect_frames("tel-1");
    assert!(frames[0]["capabilities"].get("history").is_none());
    h.send(phone, json!({"t":"history","id":"h1"}));
    let frames = h.take(phone);
    assert_eq!(error_of(&frames)["code"], "unsupported_frame");
    assert_eq!(error_of(&frames)["fatal"], false);
    h.agent(reply("tel-1", "r1", "delivered live", true));
    let seen = h.take(phone)[0]["seq"].as_u64().unwrap();
    h.close(phone);
    h.agent(reply("tel-1", "r2", "held", true));
    h.restart(true);
    let (_, frames) = hello_resume(&mut h, "tel-1", seen);
    assert_eq!(Harness::types(&frames), ["ready", "message", "resumed"]);
    assert_eq!(frames[1]["text"], "held");
}

#[test]
fn forget_drops_the_journal_but_keeps_open_cards_and_the_seq() {
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.agent(reply("tel-1", "r1", "secret", true));
    h.agent(card("tel-1", "c1", 300));
    let latest = only(h.take(phone), "prompt")[0]["seq"].as_u64().unwrap();
    h.send(phone, json!({"t":"forget","id":"f1"}));
    assert_eq!(h.take(phone), vec![json!({"t":"forgotten","id":"f1"})]);
    h.send(phone, json!({"t":"history","id":"h1"}));
    let page = h.take(phone).remove(0);
    let items = page["items"].as_array().unwrap();
    assert_eq!(Harness::types(items), ["prompt"], "the open card stays");
    h.agent(reply("tel-1", "r2", "new", true));
    assert!(h.take(phone)[0]["seq"].as_u64().unwrap() > latest, "the seq goes on");
}

#[test]
fn live_frames_wait_for_a_new_device_s_first_reservation_only() {
    // L57: a brand-new device's first frames wait for its first block to be on disk.
    let mut h = harness();
    h.auto_commit = false;
    let phone = h.open();
    h.hello(phone, "tel-1");
    assert_eq!(Harness::types(&h.take(phone)), ["ready"]);
    h.agent(reply("tel-1", "r1", "hi", true));
    assert!(h.take(phone).is_empty(), "held back until the reservation is on disk");
    h.commit();
    assert_eq!(Harness::types(&h.take(phone)), ["message", "avatar"]);
    h.agent(reply("tel-1", "r2", "again", true));
    assert_eq!(Harness::types(&h.take(phone)), ["message"], "no wait once reserved");
    let _ = Time::ZERO;
}

#[test]
fn a_message_reaches_the_agent_only_after_its_commit_so_never_twice() {
    // L58: a crash between the agent acting and the id being on disk would make a re-send
    // act twice; the agent gets it only once its id is kept.
    let mut h = harness();
    h.auto_commit = false;
    h.commit();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.commit();
    h.take_events();
    h.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    h.send(phone, json!({"t":"typing"}));
    assert!(h.take_events().is_empty(), "nothing before the commit, in order");
    h.restart(true);
    h.auto_commit = true;
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert_eq!(
        received_ids(&mut h),
        vec!["m1"],
        "the re-send after the crash is the one"
    );
    h.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert!(received_ids(&mut h).is_empty());
}

#[test]
fn a_failed_reservation_is_asked_again_once_not_in_a_loop() {
    // Found by the fuzzer: a failure up to "every ticket" re-failed its own retry forever.
    let mut h = harness();
    h.auto_commit = false;
    let phone = h.open();
    h.hello(phone, "tel-1");
    h.take(phone);
    h.fail_commit();
    h.agent(reply("tel-1", "r1", "after the failure", true));
    assert!(h.take(phone).is_empty(), "the frame waits for the new reservation");
    h.commit();
    assert_eq!(only(h.take(phone), "message")[0]["text"], "after the failure");
}

#[test]
fn frames_waiting_behind_a_stalled_journal_are_bounded() {
    // A disk that stalls (an SD card's fsync) must not let frames grow without bound: past
    // 4 MiB the connection is closed with 1013 and resumes later; output goes to the hold.
    let mut h = harness();
    h.auto_commit = false;
    let phone = h.open();
    h.hello(phone, "tel-1");
    h.take(phone);
    let big = "x".repeat(1024 * 1024);
    for i in 0..5 {
        let _ = h.try_agent(reply("tel-1", &format!("r{i}"), &big, true));
    }
    assert_eq!(h.closed.get(&phone).map(|c| c.0), Some(1013));
    assert!(h.take(phone).is_empty(), "what waited is dropped, not flushed");
    h.commit();
    let (_, frames) = hello_resume(&mut h, "tel-1", 0);
    h.commit();
    let _ = frames;
    let (_, frames) = hello_resume(&mut h, "tel-1", 0);
    assert_eq!(
        only(frames, "message").len(),
        5 * 300,
        "every reply is kept and resumed"
    );
}

#[test]
fn output_held_for_an_offline_device_is_accepted_only_once_kept() {
    // The crash test found an agent told ok ~20 ms before the reply it held reached the
    // disk: its confirmation now names the commit it waits for.
    let mut h = harness();
    let phone = h.connect("tel-1");
    let live = h.try_agent(reply("tel-1", "r1", "live", true)).unwrap();
    assert_eq!(live, hermes_mobile::Accepted::Done, "live output promises nothing more");
    h.close(phone);
    h.auto_commit = false;
    let held = h.try_agent(reply("tel-1", "r2", "held", true)).unwrap();
    let hermes_mobile::Accepted::Kept { ticket, then } = held else {
        panic!("{held:?}")
    };
    assert_eq!(*then, hermes_mobile::Accepted::Done);
    assert!(ticket > 0);
}

#[test]
fn history_pages_a_connection_waits_for_are_bounded() {
    // A peer cannot queue reads on the journal's thread without bound.
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.held_reads = Some(Vec::new());
    for i in 0..6 {
        h.send(phone, json!({"t":"history","id":format!("h{i}")}));
    }
    let frames = h.take(phone);
    let errors: Vec<&Value> = frames.iter().filter(|f| f["t"] == "error").collect();
    assert_eq!(errors.len(), 2, "{frames:?}");
    assert_eq!(
        (errors[0]["id"].as_str(), errors[0]["fatal"].as_bool()),
        (Some("h4"), Some(false))
    );
    assert_eq!(h.held_reads.as_ref().unwrap().len(), 4);
}

#[test]
fn a_card_id_reused_for_another_device_is_never_shown_to_the_first() {
    // Found in review: card ids are the agent's; the replay and history looked them up
    // without the device, so tel-1 saw tel-2's card.
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.agent(card("tel-1", "c1", 300));
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"deny"}));
    h.advance_ms(700_000); // past P4's window: the id may be used again
    h.agent(AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-2"),
        prompt: PromptId::from("c1"),
        request: PromptRequest::ExecApproval {
            command: "cat /secret/of/tel-2".into(),
            description: String::new(),
            options: vec![],
        },
        ttl_secs: Some(300),
    });
    h.take(phone);
    h.send(phone, json!({"t":"history","id":"h1"}));
    let page = h.take(phone).remove(0);
    let text = page.to_string();
    assert!(!text.contains("secret"), "{text}");
    let (_, frames) = hello_resume(&mut h, "tel-1", 0);
    let text = serde_json::to_string(&frames).unwrap();
    assert!(!text.contains("secret"), "{text}");
    assert!(
        frames.iter().any(|f| f["t"] == "prompt_done"),
        "its own card closed: {frames:?}"
    );
}

#[test]
fn every_held_version_of_a_streamed_reply_is_kept() {
    // Found in review: a version held within a second of the last kept one was told
    // Kept but not written.
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.agent(reply("tel-1", "r1", "first", false));
    h.close(phone);
    h.agent(reply("tel-1", "r1", "first and held", false));
    h.restart(true);
    let (_, frames) = h.connect_frames("tel-1");
    assert_eq!(only(frames, "message")[0]["text"], "first and held");
}

#[test]
fn a_card_restored_under_a_clock_that_went_back_is_open_no_longer_than_any_card() {
    // A Pi with no RTC may start before NTP with its clock days behind.
    let mut h = harness();
    h.advance_to(Time::from_secs(10 * 24 * 3600));
    h.connect("tel-1");
    h.agent(card("tel-1", "c1", 300));
    h.now = Time::ZERO;
    h.restart(false);
    let (_, frames) = h.connect_frames("tel-1");
    let prompts = only(frames, "prompt");
    let left = prompts[0]["timeout_seconds"].as_u64().unwrap();
    assert!(left <= 24 * 3600, "clamped to the longest TTL: {left}");
}
