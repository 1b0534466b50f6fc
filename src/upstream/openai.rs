//! The OpenAI-compatible chat-completions API, as bytes (issue 11): the endpoint from
//! `MOBILE_AGENT=openai:<base URL>`, the streaming request, the `data:` payloads of its
//! event stream, and what the phone is told when the upstream refuses.
//!
//! Everything a peer or the owner typed that goes into a request head (the host, the
//! model is in the body, the key and extra headers) is checked for CR, LF and NUL first,
//! so nothing can add a header line. The key is never part of a `Debug` output.

use serde_json::Value;

/// Where the API lives: `http(s)://host[:port][/base path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    /// A host name, an IPv4 address, or an IPv6 address without brackets.
    pub host: String,
    pub port: u16,
    /// The base path without a trailing slash (`/v1`), or empty.
    pub base_path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let url = url.trim();
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(format!("{url:?} must start with http:// or https://"));
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err("credentials in the URL are not supported: use MOBILE_AGENT_KEY".into());
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or("an IPv6 address needs its closing ]")?;
            match after.strip_prefix(':') {
                Some(p) => (host, port_of(p)?),
                None if after.is_empty() => (host, default_port),
                None => return Err(format!("unexpected {after:?} after the address")),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, port_of(p)?),
                None => (authority, default_port),
            }
        };
        let host_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'));
        if !host_ok {
            return Err(format!("{host:?} is not a host name or address"));
        }
        if path
            .bytes()
            .any(|b| b.is_ascii_control() || b == b' ' || b == b'?' || b == b'#')
        {
            return Err("the base path may not hold spaces, control characters, ? or #".into());
        }
        Ok(Endpoint {
            tls,
            host: host.to_ascii_lowercase(),
            port,
            base_path: path.trim_end_matches('/').to_owned(),
        })
    }

    /// The `Host` header's value.
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default_port = if self.tls { 443 } else { 80 };
        if self.port == default_port {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

fn port_of(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("{p:?} is not a port")),
        Ok(port) => Ok(port),
    }
}

/// Whether `name` is a header name this gateway sends (letters, digits and `-`).
pub fn header_name_ok(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Whether `value` may go into a header line as is.
pub fn header_safe(value: &str) -> bool {
    !value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

/// A streaming chat-completions request.
pub struct ChatRequest<'a> {
    pub endpoint: &'a Endpoint,
    pub model: &'a str,
    /// Sent as `Authorization: Bearer …`.
    pub key: Option<&'a str>,
    /// Extra headers (`X-Hermes-Session-Id`, a proxy's), already checked.
    pub headers: &'a [(String, String)],
    pub messages: Vec<Value>,
    pub temperature: Option<f64>,
}

impl std::fmt::Debug for ChatRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatRequest")
            .field("endpoint", self.endpoint)
            .field("model", &self.model)
            .field("key", &self.key.map(|_| "<redacted>"))
            .field("messages", &self.messages.len())
            .finish()
    }
}

impl ChatRequest<'_> {
    /// The whole HTTP/1.1 request. Err when a header value holds CR, LF or NUL.
    pub fn to_bytes(&self) -> Result<Vec<u8>, &'static str> {
        let mut body = serde_json::json!({
            "model": self.model,
            "messages": self.messages,
            "stream": true,
        });
        if let Some(t) = self.temperature {
            body["temperature"] = serde_json::json!(t);
        }
        let path = format!("{}/chat/completions", self.endpoint.base_path);
        request_bytes(
            "POST",
            &path,
            self.endpoint,
            self.key,
            self.headers,
            Some(&body.to_string()),
            "text/event-stream",
        )
    }
}

/// An HTTP/1.1 request to `endpoint`: one connection per request (`Connection: close`),
/// a JSON body if any. Err when the key or an extra header could add a header line.
pub fn request_bytes(
    method: &str,
    path: &str,
    endpoint: &Endpoint,
    key: Option<&str>,
    headers: &[(String, String)],
    body: Option<&str>,
    accept: &str,
) -> Result<Vec<u8>, &'static str> {
    if !header_safe(path) || path.contains(' ') {
        return Err("the request path holds a space or a line break");
    }
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: {accept}\r\nConnection: close\r\nUser-Agent: hermes-mobile/{}\r\n",
        endpoint.host_header(),
        env!("CARGO_PKG_VERSION"),
    );
    if let Some(body) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    if let Some(key) = key {
        if !header_safe(key) {
            return Err("the API key holds a line break");
        }
        head.push_str(&format!("Authorization: Bearer {key}\r\n"));
    }
    for (name, value) in headers {
        if !header_name_ok(name) || !header_safe(value) {
            return Err("an extra header is not a valid header line");
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.unwrap_or("").as_bytes());
    Ok(out)
}

