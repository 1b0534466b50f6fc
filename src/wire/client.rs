//! Client → server frames: one borrowed parse, then per-type validation (decisions G1–G8).
//!
//! `parse_client_frame` never panics and never allocates in proportion to a field it does not
//! keep: strings are borrowed from the input (decisions G6: a frame is one whole WebSocket
//! message, text or binary, read as UTF-8 JSON).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::{ErrorCode, Rejection};
use super::lenient::{Object, Scalar};
use crate::limits::*;
use crate::text::{exceeds_chars, is_blank, lower, truncate_chars};

/// A validated client frame. Strings are truncated as decisions G8 says; keywords are
/// lower-cased (G2).
#[derive(Debug, Clone)]
pub enum ClientFrame<'a> {
    Hello(Hello<'a>),
    Text(TextFrame<'a>),
    Audio(AudioFrame<'a>),
    Media(MediaChunk<'a>),
    Prompt(PromptAnswer<'a>),
    Typing,
    Ping {
        ts: Option<&'a RawValue>,
    },
    Ack {
        id: Cow<'a, str>,
    },
    Deliver(Deliver<'a>),
    PushSubscribe(super::push::PushSubscribe<'a>),
    PushUnsubscribe {
        id: Cow<'a, str>,
    },
    PushTest {
        id: Cow<'a, str>,
    },
    /// A page of the journal (issue 24).
    History {
        id: Cow<'a, str>,
        before: Option<u64>,
        limit: usize,
    },
    /// Drop this device's journal (issue 24).
    Forget {
        id: Cow<'a, str>,
    },
    /// The paired devices (issue 26; owner connections only).
    Devices {
        id: Cow<'a, str>,
    },
    /// Revoke a paired device (issue 26; owner connections only).
    Revoke {
        id: Cow<'a, str>,
        device: Cow<'a, str>,
    },
    /// An unknown `t`: ignored after `hello` (decisions G3), fatal before it (G4).
    Unknown(Cow<'a, str>),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hello<'a> {
    /// Empty when absent: decisions H1 answers both with `auth_failed`.
    pub token: Cow<'a, str>,
    pub device_id: Cow<'a, str>,
    pub device_name: Cow<'a, str>,
    pub platform: Cow<'a, str>,
    pub app_version: Cow<'a, str>,
    pub user_id: Cow<'a, str>,
    pub user_name: Cow<'a, str>,
    /// `resume.after` (issue 24): replay what changed after this seq.
    pub resume_after: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TextFrame<'a> {
    pub id: Cow<'a, str>,
    pub text: Cow<'a, str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioFormat {
    Wav,
    Ogg,
}

impl AudioFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            AudioFormat::Wav => "wav",
            AudioFormat::Ogg => "ogg",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct AudioFrame<'a> {
    pub id: Cow<'a, str>,
    pub format: AudioFormat,
    /// Still base64: decoded only after the dedup check, straight into its buffer.
    pub data: Cow<'a, str>,
    pub text: Option<Cow<'a, str>>,
}

/// What the app may upload (protocol-v1.md `media` app → agent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UploadKind {
    Image,
    Video,
    Document,
    Audio,
}

impl UploadKind {
    pub fn parse(s: &str) -> Option<UploadKind> {
        Some(match &*lower(s) {
            "image" => UploadKind::Image,
            "video" => UploadKind::Video,
            "document" => UploadKind::Document,
            "audio" => UploadKind::Audio,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UploadKind::Image => "image",
            UploadKind::Video => "video",
            UploadKind::Document => "document",
            UploadKind::Audio => "audio",
        }
    }
}

/// What the gateway may send down (protocol-v1.md `media` agent → app, decisions S4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DownloadKind {
    Image,
    Voice,
    Video,
    Document,
    Animation,
}

impl DownloadKind {
    pub fn parse(s: &str) -> Option<DownloadKind> {
        Some(match &*lower(s) {
            "image" => DownloadKind::Image,
            "voice" => DownloadKind::Voice,
            "video" => DownloadKind::Video,
            "document" => DownloadKind::Document,
            "animation" => DownloadKind::Animation,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DownloadKind::Image => "image",
            DownloadKind::Voice => "voice",
            DownloadKind::Video => "video",
            DownloadKind::Document => "document",
            DownloadKind::Animation => "animation",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MediaChunk<'a> {
    pub id: Cow<'a, str>,
    pub kind: UploadKind,
    pub mime: Cow<'a, str>,
    pub filename: Cow<'a, str>,
    pub caption: Option<Cow<'a, str>>,
    pub data: Cow<'a, str>,
    pub part: u32,
    pub parts: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PromptAnswer<'a> {
    pub prompt_id: Cow<'a, str>,
    /// Lower-cased (G2); empty when absent.
    pub option_id: Cow<'a, str>,
    pub text: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attachment<'a> {
    pub kind: DownloadKind,
    pub mime: Cow<'a, str>,
    pub filename: Cow<'a, str>,
    pub data: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Deliver<'a> {
    pub id: Cow<'a, str>,
    pub target: Cow<'a, str>,
    pub text: Option<Cow<'a, str>>,
    pub media: Option<Attachment<'a>>,
}

/// Every field any client frame has. Which of them matter depends on `t`.
#[derive(Deserialize, Default)]
pub(super) struct RawFrame<'a> {
    #[serde(borrow, default)]
    t: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    token: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    text: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    format: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    data: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    kind: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    mime: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    filename: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    caption: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    part: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    parts: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    prompt_id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    option_id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    target: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    device: Option<super::devices::DeviceField<'a>>,
    #[serde(borrow, default)]
    user: Option<Object<RawUser<'a>>>,
    #[serde(borrow, default)]
    media: Option<Object<RawAttachment<'a>>>,
    #[serde(borrow, default)]
    pub(super) subscription: Option<Object<super::push::RawSubscription<'a>>>,
    #[serde(borrow, default)]
    pub(super) app_url: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    resume: Option<Object<super::journal::RawResume<'a>>>,
    #[serde(borrow, default)]
    pub(super) before: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    pub(super) limit: Option<Scalar<'a>>,
}

impl<'a> RawFrame<'a> {
    pub(super) fn device_field(&self) -> Option<&super::devices::DeviceField<'a>> {
        self.device.as_ref()
    }
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
pub(super) struct RawDevice<'a> {
    #[serde(borrow, default)]
    id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    name: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    platform: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    app_version: Option<Scalar<'a>>,
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
struct RawUser<'a> {
    #[serde(borrow, default)]
    id: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    name: Option<Scalar<'a>>,
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq)]
struct RawAttachment<'a> {
    #[serde(borrow, default)]
    kind: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    mime: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    filename: Option<Scalar<'a>>,
    #[serde(borrow, default)]
    data: Option<Scalar<'a>>,
}

/// A string field: absent (`None`), or present with the right type. A present field of the
/// wrong type is `bad_frame` (decisions G5). JSON `null` counts as absent.
pub(super) fn opt_str<'s, 'a>(
    field: &'s Option<Scalar<'a>>,
    name: &'static str,
) -> Result<Option<&'s Cow<'a, str>>, Rejection> {
    match field {
        None => Ok(None),
        Some(Scalar::Str(s)) => Ok(Some(s)),
        Some(_) => Err(Rejection::new(ErrorCode::BadFrame, format!("{name} must be a string"))),
    }
}

pub(super) fn req_str<'s, 'a>(
    field: &'s Option<Scalar<'a>>,
    name: &'static str,
) -> Result<&'s Cow<'a, str>, Rejection> {
    opt_str(field, name)?.ok_or_else(|| Rejection::new(ErrorCode::BadFrame, format!("{name} is required")))
}

fn opt_int(field: &Option<Scalar<'_>>, name: &'static str) -> Result<Option<i64>, Rejection> {
    match field {
        None => Ok(None),
        Some(Scalar::Int(n)) => Ok(Some(*n)),
        Some(_) => Err(Rejection::new(
            ErrorCode::BadFrame,
            format!("{name} must be an integer"),
        )),
    }
}

/// Borrows a truncated prefix of a string field. Identifiers almost never carry JSON escapes;
/// when one does, the owned string lives in the `RawFrame` and we truncate that.
pub(super) fn cut<'a>(s: &Cow<'a, str>, max: usize) -> Cow<'a, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(truncate_chars(b, max)),
        Cow::Owned(o) => Cow::Owned(truncate_chars(o, max).to_owned()),
    }
}

/// Parses and validates one client frame. On error, the rejection carries the frame's id
/// when one could be read (decisions G9).
pub fn parse_client_frame(bytes: &[u8]) -> Result<ClientFrame<'_>, Rejection> {
    // A JSON array would deserialize into a struct by position; the spec wants an object.
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(Rejection::bad_frame("frame is not a JSON object"));
    }
    let raw: RawFrame<'_> = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            Rejection::bad_frame("frame has a malformed field")
        } else {
            Rejection::bad_frame("frame is not valid UTF-8 JSON")
        }
    })?;
    validate(&raw).map_err(|r| {
        // L10: a `prompt` answer has no `id`; its `prompt_id` is what the app correlates on.
        let id = raw.id.as_ref().or(raw.prompt_id.as_ref()).and_then(Scalar::as_str);
        r.with_id(id.map(|s| truncate_chars(s, MAX_ID_CHARS)))
    })
}

