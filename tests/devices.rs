//! Paired devices (issue 26) in the core, on virtual time: a pairing code traded once for a
//! device token, the token bound to its device both ways, revocation at once, owner frames,
//! and all of it kept across a restart.
mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use common::*;
use hermes_mobile::devices::codes::{encode, CODE_BYTES, DEFAULT_TTL};
use hermes_mobile::devices::KeptCode;
use hermes_mobile::gateway::{PairOutcome, RevokeOutcome};
use hermes_mobile::throttle::SourceKey;
use hermes_mobile::{AgentCommand, AgentEvent, Config, ConnId, DeviceId, PromptId, PromptRequest, Time};
use serde_json::{json, Value};

const DEVICE_TOKEN: &str = "Dev1ce-t0ken-Dev1ce-t0ken-Dev1ce-t0ken-123";
const OTHER_TOKEN: &str = "0ther-t0ken-0ther-t0ken-0ther-t0ken-0ther-1";

fn code(n: u8) -> String {
    encode(&[n; CODE_BYTES])
}

fn source(n: u8) -> SourceKey {
    SourceKey::of(IpAddr::V4(Ipv4Addr::new(192, 168, 1, n)))
}

fn harness(config: Config) -> Harness {
    let mut h = Harness::with_journal(config);
    h.gw.handle_wall_clock(Time::ZERO, 1_800_000_000_000);
    h
}

fn add_code(h: &mut Harness, n: u8, owner: bool) {
    let kept = KeptCode::new(&code(n), owner, h.now + DEFAULT_TTL);
    h.gw.add_pair_code(h.now, kept).expect("room for a code");
}

/// Pairs `device` with code `n` and `token`; the outcome.
fn pair(h: &mut Harness, n: u8, device: &str, token: &str) -> PairOutcome {
    h.pair(7, source(1), &code(n), device, token);
    h.pairings.pop().expect("an answer").1
}

fn hello(h: &mut Harness, token: &str, device: &str) -> (ConnId, Vec<Value>) {
    let conn = h.open();
    h.send(conn, json!({"t":"hello","token":token,"device":{"id":device}}));
    let frames = h.take(conn);
    (conn, frames)
}

fn refused(h: &Harness, conn: ConnId, frames: &[Value], code: &str) {
    let e = error_of(frames);
    assert_eq!(
        (e["code"].as_str(), e["fatal"].as_bool()),
        (Some(code), Some(true)),
        "{frames:?}"
    );
    assert_eq!(h.closed.get(&conn).map(|c| c.0), Some(1008), "closed with 1008 (H2)");
}

#[test]
fn a_code_pairs_one_device_once_and_its_token_opens_only_that_device() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    h.auto_commit = false;
    h.pair(7, source(1), &code(1), "tel-1", DEVICE_TOKEN);
    assert!(h.pairings.is_empty(), "answered only once kept");
    h.commit();
    let device = DeviceId::from("tel-1");
    let token = DEVICE_TOKEN.to_owned();
    assert_eq!(h.pairings, vec![(7, PairOutcome::Paired { device, token })]);
    h.auto_commit = true;

    let (_, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    assert_eq!(frames[0]["t"], "ready", "{frames:?}");
    // H2 both ways: its token as another device, and its id with the shared token.
    let (conn, frames) = hello(&mut h, DEVICE_TOKEN, "tel-2");
    refused(&h, conn, &frames, "forbidden");
    let (conn, frames) = hello(&mut h, TOKEN, "tel-1");
    refused(&h, conn, &frames, "forbidden");
    // The shared token still opens every other device (seed compatibility).
    let (_, frames) = hello(&mut h, TOKEN, "tel-9");
    assert_eq!(frames[0]["t"], "ready");
    // The code is spent.
    assert_eq!(pair(&mut h, 1, "tel-3", OTHER_TOKEN), PairOutcome::Forbidden);
}

