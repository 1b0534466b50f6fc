//! Every frame the integration tests exchange with the gateway is checked against
//! docs/protocol-v1.schema.json (issue 19): what a `Client` receives against
//! `$defs/ServerFrame`, what it sends against `$defs/ClientFrame`. One place, so a frame
//! the gateway starts sending without a schema entry fails whichever test sees it first.

use std::path::Path;
use std::sync::OnceLock;

use jsonschema::Validator;
use serde_json::{json, Value};

/// The schema document as checked in.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol-v1.schema.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// A validator for one of the schema's definitions (`ClientFrame`, `ServerFrame`, …).
pub fn validator(def: &str) -> Validator {
    let doc = document();
    let wrapper = json!({
        "$schema": doc["$schema"],
        "$ref": format!("#/$defs/{def}"),
        "$defs": doc["$defs"],
    });
    jsonschema::draft202012::new(&wrapper).unwrap_or_else(|e| panic!("the schema's {def}: {e}"))
}

fn check(which: &'static OnceLock<Validator>, def: &str, frame: &Value, direction: &str) {
    let v = which.get_or_init(|| validator(def));
    let errors: Vec<String> = v
        .iter_errors(frame)
        .take(3)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "a frame {direction} does not match docs/protocol-v1.schema.json ($defs/{def}): {}\n{errors:#?}",
        cut(frame)
    );
}

fn cut(frame: &Value) -> String {
    let text = frame.to_string();
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// A frame the gateway sent.
pub fn check_server_frame(frame: &Value) {
    static V: OnceLock<Validator> = OnceLock::new();
    check(&V, "ServerFrame", frame, "from the gateway");
}

/// A frame a test sends as a well-behaved client would.
pub fn check_client_frame(frame: &Value) {
    static V: OnceLock<Validator> = OnceLock::new();
    check(&V, "ClientFrame", frame, "sent by a test");
}