fn validate<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let t = match &raw.t {
        Some(Scalar::Str(t)) => lower(t),
        Some(_) => return Err(Rejection::bad_frame("t must be a string")),
        None => return Err(Rejection::bad_frame("t is required")),
    };
    match &*t {
        "hello" => hello(raw),
        "text" => text(raw),
        "audio" => audio(raw),
        "media" => media(raw),
        "prompt" => prompt(raw),
        "typing" => Ok(ClientFrame::Typing),
        "ping" => Ok(ClientFrame::Ping { ts: raw.ts }),
        "ack" => ack(raw),
        "deliver" => deliver(raw),
        "push_subscribe" => super::push::subscribe(raw),
        "push_unsubscribe" => super::push::unsubscribe(raw),
        "push_test" => super::push::test(raw),
        "history" => super::journal::history(raw),
        "forget" => super::journal::forget(raw),
        "devices" => super::devices::devices(raw),
        "revoke" => super::devices::revoke(raw),
        _ => Ok(ClientFrame::Unknown(Cow::Owned(t.into_owned()))),
    }
}

fn owned_cut<'a>(field: Option<&Cow<'a, str>>, max: usize) -> Cow<'a, str> {
    field.map(|s| cut(s, max)).unwrap_or(Cow::Borrowed(""))
}

