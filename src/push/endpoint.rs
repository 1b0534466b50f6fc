//! A push endpoint a phone names, and the hosts the gateway may POST to (issue 18).
//!
//! This is an SSRF guard: the phone chooses the URL, the gateway makes the request. So an
//! endpoint is read strictly (`https`, no userinfo, a plain host, visible ASCII only, since
//! its path goes into a request line) and its host must be on the allow-list exactly: a
//! look-alike such as `fcm.googleapis.com.evil.example` is refused, and a bare `host`
//! entry allows port 443 only.

use std::fmt;

/// The longest endpoint accepted (issue 18: "at most 2,048 characters").
pub const MAX_ENDPOINT_CHARS: usize = 2048;

/// The push services browsers use (Chrome/Android: FCM; Firefox: Mozilla autopush; Safari:
/// Apple; Edge: Windows Push Notification Services, whose hosts vary by region).
pub const BUILTIN_HOSTS: &[&str] = &[
    "fcm.googleapis.com",
    "updates.push.services.mozilla.com",
    "web.push.apple.com",
    "*.notify.windows.com",
];

/// An endpoint that passed [`Endpoint::parse`]: its parts, as the request needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Lower-cased; an IPv6 literal keeps its brackets.
    pub host: String,
    pub port: u16,
    /// Starts with `/`; query included.
    pub path: String,
}

/// Why an endpoint is refused (`forbidden`, not fatal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointError {
    NotHttps,
    UserInfo,
    BadHost,
    BadPort,
    BadCharacter,
    NotAllowed,
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EndpointError::NotHttps => "push endpoint must be an https URL",
            EndpointError::UserInfo => "push endpoint must not carry a user name or password",
            EndpointError::BadHost => "push endpoint has no valid host",
            EndpointError::BadPort => "push endpoint has an invalid port",
            EndpointError::BadCharacter => "push endpoint has a character a URL cannot carry",
            EndpointError::NotAllowed => "push endpoint's host is not an allowed push service (MOBILE_PUSH_HOSTS)",
        })
    }
}

impl Endpoint {
    /// Reads an absolute `https` URL. The host is checked for shape only; [`AllowList`]
    /// decides whether it may be used.
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        if !url.bytes().all(|b| (0x21..=0x7e).contains(&b)) || url.contains('#') {
            return Err(EndpointError::BadCharacter);
        }
        let rest = match url.get(..8) {
            Some(scheme) if scheme.eq_ignore_ascii_case("https://") => &url[8..],
            _ => return Err(EndpointError::NotHttps),
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.contains('@') {
            return Err(EndpointError::UserInfo);
        }
        let (host, port) = split_host_port(authority)?;
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        Ok(Endpoint { host, port, path })
    }

    /// The origin, as VAPID's `aud` claim wants it: `https://host`, or `https://host:port`
    /// when the port is not 443; no trailing slash.
    pub fn origin(&self) -> String {
        if self.port == 443 {
            format!("https://{}", self.host)
        } else {
            format!("https://{}:{}", self.host, self.port)
        }
    }

    /// The host as a TLS name and a DNS name (an IPv6 literal without its brackets).
    pub fn bare_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }
}

/// `host[:port]` with a lower-cased host of letters, digits, dots and hyphens, or a
/// bracketed IPv6 literal. No port means 443.
fn split_host_port(authority: &str) -> Result<(String, u16), EndpointError> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let close = v6.find(']').ok_or(EndpointError::BadHost)?;
        let (inside, after) = (&v6[..close], &v6[close + 1..]);
        if inside.is_empty() || !inside.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err(EndpointError::BadHost);
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(EndpointError::BadHost)?),
        };
        (format!("[{}]", inside.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
            return Err(EndpointError::BadHost);
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => 443,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or(EndpointError::BadPort)?,
        Some(_) => return Err(EndpointError::BadPort),
    };
    Ok((host, port))
}

/// One allowed host: exact, or `*.suffix` for any host under it (not the suffix itself).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Allowed {
    host: String,
    wildcard: bool,
    port: u16,
}

/// The hosts push requests may go to: the built-in list and `MOBILE_PUSH_HOSTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<Allowed>,
}

