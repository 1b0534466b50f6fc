//! One client connection: its HTTP head, then its WebSocket, and the frames queued for it.
//!
//! tungstenite is driven non-blocking: reads are drained until `WouldBlock`, and a
//! `WouldBlock` from a write or flush means "queued": nothing is ever written twice.
//! Frames from the core wait in `outbox`, and are handed to tungstenite one at a time, only
//! when its own buffer has drained; so tungstenite buffers at most one frame, and the
//! outbox is the one bounded place where a slow reader's backlog lives.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use mio::net::TcpStream;
use tungstenite::protocol::{frame::coding::CloseCode, CloseFrame, Role as WsRole, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use crate::http::MAX_HEAD_BYTES;
use crate::timer::KeepAlive;

mod counted;
mod lifecycle;
pub mod slots;
mod table;
mod turn;

use counted::Counted;
pub use lifecycle::Lifecycle;
pub use table::{source_of, Connections};
pub use turn::Turn;

/// Bytes of small frames gathered before tungstenite writes them out.
const WRITE_BATCH: usize = 16 * 1024;

/// Messages read from one connection per loop turn (issue 8 #14): a fast peer cannot
/// starve the others, nor pile up a turn's worth of buffers, by never reaching `WouldBlock`.
const READ_BUDGET: usize = 32;
/// Bytes of messages read from one connection per loop turn: a turn holds at most one big
/// message per connection, not 32 of 16 MiB.
const READ_BYTES_BUDGET: usize = 1024 * 1024;
/// Bytes discarded raw per call (a poisoned reader, a drained HTTP socket).
const DISCARD_BUDGET: usize = 64 * 1024;

/// The tungstenite settings for a Raspberry Pi (decisions G7, style.md). Messages are capped
/// at `MAX_PRE_HELLO_FRAME_BYTES` until the core authenticates the connection (L35), then at
/// `MAX_FRAME_BYTES` (`Conn::raise_limits`).
pub fn ws_config() -> WebSocketConfig {
    let max = hermes_mobile::limits::MAX_FRAME_BYTES;
    let before_hello = hermes_mobile::limits::MAX_PRE_HELLO_FRAME_BYTES;
    WebSocketConfig::default()
        // Small: most frames are a few hundred bytes; a big message reserves its own length
        // as its header arrives and is read 2 KiB a call. Every idle connection keeps this
        // buffer (issue 17: 4 KiB -> 2 KiB took 6.8 -> 4.9 KiB per idle connection).
        .read_buffer_size(2 * 1024)
        // Frames of one turn are gathered and written with one syscall at the end of the
        // batch (`pump` flushes); past this much, tungstenite writes as it goes.
        .write_buffer_size(WRITE_BATCH)
        // At most a batch and one frame sit in tungstenite (the largest is a ~4 MiB chunk).
        .max_write_buffer_size(max + WRITE_BATCH + 64 * 1024)
        // Refused before buffered whole (G7, L35).
        .max_message_size(Some(before_hello))
        .max_frame_size(Some(before_hello))
}

/// What discarding input found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discarded {
    /// The peer closed its side.
    Closed,
    /// Everything available is gone.
    All,
    /// The budget ran out first: discard again next turn.
    Budget,
}

/// Reads and drops what the peer has sent, up to [`DISCARD_BUDGET`] bytes.
fn discard_input(stream: &mut TcpStream) -> io::Result<Discarded> {
    let mut sink = [0u8; 4096];
    let mut dropped = 0;
    while dropped < DISCARD_BUDGET {
        match stream.read(&mut sink) {
            Ok(0) => return Ok(Discarded::Closed),
            Ok(n) => dropped += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Discarded::All),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Discarded::Budget)
}

pub enum Phase {
    /// Reading the request head.
    Http { stream: TcpStream, head: Vec<u8> },
    /// The head is read and its answer waits for a file the file worker reads (L63).
    Answer(TcpStream),
    /// Writing a response; then either upgrading or closing.
    Respond {
        stream: TcpStream,
        out: Vec<u8>,
        written: usize,
        upgrade: Option<Upgrade>,
    },
    /// A plain response is out and our side is shut: read and discard until the peer closes,
    /// so unread request bytes do not turn the close into a reset that eats the response.
    Drain(TcpStream),
    /// Speaking WebSocket, with who is at the other end.
    Ws(Box<WebSocket<Counted>>, Role),
    /// Done: waiting to be freed after the current batch of events. A WebSocket's role
    /// stays, for what its end must still undo (the core, the agent link, the log line).
    Dead(Option<Role>),
}

