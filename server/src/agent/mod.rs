//! The agent port as the server drives it. An agent is sans-IO like the core: events and time
//! go in, commands come out, and the event loop owns every clock and socket. The demo agent
//! is embedded; agents behind a child process or an HTTP API fit the same trait.

pub mod demo;

use hermes_mobile::{AgentCommand, AgentEvent, Time};

pub trait Agent {
    /// Something happened on the gateway.
    fn handle_event(&mut self, now: Time, event: AgentEvent);
    /// Time passed; safe to call early.
    fn handle_timeout(&mut self, now: Time);
    /// The next command for the gateway. Drain until `None` after every `handle_*`.
    fn poll_command(&mut self) -> Option<AgentCommand>;
    /// When `handle_timeout` should next be called.
    fn poll_timeout(&self) -> Option<Time>;
}
