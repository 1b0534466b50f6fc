//! The agent protocol's lines (docs/agent-protocol.md): parsing what an agent sends, and
//! writing what the gateway tells it. Pure functions over bytes and strings.

use std::borrow::Cow;
use std::path::PathBuf;

use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::agent::{AgentCommand, AgentEvent, OutgoingFile, PromptRequest, UserInfo};
use crate::base64::{decode_bounded, BoundedDecodeError};
use crate::ids::{DeviceId, MessageId, PromptId};
use crate::limits::{MAX_ID_CHARS, MAX_MEDIA_BYTES};
use crate::text::truncate_chars;
use crate::wire::DownloadKind;

/// The version this gateway speaks.
pub const LINK_VERSION: u64 = 1;

/// Who is on the other end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRole {
    /// The agent: it gets events and may send every command. One at a time.
    Agent,
    /// A delivery-only connection (`hermes send`, cron): only `deliver`.
    Deliver,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkHello {
    pub version: u64,
    pub agent: String,
    pub inline: bool,
    pub role: LinkRole,
    pub token: Option<String>,
}

/// A command as parsed: ready to apply, or waiting for a file to be read from `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkCommand {
    Ready(AgentCommand),
    /// `command`'s file (its `OutgoingFile::data` still empty) is at `path`.
    NeedsFile {
        command: AgentCommand,
        path: PathBuf,
    },
}

impl LinkCommand {
    pub fn is_deliver(&self) -> bool {
        matches!(
            self,
            LinkCommand::Ready(AgentCommand::Deliver { .. })
                | LinkCommand::NeedsFile {
                    command: AgentCommand::Deliver { .. },
                    ..
                }
        )
    }
}

/// The file a command carries, to fill in once it is read.
pub fn file_of(command: &mut AgentCommand) -> Option<&mut OutgoingFile> {
    match command {
        AgentCommand::SendFile { file, .. } => Some(file),
        AgentCommand::Deliver { file, .. } => file.as_mut(),
        _ => None,
    }
}

/// One line from an agent. Returned and consumed at once, so its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentLine {
    Hello(LinkHello),
    Command {
        reference: Option<String>,
        command: LinkCommand,
    },
}

/// Why a line was refused; answered with `error{ref, code, message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub reference: Option<String>,
    pub code: &'static str,
    pub message: String,
}

impl LineError {
    pub fn new(code: &'static str, message: impl Into<String>) -> LineError {
        LineError {
            reference: None,
            code,
            message: message.into(),
        }
    }

    fn with_ref(mut self, reference: Option<&str>) -> LineError {
        self.reference = reference.map(|r| truncate_chars(r, MAX_ID_CHARS).to_owned());
        self
    }
}

fn bad(message: impl Into<String>) -> LineError {
    LineError::new("bad_line", message)
}

#[derive(Deserialize, Default)]
struct RawMedia<'a> {
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    mime: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    path: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
}

/// Every field any agent line has; which matter depends on `t`.
#[derive(Deserialize, Default)]
struct RawLine<'a> {
    #[serde(borrow, default)]
    t: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "ref")]
    reference: Option<Cow<'a, str>>,
    #[serde(default)]
    v: Option<u64>,
    #[serde(borrow, default)]
    agent: Option<Cow<'a, str>>,
    #[serde(default)]
    inline: Option<bool>,
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    token: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    device: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    mime: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    caption: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reply_to: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    path: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    prompt: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    command: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    description: Option<Cow<'a, str>>,
    #[serde(default)]
    options: Option<Vec<String>>,
    #[serde(borrow, default)]
    question: Option<Cow<'a, str>>,
    #[serde(default)]
    choices: Option<Vec<String>>,
    #[serde(default)]
    ttl: Option<u64>,
    #[serde(borrow, default)]
    state: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    target: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    media: Option<RawMedia<'a>>,
}

/// Only what an error answer needs, read from a line the full parse refused.
#[derive(Deserialize)]
struct RefOnly<'a> {
    #[serde(borrow, default, rename = "ref")]
    reference: Option<Cow<'a, str>>,
}

