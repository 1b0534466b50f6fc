//! decisions U1–U6 and I2: uploads from the app.
mod common;
use common::*;
use hermes_mobile::wire::UploadKind;
use hermes_mobile::{AgentEvent, DeviceId, Time};
use serde_json::{json, Value};

const MIB: usize = 1024 * 1024;

fn chunk(id: &str, part: u32, parts: u32, data: &[u8]) -> Value {
    json!({"t":"media","id":id,"kind":"document","filename":"report.pdf","part":part,"parts":parts,"data":b64(data)})
}

fn file_of(events: &[AgentEvent]) -> &hermes_mobile::uploads::ReceivedFile {
    match events {
        [AgentEvent::MessageReceived { file: Some(f), .. }] => f,
        e => panic!("expected one file, got {e:?}"),
    }
}

fn tel1() -> DeviceId {
    DeviceId::from("tel-1")
}

#[test]
fn single_frame_file_is_delivered_with_guessed_mime() {
    // decisions U2 (parts:1 is not an open upload), U6
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(
        conn,
        json!({"t":"media","id":"p1","kind":"IMAGE","filename":"cat.JPG","data":b64(b"jpegbytes"),"caption":"my cat"}),
    );
    let events = h.take_events();
    let f = file_of(&events);
    assert_eq!(
        (f.kind, f.mime.as_str(), f.filename.as_str()),
        (UploadKind::Image, "image/jpeg", "cat.JPG")
    );
    assert_eq!(f.data, b"jpegbytes");
    assert_eq!(f.caption.as_deref(), Some("my cat"));
    assert_eq!(h.gw.stats().open_uploads, 0);
}

#[test]
fn chunks_reassemble_in_any_order_and_metadata_comes_from_the_first_received() {
    // decisions U4
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"media","id":"f","kind":"document","filename":"b.txt","mime":"text/x-first","part":2,"parts":3,"data":b64(b"CC")}));
    h.send(
        conn,
        json!({"t":"media","id":"f","kind":"image","filename":"ignored.png","part":0,"parts":3,"data":b64(b"AAAA")}),
    );
    assert!(h.take_events().is_empty());
    assert_eq!(h.gw.upload_bytes(&tel1()), 6);
    h.send(conn, chunk("f", 1, 3, b"BBB"));
    let events = h.take_events();
    let f = file_of(&events);
    assert_eq!(f.data, b"AAAABBBCC");
    assert_eq!(
        (f.kind, f.mime.as_str(), f.filename.as_str()),
        (UploadKind::Document, "text/x-first", "b.txt")
    );
    assert_eq!(h.gw.upload_bytes(&tel1()), 0);
    // The completed upload starts the turn (M3).
    assert_eq!(Harness::types(&h.take(conn)), ["avatar", "typing"]);
}

#[test]
fn repeated_chunk_of_an_unfinished_upload_is_ignored() {
    // decisions U4
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("f", 0, 2, b"AA"));
    h.send(conn, chunk("f", 0, 2, b"XX"));
    assert!(h.take(conn).is_empty());
    h.send(conn, chunk("f", 1, 2, b"BB"));
    assert_eq!(file_of(&h.take_events()).data, b"AABB");
}

#[test]
fn chunks_of_a_completed_file_are_dropped_silently() {
    // decisions I2
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("f", 0, 2, b"AA"));
    h.send(conn, chunk("f", 1, 2, b"BB"));
    h.take_events();
    h.take(conn);
    h.send(conn, chunk("f", 0, 2, b"AA"));
    assert!(h.take(conn).is_empty());
    assert_eq!(h.gw.stats().open_uploads, 0, "opens no buffer");
}

#[test]
fn a_ninth_open_upload_is_too_big() {
    // decisions U3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    for i in 0..8 {
        h.send(conn, chunk(&format!("u{i}"), 0, 2, b"x"));
    }
    assert!(h.take(conn).is_empty());
    h.send(conn, chunk("u8", 0, 2, b"x"));
    let frames = h.take(conn);
    assert_eq!(error_of(&frames)["code"], "too_big");
    assert_eq!(error_of(&frames)["id"], "u8");
    assert_eq!(error_of(&frames)["fatal"], false);
    assert_eq!(h.gw.stats().open_uploads, 8);
    // Single-frame files are not open uploads and still go through.
    h.send(conn, json!({"t":"media","id":"one","kind":"image","data":b64(b"x")}));
    assert_eq!(h.take_events().len(), 1);
}

