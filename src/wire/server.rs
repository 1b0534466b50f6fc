//! Server → client frames. Each frame body is a plain struct that both serializes (the
//! gateway, borrowing everything) and deserializes (Rust clients, tests); `encode` adds the
//! `t` tag in the same pass. `parse_server_frame` reads the tag, then the body.

use std::borrow::Cow;
use std::fmt;

use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::limits::{MAX_MEDIA_BYTES, MAX_TEXT_CHARS, PROTOCOL_VERSION};

/// Serializes `body` as `{"t":tag, ...body's fields}`.
pub fn encode<T: Serialize>(tag: &str, body: &T) -> String {
    #[derive(Serialize)]
    struct Tagged<'b, T> {
        t: &'b str,
        #[serde(flatten)]
        body: &'b T,
    }
    // Serializing plain structs of strings, numbers and bools into a String cannot fail.
    serde_json::to_string(&Tagged { t: tag, body }).expect("frame bodies always serialize")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub name: Cow<'a, str>,
}

/// `ready.capabilities`, exactly as in the spec's example (decisions H6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    pub text: bool,
    pub voice: bool,
    pub typing: bool,
    pub avatar_states: Vec<String>,
    pub media_in: Vec<String>,
    pub media_out: Vec<String>,
    pub prompts: Vec<String>,
    pub edit: bool,
    pub max_media_bytes: u64,
    pub max_text_chars: u64,
    /// The push extension (issue 18, docs/push.md); absent with `MOBILE_PUSH=off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushCapability>,
    /// The journal's history (issue 24, L56); absent when history is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryCapability>,
}

/// `ready.capabilities.history`: how much of its conversation the gateway keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryCapability {
    pub items: usize,
    pub days: u32,
}

/// `ready.capabilities.push`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushCapability {
    pub webpush: WebPushCapability,
    /// Which buttons a card's notification has (issue 25, `MOBILE_NOTIFY_ACTIONS`):
    /// `safe` (only the refusing option), `all` (up to two) or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebPushCapability {
    /// base64url (no padding) of the gateway's 65-byte uncompressed P-256 VAPID key.
    pub vapid_public_key: String,
}

