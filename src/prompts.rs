//! Cards: the open ones, how an answer is read, and the recently resolved ones (P1–P6).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::agent::{PromptKind, PromptRequest};
use crate::dedup::Dedup;
use crate::ids::{DeviceId, PromptId};
use crate::limits::{DEDUP_CAPACITY, DEDUP_TOTAL_CAPACITY};
use crate::time::Time;
use crate::wire::server::{encode, Prompt, PromptDone, PromptOption};
use crate::wire::Rejection;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardOption {
    pub id: String,
    pub label: String,
    pub style: &'static str,
}

/// An open card.
#[derive(Debug, Clone)]
pub struct Card {
    pub id: PromptId,
    pub device: DeviceId,
    pub kind: PromptKind,
    pub text: String,
    pub command: Option<String>,
    pub description: Option<String>,
    pub options: Vec<CardOption>,
    pub expires_at: Time,
    /// The journal seq of its opening (issue 24; 0 without a journal).
    pub journal_seq: u64,
    /// A notification told its device of it (issue 25): its closing is pushed too, to
    /// replace that notification.
    pub notified: bool,
    /// [`Card::answer_digest`], made once: a button's token is checked against it on every
    /// `POST /card-answer`, and a card's text may be megabytes.
    digest: [u8; 32],
    /// [`Card::display`], made once for the same reason.
    display: Display,
    /// Opening order, so a reconnecting device sees its cards in the order they were asked.
    seq: u64,
}

/// How a card reads on a lock screen (issue 25, L67), made once with the card: whether a
/// notification can show the whole of what a button would approve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Display {
    /// Characters it asks: an `exec_approval`'s command, else its text.
    pub asked_chars: usize,
    /// The longest option label, in characters.
    pub longest_label: usize,
    /// Nothing in what it asks or in a label that a notification may not show as it is: no
    /// hidden character (L49), no line break or tab (a collapsed notification shows the
    /// first line), no run of spaces and no blank-looking letter (which push the rest out
    /// of sight).
    pub plain: bool,
}

impl Display {
    fn of(asked: &str, labels: &[CardOption], hidden: bool) -> Display {
        // Printable ASCII, single spaces, and letters or digits of any script: nothing that
        // shows as blank or shows nothing (other spaces, line breaks, marks, the fillers
        // that count as letters), so what follows is never pushed out of sight. Anything
        // else only costs the approve button.
        fn plain(s: &str) -> bool {
            let blank_letter = |c: char| matches!(c, '\u{3164}' | '\u{115F}' | '\u{1160}' | '\u{FFA0}');
            let shown = |c: char| c == ' ' || c.is_ascii_graphic() || (c.is_alphanumeric() && !blank_letter(c));
            s.chars().all(shown) && !s.contains("  ")
        }
        // "Other…" is never a button (it needs the person's own text).
        let buttons = || labels.iter().filter(|o| o.id != "other").map(|o| o.label.trim());
        Display {
            asked_chars: asked.chars().count(),
            longest_label: buttons().map(|l| l.chars().count()).max().unwrap_or(0),
            plain: !hidden && plain(asked) && buttons().all(plain),
        }
    }
}

/// How a card was closed, kept for repeated answers (P4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub option_id: Option<String>,
    pub expired: bool,
}

impl Closed {
    pub fn frame(&self, id: &str) -> String {
        encode(
            "prompt_done",
            &PromptDone {
                id: Cow::Borrowed(id),
                option_id: self.option_id.as_deref().map(Cow::Borrowed),
                expired: self.expired,
            },
        )
    }
}

/// An answer read against its card (P2, P3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub option_id: String,
    pub label: Option<String>,
    pub text: Option<String>,
}

fn label_for(kind: PromptKind, id: &str) -> (&'static str, &'static str) {
    match (kind, id) {
        (_, "once") => ("Once", "primary"),
        (_, "session") => ("This session", ""),
        (_, "always") => ("Always", ""),
        (_, "deny") => ("Deny", "danger"),
        (_, "cancel") => ("Cancel", "danger"),
        _ => ("", ""),
    }
}