/// Parses one line (without its newline).
pub fn parse_agent_line(line: &[u8]) -> Result<AgentLine, LineError> {
    let raw: RawLine<'_> = match serde_json::from_slice(line) {
        Ok(raw) => raw,
        Err(e) => {
            let reference = serde_json::from_slice::<RefOnly<'_>>(line)
                .ok()
                .and_then(|r| r.reference);
            let message = if e.is_syntax() || e.is_eof() {
                format!("not JSON: {e}")
            } else {
                format!("a field has the wrong type: {e}")
            };
            return Err(bad(message).with_ref(reference.as_deref()));
        }
    };
    let reference = raw
        .reference
        .as_deref()
        .map(|r| truncate_chars(r, MAX_ID_CHARS).to_owned());
    let t = raw.t.clone().unwrap_or_default();
    let result = match &*t {
        "hello" => hello(&raw).map(AgentLine::Hello),
        "" => Err(bad("no `t`")),
        _ => command(&t, raw).map(|command| AgentLine::Command {
            reference: reference.clone(),
            command,
        }),
    };
    result.map_err(|e| e.with_ref(reference.as_deref()))
}

fn hello(raw: &RawLine<'_>) -> Result<LinkHello, LineError> {
    let version = raw.v.ok_or_else(|| bad("hello needs `v`"))?;
    let role = match raw.role.as_deref().unwrap_or("agent") {
        "agent" => LinkRole::Agent,
        "deliver" => LinkRole::Deliver,
        other => return Err(bad(format!("unknown role {:?}", truncate_chars(other, 40)))),
    };
    Ok(LinkHello {
        version,
        agent: truncate_chars(raw.agent.as_deref().unwrap_or(""), MAX_ID_CHARS).to_owned(),
        inline: raw.inline.unwrap_or(false),
        role,
        token: raw.token.as_deref().map(str::to_owned),
    })
}

fn required<'r>(field: &'r Option<Cow<'_, str>>, name: &str, t: &str) -> Result<&'r str, LineError> {
    match field.as_deref() {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(bad(format!("{t} needs `{name}`"))),
    }
}

/// An id as the phone side cuts it (G8): 1 to 128 characters.
fn id_field(field: &Option<Cow<'_, str>>, name: &str, t: &str) -> Result<String, LineError> {
    Ok(truncate_chars(required(field, name, t)?, MAX_ID_CHARS).to_owned())
}

fn device(raw: &RawLine<'_>, t: &str) -> Result<DeviceId, LineError> {
    id_field(&raw.device, "device", t).map(DeviceId)
}

fn download_kind(kind: Option<&str>, t: &str) -> Result<DownloadKind, LineError> {
    let kind = kind.ok_or_else(|| bad(format!("{t} needs `kind`")))?;
    DownloadKind::parse(kind).ok_or_else(|| {
        bad(format!(
            "{t}: kind {:?} is not one of image, voice, video, document, animation",
            truncate_chars(kind, 40)
        ))
    })
}

/// A file's bytes from `data`, or where to read them (`path`, absolute).
enum Source {
    Data(Vec<u8>),
    Path(PathBuf),
}

fn source(path: Option<&str>, data: Option<&str>, t: &str) -> Result<Source, LineError> {
    match (path, data) {
        (_, Some(data)) => decode_bounded(data, MAX_MEDIA_BYTES)
            .map(Source::Data)
            .map_err(|e| match e {
                BoundedDecodeError::TooBig => LineError::new("file_too_big", "file is over 8 MiB"),
                BoundedDecodeError::Invalid => LineError::new("bad_data", "`data` is not valid base64"),
            }),
        (Some(path), None) => {
            let path = PathBuf::from(path);
            if path.is_absolute() {
                Ok(Source::Path(path))
            } else {
                Err(LineError::new("file_unreadable", "`path` must be absolute"))
            }
        }
        (None, None) => Err(bad(format!("{t} needs `path` or `data`"))),
    }
}

