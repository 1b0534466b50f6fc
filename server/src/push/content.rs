//! What a notification says (issue 18): a title and a short preview, or with
//! `MOBILE_PUSH_CONTENT=none` only a generic text. The payload is encrypted for the
//! browser, but the push service still sees its timing and size; `none` is for owners
//! who want it to learn nothing more. The app token never appears in a push.

use hermes_mobile::push::NotifyEvent;
use hermes_mobile::{PromptKind, Time};
use serde_json::json;

use super::actions::{approvals_shown, buttons, NotifyActions};

/// The preview's length, in characters.
pub const PREVIEW_CHARS: usize = 140;

/// `MOBILE_PUSH_CONTENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentMode {
    Preview,
    None,
}

/// One notification, whatever carries it (Web Push or ntfy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    pub title: String,
    pub body: String,
    /// `card`, `reply`, `deliver` or `test`: what the app opens when it is tapped.
    pub kind: &'static str,
    /// The card's or message's id, when there is one to bring into view.
    pub id: Option<String>,
    /// The fragment the page reads (`#card=…`, `#message=…`), empty for none.
    pub fragment: String,
    /// A card: high urgency and priority.
    pub urgent: bool,
    /// Replaces its earlier notification without a sound: a card's outcome (L66).
    pub silent: bool,
    /// A card's buttons (issue 25), each with the line shown once it is applied.
    pub buttons: Vec<Button>,
    /// What a card's tokens are bound to besides the device (issue 25, L67).
    pub card: Option<CardRef>,
    /// A card's outcome (L66): the option applied, and whether it expired.
    pub closed: Option<(Option<String>, bool)>,
}

/// One button of a card's notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    pub option_id: String,
    pub label: String,
    /// What the notification says once it is applied: "Denied: rm -rf build".
    pub done: String,
}

/// A card as its tokens name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardRef {
    pub prompt: String,
    pub expires_at: Time,
    pub digest: [u8; 32],
}

/// A token for each button, and where to send it: `hermes.answer` of the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerLinks {
    pub url: String,
    /// `(option_id, token)`, in the buttons' order.
    pub tokens: Vec<(String, String)>,
    /// The card's expiry in unix ms: past it, a 409 means "Expired".
    pub expires_unix_ms: u64,
}

/// What `event` says; `count` replies or deliveries were coalesced into it; a card's
/// buttons are those `actions` allows.
pub fn content(event: &NotifyEvent, count: usize, mode: ContentMode, actions: NotifyActions) -> Content {
    let preview = mode == ContentMode::Preview;
    let mut extra = Extra::default();
    let (title, body, kind, id, urgent) = match event {
        NotifyEvent::Card {
            prompt,
            kind,
            text,
            facts,
            ..
        } => {
            let title = match kind {
                PromptKind::ExecApproval => "Hermes asks to run a command",
                PromptKind::SlashConfirm => "Hermes asks you to confirm",
                PromptKind::Clarify => "Hermes has a question",
            };
            let body = if preview {
                cut(text)
            } else {
                "Open the chat to answer.".to_owned()
            };
            let approvals = approvals_shown(preview, facts.display);
            extra.buttons = buttons(actions, *kind, &facts.options, approvals)
                .into_iter()
                .map(|(option_id, label)| Button {
                    done: outcome(*kind, Some(&option_id), Some(&label), false, text, preview),
                    option_id,
                    label,
                })
                .collect();
            extra.card = Some(CardRef {
                prompt: prompt.as_str().to_owned(),
                expires_at: facts.expires_at,
                digest: facts.digest,
            });
            (title.to_owned(), body, "card", Some(prompt.as_str().to_owned()), true)
        }
        NotifyEvent::CardClosed {
            prompt,
            kind,
            text,
            option_id,
            label,
            expired,
        } => {
            let line = outcome(*kind, option_id.as_deref(), label.as_deref(), *expired, text, preview);
            extra.silent = true;
            extra.closed = Some((option_id.clone(), *expired));
            (line, String::new(), "card", Some(prompt.as_str().to_owned()), false)
        }
        NotifyEvent::Reply { message, text } if count > 1 => {
            let body = if preview {
                cut(text)
            } else {
                "Open the chat to read them.".to_owned()
            };
            let title = format!("Hermes: {count} new messages");
            (title, body, "reply", Some(message.as_str().to_owned()), false)
        }
        NotifyEvent::Deliver { text } if count > 1 => {
            let body = if preview {
                cut(text)
            } else {
                "Open the chat to read them.".to_owned()
            };
            (format!("Hermes: {count} new messages"), body, "deliver", None, false)
        }
        NotifyEvent::Reply { message, text } => {
            let body = if preview {
                cut(text)
            } else {
                "Open the chat to read it.".to_owned()
            };
            (
                "Hermes replied".to_owned(),
                body,
                "reply",
                Some(message.as_str().to_owned()),
                false,
            )
        }
        NotifyEvent::Deliver { text } => {
            let body = if preview {
                cut(text)
            } else {
                "Open the chat to read it.".to_owned()
            };
            ("New message from Hermes".to_owned(), body, "deliver", None, false)
        }
        NotifyEvent::Test { .. } => (
            "Hermes notifications work".to_owned(),
            "This is a test notification from your hermes-mobile gateway.".to_owned(),
            "test",
            None,
            false,
        ),
    };
    let fragment = match (kind, &id) {
        ("card", Some(id)) => format!("#card={}", encode_fragment(id)),
        (_, Some(id)) => format!("#message={}", encode_fragment(id)),
        _ => String::new(),
    };
    Content {
        title,
        body,
        kind,
        id,
        fragment,
        urgent,
        silent: extra.silent,
        buttons: extra.buttons,
        card: extra.card,
        closed: extra.closed,
    }
}

