//! A card answered from its notification (issue 25, docs/decisions-local.md L65–L67), in
//! the core on virtual time: the answer acts as the device's own would, is confirmed only
//! once kept, and a notified card's closing is pushed, however it closed.
mod common;

use common::*;
use hermes_mobile::push::{AllowList, NotifyEvent, PushConfig};
use hermes_mobile::{AgentCommand, AgentEvent, CardAnswered, Config, DeviceId, PromptId, PromptRequest, Time};
use serde_json::{json, Value};

const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const VAPID: &str = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";

fn config() -> Config {
    let mut c = Config::new(TOKEN);
    c.push = Some(PushConfig::new(VAPID, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    c
}

fn subscribe(h: &mut Harness, phone: hermes_mobile::ConnId) {
    let sub = json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"https://fcm.googleapis.com/fcm/send/abc","keys":{"p256dh":KEY,"auth":AUTH}},"app_url":"https://pi.example/"});
    h.send(phone, sub);
    assert_eq!(h.take(phone), vec![json!({"t":"push_subscribed","id":"s1"})]);
}

/// A phone that subscribed and then locked its screen.
fn subscribed_and_gone(h: &mut Harness, device: &str) {
    let phone = h.connect(device);
    subscribe(h, phone);
    h.close(phone);
}

fn exec_card(device: &str, prompt: &str) -> AgentCommand {
    AgentCommand::OpenPrompt {
        device: DeviceId::from(device),
        prompt: PromptId::from(prompt),
        request: PromptRequest::ExecApproval {
            command: "rm -rf build".into(),
            description: "cleans the build".into(),
            options: vec![],
        },
        ttl_secs: Some(300),
    }
}

fn answers(h: &mut Harness) -> Vec<AgentEvent> {
    std::mem::take(&mut h.events)
        .into_iter()
        .filter(|e| matches!(e, AgentEvent::PromptAnswered { .. } | AgentEvent::PromptExpired { .. }))
        .collect()
}

fn closings(h: &mut Harness) -> Vec<NotifyEvent> {
    std::mem::take(&mut h.notices)
        .into_iter()
        .map(|n| n.event)
        .filter(|e| matches!(e, NotifyEvent::CardClosed { .. }))
        .collect()
}

fn applied(option: &str) -> CardAnswered {
    CardAnswered::Applied {
        option_id: option.into(),
    }
}

