//! decisions S1–S5: `deliver` from cron and `hermes send`.
mod common;
use common::*;
use hermes_mobile::{Config, ConnId, Peer};
use serde_json::{json, Value};

const SERVICE: &str = "cron-token";

fn config() -> Config {
    let mut c = Config::new(TOKEN);
    c.deliver_tokens = vec![SERVICE.into()];
    c
}

fn service(h: &mut Harness) -> ConnId {
    let conn = h.open();
    h.send(conn, json!({"t":"hello","token":SERVICE,"device":{"id":"cron"}}));
    assert_eq!(h.take(conn)[0]["t"], "ready");
    conn
}

fn deliver(id: &str, target: &str, text: &str) -> Value {
    json!({"t":"deliver","id":id,"target":target,"text":text})
}

#[test]
fn service_connection_delivers_text_and_gets_delivered() {
    // decisions S1, S4, S5
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    let cron = service(&mut h);
    h.send(cron, deliver("d1", "mobile:tel-1", "backup finished"));
    assert_eq!(h.take(cron), vec![json!({"t":"delivered","id":"d1","device":"tel-1"})]);
    let frames = h.take(phone);
    assert_eq!(
        Harness::types(&frames),
        ["message"],
        "no avatar or typing for a delivery"
    );
    assert_eq!(frames[0]["text"], "backup finished");
    assert_eq!(frames[0]["final"], true);
    assert_ne!(frames[0]["id"], "d1", "a new server message id");
}

#[test]
fn target_may_omit_the_mobile_prefix() {
    // decisions S3
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    let cron = service(&mut h);
    h.send(cron, deliver("d1", "tel-1", "hi"));
    assert_eq!(h.take(cron)[0]["t"], "delivered");
    assert_eq!(h.take(phone).len(), 1);
}

#[test]
fn empty_target_uses_the_home_device_or_is_bad_frame() {
    // decisions S3
    let mut h = Harness::with_config(config());
    let cron = service(&mut h);
    h.send(cron, json!({"t":"deliver","id":"d1","text":"hi"}));
    let frames = h.take(cron);
    assert_eq!(
        (error_of(&frames)["code"].as_str(), error_of(&frames)["id"].as_str()),
        (Some("bad_frame"), Some("d1"))
    );

    let mut c = config();
    c.home_device = Some("tel-1".into());
    let mut h = Harness::with_config(c);
    let phone = h.connect("tel-1");
    let cron = service(&mut h);
    h.send(cron, json!({"t":"deliver","id":"d1","target":"","text":"hi"}));
    assert_eq!(h.take(cron)[0], json!({"t":"delivered","id":"d1","device":"tel-1"}));
    assert_eq!(h.take(phone).len(), 1);
}

#[test]
fn offline_target_is_device_offline_and_not_recorded() {
    // decisions S3, M4: cron can retry
    let mut h = Harness::with_config(config());
    let cron = service(&mut h);
    h.send(cron, deliver("d1", "tel-1", "hi"));
    let frames = h.take(cron);
    let err = error_of(&frames);
    assert_eq!(
        (err["code"].as_str(), err["id"].as_str(), err["fatal"].as_bool()),
        (Some("device_offline"), Some("d1"), Some(false))
    );
    assert_eq!(h.gw.stats().held_bytes, 0, "a delivery is not held");
    let phone = h.connect("tel-1");
    h.send(cron, deliver("d1", "tel-1", "hi"));
    assert_eq!(h.take(cron)[0]["t"], "delivered");
    assert_eq!(h.take(phone).len(), 1);
}

#[test]
fn loopback_without_proxy_headers_may_deliver() {
    // decisions S1
    let mut h = Harness::new();
    let phone = h.connect("tel-1");
    let local = h.open_with(Peer {
        loopback: true,
        forwarded: false,
        source: Default::default(),
    });
    h.hello(local, "cli");
    h.take(local);
    h.send(local, deliver("d1", "tel-1", "hi"));
    assert_eq!(h.take(local)[0]["t"], "delivered");
    assert_eq!(h.take(phone).len(), 1);
}

