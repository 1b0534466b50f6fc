//! What the agent asks for: replies, files, cards, typing and the avatar (M1–M4, P1, P5).

use std::borrow::Cow;
use std::time::Duration;

use super::journal::stamp;
use super::keep::Reply;
use super::promises::Promise;
use super::timers::{claim, TimerKey};
use super::{AvatarState, Gateway, MAX_STREAMS_PER_DEVICE};
use crate::agent::{Accepted, AgentCommand, AgentEvent, CommandError, OutgoingFile, PromptRequest};
use crate::chunking::split_reply;
use crate::hold::Held;
use crate::ids::{ConnId, DeviceId, MessageId, PromptId};
use crate::limits::{
    MAX_FILENAME_CHARS, MAX_ID_CHARS, MAX_MEDIA_BYTES, MAX_OPEN_PROMPTS, MAX_OPEN_PROMPTS_PER_DEVICE,
    MAX_PROMPT_TTL_SECS, MAX_TEXT_CHARS, MEDIA_CHUNK_BYTES,
};
use crate::mime::guess_mime;
use crate::prompts::{Card, Closed};
use crate::push::{preview, CardFacts, NotifyEvent};
use crate::text::{cut_filename, truncate_chars};
use crate::time::Time;
use crate::wire::server::{encode, Avatar, ChunkInfo, Media, Message, Payload, Typing};

impl Gateway {
    /// A command from the agent. On error nothing was sent or held.
    pub fn handle_agent(&mut self, now: Time, command: AgentCommand) -> Result<Accepted, CommandError> {
        self.now = self.now.max(now);
        let accepted = self.handle_port_command(now, command)?;
        // Held output is a promise only once it is on disk (issue 24): its confirmation to
        // the agent waits for the commit.
        Ok(match self.journal.as_mut().and_then(|j| j.kept.take()) {
            Some(ticket) => Accepted::Kept {
                ticket,
                then: Box::new(accepted),
            },
            None => accepted,
        })
    }

    fn handle_port_command(&mut self, now: Time, command: AgentCommand) -> Result<Accepted, CommandError> {
        let done = match command {
            AgentCommand::Reply {
                device,
                message,
                text,
                done,
            } => self.reply(now, device, message, &text, done),
            AgentCommand::SendFile { device, file } => self.send_file(now, device, file),
            AgentCommand::OpenPrompt {
                device,
                prompt,
                request,
                ttl_secs,
            } => self.open_prompt(now, device, prompt, request, ttl_secs),
            AgentCommand::Typing { device } => {
                if let Some(conn) = self.online_conn(&device) {
                    self.send(conn, encode("typing", &Typing { stop: false }));
                }
                Ok(())
            }
            AgentCommand::Avatar { device, state } => {
                self.set_avatar(&device, AvatarState::parse(&state));
                Ok(())
            }
            AgentCommand::EndTurn { device } => {
                if let Some(conn) = self.online_conn(&device) {
                    self.send(conn, encode("typing", &Typing { stop: true }));
                }
                let idle = self.config.typing_idle;
                if let Some(d) = self.devices.get_mut(&device) {
                    if d.avatar != AvatarState::Idle && d.idle_at.is_none() {
                        d.idle_at = Some(now + idle);
                        self.timers.arm(&mut d.idle_slot, now + idle, TimerKey::Idle(device));
                    }
                }
                Ok(())
            }
            AgentCommand::Deliver {
                sender,
                id,
                target,
                text,
                file,
            } => {
                // The agent's deliveries are keyed apart from services' and phones' (L34).
                let sender = DeviceId(format!("a:{sender}"));
                let (device, held) = self.deliver_now(now, &sender, &id, &target, text.as_deref(), file)?;
                match held {
                    Some(keys) => self.keep_promised(Promise {
                        device: device.clone(),
                        keys,
                        delivery: Some((sender, id)),
                        finished: None,
                    }),
                    // S4: a repeat of one still waiting for its commit shares its outcome.
                    None => self.join_promise(&sender, &id),
                }
                return Ok(Accepted::Delivered(device));
            }
        };
        done.map(|()| Accepted::Done)
    }

