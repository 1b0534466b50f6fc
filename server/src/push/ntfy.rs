//! ntfy, the second channel (issue 18): one POST per notification to the topic URL in
//! `MOBILE_NTFY_URL`, with `Title`, `Priority`, `Tags` and `Click` headers and the text as
//! the body. It needs no secure origin and no browser support, so it works for an owner
//! on plain LAN http and for a de-Googled phone. The URL is the owner's setting, not a
//! phone's, so no allow-list applies; the token is sent only to it and never logged.

use std::sync::Arc;

use rustls::ClientConfig;

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

/// Header values carry visible ASCII and spaces only: no line breaks from any text.
fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
