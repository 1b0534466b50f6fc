//! The plain HTTP side: reading a request head with httparse and deciding where it goes.
//!
//! A head is bounded in size (`MAX_HEAD_BYTES`) and, by the caller, in time. The request
//! target's query string is never logged (decisions H1: a `?token=` must not leak).

/// Larger heads are refused with 431.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
const MAX_HEADERS: usize = 32;

/// Where a complete request head goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /ws` with a valid WebSocket upgrade: the 101 response to send, and whether the
    /// request carried a header a proxy adds (decisions S1, L53: [`PROXY_HEADERS`]).
    Upgrade {
        response: Vec<u8>,
        forwarded: bool,
        /// The client's address as a proxy reported it (L52: whose failed hellos count,
        /// when the peer is a local proxy).
        client: Option<std::net::IpAddr>,
        /// `GET /agent`: an agent on the agent link, not a phone.
        agent: bool,
    },
    /// `GET /healthz`.
    Health,
    /// `GET /files/…`: a kept file, for its own device's token (L63).
    File(FileRequest),
    /// `POST /card-answer` (issue 25): its body follows the head.
    CardAnswer(CardAnswerRequest),
    /// `POST /pair` (issue 26): its body follows the head.
    Pair(CardAnswerRequest),
    /// `GET` or `HEAD` of any other path: the web client's files, or 404 (issue 10).
    Asset(crate::web::AssetRequest),
    /// Anything else: a complete response to send before closing.
    Reply(Vec<u8>),
}

/// A request of the `/files/` route (L63).
#[derive(Clone, PartialEq, Eq)]
pub struct FileRequest {
    /// The path, without its query.
    pub path: String,
    /// The `Authorization: Bearer` token, if any: never logged.
    pub token: Option<String>,
    /// The client's address as a local proxy reported it (L52: whose failures count).
    pub client: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for FileRequest {
    /// Without the token (H1: a token never reaches a log).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRequest")
            .field("path", &self.path)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("client", &self.client)
            .finish()
    }
}

/// A request of the `/card-answer` or `/pair` route: what its head says of its body and
/// its origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardAnswerRequest {
    /// The client's address as a local proxy reported it (L52: whose failures count).
    pub client: Option<std::net::IpAddr>,
    /// `Content-Type: application/json`: a request another site's page cannot send
    /// without a CORS preflight, which the gateway never grants.
    pub json: bool,
    /// `Content-Length`: `Err` for one that is not a number, or two that differ.
    pub length: Result<Option<usize>, ()>,
    /// A `Transfer-Encoding`: the route takes a length only.
    pub encoded: bool,
    pub origin: Option<String>,
    pub host: Option<String>,
}

/// What a POST's head says of its body.
fn body_request(headers: &[httparse::Header<'_>]) -> CardAnswerRequest {
    let json = header(headers, "content-type")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    CardAnswerRequest {
        client: client_address(headers),
        json,
        length: content_length(headers),
        encoded: header(headers, "transfer-encoding").is_some(),
        origin: header(headers, "origin")
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::to_owned),
        host: header(headers, "host").and_then(crate::web::clean_host),
    }
}

