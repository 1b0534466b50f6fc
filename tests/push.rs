//! The push extension in the core (issue 18, docs/push.md, docs/decisions-local.md L44–L47),
//! on virtual time: subscriptions, and which events notify a device with no live connection.
mod common;
use std::time::Duration;

use common::*;
use hermes_mobile::push::{AllowList, NotifyEvent, PushConfig};
use hermes_mobile::{AgentCommand, Config, DeviceId, MessageId, PromptId, PromptRequest, Time};
use serde_json::{json, Value};

const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
const VAPID: &str = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";
const SERVICE: &str = "cron-token";

fn config() -> Config {
    let mut c = Config::new(TOKEN);
    c.deliver_tokens = vec![SERVICE.into()];
    c.push = Some(PushConfig::new(VAPID, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    c
}

fn subscribe_frame(id: &str, endpoint: &str) -> Value {
    json!({"t":"push_subscribe","id":id,"subscription":{"endpoint":endpoint,"keys":{"p256dh":KEY,"auth":AUTH}},"app_url":"https://pi.example/"})
}

/// A phone that subscribed and then went away (its screen locked).
fn subscribed_and_gone(h: &mut Harness, device: &str) {
    let phone = h.connect(device);
    h.send(phone, subscribe_frame("s1", "https://fcm.googleapis.com/fcm/send/abc"));
    assert_eq!(h.take(phone), vec![json!({"t":"push_subscribed","id":"s1"})]);
    h.close(phone);
}

fn card(device: &str, prompt: &str, ttl: u64) -> AgentCommand {
    AgentCommand::OpenPrompt {
        device: DeviceId::from(device),
        prompt: PromptId::from(prompt),
        request: PromptRequest::ExecApproval {
            command: "rm -rf /tmp/cache".into(),
            description: "clears the cache".into(),
            options: vec![],
        },
        ttl_secs: Some(ttl),
    }
}

fn reply(device: &str, id: &str, text: &str, done: bool) -> AgentCommand {
    AgentCommand::Reply {
        device: DeviceId::from(device),
        message: MessageId::from(id),
        text: text.into(),
        done,
    }
}

fn events(h: &mut Harness) -> Vec<NotifyEvent> {
    std::mem::take(&mut h.notices).into_iter().map(|n| n.event).collect()
}

#[test]
fn ready_names_the_vapid_key_only_when_push_is_on() {
    let mut h = Harness::with_config(config());
    let (_, frames) = h.connect_frames("tel-1");
    assert_eq!(
        frames[0]["capabilities"]["push"],
        json!({"webpush":{"vapid_public_key":VAPID},"actions":"safe"})
    );
    let mut off = Harness::new();
    let (phone, frames) = off.connect_frames("tel-1");
    assert!(frames[0]["capabilities"].get("push").is_none(), "{}", frames[0]);
    // With push off, the frames get an error with their id, never silence.
    off.send(phone, subscribe_frame("s1", "https://fcm.googleapis.com/x"));
    let frames = off.take(phone);
    assert_eq!(error_of(&frames)["code"], "unsupported_frame");
    assert_eq!(
        (error_of(&frames)["id"].clone(), error_of(&frames)["fatal"].clone()),
        (json!("s1"), json!(false))
    );
}

#[test]
fn a_subscription_is_kept_and_one_to_a_host_not_allowed_is_forbidden_and_not_fatal() {
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    for (id, endpoint) in [
        ("f1", "https://fcm.googleapis.com.evil.example/x"),
        ("f2", "http://fcm.googleapis.com/x"),
        ("f3", "https://user@fcm.googleapis.com/x"),
        ("f4", "https://127.0.0.1/x"),
        ("f5", "https://169.254.169.254/latest/meta-data"),
    ] {
        h.send(phone, subscribe_frame(id, endpoint));
        let frames = h.take(phone);
        let e = error_of(&frames);
        assert_eq!(
            (e["code"].as_str(), e["id"].as_str(), e["fatal"].as_bool()),
            (Some("forbidden"), Some(id), Some(false)),
            "{endpoint}"
        );
    }
    assert_eq!(h.gw.push_subscription_count(), 0);
    assert_eq!(h.push_changes, 0);
    h.send(phone, subscribe_frame("ok", "https://127.0.0.1:8443/push/1"));
    assert_eq!(h.take(phone), vec![json!({"t":"push_subscribed","id":"ok"})]);
    assert_eq!(h.push_changes, 1);
    let subs = h.gw.push_subscriptions(&DeviceId::from("tel-1"));
    assert_eq!(
        (subs.len(), subs[0].p256dh.as_str(), subs[0].app_url.as_deref()),
        (1, KEY, Some("https://pi.example/"))
    );
    // Subscribing sends nothing by itself; a service connection may not subscribe (S2).
    assert!(h.notices.is_empty());
    let cron = h.open();
    h.send(cron, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    h.take(cron);
    h.send(cron, subscribe_frame("s", "https://127.0.0.1:8443/push/2"));
    assert_eq!(error_of(&h.take(cron))["code"], "forbidden");
}

#[test]
fn subscribing_again_writes_only_when_what_is_kept_changes() {
    let mut h = Harness::with_config(config());
    let a = h.connect("tel-a");
    h.send(a, subscribe_frame("s1", "https://fcm.googleapis.com/fcm/send/a"));
    h.send(a, subscribe_frame("s2", "https://fcm.googleapis.com/fcm/send/a"));
    assert_eq!(
        h.push_changes, 1,
        "the page's subscribe after every ready writes nothing"
    );
    let b = h.connect("tel-b");
    h.send(b, subscribe_frame("s3", "https://fcm.googleapis.com/fcm/send/b"));
    assert_eq!(h.push_changes, 2);
    // L46: the order is what eviction reads after a restart, so a change of order is kept.
    h.send(a, subscribe_frame("s4", "https://fcm.googleapis.com/fcm/send/a"));
    assert_eq!(h.push_changes, 3, "tel-a is the most recently used again");
    let kept = h.gw.push_snapshot();
    assert!(kept.find("tel-b").unwrap() < kept.find("tel-a").unwrap(), "{kept}");
}

#[test]
fn a_key_that_is_not_a_point_on_the_curve_is_a_bad_frame() {
    let mut c = config();
    c.push.as_mut().unwrap().point_check = |_| false;
    let mut h = Harness::with_config(c);
    let phone = h.connect("tel-1");
    h.send(phone, subscribe_frame("s1", "https://fcm.googleapis.com/x"));
    let frames = h.take(phone);
    assert_eq!(
        (error_of(&frames)["code"].as_str(), error_of(&frames)["fatal"].as_bool()),
        (Some("bad_frame"), Some(false))
    );
    assert_eq!(h.gw.push_subscription_count(), 0);
}

#[test]
fn a_card_for_an_offline_subscribed_device_notifies_it_with_the_time_left() {
    let mut h = Harness::with_config(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(card("tel-1", "c1", 120));
    match events(&mut h).as_slice() {
        [NotifyEvent::Card { prompt, text, ttl, .. }] => {
            assert_eq!(
                (prompt.as_str(), text.as_str(), *ttl),
                ("c1", "rm -rf /tmp/cache", Duration::from_secs(120))
            );
        }
        other => panic!("{other:?}"),
    }
    // On reconnect the card is there, open.
    let (_, frames) = h.connect_frames("tel-1");
    assert_eq!(Harness::types(&frames), ["ready", "prompt"]);
    // A connected phone gets no push; nor does an offline one without a subscription.
    h.agent(card("tel-1", "c2", 120));
    h.agent(card("tel-2", "c3", 120));
    assert!(h.notices.is_empty());
}

#[test]
fn one_final_reply_makes_one_notice_and_is_held_past_m4s_ten_minutes() {
    let mut h = Harness::with_config(config());
    subscribed_and_gone(&mut h, "tel-1");
    h.agent(reply("tel-1", "m1", "Here", false));
    h.agent(reply("tel-1", "m1", "Here is", false));
    assert!(h.notices.is_empty(), "a stream's versions notify nothing");
    h.agent(reply("tel-1", "m1", "Here is the answer", true));
    assert_eq!(
        events(&mut h),
        vec![NotifyEvent::Reply {
            message: MessageId::from("m1"),
            text: "Here is the answer".into()
        }]
    );
    // A device without push loses it after 10 minutes (M4); this one keeps it for 24 h.
    h.advance_to(Time::from_secs(23 * 3600));
    let (_, frames) = h.connect_frames("tel-1");
    let messages = only(frames, "message");
    assert_eq!(messages.len(), 1);
    assert_eq!(
        (messages[0]["text"].as_str(), messages[0]["final"].as_bool()),
        (Some("Here is the answer"), Some(true))
    );
}

#[test]
fn without_a_subscription_held_output_still_goes_after_ten_minutes() {
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    h.close(phone);
    h.agent(reply("tel-1", "m1", "answer", true));
    assert!(h.notices.is_empty());
    h.advance_to(Time::from_secs(11 * 60));
    let (_, frames) = h.connect_frames("tel-1");
    assert!(
        only(frames, "message").is_empty(),
        "M4 unchanged for a device without push"
    );
}

#[test]
fn a_deliver_to_an_offline_subscribed_device_is_held_and_confirmed_as_held() {
    let mut h = Harness::with_config(config());
    subscribed_and_gone(&mut h, "tel-1");
    let cron = h.open();
    h.send(cron, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    h.take(cron);
    h.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"backup finished"}),
    );
    assert_eq!(
        h.take(cron),
        vec![json!({"t":"delivered","id":"d1","device":"tel-1","held":true})]
    );
    assert_eq!(
        events(&mut h),
        vec![NotifyEvent::Deliver {
            text: "backup finished".into()
        }]
    );
    // S4: a repeat is confirmed, not held twice.
    h.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"backup finished"}),
    );
    assert_eq!(h.take(cron)[0]["t"], "delivered");
    assert!(h.notices.is_empty());
    let (_, frames) = h.connect_frames("tel-1");
    let messages = only(frames, "message");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["text"], "backup finished");
    // S3 still holds for a device without a subscription.
    h.send(
        cron,
        json!({"t":"deliver","id":"d2","target":"mobile:tel-9","text":"x"}),
    );
    assert_eq!(error_of(&h.take(cron))["code"], "device_offline");
}

