//! Property tests: reassembly, memory accounting, splitting, and a parser that never panics.
mod common;
use common::*;
use hermes_mobile::chunking::split_reply;
use hermes_mobile::wire::parse_client_frame;
use hermes_mobile::{AgentEvent, DeviceId};
use proptest::prelude::*;
use serde_json::json;

/// Cuts `data` into `parts` pieces at the given (sorted, deduplicated) points.
fn cut(data: &[u8], mut points: Vec<usize>) -> Vec<Vec<u8>> {
    points.retain(|p| *p > 0 && *p < data.len());
    points.sort_unstable();
    points.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for p in points {
        pieces.push(data[start..p].to_vec());
        start = p;
    }
    pieces.push(data[start..].to_vec());
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// decisions U4: any chunking, any order, same bytes; accounting back to zero after.
    #[test]
    fn any_chunking_and_order_reassembles(
        data in proptest::collection::vec(any::<u8>(), 0..4096),
        points in proptest::collection::vec(0usize..4096, 1..40),
        order_seed in any::<u64>(),
        repeat_first in any::<bool>(),
    ) {
        let pieces = cut(&data, points);
        let parts = pieces.len() as u32;
        let mut order: Vec<usize> = (0..pieces.len()).collect();
        // A deterministic shuffle from the seed.
        let mut s = order_seed | 1;
        for i in (1..order.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            order.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let mut h = Harness::new();
        let conn = h.connect("tel-1");
        for (n, &i) in order.iter().enumerate() {
            h.send(conn, json!({"t":"media","id":"f","kind":"document","part":i,"parts":parts,"data":b64(&pieces[i])}));
            if repeat_first && n == 0 && parts > 1 {
                h.send(conn, json!({"t":"media","id":"f","kind":"document","part":i,"parts":parts,"data":b64(b"junk")}));
            }
        }
        let events = h.take_events();
        match &events[..] {
            [AgentEvent::MessageReceived { file: Some(f), .. }] => prop_assert_eq!(&f.data, &data),
            e => prop_assert!(false, "expected one file, got {:?}", e),
        }
        prop_assert!(h.take(conn).iter().all(|f| f["t"] != "error"));
        prop_assert_eq!(h.gw.upload_bytes(&DeviceId::from("tel-1")), 0);
        prop_assert_eq!(h.gw.stats().open_uploads, 0);
    }

    /// U3, U5, disconnect: whatever happens to unfinished uploads, accounting returns to zero.
    #[test]
    fn accounting_returns_to_zero_after_drop_or_disconnect(
        sizes in proptest::collection::vec(0usize..200_000, 1..12),
        end in 0u8..3,
    ) {
        let mut h = Harness::new();
        let conn = h.connect("tel-1");
        let mut expected = 0usize;
        for (i, size) in sizes.iter().enumerate() {
            h.send(conn, json!({"t":"media","id":format!("u{i}"),"kind":"image","part":0,"parts":2,"data":b64(&vec![0u8; *size])}));
            let errors = h.take(conn).into_iter().filter(|f| f["t"] == "error").count();
            if errors == 0 { expected += size; }
            prop_assert_eq!(h.gw.upload_bytes(&DeviceId::from("tel-1")), expected);
            prop_assert!(expected <= 8 * 1024 * 1024);
            prop_assert!(h.gw.stats().open_uploads <= 8);
        }
        match end {
            0 => h.close(conn),
            1 => h.advance_to(hermes_mobile::Time::from_secs(120)),
            _ => { h.connect("tel-1"); }
        }
        prop_assert_eq!(h.gw.stats().upload_bytes, 0);
        prop_assert_eq!(h.gw.stats().open_uploads, 0);
    }

    /// decisions M1: join gives the text; no piece over the limit; never empty pieces but one.
    #[test]
    fn split_then_join_is_identity(text in "(?s)[a-z \\n日本語é]{0,3000}", limit in 1usize..400) {
        let pieces = split_reply(&text, limit);
        prop_assert_eq!(pieces.concat(), text.clone());
        for p in &pieces {
            prop_assert!(p.chars().count() <= limit);
        }
        if text.is_empty() { prop_assert_eq!(pieces.len(), 1); }
        else { prop_assert!(pieces.iter().all(|p| !p.is_empty())); }
    }

    #[test]
    fn parser_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_client_frame(&bytes);
    }

    #[test]
    fn parser_never_panics_on_json(v in arb_json()) {
        let _ = parse_client_frame(v.to_string().as_bytes());
    }

    #[test]
    fn parser_never_panics_on_frame_shaped_json(
        t in prop_oneof![Just("hello"), Just("text"), Just("audio"), Just("media"), Just("prompt"), Just("deliver"), Just("ping"), Just("ack"), Just("typing")],
        fields in proptest::collection::vec((prop_oneof![Just("id"), Just("token"), Just("text"), Just("format"), Just("data"), Just("kind"), Just("part"), Just("parts"), Just("prompt_id"), Just("option_id"), Just("device"), Just("user"), Just("media"), Just("target"), Just("ts"), Just("mime"), Just("filename"), Just("caption")], arb_json()), 0..8),
    ) {
        let mut obj = serde_json::Map::new();
        obj.insert("t".into(), json!(t));
        for (k, v) in fields { obj.insert(k.to_owned(), v); }
        let _ = parse_client_frame(serde_json::Value::Object(obj).to_string().as_bytes());
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,20}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map("[a-z_]{0,8}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
