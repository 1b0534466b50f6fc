//! What a restart keeps (issue 24 §2), through the loop's wiring in memory: the core, the
//! demo agent or the agent link, and the journal, stepped on virtual time, with a SIGTERM
//! (everything committed, every connection closed) or a SIGKILL (only what was committed).
//! The socket suite (tests/journal.rs) keeps what only a real process shows: the store's
//! thread, its file, a real SIGKILL; the rules are tested here, exactly and without sleeps.
mod wiring;

use std::time::Duration;

use hermes_mobile::push::{AllowList, PushConfig};
use hermes_mobile::Config;
use serde_json::{json, Value};
use wiring::*;

const SERVICE: &str = "cron-service-token-0123";
const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const VAPID: &str = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";

/// The last frame of type `t`.
fn last(frames: &[Value], t: &str) -> Value {
    only(frames, t).pop().unwrap_or_else(|| panic!("no {t} in {frames:?}"))
}

#[test]
fn a_held_reply_survives_a_sigkill_and_is_sent_once() {
    let mut d = Driver::demo();
    let (phone, _) = d.hello("tel-1", None);
    d.send(phone, json!({"t":"text","id":"m1","text":"/stream one two three four"}));
    d.close(phone);
    d.advance(DEMO_STEP * 8);
    d.restart(true);
    let (_, frames) = d.hello("tel-1", None);
    let message = last(&frames, "message");
    assert_eq!(
        (&message["text"], &message["final"]),
        (&json!("one two three four"), &json!(true))
    );
    assert!(message["seq"].as_u64().unwrap() >= 1, "{message}");
    let (_, again) = d.hello("tel-1", None);
    assert!(only(&again, "message").is_empty(), "sent once: {again:?}");
}

#[test]
fn a_reply_streamed_while_the_gateway_is_killed_keeps_what_was_committed() {
    // Only committed versions survive; the one on disk is whole and sent after `ready`.
    let mut d = Driver::demo();
    let (phone, _) = d.hello("tel-1", None);
    d.send(phone, json!({"t":"text","id":"m1","text":"/stream one two three four"}));
    d.close(phone);
    d.advance(DEMO_STEP);
    d.auto_commit = false;
    d.advance(DEMO_STEP * 8);
    d.restart(true);
    d.auto_commit = true;
    let (_, frames) = d.hello("tel-1", None);
    let messages = only(&frames, "message");
    let text = messages[0]["text"].as_str().unwrap();
    assert!("one two three four".starts_with(text), "a committed version: {text:?}");
    assert_ne!(text, "one two three four", "the later versions were never committed");
    // Nor was the end of the answer: the message is owed still and answered again (L64).
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_ne!(messages[1]["id"], messages[0]["id"]);
}

fn open_card_across(killed: bool) {
    let mut d = Driver::demo();
    let (phone, _) = d.hello("tel-1", None);
    d.send(phone, json!({"t":"text","id":"m1","text":"/ttl 60 ls -la"}));
    let card = last(&d.take(phone), "prompt")["id"].as_str().unwrap().to_owned();
    d.restart(killed);
    d.advance(Duration::from_secs(10));
    let (phone, frames) = d.hello("tel-1", None);
    let again = last(&frames, "prompt");
    assert_eq!(
        (again["id"].as_str(), &again["command"]),
        (Some(&*card), &json!("ls -la"))
    );
    assert_eq!(again["timeout_seconds"], 50, "the time it has left");
    // The demo of the new process answers it: the card carries what it needs (issue 24 §2).
    d.send(phone, json!({"t":"prompt","prompt_id":card,"option_id":"once"}));
    let frames = d.take(phone);
    assert_eq!(only(&frames, "prompt_done").len(), 1, "{frames:?}");
    assert_eq!(last(&frames, "message")["text"], "approved (once): ls -la");
}

#[test]
fn an_open_card_survives_a_sigterm_and_its_answer_reaches_the_demo() {
    open_card_across(false);
}

#[test]
fn an_open_card_survives_a_sigkill_and_its_answer_reaches_the_demo() {
    open_card_across(true);
}

