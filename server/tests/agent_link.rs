//! The agent link over real processes and sockets (issue 9, docs/agent-protocol.md): an
//! `exec:` child (server/examples/scripted_agent.rs), the `link` Unix socket and `/agent`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const AGENT_TOKEN: &str = "agent-token-0123456789";

/// Whether python3 runs here. The documented example agent is Python: its test runs
/// where Python is, and CI (which sets HERMES_MOBILE_REQUIRE_PYTHON) insists on it.
fn python_available() -> bool {
    let ran = std::process::Command::new("python3").arg("--version").output();
    let ok = ran.is_ok_and(|out| out.status.success());
    if !ok {
        assert!(
            std::env::var_os("HERMES_MOBILE_REQUIRE_PYTHON").is_none(),
            "python3 is required here (HERMES_MOBILE_REQUIRE_PYTHON is set)"
        );
        eprintln!("skipped: no python3 on this machine (examples/echo_agent.py is tested where it is)");
    }
    ok
}

fn path_env() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
}

/// A server whose agent is the scripted child; its received lines go to `agent.log`.
fn exec_server(extra: &[(&str, &str)]) -> (Server, PathBuf) {
    let log = std::env::temp_dir().join(format!("hm-agent-{}-{}.log", std::process::id(), rand_suffix()));
    let _ = std::fs::remove_file(&log);
    let agent = format!("exec:{}", scripted_agent());
    let path = path_env();
    let log_s = log.to_string_lossy().into_owned();
    let mut env: Vec<(&str, &str)> = vec![("MOBILE_AGENT", &agent), ("PATH", &path), ("AGENT_LOG", &log_s)];
    env.extend_from_slice(extra);
    let server = Server::start(&env);
    wait_for_agent(&server);
    (server, log)
}

fn rand_suffix() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

