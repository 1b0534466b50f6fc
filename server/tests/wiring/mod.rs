//! The in-memory driver of the loop's wiring (issue 24 §0): the server's `Wiring` (the core,
//! the agent, push's state machine and the journal's records) stepped on a virtual clock,
//! the journal in memory (`MemoryJournal`: a crash keeps exactly what was committed),
//! connections as ids, and the agent link's peer as lines. No socket, no thread, no sleep.
//! It is what quinn's test `Pair` is for a connection, and what the core's `Harness`
//! (tests/common/mod.rs of the core) is for the core alone: a "SIGKILL" drops whatever was
//! not committed and starts a new wiring from the journal's snapshot.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use hermes_mobile::agent_link::{AgentLink, PeerId, QueueLimits};
use hermes_mobile::journal::memory::MemoryJournal;
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::journal::JournalConfig;
use hermes_mobile::push::AllowList;
use hermes_mobile::upstream::{Endpoint, ResponseHead};
use hermes_mobile::{Config, ConnId, Gateway, Peer, Time};
use hermes_mobile_server::agent::demo::DemoAgent;
use hermes_mobile_server::agent::http::{Backend, HttpAgent, HttpSettings};
pub use hermes_mobile_server::agent::io::CallId;
use hermes_mobile_server::agent::io::{CallEvent, LoadError, PeerInput};
use hermes_mobile_server::agent::link::LinkAgent;
use hermes_mobile_server::agent::Agent;
use hermes_mobile_server::card_answer::{AnswerBody, Reply};
use hermes_mobile_server::push::{ContentMode, NotifyActions, Push, PushSettings};
use hermes_mobile_server::wiring::{Wiring, WiringIo};
use serde_json::{json, Value};

pub const TOKEN: &str = "app-token-0123456789";
/// The demo's step between two versions of a streamed reply.
pub const DEMO_STEP: Duration = Duration::from_millis(250);
/// The agent link's one peer, once [`Driver::attach_agent`] opened it.
pub const AGENT: PeerId = PeerId(1);

thread_local! {
    /// This test's virtual time, for the wall clock push's tokens read (each test runs on
    /// its own thread).
    static VIRTUAL_NOW_MS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The wall clock as the driver's virtual time moves it: a card's token carries its
/// expiry on the wall clock (L67), which must move with the core's clock in a test.
fn virtual_wall() -> u64 {
    1_800_000_000_000 + VIRTUAL_NOW_MS.with(std::cell::Cell::get)
}

/// Which agent a (re)started wiring gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    Demo,
    Link,
    /// `openai:`, its backend as slow as the test wants: calls wait in
    /// [`Driver::calls`] until [`Driver::answer`].
    OpenAi,
}

pub struct Driver {
    pub wiring: Wiring,
    pub journal: MemoryJournal,
    pub now: Time,
    /// Commit whenever the wiring is quiet (a fast disk); off, commits wait for `commit()`.
    pub auto_commit: bool,
    config: Config,
    agent: AgentKind,
    /// Starts so far: the demo's ids differ per start, as the server's seed does.
    starts: u64,
    next_conn: u64,
    /// Connections the core knows (for a SIGTERM's closes).
    open: Vec<ConnId>,
    /// Frames sent to each connection, in order.
    pub sent: HashMap<ConnId, Vec<Value>>,
    /// Close (code, reason) per connection.
    pub closed: HashMap<ConnId, (u16, String)>,
    /// Lines the link wrote to its agent, parsed.
    pub lines: Vec<Value>,
    /// Files saved for the agent, by name (the file worker's job, done at once).
    pub saved: usize,
    /// The agent does not read: lines written to it stay in the gateway's outbox (lost
    /// with the process).
    pub stalled_link: bool,
    /// The owed events of lines a stalled agent never read.
    stalled: Vec<EventKey>,
    /// The HTTP agent's calls the backend has not answered yet: their id and request.
    pub calls: Vec<(CallId, String)>,
    /// Web Push as the server has it ([`Driver::with_push`]): its settings and its
    /// directory (the VAPID key), to start it again after a restart.
    push: Option<(PushSettings, PathBuf)>,
    /// The push service's POSTs not answered yet: their id and when they were made.
    pub push_calls: Vec<(CallId, Time)>,
    /// The subscriptions as push last asked to keep them (the file worker's job).
    kept_subscriptions: Option<Vec<u8>>,
    /// Each push POST's request bytes, in order (to decrypt with a `Browser`).
    pub push_requests: Vec<Vec<u8>>,
    /// `POST /card-answer`s answered once kept (issue 25): request id and answer.
    pub card_answers: Vec<(u64, Reply)>,
    next_request: u64,
}

