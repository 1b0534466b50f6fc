//! Issue 23 over real loopback sockets: each red-team finding the server can show, as a
//! user or an attacker would meet it. The rules themselves are tested on virtual time in
//! the core (tests/hardening.rs) and in `conn::slots`; these show the wiring.
mod common;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Whether the server dropped or closed this WebSocket (a quiet one that is still open
/// reads nothing for a second).
fn is_closed(c: &mut Client) -> bool {
    c.ws.get_mut().set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    loop {
        match c.ws.read() {
            Ok(tungstenite::Message::Close(_)) => return true,
            Ok(_) => continue,
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

fn healthz(server: &Server) -> Value {
    let resp = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {resp}"))
}

#[test]
fn idle_sockets_cannot_keep_the_owners_phone_out() {
    // issue 23 #1, decisions L54: the red team filled MOBILE_MAX_CONNECTIONS with idle TCP
    // sockets, and with upgraded sockets that never said hello; the phone got 503.
    let server = Server::start(&[("MOBILE_MAX_CONNECTIONS", "16")]);
    let mut idle: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(("127.0.0.1", server.port)).unwrap())
        .collect();
    let mut silent: Vec<Client> = (0..20).map(|_| Client::connect(&server)).collect();
    for i in 0..3 {
        let mut phone = Client::hello(&server, "owner-phone");
        phone.send(json!({"t":"text","id":format!("m{i}"),"text":"/ping"}));
        assert_eq!(phone.recv()["t"], "avatar", "the owner's phone is in and heard");
    }
    // The oldest unauthenticated sockets were dropped to make room, never an
    // authenticated one: what the server holds stays within the limit.
    let health = healthz(&server);
    assert!(health["sockets"].as_u64().unwrap() <= 16, "{health}");
    server.wait_for_log("dropping the oldest");
    let mut dropped = 0;
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        if matches!(s.read(&mut buf), Ok(0) | Err(_)) {
            dropped += 1;
        }
    }
    assert!(dropped >= 30, "idle sockets dropped: {dropped}");
    let closed = silent.iter_mut().map(is_closed).filter(|c| *c).count();
    assert!(closed >= 15, "silent WebSockets dropped: {closed}");
}

#[test]
fn an_idle_socket_must_send_its_request_head_soon() {
    // decisions L54: the head's own deadline, shorter than the hello timeout.
    let server = Server::start(&[("MOBILE_HELLO_TIMEOUT", "60")]);
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    server.wait_for_log("no complete request head in time");
}

/// A masked client text frame header announcing `len` bytes, and `sent` of them.
fn partial_message(len: usize, sent: usize) -> Vec<u8> {
    let mut out = vec![0x81, 0x80 | 127];
    out.extend_from_slice(&(len as u64).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend(std::iter::repeat_n(b' ', sent));
    out
}

#[test]
fn messages_read_in_part_stay_inside_the_memory_budget() {
    // issue 23 #2, decisions L51: 8 connections each sending 15 MiB of a 16 MiB message
    // held 120 MiB outside any budget. With a 16 MiB budget, messages still arriving may
    // hold one whole message's worth (16 MiB); each of these announces 10 MiB.
    let server = Server::start(&[("MOBILE_MEMORY_BUDGET", "16")]);
    let mut senders: Vec<Client> = (0..4).map(|i| Client::hello(&server, &format!("big-{i}"))).collect();
    for c in &mut senders {
        let _ = c.ws.get_mut().write_all(&partial_message(10 << 20, 512 << 10));
    }
    server.wait_for_log("a message read in part took the inbound share");
    let closed = senders.iter_mut().map(is_closed).filter(|c| *c).count();
    assert_eq!(closed, 3, "the connections holding the most are dropped until it fits");
    let health = healthz(&server);
    assert!(health["partial_bytes"].as_u64().unwrap() <= 16 << 20, "{health}");
    // A phone that behaves is not held up.
    let mut phone = Client::hello(&server, "owner-phone");
    phone.send(json!({"t":"text","id":"m1","text":"/ping"}));
    assert_eq!(phone.recv()["t"], "avatar");
}

fn media(id: &str, part: usize, parts: usize, bytes: usize) -> Value {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(vec![1u8; bytes]);
    json!({"t":"media","id":id,"kind":"document","mime":"application/octet-stream","filename":"x.bin","part":part,"parts":parts,"data":data})
}

#[test]
fn uploads_of_minted_device_ids_are_refused_past_their_share_and_not_fatally() {
    // issue 23 #2, decisions L51: open uploads were limited per device only, and device ids
    // are free to mint. At a 16 MiB budget the uploads' bytes get their floor, one device's
    // whole upload (10 MiB): a second device's parts past it are refused.
    let server = Server::start(&[("MOBILE_MEMORY_BUDGET", "16")]);
    let mut first = Client::hello(&server, "mint-1");
    for part in 0..5 {
        first.send(media("u1", part, 8, 1_600_000));
    }
    first.send(json!({"t":"ping","ts":1}));
    assert_eq!(first.until("pong").len(), 1, "8 MB of parts taken without a word");
    let mut second = Client::hello(&server, "mint-2");
    second.send(media("u2", 0, 4, 1_600_000));
    second.send(media("u2", 1, 4, 1_600_000));
    let error = second.recv();
    assert_eq!(
        (error["t"].as_str(), error["code"].as_str()),
        (Some("error"), Some("too_big")),
        "{error}"
    );
    assert_eq!(error["fatal"], false);
    assert_eq!(error["id"], "u2");
    server.wait_for_log("unfinished uploads hold passes their");
    // Still connected: a text goes through.
    second.send(json!({"t":"text","id":"m1","text":"/ping"}));
    assert_eq!(second.recv()["t"], "avatar");
    assert!(healthz(&server)["upload_held"].as_u64().unwrap() <= 12 << 20);
}

fn hello_from(server: &Server, client_ip: &str, token: &str) -> Value {
    let mut c = Client::connect_with(server, &[("X-Forwarded-For", client_ip)]);
    c.send(json!({"t":"hello","token":token,"device":{"id":"tel-1"}}));
    c.recv()
}

#[test]
fn password_guessing_is_throttled_per_client_address_behind_a_proxy() {
    // issue 23 #3, decisions L52: one client made 8,070 failed hellos a second. Behind a
    // local proxy every peer is 127.0.0.1: the proxy's X-Forwarded-For names the client.
    let server = Server::start(&[]);
    for _ in 0..10 {
        let answer = hello_from(&server, "203.0.113.5", "guess-0123456789abcdef");
        assert_eq!(answer["message"], "invalid token");
    }
    // The first block is 1 s; on a loaded machine the next hello may come after it. Each
    // failure after it doubles the block, so a few rounds always catch one in force.
    let mut blocked = hello_from(&server, "203.0.113.5", TOKEN);
    for _ in 0..4 {
        if blocked["t"] != "ready" {
            break;
        }
        hello_from(&server, "203.0.113.5", "guess-0123456789abcdef");
        blocked = hello_from(&server, "203.0.113.5", TOKEN);
    }
    assert_eq!(blocked["code"], "auth_failed", "{blocked}");
    assert!(blocked["message"]
        .as_str()
        .unwrap()
        .starts_with("too many failed attempts"));
    assert_eq!(hello_from(&server, "198.51.100.7", TOKEN)["t"], "ready");
    server.wait_for_log("failed hellos from one address");
}

#[test]
fn weak_secrets_stop_start_up_and_secrets_come_from_files() {
    // issue 23 #3 and #5, decisions L55
    for (var, value) in [
        ("MOBILE_TOKEN", "abc"),
        ("MOBILE_DELIVER_TOKENS", "d"),
        ("MOBILE_EXTRA_TOKENS", "tel-1=x"),
    ] {
        let out = Command::new(binary())
            .env_clear()
            .env("MOBILE_TOKEN", TOKEN)
            .env(var, value)
            .env("MOBILE_PORT", "0")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("at least 16 characters") && err.contains("/dev/urandom"),
            "{err}"
        );
    }
    // A short token written into the state directory by hand is refused too.
    let state = temp_dir("short-stored");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("token"), "abc\n").unwrap();
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_STATE_DIR", &state)
        .env("MOBILE_PORT", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("delete the file"), "{err}");
    let _ = std::fs::remove_dir_all(&state);
    let dir = temp_dir("secret-file");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "token-from-a-file-0123456789\n").unwrap();
    // Readable by others whatever the umask: the gateway must say so.
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let server = Server::start(&[("MOBILE_TOKEN_FILE", file.to_str().unwrap()), ("MOBILE_TOKEN", "")]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":"token-from-a-file-0123456789","device":{"id":"tel-1"}}));
    assert_eq!(c.recv()["t"], "ready");
    server.wait_for_log("can be read by other users");
    assert!(!server.log_text().contains("token-from-a-file"), "never logged");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_token_given_as_a_flag_is_warned_about_once() {
    // issue 23 #5: /proc/<pid>/cmdline is readable by every local user.
    let state_dir = temp_dir("flag");
    let mut cmd = Command::new(binary());
    cmd.env_clear()
        .args(["--token", TOKEN, "--port", "0", "--host", "127.0.0.1"])
        .env("MOBILE_STATE_DIR", &state_dir);
    let server = Server::spawn(cmd, state_dir);
    server.wait_for_log("--token puts a secret where every local user can read it");
    assert!(!server.log_text().contains(TOKEN));
}

#[test]
fn proxied_or_forwarded_loopback_peers_may_not_deliver() {
    // issue 23 #7, decisions S1 and L53: nginx's X-Real-IP, Cloudflare's header, Via.
    let server = Server::start(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    for (name, value) in [
        ("X-Real-IP", "203.0.113.9"),
        ("CF-Connecting-IP", "203.0.113.9"),
        ("True-Client-IP", "203.0.113.9"),
        ("Via", "1.1 proxy"),
    ] {
        let mut c = Client::connect_with(&server, &[(name, value)]);
        c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"cli"}}));
        c.recv();
        c.send(json!({"t":"deliver","id":"d1","target":"tel-1","text":"hi"}));
        assert_eq!(c.recv()["code"], "forbidden", "{name}");
    }
    phone.send(json!({"t":"ping","ts":1}));
    assert_eq!(phone.recv()["t"], "pong", "nothing was delivered");
}

