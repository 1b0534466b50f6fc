//! Web Push's rules on virtual time (issue 18, issue 24 §0): push's state machine in the
//! wiring beside the core and the journal, its POSTs answered by the test. No socket, no
//! sleep. What needs a real push service (the encryption, the VAPID signature, TLS, the
//! payload a browser shows) is in tests/push.rs.
mod wiring;

use std::time::Duration;

use hermes_mobile::ConnId;
use serde_json::{json, Value};
use wiring::*;

const SERVICE: &str = "cron-token-0123456789";
const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

fn gateway() -> Driver {
    let mut config = config();
    config.deliver_tokens = vec![SERVICE.into()];
    Driver::with_push(config, AgentKind::Demo)
}

/// tel-1 subscribes to push and locks its screen; a service connection (cron) is open.
fn locked_phone_and_cron(d: &mut Driver) -> ConnId {
    let (phone, _) = d.hello("tel-1", None);
    let sub = json!({"endpoint":"https://127.0.0.1:8443/p","keys":{"p256dh":KEY,"auth":AUTH}});
    d.send(phone, json!({"t":"push_subscribe","id":"s1","subscription":sub}));
    assert_eq!(only(&d.take(phone), "push_subscribed").len(), 1);
    d.close(phone);
    service(d)
}

fn service(d: &mut Driver) -> ConnId {
    let cron = d.open();
    d.send(cron, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    d.take(cron);
    cron
}

/// Cron's `deliver` to tel-1, and its answer.
fn deliver(d: &mut Driver, cron: ConnId, id: &str) -> Value {
    let text = format!("note {id}");
    d.send(cron, json!({"t":"deliver","id":id,"target":"mobile:tel-1","text":text}));
    d.take(cron).pop().expect("an answer to the deliver")
}

#[test]
fn deliveries_close_together_make_one_push() {
    let mut d = gateway();
    let cron = locked_phone_and_cron(&mut d);
    for id in ["d1", "d2", "d3"] {
        assert_eq!(deliver(&mut d, cron, id)["held"], true);
        d.advance(Duration::from_millis(500));
    }
    d.advance(Duration::from_secs(30));
    assert_eq!(d.push_calls.len(), 1, "three within the coalescing window: one push");
}

#[test]
fn a_429_is_retried_no_sooner_than_its_retry_after() {
    let mut d = gateway();
    let cron = locked_phone_and_cron(&mut d);
    deliver(&mut d, cron, "d1");
    d.advance(Duration::from_secs(5));
    assert_eq!(d.push_calls.len(), 1);
    let (first, _) = d.push_calls[0];
    let answered = d.now;
    d.answer_push(first, 429, &[("Retry-After", "3")]);
    d.advance(Duration::from_millis(2_900));
    assert!(d.push_calls.is_empty(), "retried before its Retry-After");
    d.advance(Duration::from_millis(200));
    assert_eq!(d.push_calls.len(), 1, "retried once it is up");
    assert!(d.push_calls[0].1.since(answered) >= Duration::from_secs(3));
}

#[test]
fn a_410_removes_the_subscription_for_good_and_across_a_restart() {
    let mut d = gateway();
    let cron = locked_phone_and_cron(&mut d);
    assert_eq!(deliver(&mut d, cron, "d1")["held"], true);
    d.advance(Duration::from_secs(5));
    let (id, _) = d.push_calls[0];
    d.answer_push(id, 410, &[]);
    // S3: with no subscription a deliver to a phone that is away is not held.
    assert_eq!(deliver(&mut d, cron, "d2")["code"], "device_offline");
    d.restart(false);
    let cron = service(&mut d);
    assert_eq!(
        deliver(&mut d, cron, "d3")["code"],
        "device_offline",
        "the removal was kept"
    );
    d.advance(Duration::from_secs(60));
    assert!(d.push_calls.is_empty(), "nothing POSTed to it again");
}

#[test]
fn a_subscription_survives_a_restart() {
    // The counterpart of the test above: what push keeps is what the next start reads.
    let mut d = gateway();
    locked_phone_and_cron(&mut d);
    d.restart(true);
    let cron = service(&mut d);
    assert_eq!(deliver(&mut d, cron, "d1")["held"], true);
    d.advance(Duration::from_secs(5));
    assert_eq!(d.push_calls.len(), 1);
}
