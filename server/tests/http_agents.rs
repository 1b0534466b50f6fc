//! The HTTP agents (issue 11) against scripted upstream servers on loopback: every way a
//! model server can stream, stall, cut or refuse ends in the right frames to the phone
//! and no stuck turn. `openai:` first, then `hermes:` (the runs API with approvals).
mod common;
#[path = "common/upstream.rs"]
mod upstream;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use hermes_mobile::client::{MediaAssembler, MessageAssembler};
use hermes_mobile::wire::server::{parse_server_frame, ServerFrame};
use serde_json::{json, Value};
use upstream::*;

const KEY: &str = "sk-test-key-0123456789";

/// A gateway whose agent is `url`, with short timeouts (connect 2 s, first byte 3 s, idle
/// 2 s) unless `extra` says otherwise.
fn gateway(url: &str, extra: &[(&str, &str)]) -> Server {
    let mut settings = vec![
        ("MOBILE_AGENT", url),
        ("MOBILE_AGENT_MODEL", "test-model"),
        ("MOBILE_AGENT_KEY", KEY),
        ("MOBILE_AGENT_TIMEOUTS", "2,3,2"),
        ("MOBILE_TYPING_IDLE", "30"),
    ];
    settings.extend_from_slice(extra);
    Server::start(&settings)
}

/// A gateway on `state` (kept across restarts; the caller removes it) for `url`.
fn gateway_at(state: &std::path::Path, url: &str, extra: &[(&str, &str)]) -> Server {
    let mut cmd = std::process::Command::new(binary());
    cmd.env_clear()
        .env("MOBILE_PORT", "0")
        .env("MOBILE_HOST", "127.0.0.1")
        .env("MOBILE_TOKEN", TOKEN)
        .env("MOBILE_STATE_DIR", state)
        .env("MOBILE_AGENT", url)
        .env("MOBILE_AGENT_MODEL", "m")
        .env("RUST_LOG", "debug");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    Server::spawn(cmd, temp_dir("unused"))
}

fn say(c: &mut Client, id: &str, text: &str) {
    c.send(json!({"t":"text","id":id,"text":text}));
}

/// Frames of one turn, up to and including `typing{stop:true}` (the agent's end_turn).
fn turn(c: &mut Client) -> Vec<Value> {
    let mut frames = Vec::new();
    loop {
        let f = c.recv();
        let end = f["t"] == "typing" && f["stop"] == true;
        frames.push(f);
        if end {
            return frames;
        }
    }
}

/// The final text of each message completed in `frames`.
fn finals(frames: &[Value]) -> Vec<String> {
    let mut a = MessageAssembler::default();
    let mut out = Vec::new();
    for f in frames {
        if let Ok(ServerFrame::Message(m)) = parse_server_frame(f.to_string().as_bytes()) {
            if let Some(v) = a.push(&m) {
                if v.done {
                    out.push(v.text);
                }
            }
        }
    }
    out
}

/// How many versions (frames of a first chunk) the replies in `frames` had.
fn versions(frames: &[Value]) -> usize {
    frames
        .iter()
        .filter(|f| f["t"] == "message" && f["chunk"]["index"].as_u64() == Some(0))
        .count()
}

fn one_reply(c: &mut Client) -> String {
    let frames = turn(c);
    let texts = finals(&frames);
    assert_eq!(texts.len(), 1, "one reply expected: {frames:?}");
    texts[0].clone()
}