#[test]
fn with_trust_loopback_off_a_local_forwarder_cannot_deliver() {
    // decisions L53: behind ssh -L or stunnel every phone is loopback with no header.
    let server = Server::start(&[("MOBILE_TRUST_LOOPBACK", "off")]);
    let _phone = Client::hello(&server, "tel-1");
    let mut c = Client::hello(&server, "cli");
    c.send(json!({"t":"deliver","id":"d1","target":"tel-1","text":"hi"}));
    let answer = c.recv();
    assert_eq!(answer["code"], "forbidden", "{answer}");
}

#[test]
fn every_answer_says_nosniff_and_other_methods_get_405() {
    // issue 23 #8
    let server = Server::start(&[]);
    for (request, status) in [
        ("GET /healthz HTTP/1.1\r\n\r\n", "200"),
        ("GET /nope HTTP/1.1\r\n\r\n", "404"),
        ("GET /ws HTTP/1.1\r\n\r\n", "426"),
        ("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "405"),
        ("DELETE /ws HTTP/1.1\r\n\r\n", "405"),
    ] {
        let resp = server.http(request);
        assert!(resp.starts_with(&format!("HTTP/1.1 {status}")), "{request:?}: {resp}");
        assert!(resp.contains("\r\nX-Content-Type-Options: nosniff\r\n"), "{resp}");
        if status == "405" {
            assert!(resp.contains("\r\nAllow: GET"), "{resp}");
        }
    }
}

#[test]
fn a_look_alike_device_id_is_refused_at_hello() {
    // decisions L50 (issue 23 #8): `tel-1 ` beside a bound `tel-1`.
    let server = Server::start(&[("MOBILE_EXTRA_TOKENS", "tel-1=bound-token-0123456789")]);
    for id in ["tel-1 ", "tel-1\u{0}", "tel\u{202E}-1"] {
        let mut c = Client::connect(&server);
        c.send(json!({"t":"hello","token":TOKEN,"device":{"id":id}}));
        let (frames, close) = c.closed();
        assert_eq!(frames[0]["code"], "bad_frame", "{id:?}");
        assert_eq!(close, Some((1008, "bad_frame".to_owned())));
    }
    server.wait_for_log("tel\\u{202e}-1");
}