    /// A card from the agent: checked, kept open, shown or notified (P1).
    fn open_prompt(
        &mut self,
        now: Time,
        device: DeviceId,
        prompt: PromptId,
        request: PromptRequest,
        ttl_secs: Option<u64>,
    ) -> Result<(), CommandError> {
        // G8 cuts an answer's prompt_id to 128 characters: a longer card id could
        // never be answered (issue 8 #15).
        if prompt.as_str().is_empty() || prompt.as_str().chars().count() > MAX_ID_CHARS {
            return Err(CommandError::InvalidPrompt("card id must be 1 to 128 characters"));
        }
        if self.prompts.is_known(now, &device, &prompt) {
            return Err(CommandError::DuplicatePrompt);
        }
        // L33: bounded per device and in all; every hello re-sends a device's cards.
        if self.prompts.open_count() >= MAX_OPEN_PROMPTS
            || self.prompts.open_for(&device) >= MAX_OPEN_PROMPTS_PER_DEVICE
        {
            return Err(CommandError::TooManyPrompts);
        }
        // L17 and L27: at least 1 s, at most MAX_PROMPT_TTL_SECS.
        let ttl = ttl_secs
            .map_or(self.config.prompt_ttl, Duration::from_secs)
            .clamp(Duration::from_secs(1), Duration::from_secs(MAX_PROMPT_TTL_SECS));
        let card =
            Card::new(prompt.clone(), device.clone(), request, now + ttl).map_err(CommandError::InvalidPrompt)?;
        let frame = card.frame(now);
        if card.hidden_chars() {
            // L49: the log shows what will run, escaped (L29).
            log::warn!(
                "card {:?} for {device:?} holds hidden characters: text {:?}, command {:?}, description {:?}",
                card.id.as_str(),
                card.text,
                card.command,
                card.description
            );
        }
        let mut card = card;
        // (a): an offline device is notified; its notification is replaced when the card
        // closes (L66).
        card.notified = self.online_conn(&device).is_none() && self.can_notify(&device);
        let notice = NotifyEvent::Card {
            prompt: card.id.clone(),
            kind: card.kind,
            text: super::card_answer::notice_text(&card),
            ttl: card.expires_at.since(now),
            facts: CardFacts::of(&card),
        };
        let seq = self.keep_card_open(now, &mut card);
        self.prompts.insert(card);
        self.arm_prompts();
        // P1: an offline device gets the card when it connects, within its TTL.
        match self.online_conn(&device) {
            Some(conn) => {
                self.send(conn, stamp(vec![frame], seq).remove(0));
                self.after_agent_output(now, &device);
            }
            None => self.notify(&device, notice),
        }
        Ok(())
    }

    fn online_conn(&self, device: &DeviceId) -> Option<ConnId> {
        self.devices.get(device).and_then(|d| d.conn)
    }

    fn reply(
        &mut self,
        now: Time,
        device: DeviceId,
        message: MessageId,
        text: &str,
        done: bool,
    ) -> Result<(), CommandError> {
        let retain = now + self.hold_time(&device);
        let d = self.device_entry(&device);
        if d.finished.contains(&message) {
            return Err(CommandError::MessageFinished);
        }
        let phone_saw = d.streams.get(&message).copied();
        // L14 bounds replies *streaming*; a one-shot final reply opens no stream, so it always
        // goes out, however many streams an agent abandoned (issue 8 #9).
        if phone_saw.is_none() && !done && d.streams.len() >= MAX_STREAMS_PER_DEVICE {
            return Err(CommandError::TooManyStreams);
        }
        let phone_saw = phone_saw.unwrap_or(false);
        match d.conn {
            Some(conn) => {
                let version = Reply {
                    text,
                    done,
                    held: false,
                    edit: phone_saw,
                };
                let seq = self.keep_reply(now, &device, &message, version);
                let frames = self.message_frames(message.as_str(), text, phone_saw, done);
                for frame in stamp(frames, seq) {
                    self.send(conn, frame);
                }
            }
            None => {
                // The device's own limit first, then room in all for the growth only (L32).
                let growth = d.hold.message_growth(&message, text.len())?;
                if !self.make_hold_room(growth) {
                    return Err(CommandError::HoldFull);
                }
                let version = Reply {
                    text,
                    done,
                    held: true,
                    edit: phone_saw,
                };
                let seq = self.keep_reply(now, &device, &message, version);
                let d = self.devices.get_mut(&device).expect("the device was created above");
                d.hold.message(now, &message, text, phone_saw, done, seq)?;
                self.keep_promised(Promise {
                    device: device.clone(),
                    keys: vec![format!("m:{}", message.as_str())],
                    delivery: None,
                    finished: done.then(|| message.clone()),
                });
                self.arm_hold(now, &device);
                if done {
                    // (b): one final reply, one notification (coalesced by the server).
                    let event = NotifyEvent::Reply {
                        message: message.clone(),
                        text: preview(text),
                    };
                    self.notify(&device, event);
                }
            }
        }
        let d = self.devices.get_mut(&device).expect("the device was created above");
        // M2 across a reconnect (issue 8 #5): its streams and finished ids outlive a
        // disconnect for the hold window after its last reply.
        d.retain_until = Some(retain);
        if done {
            d.streams.remove(&message);
            d.finished.push(message);
        } else {
            d.streams.insert(message, phone_saw || d.conn.is_some());
        }
        if d.conn.is_some() {
            self.after_agent_output(now, &device);
        }
        Ok(())
    }