/// A WebSocket the response upgrades to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgrade {
    /// Bytes read past the head: the first frames.
    pub leftover: Vec<u8>,
    /// The request carried a proxy's header (S1, L53).
    pub forwarded: bool,
    /// The client's address as the proxy gave it (L52).
    pub client: Option<std::net::IpAddr>,
    /// `/agent`: an agent on the link, not a phone.
    pub agent: bool,
}

/// Who is at the other end of a WebSocket. It decides how much is read per turn (L35) and
/// where messages go: nothing here is only for logs. Part of [`Phase::Ws`], so that a plain
/// HTTP request cannot have one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Upgraded, and not yet handed to the core or the agent link.
    Unclaimed,
    /// A phone or a service, speaking Protocol v1 to the core. `device`: once its hello
    /// was accepted; until then messages are capped at `MAX_PRE_HELLO_FRAME_BYTES` and read
    /// one per loop turn, so that the core sees the hello (and the cap is raised) before
    /// anything behind it is read (L35). `in_core`: the core knows the connection.
    Phone { device: Option<String>, in_core: bool },
    /// An agent on `/agent`: its peer on the agent link (the core never sees it), and
    /// whether its hello was accepted (the same L35 caps until then).
    Agent {
        peer: hermes_mobile::agent_link::PeerId,
        hello: bool,
    },
}

pub struct Conn {
    pub generation: u32,
    pub peer: SocketAddr,
    pub accepted_at: Instant,
    /// Where the socket is: HTTP head, response, drain, WebSocket (and who is at the other
    /// end), dead. Changed only by this module's methods; the role also by
    /// [`Connections::make_agent_peer`] (an agent's outbox counts apart from the phones').
    phase: Phase,
    /// The WebSocket's open/closing/close-sent state and its deadline.
    life: Lifecycle,
    /// Frames for the peer not yet handed to tungstenite. Private: only [`Connections`]
    /// queues and pumps, so that its totals stay the sums of these (issue 17).
    outbox: VecDeque<String>,
    outbox_bytes: usize,
    /// The writer's own state: tungstenite holds a frame it could not write yet, so
    /// nothing more is written until the socket is writable (kept apart from `life`: a
    /// socket can be full in any state).
    blocked: bool,
    /// Frames were dropped unwritten after the close frame: not everything queued reached
    /// the peer (an `/agent` line's event stays owed, L64).
    discarded: bool,
    /// The reader's own state: tungstenite refused an oversized message (G7); after that
    /// its reader must not be used again, so incoming bytes are discarded raw until the
    /// peer goes.
    poisoned: bool,
    /// Why it is closing, for the close log line: set when the close is decided.
    reason: Option<String>,
    /// The client's address as a local proxy reported it, once the upgrade is read (L54
    /// groups a proxy's sockets by it).
    client: Option<std::net::IpAddr>,
}

/// How a read ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The socket said `WouldBlock`: the next readiness event brings more.
    All,
    /// The budget ran out first: read again next turn (no event will come for it).
    Budget,
}

/// What reading a WebSocket produced.
pub enum Incoming {
    /// A whole text or binary message (tungstenite's reference-counted buffer, not a copy).
    Message(tungstenite::Bytes),
    TooBig,
    InvalidUtf8,
}

impl Conn {
    pub fn new(stream: TcpStream, peer: SocketAddr, generation: u32, now: Instant) -> Conn {
        Conn {
            generation,
            peer,
            accepted_at: now,
            phase: Phase::Http {
                stream,
                head: Vec::new(),
            },
            life: Lifecycle::open(now),
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            blocked: false,
            discarded: false,
            poisoned: false,
            reason: None,
            client: None,
        }
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The request head is read: answer it with `out`, then close (a plain response) or
    /// upgrade.
    pub fn respond(&mut self, out: Vec<u8>, upgrade: Option<Upgrade>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Dead(None));
        if let Phase::Http { stream, .. } | Phase::Answer(stream) = phase {
            self.phase = Phase::Respond {
                stream,
                out,
                written: 0,
                upgrade,
            };
        }
    }

    /// The request head is read; its answer comes later ([`Conn::respond`]).
    pub fn await_answer(&mut self) {
        let phase = std::mem::replace(&mut self.phase, Phase::Dead(None));
        if let Phase::Http { stream, .. } = phase {
            self.phase = Phase::Answer(stream);
        }
    }

