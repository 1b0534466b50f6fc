//! The agent link: the gateway's agent port as JSON lines (docs/agent-protocol.md), for an
//! agent that is not embedded: a child process, a Unix socket peer, or `/agent`.
//!
//! Three pieces, each sans-IO: [`LineReader`] cuts a byte stream into bounded lines, the
//! codec parses and writes lines, and [`AgentLink`] keeps the link's state (who is
//! attached, what waits for an agent, which turns are in flight). The server carries the
//! bytes and reads the files a command names.

mod codec;
mod lines;
mod session;

pub use codec::{
    event_line, file_of, parse_agent_line, AgentLine, FileHandover, LineError, LinkCommand, LinkHello, LinkRole,
    OnlineDevice, LINK_VERSION,
};
pub use lines::{LineItem, LineReader};
pub use session::{
    AgentLink, LinkOutput, Origin, PeerId, QueueLimits, AGENT_AWAY_TEXT, AGENT_LOST_TEXT, MAX_DELIVER_PEERS,
    QUEUE_FULL_TEXT,
};

/// Whether two tokens are equal, in constant time (for checks like "the agent token must
/// not be the app token").
pub fn tokens_equal(a: &str, b: &str) -> bool {
    crate::auth::ct_eq(a.as_bytes(), b.as_bytes())
}