#[derive(Default)]
struct Extra {
    silent: bool,
    buttons: Vec<Button>,
    card: Option<CardRef>,
    closed: Option<(Option<String>, bool)>,
}

/// One line saying how a card closed, with what it asked when previews are on:
/// "Denied: rm -rf build", "Expired", "Answered: main".
pub fn outcome(
    kind: PromptKind,
    option_id: Option<&str>,
    label: Option<&str>,
    expired: bool,
    text: &str,
    preview: bool,
) -> String {
    let verb = match (kind, option_id) {
        _ if expired => "Expired".to_owned(),
        (PromptKind::ExecApproval, Some("once")) => "Approved once".to_owned(),
        (PromptKind::ExecApproval, Some("session")) => "Approved for this session".to_owned(),
        (PromptKind::ExecApproval, Some("always")) => "Approved always".to_owned(),
        (PromptKind::ExecApproval, _) => "Denied".to_owned(),
        (PromptKind::SlashConfirm, Some("once")) => "Confirmed".to_owned(),
        (PromptKind::SlashConfirm, Some("always")) => "Confirmed always".to_owned(),
        (PromptKind::SlashConfirm, _) => "Cancelled".to_owned(),
        // A choice's label is what the person wrote or the agent asked: shown only with
        // previews on, like the question itself.
        (PromptKind::Clarify, Some(id)) if id != "other" && preview => match label {
            Some(l) => format!("Answered: {}", cut(l)),
            None => "Answered".to_owned(),
        },
        (PromptKind::Clarify, _) => "Answered".to_owned(),
    };
    let text = text.trim();
    if preview && !text.is_empty() && kind != PromptKind::Clarify {
        format!("{verb}: {}", cut(text))
    } else {
        verb
    }
}

/// The Web Push payload: declarative Web Push (`"web_push": 8030`), which iOS 18.4+
/// shows without running the service worker, with the app's own fields under `hermes`.
/// `app_url` is the page the subscription came from, for `navigate`; `answer` gives a card
/// its buttons (issue 25): each `navigate`s to the card where no worker runs, and the
/// worker POSTs its token instead.
pub fn web_push_payload(c: &Content, app_url: Option<&str>, answer: Option<&AnswerLinks>) -> Vec<u8> {
    let mut notification = json!({ "title": c.title, "body": c.body, "tag": tag(c) });
    let navigate = app_url.map(|base| {
        let base = base.split('#').next().unwrap_or(base);
        format!("{base}{}", c.fragment)
    });
    if let Some(url) = &navigate {
        notification["navigate"] = json!(url);
    }
    if c.silent {
        notification["silent"] = json!(true);
    }
    let mut hermes = json!({ "kind": c.kind, "id": c.id });
    if let Some((option_id, expired)) = &c.closed {
        hermes["closed"] = json!({ "option_id": option_id, "expired": expired });
    }
    if let (Some(answer), Some(url)) = (answer.filter(|a| !a.tokens.is_empty()), &navigate) {
        let buttons: Vec<&Button> = c
            .buttons
            .iter()
            .filter(|b| answer.tokens.iter().any(|(id, _)| *id == b.option_id))
            .collect();
        notification["actions"] = buttons
            .iter()
            .map(|b| json!({ "action": b.option_id, "title": b.label, "navigate": url }))
            .collect();
        let tokens: serde_json::Map<String, serde_json::Value> =
            answer.tokens.iter().map(|(id, t)| (id.clone(), json!(t))).collect();
        let done: serde_json::Map<String, serde_json::Value> =
            buttons.iter().map(|b| (b.option_id.clone(), json!(b.done))).collect();
        hermes["answer"] = json!({
            "url": answer.url,
            "tokens": tokens,
            "done": done,
            "expires": answer.expires_unix_ms,
        });
    }
    let payload = json!({
        "web_push": 8030,
        "notification": notification,
        "hermes": hermes,
    });
    payload.to_string().into_bytes()
}