fn hello<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let token = opt_str(&raw.token, "token")?.cloned().unwrap_or_default();
    let (no_device, no_user) = (RawDevice::default(), RawUser::default());
    let device = match &raw.device {
        None => &no_device,
        Some(super::devices::DeviceField::Object(d)) => d,
        Some(_) => return Err(Rejection::bad_frame("device must be an object")),
    };
    let user = match &raw.user {
        None => &no_user,
        Some(Object::Ok(u)) => u,
        Some(Object::Wrong) => return Err(Rejection::bad_frame("user must be an object")),
    };
    let n = MAX_DEVICE_FIELD_CHARS;
    Ok(ClientFrame::Hello(Hello {
        token,
        device_id: owned_cut(opt_str(&device.id, "device.id")?, n),
        device_name: owned_cut(opt_str(&device.name, "device.name")?, n),
        platform: owned_cut(opt_str(&device.platform, "device.platform")?, n),
        app_version: owned_cut(opt_str(&device.app_version, "device.app_version")?, n),
        user_id: owned_cut(opt_str(&user.id, "user.id")?, n),
        user_name: owned_cut(opt_str(&user.name, "user.name")?, n),
        resume_after: super::journal::resume_after(&raw.resume)?,
    }))
}

/// `id`, required and truncated (decisions G8). Borrowed from the input unless it had escapes.
pub(super) fn frame_id<'a>(raw: &RawFrame<'a>) -> Result<Cow<'a, str>, Rejection> {
    Ok(cut(req_str(&raw.id, "id")?, MAX_ID_CHARS))
}

/// A text field that must be non-empty and at most `MAX_TEXT_CHARS` (decisions G1, G7).
fn bounded_text<'a>(s: &Cow<'a, str>, name: &'static str) -> Result<Cow<'a, str>, Rejection> {
    if exceeds_chars(s, MAX_TEXT_CHARS) {
        return Err(Rejection::new(
            ErrorCode::TooBig,
            format!("{name} is over {MAX_TEXT_CHARS} characters"),
        ));
    }
    Ok(s.clone())
}

fn text<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let id = frame_id(raw)?;
    let text = req_str(&raw.text, "text")?;
    if is_blank(text) {
        return Err(Rejection::bad_frame("text is empty"));
    }
    let text = bounded_text(text, "text")?;
    Ok(ClientFrame::Text(TextFrame { id, text }))
}

