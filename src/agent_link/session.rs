//! The agent link's state: who is attached, what waits for an agent, which turns are in
//! flight. Sans-IO: lines and time in, lines and commands out. The server owns the pipes,
//! sockets and file reads; this decides what they carry.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use super::codec::{
    error_line, event_line, ok_line, parse_agent_line, welcome_line, AgentLine, FileHandover, LineError, LinkCommand,
    LinkRole, OnlineDevice, LINK_VERSION,
};
use crate::agent::{Accepted, AgentCommand, AgentEvent, CommandError};
use crate::auth::ct_eq;
use crate::ids::DeviceId;
use crate::journal::owed::EventKey;
use crate::throttle::{SourceKey, Throttle};
use crate::time::Time;

/// A connection of the link (the server's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u64);

/// Where a command came from, to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub peer: Option<PeerId>,
    pub reference: Option<String>,
}

/// What the link asks the server to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkOutput {
    /// Write this line (with its newline) to the peer. `owed`: the event the line carries
    /// is owed to the agent (L64) until the line's last byte has left the gateway; the
    /// server then tells the core's journal.
    Write {
        peer: PeerId,
        line: String,
        owed: Option<EventKey>,
    },
    /// End the peer's connection (after what was written to it).
    Close { peer: PeerId, reason: String },
    /// Apply this command to the core; then report with [`AgentLink::handle_outcome`].
    Command { origin: Origin, command: Box<LinkCommand> },
    /// The event was given up (its queue was full, or it waited too long): tell the core's
    /// journal it is owed no more (L64). One written is told through `Write::owed`.
    Handed(EventKey),
}

/// How much may wait for an agent while none is attached (docs/agent-protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    pub events: usize,
    pub bytes: usize,
    pub max_age: Duration,
}

impl Default for QueueLimits {
    fn default() -> QueueLimits {
        QueueLimits {
            events: 256,
            bytes: 32 * 1024 * 1024,
            max_age: Duration::from_secs(600),
        }
    }
}

/// Told once per device while the agent is away.
pub const AGENT_AWAY_TEXT: &str =
    "The agent is not connected right now; your messages will be passed on when it is back.";
/// Told when the agent went away during a turn.
pub const AGENT_LOST_TEXT: &str = "The agent stopped before answering; please send that again.";
/// A message that found the queue full.
pub const QUEUE_FULL_TEXT: &str =
    "The agent is not connected and too many messages are waiting; this one was not kept. Please send it again later.";
/// At most this many delivery-only connections at once.
pub const MAX_DELIVER_PEERS: usize = 8;

#[derive(Debug)]
struct Peer {
    /// `None` until its `hello`.
    role: Option<LinkRole>,
    inline: bool,
    /// Over `/agent`: its `hello` must carry the agent token.
    needs_token: bool,
    /// Where it connects from: failed agent hellos are throttled like phones' (L52).
    source: SourceKey,
}

#[derive(Debug)]
struct Queued {
    at: Time,
    event: AgentEvent,
    file: Option<FileHandover>,
    bytes: usize,
}

#[derive(Debug)]
pub struct AgentLink {
    gateway: String,
    prompt_ttl_secs: u64,
    token: Option<String>,
    limits: QueueLimits,
    peers: HashMap<PeerId, Peer>,
    /// Failed `/agent` hellos per source address (L52).
    throttle: Throttle,
    /// The peer that is the agent (said `hello` with role `agent`).
    agent: Option<PeerId>,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    /// Devices that were handed a message and have had no `end_turn` since; `true` once
    /// nothing is to be sent again if the agent goes: it sent a finished reply (its turn
    /// may end without a word from us), or the message's line never reached it and goes to
    /// the next agent ([`Self::handle_unwritten`]).
    in_flight: HashMap<DeviceId, bool>,
    /// An agent replaced by a new one, and its turns in flight: they end when its
    /// connection has (after the server told which of its lines it never had).
    replaced: Option<(PeerId, HashMap<DeviceId, bool>)>,
    /// Devices told that the agent is away, during this absence.
    told_away: HashSet<DeviceId>,
    online: HashMap<DeviceId, OnlineDevice>,
    outputs: VecDeque<LinkOutput>,
    notices: u64,
}