    /// The upgrade the written response was for, if any (asked once).
    pub fn take_upgrade(&mut self) -> Option<Upgrade> {
        match &mut self.phase {
            Phase::Respond { upgrade, .. } => upgrade.take(),
            _ => None,
        }
    }

    fn role(&self) -> Option<&Role> {
        match &self.phase {
            Phase::Ws(_, role) | Phase::Dead(Some(role)) => Some(role),
            _ => None,
        }
    }

    /// Ends it: the socket is dropped, who it was for stays. Only through
    /// [`Connections::end`], which keeps the totals.
    fn die(&mut self) {
        let role = match std::mem::replace(&mut self.phase, Phase::Dead(None)) {
            Phase::Ws(_, role) => Some(role),
            Phase::Dead(role) => role,
            _ => None,
        };
        self.phase = Phase::Dead(role);
    }

    fn role_mut(&mut self) -> Option<&mut Role> {
        match &mut self.phase {
            Phase::Ws(_, role) | Phase::Dead(Some(role)) => Some(role),
            _ => None,
        }
    }

    pub fn life(&self) -> &Lifecycle {
        &self.life
    }

    /// The WebSocket is a phone's, for the core.
    pub fn open_phone(&mut self) {
        if let Some(role) = self.role_mut() {
            *role = Role::Phone {
                device: None,
                in_core: true,
            };
        }
    }

    /// The WebSocket carries the agent link's `peer` (`/agent`).
    fn open_agent(&mut self, peer: hermes_mobile::agent_link::PeerId) {
        if let Some(role) = self.role_mut() {
            *role = Role::Agent { peer, hello: false };
        }
    }

    /// Whether the core knows this connection.
    pub fn in_core(&self) -> bool {
        matches!(self.role(), Some(Role::Phone { in_core: true, .. }))
    }

    /// The core forgets the connection (it closed it, or the server does); whether it
    /// knew it until now.
    pub fn leave_core(&mut self) -> bool {
        match self.role_mut() {
            Some(Role::Phone { in_core, .. }) => std::mem::take(in_core),
            _ => false,
        }
    }

    /// The core accepted the phone's `hello` as `device`.
    pub fn phone_authenticated(&mut self, device: String) {
        if let Some(Role::Phone { device: d, .. }) = self.role_mut() {
            *d = Some(device);
        }
        self.raise_limits();
    }

    /// The link accepted the `/agent` peer's `hello`.
    pub fn agent_authenticated(&mut self) {
        if let Some(Role::Agent { hello, .. }) = self.role_mut() {
            *hello = true;
        }
        self.raise_limits();
    }

    /// A hello was accepted: a phone's device or an agent.
    pub fn authenticated(&self) -> bool {
        matches!(
            self.role(),
            Some(Role::Phone { device: Some(_), .. } | Role::Agent { hello: true, .. })
        )
    }

    /// Who it is for the close log line: the device, "agent", or nobody yet.
    pub fn who(&self) -> Option<&str> {
        match self.role()? {
            Role::Phone { device, .. } => device.as_deref(),
            Role::Agent { hello: true, .. } => Some("agent"),
            _ => None,
        }
    }

    /// A close is decided (see [`Lifecycle::decide_close`]): `reason` goes to the peer,
    /// `log_reason` to the close log line. Its deadline.
    pub fn decide_close(&mut self, code: u16, reason: &str, log_reason: &str, now: Instant) -> Instant {
        self.reason = Some(log_reason.to_owned());
        self.life.decide_close(code, reason, now)
    }

    /// L28: the close was not over by its deadline; the log line says so.
    pub fn close_overdue(&mut self) {
        let why = self.reason.take().unwrap_or_else(|| "closing".into());
        self.reason = Some(format!("{why}; close did not finish in time"));
    }

    /// Why it ended, for the close log line: the close's reason if one was decided, else
    /// `now_why` (what ends it now).
    pub fn end_reason(&mut self, now_why: &str) -> String {
        self.reason.take().unwrap_or_else(|| now_why.to_owned())
    }

    /// K2 for an open connection: a ping asked for is sent here. `Err` ends it.
    pub fn keep_alive(&mut self, now: Instant, keepalive: std::time::Duration) -> Result<Option<KeepAlive>, String> {
        let due = self.life.keep_alive(now, keepalive);
        if let Some(KeepAlive::Ping(_)) = due {
            self.ping()?;
        }
        Ok(due)
    }