fn health(server: &Server) -> Value {
    let response = server.http("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("{}");
    serde_json::from_str(body).unwrap_or(Value::Null)
}

fn wait_for_agent(server: &Server) {
    wait_until("the agent to attach", Duration::from_secs(20), || {
        health(server)["agent"] == "connected"
    });
}

fn agent_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The text of the next `message` the phone gets (skipping avatar/typing).
fn next_text(c: &mut Client) -> Value {
    loop {
        let f = c.recv();
        if f["t"] == "message" {
            return f;
        }
    }
}

fn say(c: &mut Client, id: &str, text: &str) {
    c.send(json!({"t":"text","id":id,"text":text}));
}

#[test]
fn exec_agent_answers_turns_and_streams_edits_in_place() {
    let (server, log) = exec_server(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "echo hello there");
    let m = next_text(&mut phone);
    assert_eq!(m["text"], "echo: hello there");
    assert_eq!(m["final"], true);
    let rest = phone.until("typing");
    assert_eq!(rest.last().unwrap()["stop"], true, "end_turn stops typing: {rest:?}");

    say(&mut phone, "m2", "stream");
    let first = next_text(&mut phone);
    let second = next_text(&mut phone);
    let third = next_text(&mut phone);
    assert_eq!(first["edit"], false);
    assert_eq!(
        (second["edit"].clone(), third["edit"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(first["id"], third["id"], "edits keep the message id");
    assert_eq!(third["text"], "one two three");
    assert_eq!(third["final"], true);

    let got = agent_log(&log);
    assert_eq!(got[0]["t"], "welcome");
    let msg = got.iter().find(|v| v["t"] == "message").unwrap();
    assert_eq!(msg["device"], "tel-1");
    assert_eq!(msg["text"], "echo hello there");
    let online = got.iter().find(|v| v["t"] == "device_online").expect("device_online");
    assert_eq!(online["device"], "tel-1");
    assert_eq!(online["name"], "Test phone");
}

#[test]
fn a_crashed_agent_ends_the_turn_and_comes_back() {
    let (server, _log) = exec_server(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "crash");
    let m = next_text(&mut phone);
    assert_eq!(m["text"], hermes_mobile::agent_link::AGENT_LOST_TEXT);
    let rest = phone.until("typing");
    assert_eq!(rest.last().unwrap()["stop"], true);
    let idle = phone.until("avatar");
    assert_eq!(idle.last().unwrap()["state"], "idle");
    wait_for_agent(&server);
    say(&mut phone, "m2", "echo back again");
    assert_eq!(next_text(&mut phone)["text"], "echo: back again");
    server.wait_for_log("restarting in 1 s");
}

#[test]
fn garbage_and_a_17_mib_line_are_refused_without_killing_the_link() {
    let (server, log) = exec_server(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "garbage");
    assert_eq!(next_text(&mut phone)["text"], "after garbage");
    say(&mut phone, "m2", "huge");
    assert_eq!(next_text(&mut phone)["text"], "after huge");
    let codes = || -> Vec<Value> {
        agent_log(&log)
            .into_iter()
            .filter(|v| v["t"] == "error")
            .map(|v| v["code"].clone())
            .collect()
    };
    wait_until("the agent to log both errors", Duration::from_secs(5), || {
        codes().len() >= 2
    });
    assert_eq!(codes(), vec![json!("bad_line"), json!("too_big")]);
}

#[test]
fn the_agent_gets_sigterm_when_the_gateway_stops() {
    let (mut server, log) = exec_server(&[]);
    unsafe_sigterm(server.child.id());
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("SIGTERM"), "the child was not told to stop: {text}");
}

fn unsafe_sigterm(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn uploads_reach_the_agent_as_saved_paths_or_inline() {
    let (server, _log) = exec_server(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    let data = b"hello file\n";
    phone.send(json!({"t":"media","id":"u1","kind":"document","filename":"../notes.txt","data":b64(data)}));
    let text = next_text(&mut phone)["text"].as_str().unwrap().to_owned();
    // "file document ../notes.txt 11 at /abs/path"
    let path = text.split(" at ").nth(1).unwrap();
    assert!(text.starts_with("file document ../notes.txt 11 at /"), "{text}");
    assert!(Path::new(path).is_absolute());
    assert!(path.ends_with("-tel-1-_notes.txt"), "sanitized name (U6): {path}");
    assert_eq!(std::fs::read(path).unwrap(), data);
    drop(server);

    let (server, _log) = exec_server(&[("AGENT_INLINE", "1")]);
    let mut phone = Client::hello(&server, "tel-1");
    phone.send(json!({"t":"audio","id":"v1","format":"ogg","data":b64(b"OggS1234")}));
    let text = next_text(&mut phone)["text"].as_str().unwrap().to_owned();
    assert_eq!(text, "file voice voice.ogg 8 at inline 8 bytes");
}

#[test]
fn the_agent_sends_files_by_path_and_delivers() {
    let (server, log) = exec_server(&[]);
    let file = std::env::temp_dir().join(format!("hm-send-{}.txt", std::process::id()));
    std::fs::write(&file, b"bytes for the phone").unwrap();
    let mut phone = Client::hello(&server, "tel-1");
    let mut other = Client::hello(&server, "tel-2");
    say(&mut phone, "m1", &format!("file {}", file.display()));
    let mut media = None;
    loop {
        let f = phone.recv();
        if f["t"] == "media" {
            media = Some(f);
        } else if f["t"] == "message" {
            assert_eq!(f["text"], "sent the file", "the reply came after the file");
            break;
        }
    }
    let media = media.expect("a media frame before the reply");
    assert_eq!(unb64(media["data"].as_str().unwrap()), b"bytes for the phone");
    say(&mut phone, "m2", "file /nonexistent/file.txt");
    assert_eq!(next_text(&mut phone)["text"], "sent the file");
    say(&mut phone, "m3", "deliver tel-2");
    assert_eq!(next_text(&mut other)["text"], "cron says hi");
    wait_until("the agent's answers", Duration::from_secs(5), || {
        agent_log(&log).iter().filter(|v| v["ref"].is_string()).count() >= 3
    });
    let answers: Vec<Value> = agent_log(&log).into_iter().filter(|v| v["ref"].is_string()).collect();
    assert_eq!(answers[0], json!({"t":"ok","ref":"f"}));
    assert_eq!(answers[1]["code"], "file_unreadable");
    assert_eq!(answers[2], json!({"t":"ok","ref":"d","device":"tel-2"}));
    let _ = std::fs::remove_file(file);
}

// ---- link: the Unix socket ----------------------------------------------------------

struct LinkPeer {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl LinkPeer {
    fn connect(server: &Server, hello: Value) -> LinkPeer {
        let path = server.state_dir.join("agent.sock");
        let stream = UnixStream::connect(&path).expect("connect to the agent socket");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut peer = LinkPeer {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        };
        peer.send(hello);
        peer
    }

    fn send(&mut self, v: Value) {
        writeln!(self.writer, "{v}").unwrap();
    }

    /// The next line, or `None` at EOF.
    fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("the gateway writes JSON lines")),
        }
    }

    fn until(&mut self, t: &str) -> Value {
        loop {
            let v = self.next().unwrap_or_else(|| panic!("link closed before {t}"));
            if v["t"] == t {
                return v;
            }
        }
    }
}

fn link_server(extra: &[(&str, &str)]) -> Server {
    let mut env = vec![("MOBILE_AGENT", "link")];
    env.extend_from_slice(extra);
    Server::start(&env)
}

#[test]
fn link_socket_is_private_and_a_new_agent_replaces_the_old() {
    use std::os::unix::fs::PermissionsExt;
    let server = link_server(&[]);
    let path = server.state_dir.join("agent.sock");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(health(&server)["agent"], "disconnected");
    let mut first = LinkPeer::connect(&server, json!({"t":"hello","v":1,"agent":"first"}));
    assert_eq!(first.until("welcome")["v"], 1);
    assert_eq!(health(&server)["agent"], "connected");
    let mut second = LinkPeer::connect(&server, json!({"t":"hello","v":1,"agent":"second"}));
    second.until("welcome");
    assert_eq!(first.until("error")["code"], "replaced", "the old agent is told why");
    assert_eq!(first.next(), None, "and its connection is closed");
    server.wait_for_log("replaces");
    // The new one gets the traffic.
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "hi");
    let msg = second.until("message");
    assert_eq!(msg["text"], "hi");
    second.send(json!({"t":"reply","ref":"r","device":"tel-1","id":"a1","text":"hello from second"}));
    assert_eq!(second.until("ok")["ref"], "r");
    assert_eq!(next_text(&mut phone)["text"], "hello from second");
}

#[test]
fn messages_whose_lines_died_with_an_agent_go_to_the_next_one() {
    // L64 (review D #8): an agent that stopped reading leaves lines in the gateway's
    // outbox; when it goes, their messages go to the next agent in the same run, flagged
    // `redelivered`, not at the gateway's next start.
    let server = link_server(&[]);
    let stuck = LinkPeer::connect(&server, json!({"t":"hello","v":1,"agent":"stuck"}));
    let mut phone = Client::connect(&server);
    phone.send(json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":0}}));
    phone.until("resumed");
    // About 3 MB of lines: far more than a socket's buffer holds.
    let text = "x".repeat(12_000);
    for i in 0..250 {
        say(&mut phone, &format!("m{i}"), &text);
    }
    for _ in 0..250 {
        phone.until("received");
    }
    drop(stuck);
    server.wait_for_log("agent link: peer");
    let mut next = LinkPeer::connect(&server, json!({"t":"hello","v":1,"agent":"next"}));
    next.until("welcome");
    let mut got = Vec::new();
    while got.last() != Some(&"m249".to_owned()) {
        let Some(m) = std::iter::from_fn(|| next.next()).find(|v| v["t"] == "message") else {
            panic!("got {got:?}; log: {}", server.log_text());
        };
        assert_eq!(m["redelivered"], true, "{}", m["id"]);
        got.push(m["id"].as_str().unwrap().to_owned());
    }
    let first: usize = got[0][1..].parse().unwrap();
    let expected: Vec<String> = (first..250).map(|i| format!("m{i}")).collect();
    assert_eq!(got, expected, "each once, in order, through the last");
    assert!(first > 0, "the socket's buffer took some lines whole");
}

#[test]
fn messages_wait_for_the_agent_in_order_and_are_handed_over_once() {
    let server = link_server(&[]);
    let mut phone = Client::hello(&server, "tel-1");
    for (i, t) in ["one", "two", "three"].iter().enumerate() {
        say(&mut phone, &format!("m{i}"), t);
    }
    // One notice, not three.
    let notice = next_text(&mut phone);
    assert_eq!(notice["text"], hermes_mobile::agent_link::AGENT_AWAY_TEXT);
    let mut agent = LinkPeer::connect(&server, json!({"t":"hello","v":1}));
    let welcome = agent.until("welcome");
    assert_eq!(welcome["devices"][0]["device"], "tel-1");
    let texts: Vec<Value> = (0..3).map(|_| agent.until("message")["text"].clone()).collect();
    assert_eq!(texts, vec![json!("one"), json!("two"), json!("three")]);
    agent.send(json!({"t":"end_turn","device":"tel-1"}));
    agent.send(json!({"t":"end_turn","ref":"e","device":"tel-1"}));
    agent.until("ok"); // the first end_turn was applied too: lines are handled in order
                       // A second agent does not get them again.
    let mut again = LinkPeer::connect(&server, json!({"t":"hello","v":1}));
    again.until("welcome");
    say(&mut phone, "m9", "four");
    assert_eq!(
        again.until("message")["text"],
        "four",
        "the first message it sees is the new one"
    );
    // No second notice arrived in between: the next frame the phone reads is not a message.
    let frames: Vec<Value> = std::iter::from_fn(|| {
        phone
            .ws
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        phone.next().ok()
    })
    .collect();
    assert!(
        frames.iter().all(|f| f["t"] != "message"),
        "one notice per absence: {frames:?}"
    );
}

#[test]
fn delivery_connections_deliver_without_replacing_the_agent() {
    let server = link_server(&[]);
    let mut agent = LinkPeer::connect(&server, json!({"t":"hello","v":1}));
    agent.until("welcome");
    let mut sender = LinkPeer::connect(&server, json!({"t":"hello","v":1,"role":"deliver"}));
    sender.until("welcome");
    sender.send(json!({"t":"deliver","ref":"d1","id":"job-1","target":"mobile:tel-9","text":"hi"}));
    let e = sender.until("error");
    assert_eq!(
        (e["ref"].clone(), e["code"].clone()),
        (json!("d1"), json!("device_offline"))
    );
    let mut phone = Client::hello(&server, "tel-9");
    sender.send(json!({"t":"deliver","ref":"d2","id":"job-1","target":"mobile:tel-9","text":"hi"}));
    assert_eq!(sender.until("ok"), json!({"t":"ok","ref":"d2","device":"tel-9"}));
    assert_eq!(next_text(&mut phone)["text"], "hi");
    assert_eq!(health(&server)["agent"], "connected", "the agent is still attached");
}

// ---- /agent ---------------------------------------------------------------------------

fn agent_ws(server: &Server) -> Client {
    let stream = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let url = format!("ws://127.0.0.1:{}/agent", server.port);
    let (ws, _) = tungstenite::client(url, stream).expect("websocket handshake");
    Client::agent_protocol(ws)
}

#[test]
fn the_agent_route_needs_its_own_token() {
    let server = link_server(&[("MOBILE_AGENT_TOKEN", AGENT_TOKEN)]);
    let mut wrong = agent_ws(&server);
    wrong.send(json!({"t":"hello","v":1,"token":TOKEN}));
    let (frames, _) = wrong.closed();
    assert_eq!(frames[0]["code"], "auth_failed");
    assert!(
        !server.log_text().contains(AGENT_TOKEN),
        "the agent token is never logged"
    );
    let mut right = agent_ws(&server);
    right.send(json!({"t":"hello","v":1,"token":AGENT_TOKEN}));
    assert_eq!(right.recv()["t"], "welcome");
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "over the network");
    let msg = loop {
        let v = right.recv();
        if v["t"] == "message" {
            break v;
        }
    };
    assert_eq!(msg["text"], "over the network");
    right.send(json!({"t":"reply","device":"tel-1","id":"a","text":"hello"}));
    assert_eq!(next_text(&mut phone)["text"], "hello");
}

/// Rows of the journal's `owed` table (L64), read as `sqlite3` would.
fn owed_rows(server: &Server) -> i64 {
    let path = server.state_dir.join("journal.sqlite3");
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| c.query_row("SELECT count(*) FROM owed", [], |r| r.get(0)))
        .unwrap_or(-1)
}

#[test]
fn a_message_written_to_an_agent_websocket_is_owed_no_more() {
    // L64 (review B #1): on `/agent` an event is the agent's once its queue is written to
    // the socket; its owed row then goes, so a restart does not hand it over again.
    let server = link_server(&[("MOBILE_AGENT_TOKEN", AGENT_TOKEN)]);
    let mut agent = agent_ws(&server);
    agent.send(json!({"t":"hello","v":1,"token":AGENT_TOKEN}));
    assert_eq!(agent.recv()["t"], "welcome");
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "over the network");
    while agent.recv()["t"] != "message" {}
    wait_until("the owed row is gone", Duration::from_secs(10), || {
        owed_rows(&server) == 0
    });
}

