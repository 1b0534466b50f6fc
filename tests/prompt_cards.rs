//! decisions P1–P6: cards, answers, expiry, offline devices.
mod common;
use common::*;
use hermes_mobile::{AgentCommand, AgentEvent, CommandError, DeviceId, PromptId, PromptKind, PromptRequest, Time};
use serde_json::json;

fn exec(prompt: &str, device: &str, ttl: Option<u64>) -> AgentCommand {
    AgentCommand::OpenPrompt {
        device: DeviceId::from(device),
        prompt: PromptId::from(prompt),
        request: PromptRequest::ExecApproval {
            command: "rm -rf /tmp/cache".into(),
            description: "clears the cache".into(),
            options: vec![],
        },
        ttl_secs: ttl,
    }
}

fn clarify(prompt: &str, device: &str) -> AgentCommand {
    AgentCommand::OpenPrompt {
        device: DeviceId::from(device),
        prompt: PromptId::from(prompt),
        request: PromptRequest::Clarify {
            question: "Which one?".into(),
            choices: vec!["red".into(), "blue".into()],
        },
        ttl_secs: None,
    }
}

fn answered(events: &[AgentEvent]) -> (String, Option<String>, Option<String>) {
    match events {
        [AgentEvent::PromptAnswered {
            option_id, label, text, ..
        }] => (option_id.clone(), label.clone(), text.clone()),
        e => panic!("{e:?}"),
    }
}

#[test]
fn exec_approval_card_shows_command_and_description() {
    // decisions P1, P6
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", None));
    let frames = h.take(conn);
    assert_eq!(
        frames[0],
        json!({"t":"prompt","id":"p1","kind":"exec_approval","text":"Run this command?",
            "options":[{"id":"once","label":"Once","style":"primary"},{"id":"session","label":"This session","style":""},
                       {"id":"always","label":"Always","style":""},{"id":"deny","label":"Deny","style":"danger"}],
            "command":"rm -rf /tmp/cache","description":"clears the cache","session":"mobile:tel-1","timeout_seconds":300})
    );
}

#[test]
fn answer_closes_the_card_and_tells_the_agent() {
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", None));
    h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"p1","option_id":"ALWAYS"}));
    assert_eq!(
        h.take(conn),
        vec![json!({"t":"prompt_done","id":"p1","option_id":"always"})]
    );
    assert_eq!(answered(&h.take_events()).0, "always");
}

#[test]
fn forged_options_become_the_safe_default() {
    // decisions P2: outside the options offered *on that card*
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("p1"),
        request: PromptRequest::ExecApproval {
            command: "ls".into(),
            description: "".into(),
            options: vec!["once".into(), "deny".into()],
        },
        ttl_secs: None,
    });
    h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"p1","option_id":"always"}));
    assert_eq!(h.take(conn)[0], json!({"t":"prompt_done","id":"p1","option_id":"deny"}));

    h.agent(AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("p2"),
        request: PromptRequest::SlashConfirm {
            text: "/reset".into(),
            options: vec![],
        },
        ttl_secs: None,
    });
    h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"p2","option_id":"sudo"}));
    assert_eq!(
        h.take(conn)[0],
        json!({"t":"prompt_done","id":"p2","option_id":"cancel"})
    );
}

#[test]
fn text_alone_counts_as_an_option_id_if_it_is_one() {
    // decisions P2
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", None));
    h.agent(exec("p2", "tel-1", None));
    h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"p1","text":"Once"}));
    assert_eq!(h.take(conn)[0]["option_id"], "once");
    h.send(conn, json!({"t":"prompt","prompt_id":"p2","text":"yes please"}));
    assert_eq!(h.take(conn)[0]["option_id"], "deny");
    // A non-empty option_id wins over text.
    h.agent(exec("p3", "tel-1", None));
    h.take(conn);
    h.send(
        conn,
        json!({"t":"prompt","prompt_id":"p3","option_id":"session","text":"always"}),
    );
    assert_eq!(h.take(conn)[0]["option_id"], "session");
}

#[test]
fn clarify_offers_choices_then_other() {
    // decisions P3, P6
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(clarify("q1", "tel-1"));
    let card = &h.take(conn)[0];
    assert_eq!(
        card["options"],
        json!([{"id":"c0","label":"red","style":""},{"id":"c1","label":"blue","style":""},{"id":"other","label":"Other…","style":""}])
    );
    assert!(card.get("command").is_none());
}

#[test]
fn clarify_in_range_choice_wins() {
    // decisions P3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(clarify("q1", "tel-1"));
    h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"q1","option_id":"c1"}));
    assert_eq!(h.take(conn)[0], json!({"t":"prompt_done","id":"q1","option_id":"c1"}));
    assert_eq!(answered(&h.take_events()), ("c1".into(), Some("blue".into()), None));
}

