//! The agent port: what the gateway tells an agent, and what an agent asks of the gateway.
//!
//! Everything is addressed by device, never by connection: a reply written while the phone
//! is reconnecting still reaches it (decisions H5, M4). The types are plain data so that any
//! agent can sit behind them: the embedded demo agent, a child process speaking JSON lines,
//! or an HTTP chat-completions client; none of them changes the core.

use crate::ids::{DeviceId, MessageId, PromptId};
use crate::uploads::ReceivedFile;
use crate::wire::client::AudioFormat;
use crate::wire::DownloadKind;

/// Who the app says the user is (`hello.user`, truncated to 120 characters, G8).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audio {
    pub format: AudioFormat,
    pub data: Vec<u8>,
    /// Its name in the media store, given by the core (L63), as a file's
    /// ([`ReceivedFile::media_name`]).
    pub media_name: Option<String>,
}

/// Gateway → agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEvent {
    /// A user message was accepted (not a duplicate, I2). One of `text`, `audio`, `file` is
    /// present; an `audio` may carry its recognized text, an uploaded file its caption.
    MessageReceived {
        device: DeviceId,
        /// The app's `id` (truncated, G8).
        id: String,
        user: UserInfo,
        text: Option<String>,
        audio: Option<Audio>,
        file: Option<ReceivedFile>,
        /// Handed over again after a restart: the agent may have had it just before the
        /// gateway stopped, and should drop it if it knows its `id` (L64).
        redelivered: bool,
    },
    /// The device answered a card (P2, P3). `option_id` is the option actually applied.
    PromptAnswered {
        device: DeviceId,
        prompt: PromptId,
        kind: PromptKind,
        option_id: String,
        /// The chosen option's label (for `clarify` `cN`), if any.
        label: Option<String>,
        /// The user's own text (`clarify` `other`), if any.
        text: Option<String>,
        /// What the card asked: an `exec_approval`'s command, else its text. An agent
        /// needs no memory of its cards to answer one, even one opened before a restart.
        asked: String,
    },
    /// A card reached its TTL unanswered (P5). `option_id` is the safe default, if the kind
    /// has one.
    PromptExpired {
        device: DeviceId,
        prompt: PromptId,
        kind: PromptKind,
        option_id: Option<String>,
        /// What the card asked, as in `PromptAnswered`.
        asked: String,
    },
    /// The app sent `typing` (M3).
    UserTyping { device: DeviceId },
    /// A device said `hello` and is reachable (a new connection of an online device
    /// replacing the old one says so again).
    DeviceOnline {
        device: DeviceId,
        name: String,
        user: UserInfo,
    },
    /// A device's connection ended; its output is held (M4) until it is back.
    DeviceOffline { device: DeviceId },
}

impl AgentEvent {
    pub fn device(&self) -> &DeviceId {
        match self {
            AgentEvent::MessageReceived { device, .. }
            | AgentEvent::PromptAnswered { device, .. }
            | AgentEvent::PromptExpired { device, .. }
            | AgentEvent::UserTyping { device }
            | AgentEvent::DeviceOnline { device, .. }
            | AgentEvent::DeviceOffline { device } => device,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptKind {
    ExecApproval,
    SlashConfirm,
    Clarify,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PromptKind::ExecApproval => "exec_approval",
            PromptKind::SlashConfirm => "slash_confirm",
            PromptKind::Clarify => "clarify",
        }
    }

    pub fn parse(s: &str) -> Option<PromptKind> {
        [PromptKind::ExecApproval, PromptKind::SlashConfirm, PromptKind::Clarify]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// The option applied when an answer is outside the card's options, or on expiry (P2, P5).
    pub fn safe_default(self) -> Option<&'static str> {
        match self {
            PromptKind::ExecApproval => Some("deny"),
            PromptKind::SlashConfirm => Some("cancel"),
            PromptKind::Clarify => None,
        }
    }

    /// Every option the protocol allows for this kind, in display order (not for `clarify`).
    pub fn all_options(self) -> &'static [&'static str] {
        match self {
            PromptKind::ExecApproval => &["once", "session", "always", "deny"],
            PromptKind::SlashConfirm => &["once", "always", "cancel"],
            PromptKind::Clarify => &[],
        }
    }
}

/// What a card asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptRequest {
    /// `options`: a subset of `once`, `session`, `always`, `deny`; empty means all four.
    ExecApproval {
        command: String,
        description: String,
        options: Vec<String>,
    },
    /// `options`: a subset of `once`, `always`, `cancel`; empty means all three.
    SlashConfirm { text: String, options: Vec<String> },
    /// Offered as `c0`, `c1`, … followed by `other` (P3).
    Clarify { question: String, choices: Vec<String> },
}

impl PromptRequest {
    pub fn kind(&self) -> PromptKind {
        match self {
            PromptRequest::ExecApproval { .. } => PromptKind::ExecApproval,
            PromptRequest::SlashConfirm { .. } => PromptKind::SlashConfirm,
            PromptRequest::Clarify { .. } => PromptKind::Clarify,
        }
    }
}

