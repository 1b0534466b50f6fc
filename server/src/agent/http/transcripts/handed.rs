//! When the HTTP agent is done with an owed event (L64, review B #1): a message once the
//! turn that answers it has ended, or once it is dropped for good; a card's answer or
//! expiry once it is applied. Until then the journal keeps it for a restart. Driven by the
//! transcripts' scripts; what is asserted is the keys handed, in order.

use hermes_mobile::agent::{Audio, PromptKind, UserInfo};
use hermes_mobile::wire::client::AudioFormat;

use super::*;

#[test]
fn a_message_waiting_behind_a_turn_is_handed_when_its_own_turn_ends() {
    let mut s = Script::openai();
    s.start_turn("first");
    s.text("second");
    s.delta("One.");
    assert!(s.handed.is_empty(), "m1's turn runs and m2 waits: {:?}", s.handed);
    s.body("data: [DONE]\n\n");
    assert_eq!(s.handed, ["m:m1"], "m1's final reply is out; m2's turn starts");
    s.sse_head();
    s.delta("Two.");
    assert_eq!(s.handed, ["m:m1"]);
    s.body("data: [DONE]\n\n");
    assert_eq!(s.handed, ["m:m1", "m:m2"]);
}

#[test]
fn a_turn_that_fails_or_is_cut_hands_its_message_with_its_note() {
    let mut s = Script::openai();
    s.text("hello");
    s.no_conversation();
    for wait in [1000, 2000] {
        s.failed(CallError::Connect("connection refused".into()));
        assert!(s.handed.is_empty(), "a retry is due");
        s.advance(wait);
    }
    s.failed(CallError::Connect("connection refused".into()));
    assert_eq!(s.handed, ["m:m1"], "the turn ended with its sentence");

    let mut s = Script::openai();
    s.start_turn("tell me a story");
    s.delta("Once upon");
    s.failed(CallError::Timeout("idle"));
    assert_eq!(s.handed, ["m:m1"], "cut, its partial answer kept");

    let mut s = Script::openai();
    s.start_turn("take your time");
    s.advance(30 * 60 * 1000 - 1);
    assert!(s.handed.is_empty());
    s.advance(1);
    assert_eq!(s.handed, ["m:m1"], "stopped after 30 minutes");
}

#[test]
fn messages_dropped_for_good_are_handed_at_once() {
    let mut s = Script::openai();
    s.start_turn("first");
    for i in 0..8 {
        s.text(&format!("more {i}"));
    }
    assert!(s.handed.is_empty(), "m2 to m9 wait in the inbox");
    s.text("one too many");
    assert_eq!(s.handed, ["m:m10"], "refused with a note: the inbox is full");
    s.handed.clear();
    s.text("/stop");
    let waiting: Vec<String> = (2..10).map(|i| format!("m:m{i}")).collect();
    let stopped = [waiting, vec!["m:m1".into(), "m:m11".into()]].concat();
    assert_eq!(
        s.handed, stopped,
        "the waiting ones dropped, the turn stopped, /stop done"
    );
    s.handed.clear();
    s.text("/new");
    assert_eq!(s.handed, ["m:m12"]);
    s.handed.clear();
    let voice = AgentEvent::MessageReceived {
        device: device(),
        id: "v1".into(),
        user: UserInfo::default(),
        text: None,
        audio: Some(Audio {
            format: AudioFormat::Ogg,
            data: vec![0; 16],
            media_name: None,
        }),
        file: None,
        redelivered: false,
    };
    s.event("a voice note without text", voice);
    assert_eq!(s.handed, ["m:v1"], "answered with a note: no speech-to-text");
}

#[test]
fn a_cards_expiry_is_handed_when_applied_and_its_message_when_the_run_ends() {
    let mut s = Script::hermes();
    let events = s.start_run("clean up", "run_9");
    s.run_event(serde_json::json!({
        "event": "approval.request", "command": "rm -rf /tmp/x", "description": "",
        "choices": ["once", "session", "always", "deny"]
    }));
    let expired = AgentEvent::PromptExpired {
        device: device(),
        prompt: PromptId("approval-1234-2".into()),
        kind: PromptKind::ExecApproval,
        option_id: Some("deny".into()),
        asked: "rm -rf /tmp/x".into(),
    };
    s.event("card expired", expired);
    assert_eq!(
        s.handed,
        ["p:approval-1234-2"],
        "its deny is posted: nothing of it waits"
    );
    s.last_call = events;
    s.run_event(serde_json::json!({"event": "run.failed", "error": "denied"}));
    assert_eq!(s.handed, ["p:approval-1234-2", "m:m1"]);
}