/// A core configured as the server configures it with the journal on.
pub fn config() -> Config {
    let mut config = Config::new(TOKEN);
    config.journal = Some(JournalConfig::new());
    config
}

fn agent_of(kind: AgentKind, config: &Config, start: u64) -> Agent {
    match kind {
        AgentKind::Demo => Agent::Demo(DemoAgent::new(DEMO_STEP, start)),
        AgentKind::Link => {
            let ttl = config.prompt_ttl.as_secs();
            Agent::Link(LinkAgent::new(AgentLink::new(
                "hermes-mobile/test",
                ttl,
                None,
                QueueLimits::default(),
            )))
        }
        AgentKind::OpenAi => Agent::Http(HttpAgent::new(openai_settings(), start)),
    }
}

fn openai_settings() -> HttpSettings {
    HttpSettings {
        backend: Backend::OpenAi,
        endpoint: Endpoint::parse("http://127.0.0.1:8000/v1").expect("a test URL"),
        model: "test-model".into(),
        key: None,
        system: None,
        temperature: None,
        headers: Vec::new(),
        vision: false,
        media_dirs: Vec::new(),
        edit_interval: Duration::from_millis(300),
        history_chars: 20_000,
        history_turns: 20,
        approval_ttl: 120,
        concurrency: 4,
        history_dir: PathBuf::from("/state/conversations"),
    }
}

impl Driver {
    pub fn new(config: Config, agent: AgentKind) -> Driver {
        let history = config.journal.is_none_or(|j| j.history);
        let core = Gateway::new(config.clone());
        Driver {
            wiring: Wiring::new(core, agent_of(agent, &config, 0), None, true),
            journal: MemoryJournal::new(history),
            now: Time::ZERO,
            auto_commit: true,
            config,
            agent,
            starts: 0,
            next_conn: 1,
            open: Vec::new(),
            sent: HashMap::new(),
            closed: HashMap::new(),
            lines: Vec::new(),
            saved: 0,
            stalled_link: false,
            stalled: Vec::new(),
            calls: Vec::new(),
            push: None,
            push_calls: Vec::new(),
            kept_subscriptions: None,
            push_requests: Vec::new(),
            card_answers: Vec::new(),
            next_request: 0,
        }
    }

    /// A gateway with Web Push as the server has it (issue 18): a VAPID key of its own, the
    /// push service at `127.0.0.1:8443` allowed. Its POSTs wait in `push_calls` for
    /// [`Driver::answer_push`].
    pub fn with_push(config: Config, agent: AgentKind) -> Driver {
        Driver::with_push_actions(config, agent, NotifyActions::Safe, None)
    }

    /// [`Driver::with_push`] with `MOBILE_NOTIFY_ACTIONS` and `MOBILE_PUBLIC_URL` (issue 25).
    pub fn with_push_actions(
        mut config: Config,
        agent: AgentKind,
        actions: NotifyActions,
        public_url: Option<&str>,
    ) -> Driver {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hm-driver-push-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the VAPID key");
        let settings = PushSettings {
            web_push: true,
            subject: "mailto:owner@example.org".into(),
            subject_defaulted: false,
            hosts: AllowList::new(["127.0.0.1:8443"]).expect("a valid allow-list"),
            ca_file: None,
            content: ContentMode::Preview,
            ntfy: None,
            ntfy_token: None,
            public_url: public_url.map(str::to_owned),
            guessed_url: None,
            actions,
        };
        let push = start_push(&settings, &dir);
        config.push = Some(push.core_config());
        let mut d = Driver::new(config, agent);
        let core = Gateway::new(d.config.clone());
        d.wiring = Wiring::new(core, agent_of(agent, &d.config, 0), Some(push), true);
        d.wiring.set_push_wall(virtual_wall);
        d.push = Some((settings, dir));
        d
    }