#[test]
fn a_missing_id_is_made_and_a_bad_one_refused() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    match pair(&mut h, 1, "", DEVICE_TOKEN) {
        PairOutcome::Paired { device, .. } => {
            assert!(!device.as_str().is_empty());
            let (_, frames) = hello(&mut h, DEVICE_TOKEN, device.as_str());
            assert_eq!(frames[0]["t"], "ready");
        }
        other => panic!("{other:?}"),
    }
    add_code(&mut h, 2, false);
    assert!(matches!(
        pair(&mut h, 2, "tel-\u{202E}1", OTHER_TOKEN),
        PairOutcome::BadRequest(_)
    ));
    // A refused id does not spend the code.
    assert!(matches!(
        pair(&mut h, 2, "tel-2", OTHER_TOKEN),
        PairOutcome::Paired { .. }
    ));
}

#[test]
fn an_expired_code_pairs_nothing_and_eleven_failures_a_minute_wait_out_the_minute() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    h.advance_to(Time::ZERO + DEFAULT_TTL);
    assert_eq!(
        pair(&mut h, 1, "tel-1", DEVICE_TOKEN),
        PairOutcome::Forbidden,
        "expired"
    );
    add_code(&mut h, 2, false);
    for n in 0..9 {
        assert_eq!(pair(&mut h, 100 + n, "tel-1", DEVICE_TOKEN), PairOutcome::Forbidden);
    }
    // Ten failures in all: the next attempt waits, even with the right code.
    h.advance_ms(20_000);
    match pair(&mut h, 2, "tel-1", DEVICE_TOKEN) {
        PairOutcome::Throttled { retry_after } => assert_eq!(retry_after, Duration::from_secs(40)),
        other => panic!("{other:?}"),
    }
    // Another address is not held up, and the minute over, the code works.
    h.pair(8, source(2), &code(99), "tel-1", DEVICE_TOKEN);
    assert_eq!(h.pairings.pop().unwrap().1, PairOutcome::Forbidden);
    h.advance_ms(40_000);
    assert!(matches!(
        pair(&mut h, 2, "tel-1", DEVICE_TOKEN),
        PairOutcome::Paired { .. }
    ));
}

#[test]
fn pairing_again_replaces_the_token_and_cuts_the_old_one_off_at_once() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    add_code(&mut h, 2, false);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    let (old, _) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    h.agent(card("tel-1", "c1"));
    h.take_events();
    assert!(matches!(
        pair(&mut h, 2, "tel-1", OTHER_TOKEN),
        PairOutcome::Paired { .. }
    ));
    refused(&h, old, &h.sent[&old].clone(), "auth_failed");
    // The old token is no one's any more.
    let (conn, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    refused(&h, conn, &frames, "auth_failed");
    let (_, frames) = hello(&mut h, OTHER_TOKEN, "tel-1");
    assert_eq!(frames[0]["t"], "ready");
    // The old phone's card closed with it: its notification's buttons answer nothing.
    let events = h.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::PromptExpired { prompt, .. } if prompt.as_str() == "c1")),
        "{events:?}"
    );
}

fn card(device: &str, prompt: &str) -> AgentCommand {
    AgentCommand::OpenPrompt {
        device: DeviceId::from(device),
        prompt: PromptId::from(prompt),
        request: PromptRequest::ExecApproval {
            command: "rm -rf build".into(),
            description: String::new(),
            options: vec![],
        },
        ttl_secs: Some(300),
    }
}

