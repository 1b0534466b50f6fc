//! decisions H1–H6: tokens, bindings, allowed devices, generated ids, reconnects, `ready`.
mod common;
use common::*;
use hermes_mobile::{AgentCommand, Config, DeviceId, MessageId};
use serde_json::{json, Value};

fn config() -> Config {
    let mut c = Config::new(TOKEN);
    c.extra_tokens = vec![("tel-1".into(), "bound-token-1".into())];
    c.deliver_tokens = vec!["service-token".into()];
    c
}

fn hello_as(h: &mut Harness, token: Value, device: Option<&str>) -> (hermes_mobile::ConnId, Vec<Value>) {
    let conn = h.open();
    let mut frame = json!({"t":"hello","token":token});
    if let Some(d) = device {
        frame["device"] = json!({"id": d});
    }
    h.send(conn, frame);
    let frames = h.take(conn);
    (conn, frames)
}

fn assert_fatal(h: &Harness, conn: hermes_mobile::ConnId, frames: &[Value], code: &str) {
    let err = error_of(frames);
    assert_eq!(err["code"], code, "{frames:?}");
    assert_eq!(err["fatal"], true);
    assert_eq!(h.closed[&conn], (1008, code.to_owned()));
}

#[test]
fn missing_or_empty_token_is_auth_failed() {
    // decisions H1
    for token in [Value::Null, json!("")] {
        let mut h = Harness::new();
        let (conn, frames) = hello_as(&mut h, token, Some("tel-1"));
        assert_fatal(&h, conn, &frames, "auth_failed");
    }
    let mut h = Harness::new();
    let conn = h.open();
    h.send(conn, json!({"t":"hello","device":{"id":"tel-1"}}));
    let frames = h.take(conn);
    assert_fatal(&h, conn, &frames, "auth_failed");
}

#[test]
fn wrong_token_is_auth_failed() {
    let mut h = Harness::new();
    let (conn, frames) = hello_as(&mut h, json!("nope"), Some("tel-1"));
    assert_fatal(&h, conn, &frames, "auth_failed");
    let (conn, frames) = hello_as(&mut h, json!(format!("{TOKEN}x")), Some("tel-1"));
    assert_fatal(&h, conn, &frames, "auth_failed");
}

#[test]
fn bound_token_may_connect_only_as_its_device() {
    // decisions H2, first way
    let mut h = Harness::with_config(config());
    let (_, frames) = hello_as(&mut h, json!("bound-token-1"), Some("tel-1"));
    assert_eq!(frames[0]["t"], "ready");
    let (conn, frames) = hello_as(&mut h, json!("bound-token-1"), Some("tel-2"));
    assert_fatal(&h, conn, &frames, "forbidden");
}

#[test]
fn bound_device_may_be_claimed_only_with_its_token() {
    // decisions H2, second way: whether the other token is the app token or a service token
    let mut h = Harness::with_config(config());
    let (conn, frames) = hello_as(&mut h, json!(TOKEN), Some("tel-1"));
    assert_fatal(&h, conn, &frames, "forbidden");
    let (conn, frames) = hello_as(&mut h, json!("service-token"), Some("tel-1"));
    assert_fatal(&h, conn, &frames, "forbidden");
    let (_, frames) = hello_as(&mut h, json!(TOKEN), Some("tel-2"));
    assert_eq!(frames[0]["t"], "ready", "unbound ids stay open to the app token");
}

#[test]
fn devices_outside_the_allowed_list_are_auth_failed() {
    // decisions H3, including generated ids
    let mut c = Config::new(TOKEN);
    c.allowed_devices = vec!["tel-1".into()];
    let mut h = Harness::with_config(c);
    let (_, frames) = hello_as(&mut h, json!(TOKEN), Some("tel-1"));
    assert_eq!(frames[0]["t"], "ready");
    let (conn, frames) = hello_as(&mut h, json!(TOKEN), Some("tel-9"));
    assert_fatal(&h, conn, &frames, "auth_failed");
    let (conn, frames) = hello_as(&mut h, json!(TOKEN), None);
    assert_fatal(&h, conn, &frames, "auth_failed");
}