/// Takes `MEDIA:/absolute/path` tags out of an agent's text (Hermes writes them on a
/// line of their own, or after other words). Returns the text without them and the
/// paths, in order. A tag whose path is not absolute is left in the text.
pub fn take_media_tags(text: &str) -> (String, Vec<String>) {
    let mut paths = Vec::new();
    let mut kept = Vec::new();
    for line in text.split('\n') {
        let mut rest = line;
        let mut clean = String::new();
        while let Some(at) = rest.find("MEDIA:") {
            let after = &rest[at + "MEDIA:".len()..];
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            let path = after[..end].trim_matches(|c| c == '`' || c == '"' || c == '\'');
            if path.starts_with('/') {
                clean.push_str(&rest[..at]);
                paths.push(path.to_owned());
            } else {
                clean.push_str(&rest[..at + "MEDIA:".len()]);
                clean.push_str(&after[..end]);
            }
            rest = &after[end..];
        }
        clean.push_str(rest);
        if clean.trim().is_empty() && clean.len() != line.len() {
            continue; // a line that held only tags
        }
        kept.push(clean.trim_end().to_owned());
    }
    if paths.is_empty() {
        // No tag: the text is the model's, exactly (a streamed reply's last version must
        // equal what was streamed, whitespace included).
        return (text.to_owned(), paths);
    }
    (kept.join("\n").trim().to_owned(), paths)
}

/// Whether `path` lies inside one of `dirs` (`MOBILE_AGENT_MEDIA_DIRS`), judged on the
/// text: absolute, no `.` or `..` component, and under a listed directory. The caller
/// still opens it with the file worker's checks (a regular file, at most 8 MiB); a
/// symbolic link inside an allowed directory is followed, as the owner put it there.
pub fn media_path_allowed(path: &str, dirs: &[String]) -> bool {
    let clean = path.starts_with('/') && !path.split('/').any(|c| c == ".." || c == ".");
    clean
        && dirs.iter().any(|d| {
            let d = d.trim_end_matches('/');
            !d.is_empty() && path.len() > d.len() && path.starts_with(d) && path.as_bytes()[d.len()] == b'/'
        })
}

/// The largest image taken out of a data URL (the gateway's file limit, I3's 8 MiB).
pub const MAX_DATA_IMAGE_BYTES: usize = 8 * 1024 * 1024;

/// Takes Markdown images with a data URL (`![alt](data:image/png;base64,…)`, as Hermes
/// inlines them in non-streamed replies) out of a text. Returns the text without them and
/// each image's MIME type and bytes; one that does not decode, or is over
/// [`MAX_DATA_IMAGE_BYTES`], stays in the text.
pub fn take_data_images(text: &str) -> (String, Vec<(String, Vec<u8>)>) {
    use base64::Engine as _;
    let mut images = Vec::new();
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("](data:image/") {
        let Some(open) = rest[..at].rfind("![") else {
            kept.push_str(&rest[..at + 2]);
            rest = &rest[at + 2..];
            continue;
        };
        let url_start = at + 2;
        let Some(len) = rest[url_start..].find(')') else { break };
        let url = &rest[url_start..url_start + len];
        let decoded = url
            .strip_prefix("data:")
            .and_then(|u| u.split_once(";base64,"))
            .filter(|(mime, _)| {
                mime.len() <= 64 && mime.bytes().all(|b| b.is_ascii_alphanumeric() || b"/+.-".contains(&b))
            })
            .filter(|(_, data)| data.len() / 4 * 3 <= MAX_DATA_IMAGE_BYTES + 3)
            .and_then(|(mime, data)| {
                base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .ok()
                    .filter(|b| !b.is_empty() && b.len() <= MAX_DATA_IMAGE_BYTES)
                    .map(|b| (mime.to_owned(), b))
            });
        match decoded {
            Some(image) => {
                kept.push_str(&rest[..open]);
                images.push(image);
            }
            None => kept.push_str(&rest[..url_start + len + 1]),
        }
        rest = &rest[url_start + len + 1..];
    }
    kept.push_str(rest);
    if images.is_empty() {
        return (text.to_owned(), images);
    }
    (kept.trim().to_owned(), images)
}

