//! A device's conversation with an HTTP agent, kept under the state directory (issue 11).
//!
//! One file per device, `<state dir>/conversations/<32 hex digits>.json`: a SHA-256 of the
//! device id names it, so any id (120 characters of anything) makes a short, safe name, and
//! the folder's listing does not show the ids. The file holds the id, the conversation
//! number (`/new` counts up) and the bounded history. Read through the file worker when the
//! device is first seen after a start (or after it was let go from memory), written
//! atomically after every turn.

use std::path::{Path, PathBuf};

use hermes_mobile::upstream::History;
use hermes_mobile::DeviceId;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The file of `device`'s conversation under `dir`.
pub fn path_of(dir: &Path, device: &DeviceId) -> PathBuf {
    let digest = Sha256::digest(device.as_str().as_bytes());
    let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{name}.json"))
}

/// The file's contents.
pub fn to_json(device: &DeviceId, conversation: u64, history: &History) -> Vec<u8> {
    json!({"device": device.as_str(), "conversation": conversation, "history": history})
        .to_string()
        .into_bytes()
}

/// Reads a file back: the conversation number and history, if it is `device`'s.
pub fn from_json(data: &[u8], device: &DeviceId, max_chars: usize, max_turns: usize) -> Option<(u64, History)> {
    let mut v: Value = serde_json::from_slice(data).ok()?;
    if v.get("device").and_then(Value::as_str) != Some(device.as_str()) {
        return None;
    }
    let history = serde_json::from_value::<History>(v.get_mut("history")?.take())
        .ok()?
        .with_bounds(max_chars, max_turns);
    Some((v.get("conversation").and_then(Value::as_u64).unwrap_or(1), history))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_and_round_trips_keep_the_bound() {
        let long = DeviceId("é/../x".repeat(20));
        let p = path_of(Path::new("/s/conversations"), &long);
        assert_eq!(p.file_name().unwrap().len(), 32 + 5);
        assert_eq!(p.parent().unwrap(), Path::new("/s/conversations"));
        let mut h = History::new(1000, 10);
        h.push("user", "hi");
        h.push("assistant", "hello");
        let data = to_json(&long, 3, &h);
        let (n, back) = from_json(&data, &long, 1000, 10).unwrap();
        assert_eq!((n, back.turns().len()), (3, 2));
        assert!(from_json(&data, &DeviceId("other".into()), 1000, 10).is_none());
        let (_, small) = from_json(&data, &long, 1000, 2).unwrap();
        assert_eq!(small.turns().len(), 2);
    }
}