#[test]
fn revoking_cuts_a_device_off_at_once_and_its_cards_and_held_replies_go() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    let (phone, _) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    h.agent(card("tel-1", "c1"));
    h.take(phone);
    h.take_events();
    h.auto_commit = false;
    h.revoke(3, "tel-1", false);
    // In memory at once: the connection is cut and the token refused before the commit.
    let e = error_of(&h.sent[&phone]).clone();
    assert_eq!(
        (e["code"].as_str(), e["fatal"].as_bool()),
        (Some("auth_failed"), Some(true))
    );
    assert_eq!(h.closed.get(&phone).map(|c| c.0), Some(1008));
    let (conn, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    refused(&h, conn, &frames, "auth_failed");
    assert!(h.revocations.is_empty(), "acknowledged only once kept");
    h.commit();
    assert_eq!(h.revocations, vec![(3, RevokeOutcome::Revoked)]);
    // Its open card closed, so a notification's buttons on a lost phone answer nothing.
    let expired = h.take_events();
    assert!(
        expired
            .iter()
            .any(|e| matches!(e, AgentEvent::PromptExpired { prompt, .. } if prompt.as_str() == "c1")),
        "{expired:?}"
    );
    h.auto_commit = true;
    h.revoke(4, "tel-1", false);
    assert_eq!(h.revocations.pop(), Some((4, RevokeOutcome::NotPaired)));
}

#[test]
fn a_restart_keeps_paired_devices_revocations_and_waiting_codes() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, true);
    add_code(&mut h, 2, false);
    add_code(&mut h, 3, false);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    pair(&mut h, 2, "tel-2", OTHER_TOKEN);
    h.revoke(3, "tel-2", false);
    h.restart(true);
    let (_, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    assert_eq!(frames[0]["t"], "ready", "{frames:?}");
    let (conn, frames) = hello(&mut h, OTHER_TOKEN, "tel-2");
    refused(&h, conn, &frames, "auth_failed");
    // The code waiting before the restart pairs after it.
    assert!(matches!(
        pair(&mut h, 3, "tel-3", "third-token-third-token-third-token-xx"),
        PairOutcome::Paired { .. }
    ));
    let owners: Vec<(String, bool)> = h.gw.paired_devices().into_iter().map(|d| (d.id, d.owner)).collect();
    assert_eq!(owners, [("tel-1".into(), true), ("tel-3".into(), false)]);
}

#[test]
fn a_failed_commit_leaves_no_device_paired() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    h.auto_commit = false;
    h.pair(7, source(1), &code(1), "tel-1", DEVICE_TOKEN);
    h.fail_commit();
    assert_eq!(h.pairings, vec![(7, PairOutcome::NotKept)]);
    h.auto_commit = true;
    let (conn, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    refused(&h, conn, &frames, "auth_failed");
}