fn with_source(mut command: AgentCommand, source: Source) -> LinkCommand {
    match source {
        Source::Data(data) => {
            if let Some(file) = file_of(&mut command) {
                file.data = data;
            }
            LinkCommand::Ready(command)
        }
        Source::Path(path) => LinkCommand::NeedsFile { command, path },
    }
}

fn command(t: &str, raw: RawLine<'_>) -> Result<LinkCommand, LineError> {
    let command = match t {
        "reply" => AgentCommand::Reply {
            device: device(&raw, t)?,
            message: MessageId(id_field(&raw.id, "id", t)?),
            text: raw.text.map(Cow::into_owned).ok_or_else(|| bad("reply needs `text`"))?,
            done: raw.done.unwrap_or(true),
        },
        "send_file" => {
            let device = device(&raw, t)?;
            let file = OutgoingFile {
                kind: download_kind(raw.kind.as_deref(), t)?,
                mime: raw.mime.as_deref().unwrap_or("").to_owned(),
                filename: required(&raw.name, "name", t)?.to_owned(),
                caption: raw.caption.map(Cow::into_owned),
                data: Vec::new(),
                reply_to: raw
                    .reply_to
                    .as_deref()
                    .map(|r| truncate_chars(r, MAX_ID_CHARS).to_owned()),
            };
            let command = AgentCommand::SendFile { device, file };
            let source = source(raw.path.as_deref(), raw.data.as_deref(), t)?;
            return Ok(with_source(command, source));
        }
        "open_prompt" => {
            let device = device(&raw, t)?;
            let prompt = PromptId(id_field(&raw.prompt, "prompt", t)?);
            let request = match raw.kind.as_deref().unwrap_or("") {
                "exec_approval" => PromptRequest::ExecApproval {
                    command: required(&raw.command, "command", t)?.to_owned(),
                    description: raw.description.as_deref().unwrap_or("").to_owned(),
                    options: raw.options.unwrap_or_default(),
                },
                "slash_confirm" => PromptRequest::SlashConfirm {
                    text: required(&raw.text, "text", t)?.to_owned(),
                    options: raw.options.unwrap_or_default(),
                },
                "clarify" => PromptRequest::Clarify {
                    question: required(&raw.question, "question", t)?.to_owned(),
                    choices: raw.choices.unwrap_or_default(),
                },
                other => {
                    return Err(bad(format!(
                        "open_prompt: kind {:?} is not exec_approval, slash_confirm or clarify",
                        truncate_chars(other, 40)
                    )))
                }
            };
            AgentCommand::OpenPrompt {
                device,
                prompt,
                request,
                ttl_secs: raw.ttl,
            }
        }
        "typing" => AgentCommand::Typing {
            device: device(&raw, t)?,
        },
        "avatar" => AgentCommand::Avatar {
            device: device(&raw, t)?,
            state: required(&raw.state, "state", t)?.to_owned(),
        },
        "end_turn" => AgentCommand::EndTurn {
            device: device(&raw, t)?,
        },
        "deliver" => {
            let id = id_field(&raw.id, "id", t)?;
            let target = raw.target.as_deref().unwrap_or("").to_owned();
            let text = raw.text.map(Cow::into_owned);
            let Some(media) = raw.media else {
                if text.is_none() {
                    return Err(bad("deliver needs `text` or `media`"));
                }
                return Ok(LinkCommand::Ready(AgentCommand::Deliver {
                    sender: String::new(),
                    id,
                    target,
                    text,
                    file: None,
                }));
            };
            let file = OutgoingFile {
                kind: download_kind(media.kind.as_deref(), "deliver.media")?,
                mime: media.mime.as_deref().unwrap_or("").to_owned(),
                filename: required(&media.name, "name", "deliver.media")?.to_owned(),
                caption: None,
                data: Vec::new(),
                reply_to: None,
            };
            let source = source(media.path.as_deref(), media.data.as_deref(), "deliver.media")?;
            let command = AgentCommand::Deliver {
                sender: String::new(),
                id,
                target,
                text,
                file: Some(file),
            };
            return Ok(with_source(command, source));
        }
        other => {
            return Err(LineError::new(
                "unknown_type",
                format!("unknown type {:?}", truncate_chars(other, 40)),
            ))
        }
    };
    Ok(LinkCommand::Ready(command))
}