#[test]
fn loopback_behind_a_proxy_and_remote_peers_are_forbidden() {
    // decisions S1: X-Forwarded-For shows the peer is not really local
    for peer in [
        Peer {
            loopback: true,
            forwarded: true,
            source: Default::default(),
        },
        Peer {
            loopback: false,
            forwarded: false,
            source: Default::default(),
        },
    ] {
        let mut h = Harness::new();
        let phone = h.connect("tel-1");
        let conn = h.open_with(peer);
        h.hello(conn, "tel-2");
        h.take(conn);
        h.send(conn, deliver("d1", "tel-1", "hi"));
        let frames = h.take(conn);
        assert_eq!(
            (error_of(&frames)["code"].as_str(), error_of(&frames)["fatal"].as_bool()),
            (Some("forbidden"), Some(false))
        );
        assert!(h.take(phone).is_empty());
        assert!(!h.closed.contains_key(&conn));
    }
}

#[test]
fn service_connections_are_never_addressable_and_never_replace_a_device() {
    // decisions S2
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    let conn = h.open();
    h.send(conn, json!({"t":"hello","token":SERVICE,"device":{"id":"tel-1"}}));
    assert_eq!(h.take(conn)[0]["t"], "ready");
    assert!(!h.closed.contains_key(&phone), "the phone keeps its connection");
    h.send(conn, deliver("d1", "tel-1", "to the phone"));
    assert_eq!(h.take(phone)[0]["text"], "to the phone");
    // And a service id is not a target.
    let cron = service(&mut h);
    h.send(cron, deliver("d2", "cron", "hi"));
    assert_eq!(error_of(&h.take(cron))["code"], "device_offline");
}

#[test]
fn service_connections_cannot_talk_to_the_agent() {
    // docs/decisions-local.md L4
    let mut h = Harness::with_config(config());
    let cron = service(&mut h);
    h.send(cron, json!({"t":"text","id":"1","text":"hi"}));
    assert_eq!(error_of(&h.take(cron))["code"], "forbidden");
    assert!(h.take_events().is_empty());
}

#[test]
fn deliver_sends_text_first_then_media() {
    // decisions S4
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    let cron = service(&mut h);
    h.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"tel-1","text":"report","media":{"kind":"document","filename":"r.pdf","data":b64(b"%PDF")}}),
    );
    let frames = h.take(phone);
    assert_eq!(Harness::types(&frames), ["message", "media"]);
    assert_eq!(
        (frames[1]["mime"].as_str(), frames[1]["size"].as_u64()),
        (Some("application/pdf"), Some(4))
    );
    assert_eq!(frames[1]["data"], b64(b"%PDF"));
}

#[test]
fn deliver_media_kind_and_size_are_checked() {
    // decisions S4, G3
    let mut h = Harness::with_config(config());
    h.connect("tel-1");
    let cron = service(&mut h);
    h.send(
        cron,
        json!({"t":"deliver","id":"d1","target":"tel-1","media":{"kind":"audio","data":"AA=="}}),
    );
    assert_eq!(error_of(&h.take(cron))["code"], "unsupported_frame");
    let big = b64(&vec![0u8; 8 * 1024 * 1024 + 1]);
    h.send(
        cron,
        json!({"t":"deliver","id":"d2","target":"tel-1","media":{"kind":"image","data":big}}),
    );
    assert_eq!(error_of(&h.take(cron))["code"], "too_big");
    h.send(cron, json!({"t":"deliver","id":"d3","target":"tel-1"}));
    assert_eq!(error_of(&h.take(cron))["code"], "bad_frame", "at least text or media");
    h.send(cron, json!({"t":"deliver","target":"tel-1","text":"x"}));
    assert_eq!(error_of(&h.take(cron))["code"], "bad_frame", "id is required");
}