#[test]
fn an_answer_from_the_notification_acts_as_the_devices_own_and_the_device_hears_it_after_its_next_ready() {
    let mut h = Harness::with_config(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(exec_card("tel-1", "c1"));
    match &h.notices[..] {
        [n] => match &n.event {
            NotifyEvent::Card { facts, .. } => {
                let ids: Vec<&str> = facts.options.iter().map(|(id, _)| id.as_str()).collect();
                assert_eq!(ids, ["once", "session", "always", "deny"]);
                assert_eq!(facts.expires_at, Time::from_secs(300));
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    h.notices.clear();
    assert!(h.gw.card_for_answer(h.now, "c1").is_some());
    h.card_answer(7, "c1", "deny");
    assert_eq!(h.card_answers, vec![(7, applied("deny"))]);
    match answers(&mut h).as_slice() {
        [AgentEvent::PromptAnswered {
            device,
            option_id,
            asked,
            ..
        }] => assert_eq!(
            (device.as_str(), option_id.as_str(), asked.as_str()),
            ("tel-1", "deny", "rm -rf build")
        ),
        other => panic!("{other:?}"),
    }
    // The button said it; the notification it came from is replaced too (L66).
    assert_eq!(
        closings(&mut h),
        vec![NotifyEvent::CardClosed {
            prompt: PromptId::from("c1"),
            kind: hermes_mobile::PromptKind::ExecApproval,
            text: "rm -rf build".into(),
            option_id: Some("deny".into()),
            label: Some("Deny".into()),
            expired: false,
        }]
    );
    // P4: a second press (a token used before) finds the card closed; nothing is applied.
    h.card_answer(8, "c1", "deny");
    h.card_answer(9, "c1", "once");
    assert_eq!(
        &h.card_answers[1..],
        [(8, CardAnswered::Closed), (9, CardAnswered::Closed)]
    );
    assert!(answers(&mut h).is_empty());
    // L65: the phone that was away hears how its card closed after its next ready, once,
    // even after P4's ten minutes (a card may wait for a day).
    h.advance_ms(30 * 60 * 1000);
    let (_, frames) = h.connect_frames("tel-1");
    assert_eq!(Harness::types(&frames), ["ready", "prompt_done"]);
    assert_eq!(frames[1], json!({"t":"prompt_done","id":"c1","option_id":"deny"}));
    let (_, again) = h.connect_frames("tel-1");
    assert_eq!(Harness::types(&again), ["ready"]);
}

#[test]
fn a_connected_device_gets_prompt_done_at_once_and_only_an_option_on_the_card_applies() {
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    h.agent(AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("q1"),
        request: PromptRequest::Clarify {
            question: "Which branch?".into(),
            choices: vec!["main".into(), "dev".into()],
        },
        ttl_secs: Some(60),
    });
    assert_eq!(only(h.take(phone), "prompt").len(), 1);
    // `other` needs the person's own text; c5 is not on the card: neither is a guess.
    h.card_answer(1, "q1", "other");
    h.card_answer(2, "q1", "c5");
    h.card_answer(3, "nope", "c0");
    assert!(h.card_answers.iter().all(|(_, o)| *o == CardAnswered::Closed));
    assert!(h.gw.card_for_answer(h.now, "q1").is_some(), "still open");
    h.card_answer(4, "q1", "c1");
    assert_eq!(h.card_answers.last(), Some(&(4, applied("c1"))));
    assert_eq!(
        only(h.take(phone), "prompt_done"),
        vec![json!({"t":"prompt_done","id":"q1","option_id":"c1"})]
    );
    match answers(&mut h).as_slice() {
        [AgentEvent::PromptAnswered { label, .. }] => assert_eq!(label.as_deref(), Some("dev")),
        other => panic!("{other:?}"),
    }
    // It was never notified (the phone was connected): no push replaces anything.
    assert!(closings(&mut h).is_empty());
}

#[test]
fn a_card_past_its_ttl_cannot_be_answered_even_before_its_timer_runs() {
    let mut h = Harness::with_config(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(exec_card("tel-1", "c1"));
    h.now = Time::from_secs(300); // the timer has not run
    assert!(h.gw.card_for_answer(h.now, "c1").is_none());
    h.card_answer(1, "c1", "deny");
    assert_eq!(h.card_answers, vec![(1, CardAnswered::Closed)]);
}

#[test]
fn with_a_journal_the_button_hears_only_after_the_commit_and_not_kept_after_a_failed_one() {
    let mut h = Harness::with_journal(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(exec_card("tel-1", "c1"));
    h.agent(exec_card("tel-1", "c2"));
    h.auto_commit = false;
    h.card_answer(1, "c1", "deny");
    assert!(
        h.card_answers.is_empty(),
        "a 200 before the commit could be a promise the disk breaks"
    );
    h.commit();
    assert_eq!(h.card_answers, vec![(1, applied("deny"))]);
    h.card_answer(2, "c2", "once");
    h.fail_commit();
    assert_eq!(h.card_answers[1], (2, CardAnswered::NotKept));
}

#[test]
fn a_notified_card_answered_in_the_app_or_expired_pushes_its_outcome_even_across_a_restart() {
    let mut h = Harness::with_journal(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(exec_card("tel-1", "c1"));
    h.agent(exec_card("tel-1", "c2"));
    h.restart(true);
    h.notices.clear();
    // Answered in the app: the lock screen's notification is replaced (L66).
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"once"}));
    match closings(&mut h).as_slice() {
        [NotifyEvent::CardClosed {
            prompt,
            option_id,
            label,
            expired: false,
            ..
        }] => assert_eq!(
            (prompt.as_str(), option_id.as_deref(), label.as_deref()),
            ("c1", Some("once"), Some("Once"))
        ),
        other => panic!("{other:?}"),
    }
    // Expired while connected: replaced too; it says so.
    h.advance_to(Time::from_secs(301));
    match closings(&mut h).as_slice() {
        [NotifyEvent::CardClosed {
            prompt, expired: true, ..
        }] => assert_eq!(prompt.as_str(), "c2"),
        other => panic!("{other:?}"),
    }
    // A card opened while the phone is connected was never notified: nothing to replace.
    h.agent(exec_card("tel-1", "c3"));
    h.send(phone, json!({"t":"prompt","prompt_id":"c3","option_id":"deny"}));
    assert!(closings(&mut h).is_empty());
    // Nor does a client ever see that bookkeeping.
    h.send(phone, json!({"t":"history","id":"h1"}));
    let items: Vec<Value> = h.take(phone).into_iter().filter(|f| f["t"] == "history").collect();
    let text = items[0].to_string();
    assert!(text.contains("\"c1\"") && !text.contains("notified"), "{text}");
}

#[test]
fn a_resumed_device_hears_of_the_closing_once_from_its_replay() {
    let mut h = Harness::with_journal(config());
    let phone = h.connect("tel-1");
    subscribe(&mut h, phone);
    h.close(phone);
    h.agent(exec_card("tel-1", "c1"));
    h.card_answer(1, "c1", "deny");
    let conn = h.open();
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}),
    );
    let frames = h.take(conn);
    let done: Vec<&Value> = frames.iter().filter(|f| f["t"] == "prompt_done").collect();
    assert_eq!(done.len(), 1, "{frames:?}");
    assert_eq!(done[0]["option_id"], "deny");
}

