//! The push settings (issue 18, docs/push.md): `MOBILE_PUSH*`, `MOBILE_NTFY_*`,
//! `MOBILE_PUBLIC_URL`.

use std::path::PathBuf;

use hermes_mobile::push::AllowList;

use crate::push::{ContentMode, NotifyActions, NtfyTarget, PushSettings};

/// `None` when Web Push is off and ntfy is not set: nothing to notify with.
pub fn push_settings(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<PushSettings>, String> {
    let web_push = match get("--push").unwrap_or_default().trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" | "true" | "yes" => true,
        "off" | "0" | "false" | "no" => false,
        other => return Err(format!("MOBILE_PUSH must be on or off, got {other:?}")),
    };
    let content = match get("--push-content")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "preview" => ContentMode::Preview,
        "none" => ContentMode::None,
        other => return Err(format!("MOBILE_PUSH_CONTENT must be preview or none, got {other:?}")),
    };
    let actions = NotifyActions::parse(&get("--notify-actions").unwrap_or_default())?;
    let extra = push_hosts(&get("--push-hosts").unwrap_or_default());
    let hosts = AllowList::new(extra.iter().map(String::as_str)).map_err(|e| format!("MOBILE_PUSH_HOSTS: {e}"))?;
    let public_url = get("--public-url")
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty());
    if let Some(url) = &public_url {
        let ok = (url.starts_with("https://") || url.starts_with("http://"))
            && url.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if !ok {
            return Err(format!("MOBILE_PUBLIC_URL {url:?} must be an http(s) URL"));
        }
    }
    let ntfy = match get("--ntfy-url").map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()) {
        Some(url) => Some(NtfyTarget::parse(&url)?),
        None => None,
    };
    let ntfy_token = get("--ntfy-token")
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    if ntfy_token
        .as_ref()
        .is_some_and(|t| !t.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err("MOBILE_NTFY_TOKEN must be printable ASCII with no spaces".into());
    }
    let given_subject = get("--push-subject")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    if let Some(s) = &given_subject {
        if !(s.starts_with("mailto:") || s.starts_with("https://"))
            || s.contains(['"', '\\'])
            || s.chars().any(char::is_control)
        {
            return Err(format!(
                "MOBILE_PUSH_SUBJECT {s:?} must be a mailto: address or an https: URL"
            ));
        }
    }
    let subject_defaulted = given_subject.is_none();
    let subject = given_subject
        .or_else(|| public_url.clone().filter(|u| u.starts_with("https://")))
        .unwrap_or_else(|| "mailto:hermes-mobile@localhost".to_owned());
    if !web_push && ntfy.is_none() {
        return Ok(None);
    }
    Ok(Some(PushSettings {
        web_push,
        subject_defaulted: subject_defaulted && !subject.starts_with("https://"),
        subject,
        hosts,
        ca_file: get("--push-ca-file")
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        content,
        ntfy,
        ntfy_token,
        public_url,
        guessed_url: None,
        actions,
    }))
}

/// `MOBILE_PUSH_HOSTS` entries: separated by commas or spaces; an origin as copied from an
/// endpoint (`https://push.example.org:8443/`) counts as its `host[:port]`.
fn push_hosts(value: &str) -> Vec<String> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .map(|e| e.strip_prefix("https://").unwrap_or(e).trim_end_matches('/'))
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod push_hosts_tests {
    #[test]
    fn push_hosts_take_commas_spaces_and_origins() {
        assert_eq!(
            super::push_hosts(" a.example, b.example:8443  https://c.example:9443/ ,,"),
            ["a.example", "b.example:8443", "c.example:9443"]
        );
        assert!(super::push_hosts(" , ").is_empty());
    }
}