#[test]
fn push_test_is_sent_while_connected_and_answered_by_the_driver() {
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    h.send(phone, json!({"t":"push_test","id":"t0"}));
    let frames = h.take(phone);
    assert_eq!(
        (error_of(&frames)["id"].as_str(), frames.len()),
        (Some("t0"), 1),
        "no subscription: an error, never push_sent"
    );
    assert!(h.notices.is_empty());
    h.send(phone, subscribe_frame("s1", "https://fcm.googleapis.com/fcm/send/abc"));
    h.take(phone);
    h.send(phone, json!({"t":"push_test","id":"t1"}));
    assert!(h.take(phone).is_empty());
    let conn = match events(&mut h).as_slice() {
        [NotifyEvent::Test { conn, id }] if id == "t1" => *conn,
        other => panic!("{other:?}"),
    };
    h.gw.handle_push_test_result(h.now, conn, "t1", Ok(()));
    h.gw.handle_push_test_result(
        h.now,
        conn,
        "t2",
        Err("push test failed: 410 from https://fcm.googleapis.com".into()),
    );
    h.advance_ms(0);
    let frames = h.take(phone);
    assert_eq!(frames[0], json!({"t":"push_sent","id":"t1"}));
    assert_eq!(frames[1]["t"], "error");
    assert_eq!(frames[1]["id"], "t2");
    assert!(frames[1]["message"].as_str().unwrap().contains("410"));
}

