//! The push extension's client frames (issue 18, docs/push.md): `push_subscribe`,
//! `push_unsubscribe`, `push_test`. Structure and keys are checked here (`bad_frame`);
//! whether the endpoint's host may be used is the gateway's question (`forbidden`).

use std::borrow::Cow;

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use serde::Deserialize;

use super::client::{cut, frame_id, opt_str, req_str, ClientFrame, RawFrame};
use super::error::{ErrorCode, Rejection};
use super::lenient::{Object, Scalar};
use crate::push::{MAX_APP_URL_CHARS, MAX_ENDPOINT_CHARS};
use crate::text::exceeds_chars;

/// Browsers give keys in base64url without padding (`PushSubscription.toJSON()`); padding
/// is accepted too. What the gateway writes is always without padding.
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// base64url without padding, the extension's encoding for keys.
pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE.encode(bytes)
}

/// Decodes base64url (padding optional); `None` if it is not.
pub fn from_b64url(text: &str) -> Option<Vec<u8>> {
    URL_SAFE.decode(text).ok()
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
pub(super) struct RawSubscription<'a> {
    #[serde(borrow, default)]
    endpoint: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    keys: Option<Object<RawKeys<'a>>>,
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
pub(super) struct RawKeys<'a> {
    #[serde(borrow, default)]
    p256dh: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    auth: Option<Scalar<'a>>,
}

/// A `push_subscribe` whose keys decode: a 65-byte uncompressed point and a 16-byte secret.
#[derive(Debug, Clone, PartialEq)]
pub struct PushSubscribe<'a> {
    pub id: Cow<'a, str>,
    pub endpoint: Cow<'a, str>,
    pub p256dh: Vec<u8>,
    pub auth: Vec<u8>,
    /// The page's address (`app_url`, an addition of this gateway), if it sent one.
    pub app_url: Option<Cow<'a, str>>,
}

pub(super) fn subscribe<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let id = frame_id(raw)?;
    let sub = match &raw.subscription {
        None => return Err(Rejection::bad_frame("subscription is required")),
        Some(Object::Wrong) => return Err(Rejection::bad_frame("subscription must be an object")),
        Some(Object::Ok(s)) => s,
    };
    let endpoint = req_str(&sub.endpoint, "subscription.endpoint")?;
    if exceeds_chars(endpoint, MAX_ENDPOINT_CHARS) {
        return Err(Rejection::new(
            ErrorCode::BadFrame,
            format!("subscription.endpoint is over {MAX_ENDPOINT_CHARS} characters"),
        ));
    }
    let keys = match &sub.keys {
        None => return Err(Rejection::bad_frame("subscription.keys is required")),
        Some(Object::Wrong) => return Err(Rejection::bad_frame("subscription.keys must be an object")),
        Some(Object::Ok(k)) => k,
    };
    let p256dh = key(&keys.p256dh, "subscription.keys.p256dh", 65)?;
    if p256dh[0] != 4 {
        return Err(Rejection::bad_frame(
            "subscription.keys.p256dh is not an uncompressed P-256 point",
        ));
    }
    let auth = key(&keys.auth, "subscription.keys.auth", 16)?;
    // The page's address as a browser gives it: visible ASCII (percent-encoded), nothing
    // JSON must escape. Anything else is ignored (the notification then opens the scope).
    let app_url = opt_str(&raw.app_url, "app_url")?
        .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
        .filter(|u| u.len() <= MAX_APP_URL_CHARS && u.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'))
        .map(|u| cut(u, MAX_APP_URL_CHARS));
    Ok(ClientFrame::PushSubscribe(PushSubscribe {
        id,
        endpoint: endpoint.clone(),
        p256dh,
        auth,
        app_url,
    }))
}

fn key(field: &Option<Scalar<'_>>, name: &'static str, len: usize) -> Result<Vec<u8>, Rejection> {
    let text = req_str(field, name)?;
    // Far longer than any key: refused before decoding.
    if text.len() > 4 * len {
        return Err(Rejection::new(
            ErrorCode::BadFrame,
            format!("{name} must be {len} bytes"),
        ));
    }
    let bytes =
        from_b64url(text).ok_or_else(|| Rejection::new(ErrorCode::BadFrame, format!("{name} is not base64url")))?;
    if bytes.len() != len {
        return Err(Rejection::new(
            ErrorCode::BadFrame,
            format!("{name} must be {len} bytes"),
        ));
    }
    Ok(bytes)
}