#[test]
fn repeated_deliver_is_confirmed_but_not_resent() {
    // decisions S4
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    let cron = service(&mut h);
    h.send(cron, deliver("d1", "tel-1", "once"));
    h.send(cron, deliver("d1", "tel-1", "once"));
    assert_eq!(
        h.take(cron),
        vec![json!({"t":"delivered","id":"d1","device":"tel-1"}); 2]
    );
    assert_eq!(h.take(phone).len(), 1);
}

#[test]
fn the_allowed_device_list_is_for_phones_not_for_service_connections() {
    // decisions H3, S2, L34 (issue 8 #16)
    let mut config = config();
    config.allowed_devices = vec!["tel-1".into()];
    let mut h = Harness::with_config(config);
    let phone = h.connect("tel-1");
    let cron = service(&mut h);
    h.send(cron, deliver("d1", "tel-1", "still delivered"));
    assert_eq!(h.take(cron)[0]["t"], "delivered");
    assert_eq!(h.take(phone)[0]["text"], "still delivered");
    let stranger = h.open();
    h.send(stranger, json!({"t":"hello","token":TOKEN,"device":{"id":"tel-9"}}));
    assert_eq!(
        error_of(&h.take(stranger))["code"],
        "auth_failed",
        "phones still need the list"
    );
}

#[test]
fn a_service_retry_is_recognised_whatever_device_id_its_new_connection_says() {
    // decisions S4, L34 (issue 8 #16): a service's deliveries are its token's.
    let mut h = Harness::with_config(config());
    let phone = h.connect("tel-1");
    for device in [json!({}), json!({"id":"cron-retry"})] {
        let conn = h.open();
        h.send(conn, json!({"t":"hello","token":SERVICE,"device":device}));
        assert_eq!(h.take(conn)[0]["t"], "ready");
        h.send(conn, deliver("nightly-1", "tel-1", "backup finished"));
        assert_eq!(
            h.take(conn),
            vec![json!({"t":"delivered","id":"nightly-1","device":"tel-1"})]
        );
        h.close(conn);
    }
    assert_eq!(h.take(phone).len(), 1, "sent once");
}

fn agent_deliver(id: &str, target: &str, text: &str) -> hermes_mobile::AgentCommand {
    hermes_mobile::AgentCommand::Deliver {
        sender: "link".into(),
        id: id.into(),
        target: target.into(),
        text: Some(text.into()),
        file: None,
    }
}

#[test]
fn the_agent_link_delivers_with_the_same_rules() {
    // decisions S3-S5 over the agent link (issue 9): confirmed with the device reached, a
    // repeat confirmed but not re-sent, an offline target refused and not remembered.
    use hermes_mobile::{Accepted, CommandError, DeviceId};
    let mut h = Harness::with_config(config());
    assert_eq!(
        h.try_agent(agent_deliver("c1", "mobile:tel-1", "hi")),
        Err(CommandError::DeviceOffline)
    );
    let phone = h.connect("tel-1");
    assert_eq!(
        h.try_agent(agent_deliver("c1", "mobile:tel-1", "hi")),
        Ok(Accepted::Delivered(DeviceId("tel-1".into())))
    );
    assert_eq!(
        h.try_agent(agent_deliver("c1", "tel-1", "hi")),
        Ok(Accepted::Delivered(DeviceId("tel-1".into())))
    );
    let frames = h.take(phone);
    assert_eq!(Harness::types(&frames), ["message"], "sent once");
    assert_eq!(h.try_agent(agent_deliver("c2", "", "hi")), Err(CommandError::BadTarget));
}

#[test]
fn the_agent_hears_when_devices_come_and_go() {
    use hermes_mobile::AgentEvent;
    let mut h = Harness::new();
    let phone = h.connect("tel-1");
    h.close(phone);
    let kinds: Vec<&str> = h
        .presence
        .iter()
        .map(|e| match e {
            AgentEvent::DeviceOnline { .. } => "online",
            AgentEvent::DeviceOffline { .. } => "offline",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["online", "offline"]);
}
