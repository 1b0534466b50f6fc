//! The agent port as the server drives it. An agent is sans-IO like the core: events and time
//! go in, commands come out, and the event loop owns every clock and socket. The demo agent
//! is embedded; agents behind a child process or an HTTP API fit the same trait.

pub mod demo;
pub mod http;
pub mod link;

use hermes_mobile::agent_link::FileHandover;
use hermes_mobile::{Accepted, AgentCommand, AgentEvent, CommandError, DeviceId, MessageId, PromptId, Time};

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

pub trait Agent {
    /// Something happened on the gateway. A message's file or voice note was saved first;
    /// `file` says where (or why it could not be).
    fn handle_event(&mut self, now: Time, event: AgentEvent, file: Option<FileHandover>);
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
    /// The agent link, for the server's transports; `None` for an embedded agent.
    fn link_agent(&mut self) -> Option<&mut link::LinkAgent> {
        None
    }
    /// The HTTP agent (`openai:`, `hermes:`), for the server's HTTP client; `None` otherwise.
    fn http_agent(&mut self) -> Option<&mut http::HttpAgent> {
        None
    }
}
