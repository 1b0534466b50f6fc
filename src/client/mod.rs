//! Client-side helpers for Rust apps and tests: join what the gateway sends back into the
//! messages and files a person sees.

use std::collections::HashMap;

use crate::limits::{MAX_MEDIA_BYTES, MAX_MEDIA_PARTS};
use crate::wire::server::{Media, Message};

/// The text of a message as it should be shown now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageView {
    pub id: String,
    pub text: String,
    /// The last version: no edit follows (M2).
    pub done: bool,
}

#[derive(Debug, Default)]
struct Version {
    pieces: Vec<Option<String>>,
    received: usize,
    done: bool,
}

/// Joins `message` chunks by id and applies edits (M1, M2): each version is the join of its
/// chunks; a later version replaces the earlier one.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    pending: HashMap<String, Version>,
    latest: HashMap<String, MessageView>,
}

impl MessageAssembler {
    /// Takes one `message` frame. Returns the message when this frame completed a version.
    pub fn push(&mut self, m: &Message<'_>) -> Option<MessageView> {
        let total = m.chunk.total.clamp(1, 1 << 16) as usize;
        let index = m.chunk.index as usize;
        if index >= total {
            return None;
        }
        let v = self.pending.entry(m.id.to_string()).or_default();
        if index == 0 || v.pieces.len() != total {
            // A version's chunks arrive in order on one connection: index 0 opens a new one.
            *v = Version {
                pieces: vec![None; total],
                received: 0,
                done: false,
            };
        }
        if v.pieces[index].is_none() {
            v.received += 1;
        }
        v.pieces[index] = Some(m.text.to_string());
        v.done |= m.is_final;
        if v.received < total {
            return None;
        }
        let v = self.pending.remove(m.id.as_ref())?;
        let view = MessageView {
            id: m.id.to_string(),
            text: v.pieces.into_iter().flatten().collect(),
            done: v.done,
        };
        self.latest.insert(view.id.clone(), view.clone());
        Some(view)
    }

    /// The latest complete version of a message.
    pub fn get(&self, id: &str) -> Option<&MessageView> {
        self.latest.get(id)
    }
}

/// A file the gateway sent down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMedia {
    pub id: String,
    pub kind: String,
    pub mime: String,
    pub filename: String,
    pub caption: Option<String>,
    pub reply_to: Option<String>,
    pub url: Option<String>,
    pub data: Vec<u8>,
}

#[derive(Debug)]
struct Partial {
    first: ReceivedMedia,
    parts: Vec<Option<Vec<u8>>>,
    received: usize,
    bytes: usize,
}

/// Why a downstream file could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaError {
    BadBase64,
    BadPart,
    TooBig,
}

/// Joins downstream `media` chunks by id into files (U1).
#[derive(Debug, Default)]
pub struct MediaAssembler {
    partial: HashMap<String, Partial>,
}

impl MediaAssembler {
    /// Takes one `media` frame. Returns the file when it is complete.
    pub fn push(&mut self, m: &Media<'_>) -> Result<Option<ReceivedMedia>, MediaError> {
        let parts = m.parts.clamp(1, MAX_MEDIA_PARTS) as usize;
        let part = m.part as usize;
        if part >= parts || m.parts > MAX_MEDIA_PARTS {
            return Err(MediaError::BadPart);
        }
        let data = match &m.data {
            Some(payload) => payload.decode().ok_or(MediaError::BadBase64)?,
            None => Vec::new(),
        };
        let entry = self.partial.entry(m.id.to_string()).or_insert_with(|| Partial {
            first: ReceivedMedia {
                id: m.id.to_string(),
                kind: m.kind.to_string(),
                mime: m.mime.to_string(),
                filename: m.filename.to_string(),
                caption: m.caption.as_ref().map(|c| c.to_string()),
                reply_to: m.reply_to.as_ref().map(|r| r.to_string()),
                url: m.url.as_ref().map(|u| u.to_string()),
                data: Vec::new(),
            },
            parts: vec![None; parts],
            received: 0,
            bytes: 0,
        });
        if entry.parts.len() != parts {
            self.partial.remove(m.id.as_ref());
            return Err(MediaError::BadPart);
        }
        if entry.parts[part].is_none() {
            entry.bytes += data.len();
            if entry.bytes > MAX_MEDIA_BYTES {
                self.partial.remove(m.id.as_ref());
                return Err(MediaError::TooBig);
            }
            entry.received += 1;
            entry.parts[part] = Some(data);
        }
        if entry.received < parts {
            return Ok(None);
        }
        let Some(done) = self.partial.remove(m.id.as_ref()) else {
            return Ok(None);
        };
        let mut file = done.first;
        file.data = done.parts.into_iter().flatten().flatten().collect();
        Ok(Some(file))
    }
}
