//! The agent port's I/O vocabulary: what a pure agent asks of the world, and what comes
//! back. One set of words for every backend (issue 17): the HTTP agents make calls, the
//! link writes lines to its peers, and both read and write files; the event loop carries
//! each out with the HTTP client, the link's transports or the file worker, and knows no
//! backend by name. These types belong to the port, so a pure agent imports nothing of
//! the I/O that serves it.

use std::path::PathBuf;

use hermes_mobile::agent_link::PeerId;
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::upstream::ResponseHead;

/// Names a call; chosen by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallId(pub u64);

/// Names a file read; chosen by the agent.
pub type LoadTag = u64;

/// Work an agent asks the event loop to do.
pub enum AgentIo {
    /// A whole HTTP/1.1 request (it may carry a key: never logged). Its news comes back
    /// through `handle_call`.
    Call { id: CallId, request: Vec<u8> },
    /// Drop a call: nothing more of it is wanted.
    Cancel(CallId),
    /// Read a file, at most `limit` bytes; the answer comes back through `handle_loaded`.
    Load { tag: LoadTag, path: PathBuf, limit: usize },
    /// Write this file atomically (a device's conversation).
    Persist { path: PathBuf, contents: Vec<u8> },
    /// A line (with its newline) for a peer of the agent link; `owed`: the event it
    /// carries, owed to the agent until the line is written (L64).
    Write {
        peer: PeerId,
        line: String,
        owed: Option<EventKey>,
    },
    /// End a peer of the agent link.
    Close { peer: PeerId, reason: String },
    /// The agent has this event, or it was given up: the journal owes it no more (L64).
    Handed(EventKey),
}

impl std::fmt::Debug for AgentIo {
    /// Sizes rather than contents: a request may carry a key, a file anything.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentIo::Call { id, request } => write!(f, "Call({}, {} bytes)", id.0, request.len()),
            AgentIo::Cancel(id) => write!(f, "Cancel({})", id.0),
            AgentIo::Load { tag, path, limit } => write!(f, "Load({tag}, {path:?}, {limit})"),
            AgentIo::Persist { path, contents } => write!(f, "Persist({path:?}, {} bytes)", contents.len()),
            AgentIo::Write { peer, line, .. } => write!(f, "Write({}, {} bytes)", peer.0, line.len()),
            AgentIo::Close { peer, reason } => write!(f, "Close({}, {reason:?})", peer.0),
            AgentIo::Handed(key) => write!(f, "Handed({:?}, {:?})", key.device, key.key),
        }
    }
}

/// What happened to a call, in order: `Head`, `Body`…, then `End` or `Failed`.
#[derive(Debug)]
pub enum CallEvent {
    Head(ResponseHead),
    Body(Vec<u8>),
    End,
    Failed(CallError),
}

/// Why a call ended without a whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The name did not resolve.
    Resolve(String),
    /// No address accepted the connection.
    Connect(String),
    /// The TLS handshake or a record failed (a certificate not trusted, most often).
    Tls(String),
    /// Nothing came in time: `"connect"`, `"first byte"` or `"idle"`.
    Timeout(&'static str),
    /// The connection broke or the answer was not HTTP.
    Broken(String),
    /// The client's limit of open calls is reached.
    Busy,
}

impl CallError {
    /// Whether nothing of the request can have had an effect upstream: safe to retry.
    pub fn before_request(&self) -> bool {
        matches!(
            self,
            CallError::Resolve(_) | CallError::Connect(_) | CallError::Busy | CallError::Timeout("connect")
        )
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Resolve(e) => write!(f, "the name did not resolve ({e})"),
            CallError::Connect(e) => write!(f, "cannot connect ({e})"),
            CallError::Tls(e) => write!(f, "TLS failed ({e})"),
            CallError::Timeout(what) => write!(f, "timed out waiting for the {what}"),
            CallError::Broken(e) => write!(f, "the connection broke ({e})"),
            CallError::Busy => write!(f, "too many requests open"),
        }
    }
}

/// Why a file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    TooBig,
    Unreadable(String),
}

/// What the event loop's transports saw of an agent-link peer.
#[derive(Debug)]
pub enum PeerInput<'a> {
    /// A peer connected; `needs_token`: it came over the network (`/agent`), from
    /// `source` (whose failed hellos are throttled, L52).
    Opened {
        peer: PeerId,
        needs_token: bool,
        source: hermes_mobile::throttle::SourceKey,
    },
    Line {
        peer: PeerId,
        line: &'a [u8],
    },
    /// A line over the limit was skipped (or ended a WebSocket peer).
    TooBig {
        peer: PeerId,
    },
    Closed {
        peer: PeerId,
    },
}