impl Card {
    /// Builds a card from an agent's request, checking it offers something to choose.
    pub fn new(id: PromptId, device: DeviceId, request: PromptRequest, expires_at: Time) -> Result<Card, &'static str> {
        let kind = request.kind();
        let fixed = |wanted: Vec<String>| -> Result<Vec<CardOption>, &'static str> {
            let wanted: Vec<String> = wanted
                .iter()
                .map(|o| crate::text::lower(o.trim()).into_owned())
                .collect();
            let options: Vec<CardOption> = kind
                .all_options()
                .iter()
                .filter(|o| wanted.is_empty() || wanted.iter().any(|w| w == *o))
                .map(|o| {
                    let (label, style) = label_for(kind, o);
                    CardOption {
                        id: (*o).to_owned(),
                        label: label.to_owned(),
                        style,
                    }
                })
                .collect();
            if options.is_empty() {
                Err("none of the options is allowed for this kind")
            } else {
                Ok(options)
            }
        };
        let (text, command, description, options) = match request {
            PromptRequest::ExecApproval {
                command,
                description,
                options,
            } => (
                "Run this command?".to_owned(),
                Some(command),
                Some(description),
                fixed(options)?,
            ),
            PromptRequest::SlashConfirm { text, options } => (text, None, None, fixed(options)?),
            PromptRequest::Clarify { question, choices } => {
                if choices.is_empty() {
                    return Err("clarify needs at least one choice");
                }
                let mut options: Vec<CardOption> = choices
                    .into_iter()
                    .enumerate()
                    .map(|(i, label)| CardOption {
                        id: format!("c{i}"),
                        label,
                        style: "",
                    })
                    .collect();
                // P3: the list ends with "other".
                options.push(CardOption {
                    id: "other".to_owned(),
                    label: "Other…".to_owned(),
                    style: "",
                });
                (question, None, None, options)
            }
        };
        Ok(Card {
            id,
            device,
            kind,
            text,
            command,
            description,
            options,
            expires_at,
            journal_seq: 0,
            notified: false,
            digest: [0; 32],
            display: Display::default(),
            seq: 0,
        }
        .digested())
    }

    /// A card the journal kept open across a restart (issue 24), from its body; `None`
    /// for a body this build cannot read.
    pub fn from_body(
        device: DeviceId,
        body: crate::journal::body::Body,
        expires_at: Time,
        journal_seq: u64,
    ) -> Option<Card> {
        let kind = match body.kind.as_deref()? {
            "exec_approval" => PromptKind::ExecApproval,
            "slash_confirm" => PromptKind::SlashConfirm,
            "clarify" => PromptKind::Clarify,
            _ => return None,
        };
        let options = body
            .options?
            .into_iter()
            .map(|o| CardOption {
                id: o.id,
                label: o.label,
                style: match o.style.as_str() {
                    "primary" => "primary",
                    "danger" => "danger",
                    _ => "",
                },
            })
            .collect();
        Some(
            Card {
                id: PromptId(body.id),
                device,
                kind,
                text: body.text.unwrap_or_default(),
                command: body.command,
                description: body.description,
                options,
                expires_at,
                journal_seq,
                notified: body.notified,
                digest: [0; 32],
                display: Display::default(),
                seq: 0,
            }
            .digested(),
        )
    }

    /// What the journal keeps of it: its `prompt` frame's fields, and how it closed.
    pub fn body(&self, closed: Option<&Closed>) -> crate::journal::body::Body {
        use crate::journal::body::{Body, CardOptionBody, ClosedBody};
        Body {
            t: "prompt".into(),
            id: self.id.as_str().into(),
            kind: Some(self.kind.as_str().into()),
            text: Some(self.text.clone()),
            options: Some(
                self.options
                    .iter()
                    .map(|o| CardOptionBody {
                        id: o.id.clone(),
                        label: o.label.clone(),
                        style: o.style.into(),
                    })
                    .collect(),
            ),
            command: self.command.clone(),
            description: self.description.clone(),
            session: Some(self.device.session()),
            hidden_chars: self.hidden_chars(),
            notified: self.notified,
            closed: closed.map(|c| ClosedBody {
                option_id: c.option_id.clone(),
                expired: c.expired,
            }),
            ..Body::default()
        }
    }

    /// A digest of everything the person reads on the card (issue 25): a notification's
    /// token is bound to it, so a token can never answer a card that shows something else,
    /// even one reopened under the same id.
    pub fn answer_digest(&self) -> &[u8; 32] {
        &self.digest
    }

    fn digested(mut self) -> Card {
        self.digest = self.compute_digest();
        let asked = self.command.as_deref().unwrap_or(&self.text);
        self.display = Display::of(asked, &self.options, self.hidden_chars());
        self
    }

    /// How it reads on a lock screen ([`Display`]).
    pub fn display(&self) -> Display {
        self.display
    }

    fn compute_digest(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        // Each field with its length, and an absent one apart from an empty one.
        fn field(h: &mut Sha256, s: Option<&str>) {
            match s {
                Some(s) => {
                    h.update([1]);
                    h.update((s.len() as u64).to_be_bytes());
                    h.update(s.as_bytes());
                }
                None => h.update([0]),
            }
        }
        let mut h = Sha256::new();
        field(&mut h, Some(self.kind.as_str()));
        field(&mut h, Some(&self.text));
        field(&mut h, self.command.as_deref());
        field(&mut h, self.description.as_deref());
        for o in &self.options {
            field(&mut h, Some(&o.id));
            field(&mut h, Some(&o.label));
        }
        h.finalize().into()
    }

    /// What it asks: an `exec_approval`'s command, else its text (`AgentEvent`'s `asked`).
    pub fn asked(&self) -> String {
        self.command.clone().unwrap_or_else(|| self.text.clone())
    }

    /// Whether anything the person reads on the card holds a character they cannot see
    /// (L49). The card itself is never altered: the agent gets the same answer either way.
    pub fn hidden_chars(&self) -> bool {
        use crate::hidden::has_hidden;
        has_hidden(&self.text)
            || self.command.as_deref().is_some_and(has_hidden)
            || self.description.as_deref().is_some_and(has_hidden)
            || self.options.iter().any(|o| has_hidden(&o.label))
    }

    /// The `prompt` frame, with the time left as `timeout_seconds` (rounded up).
    pub fn frame(&self, now: Time) -> String {
        let left = self.expires_at.as_millis().saturating_sub(now.as_millis());
        encode(
            "prompt",
            &Prompt {
                id: Cow::Borrowed(self.id.as_str()),
                kind: Cow::Borrowed(self.kind.as_str()),
                text: Cow::Borrowed(&self.text),
                options: self
                    .options
                    .iter()
                    .map(|o| PromptOption {
                        id: Cow::Borrowed(&o.id),
                        label: Cow::Borrowed(&o.label),
                        style: Cow::Borrowed(o.style),
                    })
                    .collect(),
                command: self.command.as_deref().map(Cow::Borrowed),
                description: self.description.as_deref().map(Cow::Borrowed),
                session: Cow::Owned(self.device.session()),
                timeout_seconds: left.div_ceil(1000),
                hidden_chars: self.hidden_chars(),
            },
        )
    }

    /// Reads an answer. `option_id` is lower-cased already (G2).
    pub fn apply(&self, option_id: &str, text: &str) -> Result<Applied, Rejection> {
        let text = text.trim();
        match self.kind.safe_default() {
            Some(default) => {
                // P2: option_id wins; text alone counts if it names an option.
                let wanted = if option_id.is_empty() {
                    crate::text::lower(text).into_owned()
                } else {
                    option_id.to_owned()
                };
                let chosen = self.options.iter().find(|o| o.id == wanted);
                let option_id = chosen.map_or(default, |o| o.id.as_str()).to_owned();
                Ok(Applied {
                    option_id,
                    label: None,
                    text: None,
                })
            }
            None => {
                // P3: an in-range cN; anything else is "other" and needs text.
                let choice = self.options.iter().find(|o| o.id == option_id && o.id != "other");
                if let Some(choice) = choice {
                    return Ok(Applied {
                        option_id: choice.id.clone(),
                        label: Some(choice.label.clone()),
                        text: None,
                    });
                }
                if text.is_empty() {
                    return Err(Rejection::bad_frame("clarify needs text"));
                }
                Ok(Applied {
                    option_id: "other".to_owned(),
                    label: None,
                    text: Some(text.to_owned()),
                })
            }
        }
    }
}