#[test]
fn sse_one_byte_per_read_streams_edits_and_ends_the_turn() {
    // decisions M2 (one message edited in place, the last version done), M3 (avatar
    // thinking and typing first, typing stop at the end of the turn).
    let up = Upstream::start(|_, _, s| {
        for b in answer(&["Hel", "lo", " wor", "ld"]).bytes() {
            let _ = s.write_all(&[b]);
            let _ = s.flush();
            std::thread::sleep(Duration::from_micros(300));
        }
    });
    let server = gateway(&up.url(), &[("MOBILE_AGENT_EDIT_INTERVAL", "0.05")]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hi there");
    let frames = turn(&mut c);
    assert_eq!(frames[0]["t"], "avatar");
    assert_eq!(frames[0]["state"], "thinking");
    assert_eq!(frames[1], json!({"t":"typing"}));
    assert_eq!(finals(&frames), ["Hello world"]);
    // The request: streaming, the model, the key as a Bearer token, the user's text.
    let req = up.request(0);
    assert_eq!(req.path(), "/v1/chat/completions");
    assert!(
        req.head.contains(&format!("Authorization: Bearer {KEY}")),
        "{}",
        req.head
    );
    let body = req.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"][0], json!({"role":"user","content":"hi there"}));
    // The key never reaches the log.
    assert!(!server.log_text().contains(KEY));
}

#[test]
fn chunked_with_extensions_trailers_and_mixed_line_ends() {
    let up = Upstream::start(|_, _, s| {
        let events = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"one \"}}]}\r\n\r\n".to_owned(),
            "data: {\"choices\":[{\"delta\":{\"content\":\"two \"}}]}\n\n".to_owned(),
            "data: {\"choices\":[{\"delta\":\r\ndata: {\"content\":\"three\"}}]}\r\n\r\n".to_owned(),
            "data: [DONE]\n\n".to_owned(),
        ];
        write(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nTrailer: X-Done\r\n\r\n",
        );
        for (i, e) in events.iter().enumerate() {
            write(s, &format!("{:x};ext=v{i}\r\n{e}\r\n", e.len()));
        }
        write(s, "0\r\nX-Done: yes\r\n\r\n");
        // The connection stays open: the chunked body's end, not a close, ends the answer.
        std::thread::sleep(Duration::from_secs(5));
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "count");
    assert_eq!(one_reply(&mut c), "one two three");
}

#[test]
fn keepalive_comments_hold_a_stream_past_the_idle_timeout() {
    let up = Upstream::start(|_, _, s| {
        write(s, SSE_HEAD);
        write(s, &delta("waiting"));
        // 3.5 s of keepalives only, against an idle timeout of 1 s.
        for _ in 0..14 {
            std::thread::sleep(Duration::from_millis(250));
            write(s, ": keepalive\n\n");
        }
        write(s, &delta(" done"));
        write(s, DONE);
    });
    let server = gateway(&up.url(), &[("MOBILE_AGENT_TIMEOUTS", "2,3,1")]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "slow one");
    assert_eq!(one_reply(&mut c), "waiting done");
}

#[test]
fn a_silent_stream_is_cut_at_the_idle_timeout_and_the_partial_answer_kept() {
    let up = Upstream::start(|_, _, s| {
        write(s, SSE_HEAD);
        write(s, &delta("The first half"));
        std::thread::sleep(Duration::from_secs(8));
    });
    let server = gateway(&up.url(), &[("MOBILE_AGENT_TIMEOUTS", "2,3,1")]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "tell me");
    let text = one_reply(&mut c);
    assert!(text.starts_with("The first half\n\n⚠ Interrupted"), "{text}");
    assert!(text.contains("idle"), "{text}");
    // Not retried: part of the answer was shown.
    assert_eq!(up.count(), 1);
}

#[test]
fn a_stream_cut_mid_event_keeps_what_came_and_says_so() {
    let up = Upstream::start(|_, _, s| {
        write(s, SSE_HEAD);
        write(s, &delta("Partial answer"));
        write(s, "data: {\"choices\":[{\"delta\":{\"cont");
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "go");
    let text = one_reply(&mut c);
    assert!(text.starts_with("Partial answer\n\n⚠ Interrupted"), "{text}");
    // The gateway is still up and the next turn works.
    say(&mut c, "2", "again");
    assert!(one_reply(&mut c).starts_with("Partial answer"));
}

#[test]
fn malformed_json_in_a_data_line_is_skipped() {
    let up = Upstream::start(|_, _, s| {
        write(s, SSE_HEAD);
        write(s, &delta("good "));
        write(s, "data: {this is not json}\n\n");
        write(s, "data: [1,2,3]\n\n");
        write(s, &delta("still good"));
        write(s, DONE);
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "go");
    assert_eq!(one_reply(&mut c), "good still good");
    server.wait_for_log("not a chat chunk");
}

#[test]
fn refusals_become_one_sentence_and_only_safe_ones_are_retried() {
    let error = |m: &str| json!({"error":{"message":m,"type":"x"}}).to_string();
    let cases: Vec<(&str, String, &str, usize)> = vec![
        ("401 Unauthorized", error("Invalid API key"), "API key", 1),
        (
            "404 Not Found",
            error("model 'nope' not found"),
            "model 'nope' not found",
            1,
        ),
        ("500 Internal Server Error", error("boom"), "error (500)", 1),
    ];
    for (status, body, expect, requests) in cases {
        let body2 = body.clone();
        let up = Upstream::start(move |_, _, s| write(s, &json_status(status, "", &body2)));
        let server = gateway(&up.url(), &[]);
        let mut c = Client::hello(&server, "tel-1");
        say(&mut c, "1", "hello");
        let text = one_reply(&mut c);
        assert!(text.contains(expect), "{status}: {text}");
        assert_eq!(up.count(), requests, "{status}");
    }
}

#[test]
fn a_message_sent_during_a_failing_turn_goes_next_on_its_own() {
    // The first turn ends on the upstream's news alone (a 500); the waiting message must
    // start then, not when something else happens.
    let up = Upstream::start(|n, _, s| {
        if n == 0 {
            std::thread::sleep(Duration::from_millis(300));
            write(s, &json_status("500 Internal Server Error", "", "{}"));
        } else {
            write(s, &answer(&["second answer"]));
        }
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "first");
    say(&mut c, "2", "second");
    assert!(one_reply(&mut c).contains("error (500)"));
    assert_eq!(one_reply(&mut c), "second answer");
    assert_eq!(
        up.request(1).json()["messages"].as_array().unwrap().last().unwrap()["content"],
        "second"
    );
}

#[test]
fn done_ends_the_turn_even_when_the_server_keeps_the_connection_open() {
    let up = Upstream::start(|_, _, s| {
        write(s, &answer(&["all ", "of it"]));
        std::thread::sleep(Duration::from_secs(20));
    });
    // Idle 30 s: were the turn to wait for the close, the phone's 10 s read would fail.
    let server = gateway(&up.url(), &[("MOBILE_AGENT_TIMEOUTS", "2,30,30")]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "go");
    assert_eq!(one_reply(&mut c), "all of it");
}

#[test]
fn new_during_a_turn_waits_for_it_and_keeps_the_conversation() {
    let up = Upstream::start(|n, _, s| {
        write(s, SSE_HEAD);
        write(s, &delta(&format!("answer {n}")));
        std::thread::sleep(Duration::from_millis(600));
        write(s, DONE);
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "question");
    loop {
        if c.recv()["t"] == "message" {
            break;
        }
    }
    say(&mut c, "2", "/new");
    let frames = turn(&mut c);
    let texts = finals(&frames);
    assert!(texts.iter().any(|t| t.contains("/new after it ends")), "{texts:?}");
    assert_eq!(texts.last().unwrap(), "answer 0");
    say(&mut c, "3", "next");
    one_reply(&mut c);
    let m = up.request(1).json()["messages"].clone();
    assert_eq!(m.as_array().unwrap().len(), 3, "the first exchange is still there: {m}");
}

#[test]
fn an_answer_cut_at_the_length_limit_says_so() {
    let up = Upstream::start(|_, _, s| {
        write(s, SSE_HEAD);
        write(s, &delta("The beginning of a long"));
        write(
            s,
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n",
        );
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "go");
    assert_eq!(
        one_reply(&mut c),
        "The beginning of a long\n\n(cut: the model reached its length limit)"
    );
}

#[test]
fn a_saved_conversation_that_is_not_readable_is_kept_aside() {
    let up = Upstream::start(|_, _, s| write(s, &answer(&["ok"])));
    let state = temp_dir("bad-conversation");
    let start = |state: &std::path::Path| gateway_at(state, &up.url(), &[]);
    let server = start(&state);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "remember this");
    one_reply(&mut c);
    let dir = state.join("conversations");
    let saved = || {
        std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "json"))
    };
    // Saved off the loop, just after the turn: wait for it before the kill.
    wait_until("the conversation saved", Duration::from_secs(5), || saved().is_some());
    drop(c);
    drop(server);
    let file = saved().unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    std::fs::write(&file, b"{not json").unwrap();

    let server = start(&state);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "2", "and now");
    one_reply(&mut c);
    let m = up.request(1).json()["messages"].clone();
    assert_eq!(m.as_array().unwrap().len(), 1, "started afresh: {m}");
    wait_until("the bad file kept aside", Duration::from_secs(5), || {
        file.with_extension("json.bad").exists()
    });
    assert_eq!(std::fs::read(file.with_extension("json.bad")).unwrap(), b"{not json");
    drop(server);
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn a_429_with_retry_after_is_retried_then_answered() {
    let up = Upstream::start(|n, _, s| {
        if n == 0 {
            write(s, &json_status("429 Too Many Requests", "Retry-After: 1\r\n", "{}"));
        } else {
            write(s, &answer(&["after the wait"]));
        }
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    assert_eq!(one_reply(&mut c), "after the wait");
    assert_eq!(up.count(), 2);
}

#[test]
fn a_502_is_retried_with_backoff_and_then_reported() {
    let up = Upstream::start(|_, _, s| write(s, &json_status("502 Bad Gateway", "", "{}")));
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    let text = one_reply(&mut c);
    assert!(text.contains("not answering right now"), "{text}");
    assert_eq!(up.count(), 3, "three attempts in all");
}

#[test]
fn a_slow_first_byte_within_the_timeout_is_waited_for() {
    let up = Upstream::start(|_, _, s| {
        std::thread::sleep(Duration::from_millis(1500));
        write(s, &answer(&["worth the wait"]));
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    assert_eq!(one_reply(&mut c), "worth the wait");
}

/// A listening socket whose backlog is full: a connection to it is never completed (the
/// kernel drops the SYN), as with a black-holed host. Returns the port and what to keep.
fn black_hole() -> (u16, i32, std::net::TcpStream) {
    // SAFETY: plain socket calls on a descriptor this function owns; errors are checked.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len), 0);
        assert_eq!(libc::listen(fd, 0), 0);
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut blen = len;
        libc::getsockname(fd, &mut bound as *mut _ as *mut libc::sockaddr, &mut blen);
        let port = u16::from_be(bound.sin_port);
        // One connection fills a backlog of 0; it is never accepted.
        let filler = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        (port, fd, filler)
    }
}

#[test]
fn a_black_holed_upstream_times_out_the_connect_and_holds_nobody() {
    let (port, fd, _filler) = black_hole();
    // The kernel may still complete a handshake or two into a full backlog: fill it up.
    let _more: Vec<_> = (0..4)
        .filter_map(|_| {
            let s = std::net::TcpStream::connect_timeout(
                &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                Duration::from_millis(200),
            );
            s.ok()
        })
        .collect();
    let url = format!("openai:http://127.0.0.1:{port}/v1");
    let server = gateway(&url, &[("MOBILE_AGENT_TIMEOUTS", "1,3,2")]);
    let mut stuck = Client::hello(&server, "tel-stuck");
    say(&mut stuck, "1", "hello");
    let mut other = Client::hello(&server, "tel-other");
    for i in 0..20 {
        other.send(json!({"t":"ping","ts":i}));
        assert_eq!(other.until("pong").last().unwrap()["ts"], i);
    }
    let health = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(
        !server.log_text().contains("did not answer the connection"),
        "the other phone and /healthz were answered while the connect was pending"
    );
    // Three attempts (1 s each, 1 s and 2 s apart), then one sentence.
    let text = one_reply(&mut stuck);
    assert!(text.contains("did not answer the connection in time"), "{text}");
    unsafe { libc::close(fd) };
}

#[test]
fn a_phone_that_goes_offline_mid_answer_gets_it_when_back() {
    // M4: the answer keeps streaming into the hold; the phone gets its final version.
    let up = Upstream::start(|_, _, s| {
        write(s, SSE_HEAD);
        write(s, &delta("Begun"));
        std::thread::sleep(Duration::from_millis(800));
        write(s, &delta(", and finished while you were away."));
        write(s, DONE);
    });
    let server = gateway(&up.url(), &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "go");
    loop {
        if c.recv()["t"] == "message" {
            break;
        }
    }
    drop(c);
    wait_until("the answer to finish upstream", Duration::from_secs(5), || {
        server.log_text().contains("closed")
    });
    std::thread::sleep(Duration::from_millis(1200));
    // Held output comes right after ready: the message's final version (typing is not held).
    let mut back = Client::hello(&server, "tel-1");
    let mut frames = Vec::new();
    while !finals(&frames).iter().any(|t| t.starts_with("Begun")) {
        frames.push(back.recv());
    }
    assert_eq!(finals(&frames), ["Begun, and finished while you were away."]);
}

#[test]
fn an_upstream_that_never_answers_does_not_hold_other_phones() {
    // Black-holed after accept: the request goes in and nothing ever comes back.
    let up = Upstream::start(|_, _, _| std::thread::sleep(Duration::from_secs(30)));
    let server = gateway(&up.url(), &[("MOBILE_AGENT_TIMEOUTS", "2,4,2")]);
    let mut stuck = Client::hello(&server, "tel-stuck");
    say(&mut stuck, "1", "hello");
    wait_until("the request reaching the upstream", Duration::from_secs(5), || {
        up.count() == 1
    });
    // Meanwhile another phone is served at once, and so is /healthz.
    let mut other = Client::hello(&server, "tel-other");
    for i in 0..20 {
        let sent = Instant::now();
        other.send(json!({"t":"ping","ts":i}));
        assert_eq!(other.until("pong").last().unwrap()["ts"], i);
        if i == 0 {
            eprintln!("pong while the upstream is black-holed: {:?}", sent.elapsed());
        }
    }
    let health = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // All that happened before the stuck turn's first-byte timeout: it has not ended yet.
    assert!(
        !server.log_text().contains("timed out waiting for the first byte"),
        "the other phone and /healthz were answered while the call was still pending"
    );
    let text = one_reply(&mut stuck);
    assert!(text.contains("took too long"), "{text}");
    assert_eq!(up.count(), 1, "not retried after the request went out");
}

#[test]
fn a_name_that_takes_long_to_resolve_does_not_hold_other_phones() {
    // The resolver takes 3 s (a debug-build knob); the loop goes on meanwhile.
    let up = Upstream::start(|_, _, s| write(s, &answer(&["resolved in the end"])));
    let url = format!("openai:http://localhost:{}/v1", up.port);
    let server = gateway(
        &url,
        &[
            ("MOBILE_TEST_DNS_DELAY_MS", "3000"),
            ("MOBILE_AGENT_TIMEOUTS", "10,5,5"),
        ],
    );
    let mut slow = Client::hello(&server, "tel-slow");
    say(&mut slow, "1", "hello");
    wait_until("the lookup to start", Duration::from_secs(5), || {
        server.log_text().contains("resolving localhost")
    });
    let mut other = Client::hello(&server, "tel-other");
    for i in 0..20 {
        other.send(json!({"t":"ping","ts":i}));
        assert_eq!(other.until("pong").last().unwrap()["ts"], i);
    }
    let health = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(
        !server.log_text().contains("connecting to"),
        "the other phone and /healthz were answered while the name was still resolving"
    );
    assert_eq!(one_reply(&mut slow), "resolved in the end");
}

#[test]
fn unreachable_and_unresolvable_upstreams_are_clear_and_healthz_says_so() {
    // A port nobody listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("openai:http://127.0.0.1:{free}/v1");
    let server = gateway(&url, &[]);
    let health = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(health.contains("\"agent\":\"unknown\""), "{health}");
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    let text = one_reply(&mut c);
    assert!(
        text.contains("is not reachable") && text.contains("Is it running?"),
        "{text}"
    );
    let health = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(health.contains("\"agent\":\"unreachable: cannot connect"), "{health}");
    drop(server);

    let server = gateway("openai:http://no-such-host.invalid:8080/v1", &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    let text = one_reply(&mut c);
    assert!(text.contains("does not resolve"), "{text}");
}

#[test]
fn two_thousand_deltas_arrive_as_few_edits_and_the_exact_text() {
    // decisions M2: edits of one message; coalesced, the final version exact.
    let words: Vec<String> = (0..2000).map(|i| format!("w{i} ")).collect();
    let expected: String = words.concat();
    let up = Upstream::start(move |_, _, s| {
        write(s, SSE_HEAD);
        for (i, w) in words.iter().enumerate() {
            write(s, &delta(w));
            if i % 100 == 99 {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        write(s, DONE);
    });
    let server = gateway(&up.url(), &[("MOBILE_AGENT_EDIT_INTERVAL", "0.3")]);
    let mut c = Client::hello(&server, "tel-1");
    let start = Instant::now();
    say(&mut c, "1", "count to 2000");
    let frames = turn(&mut c);
    let elapsed = start.elapsed();
    assert_eq!(finals(&frames), [expected]);
    // At most one edit per 0.3 s of the stream, the first at once, and the final version.
    let bound = (elapsed.as_secs_f64() / 0.3).ceil() as usize + 2;
    let n = versions(&frames);
    assert!(n <= bound, "{n} versions in {elapsed:?} (bound {bound})");
    assert!((2..50).contains(&n), "2,000 deltas must be a few edits, not 2,000: {n}");
}

#[test]
fn history_is_sent_bounded_survives_a_restart_and_new_clears_it() {
    // decisions L44: /new is the gateway's, never the model's.
    let n = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&n);
    let up = Upstream::start(move |_, _, s| {
        let i = counter.fetch_add(1, Ordering::SeqCst);
        write(s, &answer(&[&format!("answer {i}")]));
    });
    let state = temp_dir("history");
    let settings = [
        ("MOBILE_AGENT_SYSTEM", "You are terse."),
        ("MOBILE_AGENT_HISTORY", "10000,4"),
    ];
    let start = |state: &std::path::Path| gateway_at(state, &up.url(), &settings);
    let server = start(&state);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "first question");
    assert_eq!(one_reply(&mut c), "answer 0");
    say(&mut c, "2", "second question");
    assert_eq!(one_reply(&mut c), "answer 1");
    let m = up.request(1).json()["messages"].clone();
    assert_eq!(m[0], json!({"role":"system","content":"You are terse."}));
    assert_eq!(m[1], json!({"role":"user","content":"first question"}));
    assert_eq!(m[2], json!({"role":"assistant","content":"answer 0"}));
    assert_eq!(m[3], json!({"role":"user","content":"second question"}));
    // Saved off the loop just after the turn: a SIGTERM would wait for it, a kill not.
    wait_until("the conversation saved", Duration::from_secs(5), || {
        std::fs::read_dir(state.join("conversations"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("answer 1")))
    });
    drop(c);
    // SIGTERM: the journal commits that the agent had message 2. A SIGKILL within ~20 ms of
    // its hand-over would hand it over again after the restart (L64), answered twice.
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    let mut server = server;
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let _ = server.child.wait();
    drop(server);

    // A restart keeps the conversation; its bound (4 messages) holds.
    let server = start(&state);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "3", "third question");
    assert_eq!(one_reply(&mut c), "answer 2");
    let m = up.request(2).json()["messages"].clone();
    let m = m.as_array().unwrap();
    assert_eq!(m.len(), 1 + 4 + 1, "system, the last 4 messages, the question: {m:?}");
    assert_eq!(m[1]["content"], "first question");
    assert_eq!(m[5]["content"], "third question");
    say(&mut c, "4", "fourth question");
    one_reply(&mut c);
    let m = up.request(3).json()["messages"].clone();
    assert_eq!(m[1]["content"], "second question", "the oldest exchange went first");

    // /new starts afresh: the gateway answers it, the model never sees it.
    say(&mut c, "5", "/new");
    assert_eq!(one_reply(&mut c), "Started a new conversation.");
    say(&mut c, "6", "fresh start");
    one_reply(&mut c);
    assert_eq!(up.count(), 5);
    let m = up.request(4).json()["messages"].clone();
    assert_eq!(m.as_array().unwrap().len(), 2, "{m}");
    drop(server);
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn media_tags_send_allowed_files_and_say_why_others_were_not() {
    let dir = temp_dir("media");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("chart.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\nfake").unwrap();
    let text = format!("Here it is:\nMEDIA:{}\nand MEDIA:/etc/passwd too", png.display());
    let only_tag = format!("MEDIA:{}", png.display());
    let up = Upstream::start(move |n, _, s| write(s, &answer(&[if n == 0 { &text } else { &only_tag }])));
    let dirs = dir.display().to_string();
    let server = gateway(&up.url(), &[("MOBILE_AGENT_MEDIA_DIRS", &dirs)]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "draw");
    let frames = turn(&mut c);
    let texts = finals(&frames);
    assert_eq!(texts.len(), 1);
    assert!(texts[0].starts_with("Here it is:\nand  too"), "{}", texts[0]);
    assert!(texts[0].contains("/etc/passwd was not sent"), "{}", texts[0]);
    let mut a = MediaAssembler::default();
    let mut file = None;
    for f in frames.iter().filter(|f| f["t"] == "media") {
        if let Ok(ServerFrame::Media(m)) = parse_server_frame(f.to_string().as_bytes()) {
            file = a.push(&m).unwrap().or(file);
        }
    }
    let file = file.expect("the allowed file came down");
    assert_eq!(file.filename, "chart.png");
    assert_eq!(file.data, b"\x89PNG\r\n\x1a\nfake");
    // A reply of nothing but a tag still gets its final version (not the raw tag).
    say(&mut c, "2", "just the file");
    let frames = turn(&mut c);
    assert_eq!(finals(&frames), ["(sent chart.png)"]);
    assert_eq!(frames.iter().filter(|f| f["t"] == "media").count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn images_go_to_vision_models_and_voice_without_text_gets_a_note() {
    let up = Upstream::start(|_, _, s| write(s, &answer(&["seen"])));
    let server = gateway(&up.url(), &[("MOBILE_AGENT_VISION", "1")]);
    let mut c = Client::hello(&server, "tel-1");
    let data = hermes_mobile::base64::encode(b"\x89PNG\r\n\x1a\nimg");
    c.send(json!({"t":"media","id":"up-1","kind":"image","filename":"cat.png","mime":"image/png","part":0,"parts":1,"data":data,"caption":"my cat"}));
    assert_eq!(one_reply(&mut c), "seen");
    let content = up.request(0).json()["messages"][0]["content"].clone();
    assert_eq!(content[0], json!({"type":"text","text":"my cat"}));
    assert_eq!(content[1]["image_url"]["url"], format!("data:image/png;base64,{data}"));

    c.send(json!({"t":"audio","id":"a1","format":"ogg","data":hermes_mobile::base64::encode(b"OggS1234")}));
    let text = one_reply(&mut c);
    assert!(text.contains("speech-to-text"), "{text}");
    assert_eq!(up.count(), 1, "a voice note without text never reaches the model");

    c.send(json!({"t":"audio","id":"a2","format":"ogg","data":hermes_mobile::base64::encode(b"OggS1234"),"text":"what time is it"}));
    one_reply(&mut c);
    assert_eq!(
        up.request(1).json()["messages"].as_array().unwrap().last().unwrap()["content"],
        "what time is it"
    );
}

#[test]
fn https_with_a_test_ca_works_and_without_it_says_what_to_set() {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "hermes-mobile test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
        )
        .unwrap();
    let up = Upstream::start_tls(Arc::new(config), |_, _, s| write(s, &answer(&["secure ", "hello"])));
    let dir = temp_dir("ca");
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let url = format!("openai:https://localhost:{}/v1", up.port);
    let ca_path = ca_file.display().to_string();
    let server = gateway(
        &url,
        &[("MOBILE_AGENT_CA_FILE", &ca_path), ("MOBILE_AGENT_VISION", "1")],
    );
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    assert_eq!(one_reply(&mut c), "secure hello");
    // A request larger than rustls' buffer before the handshake (64 KiB): a photo.
    let photo: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let data = hermes_mobile::base64::encode(&photo);
    c.send(json!({"t":"media","id":"up-1","kind":"image","filename":"big.png","mime":"image/png","part":0,"parts":1,"data":data}));
    assert_eq!(one_reply(&mut c), "secure hello");
    let body = up.request(1).json();
    let sent = body["messages"].as_array().unwrap().last().unwrap()["content"][1]["image_url"]["url"].clone();
    assert_eq!(
        sent,
        format!("data:image/png;base64,{data}"),
        "the whole request arrived"
    );
    drop(server);

    // Without the CA the certificate is not trusted: one sentence naming the setting.
    let server = gateway(&url, &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    let text = one_reply(&mut c);
    assert!(text.contains("MOBILE_AGENT_CA_FILE"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_agent_setting_stops_start_up_without_showing_the_key() {
    for (agent, model, expect) in [
        ("openai:ftp://x", "m", "must start with http"),
        ("openai:http://127.0.0.1:1/v1", "", "needs MOBILE_AGENT_MODEL"),
    ] {
        let out = std::process::Command::new(binary())
            .env_clear()
            .env("MOBILE_AGENT", agent)
            .env("MOBILE_AGENT_MODEL", model)
            .env("MOBILE_AGENT_KEY", KEY)
            .env("MOBILE_STATE_DIR", temp_dir("bad"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(expect), "{err}");
        assert!(!err.contains(KEY));
    }
    let help = std::process::Command::new(binary())
        .arg("--help")
        .env("MOBILE_AGENT_KEY", KEY)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("MOBILE_AGENT_KEY") && help.contains("openai:<base URL>"));
    assert!(!help.contains(KEY));
}

// ---- hermes: the runs API ----

/// A scripted Hermes: `POST /v1/runs` starts `run_1`; its events are `events` (one SSE
/// `data:` line each, with `hold` before the ones marked `None`… see the tests), and
/// approvals and stops are answered 200 (or what `approval_status` says).
fn hermes(
    events: impl Fn(&mut dyn ReadWrite, &Arc<std::sync::Mutex<Vec<Request>>>) + Send + Sync + 'static,
    approval_status: &'static str,
) -> Upstream {
    let seen: Arc<std::sync::Mutex<Arc<std::sync::Mutex<Vec<Request>>>>> =
        Arc::new(std::sync::Mutex::new(Arc::new(std::sync::Mutex::new(Vec::new()))));
    let seen2 = Arc::clone(&seen);
    let up = Upstream::start(move |_, req, s| {
        let requests = seen2.lock().unwrap().clone();
        match (req.head.split(' ').next().unwrap_or(""), req.path()) {
            ("POST", "/v1/runs") => write(
                s,
                &json_status("202 Accepted", "", r#"{"run_id":"run_1","status":"started"}"#),
            ),
            ("GET", "/v1/runs/run_1/events") => {
                write(s, SSE_HEAD);
                events(s, &requests);
            }
            ("POST", "/v1/runs/run_1/approval") => write(s, &json_status(approval_status, "", r#"{"resolved":1}"#)),
            ("POST", "/v1/runs/run_1/stop") => write(s, &json_status("200 OK", "", r#"{"status":"stopping"}"#)),
            _ => write(s, &json_status("404 Not Found", "", "{}")),
        }
    });
    *seen.lock().unwrap() = Arc::clone(&up.requests);
    up
}

fn event(v: Value) -> String {
    format!("data: {v}\n\n")
}

/// Waits (in the scripted upstream) for a request to `path`; its body.
fn wait_for(requests: &Arc<std::sync::Mutex<Vec<Request>>>, path: &str, timeout: Duration) -> Option<Value> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(r) = requests.lock().unwrap().iter().find(|r| r.path() == path) {
            return Some(r.json());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn hermes_gateway(up: &Upstream, extra: &[(&str, &str)]) -> Server {
    let url = format!("hermes:http://127.0.0.1:{}/v1", up.port);
    let mut settings = vec![("MOBILE_AGENT_TIMEOUTS", "2,3,10")];
    settings.extend_from_slice(extra);
    gateway(&url, &settings)
}

#[test]
fn hermes_runs_stream_approvals_as_cards_and_send_the_answer() {
    let up = hermes(
        |s, requests| {
            write(
                s,
                &event(json!({"event":"tool.started","tool":"terminal","preview":"rm x"})),
            );
            write(
                s,
                &event(
                    json!({"event":"approval.request","command":"rm -rf /tmp/x","description":"recursive delete",
                    "choices":["once","session","always","deny"]}),
                ),
            );
            let answer = wait_for(requests, "/v1/runs/run_1/approval", Duration::from_secs(10));
            let choice = answer.map_or("none".to_owned(), |a| a["choice"].as_str().unwrap_or("?").to_owned());
            write(
                s,
                &event(json!({"event":"message.delta","delta":format!("You chose {choice}.")})),
            );
            write(s, &event(json!({"event":"reasoning.available","text":"You chose"})));
            write(
                s,
                &event(json!({"event":"run.completed","output":format!("You chose {choice}.")})),
            );
            write(s, ": stream closed\n\n");
        },
        "200 OK",
    );
    let server = hermes_gateway(&up, &[("MOBILE_AGENT_APPROVAL_TTL", "120")]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "delete x");
    let card = loop {
        let f = c.recv();
        if f["t"] == "prompt" {
            break f;
        }
    };
    assert_eq!(card["kind"], "exec_approval", "{card}");
    assert_eq!(card["description"], "recursive delete");
    assert!(card.to_string().contains("rm -rf /tmp/x"), "{card}");
    let options: Vec<String> = card["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(options, ["once", "session", "always", "deny"]);
    let start = up.request(0).json();
    assert_eq!(start["input"], "delete x");
    assert_eq!(start["conversation_history"], json!([]));
    c.send(json!({"t":"prompt","prompt_id":card["id"],"option_id":"deny"}));
    assert_eq!(one_reply(&mut c), "You chose deny.");
    // History goes with the next run (the runs API loads none by session).
    say(&mut c, "2", "and now?");
    let _ = turn(&mut c);
    let runs: Vec<Value> = up
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.path() == "/v1/runs")
        .map(Request::json)
        .collect();
    assert_eq!(
        runs[1]["conversation_history"][0],
        json!({"role":"user","content":"delete x"})
    );
    assert_eq!(runs[1]["conversation_history"][1]["role"], "assistant");
}

#[test]
fn hermes_an_expired_card_denies_and_a_409_is_quiet() {
    // decisions P5 (an unanswered card expires with its safe default) and L44 (expiry
    // answers Hermes deny, a 409 closes it quietly).
    let up = hermes(
        |s, requests| {
            write(
                s,
                &event(
                    json!({"event":"approval.request","command":"rm f","description":"delete","choices":["once","deny"]}),
                ),
            );
            let answer = wait_for(requests, "/v1/runs/run_1/approval", Duration::from_secs(10));
            let choice = answer.map_or("none".to_owned(), |a| a["choice"].as_str().unwrap_or("?").to_owned());
            write(
                s,
                &event(json!({"event":"run.completed","output":format!("Hermes got {choice}.")})),
            );
        },
        "409 Conflict",
    );
    let server = hermes_gateway(&up, &[("MOBILE_AGENT_APPROVAL_TTL", "1")]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "delete f");
    let frames = turn(&mut c);
    let texts = finals(&frames);
    assert!(frames.iter().any(|f| f["t"] == "prompt"), "{frames:?}");
    assert!(
        texts.iter().any(|t| t.contains("expired, so the command was denied")),
        "{texts:?}"
    );
    assert_eq!(texts.last().unwrap(), "Hermes got deny.");
    // The 409 closed the card quietly: no "did not reach Hermes" message.
    assert!(!texts.iter().any(|t| t.contains("did not reach")), "{texts:?}");
}

#[test]
fn hermes_stop_from_the_phone_cancels_the_run() {
    // decisions L44: /stop is the gateway's; it stops the run through Hermes' API.
    let up = hermes(
        |s, requests| {
            write(s, &event(json!({"event":"message.delta","delta":"Working on it"})));
            if wait_for(requests, "/v1/runs/run_1/stop", Duration::from_secs(10)).is_some() {
                write(s, &event(json!({"event":"run.cancelled"})));
            }
        },
        "200 OK",
    );
    let server = hermes_gateway(&up, &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "long job");
    loop {
        let f = c.recv();
        if f["t"] == "message" {
            break;
        }
    }
    say(&mut c, "2", "/stop");
    let text = one_reply(&mut c);
    assert_eq!(text, "Working on it\n\n(stopped)");
}

#[test]
fn hermes_a_lost_event_stream_stops_the_run() {
    // A dropped event stream cannot be picked up again: the run must not go on unread.
    let up = hermes(
        |s, _| write(s, &event(json!({"event":"message.delta","delta":"Half"}))),
        "200 OK",
    );
    let server = hermes_gateway(&up, &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "go");
    let text = one_reply(&mut c);
    assert!(text.starts_with("Half\n\n⚠ Interrupted"), "{text}");
    wait_until("the stop request", Duration::from_secs(5), || {
        up.requests
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.path() == "/v1/runs/run_1/stop")
    });
}

#[test]
fn hermes_a_failed_run_says_why() {
    let up = hermes(
        |s, _| write(s, &event(json!({"event":"run.failed","error":"model overloaded"}))),
        "200 OK",
    );
    let server = hermes_gateway(&up, &[]);
    let mut c = Client::hello(&server, "tel-1");
    say(&mut c, "1", "hello");
    let text = one_reply(&mut c);
    assert!(text.contains("Hermes reported: model overloaded"), "{text}");
}