impl Capabilities {
    pub fn v1() -> Capabilities {
        let list = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Capabilities {
            text: true,
            voice: true,
            typing: true,
            avatar_states: list(&["idle", "thinking", "speaking"]),
            media_in: list(&["image", "video", "document", "audio"]),
            media_out: list(&["image", "voice", "video", "document", "animation"]),
            prompts: list(&["exec_approval", "slash_confirm", "clarify"]),
            edit: true,
            max_media_bytes: MAX_MEDIA_BYTES as u64,
            max_text_chars: MAX_TEXT_CHARS as u64,
            push: None,
            history: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ready<'a> {
    pub v: u32,
    #[serde(borrow)]
    pub session: Cow<'a, str>,
    #[serde(borrow)]
    pub device: DeviceInfo<'a>,
    #[serde(borrow)]
    pub avatar_url: Cow<'a, str>,
    pub capabilities: Capabilities,
    /// The device's latest journal seq (issue 24, L56); absent without a journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

impl<'a> Ready<'a> {
    pub fn new(device_id: &'a str, name: &'a str, avatar_url: &'a str) -> Ready<'a> {
        Ready {
            v: PROTOCOL_VERSION,
            session: Cow::Owned(format!("mobile:{device_id}")),
            device: DeviceInfo {
                id: Cow::Borrowed(device_id),
                name: Cow::Borrowed(name),
            },
            avatar_url: Cow::Borrowed(avatar_url),
            capabilities: Capabilities::v1(),
            seq: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkInfo {
    pub index: u32,
    pub total: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub text: Cow<'a, str>,
    pub chunk: ChunkInfo,
    #[serde(rename = "final")]
    pub is_final: bool,
    #[serde(default)]
    pub edit: bool,
}

/// A media chunk's payload: raw bytes when the gateway serializes (base64 is written straight
/// into the frame, no intermediate string), base64 text when a client parses.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload<'a> {
    Raw(&'a [u8]),
    Base64(Cow<'a, str>),
}

impl Payload<'_> {
    /// The decoded bytes; `None` for invalid base64.
    pub fn decode(&self) -> Option<Vec<u8>> {
        use base64::Engine;
        match self {
            Payload::Raw(b) => Some(b.to_vec()),
            Payload::Base64(s) => STANDARD.decode(s.as_bytes()).ok(),
        }
    }
}

impl Serialize for Payload<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Payload::Raw(bytes) => s.collect_str(&Base64Display::new(bytes, &STANDARD)),
            Payload::Base64(text) => s.serialize_str(text),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Payload<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <Cow<'a, str>>::deserialize(d).map(Payload::Base64)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Media<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow)]
    pub mime: Cow<'a, str>,
    #[serde(borrow)]
    pub filename: Cow<'a, str>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<Cow<'a, str>>,
    pub part: u32,
    pub parts: u32,
    #[serde(rename = "final")]
    pub is_final: bool,
    pub size: u64,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Payload<'a>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub url: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<Cow<'a, str>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptOption<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub label: Cow<'a, str>,
    /// `primary`, `danger` or empty, always present (decisions P6).
    #[serde(borrow)]
    pub style: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow)]
    pub text: Cow<'a, str>,
    #[serde(borrow)]
    pub options: Vec<PromptOption<'a>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Cow<'a, str>>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub description: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub session: Cow<'a, str>,
    pub timeout_seconds: u64,
    /// The card's text, command, description or an option's label holds a character a
    /// person cannot see (issue 23 #4, L49): the app shows each one and warns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden_chars: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptDone<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub option_id: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Avatar<'a> {
    #[serde(borrow)]
    pub state: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Typing {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pong<'a> {
    /// Echoed as the same JSON value, byte for byte (decisions K1).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<&'a RawValue>,
}

impl PartialEq for Pong<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.ts.map(RawValue::get) == other.ts.map(RawValue::get)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorFrame<'a> {
    #[serde(borrow)]
    pub code: Cow<'a, str>,
    #[serde(borrow)]
    pub message: Cow<'a, str>,
    pub fatal: bool,
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Cow<'a, str>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivered<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
    #[serde(borrow)]
    pub device: Cow<'a, str>,
    /// The device was offline and can be notified: the delivery waits for it (issue 18,
    /// docs/decisions-local.md L45). Absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

/// `push_subscribed`, `push_unsubscribed`, `push_sent`: the id of the frame answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushAnswer<'a> {
    #[serde(borrow)]
    pub id: Cow<'a, str>,
}

/// Any frame the gateway sends, as a client reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerFrame<'a> {
    Ready(Ready<'a>),
    Message(Message<'a>),
    Media(Media<'a>),
    Prompt(Prompt<'a>),
    PromptDone(PromptDone<'a>),
    Avatar(Avatar<'a>),
    Typing(Typing),
    Pong(Pong<'a>),
    Error(ErrorFrame<'a>),
    Delivered(Delivered<'a>),
    PushSubscribed(PushAnswer<'a>),
    PushUnsubscribed(PushAnswer<'a>),
    PushSent(PushAnswer<'a>),
    /// The journal's frames (issue 24, L56–L60).
    Received(super::journal::Received<'a>),
    Resumed(super::journal::Resumed),
    History(super::journal::HistoryAnswer),
    Forgotten(super::journal::Forgotten<'a>),
    /// The device frames (issue 26).
    Devices(super::devices::DevicesList<'a>),
    Revoked(super::devices::Revoked<'a>),
    /// A type this client does not know: ignore it (protocol-v1.md "Versioning").
    Unknown(String),
}

/// Parses a frame sent by a Protocol v1 server.
pub fn parse_server_frame(bytes: &[u8]) -> Result<ServerFrame<'_>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Tag<'a> {
        #[serde(borrow)]
        t: Cow<'a, str>,
    }
    let tag: Tag<'_> = serde_json::from_slice(bytes)?;
    Ok(match tag.t.as_ref() {
        "ready" => ServerFrame::Ready(serde_json::from_slice(bytes)?),
        "message" => ServerFrame::Message(serde_json::from_slice(bytes)?),
        "media" => ServerFrame::Media(serde_json::from_slice(bytes)?),
        "prompt" => ServerFrame::Prompt(serde_json::from_slice(bytes)?),
        "prompt_done" => ServerFrame::PromptDone(serde_json::from_slice(bytes)?),
        "avatar" => ServerFrame::Avatar(serde_json::from_slice(bytes)?),
        "typing" => ServerFrame::Typing(serde_json::from_slice(bytes)?),
        "pong" => ServerFrame::Pong(serde_json::from_slice(bytes)?),
        "error" => ServerFrame::Error(serde_json::from_slice(bytes)?),
        "delivered" => ServerFrame::Delivered(serde_json::from_slice(bytes)?),
        "push_subscribed" => ServerFrame::PushSubscribed(serde_json::from_slice(bytes)?),
        "push_unsubscribed" => ServerFrame::PushUnsubscribed(serde_json::from_slice(bytes)?),
        "push_sent" => ServerFrame::PushSent(serde_json::from_slice(bytes)?),
        "received" => ServerFrame::Received(serde_json::from_slice(bytes)?),
        "resumed" => ServerFrame::Resumed(serde_json::from_slice(bytes)?),
        "history" => ServerFrame::History(serde_json::from_slice(bytes)?),
        "forgotten" => ServerFrame::Forgotten(serde_json::from_slice(bytes)?),
        "devices" => ServerFrame::Devices(serde_json::from_slice(bytes)?),
        "revoked" => ServerFrame::Revoked(serde_json::from_slice(bytes)?),
        "" => return Err(serde_json::Error::custom("empty frame type")),
        other => ServerFrame::Unknown(other.to_owned()),
    })
}

impl fmt::Display for ServerFrame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = match self {
            ServerFrame::Ready(_) => "ready",
            ServerFrame::Message(_) => "message",
            ServerFrame::Media(_) => "media",
            ServerFrame::Prompt(_) => "prompt",
            ServerFrame::PromptDone(_) => "prompt_done",
            ServerFrame::Avatar(_) => "avatar",
            ServerFrame::Typing(_) => "typing",
            ServerFrame::Pong(_) => "pong",
            ServerFrame::Error(_) => "error",
            ServerFrame::Delivered(_) => "delivered",
            ServerFrame::PushSubscribed(_) => "push_subscribed",
            ServerFrame::PushUnsubscribed(_) => "push_unsubscribed",
            ServerFrame::PushSent(_) => "push_sent",
            ServerFrame::Received(_) => "received",
            ServerFrame::Resumed(_) => "resumed",
            ServerFrame::History(_) => "history",
            ServerFrame::Forgotten(_) => "forgotten",
            ServerFrame::Devices(_) => "devices",
            ServerFrame::Revoked(_) => "revoked",
            ServerFrame::Unknown(t) => t,
        };
        f.write_str(t)
    }
}