#[test]
fn clarify_other_unknown_or_out_of_range_with_text_is_other() {
    // decisions P3
    for option in ["other", "c7", "purple", ""] {
        let mut h = Harness::new();
        let conn = h.connect("tel-1");
        h.agent(clarify("q1", "tel-1"));
        h.take(conn);
        h.send(
            conn,
            json!({"t":"prompt","prompt_id":"q1","option_id":option,"text":"green"}),
        );
        assert_eq!(
            h.take(conn)[0],
            json!({"t":"prompt_done","id":"q1","option_id":"other"}),
            "{option}"
        );
        assert_eq!(answered(&h.take_events()), ("other".into(), None, Some("green".into())));
    }
}

#[test]
fn clarify_without_text_is_bad_frame_and_the_card_stays_open() {
    // decisions P3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(clarify("q1", "tel-1"));
    h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"q1","option_id":"other"}));
    let frames = h.take(conn);
    let err = error_of(&frames);
    assert_eq!(
        (err["code"].as_str(), err["message"].as_str()),
        (Some("bad_frame"), Some("clarify needs text"))
    );
    assert_eq!(err["fatal"], false);
    h.send(conn, json!({"t":"prompt","prompt_id":"q1","option_id":"c0"}));
    assert_eq!(h.take(conn)[0]["option_id"], "c0");
}

#[test]
fn empty_answer_is_bad_frame() {
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"prompt","prompt_id":"q1","option_id":"","text":""}));
    let err = error_of(&h.take(conn)).clone();
    assert_eq!(err["code"], "bad_frame");
    // decisions L10 (issue 8 #6): the error carries the answer's prompt_id as its id.
    assert_eq!(err["id"], "q1");
}

#[test]
fn unknown_card_gets_prompt_done_expired() {
    // decisions P4
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"prompt","prompt_id":"nope","option_id":"once"}));
    assert_eq!(
        h.take(conn),
        vec![json!({"t":"prompt_done","id":"nope","expired":true})]
    );
    assert!(!h.closed.contains_key(&conn));
}

#[test]
fn another_devices_card_is_forbidden_and_stays_open() {
    // decisions P4
    let mut h = Harness::new();
    let owner = h.connect("tel-1");
    let other = h.connect("tel-2");
    h.agent(exec("p1", "tel-1", None));
    h.take(owner);
    h.send(other, json!({"t":"prompt","prompt_id":"p1","option_id":"once"}));
    let frames = h.take(other);
    assert_eq!(
        (error_of(&frames)["code"].as_str(), error_of(&frames)["fatal"].as_bool()),
        (Some("forbidden"), Some(false))
    );
    h.send(owner, json!({"t":"prompt","prompt_id":"p1","option_id":"once"}));
    assert_eq!(h.take(owner)[0]["option_id"], "once");
}

#[test]
fn repeated_answer_gets_the_same_prompt_done() {
    // decisions P4
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", None));
    h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"p1","option_id":"bogus"}));
    let first = h.take(conn);
    h.send(conn, json!({"t":"prompt","prompt_id":"p1","option_id":"once"}));
    assert_eq!(h.take(conn), first, "the applied option, not the new one");
    assert_eq!(h.take_events().len(), 1, "the agent hears once");
}

#[test]
fn expiry_sends_the_safe_default_and_tells_the_agent() {
    // decisions P5
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", Some(30)));
    h.take(conn);
    h.advance_to(Time::from_millis(29_999));
    assert!(only(h.take(conn), "prompt_done").is_empty());
    h.advance_to(Time::from_secs(30));
    assert_eq!(
        h.take(conn),
        vec![json!({"t":"prompt_done","id":"p1","option_id":"deny","expired":true})]
    );
    assert_eq!(
        h.take_events(),
        vec![AgentEvent::PromptExpired {
            device: DeviceId::from("tel-1"),
            prompt: PromptId::from("p1"),
            kind: PromptKind::ExecApproval,
            option_id: Some("deny".into()),
            asked: "rm -rf /tmp/cache".into(),
        }]
    );
    // An answer after expiry gets the same closed card back.
    h.send(conn, json!({"t":"prompt","prompt_id":"p1","option_id":"once"}));
    assert_eq!(
        h.take(conn),
        vec![json!({"t":"prompt_done","id":"p1","option_id":"deny","expired":true})]
    );
}

#[test]
fn clarify_expiry_has_no_default_option() {
    // decisions P5
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(clarify("q1", "tel-1"));
    h.take(conn);
    h.advance_to(Time::from_secs(300));
    assert_eq!(
        only(h.take(conn), "prompt_done"),
        vec![json!({"t":"prompt_done","id":"q1","expired":true})]
    );
}

