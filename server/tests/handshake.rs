//! Handshake over real sockets: success, each failure with its close code and reason, the
//! hello timeout from accept, and reconnect replacement (decisions H1–H7, G4, G10).
mod common;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn hello_gets_ready() {
    let server = Server::start(&[]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"}}));
    let ready = c.recv();
    assert_eq!(
        (ready["t"].as_str(), ready["session"].as_str(), ready["v"].as_u64()),
        (Some("ready"), Some("mobile:tel-1"), Some(1))
    );
    wait_until("the hello log line", Duration::from_secs(5), || {
        server.log_text().contains("hello as \"tel-1\"")
    });
}

#[test]
fn wrong_token_is_auth_failed_and_closed_1008() {
    // decisions H1, G10
    let server = Server::start(&[]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":"wrong","device":{"id":"tel-1"}}));
    let (frames, close) = c.closed();
    assert_eq!(frames[0]["code"], "auth_failed");
    assert_eq!(frames[0]["fatal"], true);
    assert_eq!(close, Some((1008, "auth_failed".into())));
    assert!(!server.log_text().contains("wrong"), "a token never reaches the log");
    assert!(!server.log_text().contains(TOKEN));
}

#[test]
fn first_frame_not_hello_is_bad_frame_and_closed() {
    // decisions G4
    let server = Server::start(&[]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"ping"}));
    let (frames, close) = c.closed();
    assert_eq!(frames[0]["code"], "bad_frame");
    assert_eq!(close, Some((1008, "bad_frame".into())));
}

#[test]
fn claiming_a_bound_device_is_forbidden() {
    // decisions H2
    let server = Server::start(&[("MOBILE_EXTRA_TOKENS", "tel-1=bound-secret-0123456789")]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"}}));
    let (frames, close) = c.closed();
    assert_eq!(frames[0]["code"], "forbidden");
    assert_eq!(close, Some((1008, "forbidden".into())));
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":"bound-secret-0123456789","device":{"id":"tel-1"}}));
    assert_eq!(c.recv()["t"], "ready");
}

#[test]
fn device_outside_the_allowed_list_is_auth_failed() {
    // decisions H3
    let server = Server::start(&[("MOBILE_ALLOWED_DEVICES", "tel-1")]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"tel-2"}}));
    let (_, close) = c.closed();
    assert_eq!(close, Some((1008, "auth_failed".into())));
}

#[test]
fn hello_timeout_runs_from_accept_and_covers_the_upgrade() {
    // decisions H7
    let server = Server::start(&[("MOBILE_HELLO_TIMEOUT", "0.6")]);
    let start = Instant::now();
    let mut c = Client::connect(&server);
    let (frames, close) = c.closed();
    let took = start.elapsed();
    assert_eq!(frames[0]["code"], "bad_frame");
    assert_eq!(close, Some((1008, "bad_frame".into())));
    assert!(took >= Duration::from_millis(550), "closed after {took:?}");

    // A client that never finishes its HTTP request is cut off too.
    use std::io::{Read, Write};
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    raw.write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\n").unwrap();
    let mut buf = Vec::new();
    let n = raw.read_to_end(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without a response");
}

#[test]
fn reconnect_replaces_the_old_connection_with_1000_replaced() {
    // decisions H5
    let server = Server::start(&[]);
    let mut old = Client::hello(&server, "tel-1");
    let mut new = Client::hello(&server, "tel-1");
    let (_, close) = old.closed();
    assert_eq!(close, Some((1000, "replaced".into())));
    new.send(json!({"t":"ping","ts":1}));
    assert_eq!(new.recv()["t"], "pong");
}