fn content_length(headers: &[httparse::Header<'_>]) -> Result<Option<usize>, ()> {
    let mut length = None;
    for h in headers.iter().filter(|h| h.name.eq_ignore_ascii_case("content-length")) {
        let v = std::str::from_utf8(h.value).map_err(|_| ())?.trim();
        if v.is_empty() || v.len() > 12 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        let n: usize = v.parse().map_err(|_| ())?;
        if length.is_some_and(|l| l != n) {
            return Err(());
        }
        length = Some(n);
    }
    Ok(length)
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case, RFC 9110
/// 11.1).
fn bearer(headers: &[httparse::Header<'_>]) -> Option<String> {
    let value = std::str::from_utf8(header(headers, "authorization")?).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
}

/// The outcome of looking at the bytes read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// More bytes are needed.
    Partial,
    /// A complete head of `len` bytes (what follows belongs to the WebSocket).
    Complete { route: Route, len: usize, path: String },
}

/// Headers that show a request came through a proxy or a forwarder (S1, L53). nginx's
/// common `X-Real-IP` template, Cloudflare and Akamai set their own; `Via` is the standard
/// one for any intermediary.
const PROXY_HEADERS: [&str; 6] = [
    "forwarded",
    "x-forwarded-for",
    "x-real-ip",
    "cf-connecting-ip",
    "true-client-ip",
    "via",
];

/// Every response says `nosniff` (issue 23 #8): a browser never guesses a type.
pub fn response(status: &str, content_type: &str, body: &str, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// 405 for a method a route does not take, with the ones it does (RFC 9110 15.5.6).
fn not_allowed(allow: &str) -> Route {
    Route::Reply(response(
        "405 Method Not Allowed",
        "text/plain; charset=utf-8",
        "method not allowed\n",
        &format!("Allow: {allow}\r\n"),
    ))
}

fn text(status: &str, body: &str) -> Vec<u8> {
    response(status, "text/plain; charset=utf-8", &format!("{body}\n"), "")
}

/// The last line of a header sent more than once: a proxy appends its own line (HAProxy's
/// `option forwardfor` adds a second `X-Forwarded-For`), and the first is the client's word.
fn header_last<'h>(headers: &'h [httparse::Header<'_>], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .rev()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

fn header<'h>(headers: &'h [httparse::Header<'_>], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

fn has_token(value: Option<&[u8]>, token: &str) -> bool {
    value
        .and_then(|v| std::str::from_utf8(v).ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// Parses the head in `buf`. Errors are answered with a response, never a panic.
pub fn parse(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
        Ok(httparse::Status::Complete(_)) => {
            return complete(
                Route::Reply(text("431 Request Header Fields Too Large", "request head too large")),
                0,
                "",
            )
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
            return complete(
                Route::Reply(text("431 Request Header Fields Too Large", "request head too large")),
                0,
                "",
            )
        }
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            return complete(
                Route::Reply(text("431 Request Header Fields Too Large", "too many headers")),
                0,
                "",
            )
        }
        Err(_) => return complete(Route::Reply(text("400 Bad Request", "malformed request")), 0, ""),
    };
    // Only the path: the query string is never kept, so it can never be logged (H1).
    let path = req.path.unwrap_or("/").split('?').next().unwrap_or("/").to_owned();
    let method = req.method.unwrap_or("");
    let route = match (method, path.as_str()) {
        ("GET", "/ws") => upgrade(req.headers, false),
        ("GET", "/agent") => upgrade(req.headers, true),
        ("GET", "/healthz") => Route::Health,
        (_, "/ws" | "/agent" | "/healthz") if method != "GET" => not_allowed("GET"),
        ("GET", p) if p.starts_with(hermes_mobile::media::ROUTE) => Route::File(FileRequest {
            path: path.clone(),
            token: bearer(req.headers),
            client: client_address(req.headers),
        }),
        (_, p) if p.starts_with(hermes_mobile::media::ROUTE) => not_allowed("GET"),
        ("POST", "/card-answer") => Route::CardAnswer(body_request(req.headers)),
        (_, "/card-answer") => Route::Reply(crate::card_answer::Reply::MethodNotAllowed.response(None)),
        ("POST", "/pair") => Route::Pair(body_request(req.headers)),
        (_, "/pair") => Route::Reply(crate::pair_route::PairReply::MethodNotAllowed.response()),
        ("GET" | "HEAD", _) => Route::Asset(crate::web::AssetRequest {
            path: path.clone(),
            head_only: method == "HEAD",
            if_none_match: header(req.headers, "if-none-match")
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(str::to_owned),
            host: header(req.headers, "host").and_then(crate::web::clean_host),
        }),
        _ => not_allowed("GET, HEAD"),
    };
    complete(route, len, &path)
}

fn complete(route: Route, len: usize, path: &str) -> Head {
    Head::Complete {
        route,
        len,
        path: path.to_owned(),
    }
}

fn is_websocket_key(key: &[u8]) -> bool {
    use base64::Engine;
    key.len() == 24
        && base64::engine::general_purpose::STANDARD
            .decode(key)
            .is_ok_and(|k| k.len() == 16)
}

fn upgrade(headers: &[httparse::Header<'_>], agent: bool) -> Route {
    let wants_ws = has_token(header(headers, "upgrade"), "websocket");
    if !wants_ws {
        return Route::Reply(response(
            "426 Upgrade Required",
            "text/plain; charset=utf-8",
            "this endpoint speaks WebSocket (Protocol v1)\n",
            "Upgrade: websocket\r\n",
        ));
    }
    let connection_upgrade = has_token(header(headers, "connection"), "upgrade");
    let version_13 = header(headers, "sec-websocket-version").is_some_and(|v| v == b"13");
    // RFC 6455 4.2.1: the key is 16 random bytes in base64; anything else is not a client.
    let key = header(headers, "sec-websocket-key").filter(|k| is_websocket_key(k));
    let (true, true, Some(key)) = (connection_upgrade, version_13, key) else {
        return Route::Reply(response(
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "bad WebSocket upgrade\n",
            "Sec-WebSocket-Version: 13\r\n",
        ));
    };
    let accept = tungstenite::handshake::derive_accept_key(key);
    let forwarded = PROXY_HEADERS.iter().any(|name| header(headers, name).is_some());
    let response =
        format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n")
            .into_bytes();
    Route::Upgrade {
        response,
        forwarded,
        client: client_address(headers),
        agent,
    }
}

/// The client's address as a proxy reports it: the last entry of the last
/// `X-Forwarded-For` (what the nearest proxy appended; nginx's `$proxy_add_x_forwarded_for`,
/// Caddy and HAProxy all write it; earlier entries are the client's own word), else the last
/// `Forwarded: for=`, and only then the single-address headers a proxy sets but may also
/// pass through from the client unchanged (`X-Real-IP` behind Caddy).
fn client_address(headers: &[httparse::Header<'_>]) -> Option<std::net::IpAddr> {
    let value = |name| header_last(headers, name).and_then(|v| std::str::from_utf8(v).ok());
    let parse = |s: &str| -> Option<std::net::IpAddr> {
        let s = s.trim().trim_matches('"');
        let s = s.strip_prefix('[').map_or(s, |v6| v6.split(']').next().unwrap_or(v6));
        s.parse()
            .ok()
            .or_else(|| s.rsplit_once(':').and_then(|(ip, _port)| ip.parse().ok()))
    };
    if let Some(xff) = value("x-forwarded-for") {
        return xff.rsplit(',').next().and_then(parse);
    }
    if let Some(forwarded) = value("forwarded") {
        let last = forwarded.rsplit(',').next()?;
        let for_ = last.split(';').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            k.trim().eq_ignore_ascii_case("for").then_some(v)
        })?;
        return parse(for_);
    }
    ["x-real-ip", "cf-connecting-ip", "true-client-ip"]
        .into_iter()
        .find_map(|name| value(name).and_then(parse))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(req: &str) -> Route {
        match parse(req.as_bytes()) {
            Head::Complete { route, .. } => route,
            Head::Partial => panic!("partial"),
        }
    }

    fn status(r: &Route) -> String {
        match r {
            Route::Reply(bytes) => String::from_utf8_lossy(bytes).lines().next().unwrap().to_owned(),
            other => format!("{other:?}"),
        }
    }

    const UPGRADE: &str = "GET /ws?token=secret HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

    #[test]
    fn websocket_upgrade_gets_101_with_the_accept_key() {
        match route(&format!("{UPGRADE}\r\n")) {
            Route::Upgrade {
                response, forwarded, ..
            } => {
                let text = String::from_utf8(response).unwrap();
                assert!(text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
                assert!(!forwarded);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_key_that_is_not_16_bytes_of_base64_is_a_bad_upgrade() {
        // issue 8: validate Sec-WebSocket-Key before writing the 101.
        for key in [
            "x",
            "dGhlIHNhbXBsZSBub25jZQ",
            "dGhlIHNhbXBsZSBub25jZQ==AA",
            "!!!!!!!!!!!!!!!!!!!!!!==",
            "",
        ] {
            let req = UPGRADE.replace("dGhlIHNhbXBsZSBub25jZQ==", key) + "\r\n";
            assert_eq!(status(&route(&req)), "HTTP/1.1 400 Bad Request", "key {key:?}");
        }
    }

    #[test]
    fn proxy_headers_are_noticed() {
        // decisions S1, L53 (issue 23 #7): every header a proxy or forwarder adds.
        let cases = [
            ("X-Forwarded-For: 10.9.8.7, 1.2.3.4", Some("1.2.3.4")),
            (
                "forwarded: for=9.9.9.9, for=\"[2001:db8::1]:4711\";proto=https",
                Some("2001:db8::1"),
            ),
            ("X-Real-IP: 1.2.3.4", Some("1.2.3.4")),
            ("CF-Connecting-IP: 2001:db8::2", Some("2001:db8::2")),
            ("True-Client-IP: 5.6.7.8", Some("5.6.7.8")),
            ("Via: 1.1 proxy", None),
            ("X-Real-IP: not-an-address", None),
            // The review's bypasses: a client's own X-Real-IP passed through beside the
            // proxy's X-Forwarded-For, and HAProxy's second X-Forwarded-For line.
            ("X-Real-IP: 6.6.6.6\r\nX-Forwarded-For: 1.2.3.4", Some("1.2.3.4")),
            ("X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 1.2.3.4", Some("1.2.3.4")),
        ];
        for (h, ip) in cases {
            match route(&format!("{UPGRADE}{h}\r\n\r\n")) {
                Route::Upgrade { forwarded, client, .. } => {
                    assert!(forwarded, "{h}");
                    assert_eq!(client, ip.map(|ip| ip.parse().unwrap()), "{h}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn other_methods_get_405_with_allow_and_every_answer_says_nosniff() {
        // issue 23 #8
        for (req, allow) in [
            ("DELETE / HTTP/1.1\r\n\r\n", "GET, HEAD"),
            ("POST /ws HTTP/1.1\r\n\r\n", "GET"),
            ("PUT /healthz HTTP/1.1\r\n\r\n", "GET"),
            ("OPTIONS /app.js HTTP/1.1\r\n\r\n", "GET, HEAD"),
        ] {
            let Route::Reply(bytes) = route(req) else {
                panic!("{req}")
            };
            let text = String::from_utf8(bytes).unwrap();
            assert!(text.starts_with("HTTP/1.1 405"), "{text}");
            assert!(text.contains(&format!("\r\nAllow: {allow}\r\n")), "{text}");
            assert!(text.contains("\r\nX-Content-Type-Options: nosniff\r\n"), "{text}");
        }
        assert!(String::from_utf8(response("200 OK", "a/b", "", ""))
            .unwrap()
            .contains("nosniff"));
    }

    #[test]
    fn plain_routes() {
        assert!(status(&route("GET /ws HTTP/1.1\r\nHost: x\r\n\r\n")).starts_with("HTTP/1.1 426"));
        assert_eq!(route("GET /healthz HTTP/1.1\r\n\r\n"), Route::Health);
        assert!(matches!(route("GET /other HTTP/1.1\r\n\r\n"), Route::Asset(a) if a.path == "/other" && !a.head_only));
        assert!(matches!(route("HEAD /?x=1 HTTP/1.1\r\nIf-None-Match: \"e\"\r\n\r\n"),
            Route::Asset(a) if a.path == "/" && a.head_only && a.if_none_match.as_deref() == Some("\"e\"")));
        assert!(status(&route("\x01\x02 nonsense\r\n\r\n")).starts_with("HTTP/1.1 400"));
    }

    #[test]
    fn a_file_request_takes_its_bearer_token_and_never_shows_it() {
        // L63
        let req =
            "GET /files/dGVsLTE/abc?x=1 HTTP/1.1\r\nauthorization: bearer  s3cret \r\nX-Forwarded-For: 1.2.3.4\r\n\r\n";
        let Route::File(file) = route(req) else { panic!() };
        assert_eq!(file.path, "/files/dGVsLTE/abc");
        assert_eq!(file.token.as_deref(), Some("s3cret"));
        assert_eq!(file.client, Some("1.2.3.4".parse().unwrap()));
        assert!(!format!("{file:?}").contains("s3cret"));
        let Route::File(file) = route("GET /files/x HTTP/1.1\r\nAuthorization: Basic eDp5\r\n\r\n") else {
            panic!()
        };
        assert_eq!(file.token, None, "only a bearer token");
        assert!(status(&route("HEAD /files/x HTTP/1.1\r\n\r\n")).starts_with("HTTP/1.1 405"));
    }

    #[test]
    fn a_card_answer_says_its_length_and_origin() {
        let r = route("POST /card-answer HTTP/1.1\r\nHost: pi.example\r\nOrigin: https://pi.example\r\nContent-Length: 12\r\n\r\n");
        let Route::CardAnswer(req) = r else { panic!("{r:?}") };
        assert_eq!(req.length, Ok(Some(12)));
        assert_eq!(
            (req.origin.as_deref(), req.host.as_deref()),
            (Some("https://pi.example"), Some("pi.example"))
        );
        for bad in [
            "Content-Length: -1",
            "Content-Length: 1x",
            "Content-Length: 3\r\nContent-Length: 4",
        ] {
            let r = route(&format!("POST /card-answer HTTP/1.1\r\n{bad}\r\n\r\n"));
            assert!(
                matches!(r, Route::CardAnswer(CardAnswerRequest { length: Err(()), .. })),
                "{bad}"
            );
        }
        let r = route("POST /card-answer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(matches!(
            r,
            Route::CardAnswer(CardAnswerRequest {
                encoded: true,
                length: Ok(None),
                ..
            })
        ));
        assert!(status(&route("GET /card-answer HTTP/1.1\r\n\r\n")).contains("405"));
    }

    #[test]
    fn the_query_string_is_dropped_from_the_path() {
        // decisions H1
        match parse(format!("{UPGRADE}\r\n").as_bytes()) {
            Head::Complete { path, .. } => assert_eq!(path, "/ws"),
            Head::Partial => panic!(),
        }
    }

    #[test]
    fn heads_are_bounded() {
        assert_eq!(parse(b"GET /ws HTTP/1.1\r\nHost: x\r\n"), Head::Partial);
        let huge = format!("GET /ws HTTP/1.1\r\nX-Big: {}\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert!(status(&route(&huge)).starts_with("HTTP/1.1 431"));
    }
}
