//! Characterization transcripts of the HTTP agent (issue 17, step 2).
//!
//! Each scenario drives the agent in memory, on virtual time, with scripted call events,
//! and records everything it emits: core commands and I/O requests, the requests' bytes
//! included. The transcripts are kept in `server/tests/transcripts/http/`, and a test
//! fails when the agent's output differs from them by one byte. They were recorded from
//! the agent before it was reshaped, so the reshaping is shown to keep its behaviour.
//!
//! `UPDATE_TRANSCRIPTS=1 cargo test transcript` writes them anew: review the diff.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use hermes_mobile::agent::{PromptKind, UserInfo};
use hermes_mobile::upstream::{Endpoint, ResponseHead};
use hermes_mobile::{AgentCommand, AgentEvent, DeviceId, PromptId, Time};

use super::{Backend, HttpAgent, HttpSettings};
use crate::agent::io::{AgentIo, CallError, CallEvent, CallId, LoadError};
use crate::agent::PureAgent;

mod handed;

/// Steps of virtual time before a scenario is taken to livelock.
const MAX_STEPS: usize = 10_000;

struct Script {
    agent: HttpAgent,
    now: Time,
    out: String,
    last_call: Option<CallId>,
    last_load: Option<u64>,
    /// Messages sent so far: each gets its own id (`m1`, `m2`…).
    texts: u32,
    /// The keys of the owed events the agent is done with, in order (kept out of the
    /// transcripts: `handed` tests look at them).
    handed: Vec<String>,
}

fn settings(backend: Backend) -> HttpSettings {
    let url = match backend {
        Backend::OpenAi => "http://127.0.0.1:8000/v1",
        Backend::Hermes => "http://127.0.0.1:8642/v1",
    };
    HttpSettings {
        backend,
        endpoint: Endpoint::parse(url).expect("a test URL"),
        model: "test-model".into(),
        key: Some("sk-test".into()),
        system: Some("Be brief.".into()),
        temperature: None,
        headers: Vec::new(),
        vision: false,
        media_dirs: vec!["/srv/media".into()],
        edit_interval: Duration::from_millis(300),
        history_chars: 20_000,
        history_turns: 20,
        approval_ttl: 120,
        concurrency: 4,
        history_dir: PathBuf::from("/state/conversations"),
    }
}

impl Script {
    fn new(settings: HttpSettings) -> Script {
        Script {
            agent: HttpAgent::new(settings, 0x1234),
            now: Time::ZERO,
            out: String::new(),
            last_call: None,
            last_load: None,
            texts: 0,
            handed: Vec::new(),
        }
    }

    fn openai() -> Script {
        Script::new(settings(Backend::OpenAi))
    }

    fn hermes() -> Script {
        Script::new(settings(Backend::Hermes))
    }

    fn step(&mut self, what: &str) {
        let _ = writeln!(self.out, "> {} ms: {what}", self.now.as_millis());
    }

    /// Records what the agent emitted; all commands are accepted by the gateway.
    fn drain(&mut self) {
        loop {
            let mut any = false;
            while let Some(command) = self.agent.poll_command() {
                any = true;
                let _ = writeln!(self.out, "  command {}", describe_command(&command));
            }
            while let Some(io) = self.agent.poll_io() {
                any = true;
                self.record_io(io);
            }
            while let Some(key) = self.agent.poll_handed() {
                any = true;
                self.handed.push(key.key);
            }
            if !any {
                break;
            }
        }
        let _ = writeln!(
            self.out,
            "  next timeout {:?}",
            self.agent.poll_timeout().map(|t| t.as_millis())
        );
    }