impl AgentLink {
    /// `token`: the `/agent` token, if that route is open.
    pub fn new(gateway: &str, prompt_ttl_secs: u64, token: Option<String>, limits: QueueLimits) -> AgentLink {
        AgentLink {
            gateway: gateway.to_owned(),
            prompt_ttl_secs,
            token,
            limits,
            peers: HashMap::new(),
            throttle: Throttle::default(),
            agent: None,
            queue: VecDeque::new(),
            queued_bytes: 0,
            in_flight: HashMap::new(),
            replaced: None,
            told_away: HashSet::new(),
            online: HashMap::new(),
            outputs: VecDeque::new(),
            notices: 0,
        }
    }

    /// The peer's role once its `hello` was accepted.
    pub fn role_of(&self, peer: PeerId) -> Option<LinkRole> {
        self.peers.get(&peer).and_then(|p| p.role)
    }

    pub fn is_attached(&self) -> bool {
        self.agent.is_some()
    }

    /// Events waiting for an agent, and their bytes.
    pub fn queued(&self) -> (usize, usize) {
        (self.queue.len(), self.queued_bytes)
    }

    pub fn poll_output(&mut self) -> Option<LinkOutput> {
        self.outputs.pop_front()
    }

    /// A new connection; `needs_token` for `/agent`.
    pub fn handle_peer_open(&mut self, peer: PeerId, needs_token: bool) {
        self.handle_peer_open_from(peer, needs_token, SourceKey::default());
    }

    /// A new connection from `source` (whose failed agent hellos are counted, L52).
    pub fn handle_peer_open_from(&mut self, peer: PeerId, needs_token: bool, source: SourceKey) {
        self.peers.insert(
            peer,
            Peer {
                role: None,
                inline: false,
                needs_token,
                source,
            },
        );
    }

    /// Owed events whose lines never reached the agent (told before its end): the gateway
    /// reads them back for the next agent (L64), so a phone whose message is among them is
    /// not asked to send it again (L41). A device's lines are written in order, so its
    /// unwritten message is its latest.
    pub fn handle_unwritten(&mut self, keys: &[EventKey]) {
        for key in keys.iter().filter(|k| k.key.starts_with("m:")) {
            let replaced = self.replaced.as_mut().map(|(_, turns)| turns);
            for turns in std::iter::once(&mut self.in_flight).chain(replaced) {
                if let Some(nothing_to_resend) = turns.get_mut(&key.device) {
                    *nothing_to_resend = true;
                }
            }
        }
    }

    /// A connection ended (by either side). If it was the agent, its turns in flight are
    /// ended for the phones.
    pub fn handle_peer_closed(&mut self, _now: Time, peer: PeerId) {
        self.peers.remove(&peer);
        if self.agent == Some(peer) {
            self.agent = None;
            let turns = std::mem::take(&mut self.in_flight);
            self.end_turns(turns);
        }
        if self.replaced.as_ref().is_some_and(|(old, _)| *old == peer) {
            if let Some((_, turns)) = self.replaced.take() {
                self.end_turns(turns);
            }
        }
    }

    fn end_turns(&mut self, turns: HashMap<DeviceId, bool>) {
        let mut devices: Vec<(DeviceId, bool)> = turns.into_iter().collect();
        devices.sort();
        for (device, answered) in devices {
            if answered {
                // It had its answer, or its message goes to the next agent: only the
                // typing indicator stops.
                self.end_turn(&device);
            } else {
                log::info!("device {device:?}: turn ended, the agent went away");
                self.notice(&device, AGENT_LOST_TEXT);
            }
        }
    }

    /// A message and an end of turn for `device`, from the gateway itself. It goes as a
    /// delivery (S4), so its message id is the gateway's own and can never meet an
    /// agent's; a phone that is gone simply does not get it.
    fn notice(&mut self, device: &DeviceId, text: &str) {
        self.notices += 1;
        let notice = AgentCommand::Deliver {
            sender: "gateway".into(),
            id: format!("notice-{}", self.notices),
            target: device.as_str().to_owned(),
            text: Some(text.to_owned()),
            file: None,
        };
        self.command(None, LinkCommand::Ready(notice));
        self.end_turn(device);
    }

    fn end_turn(&mut self, device: &DeviceId) {
        let end = AgentCommand::EndTurn { device: device.clone() };
        self.command(None, LinkCommand::Ready(end));
    }

    fn command(&mut self, origin: Option<Origin>, command: LinkCommand) {
        let origin = origin.unwrap_or(Origin {
            peer: None,
            reference: None,
        });
        self.outputs.push_back(LinkOutput::Command {
            origin,
            command: Box::new(command),
        });
    }

