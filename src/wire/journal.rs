//! The journal's frames (issue 24, L56–L62): `resume` in `hello`, `history` and `forget`
//! from the app; `received`, `resumed`, `history` and `forgotten` from the gateway.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::client::{frame_id, ClientFrame, RawFrame};
use super::error::{ErrorCode, Rejection};
use super::lenient::{Object, Scalar};

/// `history.limit` when absent, and its ceiling (a larger one is cut, not refused).
pub const HISTORY_DEFAULT_LIMIT: usize = 50;
pub const HISTORY_MAX_LIMIT: usize = 200;

#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
pub(super) struct RawResume<'a> {
    #[serde(borrow, default)]
    after: Option<Scalar<'a>>,
}

/// A non-negative integer field, absent as `None`.
fn opt_seq(field: &Option<Scalar<'_>>, name: &'static str) -> Result<Option<u64>, Rejection> {
    match field {
        None => Ok(None),
        Some(Scalar::Int(n)) => u64::try_from(*n)
            .map(Some)
            .map_err(|_| Rejection::new(ErrorCode::BadFrame, format!("{name} must not be negative"))),
        Some(_) => Err(Rejection::new(
            ErrorCode::BadFrame,
            format!("{name} must be an integer"),
        )),
    }
}

/// `hello.resume.after`: `None` without `resume`.
pub(super) fn resume_after(raw: &Option<Object<RawResume<'_>>>) -> Result<Option<u64>, Rejection> {
    match raw {
        None => Ok(None),
        Some(Object::Wrong) => Err(Rejection::bad_frame("resume must be an object")),
        Some(Object::Ok(r)) => Ok(Some(opt_seq(&r.after, "resume.after")?.unwrap_or(0))),
    }
}

pub(super) fn history<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let id = frame_id(raw)?;
    let before = opt_seq(&raw.before, "before")?;
    let limit = match opt_seq(&raw.limit, "limit")? {
        None => HISTORY_DEFAULT_LIMIT,
        Some(0) => return Err(Rejection::new(ErrorCode::BadFrame, "limit must be at least 1")),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(HISTORY_MAX_LIMIT),
    };
    Ok(ClientFrame::History { id, before, limit })
}

pub(super) fn forget<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    Ok(ClientFrame::Forget { id: frame_id(raw)? })
}

/// `received`: the message with this id is in the journal at `seq` (L58).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Received<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    pub seq: u64,
}

/// `resumed`: the replay after a `resume` is over; the device's latest seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumed {
    pub seq: u64,
}

/// `forgotten`: the answer to `forget`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
}

/// `history`'s answer. The items are already-encoded frames, each with its `seq`.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryPage<'a> {
    pub id: Cow<'a, str>,
    pub items: Vec<&'a serde_json::value::RawValue>,
    pub more: bool,
}

/// `history`'s answer as a client reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HistoryAnswer {
    pub id: String,
    pub items: Vec<serde_json::Value>,
    #[serde(default)]
    pub more: bool,
}

/// `frame` (an encoded JSON object) with `"seq":n` added at its end.
pub fn with_seq(mut frame: String, seq: u64) -> String {
    debug_assert!(frame.ends_with('}'));
    if frame.ends_with('}') {
        frame.pop();
        let sep = if frame.ends_with('{') { "" } else { "," };
        frame.push_str(&format!("{sep}\"seq\":{seq}}}"));
    }
    frame
}

/// Whether `frame` carries a seq that [`with_seq`] put on it.
pub fn has_seq(frame: &str) -> bool {
    let Some(at) = frame.rfind("\"seq\":") else {
        return false;
    };
    let tail = &frame[at + "\"seq\":".len()..];
    let digits = tail.strip_suffix('}').unwrap_or("");
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `frame` without the seq [`with_seq`] put on it.
pub fn without_seq(mut frame: String) -> String {
    if has_seq(&frame) {
        if let Some(at) = frame.rfind("\"seq\":") {
            let cut = if frame[..at].ends_with(',') { at - 1 } else { at };
            frame.truncate(cut);
            frame.push('}');
        }
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_client_frame;

    #[test]
    fn a_seq_put_on_a_frame_is_seen_and_text_that_looks_like_one_is_not() {
        assert!(has_seq(&with_seq(r#"{"t":"message","text":"hi"}"#.into(), 7)));
        assert!(!has_seq(r#"{"t":"message","text":"\"seq\":7}"}"#));
        assert!(!has_seq(r#"{"t":"error","code":"bad_frame"}"#));
        let plain = r#"{"t":"message","text":"hi"}"#;
        assert_eq!(without_seq(with_seq(plain.into(), 7)), plain);
        assert_eq!(without_seq(with_seq("{}".into(), 7)), "{}");
    }

    #[test]
    fn history_limits_are_cut_or_refused() {
        // L59: default 50, at most 200 (cut), at least 1.
        let f = parse_client_frame(br#"{"t":"history","id":"h1"}"#).unwrap();
        assert!(matches!(f, ClientFrame::History { id, before: None, limit: 50 } if id == "h1"));
        let f = parse_client_frame(br#"{"t":"history","id":"h1","before":9,"limit":5000}"#).unwrap();
        assert!(matches!(
            f,
            ClientFrame::History {
                before: Some(9),
                limit: 200,
                ..
            }
        ));
        let e = parse_client_frame(br#"{"t":"history","id":"h1","limit":0}"#).unwrap_err();
        assert_eq!((e.code, e.id.as_deref()), (ErrorCode::BadFrame, Some("h1")));
        let e = parse_client_frame(br#"{"t":"history","id":"h1","before":-1}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadFrame);
    }

    #[test]
    fn resume_is_read_from_hello() {
        let f = parse_client_frame(br#"{"t":"hello","token":"x","resume":{"after":7}}"#).unwrap();
        let ClientFrame::Hello(h) = f else { panic!() };
        assert_eq!(h.resume_after, Some(7));
        let f = parse_client_frame(br#"{"t":"hello","token":"x","resume":{}}"#).unwrap();
        let ClientFrame::Hello(h) = f else { panic!() };
        assert_eq!(h.resume_after, Some(0), "L56: resume without after is after 0");
        let f = parse_client_frame(br#"{"t":"hello","token":"x"}"#).unwrap();
        let ClientFrame::Hello(h) = f else { panic!() };
        assert_eq!(h.resume_after, None);
        assert!(parse_client_frame(br#"{"t":"hello","token":"x","resume":5}"#).is_err());
    }

    #[test]
    fn seq_goes_at_the_end() {
        assert_eq!(with_seq(r#"{"t":"x","a":1}"#.into(), 5), r#"{"t":"x","a":1,"seq":5}"#);
    }
}
