//! `POST /card-answer` (issue 25), without its I/O: the body a notification's button
//! sends, the answers the route gives, and how refusals are counted and logged.
//!
//! Every answer is JSON with `Cache-Control: no-store`. A CORS header is given to the
//! page's own origin only: the service worker's fetch is same-origin and needs none, and
//! no other site may read an answer.

use std::time::Duration;

use hermes_mobile::Time;
use serde::Deserialize;

use crate::http;

/// A body larger than this is refused (413) before it is read.
pub const MAX_BODY_BYTES: usize = 4096;
/// G8's bound on a card id, and generous ones on an option and a token.
const MAX_PROMPT_ID_CHARS: usize = 128;
const MAX_OPTION_CHARS: usize = 32;
const MAX_TOKEN_CHARS: usize = 128;
/// Refusals logged in one window; the rest are counted and summed up in the next line.
const LOGGED_PER_WINDOW: u32 = 10;
const LOG_WINDOW: Duration = Duration::from_secs(60);

/// What a button sends.
#[derive(Clone, PartialEq, Eq)]
pub struct AnswerBody {
    pub prompt_id: String,
    /// Lower-cased (G2).
    pub option_id: String,
    /// Never logged.
    pub token: String,
}

/// Without the token, which never reaches a log, not even through `{:?}`.
impl std::fmt::Debug for AnswerBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerBody")
            .field("prompt_id", &self.prompt_id)
            .field("option_id", &self.option_id)
            .field("token", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize)]
struct Wire {
    prompt_id: String,
    option_id: String,
    token: String,
}

/// Reads a body; `Err` says why it is malformed (400). Unknown fields are ignored.
pub fn parse(body: &[u8]) -> Result<AnswerBody, &'static str> {
    if body.len() > MAX_BODY_BYTES {
        return Err("body too large");
    }
    let wire: Wire = serde_json::from_slice(body)
        .map_err(|_| "the body must be a JSON object with string prompt_id, option_id and token")?;
    let bounded = |s: &str, max: usize| !s.is_empty() && s.chars().count() <= max;
    if !bounded(&wire.prompt_id, MAX_PROMPT_ID_CHARS) {
        return Err("prompt_id must be 1 to 128 characters");
    }
    if !bounded(&wire.option_id, MAX_OPTION_CHARS) {
        return Err("option_id must be 1 to 32 characters");
    }
    if !bounded(&wire.token, MAX_TOKEN_CHARS) {
        return Err("token must be 1 to 128 characters");
    }
    Ok(AnswerBody {
        option_id: wire.option_id.to_ascii_lowercase(),
        prompt_id: wire.prompt_id,
        token: wire.token,
    })
}

/// The route's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// 200: applied, and kept.
    Applied(String),
    /// 409: the card is answered, expired or unknown, or the token was used before.
    Closed,
    /// 403: not a token for this device, card and option.
    Forbidden,
    /// 400, with why.
    Malformed(&'static str),
    /// 411: no `Content-Length`.
    LengthRequired,
    /// 413.
    TooLarge,
    /// 500: applied in memory, but the journal could not keep it.
    NotKept,
    /// 503: too many answers wait for the disk, or this one waited too long.
    Busy,
    /// 405: not a POST.
    MethodNotAllowed,
}

impl Reply {
    /// The whole response; `origin` is the request's `Origin` when it is the page's own.
    pub fn response(&self, origin: Option<&str>) -> Vec<u8> {
        let (status, body) = match self {
            Reply::Applied(option_id) => ("200 OK", serde_json::json!({ "option_id": option_id })),
            Reply::Closed => ("409 Conflict", serde_json::json!({ "error": "closed" })),
            Reply::Forbidden => ("403 Forbidden", serde_json::json!({ "error": "forbidden" })),
            Reply::Malformed(why) => (
                "400 Bad Request",
                serde_json::json!({ "error": "bad_request", "message": why }),
            ),
            Reply::LengthRequired => ("411 Length Required", serde_json::json!({ "error": "length_required" })),
            Reply::TooLarge => ("413 Content Too Large", serde_json::json!({ "error": "too_large" })),
            Reply::NotKept => ("500 Internal Server Error", serde_json::json!({ "error": "not_kept" })),
            Reply::Busy => ("503 Service Unavailable", serde_json::json!({ "error": "busy" })),
            Reply::MethodNotAllowed => (
                "405 Method Not Allowed",
                serde_json::json!({ "error": "method_not_allowed" }),
            ),
        };
        let mut extra = String::from("Cache-Control: no-store\r\n");
        if let Some(origin) = origin {
            extra.push_str(&format!("Access-Control-Allow-Origin: {origin}\r\nVary: Origin\r\n"));
        }
        match self {
            Reply::Busy => extra.push_str("Retry-After: 1\r\n"),
            Reply::MethodNotAllowed => extra.push_str("Allow: POST\r\n"),
            _ => {}
        }
        http::response(status, "application/json", &body.to_string(), &extra)
    }
}