    fn write(&mut self, peer: PeerId, line: String) {
        self.outputs.push_back(LinkOutput::Write { peer, line, owed: None });
    }

    fn refuse(&mut self, peer: PeerId, error: LineError) {
        log::debug!(
            "agent link peer {}: {} {}",
            peer.0,
            error.code,
            error.message.escape_debug()
        );
        self.write(peer, error_line(&error));
    }

    /// L39's agent token behind L52's throttle: a blocked address is refused without its
    /// token being compared, so a block is never a guess; a wrong token counts against it.
    fn check_agent_token(&mut self, now: Time, source: SourceKey, given: Option<&str>) -> Result<(), LineError> {
        if let Some(left) = self.throttle.blocked(source, now) {
            let message = format!(
                "too many failed attempts; try again in {} s",
                left.as_millis().div_ceil(1000)
            );
            return Err(LineError::new("auth_failed", message));
        }
        let expected = self.token.as_deref().unwrap_or("");
        if !expected.is_empty() && ct_eq(given.unwrap_or("").as_bytes(), expected.as_bytes()) {
            return Ok(());
        }
        if let Some(block) = self.throttle.record_failure(source, now) {
            log::warn!("agent link: failed agent hellos from one address; refusing it for {block:?} (L52)");
        }
        Err(LineError::new("auth_failed", "wrong or missing agent token"))
    }

    /// The line was over the limit (skipped by the reader).
    pub fn handle_too_big(&mut self, peer: PeerId) {
        self.refuse(
            peer,
            LineError::new("too_big", format!("line over {} bytes", crate::limits::MAX_FRAME_BYTES)),
        );
    }

    /// One line from a peer, without its newline.
    pub fn handle_line(&mut self, now: Time, peer: PeerId, line: &[u8]) {
        let Some(state) = self.peers.get(&peer) else { return };
        if line.iter().all(u8::is_ascii_whitespace) {
            return; // a blank line (or an empty WebSocket message) means nothing
        }
        let role = state.role;
        let remote = state.needs_token;
        let parsed = match parse_agent_line(line) {
            Ok(parsed) => parsed,
            Err(e) => return self.refuse(peer, e),
        };
        match (parsed, role) {
            (AgentLine::Hello(hello), None) => {
                if state.needs_token {
                    let source = state.source;
                    if let Err(refusal) = self.check_agent_token(now, source, hello.token.as_deref()) {
                        self.refuse(peer, refusal);
                        // Forgotten now: nothing more it sends on this connection counts.
                        self.peers.remove(&peer);
                        return self.close(peer, "agent token refused");
                    }
                }
                if hello.version != LINK_VERSION {
                    let message = format!("this gateway speaks version {LINK_VERSION}");
                    self.refuse(peer, LineError::new("unsupported_version", message));
                    self.peers.remove(&peer);
                    return self.close(peer, "unsupported version");
                }
                match hello.role {
                    LinkRole::Deliver => {
                        let delivering = self
                            .peers
                            .values()
                            .filter(|p| p.role == Some(LinkRole::Deliver))
                            .count();
                        if delivering >= MAX_DELIVER_PEERS {
                            self.refuse(peer, LineError::new("busy", "too many delivery connections"));
                            self.peers.remove(&peer);
                            return self.close(peer, "too many delivery connections");
                        }
                        if let Some(p) = self.peers.get_mut(&peer) {
                            p.role = Some(LinkRole::Deliver);
                        }
                        log::debug!("agent link peer {}: delivery connection {:?}", peer.0, hello.agent);
                        let welcome = welcome_line(&self.gateway, self.prompt_ttl_secs, &[]);
                        self.write(peer, welcome);
                    }
                    LinkRole::Agent => self.attach(now, peer, hello.agent, hello.inline),
                }
            }
            (AgentLine::Hello(_), Some(_)) => self.refuse(peer, LineError::new("bad_line", "hello was already said")),
            (AgentLine::Command { reference, .. }, None) => {
                let e = LineError {
                    reference,
                    code: "hello_required",
                    message: "say hello first".into(),
                };
                self.refuse(peer, e)
            }
            (AgentLine::Command { reference, command }, Some(LinkRole::Deliver)) if !command.is_deliver() => {
                let e = LineError {
                    reference,
                    code: "forbidden",
                    message: "a delivery connection may only deliver".into(),
                };
                self.refuse(peer, e)
            }
            (
                AgentLine::Command {
                    reference,
                    command: LinkCommand::NeedsFile { .. },
                },
                Some(_),
            ) if remote => {
                // An agent on another host names files on its own host, not this one: a
                // path would let it read whatever the gateway can (its token included).
                let e = LineError {
                    reference,
                    code: "forbidden",
                    message: "an agent over /agent sends files as data, not path".into(),
                };
                self.refuse(peer, e)
            }
            (AgentLine::Command { reference, mut command }, Some(role)) => {
                if let LinkCommand::Ready(AgentCommand::Deliver { sender, .. })
                | LinkCommand::NeedsFile {
                    command: AgentCommand::Deliver { sender, .. },
                    ..
                } = &mut command
                {
                    // S4's window is the link's, whichever of its connections delivers.
                    *sender = "link".to_owned();
                }
                if role == LinkRole::Agent {
                    match &command {
                        LinkCommand::Ready(AgentCommand::EndTurn { device }) => {
                            self.in_flight.remove(device);
                        }
                        LinkCommand::Ready(AgentCommand::Reply { device, done: true, .. }) => {
                            if let Some(answered) = self.in_flight.get_mut(device) {
                                *answered = true;
                            }
                        }
                        _ => {}
                    }
                }
                self.command(
                    Some(Origin {
                        peer: Some(peer),
                        reference,
                    }),
                    command,
                )
            }
        }
    }

