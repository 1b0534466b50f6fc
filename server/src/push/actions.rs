//! Which buttons a card's notification has (issue 25, `MOBILE_NOTIFY_ACTIONS`), and where
//! they send their answer. A notification can never approve more than its button says:
//! `safe` offers only the option that refuses, `all` at most two (the Notification API's
//! usual limit), and `session` or `always` never, since a lock screen shows too little to
//! grant more than one run.

use hermes_mobile::prompts::Display;
use hermes_mobile::PromptKind;

/// `MOBILE_NOTIFY_ACTIONS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NotifyActions {
    /// Deny or Cancel only (the default).
    #[default]
    Safe,
    /// Up to two: Approve once and Deny, Confirm and Cancel, a short question's choices.
    All,
    /// No buttons and no tokens.
    Off,
}

impl NotifyActions {
    pub fn parse(value: &str) -> Result<NotifyActions, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "safe" => Ok(NotifyActions::Safe),
            "all" => Ok(NotifyActions::All),
            "off" | "none" => Ok(NotifyActions::Off),
            other => Err(format!("MOBILE_NOTIFY_ACTIONS must be safe, all or off, got {other:?}")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NotifyActions::Safe => "safe",
            NotifyActions::All => "all",
            NotifyActions::Off => "off",
        }
    }
}

/// A label a button shows whole, in characters (Android shortens a button of two to about
/// twenty).
const MAX_BUTTON_CHARS: usize = 20;

/// Whether a notification shows the whole of what a card would approve (L67): previews on
/// (`MOBILE_PUSH_CONTENT=preview`), the card plain ([`Display::plain`]: no hidden
/// character, line break, tab, run of spaces or blank-looking letter), the command or
/// question within the preview, and each label within what a button shows. Without it,
/// `all` offers only what `safe` does: a button never approves what the lock screen did not
/// show. Made from values kept with the card: no work in its size.
pub fn approvals_shown(preview: bool, display: Display) -> bool {
    preview
        && display.plain
        && display.asked_chars <= super::content::PREVIEW_CHARS
        && display.longest_label <= MAX_BUTTON_CHARS
}

/// The buttons of a card of `kind` with these `(id, label)` options, in order: each an
/// option the card has. `approvals`: [`approvals_shown`].
pub fn buttons(
    mode: NotifyActions,
    kind: PromptKind,
    options: &[(String, String)],
    approvals: bool,
) -> Vec<(String, String)> {
    let ids: Vec<&str> = options.iter().map(|(id, _)| id.as_str()).collect();
    button_ids(mode, kind, &ids, approvals)
        .into_iter()
        .map(|id| {
            let label = match (kind, id) {
                (PromptKind::ExecApproval, "once") => "Approve once".to_owned(),
                (PromptKind::SlashConfirm, "once") => "Confirm".to_owned(),
                (_, "deny") => "Deny".to_owned(),
                (_, "cancel") => "Cancel".to_owned(),
                _ => options
                    .iter()
                    .find(|(o, _)| o == id)
                    .map_or_else(String::new, |(_, l)| cut(l)),
            };
            (id.to_owned(), label)
        })
        .collect()
}

/// Whether `option` is a button of a card of `kind` with these option ids: a token for
/// anything else is refused.
pub fn is_button(mode: NotifyActions, kind: PromptKind, ids: &[&str], option: &str, approvals: bool) -> bool {
    button_ids(mode, kind, ids, approvals).contains(&option)
}

fn button_ids<'a>(mode: NotifyActions, kind: PromptKind, ids: &[&'a str], approvals: bool) -> Vec<&'a str> {
    let mode = match mode {
        NotifyActions::All if !approvals => NotifyActions::Safe,
        other => other,
    };
    let fixed = |wanted: &[&str]| -> Vec<&'a str> {
        wanted
            .iter()
            .filter_map(|w| ids.iter().find(|id| **id == *w).copied())
            .collect()
    };
    match (mode, kind) {
        (NotifyActions::Off, _) => Vec::new(),
        (NotifyActions::Safe, PromptKind::ExecApproval) => fixed(&["deny"]),
        (NotifyActions::Safe, PromptKind::SlashConfirm) => fixed(&["cancel"]),
        (NotifyActions::Safe, PromptKind::Clarify) => Vec::new(),
        (NotifyActions::All, PromptKind::ExecApproval) => fixed(&["once", "deny"]),
        (NotifyActions::All, PromptKind::SlashConfirm) => fixed(&["once", "cancel"]),
        (NotifyActions::All, PromptKind::Clarify) => {
            let choices: Vec<&'a str> = ids.iter().copied().filter(|id| *id != "other").collect();
            // More than fit are answered in the app.
            if choices.len() > 2 {
                return Vec::new();
            }
            choices
        }
    }
}

fn cut(label: &str) -> String {
    let label = label.trim();
    let mut out: String = label.chars().take(MAX_BUTTON_CHARS).collect();
    if out.len() < label.len() {
        out.push('…');
    }
    out
}

