//! docs/protocol-v1.schema.json itself (issue 19): it is a draft 2020-12 schema, it names
//! exactly the frames the code reads and writes, and it refuses what the protocol refuses.
//! (That every frame the other integration tests exchange matches it is checked in
//! common/schema.rs, for all of them at once.)

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::schema::{document, validator};
use serde_json::{json, Value};

/// The `t` of every frame under `$defs/<union>`.
fn schema_types(union: &str) -> BTreeSet<String> {
    let doc = document();
    doc["$defs"][union]["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("$defs/{union} has no oneOf"))
        .iter()
        .map(|r| {
            let name = r["$ref"].as_str().unwrap().trim_start_matches("#/$defs/");
            doc["$defs"][name]["properties"]["t"]["const"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The frame types a `match` in `file` after `after` names: `"type" => …` arms.
fn matched_types(file: &str, after: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(after).unwrap_or_else(|| panic!("{after} not in {file}"));
    let body = &text[start..];
    let end = body.find("\n}\n").unwrap_or(body.len());
    body[..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix('"'))
        .filter_map(|l| l.split_once("\" =>").map(|(t, _)| t))
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every `t` the core encodes (`encode("tag", …)`, in any file of src/).
fn encoded_types() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (at, _) in text.match_indices("encode(") {
                    let rest = text[at + "encode(".len()..].trim_start();
                    if let Some((tag, _)) = rest.strip_prefix('"').and_then(|r| r.split_once('"')) {
                        out.insert(tag.to_owned());
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../src"), &mut out);
    out
}

#[test]
fn the_schema_names_every_frame_the_gateway_reads_and_writes() {
    let reads = matched_types("src/wire/client.rs", "fn validate<'a>(raw: &RawFrame<'a>)");
    let writes = matched_types("src/wire/server.rs", "pub fn parse_server_frame");
    assert!(reads.len() >= 12 && writes.len() >= 13, "{reads:?} {writes:?}");
    assert_eq!(
        schema_types("ClientFrame"),
        reads,
        "$defs/ClientFrame vs the frames src/wire/client.rs reads"
    );
    assert_eq!(
        schema_types("ServerFrame"),
        writes,
        "$defs/ServerFrame vs the frames src/wire/server.rs writes"
    );
    let encoded = encoded_types();
    assert!(encoded.len() >= 10, "{encoded:?}");
    let unnamed: Vec<_> = encoded.difference(&writes).collect();
    assert!(
        unnamed.is_empty(),
        "the core encodes frames the schema does not name: {unnamed:?}"
    );
    let doc = document();
    assert_eq!(doc["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let any = jsonschema::draft202012::new(doc).expect("the root is a valid schema");
    for t in reads.union(&writes) {
        let entries = doc["oneOf"].as_array().unwrap().iter().filter(|r| {
            let name = r["$ref"].as_str().unwrap().trim_start_matches("#/$defs/");
            let d = &doc["$defs"][name];
            d["properties"]["t"]["const"] == t.as_str()
                || d["anyOf"].as_array().is_some_and(|alts| {
                    alts.iter().filter_map(|a| a["$ref"].as_str()).any(|r| {
                        let n = r.trim_start_matches("#/$defs/");
                        doc["$defs"][n]["properties"]["t"]["const"] == t.as_str()
                    })
                })
        });
        assert_eq!(entries.count(), 1, "the root's oneOf has one entry for {t:?}");
    }
    assert!(any.is_valid(&json!({"t":"pong","ts":1})));
    assert!(any.is_valid(&json!({"t":"text","id":"m1","text":"hi"})));
    assert!(!any.is_valid(&json!({"t":"no_such_frame"})));
}

fn refused(def: &str, frames: &[Value]) {
    let v = validator(def);
    for f in frames {
        assert!(!v.is_valid(f), "$defs/{def} takes {f}");
    }
}

#[test]
fn frames_the_protocol_refuses_do_not_match() {
    let long = |n: usize| "x".repeat(n);
    refused(
        "ClientFrame",
        &[
            json!({"t":"text","id":"m1"}),                              // G5: text required
            json!({"t":"text","id":"m1","text":""}),                    // empty message
            json!({"t":"text","id":"m1","text":5}),                     // G5: wrong type
            json!({"t":"text","id":long(129),"text":"hi"}),             // ids <= 128
            json!({"t":"text","id":"m1","text":"é".repeat(12_001)}),    // G1: 12,000 characters
            json!({"t":"hello","device":{"id":"tel-1"}}),               // no token
            json!({"t":"hello","token":"t","device":{"id":long(121)}}), // G8: 120
            json!({"t":"media","id":"f","kind":"image","data":"AAAA","parts":2049}), // <= 2,048 parts
            json!({"t":"media","id":"f","kind":"image","data":"AAAA","parts":"2"}), // G5
            json!({"t":"media","id":"f","kind":"sticker","data":"AAAA"}),
            json!({"t":"media","id":"f","kind":"image","data":"not base64!"}),
            json!({"t":"audio","id":"a","format":"mp3","data":"AAAA"}),
            json!({"t":"prompt","prompt_id":"p1"}), // option_id or text
            json!({"t":"prompt","prompt_id":"p1","option_id":""}),
            json!({"t":"deliver","id":"d1","target":"mobile:tel-1"}), // text or media
            json!({"t":"push_subscribe","id":"s1"}),                  // no subscription
            json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"https://fcm.googleapis.com/x"}}),
            json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"http://fcm.googleapis.com/x",
                "keys":{"p256dh":"BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                "auth":"BTBZMqHH6r4Tts7J_aSIgg"}}}),
            json!({"t":"push_subscribe","id":"s1","subscription":{"endpoint":"https://fcm.googleapis.com/x",
                "keys":{"p256dh":"short","auth":5}}}),
            json!({"t":"push_test"}),
            json!({"t":"ready"}), // the other direction
            json!(["t", "text"]),
        ],
    );
    refused(
        "ServerFrame",
        &[
            json!({"t":"message","id":"m","text":"x","final":true}), // chunk required
            json!({"t":"avatar","state":"angry"}),
            json!({"t":"error","code":"oops","message":"x","fatal":false}),
            json!({"t":"error","code":"bad_frame","message":"x"}), // G9: fatal always
            json!({"t":"prompt","id":"p","kind":"clarify","text":"?","options":[],"session":"mobile:x","timeout_seconds":1}),
            json!({"t":"ready","v":2,"session":"mobile:x","device":{"id":"x","name":"x"},"avatar_url":"","capabilities":{}}),
            json!({"t":"hello","token":"t"}),
        ],
    );
}