    fn send_file(&mut self, now: Time, device: DeviceId, file: OutgoingFile) -> Result<(), CommandError> {
        if file.data.len() > MAX_MEDIA_BYTES {
            return Err(CommandError::FileTooBig);
        }
        let id = self.ids.frame_id("f");
        match self.device_entry(&device).conn {
            Some(conn) => {
                let seq = self.keep_file(now, &device, &id, &file, false);
                for frame in stamp(self.media_frames(&id, &file), seq) {
                    self.send(conn, frame);
                }
                self.after_agent_output(now, &device);
            }
            None => {
                let d = self.devices.get_mut(&device).expect("the device was created above");
                let growth = d.hold.file_growth(file.data.len())?;
                if !self.make_hold_room(growth) {
                    return Err(CommandError::HoldFull);
                }
                let seq = self.keep_file(now, &device, &id, &file, true);
                let key = format!("f:{id}");
                let d = self.devices.get_mut(&device).expect("the device was created above");
                d.hold.file(now, id, file, seq)?;
                self.keep_promised(Promise {
                    device: device.clone(),
                    keys: vec![key],
                    delivery: None,
                    finished: None,
                });
                self.arm_hold(now, &device);
            }
        }
        Ok(())
    }

    pub(super) fn arm_hold(&mut self, now: Time, device: &DeviceId) {
        let max_age = self.hold_time(device);
        if let Some(d) = self.devices.get_mut(device) {
            let at = d.hold.next_deadline(max_age).unwrap_or(now + max_age);
            self.timers.arm(&mut d.hold_slot, at, TimerKey::Hold(device.clone()));
        }
    }

    /// M3 step 2 and 4: `avatar{speaking}` after the first output of a turn; `idle` later.
    fn after_agent_output(&mut self, now: Time, device: &DeviceId) {
        self.set_avatar(device, AvatarState::Speaking);
        let idle = self.config.typing_idle;
        if let Some(d) = self.devices.get_mut(device) {
            d.idle_at = Some(now + idle);
            self.timers
                .arm(&mut d.idle_slot, now + idle, TimerKey::Idle(device.clone()));
        }
    }

    fn set_avatar(&mut self, device: &DeviceId, state: AvatarState) {
        let Some(d) = self.devices.get_mut(device) else { return };
        if d.avatar == state {
            return;
        }
        d.avatar = state;
        if let Some(conn) = d.conn {
            let frame = encode(
                "avatar",
                &Avatar {
                    state: Cow::Borrowed(state.as_str()),
                },
            );
            self.send(conn, frame);
        }
    }

    pub(super) fn on_idle_timer(&mut self, now: Time, at: Time, device: DeviceId) {
        let Some(d) = self.devices.get_mut(&device) else { return };
        if !claim(&mut d.idle_slot, at) {
            return;
        }
        match d.idle_at {
            Some(due) if due <= now => {
                d.idle_at = None;
                self.set_avatar(&device, AvatarState::Idle);
                self.forget_device_if_unused(&device);
            }
            Some(due) => self.timers.arm(&mut d.idle_slot, due, TimerKey::Idle(device)),
            None => {}
        }
    }

    pub(super) fn expire_prompt(&mut self, now: Time, id: PromptId) {
        // Expires the card if it is still open and its TTL has run out (P5).
        if self.prompts.get(id.as_str()).is_some_and(|c| c.expires_at <= now) {
            self.expire_card(now, id);
        }
    }

