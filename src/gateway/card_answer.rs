//! A card answered from its notification (issue 25, L65–L67): the server checks the
//! button's token against [`Gateway::card_for_answer`], then [`Gateway::handle_card_answer`]
//! answers the card exactly as a `prompt` frame from its own device would (P2–P4, the
//! agent's event, the journal), and says so with [`Output::CardAnswered`] once that is on
//! disk. Whichever way a card closes, a device that was notified of it is pushed the
//! outcome, and a device that was away hears `prompt_done` after its next `ready`.

use super::journal::{stamp, Waiting};
use super::{Gateway, Output};
use crate::agent::AgentEvent;
use crate::ids::DeviceId;
use crate::prompts::{Card, Closed};
use crate::push::{preview, Notification, NotifyEvent};
use crate::time::Time;

/// How a notification's answer went ([`Output::CardAnswered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardAnswered {
    /// Applied and kept: this option.
    Applied { option_id: String },
    /// The card was no longer open (answered, expired or unknown): nothing was applied.
    Closed,
    /// Applied in memory, but the journal could not keep it: a restart would open the card
    /// again, so the answer is not confirmed.
    NotKept,
}

impl Gateway {
    /// The open card `prompt_id` names, for the server to check a token against; `None`
    /// when it is closed, unknown or past its TTL (its timer may not have run yet).
    pub fn card_for_answer(&self, now: Time, prompt_id: &str) -> Option<&Card> {
        self.prompts.get(prompt_id).filter(|c| c.expires_at > now)
    }

    /// Answers an open card with `option_id` as its own device would; the caller checked
    /// the token. The outcome comes as [`Output::CardAnswered`] with `request`, after the
    /// commit that keeps it.
    pub fn handle_card_answer(&mut self, now: Time, request: u64, prompt_id: &str, option_id: &str) {
        self.now = self.now.max(now);
        // Exactly an option the card shows: never P2's fallback to a default, and never
        // `other`, which needs the person's own text.
        let applied = self
            .card_for_answer(now, prompt_id)
            .filter(|c| c.options.iter().any(|o| o.id == option_id && o.id != "other"))
            .map(|c| c.apply(option_id, ""));
        let applied = match applied {
            Some(Ok(applied)) => applied,
            Some(Err(_)) | None => {
                let outcome = CardAnswered::Closed;
                return self.outputs.push_back(Output::CardAnswered { request, outcome });
            }
        };
        let closed = Closed {
            option_id: Some(applied.option_id.clone()),
            expired: false,
        };
        let Some(card) = self.prompts.close(now, prompt_id, closed.clone()) else {
            return;
        };
        log::info!(
            "card {:?} of device {:?} answered {:?} from a notification",
            card.id.as_str(),
            card.device,
            applied.option_id
        );
        let seq = self.keep_card_closed(now, &card, &closed);
        self.event_after_commit(AgentEvent::PromptAnswered {
            device: card.device.clone(),
            asked: card.asked(),
            prompt: card.id.clone(),
            kind: card.kind,
            option_id: applied.option_id.clone(),
            label: applied.label,
            text: applied.text,
        });
        // The device hears it as it would have from its own answer: now, or after its next
        // `ready` (L65).
        match self.devices.get(&card.device).and_then(|d| d.conn) {
            Some(conn) => self.send_after_commit(conn, stamp(vec![closed.frame(prompt_id)], seq).remove(0)),
            None => self.prompts.note_unseen(&card.device, &card.id, &closed),
        }
        self.push_card_closed(&card, &closed);
        let option_id = applied.option_id;
        if self.journal_on() {
            self.confirm(Waiting::CardAnswer { request, option_id });
        } else {
            let outcome = CardAnswered::Applied { option_id };
            self.outputs.push_back(Output::CardAnswered { request, outcome });
        }
    }

    /// The commit (or failure) a notification's answer waited for.
    pub(super) fn card_answer_settled(&mut self, request: u64, option_id: String, kept: bool) {
        let outcome = if kept {
            CardAnswered::Applied { option_id }
        } else {
            CardAnswered::NotKept
        };
        self.outputs.push_back(Output::CardAnswered { request, outcome });
    }

    /// A card closed some other way than from its notification's button (the app, its
    /// TTL): the device's notification of it is replaced, and a device that was away
    /// hears of it after its next `ready` (L65, L66).
    pub(super) fn card_closed(&mut self, card: &Card, closed: &Closed) {
        if self.devices.get(&card.device).and_then(|d| d.conn).is_none() {
            self.prompts.note_unseen(&card.device, &card.id, closed);
        }
        self.push_card_closed(card, closed);
    }

    /// L66: a card whose notification went out is pushed its outcome, connected or not:
    /// the notification stays on the lock screen until something replaces it.
    fn push_card_closed(&mut self, card: &Card, closed: &Closed) {
        if !card.notified || !self.has_subscription(&card.device) {
            return;
        }
        let label = closed
            .option_id
            .as_ref()
            .and_then(|id| card.options.iter().find(|o| &o.id == id))
            .map(|o| o.label.clone());
        let event = NotifyEvent::CardClosed {
            prompt: card.id.clone(),
            kind: card.kind,
            text: notice_text(card),
            option_id: closed.option_id.clone(),
            label,
            expired: closed.expired,
        };
        let notification = Notification {
            device: card.device.clone(),
            event,
        };
        // After the commit that keeps the closing: a crash before it leaves the card open,
        // and its notification must not say otherwise. A failed commit sends it too: the
        // card is closed in memory, and its buttons now answer 409.
        if self.journal_on() {
            self.confirm(Waiting::Notify(Box::new(notification)));
        } else {
            self.outputs.push_back(Output::Notify(notification));
        }
    }

    /// After a `ready` without a replay: how each card closed while the device was away.
    /// A replay carries those closings itself, so they are dropped then.
    pub(super) fn send_unseen(&mut self, conn: crate::ids::ConnId, device: &DeviceId, replay: bool) {
        let frames = self.prompts.take_unseen(device);
        if !replay {
            for frame in frames {
                self.send(conn, frame);
            }
        }
    }
}

/// What a notification shows of a card: its command, or its question; hidden characters
/// shown as ⟨U+202E⟩ behind a warning (L49), so a lock screen cannot show one command for
/// another. (Replies keep theirs: an emoji's joiner is no threat there.)
pub(super) fn notice_text(card: &Card) -> String {
    let shown = preview(card.command.as_deref().unwrap_or(&card.text));
    if card.hidden_chars() {
        format!("\u{26A0} hidden characters: {}", crate::hidden::reveal(&shown))
    } else {
        shown
    }
}
