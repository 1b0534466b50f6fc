//! The agent port as the server drives it. An agent is sans-IO like the core: events and time
//! go in, commands and I/O requests ([`AgentIo`]) come out, and the event loop owns every
//! clock and socket. [`Agent`] is the one thing the loop holds: an enum of the backends
//! (the embedded demo, the agent link, the HTTP agents), so that the loop never asks which
//! one it has, and each backend's own work reaches it only in the port's vocabulary.

pub mod demo;
pub mod http;
pub mod io;
pub mod link;

use hermes_mobile::agent_link::{FileHandover, PeerId};
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::{Accepted, AgentCommand, AgentEvent, CommandError, DeviceId, MessageId, PromptId, Time};

use io::{AgentIo, CallEvent, CallId, LoadError, LoadTag, PeerInput};

/// What a command the gateway refused was about, so that the agent can stop what it was
/// doing (a stream that will never be shown, a card that was never opened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Reply {
        device: DeviceId,
        message: MessageId,
    },
    Prompt {
        device: DeviceId,
        prompt: PromptId,
    },
    Other {
        device: DeviceId,
    },
    /// A `deliver`, addressed by target rather than device.
    Delivery {
        id: String,
    },
}

impl Refused {
    /// Taken before the command is handed over (it is moved, and may carry a file).
    pub fn of(command: &AgentCommand) -> Refused {
        match command {
            AgentCommand::Reply { device, message, .. } => Refused::Reply {
                device: device.clone(),
                message: message.clone(),
            },
            AgentCommand::OpenPrompt { device, prompt, .. } => Refused::Prompt {
                device: device.clone(),
                prompt: prompt.clone(),
            },
            AgentCommand::SendFile { device, .. }
            | AgentCommand::Typing { device }
            | AgentCommand::Avatar { device, .. }
            | AgentCommand::EndTurn { device } => Refused::Other { device: device.clone() },
            AgentCommand::Deliver { id, .. } => Refused::Delivery { id: id.clone() },
        }
    }
}

/// The half every backend shares: events and time in, commands out.
pub trait PureAgent {
    /// Something happened on the gateway.
    fn handle_event(&mut self, now: Time, event: AgentEvent);
    /// Time passed; safe to call early.
    fn handle_timeout(&mut self, now: Time);
    /// The next command for the gateway. Drain until `None` after every `handle_*`.
    fn poll_command(&mut self) -> Option<AgentCommand>;
    /// When `handle_timeout` should next be called.
    fn poll_timeout(&self) -> Option<Time>;
    /// The gateway refused a command (nothing of it was sent).
    fn handle_refused(&mut self, _now: Time, _what: Refused, _error: &CommandError) {}
    /// The gateway carried out the last command.
    fn handle_accepted(&mut self, _now: Time, _accepted: &Accepted) {}
    /// The journal committed everything up to `ticket` (`Accepted::Kept`), or could not
    /// (`kept: false`).
    fn handle_committed(&mut self, _now: Time, _ticket: u64, _kept: bool) {}
    /// An owed event (a message, a card's answer or expiry) the agent is done with: its
    /// answer was given, or it was dropped for good (L64). Until then the journal keeps it,
    /// and a restart hands it over again. Drain until `None` after every `handle_*`.
    fn poll_handed(&mut self) -> Option<EventKey> {
        None
    }
}

/// The agent the event loop drives.
pub enum Agent {
    Demo(demo::DemoAgent),
    Link(link::LinkAgent),
    Http(http::HttpAgent),
}

impl Agent {
    fn pure(&mut self) -> &mut dyn PureAgent {
        match self {
            Agent::Demo(a) => a,
            Agent::Link(a) => a,
            Agent::Http(a) => a,
        }
    }

