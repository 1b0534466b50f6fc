//! Peers that hold the app token and misbehave (issue 8): whatever they do, the server ends
//! what it decided to end, and its resources stay bounded.
mod common;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;
use tungstenite::Message;

fn health(server: &Server) -> Value {
    let response = server.http("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|_| panic!("healthz body: {response:?}"))
}

/// Asks for two 8 MiB files and never reads: the server's writes to it block.
fn stalled_reader(server: &Server, device: &str) -> Client {
    let mut c = Client::hello(server, device);
    for i in 0..2 {
        let text = json!({"t":"text","id":format!("big{i}"),"text":"/file 8388608"}).to_string();
        c.ws.send(Message::Text(text.into())).expect("send");
    }
    c
}

#[test]
fn a_replaced_connection_that_never_reads_is_closed_by_its_deadline() {
    // decisions H5: the old connection is closed; issue 8 #1: even when its writes block.
    let server = Server::start(&[]);
    let _stalled = stalled_reader(&server, "tel-1");
    wait_until("the stalled client's frames queue up", Duration::from_secs(10), || {
        server.log_text().contains("hello as \"tel-1\"")
    });
    std::thread::sleep(Duration::from_millis(500));
    let _fresh = Client::hello(&server, "tel-1");
    // The stalled socket, the fresh one and this request's own.
    assert_eq!(health(&server)["sockets"], 3, "log: {}", server.log_text());
    wait_until("the replaced socket is dropped", Duration::from_secs(15), || {
        health(&server)["sockets"] == 2
    });
    let h = health(&server);
    assert_eq!(
        (h["connections"].as_u64(), h["devices_online"].as_u64()),
        (Some(1), Some(1))
    );
    server.wait_for_log("close did not finish in time");
}

#[test]
fn a_keepalive_close_to_a_peer_that_never_reads_ends_too() {
    // decisions K2: the 90 s close (here 3 x 0.3 s) must end even when writes block.
    let server = Server::start(&[("MOBILE_KEEPALIVE", "0.3")]);
    let stalled = stalled_reader(&server, "tel-1");
    wait_until("the silent peer's socket is dropped", Duration::from_secs(20), || {
        health(&server)["sockets"] == 1
    });
    server.wait_for_log("silent too long");
    drop(stalled);
}

#[test]
fn a_device_id_with_a_line_break_cannot_forge_a_log_line() {
    // issue 8 #12: peer strings are logged escaped.
    let server = Server::start(&[]);
    let mut c = Client::connect(&server);
    c.send(json!({"t":"hello","token":TOKEN,"device":{"id":"evil\nINFO  [hermes_mobile] INJECTED"}}));
    // Since issue 23 (L50) such an id is refused outright; its log line is escaped all the same.
    assert_eq!(c.recv()["code"], "bad_frame");
    drop(c);
    wait_until("the hello is logged", Duration::from_secs(10), || {
        server.log_text().contains("INJECTED")
    });
    let log = server.log_text();
    assert!(
        log.contains(r#"control or invisible character: "evil\nINFO  [hermes_mobile] INJECTED""#),
        "log: {log}"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("INFO  [hermes_mobile] INJECTED")),
        "log: {log}"
    );
}

#[test]
fn a_peer_that_closes_right_behind_its_message_has_it_taken_and_answered_once() {
    // issue 8 #4: input in order: a message read in the same burst as the peer's FIN is
    // taken before the close, not dropped. Since issue 24 the agent gets it once its id
    // is on disk (a crash must never make the agent act twice), by which time this phone
    // has gone: the reply is held, durably, and comes once after its next hello.
    let server = Server::start(&[]);
    let c = Client::hello(&server, "tel-1");
    let mut raw = c.ws.get_ref().try_clone().expect("socket");
    // The text frame and the FIN in one write burst, so that one read sees both.
    // A client frame by hand (RFC 6455 5.2): FIN + text, masked, a short payload.
    let payload = json!({"t":"text","id":"m1","text":"hi"}).to_string().into_bytes();
    let mask = [0x12u8, 0x34, 0x56, 0x78];
    let mut bytes = vec![0x81, 0x80 | payload.len() as u8];
    bytes.extend_from_slice(&mask);
    bytes.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    std::io::Write::write_all(&mut raw, &bytes).expect("send");
    raw.shutdown(std::net::Shutdown::Write).expect("half-close");
    wait_until("the server ends the connection", Duration::from_secs(10), || {
        server.log_text().contains("\"tel-1\" closed")
    });
    drop(c);
    wait_until("the reply is held", Duration::from_secs(10), || {
        health(&server)["held_bytes"] != 0
    });
    let mut again = Client::hello(&server, "tel-1");
    again.send(json!({"t":"ping","ts":1}));
    let frames = again.until("pong");
    let replies: Vec<&Value> = frames.iter().filter(|f| f["t"] == "message").collect();
    assert_eq!(replies.len(), 1, "answered once; log: {}", server.log_text());
    assert_eq!(replies[0]["text"], "echo: hi");
}

#[test]
fn a_flood_is_read_in_budgets_and_nothing_of_it_is_lost() {
    // issue 8 #14: reading stops after a budget per loop turn and resumes next turn.
    let server = Server::start(&[]);
    let mut flood = Client::hello(&server, "tel-1");
    let mut other = Client::hello(&server, "tel-2");
    for i in 0..500 {
        let ping = json!({"t":"ping","ts":i}).to_string();
        flood.ws.write(Message::Text(ping.into())).expect("queue");
    }
    flood.ws.flush().expect("one burst");
    other.send(json!({"t":"ping","ts":"other"}));
    assert_eq!(other.recv(), json!({"t":"pong","ts":"other"}));
    for i in 0..500 {
        assert_eq!(flood.recv(), json!({"t":"pong","ts":i}), "pong {i} of 500");
    }
}

#[test]
fn before_hello_a_message_over_64_kib_is_refused_unbuffered() {
    // decisions L35 with G7, G10: an unauthenticated peer cannot make the server hold 16 MiB.
    let server = Server::start(&[]);
    let mut c = Client::connect(&server);
    let big = json!({"t":"hello","token":TOKEN,"device":{"id":"x".repeat(100 * 1024)}}).to_string();
    let _ = c.ws.send(Message::Text(big.into()));
    let (frames, close) = c.closed();
    assert_eq!(
        frames.last().map(|f| f["code"].clone()),
        Some(json!("too_big")),
        "{frames:?}"
    );
    assert_eq!(close, Some((1008, "too_big".into())));
}

#[test]
fn a_big_message_right_behind_the_hello_is_read_after_the_hello_raised_the_cap() {
    // decisions L35: the cap is lifted as soon as the hello is accepted, even if the client
    // did not wait for `ready`.
    let server = Server::start(&[]);
    let mut c = Client::connect(&server);
    let hello = json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"}}).to_string();
    let data = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![7u8; 1024 * 1024]);
    let media = json!({"t":"media","id":"f1","kind":"document","filename":"a.bin","data":data}).to_string();
    c.ws.write(Message::Text(hello.into())).expect("queue");
    c.ws.write(Message::Text(media.into())).expect("queue");
    c.ws.flush().expect("one burst");
    assert_eq!(c.recv()["t"], "ready");
    let frames = c.until("message");
    assert_eq!(
        frames.last().unwrap()["text"],
        "got document a.bin (1048576 bytes, application/octet-stream)"
    );
}

#[test]
fn frames_queued_for_all_clients_stay_within_the_memory_budget() {
    // decisions L36: MOBILE_MEMORY_BUDGET=16 leaves 8 MiB for frames queued to clients; two
    // 8 MiB files are 22 MiB of frames (under the 24 MiB one client may have queued, L22), so
    // a client that reads neither is dropped by the budget.
    let server = Server::start(&[("MOBILE_MEMORY_BUDGET", "16")]);
    let mut stalled = Client::hello(&server, "tel-1");
    for i in 0..2 {
        let text = json!({"t":"text","id":format!("big{i}"),"text":"/file 8388608"}).to_string();
        stalled.ws.send(Message::Text(text.into())).expect("send");
    }
    wait_until("the non-reader is dropped", Duration::from_secs(15), || {
        server.log_text().contains("over the memory budget")
    });
    let mut fresh = Client::hello(&server, "tel-2");
    fresh.send(json!({"t":"ping"}));
    assert_eq!(fresh.recv()["t"], "pong", "the server still serves");
}
