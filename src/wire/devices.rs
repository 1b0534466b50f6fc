//! The device frames (issue 26 §3), for owner connections: `devices` and `revoke` from the
//! app; `devices` and `revoked` from the gateway.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize as DeserializeDerive, Serialize};

use super::client::{frame_id, ClientFrame, RawDevice, RawFrame};
use super::error::Rejection;
use crate::limits::MAX_DEVICE_FIELD_CHARS;

/// A frame's `device` field: `hello`'s object, or `revoke`'s device id.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum DeviceField<'a> {
    Object(RawDevice<'a>),
    Id(Cow<'a, str>),
    Wrong,
}

struct DeviceFieldVisitor;

impl<'de> Visitor<'de> for DeviceFieldVisitor {
    type Value = DeviceField<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        RawDevice::deserialize(de::value::MapAccessDeserializer::new(map)).map(DeviceField::Object)
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(DeviceField::Id(Cow::Borrowed(s)))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(DeviceField::Id(Cow::Owned(s.to_owned())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(DeviceField::Wrong)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(DeviceField::Wrong)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(DeviceField::Wrong)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(DeviceField::Wrong)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(DeviceField::Wrong)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(DeviceField::Wrong)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for DeviceField<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DeviceFieldVisitor)
    }
}

pub(super) fn devices<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    Ok(ClientFrame::Devices { id: frame_id(raw)? })
}

pub(super) fn revoke<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let id = frame_id(raw)?;
    // Never cut: a cut id could name another device than the one meant.
    let device = match raw.device_field() {
        Some(DeviceField::Id(d)) if d.chars().count() > MAX_DEVICE_FIELD_CHARS => {
            return Err(Rejection::bad_frame("device id is over 120 characters"))
        }
        Some(DeviceField::Id(d)) if !d.trim().is_empty() => d.clone(),
        _ => return Err(Rejection::bad_frame("device must be a device id")),
    };
    Ok(ClientFrame::Revoke { id, device })
}

/// One paired device in a `devices` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, DeserializeDerive)]
pub struct DeviceItem {
    pub id: String,
    pub name: String,
    pub platform: String,
    /// Unix milliseconds.
    pub paired_at: u64,
    /// Unix milliseconds; `null` before its first connection.
    pub last_seen: Option<u64>,
    pub online: bool,
    /// It has a push subscription.
    pub push: bool,
    pub owner: bool,
}

/// `devices`: the answer to `devices`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, DeserializeDerive)]
pub struct DevicesList<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    pub items: Vec<DeviceItem>,
}

/// `revoked`: the answer to `revoke`, once the revocation is on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, DeserializeDerive)]
pub struct Revoked<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub device: Cow<'a, str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_client_frame;

    #[test]
    fn revoke_names_a_device_by_id_and_hello_still_takes_an_object() {
        let f = parse_client_frame(br#"{"t":"revoke","id":"r1","device":"tel-1"}"#).unwrap();
        assert!(matches!(f, ClientFrame::Revoke { id, device } if id == "r1" && device == "tel-1"));
        for bad in [
            &br#"{"t":"revoke","id":"r1"}"#[..],
            br#"{"t":"revoke","id":"r1","device":{"id":"tel-1"}}"#,
            br#"{"t":"revoke","id":"r1","device":" "}"#,
            br#"{"t":"revoke","id":"r1","device":7}"#,
        ] {
            let r = parse_client_frame(bad).unwrap_err();
            assert_eq!(r.id.as_deref(), Some("r1"), "{}", String::from_utf8_lossy(bad));
        }
        let long = format!(r#"{{"t":"revoke","id":"r1","device":"{}"}}"#, "x".repeat(121));
        assert!(
            parse_client_frame(long.as_bytes()).is_err(),
            "refused, not cut to another id"
        );
        let f = parse_client_frame(br#"{"t":"devices","id":"d1"}"#).unwrap();
        assert!(matches!(f, ClientFrame::Devices { id } if id == "d1"));
        let hello = br#"{"t":"hello","token":"x","device":{"id":"tel-1"}}"#;
        assert!(matches!(parse_client_frame(hello), Ok(ClientFrame::Hello(h)) if h.device_id == "tel-1"));
        let wrong = br#"{"t":"hello","token":"x","device":"tel-1"}"#;
        assert!(parse_client_frame(wrong).is_err());
    }
}