#[test]
fn the_agent_route_is_absent_without_a_token_and_the_tokens_must_differ() {
    let server = link_server(&[]);
    let response = server.http(
        "GET /agent HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    let out = std::process::Command::new(binary())
        .env_clear()
        .env("MOBILE_TOKEN", TOKEN)
        .env("MOBILE_AGENT", "link")
        .env("MOBILE_AGENT_TOKEN", TOKEN)
        .env("MOBILE_STATE_DIR", std::env::temp_dir().join("hm-same-token"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must differ from the app token"));
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

#[test]
fn the_documented_example_agent_works() {
    // docs/agent-protocol.md points at examples/echo_agent.py: it must keep working.
    if !python_available() {
        return;
    }
    let example = format!("exec:python3 {}/../examples/echo_agent.py", env!("CARGO_MANIFEST_DIR"));
    let path = path_env();
    let server = Server::start(&[("MOBILE_AGENT", &example), ("PATH", &path)]);
    wait_for_agent(&server);
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "hello, echo");
    assert_eq!(next_text(&mut phone)["text"], "hello, echo");
    wait_until("the example's stderr in the log", Duration::from_secs(5), || {
        server.log_text().contains("echo agent linked to hermes-mobile/")
    });
}

#[test]
fn a_fifo_path_is_refused_without_blocking_and_the_agent_goes_on() {
    // A path to a FIFO would block the file worker on open, and every save and load with it.
    let (server, log) = exec_server(&[]);
    let fifo = std::env::temp_dir().join(format!("hm-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", &format!("file {}", fifo.display()));
    assert_eq!(next_text(&mut phone)["text"], "sent the file");
    say(&mut phone, "m2", "echo still here");
    assert_eq!(next_text(&mut phone)["text"], "echo: still here");
    let refused = agent_log(&log).into_iter().find(|v| v["ref"] == "f").unwrap();
    assert_eq!(refused["code"], "file_unreadable");
    assert!(refused["message"].as_str().unwrap().contains("not a regular file"));
    let _ = std::fs::remove_file(fifo);
}

#[test]
fn an_agent_that_never_stops_writing_cannot_starve_the_phones() {
    // A child flooding its stdout (and not reading what it is sent) is read a budget at a
    // time, and dropped once it has not read 64 MiB of answers; phones are served meanwhile.
    let path = path_env();
    let server = Server::start(&[("MOBILE_AGENT", "exec:yes not-json"), ("PATH", &path)]);
    for i in 0..5 {
        let mut phone = Client::hello(&server, &format!("tel-{i}"));
        phone.send(json!({"t":"ping","ts":i}));
        assert_eq!(phone.until("pong").last().unwrap()["ts"], i);
        assert_eq!(health(&server)["status"], "ok");
    }
}

#[test]
fn a_compound_command_line_runs_through_the_shell() {
    let agent = format!("exec:cd / && {}", scripted_agent());
    let path = path_env();
    let server = Server::start(&[("MOBILE_AGENT", &agent), ("PATH", &path)]);
    wait_for_agent(&server);
    let mut phone = Client::hello(&server, "tel-1");
    say(&mut phone, "m1", "echo from a shell");
    assert_eq!(next_text(&mut phone)["text"], "echo: from a shell");
}

#[test]
fn a_socket_peer_that_never_says_hello_is_closed() {
    let server = link_server(&[("MOBILE_HELLO_TIMEOUT", "0.5")]);
    let stream = UnixStream::connect(server.state_dir.join("agent.sock")).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut line = String::new();
    let read = BufReader::new(stream).read_line(&mut line).unwrap();
    assert_eq!(read, 0, "closed without a word: {line:?}");
}

#[test]
fn an_agent_message_over_16_mib_on_the_agent_route_ends_it() {
    let server = link_server(&[("MOBILE_AGENT_TOKEN", AGENT_TOKEN)]);
    let mut agent = agent_ws(&server);
    agent.send(json!({"t":"hello","v":1,"token":AGENT_TOKEN}));
    assert_eq!(agent.recv()["t"], "welcome");
    let big = json!({"t":"reply","device":"tel-1","id":"a","text":"x".repeat(17 * 1024 * 1024)});
    agent.send(big);
    let (frames, close) = agent.closed();
    assert!(frames.iter().any(|f| f["code"] == "too_big"), "{frames:?}");
    assert_eq!(close.map(|c| c.0), Some(1009));
    wait_until("the agent to be detached", Duration::from_secs(5), || {
        health(&server)["agent"] == "disconnected"
    });
}

#[test]
fn agents_on_the_agent_route_send_data_not_paths() {
    let server = link_server(&[("MOBILE_AGENT_TOKEN", AGENT_TOKEN)]);
    let mut agent = agent_ws(&server);
    agent.send(json!({"t":"hello","v":1,"token":AGENT_TOKEN}));
    assert_eq!(agent.recv()["t"], "welcome");
    let token_file = server.state_dir.join("token");
    agent.send(json!({"t":"send_file","ref":"f","device":"tel-1","kind":"document","name":"t","path":token_file}));
    let e = agent.recv();
    assert_eq!((e["ref"].clone(), e["code"].clone()), (json!("f"), json!("forbidden")));
}

/// Issue 17 (the `/agent` byte-count leak): lines handed to an `/agent` agent leave the
/// queued-bytes count once its socket took them. The count used to grow by every line and
/// never shrink, so with a small budget (L36) the loop soon closed ordinary phones as
/// "client too slow" although every byte had been read.
#[test]
fn lines_read_by_an_agent_route_agent_leave_the_queued_bytes() {
    let server = link_server(&[("MOBILE_AGENT_TOKEN", AGENT_TOKEN), ("MOBILE_MEMORY_BUDGET", "16")]);
    let mut agent = agent_ws(&server);
    agent.send(json!({"t":"hello","v":1,"token":AGENT_TOKEN}));
    assert_eq!(agent.recv()["t"], "welcome");
    let mut phone = Client::hello(&server, "tel-1");
    let baseline = health(&server)["queued_bytes"].as_u64().expect("queued_bytes");
    // 1,000 texts of 10,000 characters: about 10 MB of lines, past the 8 MiB outbox share
    // of a 16 MiB budget.
    let text = "x".repeat(10_000);
    let mut read = 0;
    for i in 0..1000 {
        say(&mut phone, &format!("m{i}"), &text);
        // The agent reads as it goes, like a real one.
        while i % 50 == 49 && read < i + 1 {
            let f = agent.next().unwrap_or_else(|e| panic!("{e:?} {}", server.log_text()));
            read += usize::from(f["t"] == "message");
        }
    }
    while read < 1000 {
        read += usize::from(agent.recv()["t"] == "message");
    }
    wait_until("queued_bytes back at its baseline", Duration::from_secs(5), || {
        health(&server)["queued_bytes"].as_u64() == Some(baseline)
    });
    // The phone that only sent is still connected and gets its answer.
    agent.send(json!({"t":"reply","device":"tel-1","id":"a","text":"read them all"}));
    assert_eq!(next_text(&mut phone)["text"], "read them all");
}