/// The absolute URL of `/card-answer` beside the page at `base` (the subscribing page's
/// `app_url`, or `MOBILE_PUBLIC_URL`): a gateway behind a proxy under `/chat/` answers at
/// `/chat/card-answer`. `None` for a base that is not an http(s) URL.
pub fn answer_url(base: &str) -> Option<String> {
    let base = base.split(['#', '?']).next().unwrap_or(base);
    let rest = base.strip_prefix("https://").or_else(|| base.strip_prefix("http://"))?;
    let scheme_len = base.len() - rest.len();
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || !base.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return None;
    }
    let dir = &path[..=path.rfind('/').unwrap_or(0)];
    Some(format!("{}{authority}{dir}card-answer", &base[..scheme_len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_ids(o: &[(String, String)]) -> Vec<&str> {
        o.iter().map(|(id, _)| id.as_str()).collect()
    }

    fn opts(ids: &[(&str, &str)]) -> Vec<(String, String)> {
        ids.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    #[test]
    fn safe_offers_only_the_refusal_and_all_at_most_two_never_session_or_always() {
        let exec = opts(&[
            ("once", "Once"),
            ("session", "This session"),
            ("always", "Always"),
            ("deny", "Deny"),
        ]);
        let slash = opts(&[("once", "Once"), ("always", "Always"), ("cancel", "Cancel")]);
        let short = opts(&[("c0", "main"), ("c1", "dev"), ("other", "Other…")]);
        let long = opts(&[("c0", "a"), ("c1", "b"), ("c2", "c"), ("other", "Other…")]);
        use NotifyActions::*;
        use PromptKind::*;
        let ids = |mode, kind, o: &[(String, String)]| -> Vec<String> {
            buttons(mode, kind, o, true).into_iter().map(|(id, _)| id).collect()
        };

        assert_eq!(ids(Safe, ExecApproval, &exec), ["deny"]);
        assert_eq!(ids(Safe, SlashConfirm, &slash), ["cancel"]);
        assert!(ids(Safe, Clarify, &short).is_empty());
        assert_eq!(
            buttons(All, ExecApproval, &exec, true),
            opts(&[("once", "Approve once"), ("deny", "Deny")])
        );
        assert_eq!(
            buttons(All, SlashConfirm, &slash, true),
            opts(&[("once", "Confirm"), ("cancel", "Cancel")])
        );
        assert_eq!(
            buttons(All, Clarify, &short, true),
            opts(&[("c0", "main"), ("c1", "dev")])
        );
        // A notification that does not show the whole of it approves nothing: `all` is `safe`.
        assert!(buttons(All, Clarify, &short, false).is_empty());
        assert!(!is_button(All, Clarify, &as_ids(&short), "c0", false));
        assert_eq!(buttons(All, ExecApproval, &exec, false), opts(&[("deny", "Deny")]));
        assert!(!is_button(All, SlashConfirm, &as_ids(&slash), "once", false));
        assert!(is_button(All, SlashConfirm, &as_ids(&slash), "cancel", false));
        let display = |asked_chars, longest_label, plain| Display {
            asked_chars,
            longest_label,
            plain,
        };
        assert!(approvals_shown(true, display(140, 20, true)));
        assert!(
            !approvals_shown(false, display(10, 4, true)),
            "MOBILE_PUSH_CONTENT=none"
        );
        assert!(!approvals_shown(true, display(10, 4, false)), "not plain");
        assert!(!approvals_shown(true, display(141, 4, true)), "a command cut short");
        assert!(!approvals_shown(true, display(10, 21, true)), "a choice cut short");
        assert!(ids(All, Clarify, &long).is_empty());
        for kind in [ExecApproval, SlashConfirm, Clarify] {
            assert!(ids(Off, kind, &exec).is_empty());
            for o in ["session", "always", "other"] {
                assert!(
                    !is_button(All, kind, &as_ids(&exec), o, true) && !is_button(All, kind, &as_ids(&short), o, true)
                );
            }
        }
        // An agent that offered no deny gets no deny button.
        assert!(ids(Safe, ExecApproval, &opts(&[("once", "Once")])).is_empty());
        assert!(is_button(Safe, ExecApproval, &as_ids(&exec), "deny", true));
        assert!(!is_button(Safe, ExecApproval, &as_ids(&exec), "once", true));
    }

    #[test]
    fn the_answer_url_sits_beside_the_page() {
        for (base, url) in [
            ("https://pi.example/", "https://pi.example/card-answer"),
            ("https://pi.example", "https://pi.example/card-answer"),
            ("https://pi.example/chat/#card=x", "https://pi.example/chat/card-answer"),
            (
                "http://192.168.1.5:8787/index.html?x=1",
                "http://192.168.1.5:8787/card-answer",
            ),
        ] {
            assert_eq!(answer_url(base).as_deref(), Some(url), "{base}");
        }
        for bad in ["ftp://x/", "https:///x", "javascript:alert(1)", "https://a b/"] {
            assert_eq!(answer_url(bad), None, "{bad}");
        }
    }
}