// ---------------------------------------------------------------------------------------
// Gateway → agent.

/// Serializes `{"t":tag, ...body}` as one line with its newline.
fn line<T: Serialize>(tag: &str, body: &T) -> String {
    let mut s = crate::wire::server::encode(tag, body);
    s.push('\n');
    s
}

#[derive(Serialize)]
struct Limits {
    line_bytes: usize,
    media_bytes: usize,
    text_chars: usize,
    prompt_ttl_secs: u64,
    max_prompt_ttl_secs: u64,
}

#[derive(Serialize)]
struct User<'a> {
    id: &'a str,
    name: &'a str,
}

impl<'a> From<&'a UserInfo> for User<'a> {
    fn from(u: &'a UserInfo) -> User<'a> {
        User {
            id: &u.id,
            name: &u.name,
        }
    }
}

/// A phone online now, for `welcome.devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnlineDevice {
    pub device: DeviceId,
    pub name: String,
    pub user: UserInfo,
}

#[derive(Serialize)]
struct Online<'a> {
    device: &'a str,
    name: &'a str,
    user: User<'a>,
}

pub fn welcome_line(gateway: &str, prompt_ttl_secs: u64, devices: &[OnlineDevice]) -> String {
    #[derive(Serialize)]
    struct Welcome<'a> {
        v: u64,
        gateway: &'a str,
        limits: Limits,
        devices: Vec<Online<'a>>,
    }
    let devices = devices
        .iter()
        .map(|d| Online {
            device: d.device.as_str(),
            name: &d.name,
            user: (&d.user).into(),
        })
        .collect();
    line(
        "welcome",
        &Welcome {
            v: LINK_VERSION,
            gateway,
            limits: Limits {
                line_bytes: crate::limits::MAX_FRAME_BYTES,
                media_bytes: MAX_MEDIA_BYTES,
                text_chars: crate::limits::MAX_TEXT_CHARS,
                prompt_ttl_secs,
                max_prompt_ttl_secs: crate::limits::MAX_PROMPT_TTL_SECS,
            },
            devices,
        },
    )
}

pub fn ok_line(reference: &str, device: Option<&DeviceId>) -> String {
    #[derive(Serialize)]
    struct Ok<'a> {
        #[serde(rename = "ref")]
        reference: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        device: Option<&'a str>,
    }
    line(
        "ok",
        &Ok {
            reference,
            device: device.map(DeviceId::as_str),
        },
    )
}

pub fn error_line(error: &LineError) -> String {
    #[derive(Serialize)]
    struct Error<'a> {
        #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
        reference: Option<&'a str>,
        code: &'a str,
        message: &'a str,
    }
    line(
        "error",
        &Error {
            reference: error.reference.as_deref(),
            code: error.code,
            message: &error.message,
        },
    )
}

/// Where a received file is, for `message.file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileHandover {
    /// Saved here (absolute).
    Saved(PathBuf),
    /// Could not be saved; the agent learns why.
    Failed(String),
    /// The bytes go in the line (`inline: true`).
    Inline,
}

/// Bytes serialized as a base64 string, written straight into the line.
struct Base64Field<'a>(&'a [u8]);

impl Serialize for Base64Field<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&Base64Display::new(self.0, &STANDARD))
    }
}

