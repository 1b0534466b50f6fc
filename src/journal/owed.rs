//! Events the agent is owed ([`Record::Owe`](super::Record::Owe)), as the core writes them
//! and reads them back: at start-up, and when an agent connection ended with their lines
//! unwritten ([`Read::Owed`](super::Read::Owed)).
//!
//! A message, a card's answer and a card's expiry are promises: the phone got `received`
//! (or saw its card close), so the agent must get the event even if the gateway dies in
//! the moment between the commit and the hand-over. Such an event is owed in the same
//! commit as the change that promised it and handed over again after a restart (or to the
//! next agent) until the agent has it; a message handed over again says `redelivered`, so that an agent that did
//! get it just before the crash can drop it by its id (L64).

use serde::{Deserialize, Serialize};

use super::Owed;
use crate::agent::{AgentEvent, Audio, PromptKind, UserInfo};
use crate::ids::{DeviceId, PromptId};
use crate::time::Time;
use crate::uploads::ReceivedFile;
use crate::wire::client::{AudioFormat, UploadKind};

/// Which owed event the agent has had: its device, and its key within the device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventKey {
    pub device: DeviceId,
    pub key: String,
}

impl EventKey {
    /// `event`'s key, if it is one the agent is owed.
    pub fn of(event: &AgentEvent) -> Option<EventKey> {
        Some(EventKey {
            device: event.device().clone(),
            key: key_of(event)?,
        })
    }
}

/// The key an event is owed under within its device, if it is one the agent is owed.
fn key_of(event: &AgentEvent) -> Option<String> {
    match event {
        AgentEvent::MessageReceived { id, .. } => Some(format!("m:{id}")),
        AgentEvent::PromptAnswered { prompt, .. } | AgentEvent::PromptExpired { prompt, .. } => {
            Some(format!("p:{prompt}"))
        }
        _ => None,
    }
}

/// The bytes an event holds in memory (its text and its file), for the bounds of what
/// waits for a commit.
pub fn event_size(event: &AgentEvent) -> usize {
    match event {
        AgentEvent::MessageReceived {
            id, text, audio, file, ..
        } => {
            id.len()
                + text.as_ref().map_or(0, String::len)
                + audio.as_ref().map_or(0, |a| a.data.len())
                + file
                    .as_ref()
                    .map_or(0, |f| f.data.len() + f.filename.len() + f.mime.len())
        }
        AgentEvent::PromptAnswered { asked, text, label, .. } => {
            asked.len() + text.as_ref().map_or(0, String::len) + label.as_ref().map_or(0, String::len)
        }
        AgentEvent::PromptExpired { asked, .. } => asked.len(),
        _ => 0,
    }
}