#[test]
fn missing_device_id_gets_a_fresh_generated_one() {
    // decisions H4
    let mut h = Harness::new();
    let (_, a) = hello_as(&mut h, json!(TOKEN), None);
    let (_, b) = hello_as(&mut h, json!(TOKEN), Some(""));
    let ids: Vec<String> = [&a, &b]
        .iter()
        .map(|f| f[0]["device"]["id"].as_str().unwrap().to_owned())
        .collect();
    for id in &ids {
        let hex = id.strip_prefix("dev-").expect("dev- prefix");
        assert_eq!(hex.len(), 16);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
    assert_ne!(ids[0], ids[1], "new on each connection");
    assert_eq!(a[0]["session"], format!("mobile:{}", ids[0]));
}

#[test]
fn reconnect_replaces_the_old_connection() {
    // decisions H5
    let mut h = Harness::new();
    let old = h.connect("tel-1");
    h.send(
        old,
        json!({"t":"media","id":"up","kind":"document","data":b64(b"part0"),"part":0,"parts":2}),
    );
    assert_eq!(h.gw.upload_bytes(&DeviceId::from("tel-1")), 5);
    let new = h.connect("tel-1");
    assert_eq!(h.closed[&old], (1000, "replaced".to_owned()));
    assert_eq!(
        h.gw.upload_bytes(&DeviceId::from("tel-1")),
        0,
        "the old connection's uploads are dropped"
    );
    // Output is routed by device: it reaches the new connection.
    h.agent(AgentCommand::Reply {
        device: DeviceId::from("tel-1"),
        message: MessageId::from("m1"),
        text: "hi".into(),
        done: true,
    });
    assert!(h.take(new).iter().any(|f| f["t"] == "message"));
    // Closing the replaced connection later does not take the device offline.
    h.close(old);
    assert!(h.gw.is_online(&DeviceId::from("tel-1")));
}

#[test]
fn ready_is_exactly_as_the_spec_says() {
    // decisions H6
    let mut h = Harness::new();
    let conn = h.open();
    h.send(conn, json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1","name":"Телефон","platform":"android","app_version":"1.0.0"},"user":{"id":"u-1","name":"Евгений"}}));
    let frames = h.take(conn);
    assert_eq!(
        frames[0],
        json!({"t":"ready","v":1,"session":"mobile:tel-1","device":{"id":"tel-1","name":"Телефон"},"avatar_url":"",
            "capabilities":{"text":true,"voice":true,"typing":true,"avatar_states":["idle","thinking","speaking"],
            "media_in":["image","video","document","audio"],"media_out":["image","voice","video","document","animation"],
            "prompts":["exec_approval","slash_confirm","clarify"],"edit":true,"max_media_bytes":8388608,"max_text_chars":12000}})
    );
    assert_eq!(frames.len(), 1);
}

#[test]
fn ready_carries_the_configured_avatar_url() {
    let mut c = Config::new(TOKEN);
    c.avatar_url = "https://agent.example.com/avatar/".into();
    let mut h = Harness::with_config(c);
    let (_, frames) = hello_as(&mut h, json!(TOKEN), Some("tel-1"));
    assert_eq!(frames[0]["avatar_url"], "https://agent.example.com/avatar/");
}

#[test]
fn device_fields_are_truncated_to_120_characters() {
    // decisions G8
    let mut h = Harness::new();
    let conn = h.open();
    let long = "d".repeat(300);
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":long,"name":long}}),
    );
    let ready = &h.take(conn)[0];
    assert_eq!(ready["device"]["id"].as_str().unwrap().len(), 120);
    assert_eq!(ready["device"]["name"].as_str().unwrap().len(), 120);
}

#[test]
fn user_info_reaches_the_agent() {
    let mut h = Harness::new();
    let conn = h.open();
    h.send(
        conn,
        json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"user":{"id":"u-1","name":"Ann"}}),
    );
    h.send(conn, json!({"t":"text","id":"1","text":"hi"}));
    match &h.take_events()[0] {
        hermes_mobile::AgentEvent::MessageReceived { user, .. } => {
            assert_eq!((user.id.as_str(), user.name.as_str()), ("u-1", "Ann"))
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn config_debug_never_shows_tokens() {
    let c = config();
    let shown = format!("{c:?}");
    assert!(!shown.contains(TOKEN) && !shown.contains("bound-token-1") && !shown.contains("service-token"));
}
