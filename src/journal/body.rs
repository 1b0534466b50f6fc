//! What an entry's `body` holds: the item as `history` shows it, without its `seq` (L59).
//! The core writes it and reads it back (restore, replay); the store never parses it.

use serde::{Deserialize, Serialize};

/// A body, as written and read back. Unknown fields are ignored, so an older build reads a
/// newer body's known fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    pub t: String,
    /// `user` for the person's own messages; absent for the agent's and deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A message: its latest version is its last (`final`).
    #[serde(rename = "final", default, skip_serializing_if = "Option::is_none")]
    pub is_final: Option<bool>,
    /// A held message: the phone saw an earlier version of it (L6).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edit: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// A file's name in the media store (L63), as the core named it; never shown: an item
    /// carries [`Body::url`] instead, while the store still has the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
    /// Where a client fetches a kept file (`/files/…`, L63): set on the way out, never kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A card's fields (`t: prompt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<CardOptionBody>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden_chars: bool,
    /// A card a notification told its device of (issue 25); never shown to a client.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notified: bool,
    /// A card that closed: how (L59).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<ClosedBody>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardOptionBody {
    pub id: String,
    pub label: String,
    #[serde(default)]
    pub style: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
}

impl Body {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `None` for a body this build cannot read (logged by the caller).
    pub fn parse(json: &str) -> Option<Body> {
        serde_json::from_str(json).ok()
    }

    pub fn message(id: &str, text: &str, done: bool, edit: bool) -> Body {
        Body {
            t: "message".into(),
            id: id.into(),
            text: Some(text.into()),
            is_final: Some(done),
            edit,
            ..Body::default()
        }
    }

    pub fn user_text(id: &str, text: &str) -> Body {
        Body {
            t: "text".into(),
            from: Some("user".into()),
            id: id.into(),
            text: Some(text.into()),
            ..Body::default()
        }
    }
}

impl Body {
    /// The person's voice note: its metadata (the recording stays with the agent).
    pub fn user_audio(id: &str, format: &str, size: usize, text: Option<&str>) -> Body {
        Body {
            t: "audio".into(),
            from: Some("user".into()),
            id: id.into(),
            format: Some(format.into()),
            size: Some(size as u64),
            text: text.map(Into::into),
            ..Body::default()
        }
    }

    /// A file, either way: its metadata; the bytes are not in the body.
    pub fn file(from_user: bool, id: &str, kind: &str, mime: &str, filename: &str, size: usize) -> Body {
        Body {
            t: "media".into(),
            from: from_user.then(|| "user".into()),
            id: id.into(),
            kind: Some(kind.into()),
            mime: Some(mime.into()),
            filename: Some(filename.into()),
            size: Some(size as u64),
            ..Body::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_reads_back_as_written() {
        let mut b = Body::file(true, "u1", "image", "image/png", "a.png", 3);
        b.caption = Some("look".into());
        assert_eq!(Body::parse(&b.to_json()), Some(b.clone()));
        let json = b.to_json();
        assert!(json.starts_with(r#"{"t":"media","from":"user","id":"u1""#), "{json}");
        let m = Body::message("r1", "hi", true, false);
        assert_eq!(m.to_json(), r#"{"t":"message","id":"r1","text":"hi","final":true}"#);
    }
}