/// The request's `Origin` if it is the page's own: the same host as the request's `Host`
/// (what a proxy forwards), or `MOBILE_PUBLIC_URL`'s origin.
pub fn own_origin(origin: Option<&str>, host: Option<&str>, public_url: Option<&str>) -> Option<String> {
    let origin = origin?.trim();
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))?;
    if rest.is_empty() || rest.contains('/') || !origin.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return None;
    }
    let same_host = host.is_some_and(|h| h.eq_ignore_ascii_case(rest));
    let public = public_url.is_some_and(|u| {
        let u = u.trim_end_matches('/');
        u.eq_ignore_ascii_case(origin)
            || u.to_ascii_lowercase()
                .starts_with(&format!("{}/", origin.to_ascii_lowercase()))
    });
    (same_host || public).then(|| origin.to_owned())
}

/// Refused answers: all counted (`/healthz`), the first few of each minute logged, the
/// rest summed up in the next line, so a flood cannot fill the SD card with logs.
#[derive(Debug, Default)]
pub struct Refusals {
    pub total: u64,
    window_start: Option<Time>,
    logged: u32,
    unlogged: u64,
}

impl Refusals {
    /// A refused answer: `what` names it (peer-chosen strings escaped, never the token).
    pub fn record(&mut self, now: Time, what: impl FnOnce() -> String) {
        self.total += 1;
        if self.window_start.is_none_or(|s| now.since(s) >= LOG_WINDOW) {
            if self.unlogged > 0 {
                log::warn!("card answers: {} more refused and not logged", self.unlogged);
            }
            self.window_start = Some(now);
            self.logged = 0;
            self.unlogged = 0;
        }
        if self.logged < LOGGED_PER_WINDOW {
            self.logged += 1;
            let what = what();
            log::warn!("card answer refused ({} in all): {what}", self.total);
        } else {
            self.unlogged += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_three_bounded_strings() {
        let ok = parse(br#"{"prompt_id":"c1","option_id":"DENY","token":"abc","extra":1}"#).unwrap();
        assert_eq!((ok.prompt_id.as_str(), ok.option_id.as_str()), ("c1", "deny"));
        for bad in [
            &b""[..],
            b"[]",
            b"null",
            br#"{"prompt_id":"c1","option_id":"deny"}"#,
            br#"{"prompt_id":1,"option_id":"deny","token":"t"}"#,
            br#"{"prompt_id":"","option_id":"deny","token":"t"}"#,
            b"\xff\xfe",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let long = format!(
            r#"{{"prompt_id":"{}","option_id":"deny","token":"t"}}"#,
            "x".repeat(129)
        );
        assert!(parse(long.as_bytes()).is_err());
        assert_eq!(parse(&vec![b' '; MAX_BODY_BYTES + 1]), Err("body too large"));
    }

    #[test]
    fn every_answer_is_json_not_cached_and_cors_only_for_the_page() {
        let text = |r: Reply, o: Option<&str>| String::from_utf8(r.response(o)).unwrap();
        let ok = text(Reply::Applied("deny".into()), None);
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"));
        assert!(ok.contains("\r\nCache-Control: no-store\r\n") && ok.ends_with(r#"{"option_id":"deny"}"#));
        assert!(!ok.contains("Access-Control"));
        assert!(text(Reply::Closed, None).ends_with(r#"{"error":"closed"}"#));
        assert!(text(Reply::Forbidden, None).starts_with("HTTP/1.1 403 "));
        let cors = text(Reply::Closed, Some("https://pi.example"));
        assert!(cors.contains("\r\nAccess-Control-Allow-Origin: https://pi.example\r\nVary: Origin\r\n"));
        assert_eq!(
            own_origin(Some("https://pi.example"), Some("pi.example"), None).as_deref(),
            Some("https://pi.example")
        );
        assert_eq!(
            own_origin(
                Some("https://pi.example"),
                Some("127.0.0.1:8787"),
                Some("https://pi.example/chat/")
            )
            .as_deref(),
            Some("https://pi.example")
        );
        for (origin, host) in [
            ("https://evil.example", "pi.example"),
            ("https://pi.example.evil", "pi.example"),
            ("null", "pi.example"),
            ("https://pi.example\r\nX: y", "pi.example"),
        ] {
            assert_eq!(
                own_origin(Some(origin), Some(host), Some("https://pi.example/")),
                None,
                "{origin}"
            );
        }
    }

    #[test]
    fn refusals_are_all_counted_and_a_few_logged_each_minute() {
        let mut r = Refusals::default();
        for i in 0..100 {
            r.record(Time::from_millis(i * 100), String::new);
        }
        assert_eq!((r.total, r.logged, r.unlogged), (100, 10, 90));
        r.record(Time::from_secs(61), String::new);
        assert_eq!((r.total, r.unlogged, r.logged), (101, 0, 1));
    }
}