    pub fn demo() -> Driver {
        Driver::new(config(), AgentKind::Demo)
    }

    /// Steps the wiring until it is quiet and the journal has committed (when
    /// `auto_commit`). Bounded: a livelock fails instead of hanging.
    pub fn step(&mut self) {
        VIRTUAL_NOW_MS.with(|c| c.set(self.now.as_millis()));
        for _ in 0..10_000 {
            let mut any = false;
            let mut sent_to = Vec::new();
            while let Some(io) = self.wiring.poll_io(self.now) {
                any = true;
                if let WiringIo::Send { conn, .. } = &io {
                    sent_to.push(*conn);
                }
                self.carry_out(io);
            }
            // Sockets in memory take everything at once.
            for conn in sent_to {
                self.wiring.handle_drained(conn);
            }
            if self.auto_commit && self.journal.has_pending() {
                any = true;
                self.commit();
            }
            if !any {
                return;
            }
        }
        panic!("the wiring did not settle");
    }

    /// What the loop would do with each request, done at once and in memory.
    fn carry_out(&mut self, io: WiringIo) {
        let now = self.now;
        match io {
            WiringIo::Send { conn, frame } => {
                assert!(!self.closed.contains_key(&conn), "frame for closed {conn:?}: {frame}");
                let v: Value = serde_json::from_str(&frame).expect("the gateway sends JSON");
                self.sent.entry(conn).or_default().push(v);
            }
            WiringIo::Close { conn, code, reason } => {
                self.open.retain(|c| *c != conn);
                assert!(
                    self.closed.insert(conn, (code, reason.to_owned())).is_none(),
                    "closed twice"
                );
            }
            WiringIo::Authenticated { .. } => {}
            // A stalled agent leaves its lines in the gateway's outbox: not the agent's yet.
            WiringIo::LinkWrite { owed, .. } if self.stalled_link => self.stalled.extend(owed),
            WiringIo::LinkWrite { line, owed, .. } => {
                self.lines
                    .push(serde_json::from_str(&line).expect("the link writes JSON lines"));
                self.wiring.handle_link_written(owed.into_iter().collect());
            }
            WiringIo::LinkClose { peer, .. } => {
                // As the server does: the lines its outbox still held first, then the end.
                if peer == AGENT {
                    let unwritten = std::mem::take(&mut self.stalled);
                    self.wiring.handle_link_unwritten(unwritten, false);
                }
                self.wiring.handle_peer(now, PeerInput::Closed { peer });
            }
            WiringIo::SaveFile { ticket, event } => {
                self.saved += 1;
                let path = format!("/state/media/{ticket}").into();
                self.wiring.handle_file_saved(ticket, event, Ok(path));
            }
            WiringIo::SaveMedia { name, .. } => self.wiring.handle_media_saved(&name, true),
            WiringIo::DeleteMedia { .. } => {}
            WiringIo::LoadFile { ticket, .. } => {
                self.wiring
                    .handle_file_loaded(now, ticket, Err(LoadError::Unreadable("no files here".into())))
            }
            WiringIo::JournalWrite(records) => {
                for record in records {
                    self.journal.apply(record);
                }
            }
            WiringIo::JournalRead { token, read } => {
                let result = self.journal.read(&read);
                self.wiring.handle_journal_read(now, token, Ok(result));
            }
            WiringIo::Call { id, request } => self.calls.push((id, String::from_utf8_lossy(&request).into())),
            WiringIo::Cancel(id) => self.calls.retain(|(c, _)| *c != id),
            WiringIo::PushCall { id, request, .. } => {
                self.push_calls.push((id, now));
                self.push_requests.push(request);
            }
            WiringIo::CardAnswered { request, reply } => self.card_answers.push((request, reply)),
            WiringIo::PersistLatest { contents, .. } => self.kept_subscriptions = Some(contents),
            WiringIo::Persist { .. } => {}
            // Pairing and revocation (issue 26) have their own socket tests.
            WiringIo::Paired { .. } | WiringIo::Revoked { .. } => {}
        }
    }