/// Cards closed while their device was away that it has not heard of, in all (L65).
const MAX_UNSEEN: usize = 1024;

/// All cards, open and recently closed.
#[derive(Debug)]
pub struct Prompts {
    open: HashMap<PromptId, Card>,
    closed: Dedup<Closed>,
    /// Cards closed while their device had no connection, with how, oldest first (L65):
    /// kept apart from P4's window, which is shorter than a card may wait.
    unseen: VecDeque<(DeviceId, PromptId, Closed)>,
    next_seq: u64,
}

impl Prompts {
    pub fn new(window: Duration) -> Prompts {
        Prompts {
            open: HashMap::new(),
            closed: Dedup::new(window, DEDUP_CAPACITY, DEDUP_TOTAL_CAPACITY),
            unseen: VecDeque::new(),
            next_seq: 0,
        }
    }

    pub fn is_known(&self, now: Time, device: &DeviceId, id: &PromptId) -> bool {
        self.open.contains_key(id) || self.closed.contains(now, device, id.as_str())
    }

    pub fn insert(&mut self, mut card: Card) {
        card.seq = self.next_seq;
        self.next_seq += 1;
        self.open.insert(card.id.clone(), card);
    }

    pub fn get(&self, id: &str) -> Option<&Card> {
        self.open.get(id)
    }