    /// Closes an open card as its TTL would (P5): its safe default, `expired`.
    pub(super) fn expire_card(&mut self, now: Time, id: PromptId) {
        let Some(kind) = self.prompts.get(id.as_str()).map(|c| c.kind) else {
            return;
        };
        let closed = Closed {
            option_id: kind.safe_default().map(str::to_owned),
            expired: true,
        };
        let frame = closed.frame(id.as_str());
        let Some(card) = self.prompts.close(now, id.as_str(), closed.clone()) else {
            return;
        };
        let seq = self.keep_card_closed(now, &card, &closed);
        // P5: the device hears of it if it is online; the agent always does.
        if let Some(conn) = self.online_conn(&card.device) {
            self.send(conn, stamp(vec![frame], seq).remove(0));
        }
        self.card_closed(&card, &closed);
        self.event_after_commit(AgentEvent::PromptExpired {
            asked: card.asked(),
            device: card.device,
            prompt: card.id,
            kind: card.kind,
            option_id: kind.safe_default().map(str::to_owned),
        });
    }

    /// Sends what was held for a device that just became ready (M4).
    pub(super) fn flush_hold(&mut self, conn: ConnId, device: &DeviceId) {
        let Some(d) = self.devices.get_mut(device) else { return };
        d.hold_slot = None;
        let held = d.hold.take();
        let keys = held.iter().map(Held::key).collect();
        for held in held {
            let frames = match held {
                Held::Message {
                    id,
                    text,
                    edit,
                    done,
                    seq,
                } => {
                    if let Some(saw) = self.devices.get_mut(device).and_then(|d| d.streams.get_mut(&id)) {
                        *saw = true;
                    }
                    stamp(self.message_frames(id.as_str(), &text, edit, done), seq)
                }
                Held::File { id, file, seq } => stamp(self.media_frames(&id, &file), seq),
            };
            for frame in frames {
                self.send(conn, frame);
            }
        }
        self.keep_unheld(device, keys);
    }

    /// One version of a message, split (M1, M2).
    pub(super) fn message_frames(&self, id: &str, text: &str, edit: bool, done: bool) -> Vec<String> {
        let pieces = split_reply(text, self.config.chunk_limit);
        let total = pieces.len() as u32;
        pieces
            .into_iter()
            .enumerate()
            .map(|(index, piece)| {
                let index = index as u32;
                encode(
                    "message",
                    &Message {
                        id: Cow::Borrowed(id),
                        text: Cow::Borrowed(piece),
                        chunk: ChunkInfo { index, total },
                        is_final: done && index + 1 == total,
                        edit,
                    },
                )
            })
            .collect()
    }

    /// A file in `MEDIA_CHUNK_BYTES` raw chunks (U1).
    pub(super) fn media_frames(&self, id: &str, file: &OutgoingFile) -> Vec<String> {
        let mime = if file.mime.trim().is_empty() {
            guess_mime(&file.filename)
        } else {
            file.mime.as_str()
        };
        let chunks: Vec<&[u8]> = if file.data.is_empty() {
            vec![&[][..]]
        } else {
            file.data.chunks(MEDIA_CHUNK_BYTES).collect()
        };
        let parts = chunks.len() as u32;
        // What an agent names is cut to G8's 200 characters, extension kept, so that every
        // frame stays inside the protocol's limits (docs/protocol-v1.schema.json, L48).
        let filename = cut_filename(&file.filename, MAX_FILENAME_CHARS);
        let caption = file.caption.as_deref().map(|c| truncate_chars(c, MAX_TEXT_CHARS));
        let reply_to = file.reply_to.as_deref().filter(|r| !r.is_empty());
        chunks
            .into_iter()
            .enumerate()
            .map(|(part, data)| {
                let part = part as u32;
                encode(
                    "media",
                    &Media {
                        id: Cow::Borrowed(id),
                        kind: Cow::Borrowed(file.kind.as_str()),
                        mime: Cow::Borrowed(mime),
                        filename: Cow::Borrowed(&filename),
                        caption: caption.map(Cow::Borrowed),
                        part,
                        parts,
                        is_final: part + 1 == parts,
                        size: file.data.len() as u64,
                        data: Some(Payload::Raw(data)),
                        url: None,
                        reply_to: reply_to.map(Cow::Borrowed),
                    },
                )
            })
            .collect()
    }
}
