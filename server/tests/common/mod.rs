//! Runs the real `hermes-mobile` binary on an ephemeral loopback port and talks to it with a
//! real WebSocket client (tungstenite). Waits are bounded; nothing sleeps longer than the
//! timer under test needs.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

pub mod schema;

pub const TOKEN: &str = "test-app-token-7f3a9c";

pub struct Server {
    pub child: Child,
    pub port: u16,
    pub state_dir: PathBuf,
    pub log: Arc<Mutex<Vec<String>>>,
}

pub fn temp_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("hm-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_hermes-mobile")
}

impl Server {
    /// Starts a server with the test token, short idle timers and the given extra settings.
    pub fn start(extra: &[(&str, &str)]) -> Server {
        Server::start_in(temp_dir("srv"), extra)
    }

    /// Like `start`, in a given state directory: a restart keeps its journal (issue 24).
    pub fn start_in(state_dir: PathBuf, extra: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(binary());
        cmd.env_clear()
            .env("MOBILE_PORT", "0")
            .env("MOBILE_HOST", "127.0.0.1")
            .env("MOBILE_TOKEN", TOKEN)
            .env("MOBILE_STATE_DIR", &state_dir)
            .env("MOBILE_TYPING_IDLE", "0.2")
            .env("MOBILE_DEMO_STEP", "0.05")
            .env("RUST_LOG", "debug");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        Server::spawn(cmd, state_dir)
    }

    pub fn spawn(mut cmd: Command, state_dir: PathBuf) -> Server {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on ws://") {
                    let addr = line[at + "listening on ws://".len()..]
                        .split("/ws")
                        .next()
                        .unwrap_or("");
                    let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
                    let _ = tx.send(port);
                }
                sink.lock().unwrap().push(line);
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(20))
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                panic!(
                    "the server did not say where it listens; log: {:?}",
                    log.lock().unwrap()
                )
            });
        Server {
            child,
            port,
            state_dir,
            log,
        }
    }

    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/ws", self.port)
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits for a line containing `needle`: the log is read on another thread, so a
    /// line may land just after what the test saw of its cause.
    pub fn wait_for_log(&self, needle: &str) {
        let start = Instant::now();
        while !self.log_text().contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "no {needle:?} in the log: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Resident memory of the server, in KiB (from /proc).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    pub fn http(&self, request: &str) -> String {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state_dir);
    }
}

pub struct Client {
    pub ws: WebSocket<TcpStream>,
    /// Protocol v1 frames, checked against the schema both ways; false for an `/agent`
    /// connection, which speaks the agent protocol (docs/agent-protocol.md).
    checked: bool,
}

impl Client {
    pub fn connect(server: &Server) -> Client {
        Client::connect_with(server, &[])
    }

    /// Connects, adding request headers (e.g. X-Forwarded-For).
    pub fn connect_with(server: &Server, headers: &[(&str, &str)]) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut request = tungstenite::client::IntoClientRequest::into_client_request(server.url()).unwrap();
        for (k, v) in headers {
            request.headers_mut().insert(
                tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                tungstenite::http::HeaderValue::from_str(v).unwrap(),
            );
        }
        let (ws, _) = tungstenite::client(request, stream).expect("websocket handshake");
        Client { ws, checked: true }
    }

    /// A WebSocket that does not speak Protocol v1 (the `/agent` route).
    pub fn agent_protocol(ws: WebSocket<TcpStream>) -> Client {
        Client { ws, checked: false }
    }

    /// Sends a frame that a well-behaved client could send: it must match the protocol's
    /// schema (docs/protocol-v1.schema.json, `$defs/ClientFrame`).
    pub fn send(&mut self, v: Value) {
        if self.checked {
            schema::check_client_frame(&v);
        }
        self.send_unchecked(v);
    }

    /// Sends a frame that is outside the schema on purpose (a test of how the gateway
    /// takes bad or lenient input: a missing field, an id over 128 characters, …).
    pub fn send_unchecked(&mut self, v: Value) {
        self.ws.send(Message::Text(v.to_string().into())).expect("send");
    }

    /// The next text frame as JSON; `None` when the connection closed (with its close frame).
    pub fn next(&mut self) -> Result<Value, Option<(u16, String)>> {
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    let frame: Value = serde_json::from_str(t.as_str()).expect("server sends JSON");
                    if self.checked {
                        schema::check_server_frame(&frame);
                    }
                    return Ok(frame);
                }
                Ok(Message::Close(frame)) => {
                    return Err(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                }
                Ok(_) => continue,
                Err(_) => return Err(None),
            }
        }
    }

    pub fn recv(&mut self) -> Value {
        self.next()
            .unwrap_or_else(|close| panic!("expected a frame, connection closed: {close:?}"))
    }

    /// Frames until one of type `t` (inclusive).
    pub fn until(&mut self, t: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let f = self.recv();
            let done = f["t"] == t;
            frames.push(f);
            if done {
                return frames;
            }
        }
    }

    /// Reads until the server closes; returns its close code and reason, and the frames before.
    pub fn closed(&mut self) -> (Vec<Value>, Option<(u16, String)>) {
        let mut frames = Vec::new();
        loop {
            match self.next() {
                Ok(f) => frames.push(f),
                Err(close) => return (frames, close),
            }
        }
    }

    pub fn hello(server: &Server, device: &str) -> Client {
        let mut c = Client::connect(server);
        c.send(json!({"t":"hello","token":TOKEN,"device":{"id":device,"name":"Test phone"}}));
        let ready = c.recv();
        assert_eq!(ready["t"], "ready", "{ready}");
        c
    }
}

pub fn types(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f["t"].as_str().unwrap_or("?").to_owned())
        .collect()
}

pub fn close_code(code: u16) -> u16 {
    u16::from(CloseCode::from(code))
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The scripted agent, a Rust example that `cargo test` builds beside the tests, so that
/// the suite needs nothing but Rust (issue 17).
pub fn scripted_agent() -> String {
    // The test runs from target/<profile>/deps/; examples are built to target/<profile>/examples/.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps");
    let agent = profile_dir.join("examples").join("scripted_agent");
    let build = "run the tests with `cargo test` (which builds the examples) or build it with `cargo build -p hermes-mobile-server --example scripted_agent`";
    let built = std::fs::metadata(&agent).and_then(|m| m.modified());
    let Ok(built) = built else {
        panic!("no scripted agent at {}: {build}", agent.display());
    };
    // `cargo test --test agent_link` does not rebuild examples: refuse a stale one rather
    // than test the gateway against an agent that is not the source's.
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scripted_agent.rs");
    let edited = std::fs::metadata(&source)
        .and_then(|m| m.modified())
        .expect("the source");
    assert!(
        built >= edited,
        "the scripted agent at {} is older than its source: {build}",
        agent.display()
    );
    agent.display().to_string()
}
