//! Text and voice from the app; idempotency (decisions I1, I2).
mod common;
use common::*;
use hermes_mobile::agent::Audio;
use hermes_mobile::wire::client::AudioFormat;
use hermes_mobile::{AgentEvent, DeviceId, Time};
use serde_json::json;

#[test]
fn text_reaches_the_agent_and_starts_the_turn() {
    // decisions M3 step 1
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"text","id":"m1","text":"hello"}));
    assert_eq!(
        h.take(conn),
        vec![json!({"t":"avatar","state":"thinking"}), json!({"t":"typing"})]
    );
    match &h.take_events()[..] {
        [AgentEvent::MessageReceived {
            device,
            id,
            text,
            audio: None,
            file: None,
            redelivered: false,
            ..
        }] => {
            assert_eq!(
                (device.as_str(), id.as_str(), text.as_deref()),
                ("tel-1", "m1", Some("hello"))
            );
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn duplicate_text_is_dropped_silently_within_600_s() {
    // decisions I1, I2
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"text","id":"m1","text":"hello"}));
    h.take(conn);
    h.take_events();
    h.advance_to(Time::from_millis(599_999));
    h.send(conn, json!({"t":"text","id":"m1","text":"hello"}));
    assert!(h.take(conn).is_empty(), "no error, no avatar");
    assert!(h.take_events().is_empty());
    h.advance_to(Time::from_secs(600));
    h.send(conn, json!({"t":"text","id":"m1","text":"hello"}));
    assert_eq!(h.take_events().len(), 1, "after the window the id is new again");
}

#[test]
fn dedup_survives_reconnects_and_is_per_device() {
    // decisions I1: the key is <device id>:<id>
    let mut h = Harness::new();
    let a = h.connect("tel-1");
    h.send(a, json!({"t":"text","id":"m1","text":"hello"}));
    let a2 = h.connect("tel-1");
    h.send(a2, json!({"t":"text","id":"m1","text":"hello"}));
    let b = h.connect("tel-2");
    h.send(b, json!({"t":"text","id":"m1","text":"hello"}));
    let devices: Vec<String> = h.take_events().iter().map(|e| e.device().to_string()).collect();
    assert_eq!(devices, ["tel-1", "tel-2"]);
}

#[test]
fn text_audio_and_media_share_one_namespace() {
    // decisions I1
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"text","id":"x","text":"hello"}));
    h.send(conn, json!({"t":"audio","id":"x","format":"wav","data":b64(b"RIFF")}));
    h.send(conn, json!({"t":"media","id":"x","kind":"image","data":b64(b"png")}));
    assert_eq!(h.take_events().len(), 1);
}

#[test]
fn dedup_window_holds_4000_entries_per_device() {
    // decisions I1: oldest evicted first
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    for i in 0..4001 {
        h.send(conn, json!({"t":"text","id":format!("m{i}"),"text":"x"}));
    }
    h.take_events();
    h.send(conn, json!({"t":"text","id":"m0","text":"x"}));
    assert_eq!(h.take_events().len(), 1, "m0 was evicted");
    h.send(conn, json!({"t":"text","id":"m4000","text":"x"}));
    assert!(h.take_events().is_empty(), "m4000 is still remembered");
}

#[test]
fn audio_is_decoded_with_its_recognized_text() {
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(
        conn,
        json!({"t":"audio","id":"a1","format":"OGG","data":b64(b"OggS-voice"),"text":"turn on the lights"}),
    );
    match &h.take_events()[..] {
        [AgentEvent::MessageReceived {
            audio: Some(Audio { format, data, .. }),
            text,
            ..
        }] => {
            assert_eq!(*format, AudioFormat::Ogg, "decisions G2: format is lower-cased");
            assert_eq!(data, b"OggS-voice");
            assert_eq!(text.as_deref(), Some("turn on the lights"));
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(h.take(conn).len(), 2, "thinking + typing");
}

#[test]
fn audio_format_must_be_wav_or_ogg() {
    // decisions G3: unsupported_frame is for audio.format
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"audio","id":"a1","format":"mp3","data":b64(b"x")}));
    let frames = h.take(conn);
    assert_eq!(error_of(&frames)["code"], "unsupported_frame");
    assert_eq!(error_of(&frames)["fatal"], false);
}

#[test]
fn audio_over_8_mib_decoded_is_too_big_exactly_at_the_limit() {
    // decisions G7
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let limit = 8 * 1024 * 1024;
    h.send(
        conn,
        json!({"t":"audio","id":"ok","format":"wav","data":b64(&vec![1u8; limit])}),
    );
    assert!(h.take(conn).iter().all(|f| f["t"] != "error"));
    h.send(
        conn,
        json!({"t":"audio","id":"big","format":"wav","data":b64(&vec![1u8; limit + 1])}),
    );
    let frames = h.take(conn);
    assert_eq!(error_of(&frames)["code"], "too_big");
    assert_eq!(error_of(&frames)["id"], "big");
    assert!(!h.closed.contains_key(&conn));
}

#[test]
fn invalid_or_empty_audio_is_bad_frame() {
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"audio","id":"a","format":"wav","data":"***"}));
    assert_eq!(error_of(&h.take(conn))["code"], "bad_frame");
    h.send(conn, json!({"t":"audio","id":"b","format":"wav","data":""}));
    assert_eq!(error_of(&h.take(conn))["code"], "bad_frame");
    // A rejected frame is not recorded: the corrected retry with the same id goes through.
    h.send(conn, json!({"t":"audio","id":"a","format":"wav","data":b64(b"RIFF")}));
    assert_eq!(h.take_events().len(), 1);
}

#[test]
fn typing_from_the_app_tells_the_agent_and_sends_nothing_back() {
    // decisions M3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"typing"}));
    assert!(h.take(conn).is_empty());
    assert_eq!(
        h.take_events(),
        vec![AgentEvent::UserTyping {
            device: DeviceId::from("tel-1")
        }]
    );
}

#[test]
fn ack_is_ignored() {
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"ack","id":"m-1"}));
    assert!(h.take(conn).is_empty());
    assert!(h.take_events().is_empty());
}

#[test]
fn ping_echoes_ts_as_the_same_json_value() {
    // decisions K1
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send_raw(conn, br#"{"t":"ping","ts":1733140000123.50}"#);
    h.send_raw(conn, br#"{"t":"ping","ts":{"a":"b"}}"#);
    h.send_raw(conn, br#"{"t":"ping"}"#);
    let frames = h.take(conn);
    assert_eq!(frames[0], json!({"t":"pong","ts":1733140000123.5}));
    assert_eq!(frames[1], json!({"t":"pong","ts":{"a":"b"}}));
    assert_eq!(frames[2], json!({"t":"pong"}), "no ts, no ts");
}

#[test]
fn pong_ts_is_byte_for_byte() {
    // decisions K1: the raw JSON text is echoed, so 1.50 stays 1.50
    let mut gw = hermes_mobile::Gateway::new(hermes_mobile::Config::new(TOKEN));
    let conn = hermes_mobile::ConnId(1);
    gw.handle_open(Time::ZERO, conn, Default::default());
    gw.handle_message(
        Time::ZERO,
        conn,
        format!(r#"{{"t":"hello","token":"{TOKEN}"}}"#).as_bytes(),
    );
    while gw.poll_output().is_some() {}
    gw.handle_message(Time::ZERO, conn, br#"{"t":"ping","ts":1.50}"#);
    match gw.poll_output() {
        Some(hermes_mobile::Output::Send { frame, .. }) => assert_eq!(frame, r#"{"t":"pong","ts":1.50}"#),
        o => panic!("{o:?}"),
    }
}
