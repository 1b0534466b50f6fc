//! Start-up errors, graceful shutdown and keep-alive.
mod common;
use common::*;
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};
use tungstenite::Message;

#[test]
fn sigterm_closes_every_connection_with_1001_and_exits_0() {
    let mut server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    let start = Instant::now();
    Command::new("kill")
        .arg("-TERM")
        .arg(server.child.id().to_string())
        .status()
        .unwrap();
    let (_, close) = c.closed();
    assert_eq!(close.map(|c| c.0), Some(1001));
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn bad_configuration_stops_start_up_with_one_line() {
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_TOKEN", "t-0123456789abcdef")
        .env("MOBILE_EXTRA_TOKENS", "oops")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("device_id=token"));
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_TOKEN", "t-0123456789abcdef")
        .env("MOBILE_PORT", "eighty")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("MOBILE_PORT"));
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let server = Server::start(&[]);
    let out = Command::new(binary())
        .env_clear()
        .env("MOBILE_TOKEN", "t-0123456789abcdef")
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_PORT", server.port.to_string())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"));
}

#[test]
fn help_explains_every_setting() {
    let out = Command::new(binary()).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for v in [
        "MOBILE_TOKEN",
        "MOBILE_EXTRA_TOKENS",
        "MOBILE_DELIVER_TOKENS",
        "MOBILE_STATE_DIR",
        "send",
        "token",
        "/healthz",
    ] {
        assert!(text.contains(v), "--help lacks {v}");
    }
}

#[test]
fn quiet_connections_are_pinged_and_silent_ones_closed_1001() {
    // decisions K2 (scaled: --keepalive 0.5 s, so silence closes at 1.5 s)
    let server = Server::start(&[("MOBILE_KEEPALIVE", "0.5")]);
    let mut c = Client::hello(&server, "tel-1");
    // Reading answers pings (tungstenite queues the pong), so this connection stays.
    c.ws.get_mut()
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let start = Instant::now();
    let mut pinged = false;
    while start.elapsed() < Duration::from_millis(2500) {
        match c.ws.read() {
            Ok(Message::Ping(_)) => pinged = true,
            Ok(_) | Err(tungstenite::Error::Io(_)) => {}
            Err(e) => panic!("connection ended: {e}"),
        }
        let _ = c.ws.flush();
    }
    assert!(pinged, "a quiet connection gets a WebSocket ping");
    c.ws.get_mut().set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.send(json!({"t":"ping"}));
    assert_eq!(
        c.recv()["t"],
        "pong",
        "still open after 5x the interval: pongs count as traffic"
    );

    // A client that never answers anything is closed with 1001.
    let mut silent = Client::hello(&server, "tel-2");
    std::thread::sleep(Duration::from_millis(2000));
    let (_, close) = silent.closed();
    assert_eq!(close.map(|c| c.0), Some(1001));
}

#[test]
fn generated_token_is_kept_and_printed_once() {
    // decisions C3
    let dir = std::env::temp_dir().join(format!("hm-test-gen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let token = || {
        let out = Command::new(binary())
            .arg("token")
            .env_clear()
            .env("MOBILE_ENV_FILE", "")
            .env("MOBILE_STATE_DIR", &dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let first = token();
    assert_eq!(first.len(), 64);
    assert_eq!(token(), first, "reused on every start");
    let mut cmd = Command::new(binary());
    cmd.env_clear()
        .env("MOBILE_STATE_DIR", &dir)
        .env("MOBILE_PORT", "0")
        .env("MOBILE_HOST", "127.0.0.1");
    let server = Server::spawn(cmd, dir.clone());
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":first,"device":{"id":"tel-1"}}));
    assert_eq!(c.recv()["t"], "ready");
    assert!(!server.log_text().contains(&first), "stored tokens are not logged");
}

#[test]
fn running_out_of_file_descriptors_is_survived() {
    // accept() failing with EMFILE must not stop the server.
    let dir = std::env::temp_dir().join(format!("hm-test-emfile-{}", std::process::id()));
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -n 32 && exec {}", binary()))
        .env_clear()
        .env("MOBILE_TOKEN", TOKEN)
        .env("MOBILE_STATE_DIR", &dir)
        .env("MOBILE_PORT", "0")
        .env("MOBILE_HOST", "127.0.0.1");
    let server = Server::spawn(cmd, dir);
    let mut held = Vec::new();
    for _ in 0..40 {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", server.port)) {
            held.push(s);
        }
    }
    wait_until("accept to fail", Duration::from_secs(5), || {
        server.log_text().contains("accept failed")
    });
    drop(held);
    let mut c = Client::hello(&server, "tel-1");
    c.send(json!({"t":"ping","ts":1}));
    assert_eq!(c.recv()["t"], "pong");
}
