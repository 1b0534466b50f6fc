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
use tungstenite::protocol::{frame::coding::CloseCode, CloseFrame, Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use crate::http::MAX_HEAD_BYTES;

mod table;

pub use table::Connections;

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
/// `MAX_FRAME_BYTES` ([`Conn::authenticated`]).
pub fn ws_config() -> WebSocketConfig {
    let max = hermes_mobile::limits::MAX_FRAME_BYTES;
    let before_hello = hermes_mobile::limits::MAX_PRE_HELLO_FRAME_BYTES;
    WebSocketConfig::default()
        // Small: most frames are a few hundred bytes; big ones grow the buffer as they come.
        .read_buffer_size(4 * 1024)
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
    /// Writing a response; then either upgrading (with the bytes read past the head) or closing.
    Respond {
        stream: TcpStream,
        out: Vec<u8>,
        written: usize,
        upgrade: Option<(Vec<u8>, bool, bool)>,
    },
    /// A plain response is out and our side is shut: read and discard until the peer closes,
    /// so unread request bytes do not turn the close into a reset that eats the response.
    Drain(TcpStream),
    /// Speaking WebSocket.
    Ws(Box<WebSocket<TcpStream>>),
    /// Done: waiting to be freed after the current batch of events.
    Dead,
}

pub struct Conn {
    pub generation: u32,
    pub peer: SocketAddr,
    pub accepted_at: Instant,
    pub phase: Phase,
    /// Frames for the peer not yet handed to tungstenite. Private: only [`Connections`]
    /// queues and pumps, so that its totals stay the sums of these (issue 17).
    outbox: VecDeque<String>,
    outbox_bytes: usize,
    /// tungstenite holds a frame it could not write yet: wait for writable.
    pub blocked: bool,
    /// Close with this once the outbox has drained (the core has forgotten the connection).
    pub close_after: Option<(u16, String)>,
    /// Our close frame is out; waiting for the peer's.
    pub closing: bool,
    /// tungstenite refused an oversized message (G7); after that its reader must not be used
    /// again, so incoming bytes are discarded raw until the peer goes.
    pub poisoned: bool,
    /// Whether the core knows this connection.
    pub in_core: bool,
    pub last_rx: Instant,
    pub pinged: bool,
    /// The device, once authenticated (for logs). Until then messages are capped at
    /// `MAX_PRE_HELLO_FRAME_BYTES` and read one per loop turn, so that the core sees the
    /// hello (and the cap is raised) before anything behind it is read (L35).
    pub device: Option<String>,
    /// Why it ended, for the close log line.
    pub reason: Option<String>,
    /// An `/agent` WebSocket: its peer on the agent link (the core never sees it). Set only
    /// through [`Connections::make_agent_peer`]: its outbox counts apart from the phones'.
    agent_peer: Option<hermes_mobile::agent_link::PeerId>,
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
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            blocked: false,
            close_after: None,
            closing: false,
            poisoned: false,
            in_core: false,
            last_rx: now,
            pinged: false,
            device: None,
            reason: None,
            agent_peer: None,
        }
    }

    /// Bytes of frames queued for the peer and not yet handed to tungstenite.
    pub fn queued_bytes(&self) -> usize {
        self.outbox_bytes
    }

    /// The agent-link peer this `/agent` connection carries.
    pub fn agent_peer(&self) -> Option<hermes_mobile::agent_link::PeerId> {
        self.agent_peer
    }

    pub fn stream_mut(&mut self) -> Option<&mut TcpStream> {
        match &mut self.phase {
            Phase::Http { stream, .. } | Phase::Respond { stream, .. } | Phase::Drain(stream) => Some(stream),
            Phase::Ws(ws) => Some(ws.get_mut()),
            Phase::Dead => None,
        }
    }

    /// Reads what the socket has into the head buffer. `Ok(false)`: the peer closed.
    pub fn read_head(&mut self) -> io::Result<bool> {
        let Phase::Http { stream, head } = &mut self.phase else {
            return Ok(true);
        };
        let mut chunk = [0u8; 2048];
        loop {
            // Never read past what a head may hold (plus what a pipelining client sends).
            if head.len() > MAX_HEAD_BYTES + chunk.len() {
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
        let phase = std::mem::replace(&mut self.phase, Phase::Dead);
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

    /// Switches to WebSocket with the bytes already read past the head.
    pub fn upgrade(&mut self, leftover: Vec<u8>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Dead);
        if let Phase::Respond { stream, .. } = phase {
            let ws = WebSocket::from_partially_read(stream, leftover, Role::Server, Some(ws_config()));
            self.phase = Phase::Ws(Box::new(ws));
        }
    }

    /// Reads whole messages, up to [`READ_BUDGET`]. `Err` ends the connection (closed or
    /// broken).
    pub fn read_ws(&mut self, now: Instant, into: &mut Vec<Incoming>) -> Result<Drained, String> {
        let Phase::Ws(ws) = &mut self.phase else {
            return Ok(Drained::All);
        };
        if self.poisoned {
            return match discard_input(ws.get_mut()) {
                Ok(Discarded::All) => Ok(Drained::All),
                Ok(Discarded::Budget) => Ok(Drained::Budget),
                Ok(Discarded::Closed) => Err("closed by peer".into()),
                Err(e) => Err(format!("read failed: {e}")),
            };
        }
        // Control frames count too: a flood of pings is work as well.
        let budget = if self.device.is_some() { READ_BUDGET } else { 1 };
        let (mut read, mut bytes) = (0, 0);
        loop {
            if read >= budget || bytes >= READ_BYTES_BUDGET {
                return Ok(Drained::Budget);
            }
            // Every frame consumed counts, refused ones (invalid UTF-8) too.
            read += 1;
            match ws.read() {
                Ok(msg) => {
                    bytes += msg.len();
                    self.last_rx = now;
                    self.pinged = false;
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
                    self.poisoned = true;
                    into.push(Incoming::TooBig);
                    return Ok(Drained::All);
                }
                Err(tungstenite::Error::Utf8(_)) => into.push(Incoming::InvalidUtf8),
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
    fn pump(&mut self) -> Result<(), String> {
        let Phase::Ws(ws) = &mut self.phase else { return Ok(()) };
        if self.blocked {
            match ws.flush() {
                Ok(()) => {
                    self.blocked = false;
                    if self.closing && self.poisoned {
                        // No close reply can be read any more: end our side after the close frame.
                        let _ = ws.get_mut().shutdown(std::net::Shutdown::Write);
                    }
                }
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(format!("write failed: {e}")),
            }
        }
        let mut wrote = false;
        while let Some(frame) = self.outbox.pop_front() {
            self.outbox_bytes -= frame.len();
            if self.closing {
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
        if let Some((code, reason)) = self.close_after.take() {
            self.closing = true;
            let frame = CloseFrame {
                code: CloseCode::from(code),
                reason: reason.into(),
            };
            match ws.close(Some(frame)).and_then(|()| ws.flush()) {
                Ok(()) if self.poisoned => {
                    let _ = ws.get_mut().shutdown(std::net::Shutdown::Write);
                }
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => self.blocked = true,
                Err(_) => return Err("closed".into()),
            }
        }
        Ok(())
    }

    /// The core accepted the `hello`: messages up to `MAX_FRAME_BYTES` from now on (L35).
    pub fn authenticated(&mut self) {
        if let Phase::Ws(ws) = &mut self.phase {
            let max = hermes_mobile::limits::MAX_FRAME_BYTES;
            ws.set_config(|c| {
                c.max_message_size = Some(max);
                c.max_frame_size = Some(max);
            });
        }
    }

    /// Sends a WebSocket ping (decisions K2).
    pub fn ping(&mut self) -> Result<(), String> {
        let Phase::Ws(ws) = &mut self.phase else { return Ok(()) };
        if self.blocked || self.closing {
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