    fn close(&mut self, peer: PeerId, reason: &str) {
        self.outputs.push_back(LinkOutput::Close {
            peer,
            reason: reason.to_owned(),
        });
    }

    fn attach(&mut self, now: Time, peer: PeerId, name: String, inline: bool) {
        if let Some(old) = self.agent.take() {
            log::info!("agent link: a new agent {name:?} replaces the one on peer {}", old.0);
            // Said before the close, so that an agent can tell "replaced" from a crash and
            // not fight the new one for the link.
            self.refuse(
                old,
                LineError::new("replaced", "another agent said hello; this link is closed"),
            );
            self.peers.remove(&old);
            self.close(old, "replaced by a new agent");
            // Its turns end once its connection has, when the server has said which of its
            // lines it never had (those go to this agent: L41, L64).
            if let Some((_, earlier)) = self.replaced.take() {
                self.end_turns(earlier);
            }
            self.replaced = Some((old, std::mem::take(&mut self.in_flight)));
        } else {
            log::info!("agent link: agent {name:?} attached");
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            p.role = Some(LinkRole::Agent);
            p.inline = inline;
        }
        self.agent = Some(peer);
        self.told_away.clear();
        let mut online: Vec<OnlineDevice> = self.online.values().cloned().collect();
        online.sort_by(|a, b| a.device.cmp(&b.device));
        let welcome = welcome_line(&self.gateway, self.prompt_ttl_secs, &online);
        self.write(peer, welcome);
        let max_age = self.limits.max_age;
        let mut expired = 0;
        while let Some(q) = self.queue.pop_front() {
            self.queued_bytes -= q.bytes;
            if now.since(q.at) >= max_age {
                expired += 1;
                self.handed(&q.event);
                continue;
            }
            self.hand_over(peer, inline, &q.event, q.file.as_ref());
        }
        if expired > 0 {
            log::warn!("agent link: {expired} queued events were older than {max_age:?} and were dropped");
        }
    }

    fn hand_over(&mut self, peer: PeerId, inline: bool, event: &AgentEvent, file: Option<&FileHandover>) {
        if let AgentEvent::MessageReceived { device, .. } = event {
            self.in_flight.insert(device.clone(), false);
        }
        let inline_file = FileHandover::Inline;
        let file = if inline { Some(&inline_file) } else { file };
        let line = event_line(event, file);
        let owed = EventKey::of(event);
        self.outputs.push_back(LinkOutput::Write { peer, line, owed });
    }

    fn handed(&mut self, event: &AgentEvent) {
        if let Some(key) = EventKey::of(event) {
            self.outputs.push_back(LinkOutput::Handed(key));
        }
    }