    fn record_io(&mut self, io: AgentIo) {
        match io {
            AgentIo::Call { id, request } => {
                self.last_call = Some(id);
                let _ = writeln!(self.out, "  io call {}:", id.0);
                for line in String::from_utf8_lossy(&request).split("\r\n") {
                    let _ = writeln!(self.out, "    | {line}");
                }
            }
            AgentIo::Cancel(id) => {
                let _ = writeln!(self.out, "  io cancel {}", id.0);
            }
            AgentIo::Load { tag, path, limit } => {
                self.last_load = Some(tag);
                let _ = writeln!(self.out, "  io load {tag} {} (limit {limit})", path.display());
            }
            AgentIo::Persist { path, contents } => {
                let text = String::from_utf8_lossy(&contents);
                let _ = writeln!(self.out, "  io persist {}: {text}", path.display());
            }
            other @ (AgentIo::Write { .. } | AgentIo::Close { .. } | AgentIo::Handed(_)) => {
                panic!("not an HTTP agent's: {other:?}")
            }
        }
    }

    fn event(&mut self, what: &str, event: AgentEvent) {
        self.step(what);
        self.agent.handle_event(self.now, event);
        self.drain();
    }

    fn text(&mut self, text: &str) {
        self.texts += 1;
        let event = AgentEvent::MessageReceived {
            device: device(),
            id: format!("m{}", self.texts),
            user: UserInfo::default(),
            text: Some(text.into()),
            audio: None,
            file: None,
            redelivered: false,
        };
        self.event(&format!("text {text:?}"), event);
    }

    /// The device's saved conversation is not there (its first message reads it).
    fn no_conversation(&mut self) {
        let tag = self.last_load.take().expect("a load was asked for");
        self.step(&format!("load {tag}: no such file"));
        let missing = LoadError::Unreadable("No such file or directory (os error 2)".into());
        self.agent.handle_loaded(self.now, tag, Err(missing));
        self.drain();
    }

    fn call(&mut self, what: &str, event: CallEvent) {
        let id = self.last_call.expect("a call was made");
        self.step(&format!("call {}: {what}", id.0));
        self.agent.handle_call(self.now, id, event);
        self.drain();
    }

    fn head(&mut self, status: u16, headers: &[(&str, &str)]) {
        let head = ResponseHead {
            status,
            reason: "Reason".into(),
            headers: headers.iter().map(|(n, v)| ((*n).into(), (*v).into())).collect(),
        };
        self.call(&format!("head {status} {headers:?}"), CallEvent::Head(head));
    }

    fn sse_head(&mut self) {
        self.head(200, &[("content-type", "text/event-stream")]);
    }

    fn body(&mut self, bytes: &str) {
        self.call(&format!("body {bytes:?}"), CallEvent::Body(bytes.as_bytes().to_vec()));
    }

    fn delta(&mut self, text: &str) {
        let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]});
        self.body(&format!("data: {chunk}\n\n"));
    }

    fn run_event(&mut self, event: serde_json::Value) {
        self.body(&format!("data: {event}\n\n"));
    }

    fn end(&mut self) {
        self.call("end", CallEvent::End);
    }

    fn failed(&mut self, error: CallError) {
        self.call(&format!("failed {error:?}"), CallEvent::Failed(error));
    }

    /// Moves virtual time on by `ms`, firing every deadline on the way.
    fn advance(&mut self, ms: u64) {
        let until = self.now + Duration::from_millis(ms);
        for _ in 0..MAX_STEPS {
            match self.agent.poll_timeout() {
                Some(at) if at <= until => {
                    self.now = at.max(self.now);
                    self.step("timeout");
                    self.agent.handle_timeout(self.now);
                    self.drain();
                }
                _ => {
                    self.now = until;
                    return;
                }
            }
        }
        panic!("no quiet point within {MAX_STEPS} steps: a livelock");
    }

    /// A turn's start: the message, the missing conversation, the stream's head.
    fn start_turn(&mut self, text: &str) {
        self.text(text);
        self.no_conversation();
        self.sse_head();
    }

    /// A Hermes turn's start: the message, the missing conversation, the run started
    /// (202) and its event stream's head. Returns the event stream's call.
    fn start_run(&mut self, text: &str, run: &str) -> Option<CallId> {
        self.text(text);
        self.no_conversation();
        self.head(202, &[]);
        self.body(&format!("{{\"run_id\":\"{run}\"}}"));
        self.end();
        self.sse_head();
        self.last_call
    }

    fn check(mut self, name: &str) {
        self.out = self.out.lines().map(clip).collect::<Vec<_>>().join("\n") + "\n";
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/transcripts/http")
            .join(format!("{name}.txt"));
        if std::env::var_os("UPDATE_TRANSCRIPTS").is_some() {
            std::fs::create_dir_all(path.parent().expect("a folder")).expect("the transcripts folder");
            std::fs::write(&path, &self.out).expect("the transcript written");
            return;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_TRANSCRIPTS=1 records it)", path.display()));
        if want != self.out {
            let line = want
                .lines()
                .zip(self.out.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(self.out.lines().count()));
            panic!(
                "transcript {name} differs from line {}:\n--- recorded\n{}\n--- now\n{}",
                line + 1,
                want.lines().skip(line).take(8).collect::<Vec<_>>().join("\n"),
                self.out.lines().skip(line).take(8).collect::<Vec<_>>().join("\n"),
            );
        }
    }
}