/// A file for the device (agent → app media, U1: sent in 3 MiB raw chunks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingFile {
    pub kind: DownloadKind,
    /// Empty: guessed from `filename` (U6).
    pub mime: String,
    pub filename: String,
    pub caption: Option<String>,
    pub data: Vec<u8>,
    /// The app message this file answers (`media.reply_to`).
    pub reply_to: Option<String>,
}

/// Agent → gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentCommand {
    /// The whole current text of a reply (M2). The first update of `message` is sent with
    /// `edit:false`, later ones with `edit:true`; `done` marks the last version. A one-shot
    /// reply is a single update with `done: true`.
    Reply {
        device: DeviceId,
        message: MessageId,
        text: String,
        done: bool,
    },
    SendFile {
        device: DeviceId,
        file: OutgoingFile,
    },
    /// Opens a card. `ttl_secs: None` is the configured default (C1 `MOBILE_PROMPT_TTL`).
    OpenPrompt {
        device: DeviceId,
        prompt: PromptId,
        request: PromptRequest,
        ttl_secs: Option<u64>,
    },
    /// The agent is working: `typing{}`.
    Typing {
        device: DeviceId,
    },
    /// An avatar state; anything but `idle`/`thinking`/`speaking` is sent as `idle` (M3).
    Avatar {
        device: DeviceId,
        state: String,
    },
    /// The turn is over: `typing{stop:true}` now, `avatar{idle}` after the idle delay (M3).
    EndTurn {
        device: DeviceId,
    },
    /// Service delivery (S3–S5) from the agent side, as a `deliver` frame would do it:
    /// `target` is `mobile:<id>`, `<id>` or empty (`MOBILE_HOME_DEVICE`); text first, then
    /// the file. `sender` keys the S4 window (a repeat of `id` is confirmed, not re-sent).
    Deliver {
        sender: String,
        id: String,
        target: String,
        text: Option<String>,
        file: Option<OutgoingFile>,
    },
}

/// What an accepted command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    Done,
    /// A `Deliver` reached this device (S5).
    Delivered(DeviceId),
    /// Held for an offline device (M4, L45): the promise is only good once the journal
    /// has it, so whoever confirms it to the agent waits for `ticket`'s commit
    /// ([`crate::Gateway::handle_journal_committed`]; issue 24).
    Kept {
        ticket: u64,
        then: Box<Accepted>,
    },
}

/// Why a command was refused. Nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// `Reply` for a message that already had its `done` version (M2: no edit follows it).
    MessageFinished,
    /// A file over `MAX_MEDIA_BYTES`.
    FileTooBig,
    /// A card id that is open or was resolved within the dedup window.
    DuplicatePrompt,
    /// A card with nothing to choose from (no allowed options, or a clarify without choices).
    InvalidPrompt(&'static str),
    /// Too many replies being streamed to one device at once.
    TooManyStreams,
    /// Too many cards open for the device, or in all (L33).
    TooManyPrompts,
    /// Output for an offline device would exceed its hold (M4).
    HoldFull,
    /// `Deliver` to a device that is not connected (S3: nothing is held, the sender retries).
    DeviceOffline,
    /// `Deliver` without a target and without `MOBILE_HOME_DEVICE` (S3).
    BadTarget,
    /// Held for an offline device, but the journal's commit failed: not kept (issue 24).
    NotKept,
}

impl CommandError {
    /// The stable code of the agent protocol (docs/agent-protocol.md).
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::MessageFinished => "message_finished",
            CommandError::FileTooBig => "file_too_big",
            CommandError::DuplicatePrompt => "duplicate_prompt",
            CommandError::InvalidPrompt(_) => "invalid_prompt",
            CommandError::TooManyStreams => "too_many_streams",
            CommandError::TooManyPrompts => "too_many_prompts",
            CommandError::HoldFull => "hold_full",
            CommandError::DeviceOffline => "device_offline",
            CommandError::BadTarget => "bad_target",
            CommandError::NotKept => "not_kept",
        }
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandError::MessageFinished => f.write_str("message already finished"),
            CommandError::FileTooBig => f.write_str("file is over 8 MiB"),
            CommandError::DuplicatePrompt => f.write_str("prompt id already used"),
            CommandError::InvalidPrompt(why) => write!(f, "invalid prompt: {why}"),
            CommandError::TooManyStreams => f.write_str("too many replies streaming to this device"),
            CommandError::TooManyPrompts => f.write_str("too many cards open for this device or in all"),
            CommandError::HoldFull => f.write_str("offline hold for this device is full"),
            CommandError::DeviceOffline => f.write_str("target device is not online"),
            CommandError::NotKept => f.write_str("the gateway's journal could not keep it; send it again"),
            CommandError::BadTarget => f.write_str("deliver needs a target (no MOBILE_HOME_DEVICE set)"),
        }
    }
}

impl std::error::Error for CommandError {}