    /// An event of the core, with where its file is if it has one.
    pub fn handle_event(&mut self, now: Time, event: AgentEvent, file: Option<FileHandover>) {
        match &event {
            AgentEvent::DeviceOnline { device, name, user } => {
                let entry = OnlineDevice {
                    device: device.clone(),
                    name: name.clone(),
                    user: user.clone(),
                };
                self.online.insert(device.clone(), entry);
            }
            AgentEvent::DeviceOffline { device } => {
                self.online.remove(device);
            }
            _ => {}
        }
        if let Some(peer) = self.agent {
            let inline = self.peers.get(&peer).is_some_and(|p| p.inline);
            return self.hand_over(peer, inline, &event, file.as_ref());
        }
        let queued = matches!(
            event,
            AgentEvent::MessageReceived { .. } | AgentEvent::PromptAnswered { .. } | AgentEvent::PromptExpired { .. }
        );
        if !queued {
            return; // typing and presence are of the moment; `welcome` lists who is online
        }
        self.expire_queue(now);
        let bytes = event_bytes(&event);
        let device = event.device().clone();
        let is_message = matches!(event, AgentEvent::MessageReceived { .. });
        if self.queue.len() >= self.limits.events || self.queued_bytes + bytes > self.limits.bytes {
            let stays_owed = matches!(
                event,
                AgentEvent::MessageReceived { redelivered: true, .. }
                    | AgentEvent::PromptAnswered { .. }
                    | AgentEvent::PromptExpired { .. }
            );
            if stays_owed {
                // Its phone had `received` long ago, or saw its card close, and nobody could
                // send it again: it stays owed, for the next start (L64).
                log::warn!("device {device:?}: the agent is away and its queue is full; an event it is owed waits for the next start (if a journal keeps it)");
                return;
            }
            log::warn!("device {device:?}: the agent is away and its queue is full; an event was not kept");
            self.handed(&event);
            if is_message {
                self.notice(&device, QUEUE_FULL_TEXT);
            }
            return;
        }
        self.queued_bytes += bytes;
        self.queue.push_back(Queued {
            at: now,
            event,
            file,
            bytes,
        });
        if is_message {
            if self.told_away.insert(device.clone()) {
                self.notice(&device, AGENT_AWAY_TEXT);
            } else {
                self.end_turn(&device); // typing stops; nobody is working on it yet
            }
        }
    }

    fn expire_queue(&mut self, now: Time) {
        while let Some(front) = self.queue.front() {
            if now.since(front.at) < self.limits.max_age {
                break;
            }
            if let Some(q) = self.queue.pop_front() {
                log::warn!(
                    "device {:?}: an event waited {:?} for the agent and was dropped",
                    q.event.device(),
                    self.limits.max_age
                );
                self.queued_bytes -= q.bytes;
                self.handed(&q.event);
            }
        }
    }

    /// What the core did with a command from `origin`.
    pub fn handle_outcome(&mut self, origin: &Origin, outcome: Result<&Accepted, &CommandError>) {
        let Some(peer) = origin.peer else { return };
        if !self.peers.contains_key(&peer) {
            return;
        }
        match (outcome, &origin.reference) {
            (Ok(accepted), Some(reference)) => {
                let device = match accepted {
                    Accepted::Delivered(device) => Some(device),
                    Accepted::Kept { then, .. } => match then.as_ref() {
                        Accepted::Delivered(device) => Some(device),
                        _ => None,
                    },
                    Accepted::Done => None,
                };
                let line = ok_line(reference, device);
                self.write(peer, line);
            }
            (Ok(_), None) => {}
            (Err(e), reference) => {
                let error = LineError {
                    reference: reference.clone(),
                    code: e.code(),
                    message: e.to_string(),
                };
                self.refuse(peer, error);
            }
        }
    }

    /// A command's file could not be read; nothing was applied.
    pub fn handle_file_error(&mut self, origin: &Origin, code: &'static str, message: String) {
        let Some(peer) = origin.peer else { return };
        let error = LineError {
            reference: origin.reference.clone(),
            code,
            message,
        };
        self.refuse(peer, error);
    }
}

/// What a queued event holds in memory.
fn event_bytes(event: &AgentEvent) -> usize {
    256 + match event {
        AgentEvent::MessageReceived { text, audio, file, .. } => {
            text.as_ref().map_or(0, String::len)
                + audio.as_ref().map_or(0, |a| a.data.len())
                + file.as_ref().map_or(0, |f| f.data.len() + f.filename.len())
        }
        AgentEvent::PromptAnswered { text, label, .. } => {
            text.as_ref().map_or(0, String::len) + label.as_ref().map_or(0, String::len)
        }
        _ => 0,
    }
}
