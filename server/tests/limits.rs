//! Limits over real sockets: an oversized message (G7) and a client that never reads.
mod common;
use common::*;
use serde_json::json;
use std::time::Duration;
use tungstenite::Message;

#[test]
fn a_17_mib_message_is_too_big_and_closed_while_others_keep_working() {
    // decisions G7, G10
    let server = Server::start(&[]);
    let mut other = Client::hello(&server, "tel-2");
    let mut c = Client::hello(&server, "tel-1");
    let big = format!(r#"{{"t":"text","id":"x","text":"{}"}}"#, "a".repeat(17 * 1024 * 1024));
    // The server may close before the whole message is written; that is the point.
    let _ = c.ws.send(Message::Text(big.into()));
    let (frames, close) = c.closed();
    assert_eq!(frames.last().map(|f| f["code"].clone()), Some(json!("too_big")));
    assert_eq!(close, Some((1008, "too_big".into())));
    other.send(json!({"t":"ping","ts":5}));
    let pong = other.next();
    assert_eq!(pong, Ok(json!({"t":"pong","ts":5})), "log: {}", server.log_text());
}

#[test]
fn a_client_that_never_reads_is_dropped_and_memory_stays_bounded() {
    let server = Server::start(&[]);
    let mut c = Client::hello(&server, "tel-1");
    let before = server.rss_kib();
    // Each asks for an 8 MiB file (about 11 MiB of frames); none is read.
    for i in 0..8 {
        if c.ws
            .send(Message::Text(
                json!({"t":"text","id":format!("f{i}"),"text":"/file 8388608"})
                    .to_string()
                    .into(),
            ))
            .is_err()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_until("the slow client is dropped", Duration::from_secs(20), || {
        server.log_text().contains("client too slow")
    });
    let after = server.rss_kib();
    assert!(after < before + 96 * 1024, "RSS grew from {before} KiB to {after} KiB");
    let mut fresh = Client::hello(&server, "tel-2");
    fresh.send(json!({"t":"ping"}));
    assert_eq!(fresh.recv()["t"], "pong", "the server still serves");
}