    /// `POST /card-answer` with this body: the route's answer, now or once kept.
    pub fn card_answer(&mut self, prompt_id: &str, option_id: &str, token: &str) -> Reply {
        self.next_request += 1;
        let request = self.next_request;
        VIRTUAL_NOW_MS.with(|c| c.set(self.now.as_millis()));
        let body = AnswerBody {
            prompt_id: prompt_id.into(),
            option_id: option_id.into(),
            token: token.into(),
        };
        if let Some(reply) = self.wiring.handle_card_answer(self.now, request, &body) {
            return reply;
        }
        self.step();
        let at = self.card_answers.iter().position(|(r, _)| *r == request);
        match at {
            Some(at) => self.card_answers.remove(at).1,
            None => panic!("no answer to the card answer yet (auto_commit off?)"),
        }
    }

    /// The store commits what it has (its group commit) and tells the wiring.
    pub fn commit(&mut self) {
        if let Some(ticket) = self.journal.commit() {
            self.wiring.handle_journal_committed(self.now, ticket);
        }
    }

    /// The process ends and starts again from the journal. `killed`: a SIGKILL, which
    /// loses whatever was not committed; otherwise a SIGTERM, which closes every
    /// connection (1001) and commits before it exits, as `Server::run` does.
    pub fn restart(&mut self, killed: bool) {
        if killed {
            self.journal.crash();
        } else {
            for conn in std::mem::take(&mut self.open) {
                self.wiring.handle_close(self.now, conn);
            }
            self.step();
            self.journal.commit();
        }
        self.starts += 1;
        let mut core = Gateway::new(self.config.clone());
        core.restore(self.now, self.journal.snapshot());
        let push = self.push.as_ref().map(|(settings, dir)| start_push(settings, dir));
        if let (Some(_), Some(kept)) = (&push, &self.kept_subscriptions) {
            core.restore_push(std::str::from_utf8(kept).unwrap())
                .expect("kept subscriptions");
        }
        let agent = agent_of(self.agent, &self.config, self.starts);
        self.wiring = Wiring::new(core, agent, push, true);
        self.wiring.set_push_wall(virtual_wall);
        self.push_calls.clear();
        self.open.clear();
        self.sent.clear();
        self.closed.clear();
        self.lines.clear();
        self.calls.clear();
        self.step();
    }

    /// Moves the virtual clock to `at`, firing every deadline due on the way, in order.
    pub fn advance_to(&mut self, at: Time) {
        for _ in 0..100_000 {
            match self.wiring.poll_timeout() {
                Some(t) if t <= at => {
                    self.now = self.now.max(t);
                    self.wiring.handle_timeout(self.now);
                    self.step();
                }
                _ => {
                    self.now = self.now.max(at);
                    self.wiring.handle_timeout(self.now);
                    self.step();
                    return;
                }
            }
        }
        panic!("timers did not settle");
    }

