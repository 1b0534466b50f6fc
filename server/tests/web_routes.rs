//! The web client's routes over a real socket (issue 10), and `hermes-mobile pair`.
mod common;
use common::*;
use std::process::{Command, Stdio};

fn header<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
    resp.split("\r\n\r\n").next()?.lines().find_map(|l| {
        l.split_once(": ")
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[test]
fn the_chat_page_and_its_assets_are_served_with_types_and_safety_headers() {
    let server = Server::start(&[]);
    for (path, ty) in [
        ("/", "text/html"),
        ("/app.js", "text/javascript"),
        ("/protocol.js", "text/javascript"),
        ("/app.css", "text/css"),
        ("/icon.svg", "image/svg+xml"),
        ("/avatar/", "text/html"),
        ("/avatar/avatar.js", "text/javascript"),
        ("/avatar/avatar.css", "text/css"),
    ] {
        let resp = server.http(&format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
            server.port
        ));
        assert!(
            resp.starts_with("HTTP/1.1 200 OK"),
            "{path}: {}",
            resp.lines().next().unwrap_or("")
        );
        assert!(header(&resp, "Content-Type").unwrap().starts_with(ty), "{path}");
        assert_eq!(header(&resp, "X-Content-Type-Options"), Some("nosniff"), "{path}");
        assert!(
            header(&resp, "ETag").is_some() && header(&resp, "Cache-Control").is_some(),
            "{path}"
        );
        let len: usize = header(&resp, "Content-Length").unwrap().parse().unwrap();
        assert_eq!(len, body(&resp).len(), "{path}");
    }
}

#[test]
fn html_carries_a_strict_csp_with_the_pages_own_websocket_origin() {
    let server = Server::start(&[]);
    let host = format!("127.0.0.1:{}", server.port);
    let resp = server.http(&format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    let csp = header(&resp, "Content-Security-Policy").expect("a CSP on /");
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert!(
        csp.contains(&format!("connect-src 'self' ws://{host} wss://{host}")),
        "{csp}"
    );
    assert!(
        csp.contains("img-src 'self' blob: data:") && csp.contains("media-src 'self' blob:"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    // The page itself has no inline script for the CSP to block.
    let html = body(&resp);
    assert!(
        html.contains("<script") && !html.contains("<script>"),
        "inline script in index.html"
    );
}

#[test]
fn etag_revalidation_gets_304_and_head_gets_headers_only() {
    let server = Server::start(&[]);
    let full = server.http("GET /app.js HTTP/1.1\r\nHost: x\r\n\r\n");
    let etag = header(&full, "ETag").unwrap().to_owned();
    let again = server.http(&format!(
        "GET /app.js HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n"
    ));
    assert!(again.starts_with("HTTP/1.1 304"), "{again}");
    assert_eq!(body(&again), "");
    let changed = server.http("GET /app.js HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"old\"\r\n\r\n");
    assert!(changed.starts_with("HTTP/1.1 200"));
    let head = server.http("HEAD /app.js HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body(&head), "");
    assert_eq!(header(&head, "Content-Length"), header(&full, "Content-Length"));
}

#[test]
fn unknown_paths_stay_404_and_other_methods_get_405() {
    let server = Server::start(&[]);
    for req in [
        "GET /nope HTTP/1.1\r\n\r\n",
        "GET /../Cargo.toml HTTP/1.1\r\n\r\n",
        "GET /favicon.ico HTTP/1.1\r\n\r\n",
    ] {
        assert!(server.http(req).starts_with("HTTP/1.1 404"), "{req:?}");
    }
    // issue 23 #8: a method the page does not take is 405, with what it takes.
    let post = server.http("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(
        post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"),
        "{post}"
    );
    let moved = server.http("GET /avatar HTTP/1.1\r\n\r\n");
    assert!(
        moved.starts_with("HTTP/1.1 308") && moved.contains("Location: /avatar/"),
        "{moved}"
    );
}

#[test]
fn no_web_turns_the_routes_off_and_leaves_the_protocol_on() {
    let server = Server::start(&[("MOBILE_WEB", "off")]);
    assert!(server.http("GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(server.http("GET /app.js HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    let mut phone = Client::hello(&server, "tel-1");
    phone.send(serde_json::json!({"t": "text", "id": "m1", "text": "hi"}));
    assert_eq!(phone.until("message").last().unwrap()["text"], "echo: hi");
    // The flag says the same as the variable.
    let state = temp_dir("noweb");
    let mut cmd = Command::new(binary());
    cmd.env_clear()
        .env("MOBILE_PORT", "0")
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_TOKEN", TOKEN)
        .env("MOBILE_STATE_DIR", &state)
        .arg("--no-web");
    let server = Server::spawn(cmd, state);
    assert!(server.http("GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(server.log_text().contains("web client: off"));
}

#[test]
fn a_bad_web_setting_stops_start_up_with_a_clear_line() {
    // Loopback and port 0: if start-up ever accepted these, it must not take 8787.
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_PORT", "0")
        .env("MOBILE_ENV_FILE", "")
        .env("MOBILE_WEB", "maybe")
        .env("MOBILE_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("MOBILE_WEB must be on or off"));
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_PORT", "0")
        .env("MOBILE_ENV_FILE", "")
        .env("MOBILE_WEB_DIR", "/nonexistent/web")
        .env("MOBILE_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("MOBILE_WEB_DIR: cannot read"));
}

#[test]
fn pair_prints_a_link_with_a_pairing_code_never_the_token_and_a_qr_code() {
    let state = temp_dir("pair");
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_TOKEN", TOKEN)
        .env("MOBILE_ENV_FILE", "")
        .env("MOBILE_STATE_DIR", &state)
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_PORT", "9123")
        .args(["pair"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("http://127.0.0.1:9123/\n"), "{text}");
    // Issue 26: a single-use code in the fragment, never the token.
    assert!(text.contains("http://127.0.0.1:9123/#pair="), "{text}");
    assert!(!text.contains(TOKEN) && !text.contains("#token="), "{text}");
    assert!(text.contains('█') && text.contains('▀'), "no QR code: {text}");
    assert!(
        out.stderr.is_empty(),
        "pair logs nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts the server with `state` as its state directory and no token setting; returns
/// its stdout and stderr once it says it listens (stdout is written before that line).
fn start_up_output(state: &std::path::Path) -> (String, String) {
    use std::io::{BufRead, BufReader, Read};
    let mut child = Command::new(binary())
        .env_clear()
        .env("MOBILE_PORT", "0")
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_STATE_DIR", state)
        .env("MOBILE_ENV_FILE", "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    for line in BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        stderr.push_str(&line);
        stderr.push('\n');
        if line.contains("listening on ws://") {
            break;
        }
    }
    let _ = child.kill();
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let _ = child.wait();
    (stdout, stderr)
}

#[test]
fn start_up_shows_a_pairing_link_only_for_a_new_token_and_never_logs_it() {
    // C3: the new token is shown once on stdout, never through the log (H1); the pairing
    // link carries an owner's pairing code, not the token (issue 26).
    let state = temp_dir("newtoken");
    let (stdout, stderr) = start_up_output(&state);
    let token = std::fs::read_to_string(state.join("token")).unwrap().trim().to_owned();
    assert!(stdout.contains("/#pair=") && !stdout.contains("#token="), "{stdout}");
    assert!(stdout.contains("an owner device"), "{stdout}");
    assert!(stdout.contains('█'), "a new token comes with a QR code: {stdout}");
    assert!(!stderr.contains(&token), "the token reached the log: {stderr}");

    // Second start: the token is kept, so only the addresses are shown.
    let (stdout, stderr) = start_up_output(&state);
    assert!(
        stdout.contains("Open the chat in a browser") && stdout.contains("hermes-mobile pair"),
        "{stdout}"
    );
    assert!(
        !stdout.contains(&token) && !stderr.contains(&token),
        "a kept token is shown again: {stdout}"
    );
    let _ = std::fs::remove_dir_all(&state);
}