#[test]
fn default_ttl_comes_from_the_configuration() {
    // decisions C1 MOBILE_PROMPT_TTL
    let mut c = hermes_mobile::Config::new(TOKEN);
    c.prompt_ttl = std::time::Duration::from_secs(60);
    let mut h = Harness::with_config(c);
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", None));
    assert_eq!(h.take(conn)[0]["timeout_seconds"], 60);
    h.advance_to(Time::from_secs(60));
    assert_eq!(only(h.take(conn), "prompt_done")[0]["expired"], true);
}

#[test]
fn card_for_an_offline_device_waits_and_is_sent_after_ready() {
    // decisions P1
    let mut h = Harness::new();
    h.agent(exec("p1", "tel-1", Some(100)));
    h.advance_to(Time::from_secs(40));
    let conn = h.open();
    h.hello(conn, "tel-1");
    let frames = h.take(conn);
    assert_eq!(Harness::types(&frames), ["ready", "prompt"]);
    assert_eq!(frames[1]["timeout_seconds"], 60, "what is left of its TTL");
}

#[test]
fn offline_card_expires_quietly_for_the_device_but_the_agent_hears() {
    // decisions P1, P5
    let mut h = Harness::new();
    h.agent(exec("p1", "tel-1", Some(10)));
    h.advance_to(Time::from_secs(10));
    assert_eq!(h.take_events().len(), 1);
    let conn = h.connect("tel-1");
    assert!(h.take(conn).is_empty(), "an expired card is not re-sent");
}

#[test]
fn open_cards_are_sent_again_after_reconnect() {
    // decisions H5
    let mut h = Harness::new();
    let first = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", None));
    h.agent(clarify("q1", "tel-1"));
    h.take(first);
    let second = h.open();
    h.hello(second, "tel-1");
    let frames = h.take(second);
    assert_eq!(Harness::types(&frames), ["ready", "prompt", "prompt"]);
    assert_eq!(
        (frames[1]["id"].as_str(), frames[2]["id"].as_str()),
        (Some("p1"), Some("q1")),
        "in the order asked"
    );
}

#[test]
fn agent_cannot_reuse_a_card_id_or_open_an_empty_card() {
    let mut h = Harness::new();
    h.connect("tel-1");
    h.agent(exec("p1", "tel-1", None));
    assert_eq!(
        h.gw.handle_agent(h.now, exec("p1", "tel-1", None)),
        Err(CommandError::DuplicatePrompt)
    );
    let empty = AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("p2"),
        request: PromptRequest::Clarify {
            question: "?".into(),
            choices: vec![],
        },
        ttl_secs: None,
    };
    assert!(matches!(
        h.gw.handle_agent(h.now, empty),
        Err(CommandError::InvalidPrompt(_))
    ));
}

#[test]
fn an_answer_after_the_ttl_expires_the_card_even_before_its_timer_runs() {
    // decisions P4/P5; issue 8 #8: `always` must not be applied to an expired exec_approval.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", Some(10)));
    h.take(conn);
    // The answer arrives at the TTL, before the gateway's timer has fired.
    h.now = Time::from_millis(10_000);
    h.send(conn, json!({"t":"prompt","prompt_id":"p1","option_id":"always"}));
    assert_eq!(
        h.take(conn),
        vec![json!({"t":"prompt_done","id":"p1","option_id":"deny","expired":true})]
    );
    match h.take_events().as_slice() {
        [AgentEvent::PromptExpired { option_id, .. }] => assert_eq!(option_id.as_deref(), Some("deny")),
        e => panic!("the agent should hear of the expiry only: {e:?}"),
    }
    h.advance_ms(1000);
    assert!(
        only(h.take(conn), "prompt_done").is_empty(),
        "no second prompt_done when the timer runs"
    );
    assert!(h.take_events().is_empty());
}

#[test]
fn card_ids_that_an_answer_could_not_carry_are_refused() {
    // G8 cuts prompt_id to 128 characters; issue 8 #15.
    let mut h = Harness::new();
    let long = "p".repeat(129);
    assert!(matches!(
        h.gw.handle_agent(h.now, exec(&long, "tel-1", None)),
        Err(CommandError::InvalidPrompt(_))
    ));
    assert!(matches!(
        h.gw.handle_agent(h.now, exec("", "tel-1", None)),
        Err(CommandError::InvalidPrompt(_))
    ));
    assert!(h.gw.handle_agent(h.now, exec(&"p".repeat(128), "tel-1", None)).is_ok());
}

#[test]
fn a_card_lives_at_most_a_day_whatever_the_agent_asks() {
    // decisions L27
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(exec("p1", "tel-1", Some(10 * 365 * 86_400)));
    assert_eq!(h.take(conn)[0]["timeout_seconds"], 86_400);
    h.advance_ms(86_399_000);
    assert!(only(h.take(conn), "prompt_done").is_empty());
    h.advance_ms(1000);
    assert_eq!(only(h.take(conn), "prompt_done")[0]["expired"], true);
}