    /// Bytes of frames queued for the peer and not yet handed to tungstenite.
    pub fn queued_bytes(&self) -> usize {
        self.outbox_bytes
    }

    /// Every frame queued so far has been written to the socket.
    pub fn all_written(&self) -> bool {
        self.outbox.is_empty() && !self.blocked && !self.discarded
    }

    /// The agent-link peer this `/agent` connection carries.
    pub fn agent_peer(&self) -> Option<hermes_mobile::agent_link::PeerId> {
        match self.role() {
            Some(Role::Agent { peer, .. }) => Some(*peer),
            _ => None,
        }
    }

    pub fn stream_mut(&mut self) -> Option<&mut TcpStream> {
        match &mut self.phase {
            Phase::Http { stream, .. }
            | Phase::Answer(stream)
            | Phase::Respond { stream, .. }
            | Phase::Drain(stream) => Some(stream),
            Phase::Ws(ws, _) => Some(ws.get_mut().stream_mut()),
            Phase::Dead(_) => None,
        }
    }

    /// Reads what the socket has into the head buffer. `Ok(false)`: the peer closed.
    pub fn read_head(&mut self) -> io::Result<bool> {
        let Phase::Http { stream, head } = &mut self.phase else {
            return Ok(true);
        };
        let mut chunk = [0u8; 2048];
        loop {
            // Never read past what a head and a card answer's body may hold (plus what a
            // pipelining client sends).
            if head.len() > MAX_HEAD_BYTES + crate::card_answer::MAX_BODY_BYTES + chunk.len() {
                return Ok(true);
            }
            match stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => head.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes a pending HTTP response. `Ok(true)` once it is all out.
    pub fn write_response(&mut self) -> io::Result<bool> {
        let Phase::Respond {
            stream, out, written, ..
        } = &mut self.phase
        else {
            return Ok(true);
        };
        while *written < out.len() {
            match stream.write(&out[*written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => *written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// After a plain response: shut our side and start draining.
    pub fn start_drain(&mut self) {
        let phase = std::mem::replace(&mut self.phase, Phase::Dead(None));
        if let Phase::Respond { stream, .. } = phase {
            let _ = stream.shutdown(std::net::Shutdown::Write);
            self.phase = Phase::Drain(stream);
        }
    }

    /// Discards what the peer still sends (`Closed` also on a read error).
    pub fn drain(&mut self) -> Discarded {
        let Phase::Drain(stream) = &mut self.phase else {
            return Discarded::Closed;
        };
        discard_input(stream).unwrap_or(Discarded::Closed)
    }

    /// Switches to WebSocket with the bytes already read past the head; it is open from `now`.
    /// Only through [`Connections::upgrade`], which counts a message the leftover begins.
    fn upgrade(&mut self, leftover: Vec<u8>, client: Option<std::net::IpAddr>, now: Instant) {
        self.client = client;
        let phase = std::mem::replace(&mut self.phase, Phase::Dead(None));
        if let Phase::Respond { stream, .. } = phase {
            let stream = Counted::new(stream, &leftover);
            let ws = WebSocket::from_partially_read(stream, leftover, WsRole::Server, Some(ws_config()));
            self.phase = Phase::Ws(Box::new(ws), Role::Unclaimed);
            self.life = Lifecycle::open(now);
        }
    }

    /// Bytes of a message read in part: what tungstenite holds of it (L51).
    pub fn partial_bytes(&self) -> usize {
        match &self.phase {
            Phase::Ws(ws, _) => ws.get_ref().partial(),
            _ => 0,
        }
    }

    /// Reads whole messages, up to [`READ_BUDGET`]. `Err` ends the connection (closed or
    /// broken). Only through [`Connections::read_ws`], which keeps the partial total.
    fn read_ws(&mut self, now: Instant, into: &mut Vec<Incoming>) -> Result<Drained, String> {
        // Control frames count too: a flood of pings is work as well.
        let budget = if self.authenticated() { READ_BUDGET } else { 1 };
        let Phase::Ws(ws, _) = &mut self.phase else {
            return Ok(Drained::All);
        };
        if self.poisoned {
            return match discard_input(ws.get_mut().stream_mut()) {
                Ok(Discarded::All) => Ok(Drained::All),
                Ok(Discarded::Budget) => Ok(Drained::Budget),
                Ok(Discarded::Closed) => Err("closed by peer".into()),
                Err(e) => Err(format!("read failed: {e}")),
            };
        }
        let (mut read, mut bytes) = (0, 0);
        loop {
            if read >= budget || bytes >= READ_BYTES_BUDGET {
                return Ok(Drained::Budget);
            }
            // Every frame consumed counts, refused ones (invalid UTF-8) too.
            read += 1;
            match ws.read() {
                Ok(msg) => {
                    ws.get_mut().message_done();
                    bytes += msg.len();
                    self.life.heard(now);
                    match msg {
                        Message::Text(t) => into.push(Incoming::Message(t.into())),
                        Message::Binary(b) => into.push(Incoming::Message(b)),
                        // Pongs to pings are queued by tungstenite itself; flushed below.
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                        Message::Close(_) => {}
                    }
                }
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(tungstenite::Error::ConnectionClosed) | Err(tungstenite::Error::AlreadyClosed) => {
                    return Err("closed by peer".into())
                }
                Err(tungstenite::Error::Capacity(_)) => {
                    // Discarded raw from now on: nothing more is held for it.
                    ws.get_mut().abandon();
                    self.poisoned = true;
                    into.push(Incoming::TooBig);
                    return Ok(Drained::All);
                }
                Err(tungstenite::Error::Utf8(_)) => {
                    ws.get_mut().message_done();
                    into.push(Incoming::InvalidUtf8)
                }
                Err(e) => return Err(format!("websocket error: {e}")),
            }
        }
        Ok(Drained::All)
    }

    fn queue(&mut self, frame: String) {
        self.outbox_bytes += frame.len();
        self.outbox.push_back(frame);
    }

    /// Drops every queued frame; the bytes it let go.
    fn drop_outbox(&mut self) -> usize {
        self.outbox.clear();
        std::mem::take(&mut self.outbox_bytes)
    }

    /// Hands queued frames to tungstenite while it keeps up, then the close frame if one is
    /// due. `Err` ends the connection.
    fn pump(&mut self, now: Instant) -> Result<(), String> {
        let Phase::Ws(ws, _) = &mut self.phase else {
            return Ok(());
        };
        if self.blocked {
            match ws.flush() {
                Ok(()) => {
                    self.blocked = false;
                    if self.life.close_sent() && self.poisoned {
                        // No close reply can be read any more: end our side after the close frame.
                        let _ = ws.get_mut().stream_mut().shutdown(std::net::Shutdown::Write);
                    }
                }
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(format!("write failed: {e}")),
            }
        }
        let mut wrote = false;
        while let Some(frame) = self.outbox.pop_front() {
            self.outbox_bytes -= frame.len();
            if self.life.close_sent() {
                self.discarded = true;
                continue;
            }
            wrote = true;
            match ws.write(Message::Text(frame.into())) {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Ok(());
                }
                Err(tungstenite::Error::WriteBufferFull(_)) => return Err("client too slow".into()),
                Err(e) => return Err(format!("write failed: {e}")),
            }
        }
        if wrote {
            // One write for everything gathered in this batch.
            match ws.flush() {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Ok(());
                }
                Err(e) => return Err(format!("write failed: {e}")),
            }
        }
        if let Some((code, reason)) = self.life.take_close_frame(now) {
            let frame = CloseFrame {
                code: CloseCode::from(code),
                reason: reason.into(),
            };
            match ws.close(Some(frame)).and_then(|()| ws.flush()) {
                Ok(()) if self.poisoned => {
                    let _ = ws.get_mut().stream_mut().shutdown(std::net::Shutdown::Write);
                }
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => self.blocked = true,
                Err(_) => return Err("closed".into()),
            }
        }
        Ok(())
    }

    /// A hello was accepted: messages up to `MAX_FRAME_BYTES` from now on (L35).
    fn raise_limits(&mut self) {
        if let Phase::Ws(ws, _) = &mut self.phase {
            let max = hermes_mobile::limits::MAX_FRAME_BYTES;
            ws.set_config(|c| {
                c.max_message_size = Some(max);
                c.max_frame_size = Some(max);
            });
        }
    }

    /// Sends a WebSocket ping (decisions K2).
    fn ping(&mut self) -> Result<(), String> {
        let Phase::Ws(ws, _) = &mut self.phase else {
            return Ok(());
        };
        if self.blocked || self.life.close_sent() {
            return Ok(());
        }
        match ws.write(Message::Ping(Vec::new().into())).and_then(|()| ws.flush()) {
            Ok(()) => Ok(()),
            Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                self.blocked = true;
                Ok(())
            }
            Err(e) => Err(format!("ping failed: {e}")),
        }
    }
}