#[test]
fn unsubscribe_and_gone_subscriptions_stop_the_notices() {
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    h.send(phone, subscribe_frame("s1", "https://fcm.googleapis.com/fcm/send/a"));
    h.send(phone, subscribe_frame("s2", "https://fcm.googleapis.com/fcm/send/b"));
    h.send(phone, json!({"t":"push_unsubscribe","id":"u1"}));
    assert_eq!(h.take(phone).last(), Some(&json!({"t":"push_unsubscribed","id":"u1"})));
    assert_eq!(h.gw.push_subscription_count(), 0);
    h.send(phone, subscribe_frame("s3", "https://fcm.googleapis.com/fcm/send/c"));
    h.close(phone);
    let before = h.push_changes;
    h.gw.handle_push_gone(h.now, &DeviceId::from("tel-1"), "https://fcm.googleapis.com/fcm/send/c");
    h.advance_ms(0);
    assert_eq!(h.push_changes, before + 1);
    h.agent(card("tel-1", "c1", 60));
    assert!(h.notices.is_empty(), "a gone subscription is never used again");
}

#[test]
fn subscriptions_survive_a_restart_through_the_snapshot() {
    let mut h = Harness::with_config(config());
    subscribed_and_gone(&mut h, "tel-1");
    let snapshot = h.gw.push_snapshot();
    assert!(!snapshot.contains(TOKEN), "no token in the kept file");
    let mut again = Harness::with_config(config());
    assert_eq!(again.gw.restore_push(&snapshot), Ok(1));
    again.agent(card("tel-1", "c1", 60));
    assert_eq!(again.notices.len(), 1);
}

#[test]
fn with_ntfy_every_offline_device_is_notified_but_deliveries_keep_s3() {
    let mut c = config();
    c.push.as_mut().unwrap().ntfy = true;
    let mut h = Harness::with_config(c);
    let phone = h.connect("tel-1");
    h.close(phone);
    h.agent(reply("tel-1", "m1", "done", true));
    assert_eq!(h.notices.len(), 1);
    let cron = h.open();
    h.send(cron, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    h.take(cron);
    h.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"mobile:tel-1","text":"hi"}),
    );
    // S3 holds: ntfy knows no device, so a delivery waits only for a subscribed one.
    assert_eq!(error_of(&h.take(cron))["code"], "device_offline");
}