/// One `data:` payload of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    /// Text to add to the reply (may be empty: a role-only first chunk).
    Delta(String),
    /// `finish_reason` arrived (`stop`, `length`, …).
    Finished(String),
    /// `data: [DONE]`: the stream is over.
    Done,
    /// The server reported an error inside the stream.
    Error(String),
    /// Not JSON, or not a chat-completion chunk: skipped (and logged by the caller).
    Malformed,
}

/// Reads one `data:` payload.
pub fn parse_stream_data(data: &str) -> StreamItem {
    let data = data.trim();
    if data == "[DONE]" {
        return StreamItem::Done;
    }
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return StreamItem::Malformed;
    };
    if let Some(err) = v.get("error") {
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| err.as_str())
            .unwrap_or("the model server reported an error");
        return StreamItem::Error(message.chars().take(300).collect());
    }
    let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
        // The usage chunk some servers send last has `"choices": []`: nothing to show.
        return match v.get("choices") {
            Some(Value::Array(a)) if a.is_empty() => StreamItem::Delta(String::new()),
            _ => StreamItem::Malformed,
        };
    };
    if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
        let text = choice.pointer("/delta/content").and_then(Value::as_str).unwrap_or("");
        if text.is_empty() {
            return StreamItem::Finished(reason.to_owned());
        }
    }
    match choice.pointer("/delta/content") {
        Some(Value::String(s)) => StreamItem::Delta(s.clone()),
        Some(Value::Null) | None => StreamItem::Delta(String::new()),
        Some(_) => StreamItem::Malformed,
    }
}

/// Whether a failed request may be tried again (nothing of the reply was shown yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    No,
    /// After this many seconds (429 with `Retry-After`).
    After(u64),
    /// With the caller's backoff (502, 503).
    Backoff,
}