pub(super) fn unsubscribe<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    Ok(ClientFrame::PushUnsubscribe { id: frame_id(raw)? })
}

pub(super) fn test<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    Ok(ClientFrame::PushTest { id: frame_id(raw)? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_client_frame;

    const P256DH: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    fn frame(sub: &str) -> String {
        format!(r#"{{"t":"push_subscribe","id":"s1","subscription":{sub}}}"#)
    }

    fn parse(sub: &str) -> Result<PushSubscribe<'static>, Rejection> {
        let text: &'static str = Box::leak(frame(sub).into_boxed_str());
        match parse_client_frame(text.as_bytes()) {
            Ok(ClientFrame::PushSubscribe(s)) => Ok(s),
            Ok(other) => panic!("{other:?}"),
            Err(r) => Err(r),
        }
    }

    #[test]
    fn a_browser_subscription_parses_with_its_keys_decoded() {
        let s = parse(&format!(
            r#"{{"endpoint":"https://fcm.googleapis.com/fcm/send/x","expirationTime":null,"keys":{{"p256dh":"{P256DH}","auth":"{AUTH}"}}}}"#
        ))
        .unwrap();
        assert_eq!((s.p256dh.len(), s.auth.len(), s.id.as_ref()), (65, 16, "s1"));
        assert_eq!(b64url(&s.p256dh), P256DH);
        // Padding is accepted.
        assert!(parse(&format!(
            r#"{{"endpoint":"https://a/","keys":{{"p256dh":"{P256DH}","auth":"{AUTH}=="}}}}"#
        ))
        .is_ok());
    }

    #[test]
    fn malformed_subscriptions_are_bad_frames_that_name_the_field_and_carry_the_id() {
        let point = format!(r#""p256dh":"{P256DH}""#);
        let not_a_point = b64url(&[5u8; 65]);
        let long = "x".repeat(MAX_ENDPOINT_CHARS);
        let cases = [
            ("5".to_owned(), "subscription must be an object"),
            (r#"{"keys":{}}"#.to_owned(), "subscription.endpoint is required"),
            (
                r#"{"endpoint":"https://a/"}"#.to_owned(),
                "subscription.keys is required",
            ),
            (
                format!(r#"{{"endpoint":"https://a/","keys":{{{point},"auth":7}}}}"#),
                "auth must be a string",
            ),
            (
                format!(r#"{{"endpoint":"https://a/","keys":{{{point}}}}}"#),
                "auth is required",
            ),
            (
                format!(r#"{{"endpoint":"https://a/","keys":{{{point},"auth":"AAAA"}}}}"#),
                "must be 16 bytes",
            ),
            (
                format!(r#"{{"endpoint":"https://a/","keys":{{{point},"auth":"!!"}}}}"#),
                "not base64url",
            ),
            (
                format!(r#"{{"endpoint":"https://a/","keys":{{"p256dh":"AAAA","auth":"{AUTH}"}}}}"#),
                "must be 65 bytes",
            ),
            (
                format!(r#"{{"endpoint":"https://a/","keys":{{"p256dh":"{not_a_point}","auth":"{AUTH}"}}}}"#),
                "not an uncompressed P-256 point",
            ),
            (
                format!(r#"{{"endpoint":"https://a/{long}","keys":{{{point},"auth":"{AUTH}"}}}}"#),
                "over 2048",
            ),
        ];
        for (sub, want) in cases {
            let r = parse(&sub).unwrap_err();
            assert_eq!(r.code, ErrorCode::BadFrame, "{sub}");
            assert!(r.message.contains(want), "{sub}: {}", r.message);
            assert_eq!(r.id.as_deref(), Some("s1"));
        }
        let r = parse_client_frame(br#"{"t":"push_subscribe","id":"s2"}"#).unwrap_err();
        assert_eq!((r.code, r.id.as_deref()), (ErrorCode::BadFrame, Some("s2")));
    }

    #[test]
    fn unsubscribe_and_test_need_an_id() {
        assert!(matches!(
            parse_client_frame(br#"{"t":"push_unsubscribe","id":"u"}"#),
            Ok(ClientFrame::PushUnsubscribe { .. })
        ));
        assert!(matches!(
            parse_client_frame(br#"{"t":"push_test","id":"x"}"#),
            Ok(ClientFrame::PushTest { .. })
        ));
        assert_eq!(
            parse_client_frame(br#"{"t":"push_test"}"#).unwrap_err().code,
            ErrorCode::BadFrame
        );
    }
}