    /// Something happened on the gateway. A message's file or voice note was saved first;
    /// `file` says where (or why it could not be): the link hands that over, the others
    /// have the bytes in the event.
    ///
    /// No backend is done with an owed event the moment it takes it (L64). Each says so
    /// later: the link through the line that carries it (written whole) or as
    /// [`AgentIo::Handed`] when it gave it up, an in-process agent as [`AgentIo::Handed`]
    /// once its answer has ended or it dropped the event (a message can wait behind a turn
    /// for up to 30 minutes, L44).
    pub fn handle_event(&mut self, now: Time, event: AgentEvent, file: Option<FileHandover>) {
        match self {
            Agent::Link(a) => a.handle_saved_event(now, event, file),
            other => other.pure().handle_event(now, event),
        }
    }

    pub fn handle_timeout(&mut self, now: Time) {
        self.pure().handle_timeout(now)
    }

    pub fn poll_command(&mut self) -> Option<AgentCommand> {
        self.pure().poll_command()
    }

    pub fn poll_timeout(&mut self) -> Option<Time> {
        self.pure().poll_timeout()
    }

    pub fn handle_refused(&mut self, now: Time, what: Refused, error: &CommandError) {
        self.pure().handle_refused(now, what, error)
    }

    pub fn handle_accepted(&mut self, now: Time, accepted: &Accepted) {
        self.pure().handle_accepted(now, accepted)
    }

    pub fn handle_committed(&mut self, now: Time, ticket: u64, kept: bool) {
        self.pure().handle_committed(now, ticket, kept)
    }

    /// The next piece of work for the loop. Drain until `None` after every `handle_*`.
    pub fn poll_io(&mut self) -> Option<AgentIo> {
        // The in-process agents say which owed events they are done with; the link says
        // it of the lines it wrote, through its own `AgentIo::Handed`.
        if let Some(key) = self.pure().poll_handed() {
            return Some(AgentIo::Handed(key));
        }
        match self {
            Agent::Demo(_) => None,
            Agent::Link(a) => a.poll_io(),
            Agent::Http(a) => a.poll_io(),
        }
    }

    /// News of a call the agent made.
    pub fn handle_call(&mut self, now: Time, id: CallId, event: CallEvent) {
        if let Agent::Http(a) = self {
            a.handle_call(now, id, event);
        }
    }

    /// A file the agent asked for was read (or not).
    pub fn handle_loaded(&mut self, now: Time, tag: LoadTag, result: Result<Vec<u8>, LoadError>) {
        match self {
            Agent::Demo(_) => {}
            Agent::Link(a) => a.handle_loaded(tag, result),
            Agent::Http(a) => a.handle_loaded(now, tag, result),
        }
    }

    /// Owed events whose lines died unwritten with a link peer, told before its end.
    pub fn handle_link_unwritten(&mut self, keys: &[EventKey]) {
        if let Agent::Link(a) = self {
            a.handle_unwritten(keys);
        }
    }

    /// What a transport saw of a link peer (only the link has peers).
    pub fn handle_peer(&mut self, now: Time, input: PeerInput<'_>) {
        if let Agent::Link(a) = self {
            a.handle_peer(now, input);
        }
    }

    /// Whether the link's peers may be read now: not while a command waits for its file,
    /// so that lines behind it wait in the socket, not in memory (L42).
    pub fn wants_lines(&mut self) -> bool {
        match self {
            Agent::Link(a) => a.wants_lines(),
            _ => true,
        }
    }

    /// Whether a link peer's `hello` was accepted.
    pub fn peer_said_hello(&self, peer: PeerId) -> bool {
        match self {
            Agent::Link(a) => a.role_of(peer).is_some(),
            _ => false,
        }
    }

    /// The agent's state for `/healthz`: the link's peer, or the HTTP backend's reachability
    /// from its last attempt (`reachable`, `unreachable: why`, `unknown` before the first).
    pub fn health(&self) -> String {
        match self {
            Agent::Demo(_) => "connected".into(),
            Agent::Link(a) if a.is_attached() => "connected".into(),
            Agent::Link(_) => "disconnected".into(),
            Agent::Http(a) => match a.reach() {
                http::Reach::Unknown => "unknown".into(),
                http::Reach::Reachable => "reachable".into(),
                http::Reach::Unreachable(why) => format!("unreachable: {why}"),
            },
        }
    }
}