#[test]
fn a_restored_card_expires_on_time() {
    let mut d = Driver::demo();
    let (phone, _) = d.hello("tel-1", None);
    d.send(phone, json!({"t":"text","id":"m1","text":"/ttl 60 ls -la"}));
    d.take(phone);
    let opened = d.now;
    d.restart(true);
    let (phone, frames) = d.hello("tel-1", None);
    assert_eq!(only(&frames, "prompt").len(), 1);
    d.advance_to(hermes_mobile::Time::from_millis(opened.as_millis() + 59_999));
    assert!(only(&d.take(phone), "prompt_done").is_empty(), "not before its 60 s");
    d.advance(Duration::from_millis(1));
    let done = last(&d.take(phone), "prompt_done");
    assert_eq!(done["expired"], true, "{done}");
}

#[test]
fn a_re_sent_id_is_dropped_after_a_sigkill_and_confirmed_again() {
    let mut d = Driver::demo();
    let (phone, _) = d.hello("tel-1", Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"do it once"}));
    let frames = d.take(phone);
    let received = last(&frames, "received");
    assert_eq!(received["id"], "m1");
    assert_eq!(last(&frames, "message")["text"], "echo: do it once");
    d.restart(true);
    let (phone, _) = d.hello("tel-1", Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"do it once"}));
    d.advance(DEMO_STEP * 8);
    assert_eq!(
        d.take(phone),
        vec![received],
        "received again with the same seq, and no second turn"
    );
}

/// A core with deliver tokens and Web Push (a held `deliver` needs a subscription).
fn with_push() -> Driver {
    let mut config = config();
    config.deliver_tokens = vec![SERVICE.into()];
    config.push = Some(PushConfig::new(VAPID, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    Driver::new(config, AgentKind::Demo)
}

/// A phone that subscribed to push and locked its screen, then cron's `deliver` to it.
fn deliver_to_a_locked_phone(d: &mut Driver) -> hermes_mobile::ConnId {
    let (phone, _) = d.hello("tel-1", None);
    let sub = json!({"endpoint":"https://127.0.0.1:8443/p","keys":{"p256dh":KEY,"auth":AUTH}});
    d.send(phone, json!({"t":"push_subscribe","id":"s1","subscription":sub}));
    assert_eq!(last(&d.take(phone), "push_subscribed")["id"], "s1");
    d.close(phone);
    let cron = d.open();
    d.send(cron, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    d.take(cron);
    d.auto_commit = false;
    d.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"backup finished"}),
    );
    cron
}

#[test]
fn a_held_deliver_is_answered_after_its_commit_and_survives_a_sigkill() {
    let mut d = with_push();
    let cron = deliver_to_a_locked_phone(&mut d);
    assert!(d.take(cron).is_empty(), "not before the commit");
    d.commit();
    d.step();
    assert_eq!(
        d.take(cron),
        vec![json!({"t":"delivered","id":"d1","device":"tel-1","held":true})]
    );
    d.restart(true);
    d.auto_commit = true;
    let (_, frames) = d.hello("tel-1", None);
    assert_eq!(last(&frames, "message")["text"], "backup finished");
}

#[test]
fn a_held_deliver_killed_before_its_commit_was_never_answered() {
    // Cron got no `delivered`, so it retries: nothing was promised, nothing is owed.
    let mut d = with_push();
    let cron = deliver_to_a_locked_phone(&mut d);
    assert!(d.take(cron).is_empty());
    d.restart(true);
    d.auto_commit = true;
    let (_, frames) = d.hello("tel-1", None);
    assert!(only(&frames, "message").is_empty(), "{frames:?}");
}

fn link() -> Driver {
    Driver::new(config(), AgentKind::Link)
}

#[test]
fn the_link_answers_ok_for_held_output_only_after_its_commit() {
    let mut d = link();
    d.attach_agent();
    let (phone, _) = d.hello("tel-1", None);
    d.close(phone);
    d.take_lines();
    d.auto_commit = false;
    d.agent_line(json!({"t":"reply","ref":"r1","device":"tel-1","id":"a-1","text":"done","done":true}));
    let lines = d.take_lines();
    assert!(only(&lines, "ok").is_empty(), "no ok before the commit: {lines:?}");
    d.commit();
    d.step();
    assert_eq!(only(&d.take_lines(), "ok"), vec![json!({"t":"ok","ref":"r1"})]);
    d.restart(true);
    d.auto_commit = true;
    let (_, frames) = d.hello("tel-1", None);
    assert_eq!(last(&frames, "message")["text"], "done");
}

