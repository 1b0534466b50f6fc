//! Web Push and ntfy, the protocol side (issue 18, docs/push.md): which endpoints a phone
//! may name, the subscriptions kept per device, and what the gateway asks the driver to
//! notify. The encryption, the signature and the POST are the server's (they need `ring`
//! and sockets); the core decides *when* a device is notified and *what about*.

pub mod endpoint;
pub mod registry;

use std::time::Duration;

pub use endpoint::{AllowList, Endpoint, EndpointError, MAX_ENDPOINT_CHARS};
pub use registry::{Registry, Subscription, MAX_APP_URL_CHARS, MAX_DEVICES, MAX_PER_DEVICE};

use crate::agent::PromptKind;
use crate::ids::{ConnId, DeviceId, MessageId, PromptId};
use crate::time::Time;

/// How long output waits for a device that can be notified (issue 18: "for example 24 h"),
/// in place of M4's 10 minutes; still within the held-output budget (L32, L36).
pub const PUSH_HOLD: Duration = Duration::from_secs(24 * 3600);
/// The most text a notification event carries; the server cuts its preview shorter.
pub const MAX_PREVIEW_CHARS: usize = 240;

/// Checks that 65 bytes are a point on P-256. The core has no curve arithmetic: the
/// server passes `ring`'s check; the default checks the uncompressed form only.
pub type PointCheck = fn(&[u8]) -> bool;

/// The uncompressed-point form: 65 bytes starting with 4.
pub fn uncompressed_form(key: &[u8]) -> bool {
    key.len() == 65 && key[0] == 4
}

/// Push settings the core needs (`MOBILE_PUSH=on`).
#[derive(Debug, Clone)]
pub struct PushConfig {
    /// `ready.capabilities.push.webpush.vapid_public_key`: base64url of the 65-byte point;
    /// `None` with `MOBILE_PUSH=off` (ntfy alone): no capability, no subscriptions.
    pub vapid_public_key: Option<String>,
    pub hosts: AllowList,
    /// `MOBILE_NTFY_URL` is set: every device can be told, subscribed or not.
    pub ntfy: bool,
    pub hold: Duration,
    pub point_check: PointCheck,
    /// `MOBILE_NOTIFY_ACTIONS` (issue 25), as `ready` tells the page: `safe`, `all` or
    /// `off`.
    pub actions: &'static str,
}

impl PushConfig {
    pub fn new(vapid_public_key: impl Into<String>, hosts: AllowList) -> PushConfig {
        PushConfig {
            vapid_public_key: Some(vapid_public_key.into()),
            hosts,
            ntfy: false,
            hold: PUSH_HOLD,
            point_check: uncompressed_form,
            actions: "safe",
        }
    }
}

/// Something a device with no live connection should hear about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub device: DeviceId,
    pub event: NotifyEvent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyEvent {
    /// A card opened for it; `text` is the command for `exec_approval`, else the question.
    Card {
        prompt: PromptId,
        kind: PromptKind,
        text: String,
        /// The time the card has left: the push's TTL may not outlive it.
        ttl: Duration,
        /// What a button on the notification needs of it (issue 25).
        facts: CardFacts,
    },
    /// A card whose notification went out closed (issue 25): the push replaces that
    /// notification with how. Sent whether the device is connected or not.
    CardClosed {
        prompt: PromptId,
        kind: PromptKind,
        /// As the card's own notification said it.
        text: String,
        /// The option applied (a card that expired: its safe default, if any).
        option_id: Option<String>,
        /// That option's label on the card.
        label: Option<String>,
        expired: bool,
    },
    /// The agent's final reply (the start of its text).
    Reply { message: MessageId, text: String },
    /// A `deliver` held for it (its text, or the file's name).
    Deliver { text: String },
    /// `push_test` from `conn`: answer it with `Gateway::handle_push_test_result`.
    Test { conn: ConnId, id: String },
}

/// What a notification's buttons need of a card (issue 25): its options, and what a
/// token is bound to besides the device, the card's id and the option.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardFacts {
    /// `(id, label)` of each option, in the card's order.
    pub options: Vec<(String, String)>,
    /// When it expires.
    pub expires_at: Time,
    /// [`crate::prompts::Card::answer_digest`]: what the person reads on it.
    pub digest: [u8; 32],
    /// How it reads on a lock screen: a notification that cannot show the whole of it may
    /// not offer to approve it (L67).
    pub display: crate::prompts::Display,
}

impl CardFacts {
    pub fn of(card: &crate::prompts::Card) -> CardFacts {
        CardFacts {
            options: card.options.iter().map(|o| (o.id.clone(), o.label.clone())).collect(),
            expires_at: card.expires_at,
            digest: *card.answer_digest(),
            display: card.display(),
        }
    }
}

/// The start of `text`, at most `MAX_PREVIEW_CHARS` characters.
pub(crate) fn preview(text: &str) -> String {
    crate::text::truncate_chars(text, MAX_PREVIEW_CHARS).to_owned()
}
