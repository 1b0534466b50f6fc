//! ntfy, the second channel (issue 18): one POST per notification to the topic URL in
//! `MOBILE_NTFY_URL`, with `Title`, `Priority`, `Tags` and `Click` headers and the text as
//! the body. It needs no secure origin and no browser support, so it works for an owner
//! on plain LAN http and for a de-Googled phone. The URL is the owner's setting, not a
//! phone's, so no allow-list applies; the token is sent only to it and never logged.

use std::sync::Arc;

use rustls::ClientConfig;

use super::content::AnswerLinks;
use super::request::Request;
use super::sender::Job;
use crate::http_client::{tls, Target};

/// `MOBILE_NTFY_URL`, read at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NtfyTarget {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The topic's path, `/hermes-abc123`.
    pub path: String,
}

impl NtfyTarget {
    /// `http(s)://host[:port]/topic`.
    pub fn parse(url: &str) -> Result<NtfyTarget, String> {
        let bad = || format!("MOBILE_NTFY_URL {url:?} must be http(s)://host[:port]/topic");
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad());
        };
        // Parsed as an https endpoint would be, for the same strictness.
        let as_https = hermes_mobile::push::Endpoint::parse(&format!("https://{rest}")).map_err(|_| bad())?;
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        let explicit_port = if authority.starts_with('[') {
            authority.contains("]:")
        } else {
            authority.contains(':')
        };
        let port = if tls || explicit_port { as_https.port } else { 80 };
        if as_https.path.len() < 2 {
            return Err(bad());
        }
        // Checked now, so that an https topic is never sent in the clear for want of a name.
        if tls {
            tls::server_name(as_https.bare_host()).map_err(|e| format!("MOBILE_NTFY_URL: {e}"))?;
        }
        Ok(NtfyTarget {
            tls,
            host: as_https.host,
            port,
            path: as_https.path,
        })
    }
}

/// Priority 4 ("high") for cards, 3 (the default) otherwise; tags are ntfy emoji names.
pub fn request(
    job: &Job,
    target: &NtfyTarget,
    token: Option<&str>,
    public_url: Option<&str>,
    links: Option<&AnswerLinks>,
    config: &Arc<ClientConfig>,
) -> Result<Request, String> {
    let c = &job.content;
    let (priority, tags) = match c.kind {
        "card" => ("high", "question"),
        "test" => ("default", "white_check_mark"),
        _ => ("default", "speech_balloon"),
    };
    let host_header = match (target.tls, target.port) {
        (true, 443) | (false, 80) => target.host.clone(),
        (_, port) => format!("{}:{port}", target.host),
    };
    let body = c.body.as_bytes();
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {host_header}\r\nTitle: {}\r\nPriority: {priority}\r\nTags: {tags}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n",
        target.path,
        header_safe(&c.title),
        body.len(),
    );
    if let Some(base) = public_url {
        let base = base.split('#').next().unwrap_or(base);
        head.push_str(&format!("Click: {}{}\r\n", header_safe(base), c.fragment));
    }
    if let Some(actions) = links.and_then(|l| actions_header(job, l)) {
        head.push_str(&format!("Actions: {actions}\r\n"));
    }
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {}\r\n", header_safe(token)));
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    let bare = target.host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let tls = if target.tls {
        Some((config.clone(), tls::server_name(&bare)?))
    } else {
        None
    };
    let timeouts = Some(super::PUSH_TIMEOUTS);
    let target = Target {
        host: bare,
        port: target.port,
        tls,
        timeouts,
    };
    Ok(Request {
        target: Arc::new(target),
        bytes,
    })
}

/// A card's buttons as ntfy `http` actions (issue 25): each POSTs its answer to the
/// gateway from the phone, and clears the notification. The ntfy server sees the token in
/// clear text (docs/push.md). A label this header cannot carry as it is (not ASCII, or
/// with a quote or separator) gets no button: the card is answered in the app.
fn actions_header(job: &Job, links: &AnswerLinks) -> Option<String> {
    let card = job.content.card.as_ref()?;
    // The URL is unquoted in the header: one with a separator or a quote gets no buttons.
    if links.url.contains([',', ';', '\'', '"']) {
        return None;
    }
    let actions: Vec<String> = job
        .content
        .buttons
        .iter()
        .filter(|b| !b.label.trim().is_empty())
        .filter(|b| {
            b.label
                .bytes()
                .all(|c| (0x20..=0x7e).contains(&c) && !b",;'\"=".contains(&c))
        })
        .filter_map(|b| {
            let token = &links.tokens.iter().find(|(id, _)| *id == b.option_id)?.1;
            let body = ascii_json(&serde_json::json!({
                "prompt_id": card.prompt,
                "option_id": b.option_id,
                "token": token,
            }));
            Some(format!(
                "http, {}, {}, method=POST, headers.Content-Type=application/json, body='{body}', clear=true",
                b.label.trim(),
                links.url
            ))
        })
        .collect();
    (!actions.is_empty()).then(|| actions.join("; "))
}