#[test]
fn open_uploads_over_8_mib_in_total_are_too_big_and_dropped() {
    // decisions U2, U3: decoded bytes count; the offending upload's buffer is dropped
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("a", 0, 2, &vec![0u8; 5 * MIB]));
    h.send(conn, chunk("b", 0, 2, &vec![0u8; 2 * MIB]));
    h.send(conn, chunk("b", 1, 2, &[]));
    h.take_events();
    h.send(conn, chunk("c", 0, 2, &vec![0u8; 3 * MIB]));
    h.send(conn, chunk("c", 1, 2, &vec![0u8; MIB]));
    let frames = h.take(conn);
    let err = error_of(&frames);
    assert_eq!((err["code"].as_str(), err["id"].as_str()), (Some("too_big"), Some("c")));
    assert_eq!(h.gw.upload_bytes(&tel1()), 5 * MIB, "c's buffer is gone, a's stays");
    assert_eq!(h.gw.stats().open_uploads, 1);
}

#[test]
fn a_file_exactly_8_mib_passes_and_one_byte_more_is_too_big() {
    // decisions U3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("ok", 0, 2, &vec![1u8; 4 * MIB]));
    h.send(conn, chunk("ok", 1, 2, &vec![2u8; 4 * MIB]));
    assert_eq!(file_of(&h.take_events()).data.len(), 8 * MIB);
    h.take(conn);
    h.send(conn, chunk("big", 0, 2, &vec![1u8; 4 * MIB]));
    h.send(conn, chunk("big", 1, 2, &vec![2u8; 4 * MIB + 1]));
    assert_eq!(error_of(&h.take(conn))["code"], "too_big");
    assert_eq!(h.gw.upload_bytes(&tel1()), 0);
    h.send(
        conn,
        json!({"t":"media","id":"single","kind":"image","data":b64(&vec![0u8; 8 * MIB + 1])}),
    );
    assert_eq!(error_of(&h.take(conn))["code"], "too_big");
}

#[test]
fn part_numbers_out_of_range_are_bad_frame() {
    // decisions U3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    for (part, parts) in [(0i64, 0i64), (0, 2049), (-1, 2), (2, 2), (5, 3)] {
        h.send(
            conn,
            json!({"t":"media","id":"f","kind":"image","part":part,"parts":parts,"data":"AA=="}),
        );
        let frames = h.take(conn);
        assert_eq!(error_of(&frames)["code"], "bad_frame", "part {part} of {parts}");
    }
    h.send(
        conn,
        json!({"t":"media","id":"f","kind":"image","part":2047,"parts":2048,"data":"AA=="}),
    );
    assert!(h.take(conn).is_empty(), "2048 parts is the ceiling, not over it");
    assert_eq!(h.gw.stats().open_uploads, 1);
}

#[test]
fn parts_differing_from_the_first_chunk_drops_the_upload() {
    // decisions U3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("f", 0, 3, b"AAA"));
    h.send(conn, chunk("f", 1, 4, b"BBB"));
    assert_eq!(error_of(&h.take(conn))["code"], "bad_frame");
    assert_eq!(h.gw.upload_bytes(&tel1()), 0);
}

#[test]
fn invalid_base64_drops_the_upload() {
    // decisions U3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("f", 0, 2, b"AAA"));
    h.send(
        conn,
        json!({"t":"media","id":"f","kind":"document","part":1,"parts":2,"data":"@@@"}),
    );
    assert_eq!(error_of(&h.take(conn))["code"], "bad_frame");
    assert_eq!(h.gw.stats().open_uploads, 0);
}

#[test]
fn unsupported_kind_is_unsupported_frame() {
    // decisions G3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"media","id":"f","kind":"voice","data":"AA=="}));
    assert_eq!(error_of(&h.take(conn))["code"], "unsupported_frame");
}