/// Replaces an earlier notification of the same card or the same kind on the phone.
fn tag(c: &Content) -> String {
    match (&c.id, c.kind) {
        (Some(id), "card") => format!("card-{id}"),
        _ => format!("hermes-{}", c.kind),
    }
}

fn cut(text: &str) -> String {
    let text = text.trim();
    let mut out: String = text.chars().take(PREVIEW_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// Percent-encodes what a fragment may not carry as is.
pub fn encode_fragment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_mobile::{ConnId, MessageId, PromptId};
    use std::time::Duration;

    fn card() -> NotifyEvent {
        exec_card(&format!("rm -rf {}", "x".repeat(300)))
    }

    fn exec_card(text: &str) -> NotifyEvent {
        let options = ["once", "session", "always", "deny"];
        NotifyEvent::Card {
            prompt: PromptId("c 1".into()),
            kind: PromptKind::ExecApproval,
            text: text.into(),
            ttl: Duration::from_secs(60),
            facts: hermes_mobile::push::CardFacts {
                options: options.iter().map(|o| (o.to_string(), o.to_uppercase())).collect(),
                expires_at: Time::from_secs(60),
                digest: [3; 32],
                display: hermes_mobile::prompts::Display {
                    asked_chars: text.chars().count(),
                    longest_label: 6,
                    plain: true,
                },
            },
        }
    }

    fn links(tokens: &[(&str, &str)]) -> AnswerLinks {
        AnswerLinks {
            url: "https://pi.example/chat/card-answer".into(),
            tokens: tokens.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            expires_unix_ms: 1_800_000_000_000,
        }
    }

    #[test]
    fn a_cards_buttons_carry_their_tokens_and_navigate_to_the_card() {
        let c = content(&exec_card("rm -rf build"), 1, ContentMode::Preview, NotifyActions::All);
        let ids: Vec<&str> = c.buttons.iter().map(|b| b.option_id.as_str()).collect();
        assert_eq!(ids, ["once", "deny"]);
        assert_eq!(c.buttons[1].done, "Denied: rm -rf build");
        let answer = links(&[("once", "t-once"), ("deny", "t-deny")]);
        let payload: serde_json::Value =
            serde_json::from_slice(&web_push_payload(&c, Some("https://pi.example/chat/"), Some(&answer))).unwrap();
        assert_eq!(
            payload["notification"]["actions"],
            json!([
                {"action":"once","title":"Approve once","navigate":"https://pi.example/chat/#card=c%201"},
                {"action":"deny","title":"Deny","navigate":"https://pi.example/chat/#card=c%201"},
            ])
        );
        assert_eq!(
            payload["hermes"]["answer"]["url"],
            "https://pi.example/chat/card-answer"
        );
        assert_eq!(
            payload["hermes"]["answer"]["tokens"],
            json!({"once":"t-once","deny":"t-deny"})
        );
        assert_eq!(
            payload["hermes"]["answer"]["done"]["once"],
            "Approved once: rm -rf build"
        );
        // No page to navigate to: no buttons, no tokens.
        let bare: serde_json::Value = serde_json::from_slice(&web_push_payload(&c, None, Some(&answer))).unwrap();
        assert!(bare["notification"].get("actions").is_none() && bare["hermes"].get("answer").is_none());
        // `safe` offers Deny alone.
        let safe = content(&exec_card("rm -rf build"), 1, ContentMode::Preview, NotifyActions::Safe);
        assert_eq!(safe.buttons.len(), 1);
        assert_eq!(safe.buttons[0].option_id, "deny");
    }

    #[test]
    fn a_closed_card_replaces_its_notification_silently_with_how() {
        let closed = |option: Option<&str>, expired| NotifyEvent::CardClosed {
            prompt: PromptId("c 1".into()),
            kind: PromptKind::ExecApproval,
            text: "rm -rf build".into(),
            option_id: option.map(str::to_owned),
            label: None,
            expired,
        };
        let c = content(
            &closed(Some("deny"), false),
            1,
            ContentMode::Preview,
            NotifyActions::Safe,
        );
        let payload: serde_json::Value =
            serde_json::from_slice(&web_push_payload(&c, Some("https://pi.example/"), None)).unwrap();
        assert_eq!(payload["notification"]["title"], "Denied: rm -rf build");
        assert_eq!(
            payload["notification"]["tag"], "card-c 1",
            "the card's own tag: it replaces it"
        );
        assert_eq!(payload["notification"]["silent"], true);
        assert_eq!(payload["hermes"]["closed"], json!({"option_id":"deny","expired":false}));
        let c = content(&closed(Some("deny"), true), 1, ContentMode::None, NotifyActions::Safe);
        assert_eq!(c.title, "Expired");
        let c = content(&closed(Some("once"), false), 1, ContentMode::None, NotifyActions::Safe);
        assert_eq!(c.title, "Approved once", "none shows no command");
    }

    #[test]
    fn a_card_shows_its_command_cut_short_and_opens_the_card() {
        let c = content(&card(), 1, ContentMode::Preview, NotifyActions::Safe);
        assert_eq!(c.title, "Hermes asks to run a command");
        assert!(c.body.starts_with("rm -rf xxx") && c.body.ends_with('…'));
        assert_eq!(c.body.chars().count(), PREVIEW_CHARS + 1);
        assert_eq!((c.fragment.as_str(), c.urgent), ("#card=c%201", true));
        let payload: serde_json::Value =
            serde_json::from_slice(&web_push_payload(&c, Some("https://pi.example/chat/#old"), None)).unwrap();
        assert_eq!(payload["web_push"], 8030);
        assert_eq!(
            payload["notification"]["navigate"],
            "https://pi.example/chat/#card=c%201"
        );
        assert_eq!(payload["notification"]["tag"], "card-c 1");
        assert_eq!(payload["hermes"], json!({"kind": "card", "id": "c 1"}));
        assert!(payload["notification"].get("silent").is_none());
    }

    #[test]
    fn none_says_nothing_of_the_text_the_command_or_the_description() {
        let events = [
            card(),
            NotifyEvent::Reply {
                message: MessageId("m1".into()),
                text: "secret plan".into(),
            },
            NotifyEvent::Deliver {
                text: "secret cron".into(),
            },
        ];
        let clarify = NotifyEvent::Card {
            prompt: PromptId("q".into()),
            kind: PromptKind::Clarify,
            text: "secret question".into(),
            ttl: Duration::from_secs(60),
            facts: hermes_mobile::push::CardFacts {
                options: vec![("c0".into(), "secret choice".into()), ("other".into(), "Other…".into())],
                ..Default::default()
            },
        };
        let chosen = NotifyEvent::CardClosed {
            prompt: PromptId("q".into()),
            kind: PromptKind::Clarify,
            text: "secret question".into(),
            option_id: Some("c0".into()),
            label: Some("secret choice".into()),
            expired: false,
        };
        let answer = links(&[("deny", "t"), ("c0", "t")]);
        for e in events.into_iter().chain([exec_card("rm -rf secret"), clarify, chosen]) {
            for count in [1, 3] {
                let c = content(&e, count, ContentMode::None, NotifyActions::All);
                // With every part a payload can have: buttons, their lines, the address.
                let payload = web_push_payload(&c, Some("https://pi.example/"), Some(&answer));
                let payload = String::from_utf8(payload).unwrap();
                assert!(!payload.contains("secret") && !payload.contains("rm -rf"), "{payload}");
            }
        }
    }

    #[test]
    fn coalesced_replies_say_how_many_and_show_the_latest() {
        let e = NotifyEvent::Reply {
            message: MessageId("m9".into()),
            text: "the last one".into(),
        };
        let c = content(&e, 3, ContentMode::Preview, NotifyActions::Safe);
        assert_eq!(
            (c.title.as_str(), c.body.as_str()),
            ("Hermes: 3 new messages", "the last one")
        );
        assert_eq!(c.fragment, "#message=m9");
        let t = content(
            &NotifyEvent::Test {
                conn: ConnId(1),
                id: "t".into(),
            },
            1,
            ContentMode::None,
            NotifyActions::Safe,
        );
        assert_eq!(t.kind, "test");
        assert!(web_push_payload(&t, None, None).len() < 400);
    }
}