    /// Closes an open card and remembers how (P4).
    pub fn close(&mut self, now: Time, id: &str, closed: Closed) -> Option<Card> {
        let card = self.open.remove(id)?;
        self.closed.expire(now);
        self.closed.insert(now, &card.device, id, closed);
        Some(card)
    }

    /// How a card of this device was closed, within the window.
    pub fn closed(&self, now: Time, device: &DeviceId, id: &str) -> Option<&Closed> {
        self.closed.get(now, device, id)
    }

    /// A card closed while its device had no connection: it hears how after its next
    /// `ready` (L65). The oldest goes past [`MAX_UNSEEN`].
    pub fn note_unseen(&mut self, device: &DeviceId, id: &PromptId, closed: &Closed) {
        if self.unseen.len() >= MAX_UNSEEN {
            self.unseen.pop_front();
        }
        self.unseen.push_back((device.clone(), id.clone(), closed.clone()));
    }

    /// The `prompt_done` of each card of `device` closed while it was away; taken once.
    pub fn take_unseen(&mut self, device: &DeviceId) -> Vec<String> {
        let mut frames = Vec::new();
        self.unseen.retain(|(d, id, closed)| {
            if d != device {
                return true;
            }
            frames.push(closed.frame(id.as_str()));
            false
        });
        frames
    }

    /// The open cards of a device, oldest first.
    pub fn for_device(&self, device: &DeviceId) -> Vec<&Card> {
        let mut cards: Vec<&Card> = self.open.values().filter(|c| &c.device == device).collect();
        cards.sort_by_key(|c| c.seq);
        cards
    }

    /// Cards whose TTL has run out at `now`.
    pub fn due(&self, now: Time) -> Vec<PromptId> {
        self.open
            .values()
            .filter(|c| c.expires_at <= now)
            .map(|c| c.id.clone())
            .collect()
    }

    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Open cards of one device.
    pub fn open_for(&self, device: &DeviceId) -> usize {
        self.open.values().filter(|c| &c.device == device).count()
    }

    /// The earliest expiry of an open card.
    pub fn next_expiry(&self) -> Option<Time> {
        self.open.values().map(|c| c.expires_at).min()
    }

    pub fn expire_closed(&mut self, now: Time) {
        self.closed.expire(now);
    }
}
