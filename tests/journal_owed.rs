//! Events owed to the agent (issue 24, L64), on virtual time with the journal in memory: a
//! message, a card's answer or its expiry that the journal promised is handed to the agent
//! after a restart if the agent had not had it, flagged `redelivered`, and never again once
//! it had.
mod common;

use common::*;
use hermes_mobile::{AgentCommand, AgentEvent, Config, DeviceId, PromptId, PromptRequest, Time};
use serde_json::{json, Value};

fn harness() -> Harness {
    Harness::with_journal(Config::new(TOKEN))
}

fn history_off() -> Harness {
    let mut config = Config::new(TOKEN);
    let mut journal = hermes_mobile::journal::JournalConfig::new();
    journal.history = false;
    config.journal = Some(journal);
    Harness::with_journal(config)
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

/// `(id, redelivered)` of each message the agent got.
fn messages(events: &[AgentEvent]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::MessageReceived { id, redelivered, .. } => Some((id.clone(), *redelivered)),
            _ => None,
        })
        .collect()
}

/// A phone sends `id`; the journal commits it and the phone gets `received`, but the
/// gateway is SIGKILLed before the agent takes the event.
fn received_then_killed_before_the_agent(h: &mut Harness, id: &str) {
    let (phone, _) = hello_resume(h, "tel-1", 0);
    h.take_events();
    h.send(phone, json!({"t":"text","id":id,"text":"deploy"}));
    let received = only(h.take(phone), "received");
    assert_eq!(received.len(), 1, "received after the commit");
    h.restart(true); // the event was in the loop's queue, not yet with the agent
}

#[test]
fn a_received_message_the_agent_never_had_reaches_it_after_a_crash() {
    // L64: `received` promised it; the crash came between the commit and the hand-over.
    let mut h = harness();
    received_then_killed_before_the_agent(&mut h, "m1");
    let events = h.take_events();
    assert_eq!(
        messages(&events),
        [("m1".to_owned(), true)],
        "handed over again, flagged"
    );
    let AgentEvent::MessageReceived { text, .. } = &events[0] else {
        panic!()
    };
    assert_eq!(text.as_deref(), Some("deploy"));
    // The re-send of the phone that did not see `received` is a duplicate (I2): not again.
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert_eq!(only(h.take(phone), "received").len(), 1, "received again, same id");
    assert!(messages(&h.take_events()).is_empty());
}

#[test]
fn once_the_agent_had_it_a_restart_hands_over_nothing() {
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert_eq!(messages(&h.take_events()), [("m1".to_owned(), false)]);
    h.restart(true);
    assert!(h.take_events().is_empty(), "its hand-over is on disk");
    h.restart(false);
    assert!(h.take_events().is_empty());
}

#[test]
fn a_redelivered_event_not_taken_comes_again_until_the_agent_has_it() {
    let mut h = harness();
    received_then_killed_before_the_agent(&mut h, "m1");
    h.restart(true); // killed again before the agent took the redelivery
    assert_eq!(messages(&h.take_events()), [("m1".to_owned(), true)]);
    h.restart(true);
    assert!(h.take_events().is_empty(), "exactly once after it was taken");
}

#[test]
fn owed_events_keep_their_order() {
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    for id in ["a", "b", "c"] {
        h.send(phone, json!({"t":"text","id":id,"text":id}));
    }
    h.restart(true);
    let ids: Vec<String> = messages(&h.take_events()).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[test]
fn with_history_off_the_message_is_still_owed() {
    // L62: history off keeps what is promised and not yet done.
    let mut h = history_off();
    received_then_killed_before_the_agent(&mut h, "m1");
    assert_eq!(messages(&h.take_events()), [("m1".to_owned(), true)]);
}

#[test]
fn a_voice_note_comes_back_with_its_bytes() {
    let mut h = harness();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.send(phone, json!({"t":"audio","id":"v1","format":"ogg","data":"T2dnUw=="}));
    h.restart(true);
    let events = h.take_events();
    let [AgentEvent::MessageReceived {
        audio: Some(audio),
        redelivered: true,
        ..
    }] = &events[..]
    else {
        panic!("{events:?}")
    };
    assert_eq!(audio.data, b"OggS");
}

#[test]
fn a_card_answer_closed_on_disk_reaches_the_agent_after_a_crash() {
    // The phone saw prompt_done: the answer is owed to the agent, which waits for it.
    let mut h = harness();
    let phone = h.connect("tel-1");
    h.agent(card("tel-1", "c1", 300));
    h.take(phone);
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"once"}));
    assert_eq!(only(h.take(phone), "prompt_done").len(), 1);
    h.restart(true);
    let events = h.take_events();
    assert!(
        matches!(&events[..], [AgentEvent::PromptAnswered { option_id, asked, .. }]
            if option_id == "once" && asked == "rm -rf build"),
        "{events:?}"
    );
    h.restart(true);
    assert!(h.take_events().is_empty());
}

#[test]
fn a_card_expiry_is_owed_too() {
    let mut h = harness();
    h.connect("tel-1");
    h.agent(card("tel-1", "c1", 60));
    h.advance_to(Time::from_secs(61));
    h.restart(true);
    let events = h.take_events();
    assert!(
        matches!(&events[..], [AgentEvent::PromptExpired { option_id: Some(o), .. }] if o == "deny"),
        "{events:?}"
    );
}

#[test]
fn messages_waiting_for_a_stalled_disk_are_bounded_and_refused_not_lost() {
    // M6: an SD card whose fsync stalls must not let accepted messages pile up in memory.
    let mut h = harness();
    h.auto_commit = false;
    h.commit();
    let (phone, _) = hello_resume(&mut h, "tel-1", 0);
    h.commit();
    h.take(phone);
    let voice = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![7u8; 7 << 20]);
    let send = |h: &mut Harness, id: &str| {
        h.send(phone, json!({"t":"audio","id":id,"format":"ogg","data":voice}));
        h.take(phone)
    };
    for i in 0..4 {
        let frames = send(&mut h, &format!("v{i}"));
        assert!(only(frames, "error").is_empty(), "28 MiB wait for the disk");
    }
    let frames = send(&mut h, "v4");
    let error = error_of(&frames);
    assert_eq!(
        (&error["code"], &error["id"], &error["fatal"]),
        (&json!("internal_error"), &json!("v4"), &json!(false))
    );
    h.commit(); // the disk catches up
    assert_eq!(h.take_events().len(), 4);
    assert_eq!(only(h.take(phone), "received").len(), 4);
    let frames = send(&mut h, "v4");
    h.commit();
    let mut frames = frames;
    frames.extend(h.take(phone));
    assert_eq!(only(frames, "received")[0]["id"], "v4", "sent again, kept");
}
