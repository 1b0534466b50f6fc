//! What the journal keeps of each change (issue 24 §1): cards opened and closed, reply
//! versions (streamed ones at most once a second), files either way and the person's own
//! messages, each with its device's next seq.

use super::journal::{NewEntry, STREAM_JOURNAL_INTERVAL};
use super::timers::{claim, TimerKey};
use super::Gateway;
use crate::ids::DeviceId;
use crate::journal::body::Body;
use crate::journal::Window;
use crate::time::Time;

impl Gateway {
    /// A card opened: kept open with its deadline. Returns its seq (0 without a journal).
    pub(super) fn keep_card_open(&mut self, now: Time, card: &mut crate::prompts::Card) -> u64 {
        if !self.journal_on() {
            return 0;
        }
        let seq = self.next_seq(&card.device);
        card.journal_seq = seq;
        self.put(NewEntry {
            device: &card.device,
            key: format!("p:{}", card.id.as_str()),
            seq,
            first_seq: seq,
            at: now,
            held: false,
            deadline: Some(card.expires_at),
            body: card.body(None),
            blob: None,
        });
        seq
    }

    /// A card closed: kept with how. Returns the seq of its closing (0 without a journal).
    pub(super) fn keep_card_closed(
        &mut self,
        now: Time,
        card: &crate::prompts::Card,
        closed: &crate::prompts::Closed,
    ) -> u64 {
        if !self.journal_on() {
            return 0;
        }
        let seq = self.next_seq(&card.device);
        self.put(NewEntry {
            device: &card.device,
            key: format!("p:{}", card.id.as_str()),
            seq,
            first_seq: card.journal_seq,
            at: now,
            held: false,
            deadline: None,
            body: card.body(Some(closed)),
            blob: None,
        });
        seq
    }

    /// A version of a reply: its first and final versions are kept, and the ones between
    /// at most once a second (issue 24 §1). Returns the seq its frames carry: that of the
    /// latest version kept.
    pub(super) fn keep_reply(
        &mut self,
        now: Time,
        device: &DeviceId,
        message: &crate::ids::MessageId,
        version: Reply<'_>,
    ) -> u64 {
        if !self.journal_on() {
            return 0;
        }
        let prior = self.devices.get(device).and_then(|d| d.journaled.get(message).copied());
        // A held version is a promise (the agent is told it is kept): always written.
        let due = prior.is_none_or(|(_, _, at)| version.done || version.held || now >= at + STREAM_JOURNAL_INTERVAL);
        if !due {
            let (_, seq, at) = prior.unwrap_or_default();
            if self.history_on() {
                let at = at + STREAM_JOURNAL_INTERVAL;
                if let Some(d) = self.devices.get_mut(device) {
                    d.unkept
                        .insert(message.clone(), (version.text.to_owned(), version.edit));
                    if d.unkept_slot.is_none_or(|t| t > at) {
                        self.timers
                            .arm(&mut d.unkept_slot, at, TimerKey::Unkept(device.clone()));
                    }
                }
            }
            return seq;
        }
        let seq = self.next_seq(device);
        let first = prior.map_or(seq, |(first, _, _)| first);
        if let Some(d) = self.devices.get_mut(device) {
            d.unkept.remove(message);
            if version.done {
                d.journaled.remove(message);
            } else {
                d.journaled.insert(message.clone(), (first, seq, now));
            }
        }
        if self.history_on() || version.held {
            self.put(NewEntry {
                device,
                key: format!("m:{}", message.as_str()),
                seq,
                first_seq: first,
                at: now,
                held: version.held,
                deadline: None,
                body: Body::message(message.as_str(), version.text, version.done, version.edit),
                blob: None,
            });
        }
        seq
    }

    /// The latest versions of the device's streams that were sent but not kept are kept now
    /// (their second is up): a stream that stops is kept at what the phone saw last.
    pub(super) fn on_unkept_timer(&mut self, now: Time, at: Time, device: DeviceId) {
        let Some(d) = self.devices.get_mut(&device) else { return };
        if !claim(&mut d.unkept_slot, at) {
            return;
        }
        for (message, (text, edit)) in std::mem::take(&mut d.unkept) {
            let version = Reply {
                text: &text,
                done: false,
                held: false,
                edit,
            };
            self.keep_reply(now, &device, &message, version);
        }
    }

    /// A file to the device (the agent's, or a delivery's): kept with its bytes while held.
    pub(super) fn keep_file(
        &mut self,
        now: Time,
        device: &DeviceId,
        id: &str,
        file: &crate::agent::OutgoingFile,
        held: bool,
    ) -> u64 {
        if !self.journal_on() {
            return 0;
        }
        let seq = self.next_seq(device);
        if self.history_on() || held {
            // What the agent named is kept as its live frames carried it (L48: cut to the
            // protocol's limits), so a history item or a replay is a valid frame too.
            let mime = match file.mime.trim() {
                "" => crate::mime::guess_mime(&file.filename),
                _ => file.mime.as_str(),
            };
            let filename = crate::text::cut_filename(&file.filename, crate::limits::MAX_FILENAME_CHARS);
            let mut body = Body::file(false, id, file.kind.as_str(), mime, &filename, file.data.len());
            let caption = file.caption.as_deref();
            body.caption = caption.map(|c| crate::text::truncate_chars(c, crate::limits::MAX_TEXT_CHARS).to_owned());
            body.reply_to = file.reply_to.clone().filter(|r| !r.is_empty());
            body.stored = self.save_sent_file(device, file);
            self.put(NewEntry {
                device,
                key: format!("f:{id}"),
                seq,
                first_seq: seq,
                at: now,
                held,
                deadline: None,
                body,
                blob: held.then(|| file.data.clone()),
            });
        }
        seq
    }

    /// A message the person sent, accepted (I2 across restarts, issue 24 §1): its id in the
    /// dedup window with its seq, and in history its text or metadata. Its `received` is
    /// the caller's to ask for, after the event is owed (L64).
    pub(super) fn keep_user_message(
        &mut self,
        now: Time,
        device: &DeviceId,
        id: &str,
        body: impl FnOnce() -> Body,
    ) -> u64 {
        if !self.journal_on() {
            return 0;
        }
        let seq = self.next_seq(device);
        if self.history_on() {
            self.put(NewEntry {
                device,
                key: format!("u:{id}"),
                seq,
                first_seq: seq,
                at: now,
                held: false,
                deadline: None,
                body: body(),
                blob: None,
            });
        }
        self.keep_dedup(Window::Seen, device, id, now, seq.to_string());
        seq
    }
}

/// One version of a reply, as [`Gateway::keep_reply`] keeps it.
pub(super) struct Reply<'a> {
    pub text: &'a str,
    pub done: bool,
    pub held: bool,
    /// The phone saw an earlier version (L6).
    pub edit: bool,
}