fn audio<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let id = frame_id(raw)?;
    let format = req_str(&raw.format, "format")?;
    let data = req_str(&raw.data, "data")?.clone();
    let text = opt_str(&raw.text, "text")?
        .filter(|t| !is_blank(t))
        .map(|t| bounded_text(t, "text"))
        .transpose()?;
    let format = match &*lower(format) {
        "wav" => AudioFormat::Wav,
        "ogg" => AudioFormat::Ogg,
        _ => {
            return Err(Rejection::new(
                ErrorCode::UnsupportedFrame,
                "audio format must be wav or ogg",
            ))
        }
    };
    Ok(ClientFrame::Audio(AudioFrame { id, format, data, text }))
}

fn media<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let id = frame_id(raw)?;
    let kind = req_str(&raw.kind, "kind")?;
    let data = req_str(&raw.data, "data")?.clone();
    let mime = opt_str(&raw.mime, "mime")?.cloned().unwrap_or_default();
    let filename = owned_cut(opt_str(&raw.filename, "filename")?, MAX_FILENAME_CHARS);
    let caption = opt_str(&raw.caption, "caption")?
        .filter(|c| !is_blank(c))
        .map(|c| bounded_text(c, "caption"))
        .transpose()?;
    let part = opt_int(&raw.part, "part")?.unwrap_or(0);
    let parts = opt_int(&raw.parts, "parts")?.unwrap_or(1);
    let kind = UploadKind::parse(kind).ok_or_else(|| {
        Rejection::new(
            ErrorCode::UnsupportedFrame,
            "media kind must be image, video, document or audio",
        )
    })?;
    // decisions U3: the part numbers are checked before any buffer exists.
    if parts < 1 || parts > i64::from(MAX_MEDIA_PARTS) {
        return Err(Rejection::bad_frame("parts must be between 1 and 2048"));
    }
    if part < 0 || part >= parts {
        return Err(Rejection::bad_frame("part must be between 0 and parts - 1"));
    }
    Ok(ClientFrame::Media(MediaChunk {
        id,
        kind,
        mime,
        filename,
        caption,
        data,
        // Both were range-checked above against MAX_MEDIA_PARTS.
        part: part as u32,
        parts: parts as u32,
    }))
}

fn prompt<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let prompt_id = cut(req_str(&raw.prompt_id, "prompt_id")?, MAX_ID_CHARS);
    let option_id = opt_str(&raw.option_id, "option_id")?
        .map(|o| Cow::<str>::Owned(lower(o.trim()).into_owned()))
        .unwrap_or_default();
    let text = opt_str(&raw.text, "text")?.cloned().unwrap_or_default();
    if option_id.is_empty() && is_blank(&text) {
        return Err(Rejection::bad_frame("prompt needs option_id or text"));
    }
    if exceeds_chars(&text, MAX_TEXT_CHARS) {
        return Err(Rejection::too_big("text is over 12000 characters"));
    }
    Ok(ClientFrame::Prompt(PromptAnswer {
        prompt_id,
        option_id,
        text,
    }))
}

fn ack<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    Ok(ClientFrame::Ack { id: frame_id(raw)? })
}

fn deliver<'a>(raw: &RawFrame<'a>) -> Result<ClientFrame<'a>, Rejection> {
    let id = frame_id(raw)?;
    let target = opt_str(&raw.target, "target")?
        .map(|t| cut(t, MAX_ID_CHARS + "mobile:".len()))
        .unwrap_or_default();
    let text = opt_str(&raw.text, "text")?
        .filter(|t| !is_blank(t))
        .map(|t| bounded_text(t, "text"))
        .transpose()?;
    let media = match &raw.media {
        None => None,
        Some(Object::Wrong) => return Err(Rejection::bad_frame("media must be an object")),
        Some(Object::Ok(m)) => {
            let kind = req_str(&m.kind, "media.kind")?;
            let data = req_str(&m.data, "media.data")?.clone();
            let mime = opt_str(&m.mime, "media.mime")?.cloned().unwrap_or_default();
            let filename = owned_cut(opt_str(&m.filename, "media.filename")?, MAX_FILENAME_CHARS);
            let kind = DownloadKind::parse(kind).ok_or_else(|| {
                Rejection::new(
                    ErrorCode::UnsupportedFrame,
                    "media kind must be image, voice, video, document or animation",
                )
            })?;
            Some(Attachment {
                kind,
                mime,
                filename,
                data,
            })
        }
    };
    if text.is_none() && media.is_none() {
        return Err(Rejection::bad_frame("deliver needs text or media"));
    }
    Ok(ClientFrame::Deliver(Deliver {
        id,
        target,
        text,
        media,
    }))
}