/// The event as a line. `file` says where a message's file is; other events ignore it.
pub fn event_line(event: &AgentEvent, file: Option<&FileHandover>) -> String {
    match event {
        AgentEvent::MessageReceived {
            device,
            id,
            user,
            text,
            audio,
            file: received,
            redelivered,
        } => {
            #[derive(Serialize)]
            struct FileLine<'a> {
                kind: &'a str,
                mime: &'a str,
                name: &'a str,
                size: usize,
                #[serde(skip_serializing_if = "Option::is_none")]
                path: Option<Cow<'a, str>>,
                #[serde(skip_serializing_if = "Option::is_none")]
                data: Option<Base64Field<'a>>,
                #[serde(skip_serializing_if = "Option::is_none")]
                error: Option<&'a str>,
            }
            #[derive(Serialize)]
            struct Message<'a> {
                device: &'a str,
                id: &'a str,
                user: User<'a>,
                #[serde(skip_serializing_if = "Option::is_none")]
                text: Option<&'a str>,
                #[serde(skip_serializing_if = "Option::is_none")]
                file: Option<FileLine<'a>>,
                /// L64: only when true, so lines stay as they were for agents that never
                /// see a restart.
                #[serde(skip_serializing_if = "std::ops::Not::not")]
                redelivered: bool,
            }
            let voice_name;
            let (kind, mime, name, bytes, caption) = match (audio, received) {
                (Some(a), _) => {
                    voice_name = format!("voice.{}", a.format.as_str());
                    let mime = if a.format.as_str() == "wav" {
                        "audio/wav"
                    } else {
                        "audio/ogg"
                    };
                    (Some("voice"), mime, voice_name.as_str(), &a.data[..], None)
                }
                (None, Some(f)) => (
                    Some(f.kind.as_str()),
                    f.mime.as_str(),
                    f.filename.as_str(),
                    &f.data[..],
                    f.caption.as_deref(),
                ),
                (None, None) => (None, "", "", &[][..], None),
            };
            let file_line = kind.map(|kind| {
                let (path, data, error) = match file {
                    Some(FileHandover::Saved(p)) => (Some(p.to_string_lossy()), None, None),
                    Some(FileHandover::Failed(why)) => (None, None, Some(why.as_str())),
                    Some(FileHandover::Inline) => (None, Some(Base64Field(bytes)), None),
                    None => (None, None, Some("not saved")),
                };
                FileLine {
                    kind,
                    mime,
                    name,
                    size: bytes.len(),
                    path,
                    data,
                    error,
                }
            });
            line(
                "message",
                &Message {
                    device: device.as_str(),
                    id,
                    user: user.into(),
                    text: text.as_deref().or(caption),
                    file: file_line,
                    redelivered: *redelivered,
                },
            )
        }
        AgentEvent::PromptAnswered {
            device,
            prompt,
            kind,
            option_id,
            label,
            text,
            ..
        } => {
            #[derive(Serialize)]
            struct Answered<'a> {
                device: &'a str,
                prompt: &'a str,
                kind: &'a str,
                option: &'a str,
                #[serde(skip_serializing_if = "Option::is_none")]
                label: Option<&'a str>,
                #[serde(skip_serializing_if = "Option::is_none")]
                text: Option<&'a str>,
            }
            line(
                "prompt_answered",
                &Answered {
                    device: device.as_str(),
                    prompt: prompt.as_str(),
                    kind: kind.as_str(),
                    option: option_id,
                    label: label.as_deref(),
                    text: text.as_deref(),
                },
            )
        }
        AgentEvent::PromptExpired {
            device,
            prompt,
            kind,
            option_id,
            ..
        } => {
            #[derive(Serialize)]
            struct Expired<'a> {
                device: &'a str,
                prompt: &'a str,
                kind: &'a str,
                #[serde(skip_serializing_if = "Option::is_none")]
                option: Option<&'a str>,
            }
            line(
                "prompt_expired",
                &Expired {
                    device: device.as_str(),
                    prompt: prompt.as_str(),
                    kind: kind.as_str(),
                    option: option_id.as_deref(),
                },
            )
        }
        AgentEvent::UserTyping { device } => line(
            "typing",
            &DeviceOnly {
                device: device.as_str(),
            },
        ),
        AgentEvent::DeviceOnline { device, name, user } => line(
            "device_online",
            &Online {
                device: device.as_str(),
                name,
                user: user.into(),
            },
        ),
        AgentEvent::DeviceOffline { device } => line(
            "device_offline",
            &DeviceOnly {
                device: device.as_str(),
            },
        ),
    }
}

#[derive(Serialize)]
struct DeviceOnly<'a> {
    device: &'a str,
}