/// A long line (a 100 KiB reply) as its start and its length.
fn clip(line: &str) -> String {
    if line.len() <= 2000 {
        return line.to_owned();
    }
    let start: String = line.chars().take(200).collect();
    format!("{start}… ({} bytes)", line.len())
}

fn device() -> DeviceId {
    DeviceId("tel-1".into())
}

fn describe_command(command: &AgentCommand) -> String {
    match command {
        AgentCommand::SendFile { device, file } => format!(
            "SendFile {{ device: {:?}, kind: {:?}, mime: {:?}, filename: {:?}, {} bytes }}",
            device.0,
            file.kind,
            file.mime,
            file.filename,
            file.data.len()
        ),
        other => format!("{other:?}"),
    }
}

#[test]
fn transcript_openai_done() {
    let mut s = Script::openai();
    s.start_turn("hello");
    s.delta("Hel");
    s.delta("lo ");
    s.advance(100);
    s.delta("there");
    s.advance(400);
    s.body("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    s.end();
    // The next turn sends the history.
    s.text("and again");
    s.sse_head();
    s.delta("Again.");
    s.body("data: [DONE]\n\n");
    s.check("openai_done");
}

#[test]
fn transcript_hermes_done() {
    let mut s = Script::hermes();
    s.text("hello");
    s.no_conversation();
    s.head(202, &[("content-type", "application/json")]);
    s.body(r#"{"run_id":"run_1","status":"started"}"#);
    s.end();
    s.sse_head();
    s.run_event(serde_json::json!({"event": "tool.started", "tool": "terminal"}));
    s.run_event(serde_json::json!({"event": "message.delta", "delta": "Done "}));
    s.advance(350);
    s.run_event(serde_json::json!({"event": "message.delta", "delta": "it."}));
    s.run_event(serde_json::json!({"event": "run.completed", "output": "Done it."}));
    s.end();
    s.check("hermes_done");
}

#[test]
fn transcript_openai_429_with_retry_after() {
    let mut s = Script::openai();
    s.text("hello");
    s.no_conversation();
    s.head(429, &[("retry-after", "2"), ("content-type", "application/json")]);
    s.body(r#"{"error":{"message":"slow down"}}"#);
    s.end();
    s.advance(1999);
    s.advance(1);
    s.sse_head();
    s.delta("Hi.");
    s.body("data: [DONE]\n\n");
    s.check("openai_429_retry_after");
}

#[test]
fn transcript_openai_502_backoff_then_one_sentence() {
    let mut s = Script::openai();
    s.text("hello");
    s.no_conversation();
    for wait in [1000, 2000] {
        s.head(502, &[]);
        s.end();
        s.advance(wait);
    }
    s.head(502, &[("content-type", "application/json")]);
    s.body(r#"{"error":{"message":"bad gateway upstream"}}"#);
    s.end();
    s.check("openai_502_backoff");
}

#[test]
fn transcript_openai_connect_refused_retries_then_says_so() {
    let mut s = Script::openai();
    s.text("hello");
    s.no_conversation();
    s.failed(CallError::Connect("connection refused".into()));
    s.advance(1000);
    s.failed(CallError::Connect("connection refused".into()));
    s.advance(2000);
    s.failed(CallError::Connect("connection refused".into()));
    s.check("openai_connect_refused");
}

#[test]
fn transcript_openai_idle_cut_keeps_the_partial_answer() {
    let mut s = Script::openai();
    s.start_turn("tell me a story");
    s.delta("Once upon");
    s.advance(300);
    s.failed(CallError::Timeout("idle"));
    s.check("openai_idle_cut");
}

#[test]
fn transcript_openai_stop() {
    let mut s = Script::openai();
    s.start_turn("count to a million");
    s.delta("1, 2, 3");
    s.text("/stop");
    s.text("/stop");
    s.check("openai_stop");
}

#[test]
fn transcript_hermes_stop() {
    let mut s = Script::hermes();
    let events = s.start_run("run something long", "run_7");
    s.run_event(serde_json::json!({"event": "message.delta", "delta": "Working"}));
    s.text("/stop");
    s.head(200, &[]);
    s.end();
    s.last_call = events;
    s.run_event(serde_json::json!({"event": "run.cancelled"}));
    s.end();
    s.check("hermes_stop");
}

#[test]
fn transcript_hermes_approval_expiry_denies_then_a_quiet_409() {
    let mut s = Script::hermes();
    let events = s.start_run("clean up", "run_9");
    s.run_event(serde_json::json!({
        "event": "approval.request", "command": "rm -rf /tmp/x", "description": "",
        "choices": ["once", "session", "always", "deny"]
    }));
    let expired = AgentEvent::PromptExpired {
        device: device(),
        prompt: PromptId("approval-1234-2".into()),
        kind: PromptKind::ExecApproval,
        option_id: Some("deny".into()),
        asked: "rm -rf /tmp/x".into(),
    };
    s.now = s.now + Duration::from_secs(120);
    s.event("card expired", expired);
    s.head(409, &[]);
    s.end();
    s.last_call = events;
    s.run_event(serde_json::json!({"event": "run.failed", "error": "denied"}));
    s.check("hermes_approval_expiry");
}

#[test]
fn transcript_openai_length_limit() {
    let mut s = Script::openai();
    s.start_turn("write a lot");
    s.delta("Chapter one");
    s.body("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n");
    s.end();
    s.check("openai_length_limit");
}

#[test]
fn transcript_openai_reply_over_the_byte_limit_is_cut() {
    let mut s = Script::openai();
    s.start_turn("loop");
    let chunk = "y".repeat(100 * 1024);
    for _ in 0..3 {
        s.delta(&chunk);
    }
    s.check("openai_reply_byte_limit");
}

#[test]
fn transcript_openai_full_inbox() {
    let mut s = Script::openai();
    s.start_turn("first");
    for i in 0..9 {
        s.text(&format!("more {i}"));
    }
    s.body("data: [DONE]\n\n");
    s.check("openai_full_inbox");
}

#[test]
fn transcript_new_while_the_conversation_loads() {
    let mut s = Script::openai();
    s.text("/new");
    s.text("hello after new");
    s.no_conversation();
    s.sse_head();
    s.body("data: [DONE]\n\n");
    s.check("openai_new_while_loading");
}

#[test]
fn transcript_hermes_run_not_started() {
    let mut s = Script::hermes();
    s.text("hello");
    s.no_conversation();
    s.head(200, &[]);
    s.body("not json");
    s.end();
    s.check("hermes_run_not_started");
}

#[test]
fn transcript_media_tags_and_a_refused_path() {
    let mut s = Script::openai();
    s.start_turn("send the chart");
    s.delta("Here it is.\nMEDIA:/srv/media/chart.png\nMEDIA:/etc/passwd");
    s.body("data: [DONE]\n\n");
    let tag = s.last_load.expect("the chart is read");
    s.step(&format!("load {tag}: 4 bytes"));
    s.agent.handle_loaded(s.now, tag, Ok(b"\x89PNG".to_vec()));
    s.drain();
    s.check("openai_media_tags");
}