/// What the phone is told for an error status, and whether to retry.
pub fn status_outcome(status: u16, retry_after: Option<&str>) -> (String, Retry) {
    let secs = retry_after.and_then(|v| v.trim().parse::<u64>().ok());
    match status {
        401 | 403 => (
            "The model server refused the API key (check MOBILE_AGENT_KEY).".into(),
            Retry::No,
        ),
        404 => (
            "The model server does not know this model or path (check MOBILE_AGENT_MODEL and the URL).".into(),
            Retry::No,
        ),
        429 => (
            "The model server is busy (too many requests); try again in a moment.".into(),
            secs.map_or(Retry::Backoff, |s| Retry::After(s.min(120))),
        ),
        // A 504 may come after the upstream did the work: not retried (issue 11: 429, 502, 503).
        502 | 503 => (
            "The model server is not answering right now; try again soon.".into(),
            Retry::Backoff,
        ),
        504 => ("The model server took too long to answer; try again.".into(), Retry::No),
        s => (
            format!("The model server answered with an error ({s}); try again."),
            Retry::No,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_with_defaults_ports_and_ipv6() {
        let e = Endpoint::parse("http://192.168.1.20:11434/v1/").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.base_path.as_str()),
            (false, "192.168.1.20", 11434, "/v1")
        );
        assert_eq!(e.host_header(), "192.168.1.20:11434");
        let e = Endpoint::parse("https://API.example.com/v1").unwrap();
        assert_eq!(
            (e.tls, e.port, e.host_header().as_str()),
            (true, 443, "api.example.com")
        );
        let e = Endpoint::parse("http://[::1]:8642").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.host_header().as_str()),
            ("::1", 8642, "[::1]:8642")
        );
        for bad in [
            "ftp://x",
            "http://",
            "http://a b/",
            "http://x:0/",
            "http://u:p@x/",
            "http://x/v1?q",
            "http://x\r\n/",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_request_streams_and_refuses_header_injection() {
        let e = Endpoint::parse("http://127.0.0.1:8642/v1").unwrap();
        let headers = vec![("X-Hermes-Session-Id".to_owned(), "mobile:tel-1".to_owned())];
        let req = ChatRequest {
            endpoint: &e,
            model: "m",
            key: Some("sk-secret"),
            headers: &headers,
            messages: vec![serde_json::json!({"role": "user", "content": "hi"})],
            temperature: Some(0.5),
        };
        let bytes = String::from_utf8(req.to_bytes().unwrap()).unwrap();
        assert!(bytes.starts_with("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8642\r\n"));
        assert!(
            bytes.contains("Authorization: Bearer sk-secret\r\n")
                && bytes.contains("X-Hermes-Session-Id: mobile:tel-1\r\n")
        );
        let (head, body) = bytes.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["stream"], true);
        assert!(!format!("{req:?}").contains("sk-secret"), "the key stays out of Debug");
        let bad = ChatRequest {
            key: Some("k\r\nX-Evil: 1"),
            ..req
        };
        assert!(bad.to_bytes().is_err());
    }

    #[test]
    fn media_tags_are_taken_out_of_the_text() {
        let (text, paths) = take_media_tags("Here is your chart.\nMEDIA:/tmp/chart.png\nAnd MEDIA:/home/me/a.pdf too");
        assert_eq!(paths, ["/tmp/chart.png", "/home/me/a.pdf"]);
        assert_eq!(text, "Here is your chart.\nAnd  too");
        let (text, paths) = take_media_tags("MEDIA:relative.png stays");
        assert!(paths.is_empty());
        assert_eq!(text, "MEDIA:relative.png stays");
    }

    #[test]
    fn media_paths_must_lie_inside_an_allowed_directory() {
        let dirs = vec!["/home/me/out/".to_owned()];
        assert!(media_path_allowed("/home/me/out/a.png", &dirs));
        for bad in [
            "/home/me/outside.png",
            "/home/me/out",
            "/home/me/out/../secret",
            "relative.png",
            "/etc/passwd",
        ] {
            assert!(!media_path_allowed(bad, &dirs), "{bad}");
        }
        assert!(
            !media_path_allowed("/home/me/out/a.png", &[]),
            "nothing is allowed by default"
        );
    }

    #[test]
    fn stream_payloads() {
        assert_eq!(
            parse_stream_data(r#"{"choices":[{"delta":{"content":" word"},"finish_reason":null}]}"#),
            StreamItem::Delta(" word".into())
        );
        assert_eq!(
            parse_stream_data(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#),
            StreamItem::Delta(String::new())
        );
        assert_eq!(
            parse_stream_data(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#),
            StreamItem::Finished("stop".into())
        );
        assert_eq!(parse_stream_data(" [DONE] "), StreamItem::Done);
        assert_eq!(
            parse_stream_data(r#"{"error":{"message":"overloaded"}}"#),
            StreamItem::Error("overloaded".into())
        );
        assert_eq!(parse_stream_data("{not json"), StreamItem::Malformed);
        assert_eq!(parse_stream_data(r#"{"object":"x"}"#), StreamItem::Malformed);
        // The usage chunk at the end of a stream (OpenAI, Hermes): no text, not an error.
        assert_eq!(
            parse_stream_data(r#"{"choices":[],"usage":{"total_tokens":3}}"#),
            StreamItem::Delta(String::new())
        );
    }

    #[test]
    fn statuses_become_one_useful_sentence() {
        assert!(status_outcome(401, None).0.contains("API key"));
        assert!(status_outcome(404, None).0.contains("model"));
        assert_eq!(status_outcome(429, Some("7")).1, Retry::After(7));
        assert_eq!(status_outcome(429, None).1, Retry::Backoff);
        assert_eq!(status_outcome(502, None).1, Retry::Backoff);
        assert_eq!(status_outcome(500, None).1, Retry::No);
    }
    #[test]
    fn data_url_images_become_files_and_leave_the_text() {
        let text = "Here:\n![chart](data:image/png;base64,iVBORw0K) and ![x](data:image/png;base64,@@@) end";
        let (clean, images) = take_data_images(text);
        assert_eq!(
            images,
            vec![("image/png".to_owned(), vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a])]
        );
        assert_eq!(clean, "Here:\n and ![x](data:image/png;base64,@@@) end");
        assert_eq!(take_data_images("no images").0, "no images");
    }
}