#[test]
fn with_the_shared_token_off_only_paired_and_bound_devices_get_in() {
    let mut config = Config::new(TOKEN);
    config.shared_token = false;
    config.extra_tokens = vec![("tel-x".into(), "extra-token-extra-token-1".into())];
    let mut h = harness(config);
    let (conn, frames) = hello(&mut h, TOKEN, "tel-9");
    refused(&h, conn, &frames, "auth_failed");
    assert!(error_of(&frames)["message"]
        .as_str()
        .unwrap()
        .contains("MOBILE_SHARED_TOKEN"));
    add_code(&mut h, 1, false);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    let (_, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    assert_eq!(frames[0]["t"], "ready");
    let (_, frames) = hello(&mut h, "extra-token-extra-token-1", "tel-x");
    assert_eq!(frames[0]["t"], "ready");
}

#[test]
fn only_owner_connections_list_and_revoke_devices() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    add_code(&mut h, 2, true);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    pair(&mut h, 2, "tel-2", OTHER_TOKEN);
    let (plain, _) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    h.take(plain);
    h.send(plain, json!({"t":"devices","id":"d1"}));
    let e = error_of(&h.take(plain)).clone();
    assert_eq!(
        (e["code"].as_str(), e["id"].as_str(), e["fatal"].as_bool()),
        (Some("forbidden"), Some("d1"), Some(false))
    );
    h.send(plain, json!({"t":"revoke","id":"r0","device":"tel-2"}));
    assert_eq!(error_of(&h.take(plain))["code"], "forbidden");

    // An owner device: the list, then a revocation acknowledged once kept.
    let (owner, _) = hello(&mut h, OTHER_TOKEN, "tel-2");
    h.take(owner);
    h.send(owner, json!({"t":"devices","id":"d2"}));
    let list = h.take(owner);
    assert_eq!(
        (list[0]["t"].as_str(), list[0]["id"].as_str()),
        (Some("devices"), Some("d2"))
    );
    let items = list[0]["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["id"], "tel-1");
    assert_eq!(items[0]["online"], true);
    assert_eq!(items[0]["owner"], false);
    assert_eq!(items[0]["paired_at"], 1_800_000_000_000u64);
    assert!(items[0]["last_seen"].is_u64(), "{items:?}");
    assert_eq!(items[1]["owner"], true);
    h.auto_commit = false;
    h.send(owner, json!({"t":"revoke","id":"r1","device":"tel-1"}));
    assert!(h.take(owner).is_empty(), "acknowledged only once kept");
    assert_eq!(h.closed.get(&plain).map(|c| c.0), Some(1008), "cut off at once");
    h.commit();
    assert_eq!(h.take(owner), vec![json!({"t":"revoked","id":"r1","device":"tel-1"})]);
    h.auto_commit = true;
    h.send(owner, json!({"t":"revoke","id":"r2","device":"tel-1"}));
    let e = error_of(&h.take(owner)).clone();
    assert_eq!(
        (e["code"].as_str(), e["fatal"].as_bool()),
        (Some("bad_frame"), Some(false))
    );

    // The shared token is an owner too.
    let (shared, _) = hello(&mut h, TOKEN, "laptop");
    h.take(shared);
    h.send(shared, json!({"t":"devices","id":"d3"}));
    assert_eq!(h.take(shared)[0]["items"].as_array().unwrap().len(), 1);
}

#[test]
fn an_owners_phone_is_taken_over_only_with_an_owners_code_and_a_refused_code_stays_usable() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, true);
    add_code(&mut h, 2, false);
    pair(&mut h, 1, "owner-phone", DEVICE_TOKEN);
    let (owner, _) = hello(&mut h, DEVICE_TOKEN, "owner-phone");
    // L69: a plain code cannot pair over an owner device (it would inherit its cards).
    assert_eq!(pair(&mut h, 2, "owner-phone", OTHER_TOKEN), PairOutcome::OwnerDevice);
    assert!(!h.closed.contains_key(&owner), "the owner's phone is left alone");
    // The code was not spent: it pairs another id.
    assert!(matches!(
        pair(&mut h, 2, "tablet", OTHER_TOKEN),
        PairOutcome::Paired { .. }
    ));
}

#[test]
fn a_first_pairing_cuts_off_whoever_held_the_id_with_the_shared_token() {
    let mut h = harness(Config::new(TOKEN));
    let (old, frames) = hello(&mut h, TOKEN, "tel-1");
    assert_eq!(frames[0]["t"], "ready");
    add_code(&mut h, 1, false);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    refused(&h, old, &h.sent[&old].clone(), "auth_failed");
}

#[test]
fn a_paired_device_delivers_only_to_itself_even_from_loopback() {
    // L53 with L69: a device token acts for its device alone.
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    pair(&mut h, 1, "bot", DEVICE_TOKEN);
    let phone = h.connect("tel-2");
    let local = h.open_with(hermes_mobile::gateway::Peer {
        loopback: true,
        forwarded: false,
        source: Default::default(),
    });
    h.send(local, json!({"t":"hello","token":DEVICE_TOKEN,"device":{"id":"bot"}}));
    h.take(local);
    h.send(
        local,
        json!({"t":"deliver","id":"d1","target":"tel-2","text":"tap to re-approve"}),
    );
    assert_eq!(error_of(&h.take(local))["code"], "forbidden");
    assert!(h.take(phone).is_empty());
}