impl AllowList {
    /// The built-in services plus `extra` entries (`host`, `host:port`, `*.domain`,
    /// `[v6]:port`). An entry that is not a host is an error naming it.
    pub fn new<'a>(extra: impl IntoIterator<Item = &'a str>) -> Result<AllowList, String> {
        let mut entries = Vec::new();
        for raw in BUILTIN_HOSTS.iter().copied().chain(extra) {
            let raw = raw.trim();
            let (wildcard, rest) = match raw.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, raw),
            };
            let (host, port) = split_host_port(rest).map_err(|_| format!("{raw:?} is not a host or host:port"))?;
            entries.push(Allowed { host, wildcard, port });
        }
        Ok(AllowList { entries })
    }

    pub fn permits(&self, endpoint: &Endpoint) -> bool {
        self.entries.iter().any(|a| {
            a.port == endpoint.port
                && if a.wildcard {
                    endpoint
                        .host
                        .strip_suffix(a.host.as_str())
                        .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.'))
                } else {
                    endpoint.host == a.host
                }
        })
    }

    /// Parses `url` and checks its host: what `push_subscribe` does before it keeps one.
    pub fn check(&self, url: &str) -> Result<Endpoint, EndpointError> {
        let endpoint = Endpoint::parse(url)?;
        if self.permits(&endpoint) {
            Ok(endpoint)
        } else {
            Err(EndpointError::NotAllowed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(extra: &[&str]) -> AllowList {
        AllowList::new(extra.iter().copied()).unwrap()
    }

    #[test]
    fn the_builtin_services_are_allowed_on_443() {
        let l = list(&[]);
        for url in [
            "https://fcm.googleapis.com/fcm/send/abc:def",
            "https://updates.push.services.mozilla.com/wpush/v2/gAAA",
            "https://web.push.apple.com/QGZ9",
            "https://wns2-par02p.notify.windows.com/w/?token=AwY",
            "HTTPS://FCM.googleapis.com:443/x",
        ] {
            assert!(l.check(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn look_alikes_other_ports_and_other_schemes_are_refused() {
        let l = list(&[]);
        let cases = [
            ("https://fcm.googleapis.com.evil.example/x", EndpointError::NotAllowed),
            ("https://evilfcm.googleapis.com/x", EndpointError::NotAllowed),
            ("https://googleapis.com/x", EndpointError::NotAllowed),
            ("https://notify.windows.com/x", EndpointError::NotAllowed),
            ("https://x.notify.windows.com.evil/x", EndpointError::NotAllowed),
            ("https://fcm.googleapis.com:8443/x", EndpointError::NotAllowed),
            ("http://fcm.googleapis.com/x", EndpointError::NotHttps),
            ("ftp://fcm.googleapis.com/x", EndpointError::NotHttps),
            ("fcm.googleapis.com/x", EndpointError::NotHttps),
            ("https://user@fcm.googleapis.com/x", EndpointError::UserInfo),
            ("https://evil.example@fcm.googleapis.com/x", EndpointError::UserInfo),
            (
                "https://fcm.googleapis.com:pass@evil.example/x",
                EndpointError::UserInfo,
            ),
            ("https://fcm.googleapis.com/a b", EndpointError::BadCharacter),
            (
                "https://fcm.googleapis.com/x\r\nHost: evil",
                EndpointError::BadCharacter,
            ),
            ("https://fcm.googleapis.com/x#frag", EndpointError::BadCharacter),
            ("https://fcm.googleapis.com./x", EndpointError::BadHost),
            ("https://fcm%2egoogleapis.com/x", EndpointError::BadHost),
            ("https:///x", EndpointError::BadHost),
            ("https://fcm.googleapis.com:0/x", EndpointError::BadPort),
            ("https://fcm.googleapis.com:99999/x", EndpointError::BadPort),
            ("https://fcm.googleapis.com:/x", EndpointError::BadPort),
        ];
        for (url, want) in cases {
            assert_eq!(l.check(url), Err(want), "{url:?}");
        }
    }

    #[test]
    fn an_entry_with_a_port_allows_exactly_that_port() {
        let l = list(&["127.0.0.1:8443", "push.example.org", "[::1]:9443"]);
        assert!(l.check("https://127.0.0.1:8443/p/1").is_ok());
        assert_eq!(l.check("https://127.0.0.1/p/1"), Err(EndpointError::NotAllowed));
        assert_eq!(l.check("https://127.0.0.1:8444/p/1"), Err(EndpointError::NotAllowed));
        assert!(l.check("https://push.example.org/p").is_ok());
        assert_eq!(
            l.check("https://push.example.org:8443/p"),
            Err(EndpointError::NotAllowed)
        );
        assert!(l.check("https://[::1]:9443/p").is_ok());
        assert!(AllowList::new(["not a host"]).is_err());
        assert!(AllowList::new(["host:http"]).is_err());
    }

    #[test]
    fn the_origin_is_scheme_host_and_a_port_other_than_443() {
        let e = Endpoint::parse("https://Push.Example.org/a/b?c=d").unwrap();
        assert_eq!(e.origin(), "https://push.example.org");
        assert_eq!(e.path, "/a/b?c=d");
        let e = Endpoint::parse("https://127.0.0.1:8443").unwrap();
        assert_eq!((e.origin().as_str(), e.path.as_str()), ("https://127.0.0.1:8443", "/"));
        let e = Endpoint::parse("https://[::1]:8443?x").unwrap();
        assert_eq!(
            (e.origin().as_str(), e.path.as_str(), e.bare_host()),
            ("https://[::1]:8443", "/?x", "::1")
        );
    }
}