    pub fn advance(&mut self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).expect("a test's duration");
        self.advance_to(Time::from_millis(self.now.as_millis() + ms));
    }

    // A phone's connection.

    pub fn open(&mut self) -> ConnId {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.wiring.handle_open(self.now, conn, Peer::default());
        self.open.push(conn);
        self.step();
        conn
    }

    pub fn send(&mut self, conn: ConnId, frame: Value) {
        self.wiring.handle_message(self.now, conn, frame.to_string().as_bytes());
        self.step();
    }

    /// The phone's socket ended.
    pub fn close(&mut self, conn: ConnId) {
        self.open.retain(|c| *c != conn);
        self.wiring.handle_close(self.now, conn);
        self.step();
    }

    /// Opens a connection and says `hello` as `device`, with `resume` when `after` is given;
    /// the frames it got.
    pub fn hello(&mut self, device: &str, after: Option<u64>) -> (ConnId, Vec<Value>) {
        let conn = self.open();
        let mut hello = json!({"t":"hello","token":TOKEN,"device":{"id":device}});
        if let Some(after) = after {
            hello["resume"] = json!({ "after": after });
        }
        self.send(conn, hello);
        let frames = self.take(conn);
        assert_eq!(frames.first().map(|f| &f["t"]), Some(&json!("ready")), "{frames:?}");
        (conn, frames)
    }

    /// Frames sent to `conn` since the last take.
    pub fn take(&mut self, conn: ConnId) -> Vec<Value> {
        self.sent.remove(&conn).unwrap_or_default()
    }

    // The agent link's peer.

    /// An agent connects to the link and says hello.
    pub fn attach_agent(&mut self) {
        self.attach_agent_as(AGENT);
    }

    /// An agent on another connection than [`AGENT`] (it replaces the one attached).
    pub fn attach_agent_as(&mut self, peer: PeerId) {
        let opened = PeerInput::Opened {
            peer,
            needs_token: false,
            source: Default::default(),
        };
        self.wiring.handle_peer(self.now, opened);
        let hello = json!({"t":"hello","v":1}).to_string();
        let input = PeerInput::Line {
            peer,
            line: hello.as_bytes(),
        };
        self.wiring.handle_peer(self.now, input);
        self.step();
    }

    /// The agent's process ends with lines still in the gateway's outbox, as the server
    /// reports it: their owed events first, then the peer's end.
    pub fn agent_gone(&mut self) {
        let unwritten = std::mem::take(&mut self.stalled);
        self.wiring.handle_link_unwritten(unwritten, false);
        self.wiring.handle_peer(self.now, PeerInput::Closed { peer: AGENT });
        self.step();
    }

    /// A line from the agent.
    pub fn agent_line(&mut self, line: Value) {
        let line = line.to_string();
        let input = PeerInput::Line {
            peer: AGENT,
            line: line.as_bytes(),
        };
        self.wiring.handle_peer(self.now, input);
        self.step();
    }

    // The HTTP agent's backend.

    /// The backend answers the open call `id` with `text`, streamed whole, and ends it.
    pub fn answer(&mut self, id: CallId, text: &str) {
        let head = ResponseHead {
            status: 200,
            reason: "OK".into(),
            headers: vec![("content-type".into(), "text/event-stream".into())],
        };
        let chunk = json!({"choices": [{"index": 0, "delta": {"content": text}}]});
        let body = format!("data: {chunk}\n\ndata: [DONE]\n\n").into_bytes();
        for event in [CallEvent::Head(head), CallEvent::Body(body), CallEvent::End] {
            self.wiring.handle_call(self.now, id, event);
            self.step();
        }
    }

    /// The push service answers the POST `id` with `status` and these headers.
    pub fn answer_push(&mut self, id: CallId, status: u16, headers: &[(&str, &str)]) {
        self.push_calls.retain(|(c, _)| *c != id);
        let head = ResponseHead {
            status,
            reason: String::new(),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        for event in [CallEvent::Head(head), CallEvent::End] {
            self.wiring.handle_call(self.now, id, event);
            self.step();
        }
    }

    /// The lines the link wrote since the last take.
    pub fn take_lines(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.lines)
    }
}

fn start_push(settings: &PushSettings, dir: &std::path::Path) -> Push {
    Push::start(settings.clone(), dir).expect("push starts").0
}

/// The frames of type `t`, in order.
pub fn only(frames: &[Value], t: &str) -> Vec<Value> {
    frames.iter().filter(|f| f["t"] == t).cloned().collect()
}

pub fn types(frames: &[Value]) -> Vec<&str> {
    frames.iter().map(|f| f["t"].as_str().unwrap_or("?")).collect()
}