#[test]
fn a_revocation_whose_commit_failed_is_written_again_when_asked_again() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    h.auto_commit = false;
    h.revoke(3, "tel-1", false);
    h.fail_commit();
    assert_eq!(h.revocations.pop(), Some((3, RevokeOutcome::NotKept)));
    // Still refused in memory, and asking again keeps it this time.
    let (conn, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    refused(&h, conn, &frames, "auth_failed");
    h.revoke(4, "tel-1", false);
    h.commit();
    assert_eq!(h.revocations.pop(), Some((4, RevokeOutcome::Revoked)));
    h.auto_commit = true;
    h.restart(true);
    let (conn, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    refused(&h, conn, &frames, "auth_failed");
}

#[test]
fn a_reinstall_whose_commit_failed_leaves_the_device_as_it_was() {
    let mut h = harness(Config::new(TOKEN));
    add_code(&mut h, 1, false);
    add_code(&mut h, 2, false);
    pair(&mut h, 1, "tel-1", DEVICE_TOKEN);
    h.auto_commit = false;
    h.pair(9, source(1), &code(2), "tel-1", OTHER_TOKEN);
    h.fail_commit();
    assert_eq!(h.pairings.pop(), Some((9, PairOutcome::NotKept)));
    h.auto_commit = true;
    // As on disk: the old token, listed and revocable.
    let (_, frames) = hello(&mut h, DEVICE_TOKEN, "tel-1");
    assert_eq!(frames[0]["t"], "ready", "{frames:?}");
    assert_eq!(h.gw.paired_devices().len(), 1);
    let shown = format!(
        "{:?}",
        PairOutcome::Paired {
            device: DeviceId::from("tel-1"),
            token: OTHER_TOKEN.into(),
        }
    );
    assert!(!shown.contains(OTHER_TOKEN), "{shown}");
}

#[test]
fn ids_a_hello_could_not_use_are_refused_and_leave_the_code_unspent() {
    let mut config = Config::new(TOKEN);
    config.extra_tokens = vec![("tel-x".into(), "extra-token-extra-token-1".into())];
    config.allowed_devices = vec!["tel-1".into(), "tel-x".into()];
    let mut h = harness(config);
    add_code(&mut h, 1, false);
    let refused = |h: &mut Harness, id: &str| matches!(pair(h, 1, id, DEVICE_TOKEN), PairOutcome::BadRequest(_));
    assert!(refused(&mut h, &"t".repeat(121)), "over G8's 120 characters");
    assert!(refused(&mut h, "tel-2"), "outside MOBILE_ALLOWED_DEVICES");
    assert!(refused(&mut h, ""), "a generated id is outside it too");
    assert!(refused(&mut h, "tel-x"), "bound by MOBILE_EXTRA_TOKENS");
    assert!(matches!(
        pair(&mut h, 1, "tel-1", DEVICE_TOKEN),
        PairOutcome::Paired { .. }
    ));
}

#[test]
fn revoking_an_id_no_longer_paired_still_takes_its_push_subscriptions() {
    use hermes_mobile::push::{AllowList, PushConfig};
    let mut config = Config::new(TOKEN);
    let vapid = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";
    config.push = Some(PushConfig::new(vapid, AllowList::new(["127.0.0.1:8443"]).unwrap()));
    let mut h = harness(config);
    let phone = h.connect("tel-9");
    let key = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    h.send(phone, json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"https://fcm.googleapis.com/fcm/send/abc","keys":{"p256dh":key,"auth":"BTBZMqHH6r4Tts7J_aSIgg"}}}));
    assert_eq!(h.take(phone), vec![json!({"t":"push_subscribed","id":"s1"})]);
    let changes = h.push_changes;
    // As after a power cut that kept the revocation but not the subscriptions file.
    h.revoke(5, "tel-9", false);
    assert_eq!(h.revocations.pop(), Some((5, RevokeOutcome::NotPaired)));
    assert!(h.gw.push_subscriptions(&DeviceId::from("tel-9")).is_empty());
    assert_eq!(h.push_changes, changes + 1);
}
