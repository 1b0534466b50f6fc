//! What a notification says (issue 18): a title and a short preview, or with
//! `MOBILE_PUSH_CONTENT=none` only a generic text. The payload is encrypted for the
//! browser, but the push service still sees its timing and size; `none` is for owners
//! who want it to learn nothing more. The app token never appears in a push.

use hermes_mobile::push::NotifyEvent;
use hermes_mobile::PromptKind;
use serde_json::json;

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
}

/// What `event` says; `count` replies or deliveries were coalesced into it.
pub fn content(event: &NotifyEvent, count: usize, mode: ContentMode) -> Content {
    let preview = mode == ContentMode::Preview;
    let (title, body, kind, id, urgent) = match event {
        NotifyEvent::Card { prompt, kind, text, .. } => {
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
            (title.to_owned(), body, "card", Some(prompt.as_str().to_owned()), true)
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
    }
}

/// The Web Push payload: declarative Web Push (`"web_push": 8030`), which iOS 18.4+
/// shows without running the service worker, with the app's own fields under `hermes`.
/// `app_url` is the page the subscription came from, for `navigate`.
pub fn web_push_payload(c: &Content, app_url: Option<&str>) -> Vec<u8> {
    let mut notification = json!({ "title": c.title, "body": c.body, "tag": tag(c) });
    if let Some(base) = app_url {
        let base = base.split('#').next().unwrap_or(base);
        notification["navigate"] = json!(format!("{base}{}", c.fragment));
    }
    let payload = json!({
        "web_push": 8030,
        "notification": notification,
        "hermes": { "kind": c.kind, "id": c.id },
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
        NotifyEvent::Card {
            prompt: PromptId("c 1".into()),
            kind: PromptKind::ExecApproval,
            text: format!("rm -rf {}", "x".repeat(300)),
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_card_shows_its_command_cut_short_and_opens_the_card() {
        let c = content(&card(), 1, ContentMode::Preview);
        assert_eq!(c.title, "Hermes asks to run a command");
        assert!(c.body.starts_with("rm -rf xxx") && c.body.ends_with('…'));
        assert_eq!(c.body.chars().count(), PREVIEW_CHARS + 1);
        assert_eq!((c.fragment.as_str(), c.urgent), ("#card=c%201", true));
        let payload: serde_json::Value =
            serde_json::from_slice(&web_push_payload(&c, Some("https://pi.example/chat/#old"))).unwrap();
        assert_eq!(payload["web_push"], 8030);
        assert_eq!(
            payload["notification"]["navigate"],
            "https://pi.example/chat/#card=c%201"
        );
        assert_eq!(payload["notification"]["tag"], "card-c 1");
        assert_eq!(payload["hermes"], json!({"kind": "card", "id": "c 1"}));
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
        for e in events {
            for count in [1, 3] {
                let c = content(&e, count, ContentMode::None);
                let payload = String::from_utf8(web_push_payload(&c, None)).unwrap();
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
        let c = content(&e, 3, ContentMode::Preview);
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
        );
        assert_eq!(t.kind, "test");
        assert!(web_push_payload(&t, None).len() < 400);
    }
}