/// JSON with every character past ASCII, and the quote that delimits it in the header,
/// written as `\uXXXX`: a header carries ASCII only.
fn ascii_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    for c in value.to_string().chars() {
        if c.is_ascii() && c != '\'' && !c.is_ascii_control() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Header values carry visible ASCII and spaces only: no line breaks from any text.
fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::content::{AnswerLinks, ContentMode};
    use crate::push::sender::{SendOut, Sender};
    use crate::push::NotifyActions;
    use hermes_mobile::push::{CardFacts, Notification, NotifyEvent};
    use hermes_mobile::{DeviceId, PromptId, PromptKind, Time};

    fn card_job(actions: NotifyActions, kind: PromptKind, options: &[(&str, &str)]) -> (Sender, u64) {
        let mut s = Sender::new(ContentMode::Preview, true).with_actions(actions);
        let facts = CardFacts {
            options: options.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            expires_at: Time::from_secs(60),
            digest: [0; 32],
            display: hermes_mobile::prompts::Display {
                asked_chars: 12,
                longest_label: 9,
                plain: true,
            },
        };
        let event = NotifyEvent::Card {
            prompt: PromptId("c'1".into()),
            kind,
            text: "rm -rf build".into(),
            ttl: std::time::Duration::from_secs(60),
            facts,
        };
        s.notify(
            Time::ZERO,
            Notification {
                device: DeviceId("tel-1".into()),
                event,
            },
            &[],
        );
        let Some(SendOut::Post(id)) = s.poll() else {
            panic!("a job")
        };
        (s, id)
    }

    fn head(job: &Job, links: Option<&AnswerLinks>) -> String {
        let target = NtfyTarget::parse("http://127.0.0.1:9/topic").unwrap();
        let config = crate::http_client::tls::client_config(None, "x", true).unwrap();
        let r = request(job, &target, None, Some("https://pi.example/"), links, &config).unwrap();
        String::from_utf8_lossy(&r.bytes).into_owned()
    }

    #[test]
    fn a_cards_buttons_are_http_actions_posting_their_tokens() {
        let exec = [("once", "Once"), ("deny", "Deny")];
        let (s, id) = card_job(NotifyActions::All, PromptKind::ExecApproval, &exec);
        let links = AnswerLinks {
            url: "https://pi.example/card-answer".into(),
            tokens: vec![("once".into(), "T1".into()), ("deny".into(), "T2".into())],
            expires_unix_ms: 0,
        };
        let text = head(s.job(id).unwrap(), Some(&links));
        let actions = text
            .lines()
            .find_map(|l| l.strip_prefix("Actions: "))
            .expect("an Actions header");
        assert_eq!(
            actions,
            [
                r#"http, Approve once, https://pi.example/card-answer, method=POST, headers.Content-Type=application/json, "#,
                r#"body='{"option_id":"once","prompt_id":"c\u00271","token":"T1"}', clear=true; "#,
                r#"http, Deny, https://pi.example/card-answer, method=POST, headers.Content-Type=application/json, "#,
                r#"body='{"option_id":"deny","prompt_id":"c\u00271","token":"T2"}', clear=true"#,
            ]
            .concat()
        );
        // No links (no MOBILE_PUBLIC_URL), or no buttons (off): no header.
        assert!(!head(s.job(id).unwrap(), None).contains("Actions:"));
        let (s, id) = card_job(NotifyActions::Off, PromptKind::ExecApproval, &exec);
        assert!(!head(s.job(id).unwrap(), Some(&links)).contains("Actions:"));
        // A label a header cannot carry gets no button.
        let odd = [("c0", "ja, bitte"), ("c1", "ok"), ("other", "Other…")];
        let (s, id) = card_job(NotifyActions::All, PromptKind::Clarify, &odd);
        let links = AnswerLinks {
            tokens: vec![("c0".into(), "T1".into()), ("c1".into(), "T2".into())],
            ..links
        };
        let text = head(s.job(id).unwrap(), Some(&links));
        let actions = text.lines().find_map(|l| l.strip_prefix("Actions: ")).unwrap();
        assert!(
            actions.starts_with("http, ok, ") && !actions.contains("bitte"),
            "{actions}"
        );
    }

    #[test]
    fn a_topic_url_is_read_with_its_default_port() {
        let t = NtfyTarget::parse("https://ntfy.example.org/hermes-abc123").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.path.as_str()),
            (true, "ntfy.example.org", 443, "/hermes-abc123")
        );
        let t = NtfyTarget::parse("http://192.168.1.5/alerts").unwrap();
        assert_eq!((t.tls, t.port), (false, 80));
        let t = NtfyTarget::parse("http://127.0.0.1:8080/alerts").unwrap();
        assert_eq!(t.port, 8080);
        for bad in [
            "ntfy.sh/x",
            "https://ntfy.sh",
            "https://ntfy.sh/",
            "https://u@ntfy.sh/x",
            "ftp://ntfy.sh/x",
        ] {
            assert!(NtfyTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
