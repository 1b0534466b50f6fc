//! `POST /pair` (issue 26 §1), without its I/O: the body a page sends to trade a pairing
//! code for a device token, and the answers the route gives. Every answer is JSON with
//! `Cache-Control: no-store`; the token in a 200 is the only place it ever appears in
//! clear, and neither it nor the code reaches a log.

use hermes_mobile::gateway::{PairOutcome, PairRequest};
use serde::Deserialize;

use crate::http;

/// A body larger than this is refused (413) before it is read.
pub const MAX_BODY_BYTES: usize = 4096;
const MAX_CODE_CHARS: usize = 128;

#[derive(Deserialize)]
struct Wire {
    code: String,
    #[serde(default)]
    device: Option<WireDevice>,
}

#[derive(Deserialize, Default)]
struct WireDevice {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    platform: Option<String>,
}

/// Reads a body; `Err` says why it is malformed (400). Unknown fields are ignored.
pub fn parse(body: &[u8]) -> Result<PairRequest, &'static str> {
    if body.len() > MAX_BODY_BYTES {
        return Err("body too large");
    }
    let wire: Wire = serde_json::from_slice(body)
        .map_err(|_| "the body must be a JSON object with a string code and an optional device object")?;
    let code = wire.code.trim();
    if code.is_empty() || code.chars().count() > MAX_CODE_CHARS {
        return Err("code must be 1 to 128 characters");
    }
    let device = wire.device.unwrap_or_default();
    Ok(PairRequest {
        code: code.to_owned(),
        device_id: device.id.unwrap_or_default(),
        name: device.name.unwrap_or_default(),
        platform: device.platform.unwrap_or_default(),
    })
}

/// The route's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairReply {
    Outcome(PairOutcome),
    /// 400, with why.
    Malformed(&'static str),
    /// 411: no `Content-Length`.
    LengthRequired,
    /// 413.
    TooLarge,
    /// 415: not `Content-Type: application/json`.
    NotJson,
    /// 503: too many requests wait for the disk.
    Busy,
    /// 405: not a POST.
    MethodNotAllowed,
}

/// Never the token, even in a debug log.
impl std::fmt::Display for PairReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PairReply::Outcome(PairOutcome::Paired { device, .. }) => write!(f, "paired {device:?}"),
            PairReply::Outcome(o) => write!(f, "{o:?}"),
            other => write!(f, "{other:?}"),
        }
    }
}

impl PairReply {
    /// The whole response.
    pub fn response(&self) -> Vec<u8> {
        use serde_json::json;
        let mut extra = String::from("Cache-Control: no-store\r\n");
        let (status, body) = match self {
            PairReply::Outcome(o) => match o {
                PairOutcome::Paired { device, token } => {
                    ("200 OK", json!({ "token": token, "device": { "id": device.as_str() } }))
                }
                PairOutcome::Forbidden => ("403 Forbidden", json!({ "error": "forbidden" })),
                PairOutcome::Throttled { retry_after } => {
                    let secs = retry_after.as_millis().div_ceil(1000).max(1);
                    extra.push_str(&format!("Retry-After: {secs}\r\n"));
                    (
                        "429 Too Many Requests",
                        json!({ "error": "too_many_attempts", "retry_after": secs as u64 }),
                    )
                }
                PairOutcome::BadRequest(why) => ("400 Bad Request", json!({ "error": "bad_request", "message": why })),
                PairOutcome::Full => ("409 Conflict", json!({ "error": "full" })),
                PairOutcome::OwnerDevice => (
                    "409 Conflict",
                    json!({ "error": "owner_device", "message": "this id is an owner device's: pair it with a code made by pair --owner" }),
                ),
                PairOutcome::Unavailable => {
                    extra.push_str("Retry-After: 60\r\n");
                    ("503 Service Unavailable", json!({ "error": "unavailable" }))
                }
                PairOutcome::NotKept => ("500 Internal Server Error", json!({ "error": "not_kept" })),
            },
            PairReply::Malformed(why) => ("400 Bad Request", json!({ "error": "bad_request", "message": why })),
            PairReply::LengthRequired => ("411 Length Required", json!({ "error": "length_required" })),
            PairReply::TooLarge => ("413 Content Too Large", json!({ "error": "too_large" })),
            PairReply::NotJson => (
                "415 Unsupported Media Type",
                json!({ "error": "unsupported_media_type", "message": "send Content-Type: application/json" }),
            ),
            PairReply::Busy => {
                extra.push_str("Retry-After: 1\r\n");
                ("503 Service Unavailable", json!({ "error": "busy" }))
            }
            PairReply::MethodNotAllowed => {
                extra.push_str("Allow: POST\r\n");
                ("405 Method Not Allowed", json!({ "error": "method_not_allowed" }))
            }
        };
        http::response(status, "application/json", &body.to_string(), &extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_names_a_code_and_maybe_a_device() {
        let r = parse(br#"{"code":" abc ","device":{"id":"tel-1","name":"Pixel","platform":"android"}}"#).unwrap();
        assert_eq!(
            (r.code.as_str(), r.device_id.as_str(), r.name.as_str()),
            ("abc", "tel-1", "Pixel")
        );
        let r = parse(br#"{"code":"abc"}"#).unwrap();
        assert_eq!(r.device_id, "");
        assert!(parse(br#"{"device":{}}"#).is_err());
        assert!(parse(br#"{"code":""}"#).is_err());
        assert!(parse(b"[1]").is_err());
    }

    #[test]
    fn a_throttled_pairing_says_when_to_try_again_and_no_answer_is_cached() {
        let r = PairReply::Outcome(PairOutcome::Throttled {
            retry_after: std::time::Duration::from_millis(44_200),
        });
        let text = String::from_utf8(r.response()).unwrap();
        assert!(text.starts_with("HTTP/1.1 429"), "{text}");
        assert!(
            text.contains("Retry-After: 45\r\n") && text.contains("no-store"),
            "{text}"
        );
        let shown = PairReply::Outcome(PairOutcome::Paired {
            device: hermes_mobile::DeviceId("tel-1".into()),
            token: "secret-token".into(),
        })
        .to_string();
        assert!(!shown.contains("secret-token"), "{shown}");
    }
}