#[test]
fn stalled_upload_is_dropped_after_120_s_without_a_chunk() {
    // decisions U5
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("f", 0, 3, b"AAA"));
    h.advance_to(Time::from_secs(100));
    h.send(conn, chunk("f", 1, 3, b"BBB"));
    h.advance_to(Time::from_millis(219_999));
    assert_eq!(h.gw.upload_bytes(&tel1()), 6, "the second chunk restarted the clock");
    h.advance_to(Time::from_secs(220));
    assert_eq!(h.gw.upload_bytes(&tel1()), 0);
    assert_eq!(h.gw.stats().open_uploads, 0);
    assert!(!h.closed.contains_key(&conn), "the connection stays");
}

#[test]
fn a_repeated_chunk_does_not_keep_a_stalled_upload_alive() {
    // decisions U5 with U4: only a *new* chunk is progress (issue 8 #7).
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("f", 0, 3, b"AAA"));
    h.advance_to(Time::from_secs(100));
    h.send(conn, chunk("f", 0, 3, b"AAA"));
    h.advance_to(Time::from_secs(120));
    assert_eq!(h.gw.upload_bytes(&tel1()), 0, "dropped 120 s after its last new chunk");
    assert_eq!(h.gw.stats().open_uploads, 0);
}

#[test]
fn line_wrapped_base64_just_under_the_limit_is_not_too_big() {
    // decisions L11 (issue 8 #10): line breaks do not count toward the 8 MiB.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let data = vec![7u8; 8 * MIB - 64 * 1024];
    let wrapped: String = b64(&data)
        .as_bytes()
        .chunks(76)
        .map(|l| format!("{}\n", std::str::from_utf8(l).unwrap()))
        .collect();
    h.send(conn, json!({"t":"audio","id":"a1","format":"wav","data":wrapped}));
    let frames = h.take(conn);
    assert!(
        frames.iter().all(|f| f["t"] != "error"),
        "{:?}",
        Harness::types(&frames)
    );
    h.send(
        conn,
        json!({"t":"media","id":"m1","kind":"document","filename":"x.bin","data":wrapped}),
    );
    let frames = h.take(conn);
    assert!(
        frames.iter().all(|f| f["t"] != "error"),
        "{:?}",
        Harness::types(&frames)
    );
}

#[test]
fn buffers_are_freed_on_disconnect() {
    // protocol-v1.md "Memory limits": released when the device disconnects
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, chunk("f", 0, 2, &vec![0u8; MIB]));
    assert_eq!(h.gw.stats().upload_bytes, MIB);
    h.close(conn);
    assert_eq!(h.gw.stats().upload_bytes, 0);
    assert_eq!(h.gw.stats().open_uploads, 0);
}

#[test]
fn caption_over_12000_characters_is_too_big() {
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(
        conn,
        json!({"t":"media","id":"f","kind":"image","data":"AA==","caption":"c".repeat(12_001)}),
    );
    assert_eq!(error_of(&h.take(conn))["code"], "too_big");
}

#[test]
fn filename_is_truncated_to_200_characters_and_sanitized_for_disk() {
    // decisions G8, U6
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let name = format!("../{}.txt", "n".repeat(300));
    h.send(
        conn,
        json!({"t":"media","id":"f","kind":"document","data":"AA==","filename":name}),
    );
    let events = h.take_events();
    let f = file_of(&events);
    assert_eq!(f.filename.chars().count(), 200);
    let safe = hermes_mobile::mime::sanitize_filename(&f.filename);
    assert!(!safe.contains('/') && !safe.contains(".."));
}

#[test]
fn audio_upload_caption_is_its_recognized_text() {
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(
        conn,
        json!({"t":"media","id":"v","kind":"audio","filename":"memo.ogg","data":"AA==","caption":"call mom"}),
    );
    match &h.take_events()[..] {
        [AgentEvent::MessageReceived {
            text, file: Some(f), ..
        }] => {
            assert_eq!(text.as_deref(), Some("call mom"));
            assert_eq!(f.mime, "audio/ogg");
        }
        e => panic!("{e:?}"),
    }
}
