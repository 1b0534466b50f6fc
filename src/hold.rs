//! Agent output held for an offline device (decisions M4): up to `offline_hold` old and
//! `MAX_HELD_BYTES` per device, sent after its next `ready`.
//!
//! Output is held as values, not frames: a reply streamed while the phone is away is kept
//! only in its latest version, and is sent as the first version the phone sees.

use std::collections::VecDeque;
use std::time::Duration;

use crate::agent::{CommandError, OutgoingFile};
use crate::ids::MessageId;
use crate::limits::MAX_HELD_BYTES;
use crate::time::Time;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Message {
        id: MessageId,
        text: String,
        /// Whether the phone already saw an earlier version of this message.
        edit: bool,
        done: bool,
        /// Its journal seq (0 without a journal).
        seq: u64,
    },
    File {
        id: String,
        file: OutgoingFile,
        seq: u64,
    },
}

impl Held {
    /// Its journal key (`crate::journal::Entry::key`).
    pub fn key(&self) -> String {
        match self {
            Held::Message { id, .. } => format!("m:{}", id.as_str()),
            Held::File { id, .. } => format!("f:{id}"),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Held::Message { text, .. } => text.len(),
            Held::File { file, .. } => file.data.len(),
        }
    }
}

#[derive(Debug, Default)]
pub struct Hold {
    items: VecDeque<(Time, Held)>,
    bytes: usize,
}

impl Hold {
    fn position(&self, id: &MessageId) -> Option<usize> {
        self.items
            .iter()
            .position(|(_, h)| matches!(h, Held::Message { id: held, .. } if held == id))
    }

    /// How many more bytes holding this version of a message would take (its earlier
    /// version, if held, is replaced); `HoldFull` past the device's limit.
    pub fn message_growth(&self, id: &MessageId, text_len: usize) -> Result<usize, CommandError> {
        let freed = self.position(id).map_or(0, |i| self.items[i].1.bytes());
        if self.bytes - freed + text_len > MAX_HELD_BYTES {
            return Err(CommandError::HoldFull);
        }
        Ok(text_len.saturating_sub(freed))
    }

    /// How many more bytes holding this file would take; `HoldFull` past the device's limit.
    pub fn file_growth(&self, len: usize) -> Result<usize, CommandError> {
        if self.bytes + len > MAX_HELD_BYTES {
            return Err(CommandError::HoldFull);
        }
        Ok(len)
    }

    /// Holds a version of a message, replacing a held earlier version of it. The new
    /// version is the newest output: it moves to the back, so the front stays the oldest.
    pub fn message(
        &mut self,
        now: Time,
        id: &MessageId,
        text: &str,
        edit: bool,
        done: bool,
        seq: u64,
    ) -> Result<(), CommandError> {
        self.message_growth(id, text.len())?;
        let existing = self.position(id).and_then(|i| self.items.remove(i));
        let freed = existing.as_ref().map_or(0, |(_, h)| h.bytes());
        // L6: a version the phone never saw keeps its first-version flag.
        let edit = match existing {
            Some((_, Held::Message { edit: earlier, .. })) => earlier,
            _ => edit,
        };
        self.items.push_back((
            now,
            Held::Message {
                id: id.clone(),
                text: text.to_owned(),
                edit,
                done,
                seq,
            },
        ));
        self.bytes = self.bytes - freed + text.len();
        Ok(())
    }

    pub fn file(&mut self, now: Time, id: String, file: OutgoingFile, seq: u64) -> Result<(), CommandError> {
        self.file_growth(file.data.len())?;
        self.bytes += file.data.len();
        self.items.push_back((now, Held::File { id, file, seq }));
        Ok(())
    }

    /// Drops output older than `max_age`. Returns the journal keys of what went.
    pub fn expire(&mut self, now: Time, max_age: Duration) -> Vec<String> {
        let mut gone = Vec::new();
        let bytes = &mut self.bytes;
        self.items.retain(|(at, h)| {
            let keep = now.since(*at) < max_age;
            if !keep {
                *bytes -= h.bytes();
                gone.push(h.key());
            }
            keep
        });
        gone
    }

    /// When the oldest item expires.
    pub fn next_deadline(&self, max_age: Duration) -> Option<Time> {
        self.items.iter().map(|(at, _)| *at + max_age).min()
    }

    /// The ids of the messages held.
    pub fn message_ids(&self) -> Vec<MessageId> {
        let ids = self.items.iter().filter_map(|(_, h)| match h {
            Held::Message { id, .. } => Some(id.clone()),
            Held::File { .. } => None,
        });
        ids.collect()
    }

    pub fn take(&mut self) -> Vec<Held> {
        self.bytes = 0;
        self.items.drain(..).map(|(_, h)| h).collect()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drops the items with these journal keys (a held delivery the journal could not keep).
    pub fn remove(&mut self, keys: &[String]) {
        let bytes = &mut self.bytes;
        self.items.retain(|(_, h)| {
            let keep = !keys.contains(&h.key());
            if !keep {
                *bytes -= h.bytes();
            }
            keep
        });
    }

    /// When the oldest held output was held.
    pub fn oldest(&self) -> Option<Time> {
        self.items.front().map(|(at, _)| *at)
    }

    /// Drops the oldest held output (to make room in all, L32); returns the bytes freed
    /// and its journal key.
    pub fn drop_oldest(&mut self) -> (usize, Option<String>) {
        let Some((_, held)) = self.items.pop_front() else {
            return (0, None);
        };
        self.bytes -= held.bytes();
        (held.bytes(), Some(held.key()))
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}