#[test]
fn the_agent_s_repeated_deliver_is_answered_with_the_first_one_s_commit() {
    // S4 (review D #6): a repeat waits for the first one's commit, not for held output
    // the agent sent between them, which a later transaction keeps.
    let mut config = config();
    config.push = Some(PushConfig::new(VAPID, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    let mut d = Driver::new(config, AgentKind::Link);
    d.attach_agent();
    let (phone, _) = d.hello("tel-1", None);
    let sub = json!({"endpoint":"https://127.0.0.1:8443/p","keys":{"p256dh":KEY,"auth":AUTH}});
    d.send(phone, json!({"t":"push_subscribe","id":"s1","subscription":sub}));
    d.close(phone);
    d.take_lines();
    d.auto_commit = false;
    let deliver = |r: &str| json!({"t":"deliver","ref":r,"id":"d1","target":"mobile:tel-1","text":"x"});
    d.agent_line(deliver("first"));
    let first = d.journal.commit().expect("the first deliver waits for a commit");
    d.agent_line(json!({"t":"reply","ref":"later","device":"tel-1","id":"a-1","text":"held","done":true}));
    d.agent_line(deliver("again"));
    assert!(only(&d.take_lines(), "ok").is_empty(), "nothing before its commit");
    d.wiring.handle_journal_committed(d.now, first);
    d.step();
    let refs: Vec<Value> = only(&d.take_lines(), "ok").iter().map(|ok| ok["ref"].clone()).collect();
    assert_eq!(refs, [json!("first"), json!("again")]);
}

#[test]
fn held_output_whose_commit_failed_is_refused_to_the_agent() {
    let mut d = link();
    d.attach_agent();
    let (phone, _) = d.hello("tel-1", None);
    d.close(phone);
    d.take_lines();
    d.auto_commit = false;
    d.agent_line(json!({"t":"reply","ref":"r1","device":"tel-1","id":"a-1","text":"done","done":true}));
    d.journal.crash();
    d.wiring.handle_journal_failed(d.now, u64::MAX);
    d.step();
    let lines = d.take_lines();
    let error = last(&lines, "error");
    assert_eq!(error["ref"], "r1", "{error}");
}

/// An agent attached that reads nothing (its lines stay in the gateway's outbox), and
/// tel-1's phone, hello'd with `resume` after `after`.
fn stalled_agent(mut d: Driver, after: Option<u64>) -> (Driver, hermes_mobile::ConnId) {
    d.attach_agent();
    d.take_lines();
    d.stalled_link = true;
    let (phone, _) = d.hello("tel-1", after);
    (d, phone)
}

/// The texts of the messages `conn` got since the last take.
fn texts_to(d: &mut Driver, conn: hermes_mobile::ConnId) -> Vec<Value> {
    only(&d.take(conn), "message")
        .iter()
        .map(|m| m["text"].clone())
        .collect()
}

/// `(id, redelivered)` of the messages the link wrote to its agent.
fn messages(lines: &[Value]) -> Vec<(String, bool)> {
    only(lines, "message")
        .iter()
        .map(|m| (m["id"].as_str().unwrap().to_owned(), m["redelivered"] == true))
        .collect()
}

#[test]
fn a_received_message_the_agent_never_had_is_handed_over_again_after_a_sigkill() {
    // L64: no agent was attached when the phone got `received`; the crash took the
    // link's queue, not the journal's promise.
    let mut d = link();
    let (phone, _) = d.hello("tel-1", Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert_eq!(only(&d.take(phone), "received").len(), 1);
    d.restart(true);
    d.attach_agent();
    assert_eq!(messages(&d.take_lines()), [("m1".to_owned(), true)], "flagged");
    // The agent had it (the link wrote the line): a second restart hands over nothing.
    d.restart(true);
    d.attach_agent();
    assert!(messages(&d.take_lines()).is_empty(), "exactly once");
}

#[test]
fn a_message_whose_line_the_agent_never_read_is_handed_over_again_after_a_sigkill() {
    // L64 (review B #1): the agent has an event once its line is written whole, not when
    // the line is queued in the gateway's outbox, which a crash takes with it.
    let (mut d, phone) = stalled_agent(link(), Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert_eq!(only(&d.take(phone), "received").len(), 1);
    d.restart(true);
    d.stalled_link = false;
    d.attach_agent();
    assert_eq!(messages(&d.take_lines()), [("m1".to_owned(), true)], "owed still");
}

#[test]
fn a_message_whose_line_died_with_the_agent_goes_to_the_next_agent_in_the_same_run() {
    // L64 (review D #8): the agent crashed with the line in the gateway's outbox; the
    // restarted agent gets it now, not at the gateway's next start.
    let (mut d, phone) = stalled_agent(link(), Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert_eq!(only(&d.take(phone), "received").len(), 1);
    d.agent_gone();
    // L41 (review E #1): not asked to send it again, or the agent would do it twice.
    let told: Vec<Value> = only(&d.take(phone), "message")
        .iter()
        .map(|m| m["text"].clone())
        .collect();
    assert_eq!(told, [json!(hermes_mobile::agent_link::AGENT_AWAY_TEXT)]);
    d.stalled_link = false;
    d.attach_agent();
    assert_eq!(
        messages(&d.take_lines()),
        [("m1".to_owned(), true)],
        "handed over again"
    );
    // The new agent had it: a restart hands over nothing.
    d.restart(true);
    d.attach_agent();
    assert!(messages(&d.take_lines()).is_empty(), "exactly once");
}

#[test]
fn what_an_ended_agent_never_had_is_read_back_bounded_and_the_rest_waits_for_the_next_start() {
    // L64 (review E #2): the read-back holds what the link keeps for an absent agent; the
    // rest stays owed, never given up.
    let (mut d, phone) = stalled_agent(link(), Some(0));
    for i in 0..300 {
        d.send(phone, json!({"t":"text","id":format!("m{i}"),"text":"x"}));
    }
    d.agent_gone();
    d.stalled_link = false;
    d.attach_agent();
    let now = messages(&d.take_lines());
    assert_eq!(now.len(), 256, "as many as the link keeps");
    d.restart(true);
    d.attach_agent();
    let later = messages(&d.take_lines());
    let mut all: Vec<String> = now.into_iter().chain(later).map(|(id, _)| id).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 300, "every acknowledged message reaches the agent");
}

#[test]
fn a_message_let_through_by_a_failed_commit_is_owed_again() {
    // L64 (review E #5): the failed transaction took its owed row; the message still
    // went to the agent, whose line then died unwritten. It must reach the next agent.
    let (mut d, phone) = stalled_agent(link(), Some(0));
    d.auto_commit = false;
    d.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    let lost = d.journal.crash().expect("the message waited for a commit");
    d.wiring.handle_journal_failed(d.now, lost);
    d.auto_commit = true;
    d.step();
    d.agent_gone();
    d.stalled_link = false;
    d.attach_agent();
    assert_eq!(messages(&d.take_lines()), [("m1".to_owned(), true)]);
}

#[test]
fn without_a_journal_a_message_whose_line_died_is_asked_for_again() {
    // L41 (review F #1): nothing was owed, so nothing comes back: the phone must hear it.
    let mut config = config();
    config.journal = None;
    let (mut d, phone) = stalled_agent(Driver::new(config, AgentKind::Link), None);
    d.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    d.agent_gone();
    let told = texts_to(&mut d, phone);
    assert!(
        told.contains(&json!(hermes_mobile::agent_link::AGENT_LOST_TEXT)),
        "{told:?}"
    );
}

#[test]
fn a_replaced_agent_s_unwritten_message_goes_to_the_new_one_and_is_not_asked_for_again() {
    // L41, L64 (review F #2): the old agent's turns end once its connection has, when the
    // lines it never had are known.
    let (mut d, phone) = stalled_agent(link(), Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    d.take(phone);
    d.stalled_link = false;
    d.attach_agent_as(hermes_mobile::agent_link::PeerId(2));
    let told = texts_to(&mut d, phone);
    assert!(
        !told.contains(&json!(hermes_mobile::agent_link::AGENT_LOST_TEXT)),
        "{told:?}"
    );
    assert_eq!(messages(&d.take_lines()), [("m1".to_owned(), true)]);
}

#[test]
fn a_message_reaches_the_link_only_once_its_id_is_committed() {
    // A crash can never make the agent act twice on one id (L61).
    let mut d = link();
    d.attach_agent();
    let (phone, _) = d.hello("tel-1", Some(0));
    d.take_lines();
    d.auto_commit = false;
    d.send(phone, json!({"t":"text","id":"m1","text":"deploy"}));
    assert!(messages(&d.take_lines()).is_empty(), "not before the commit");
    assert!(only(&d.take(phone), "received").is_empty());
    d.commit();
    d.step();
    assert_eq!(messages(&d.take_lines()), [("m1".to_owned(), false)]);
    assert_eq!(only(&d.take(phone), "received").len(), 1);
}

#[test]
fn with_history_off_a_held_reply_still_survives() {
    let mut config: Config = config();
    config.journal.as_mut().unwrap().history = false;
    let mut d = Driver::new(config, AgentKind::Demo);
    let (phone, _) = d.hello("tel-1", None);
    d.send(phone, json!({"t":"text","id":"m1","text":"/stream held for later"}));
    d.close(phone);
    d.advance(DEMO_STEP * 4);
    d.restart(true);
    let (phone, frames) = d.hello("tel-1", None);
    assert_eq!(last(&frames, "message")["text"], "held for later");
    // Delivered, it is kept no more (no history), so a restart has nothing to send.
    d.close(phone);
    d.restart(true);
    let (_, frames) = d.hello("tel-1", None);
    assert_eq!(types(&frames), ["ready"]);
}

#[test]
fn a_message_whose_streamed_answer_had_not_ended_is_answered_again_after_a_sigkill() {
    // L64 (review B #1): the demo has a message once its answer has ended, not when it
    // starts streaming it; a crash in between hands the message over again.
    let mut d = Driver::demo();
    let (phone, _) = d.hello("tel-1", Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"/stream one two three four"}));
    assert_eq!(only(&d.take(phone), "received").len(), 1);
    d.advance(DEMO_STEP);
    d.restart(true);
    d.advance(DEMO_STEP * 8);
    let (phone, frames) = d.hello("tel-1", None);
    let message = last(&frames, "message");
    assert_eq!(
        (&message["text"], &message["final"]),
        (&json!("one two three four"), &json!(true)),
        "answered again, whole"
    );
    // That answer ended: a second crash owes the demo nothing.
    d.close(phone);
    d.restart(true);
    d.advance(DEMO_STEP * 8);
    let (_, frames) = d.hello("tel-1", None);
    assert!(only(&frames, "message").is_empty(), "{frames:?}");
}

/// What a chat request asks the model: its last message.
fn asked(request: &str) -> String {
    let (_, body) = request.split_once("\r\n\r\n").expect("a head and a body");
    let body: Value = serde_json::from_str(body).expect("a JSON body");
    let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
    last.map(|m| m["content"].as_str().unwrap_or("?").to_owned())
        .unwrap_or_default()
}

/// The texts of the final versions of the replies among `frames`.
fn final_texts(frames: &[Value]) -> Vec<String> {
    only(frames, "message")
        .iter()
        .filter(|m| m["final"] == true)
        .map(|m| m["text"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn messages_an_http_agent_had_not_answered_are_answered_after_a_sigkill() {
    // L64 (review B #1): m2 waits in the device's inbox behind m1's turn (L44). The agent
    // is done with a message when its turn ends, so a crash before that owes both.
    let mut d = Driver::new(config(), AgentKind::OpenAi);
    let (phone, _) = d.hello("tel-1", Some(0));
    d.send(phone, json!({"t":"text","id":"m1","text":"first"}));
    d.send(phone, json!({"t":"text","id":"m2","text":"second"}));
    assert_eq!(only(&d.take(phone), "received").len(), 2);
    assert_eq!(d.calls.len(), 1, "one turn at a time");
    d.restart(true);
    let (phone, _) = d.hello("tel-1", None);
    for text in ["first", "second"] {
        let (id, request) = d.calls.pop().unwrap_or_else(|| panic!("no call for {text:?}"));
        assert!(d.calls.is_empty(), "one turn at a time");
        assert_eq!(asked(&request), text);
        d.answer(id, &format!("re: {text}"));
    }
    assert_eq!(final_texts(&d.take(phone)), ["re: first", "re: second"]);
    // Both turns ended: a second crash owes the agent nothing.
    d.restart(true);
    assert!(d.calls.is_empty(), "{:?}", d.calls);
}
