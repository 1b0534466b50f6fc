//! A phone's message as an HTTP model gets it (issue 11): text as is, a photo as an image
//! part for a vision model or a note otherwise, other files as notes (small text files with
//! their content), voice as its recognized text.

use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::uploads::ReceivedFile;
use hermes_mobile::wire::UploadKind;
use serde_json::{json, Value};

/// Text files up to this size go to the model with their content.
const TEXT_FILE_LIMIT: usize = 32 * 1024;

/// One message of the user, kept as received until its request is made: a photo is
/// encoded (base64, about 4/3 of its size) only then, not while it waits in an inbox.
#[derive(Debug, Clone)]
pub struct Input {
    /// The text part: the user's text, a note about a file, or a photo's caption.
    pub text: String,
    /// A photo for a vision model: its MIME type and bytes.
    pub image: Option<(String, Vec<u8>)>,
    /// What the conversation keeps of it (text only).
    pub history: String,
    /// The journal's key of the message: owed to the agent until its turn has ended or
    /// it is dropped, so that a restart before then hands it over again (L64).
    pub owed: Option<EventKey>,
}

impl Input {
    pub fn text(text: String) -> Input {
        Input {
            history: text.clone(),
            text,
            image: None,
            owed: None,
        }
    }

    /// Bytes held for it, for the inbox's bound.
    pub fn size(&self) -> usize {
        self.text.len() + self.history.len() + self.image.as_ref().map_or(0, |(_, b)| b.len())
    }

    /// The `content` of the user message: a string, or a text and an image part.
    pub fn content(&self) -> Value {
        match &self.image {
            None => Value::String(self.text.clone()),
            Some((mime, data)) => {
                let url = format!("data:{mime};base64,{}", hermes_mobile::base64::encode(data));
                json!([
                    {"type": "text", "text": self.text},
                    {"type": "image_url", "image_url": {"url": url}},
                ])
            }
        }
    }
}

/// The message of a `MessageReceived`, or the note for the phone when it cannot go to the
/// model (a voice message without recognized text).
pub fn input_of(text: Option<String>, audio: bool, file: Option<ReceivedFile>, vision: bool) -> Result<Input, String> {
    if audio {
        return match text.filter(|t| !t.trim().is_empty()) {
            Some(t) => Ok(Input::text(t)),
            None => Err(
                "This agent reads text: a voice message needs speech-to-text, which it does not have. \
                         Turn on the app's speech recognition, or type your message."
                    .into(),
            ),
        };
    }
    let Some(file) = file else {
        return Ok(Input::text(text.unwrap_or_default()));
    };
    let caption = file.caption.clone().filter(|c| !c.trim().is_empty());
    let about = format!("{} ({}, {} bytes)", file.filename, file.mime, file.data.len());
    if file.kind == UploadKind::Image && vision {
        let history = format!("[image {}] {}", file.filename, caption.as_deref().unwrap_or(""))
            .trim()
            .to_owned();
        return Ok(Input {
            text: caption.unwrap_or_else(|| "(an image)".into()),
            image: Some((file.mime, file.data)),
            history,
            owed: None,
        });
    }
    let mut note = match file.kind {
        UploadKind::Image => format!("[The user sent an image: {about}. This model cannot see images.]"),
        UploadKind::Audio => format!("[The user sent an audio file: {about}.]"),
        UploadKind::Video => format!("[The user sent a video: {about}.]"),
        UploadKind::Document => format!("[The user sent a file: {about}.]"),
    };
    let small_text = file.kind == UploadKind::Document
        && file.data.len() <= TEXT_FILE_LIMIT
        && looks_textual(&file.mime, &file.filename);
    if small_text {
        if let Ok(content) = std::str::from_utf8(&file.data) {
            note.push_str(&format!("\n--- {} ---\n{content}\n--- end of file ---", file.filename));
        }
    }
    if let Some(c) = caption {
        note.push('\n');
        note.push_str(&c);
    }
    Ok(Input::text(note))
}

fn looks_textual(mime: &str, filename: &str) -> bool {
    let name = filename.to_ascii_lowercase();
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/json" | "application/xml" | "application/x-yaml" | "application/yaml"
        )
        || [
            ".txt", ".md", ".csv", ".json", ".yaml", ".yml", ".log", ".py", ".rs", ".toml", ".ini",
        ]
        .iter()
        .any(|e| name.ends_with(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(kind: UploadKind, name: &str, mime: &str, data: &[u8]) -> ReceivedFile {
        ReceivedFile {
            id: "f1".into(),
            kind,
            mime: mime.into(),
            filename: name.into(),
            caption: Some("look".into()),
            data: data.to_vec(),
            media_name: None,
        }
    }

    #[test]
    fn photos_are_parts_for_vision_models_and_notes_otherwise() {
        let photo = file(UploadKind::Image, "cat.png", "image/png", b"PNG");
        let i = input_of(None, false, Some(photo.clone()), true).unwrap();
        assert_eq!(i.content()[1]["image_url"]["url"], "data:image/png;base64,UE5H");
        assert_eq!(i.history, "[image cat.png] look");
        let i = input_of(None, false, Some(photo), false).unwrap();
        assert_eq!(
            i.content(),
            "[The user sent an image: cat.png (image/png, 3 bytes). This model cannot see images.]\nlook"
        );
    }

    #[test]
    fn small_text_files_go_with_their_content_and_voice_needs_text() {
        let doc = file(UploadKind::Document, "notes.md", "text/markdown", b"# hi");
        let i = input_of(None, false, Some(doc), false).unwrap();
        assert!(
            i.text.contains("--- notes.md ---\n# hi\n--- end of file ---"),
            "{}",
            i.text
        );
        let big = file(UploadKind::Document, "big.txt", "text/plain", &[b'a'; 40_000]);
        assert!(!input_of(None, false, Some(big), false).unwrap().text.contains("aaaa"));
        assert!(input_of(None, true, None, false)
            .unwrap_err()
            .contains("speech-to-text"));
        assert_eq!(input_of(Some("hello".into()), true, None, false).unwrap().text, "hello");
    }
}
