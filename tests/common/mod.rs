//! An in-memory harness: a gateway on a virtual clock, connections as ids, and what each
//! connection was sent, parsed. No sockets, no sleeps.
#![allow(dead_code)]

use std::collections::HashMap;

use hermes_mobile::{AgentCommand, AgentEvent, Config, ConnId, Gateway, Output, Peer, Time};
use serde_json::{json, Value};

pub const TOKEN: &str = "app-token-0123456789";

pub struct Harness {
    pub gw: Gateway,
    pub now: Time,
    next_conn: u64,
    /// Frames sent to each connection, in order.
    pub sent: HashMap<ConnId, Vec<Value>>,
    /// Close (code, reason) per connection.
    pub closed: HashMap<ConnId, (u16, String)>,
    pub events: Vec<AgentEvent>,
    /// `DeviceOnline`/`DeviceOffline` events, in order.
    pub presence: Vec<AgentEvent>,
    /// What the gateway asked to notify (issue 18), in order.
    pub notices: Vec<hermes_mobile::push::Notification>,
    /// How many times the push subscriptions changed.
    pub push_changes: usize,
    /// The journal (issue 24), when the gateway keeps one.
    pub journal: Option<hermes_mobile::journal::memory::MemoryJournal>,
    /// Commit after every input (a fast disk); off, commits wait for `commit()`.
    pub auto_commit: bool,
    /// Journal reads wait here instead of being answered at once (a slow disk).
    pub held_reads: Option<Vec<(u64, hermes_mobile::journal::Read)>>,
    /// The media store (L63): what the server saved, by name.
    pub media: HashMap<String, Vec<u8>>,
    /// Files to save wait here instead of being saved at once (a slow disk).
    pub held_media: Option<Vec<(String, Vec<u8>)>>,
    /// Phones that read nothing: their queue never drains (`Gateway::handle_drained`).
    pub unread: Vec<ConnId>,
    /// How many sweeps of a device's files (`forget`) the server was asked for.
    pub sweeps: usize,
    /// How each notification answer went (issue 25), by request.
    pub card_answers: Vec<(u64, hermes_mobile::CardAnswered)>,
    /// How each pairing and each revocation went (issue 26), by request.
    pub pairings: Vec<(u64, hermes_mobile::gateway::PairOutcome)>,
    pub revocations: Vec<(u64, hermes_mobile::gateway::RevokeOutcome)>,
    /// Connections sent frames since the last pump's drain.
    got_frames: Vec<ConnId>,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(Config::new(TOKEN))
    }

    pub fn with_config(config: Config) -> Harness {
        Harness {
            gw: Gateway::new(config),
            now: Time::ZERO,
            next_conn: 1,
            sent: HashMap::new(),
            closed: HashMap::new(),
            events: Vec::new(),
            presence: Vec::new(),
            notices: Vec::new(),
            push_changes: 0,
            journal: None,
            auto_commit: true,
            held_reads: None,
            media: HashMap::new(),
            held_media: None,
            sweeps: 0,
            card_answers: Vec::new(),
            pairings: Vec::new(),
            revocations: Vec::new(),
            unread: Vec::new(),
            got_frames: Vec::new(),
        }
    }

    /// The file worker saves a file the core named, and says so (L63).
    fn save_media(&mut self, name: String, data: Vec<u8>) {
        if let Some(held) = self.held_media.as_mut() {
            return held.push((name, data));
        }
        self.gw.handle_media_saved(&name);
        self.media.insert(name, data);
    }

    /// The files that waited are saved now (the slow disk catches up).
    pub fn save_held_media(&mut self) {
        for (name, data) in self.held_media.as_mut().map(std::mem::take).unwrap_or_default() {
            self.gw.handle_media_saved(&name);
            self.media.insert(name, data);
        }
        self.pump();
    }

    /// L26's bounds remove a file from the media store, and the core is told.
    pub fn remove_media(&mut self, name: &str) {
        self.media.remove(name);
        self.gw.handle_media_removed(name);
    }

    /// A gateway with a journal (issue 24) in memory, history on unless the config says.
    pub fn with_journal(mut config: Config) -> Harness {
        let journal = *config
            .journal
            .get_or_insert_with(hermes_mobile::journal::JournalConfig::new);
        let mut h = Harness::with_config(config);
        h.journal = Some(hermes_mobile::journal::memory::MemoryJournal::new(journal.history));
        h
    }

    /// Commits what the journal has (the store's group commit) and tells the gateway.
    pub fn commit(&mut self) {
        let ticket = self
            .journal
            .as_mut()
            .filter(|j| j.has_pending())
            .and_then(|j| j.commit());
        if let Some(ticket) = ticket {
            self.gw.handle_journal_committed(self.now, ticket);
            self.pump();
        }
    }

    /// The store's transaction failed: what it held is rolled back, and the gateway told.
    pub fn fail_commit(&mut self) {
        if let Some(j) = self.journal.as_mut() {
            j.crash();
        }
        self.gw.handle_journal_failed(self.now, u64::MAX);
        self.pump();
    }

    /// The journal reads that waited are answered now (the slow disk catches up); reads
    /// they lead to wait again.
    pub fn answer_held_reads(&mut self) {
        let reads = self.held_reads.as_mut().map(std::mem::take).unwrap_or_default();
        for (token, read) in reads {
            let result = self.journal.as_ref().map(|j| j.read(&read)).unwrap_or_default();
            self.gw.handle_journal_read(self.now, token, Ok(result));
        }
        self.pump();
    }

    /// A restart: the process goes (with a SIGKILL, what was not committed goes too), and a
    /// new gateway starts from the journal, as the server does before its loop.
    pub fn restart(&mut self, killed: bool) {
        let journal = self.journal.as_mut().expect("a journal");
        if killed {
            journal.crash();
        } else {
            journal.commit();
        }
        let snapshot = journal.snapshot();
        let config = self.gw.config().clone();
        let push = self.gw.push_snapshot();
        self.gw = Gateway::new(config);
        self.gw.restore_push(&push).expect("the push snapshot reads back");
        self.gw.restore(self.now, snapshot);
        self.sent.clear();
        self.closed.clear();
        self.events.clear();
        self.pump();
    }

    fn pump(&mut self) {
        loop {
            self.drain();
            // Sockets take everything at once, except a slow phone's (`unread`).
            let drained: Vec<ConnId> = std::mem::take(&mut self.got_frames)
                .into_iter()
                .filter(|c| !self.unread.contains(c))
                .collect();
            if !drained.is_empty() {
                for conn in drained {
                    self.gw.handle_drained(conn);
                }
                continue;
            }
            let ready = self.auto_commit && self.journal.as_ref().is_some_and(|j| j.has_pending());
            if !ready {
                break;
            }
            self.commit();
        }
    }

    fn drain(&mut self) {
        while let Some(out) = self.gw.poll_output() {
            match out {
                Output::Send { conn, frame } => {
                    assert!(
                        !self.closed.contains_key(&conn),
                        "frame sent to closed {conn:?}: {frame}"
                    );
                    let v: Value = serde_json::from_str(&frame).expect("the gateway sends JSON");
                    if !self.got_frames.contains(&conn) {
                        self.got_frames.push(conn);
                    }
                    self.sent.entry(conn).or_default().push(v);
                }
                Output::Close { conn, code, reason } => {
                    assert!(
                        self.closed.insert(conn, (code, reason.to_owned())).is_none(),
                        "closed twice"
                    );
                }
                Output::Authenticated { .. } => {}
                Output::Notify(n) => self.notices.push(n),
                Output::PushChanged => self.push_changes += 1,
                Output::Journal(record) => {
                    if let Some(j) = self.journal.as_mut() {
                        j.apply(record);
                    }
                }
                Output::JournalRead { token, read } if self.held_reads.is_some() => {
                    self.held_reads.get_or_insert_with(Vec::new).push((token, read));
                }
                Output::JournalRead { token, read } => {
                    let result = self.journal.as_ref().map(|j| j.read(&read)).unwrap_or_default();
                    self.gw.handle_journal_read(self.now, token, Ok(result));
                }
                Output::SaveMedia { name, data } => self.save_media(name, data),
                Output::CardAnswered { request, outcome } => self.card_answers.push((request, outcome)),
                Output::Paired { request, outcome } => self.pairings.push((request, outcome)),
                Output::Revoked { request, outcome } => self.revocations.push((request, outcome)),
                Output::DeleteMedia { device } => {
                    self.sweeps += 1;
                    self.media.retain(|name, _| {
                        !hermes_mobile::media::key_of_name(name)
                            .is_some_and(|k| hermes_mobile::media::key_is_for(k, &device))
                    });
                }
            }
        }
        while let Some(e) = self.gw.poll_event() {
            // The server saves a message's voice note or file before the agent gets it.
            if let AgentEvent::MessageReceived { audio, file, .. } = &e {
                let audio = audio
                    .as_ref()
                    .and_then(|a| Some((a.media_name.clone()?, a.data.clone())));
                let file = file
                    .as_ref()
                    .and_then(|f| Some((f.media_name.clone()?, f.data.clone())));
                if let Some((name, data)) = audio.or(file) {
                    self.save_media(name, data);
                }
            }
            match e {
                // Presence has its own record, so that tests of messages see messages.
                AgentEvent::DeviceOnline { .. } | AgentEvent::DeviceOffline { .. } => self.presence.push(e),
                e => self.events.push(e),
            }
        }
    }

    pub fn open_with(&mut self, peer: Peer) -> ConnId {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.gw.handle_open(self.now, conn, peer);
        self.pump();
        conn
    }

    pub fn open(&mut self) -> ConnId {
        self.open_with(Peer::default())
    }

    pub fn send_raw(&mut self, conn: ConnId, bytes: &[u8]) {
        self.gw.handle_message(self.now, conn, bytes);
        self.pump();
    }

    pub fn send(&mut self, conn: ConnId, frame: Value) {
        self.send_raw(conn, frame.to_string().as_bytes());
    }

    pub fn hello(&mut self, conn: ConnId, device: &str) {
        self.send(
            conn,
            json!({"t":"hello","token":TOKEN,"device":{"id":device,"name":"Phone"}}),
        );
    }

    /// Opens a connection and authenticates it as `device`; returns it with its frames cleared.
    pub fn connect(&mut self, device: &str) -> ConnId {
        let conn = self.open();
        self.hello(conn, device);
        let ready = self.take(conn);
        assert_eq!(ready[0]["t"], "ready", "{ready:?}");
        conn
    }

    /// Like `connect`, but returns the frames that followed `ready` too.
    pub fn connect_frames(&mut self, device: &str) -> (ConnId, Vec<Value>) {
        let conn = self.open();
        self.hello(conn, device);
        let frames = self.take(conn);
        assert_eq!(frames[0]["t"], "ready", "{frames:?}");
        (conn, frames)
    }

    pub fn agent(&mut self, cmd: AgentCommand) {
        self.gw.handle_agent(self.now, cmd).expect("agent command accepted");
        self.pump();
    }

    /// An agent command that may be refused; its outcome.
    pub fn try_agent(&mut self, cmd: AgentCommand) -> Result<hermes_mobile::Accepted, hermes_mobile::CommandError> {
        let outcome = self.gw.handle_agent(self.now, cmd);
        self.pump();
        outcome
    }

    /// A notification's button answered a card (issue 25; the server checked its token).
    pub fn card_answer(&mut self, request: u64, prompt: &str, option: &str) {
        self.gw.handle_card_answer(self.now, request, prompt, option);
        self.pump();
    }

    /// `POST /pair` (issue 26; the server made `token`).
    pub fn pair(
        &mut self,
        request: u64,
        source: hermes_mobile::throttle::SourceKey,
        code: &str,
        device: &str,
        token: &str,
    ) {
        let req = hermes_mobile::gateway::PairRequest {
            code: code.into(),
            device_id: device.into(),
            name: "Pixel".into(),
            platform: "android".into(),
        };
        self.gw.handle_pair(self.now, request, source, req, token.into());
        self.pump();
    }

    /// `hermes-mobile devices revoke` (issue 26).
    pub fn revoke(&mut self, request: u64, device: &str, forget: bool) {
        self.gw.handle_revoke(self.now, request, device, forget);
        self.pump();
    }

    pub fn close(&mut self, conn: ConnId) {
        self.gw.handle_close(self.now, conn);
        self.pump();
    }

    /// Moves the virtual clock to `at`, firing every timer due on the way, in order.
    pub fn advance_to(&mut self, at: Time) {
        // Bounded: a livelock fails instead of hanging.
        for _ in 0..100_000 {
            match self.gw.poll_timeout() {
                Some(t) if t <= at => {
                    self.now = self.now.max(t);
                    self.gw.handle_timeout(self.now);
                    self.pump();
                }
                _ => {
                    self.now = at;
                    self.gw.handle_timeout(at);
                    self.pump();
                    return;
                }
            }
        }
        panic!("timers did not settle");
    }

    pub fn advance_ms(&mut self, ms: u64) {
        self.advance_to(Time::from_millis(self.now.as_millis() + ms));
    }

    /// Frames sent to `conn` since the last take.
    pub fn take(&mut self, conn: ConnId) -> Vec<Value> {
        self.sent.remove(&conn).unwrap_or_default()
    }

    /// A slow phone (in `unread`) reads everything queued for it.
    pub fn read_queue(&mut self, conn: ConnId) {
        self.gw.handle_drained(conn);
        self.pump();
    }

    /// The agent takes the events so far: they are owed no more (L64). Events not taken
    /// before a restart are lost with the process, as in the loop's queue.
    pub fn take_events(&mut self) -> Vec<AgentEvent> {
        let events = std::mem::take(&mut self.events);
        for key in events.iter().filter_map(hermes_mobile::journal::owed::EventKey::of) {
            self.gw.handle_agent_handed(key);
        }
        self.pump();
        events
    }

    pub fn types(frames: &[Value]) -> Vec<String> {
        frames
            .iter()
            .map(|f| f["t"].as_str().unwrap_or("?").to_owned())
            .collect()
    }
}

/// The single error frame in `frames`.
pub fn error_of(frames: &[Value]) -> &Value {
    let errors: Vec<&Value> = frames.iter().filter(|f| f["t"] == "error").collect();
    assert_eq!(errors.len(), 1, "expected one error in {frames:?}");
    errors[0]
}

pub fn b64(bytes: &[u8]) -> String {
    hermes_mobile::base64::encode(bytes)
}

/// The frames of type `t`, in order.
pub fn only(frames: Vec<Value>, t: &str) -> Vec<Value> {
    frames.into_iter().filter(|f| f["t"] == t).collect()
}