#[test]
fn with_history_off_a_resumed_device_still_hears_how_its_card_closed() {
    // L65: the journal drops a closed card soon when it keeps no history, so the replay
    // may not carry the closing: the device hears it behind the replay instead.
    let mut config = config();
    let mut journal = hermes_mobile::journal::JournalConfig::new();
    journal.history = false;
    config.journal = Some(journal);
    let mut h = Harness::with_journal(config);
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(exec_card("tel-1", "c1"));
    h.card_answer(1, "c1", "deny");
    h.advance_ms(5_000);
    let conn = h.open();
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}),
    );
    let frames = h.take(conn);
    let done: Vec<&Value> = frames.iter().filter(|f| f["t"] == "prompt_done").collect();
    assert!(!done.is_empty(), "{frames:?}");
    assert!(done.iter().all(|f| f["option_id"] == "deny"));
}

#[test]
fn a_cards_outcome_is_pushed_only_once_its_closing_is_kept() {
    let mut h = Harness::with_journal(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(exec_card("tel-1", "c1"));
    h.notices.clear();
    h.auto_commit = false;
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"prompt","prompt_id":"c1","option_id":"deny"}));
    assert!(
        closings(&mut h).is_empty(),
        "a crash now leaves the card open: the lock screen must too"
    );
    h.commit();
    assert_eq!(closings(&mut h).len(), 1);
}

#[test]
fn a_closing_never_heard_of_goes_before_a_new_card_under_the_same_id() {
    let mut h = Harness::with_config(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(exec_card("tel-1", "c1"));
    h.advance_ms(301_000); // expires while the phone is away
                           // Long after P4's window, the agent asks again under the same id.
    h.advance_ms(20 * 60 * 1000);
    h.agent(exec_card("tel-1", "c1"));
    // The old card's closing first: the page closes the card it still shows open, and the
    // new one comes as a new card.
    let (_, frames) = h.connect_frames("tel-1");
    assert_eq!(
        Harness::types(&frames),
        ["ready", "prompt_done", "prompt"],
        "{frames:?}"
    );
    assert_eq!(frames[1]["expired"], true);
}