/// The body of an owed event: the event without its file's bytes (those go in the blob).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum OwedBody {
    Message {
        id: String,
        user_id: String,
        user_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// A voice note: its format (`wav`, `ogg`); the bytes are the blob.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audio: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<FileBody>,
        /// The voice note's or file's name in the media store (L63): saved again under it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_name: Option<String>,
    },
    Answered {
        prompt: String,
        kind: String,
        option_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        asked: String,
    },
    Expired {
        prompt: String,
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        option_id: Option<String>,
        asked: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct FileBody {
    id: String,
    kind: String,
    mime: String,
    filename: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    caption: Option<String>,
}

/// What to keep of `event`, owed as of `now`; `None` for events of the moment (typing,
/// presence), which nobody is owed.
pub fn owe(event: &AgentEvent, now: Time) -> Option<Owed> {
    let key = key_of(event)?;
    let (body, blob) = match event.clone() {
        AgentEvent::MessageReceived {
            id,
            user,
            text,
            audio,
            file,
            ..
        } => {
            let (mut blob, mut media_name) = (None, None);
            let audio = audio.map(|a| {
                blob = Some(a.data);
                media_name = a.media_name;
                a.format.as_str().to_owned()
            });
            let file = file.map(|f| {
                blob = Some(f.data);
                media_name = f.media_name;
                FileBody {
                    id: f.id,
                    kind: f.kind.as_str().to_owned(),
                    mime: f.mime,
                    filename: f.filename,
                    caption: f.caption,
                }
            });
            let body = OwedBody::Message {
                id,
                user_id: user.id,
                user_name: user.name,
                text,
                audio,
                file,
                media_name,
            };
            (body, blob)
        }
        AgentEvent::PromptAnswered {
            prompt,
            kind,
            option_id,
            label,
            text,
            asked,
            ..
        } => {
            let body = OwedBody::Answered {
                prompt: prompt.0,
                kind: kind.as_str().to_owned(),
                option_id,
                label,
                text,
                asked,
            };
            (body, None)
        }
        AgentEvent::PromptExpired {
            prompt,
            kind,
            option_id,
            asked,
            ..
        } => {
            let body = OwedBody::Expired {
                prompt: prompt.0,
                kind: kind.as_str().to_owned(),
                option_id,
                asked,
            };
            (body, None)
        }
        _ => return None,
    };
    Some(Owed {
        device: event.device().clone(),
        key,
        at: now,
        body: serde_json::to_string(&body).ok()?,
        blob,
    })
}

/// The event an owed row holds, handed over again (`redelivered`); `None` for a row this
/// build cannot read (logged by the caller and dropped: it can never be handed over).
pub fn event_of(owed: &Owed) -> Option<AgentEvent> {
    let body: OwedBody = serde_json::from_str(&owed.body).ok()?;
    let device = owed.device.clone();
    let bytes = || owed.blob.clone().unwrap_or_default();
    Some(match body {
        OwedBody::Message {
            id,
            user_id,
            user_name,
            text,
            audio,
            file,
            media_name,
        } => {
            let audio = match audio.as_deref() {
                None => None,
                Some(format) => Some(Audio {
                    format: audio_format(format)?,
                    data: bytes(),
                    media_name: media_name.clone(),
                }),
            };
            let file = match file {
                None => None,
                Some(f) => Some(ReceivedFile {
                    id: f.id,
                    kind: UploadKind::parse(&f.kind)?,
                    mime: f.mime,
                    filename: f.filename,
                    caption: f.caption,
                    data: bytes(),
                    media_name,
                }),
            };
            AgentEvent::MessageReceived {
                device,
                id,
                user: UserInfo {
                    id: user_id,
                    name: user_name,
                },
                text,
                audio,
                file,
                redelivered: true,
            }
        }
        OwedBody::Answered {
            prompt,
            kind,
            option_id,
            label,
            text,
            asked,
        } => AgentEvent::PromptAnswered {
            device,
            prompt: PromptId(prompt),
            kind: PromptKind::parse(&kind)?,
            option_id,
            label,
            text,
            asked,
        },
        OwedBody::Expired {
            prompt,
            kind,
            option_id,
            asked,
        } => AgentEvent::PromptExpired {
            device,
            prompt: PromptId(prompt),
            kind: PromptKind::parse(&kind)?,
            option_id,
            asked,
        },
    })
}

fn audio_format(s: &str) -> Option<AudioFormat> {
    match s {
        "wav" => Some(AudioFormat::Wav),
        "ogg" => Some(AudioFormat::Ogg),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Time;

    fn round_trip(event: AgentEvent) -> AgentEvent {
        let owed = owe(&event, Time::ZERO).expect("owed");
        event_of(&owed).expect("read back")
    }

    #[test]
    fn a_message_with_its_file_comes_back_redelivered() {
        let file = ReceivedFile {
            id: "f1".into(),
            kind: UploadKind::Image,
            mime: "image/png".into(),
            filename: "a.png".into(),
            caption: Some("look".into()),
            data: vec![1, 2, 3],
            media_name: Some("0123456789abcdef0123456789abcdef-tel-a.png".into()),
        };
        let event = AgentEvent::MessageReceived {
            device: DeviceId::from("tel"),
            id: "m1".into(),
            user: UserInfo {
                id: "u".into(),
                name: "Ann".into(),
            },
            text: None,
            audio: None,
            file: Some(file),
            redelivered: false,
        };
        let owed = owe(&event, Time::ZERO).unwrap();
        assert_eq!(owed.key, "m:m1");
        assert_eq!(owed.blob.as_deref(), Some(&[1u8, 2, 3][..]));
        assert!(!owed.body.contains("AQID"), "bytes stay out of the body: {}", owed.body);
        let AgentEvent::MessageReceived { redelivered, .. } = &round_trip(event.clone()) else {
            panic!()
        };
        assert!(redelivered);
        let mut back = round_trip(event.clone());
        if let AgentEvent::MessageReceived { redelivered, .. } = &mut back {
            *redelivered = false;
        }
        assert_eq!(back, event);
    }

    #[test]
    fn card_answers_and_expiries_come_back_whole() {
        let answered = AgentEvent::PromptAnswered {
            device: DeviceId::from("tel"),
            prompt: PromptId::from("c1"),
            kind: PromptKind::Clarify,
            option_id: "other".into(),
            label: None,
            text: Some("blue".into()),
            asked: "Which colour?".into(),
        };
        assert_eq!(round_trip(answered.clone()), answered);
        let expired = AgentEvent::PromptExpired {
            device: DeviceId::from("tel"),
            prompt: PromptId::from("c2"),
            kind: PromptKind::ExecApproval,
            option_id: Some("deny".into()),
            asked: "rm -rf /tmp/x".into(),
        };
        assert_eq!(owe(&expired, Time::ZERO).unwrap().key, "p:c2");
        assert_eq!(round_trip(expired.clone()), expired);
    }

    #[test]
    fn events_of_the_moment_are_owed_nothing() {
        let typing = AgentEvent::UserTyping {
            device: DeviceId::from("tel"),
        };
        assert!(owe(&typing, Time::ZERO).is_none());
    }

    #[test]
    fn a_row_this_build_cannot_read_is_none() {
        let owed = Owed {
            device: DeviceId::from("tel"),
            key: "m:x".into(),
            at: Time::ZERO,
            body: "{\"t\":\"from_the_future\"}".into(),
            blob: None,
        };
        assert!(event_of(&owed).is_none());
    }
}
