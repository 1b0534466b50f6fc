//! decisions G1–G10: parsing, validation, errors and fatality.
mod common;
use common::*;
use serde_json::json;

#[test]
fn type_is_lower_cased() {
    // decisions G2
    let mut h = Harness::new();
    let conn = h.open();
    h.send(conn, json!({"t":"HELLO","token":TOKEN,"device":{"id":"tel-1"}}));
    assert_eq!(h.take(conn)[0]["t"], "ready");
    h.send(conn, json!({"t":"PiNg","ts":1}));
    assert_eq!(h.take(conn)[0]["t"], "pong");
}

#[test]
fn unknown_type_after_hello_is_ignored_without_reply() {
    // decisions G3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"sticker","id":"x"}));
    assert!(h.take(conn).is_empty());
    assert!(!h.closed.contains_key(&conn));
}

#[test]
fn anything_but_hello_first_is_fatal_bad_frame() {
    // decisions G4, G10
    for first in [
        br#"{"t":"ping"}"#.to_vec(),
        br#"{"t":"sticker"}"#.to_vec(),
        b"not json".to_vec(),
        br#"[1,2]"#.to_vec(),
        br#""hello""#.to_vec(),
        br#"{"t":"text","id":"1","text":"hi"}"#.to_vec(),
        vec![0xff, 0xfe],
    ] {
        let mut h = Harness::new();
        let conn = h.open();
        h.send_raw(conn, &first);
        let frames = h.take(conn);
        let err = error_of(&frames);
        assert_eq!(err["code"], "bad_frame", "for {first:?}");
        assert_eq!(err["fatal"], true);
        assert_eq!(h.closed[&conn], (1008, "bad_frame".to_owned()));
    }
}

#[test]
fn shape_errors_are_bad_frame_and_not_fatal() {
    // decisions G5, G10
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    for frame in [
        json!({"id":"1","text":"no type"}),
        json!({"t":5}),
        json!({"t":"text","id":"1"}),
        json!({"t":"text","id":"1","text":5}),
        json!({"t":"text","id":7,"text":"hi"}),
        json!({"t":"media","id":"m","kind":"image","data":"AAAA","parts":"2"}),
        json!({"t":"media","id":"m","kind":"image"}),
        json!({"t":"prompt","option_id":"once"}),
        json!({"t":"text","id":"1","text":"   "}),
    ] {
        h.send(conn, frame.clone());
        let frames = h.take(conn);
        let err = error_of(&frames);
        assert_eq!(err["code"], "bad_frame", "for {frame}");
        assert_eq!(err["fatal"], false);
        assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    assert!(!h.closed.contains_key(&conn));
}

#[test]
fn unknown_fields_and_fields_of_other_types_are_ignored() {
    // decisions G5: `text` is not a field of ping, so its type does not matter there.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"ping","text":5,"extra":{"a":[1]}}));
    assert_eq!(Harness::types(&h.take(conn)), ["pong"]);
    h.send(
        conn,
        json!({"t":"text","id":"1","text":"hi","future_field":true,"parts":"x"}),
    );
    let frames = h.take(conn);
    assert!(frames.iter().all(|f| f["t"] != "error"), "{frames:?}");
}

#[test]
fn binary_messages_are_read_as_json() {
    // decisions G6: the harness hands bytes either way; invalid UTF-8 is bad_frame.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let mut bad = br#"{"t":"text","id":"1","text":""#.to_vec();
    bad.extend_from_slice(&[0xc3, 0x28]);
    bad.extend_from_slice(br#""}"#);
    h.send_raw(conn, &bad);
    assert_eq!(error_of(&h.take(conn))["code"], "bad_frame");
    assert!(!h.closed.contains_key(&conn));
}

#[test]
fn oversized_frame_is_fatal_too_big() {
    // decisions G7
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let other = h.connect("tel-2");
    h.gw.handle_frame_too_big(h.now, conn);
    h.advance_ms(0); // drains the outputs through the harness
    let frames = h.take(conn);
    assert_eq!(
        (error_of(&frames)["code"].as_str(), error_of(&frames)["fatal"].as_bool()),
        (Some("too_big"), Some(true))
    );
    assert_eq!(h.closed[&conn], (1008, "too_big".to_owned()));
    h.send(other, json!({"t":"ping"}));
    assert_eq!(
        Harness::types(&h.take(other)),
        ["pong"],
        "other connections keep working"
    );
}

#[test]
fn text_over_12000_characters_is_too_big_and_not_fatal() {
    // decisions G1, G7: characters, not bytes
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let ok = "я".repeat(12_000);
    h.send(conn, json!({"t":"text","id":"a","text":ok}));
    assert!(h.take(conn).iter().all(|f| f["t"] != "error"));
    h.send(conn, json!({"t":"text","id":"b","text":"я".repeat(12_001)}));
    let frames = h.take(conn);
    let err = error_of(&frames);
    assert_eq!(err["code"], "too_big");
    assert_eq!(err["fatal"], false);
    assert_eq!(err["id"], "b", "decisions G9: the error carries the frame's id");
}

#[test]
fn ids_are_truncated_to_128_characters() {
    // decisions G8
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let long = "i".repeat(200);
    h.send(conn, json!({"t":"text","id":long,"text":"hi"}));
    match &h.take_events()[0] {
        hermes_mobile::AgentEvent::MessageReceived { id, .. } => assert_eq!(id.chars().count(), 128),
        e => panic!("{e:?}"),
    }
    // The truncated id is the dedup key: a different 200-char id with the same prefix is a repeat.
    let other = format!("{}{}", "i".repeat(128), "x".repeat(72));
    h.send(conn, json!({"t":"text","id":other,"text":"hi"}));
    assert!(h.take_events().is_empty());
}

#[test]
fn error_frames_never_echo_content() {
    // decisions G9
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"audio","id":"a1","format":"mp3","data":"c2VjcmV0"}));
    let frames = h.take(conn);
    let err = error_of(&frames);
    assert_eq!(err["code"], "unsupported_frame");
    assert_eq!(err["id"], "a1");
    let keys: Vec<&String> = err.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["code", "fatal", "id", "message", "t"]);
}

#[test]
fn repeated_hello_is_bad_frame_but_not_fatal() {
    // decisions G10
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.hello(conn, "tel-1");
    let frames = h.take(conn);
    assert_eq!(error_of(&frames)["code"], "bad_frame");
    assert_eq!(error_of(&frames)["fatal"], false);
    assert!(!h.closed.contains_key(&conn));
}

#[test]
fn null_optional_fields_count_as_absent() {
    // docs/decisions-local.md L3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(
        conn,
        json!({"t":"media","id":"m","kind":"document","data":"aGk=","mime":null,"filename":"a.pdf","caption":null}),
    );
    assert!(h.take(conn).iter().all(|f| f["t"] != "error"));
    match &h.take_events()[0] {
        hermes_mobile::AgentEvent::MessageReceived { file: Some(f), .. } => assert_eq!(f.mime, "application/pdf"),
        e => panic!("{e:?}"),
    }
}
