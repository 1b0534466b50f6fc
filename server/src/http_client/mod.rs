//! The HTTP/1.1 client the HTTP agents and push use, driven by the event loop (issues 11,
//! 18). The agent's calls go to its one target; a push goes to the host its subscription
//! names (already checked against the allow-list), so each call carries its target.
//!
//! The parsing is the core's (`hermes_mobile::upstream::ResponseParser`); this is the I/O
//! around it: the name resolved on a helper thread ([`dns`]), a non-blocking connect to
//! each address in turn, rustls over the non-blocking socket for `https://` ([`tls`]),
//! the request written as the socket takes it, and the answer read as it comes. Nothing
//! here blocks the loop. Every call has one deadline at a time (connect, then the first
//! byte of the answer, then the idle time between reads, which keepalive comments reset)
//! and one entry on the timer wheel for it, not one per read: a deadline that moved later
//! re-arms when its old entry fires.
//!
//! One call is one connection (`Connection: close`): a phone's turn makes a handful of
//! requests, and a pool would keep sockets open on a Pi for nothing.

pub mod dns;
pub mod tls;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_mobile::upstream::{ResponseError, ResponseEvent, ResponseParser};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use slab::Slab;

use crate::agent::io::{CallError, CallEvent, CallId};
use crate::timer::{CallRef, TimerKey};
use crate::wheel::Wheel;

type Timers = Wheel<TimerKey>;
use dns::{Lookup, Resolver};

/// Tokens of upstream sockets: `BASE + slab key`.
const BASE: usize = usize::MAX / 4;
/// Connections open at once, whatever the agent asks: a bound on sockets and buffers.
pub const MAX_OPEN: usize = 64;
/// Bytes read from one call before the loop turns to others (read again next turn).
const READ_BUDGET: usize = 256 * 1024;
/// The connect timeout of an address when others are left to try.
const PER_ADDRESS: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub idle: Duration,
}

/// Where a call goes.
pub struct Target {
    pub host: String,
    pub port: u16,
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// This target's own timeouts (push's), instead of the client's (the agent's).
    pub timeouts: Option<Timeouts>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Resolving,
    Connecting,
    /// Connected: the request goes out, the answer is awaited.
    Waiting,
    /// The answer has begun.
    Reading,
}

struct Call {
    id: CallId,
    target: Arc<Target>,
    generation: u32,
    phase: Phase,
    request: Vec<u8>,
    written: usize,
    addrs: Vec<SocketAddr>,
    next_addr: usize,
    stream: Option<TcpStream>,
    tls: Option<Box<ClientConnection>>,
    parser: ResponseParser,
    deadline: Instant,
    /// When this call's live wheel entry fires, if it has one.
    timer_at: Option<Instant>,
    last_error: String,
}

pub struct HttpClient {
    /// The agent's target, for `start`.
    target: Option<Arc<Target>>,
    timeouts: Timeouts,
    calls: Slab<Call>,
    next_generation: u32,
    resolver: Resolver,
    events: VecDeque<(CallId, CallEvent)>,
    read_again: Vec<usize>,
    buf: Vec<u8>,
    /// The address that last accepted a connection.
    preferred: Option<SocketAddr>,
}

impl HttpClient {
    pub fn new(target: Option<Target>, timeouts: Timeouts, resolver: Resolver) -> HttpClient {
        HttpClient {
            target: target.map(Arc::new),
            timeouts,
            calls: Slab::new(),
            next_generation: 1,
            resolver,
            events: VecDeque::new(),
            read_again: Vec::new(),
            buf: vec![0; 16 * 1024],
            preferred: None,
        }
    }

    pub fn owns(token: Token) -> Option<usize> {
        token.0.checked_sub(BASE).filter(|k| *k < usize::MAX / 8)
    }

    /// What happened, for the agent.
    pub fn poll_event(&mut self) -> Option<(CallId, CallEvent)> {
        self.events.pop_front()
    }

    pub fn wants_read_again(&self) -> bool {
        !self.read_again.is_empty()
    }

    /// Starts a call to the agent's target: `request` is the whole HTTP/1.1 request.
    pub fn start(&mut self, registry: &Registry, wheel: &mut Timers, id: CallId, request: Vec<u8>, now: Instant) {
        match self.target.clone() {
            Some(target) => self.start_to(registry, wheel, id, target, request, now),
            None => self
                .events
                .push_back((id, CallEvent::Failed(CallError::Connect("no target".into())))),
        }
    }

    /// Starts a call to `target`.
    pub fn start_to(
        &mut self,
        registry: &Registry,
        wheel: &mut Timers,
        id: CallId,
        target: Arc<Target>,
        request: Vec<u8>,
        now: Instant,
    ) {
        if self.calls.len() >= MAX_OPEN {
            self.events.push_back((id, CallEvent::Failed(CallError::Busy)));
            return;
        }
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let (host, port) = (target.host.clone(), target.port);
        let target_timeouts = target.timeouts.unwrap_or(self.timeouts);
        let key = self.calls.insert(Call {
            id,
            target,
            generation,
            phase: Phase::Resolving,
            request,
            written: 0,
            addrs: Vec::new(),
            next_addr: 0,
            stream: None,
            tls: None,
            parser: ResponseParser::new(false),
            deadline: now + target_timeouts.connect,
            timer_at: None,
            last_error: String::new(),
        });
        self.arm(key, wheel);
        match self.resolver.lookup(&host, port, now) {
            Lookup::Ready(addrs) => self.connect(key, addrs, registry, wheel, now),
            Lookup::Pending => log::debug!("call {}: resolving {}", id.0, host.escape_debug()),
        }
    }

    /// Ends a call the agent no longer wants; nothing more is reported for it.
    pub fn cancel(&mut self, registry: &Registry, id: CallId) {
        if let Some(key) = self.calls.iter().find(|(_, c)| c.id == id).map(|(k, _)| k) {
            self.close(key, registry);
        }
    }

    /// The waker fired: names may have resolved.
    pub fn on_wake(&mut self, registry: &Registry, wheel: &mut Timers, now: Instant) {
        while let Some((host, port, result)) = self.resolver.poll_answer(now) {
            let waiting: Vec<usize> = self
                .calls
                .iter()
                .filter(|(_, c)| c.phase == Phase::Resolving && c.target.host == host && c.target.port == port)
                .map(|(k, _)| k)
                .collect();
            for key in waiting {
                match &result {
                    Ok(addrs) => self.connect(key, addrs.clone(), registry, wheel, now),
                    Err(e) => {
                        log::warn!("{} did not resolve: {e}", host.escape_debug());
                        self.fail(key, registry, CallError::Resolve(e.clone()));
                    }
                }
            }
        }
    }

    /// A wheel entry of a call fired.
    pub fn on_timer(&mut self, call: CallRef, registry: &Registry, wheel: &mut Timers, now: Instant) {
        let (key, generation) = (call.slot, call.generation);
        let Some(call) = self.calls.get_mut(key).filter(|c| c.generation == generation) else {
            return;
        };
        call.timer_at = None;
        if now < call.deadline {
            return self.arm(key, wheel);
        }
        match call.phase {
            Phase::Resolving => self.fail(key, registry, CallError::Resolve("no answer in time".into())),
            Phase::Connecting => {
                call.last_error = "no answer to the connection".into();
                self.next_address(key, registry, wheel, now);
            }
            Phase::Waiting => self.fail(key, registry, CallError::Timeout("first byte")),
            Phase::Reading => self.fail(key, registry, CallError::Timeout("idle")),
        }
    }

    /// Readiness of a call's socket.
    pub fn on_ready(&mut self, key: usize, registry: &Registry, wheel: &mut Timers, now: Instant) {
        let Some(call) = self.calls.get_mut(key) else { return };
        let generation = call.generation;
        if call.phase == Phase::Connecting {
            let stream = call.stream.as_ref().expect("a connecting call has a socket");
            match stream.take_error() {
                Ok(Some(e)) | Err(e) => {
                    call.last_error = e.to_string();
                    return self.next_address(key, registry, wheel, now);
                }
                Ok(None) => {}
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => {
                    call.last_error = e.to_string();
                    return self.next_address(key, registry, wheel, now);
                }
            }
            call.phase = Phase::Waiting;
            call.deadline = now + call.target.timeouts.unwrap_or(self.timeouts).first_byte;
            if let Some((config, name)) = &call.target.tls {
                // The request goes to rustls bit by bit in `flush`, as it takes it: its
                // buffer before the handshake ends is bounded (64 KiB), a request is not.
                match ClientConnection::new(config.clone(), name.clone()) {
                    Ok(conn) => call.tls = Some(Box::new(conn)),
                    Err(e) => return self.fail(key, registry, CallError::Tls(e.to_string())),
                }
            }
            // The address that answered goes first next time (a dual-stack name whose
            // IPv6 is black-holed costs one slow connect, not one per call).
            if self.target.as_ref().is_some_and(|t| Arc::ptr_eq(t, &call.target)) {
                self.preferred = call.addrs.get(call.next_addr.wrapping_sub(1)).copied();
            }
            log::debug!("call {}: connected", call.id.0);
        }
        let written = self.flush(key, now);
        // An answer may already wait (a 413 or 401 sent before the body was read): it is
        // read before a write error ends the call.
        self.read(key, registry, wheel, now);
        if let Err(e) = written {
            if self.calls.get(key).is_some_and(|c| c.generation == generation) {
                self.fail(key, registry, e);
            }
        }
    }

    /// Calls whose read budget ran out last turn.
    pub fn read_again(&mut self, registry: &Registry, wheel: &mut Timers, now: Instant) {
        for key in std::mem::take(&mut self.read_again) {
            self.read(key, registry, wheel, now);
        }
    }

    fn arm(&mut self, key: usize, wheel: &mut Timers) {
        let Some(call) = self.calls.get_mut(key) else { return };
        if call.timer_at.is_none_or(|at| call.deadline < at) {
            call.timer_at = Some(call.deadline);
            wheel.insert(
                call.deadline,
                TimerKey::Call(CallRef {
                    slot: key,
                    generation: call.generation,
                }),
            );
        }
    }

    fn connect(&mut self, key: usize, addrs: Vec<SocketAddr>, registry: &Registry, wheel: &mut Timers, now: Instant) {
        let Some(call) = self.calls.get_mut(key) else { return };
        call.addrs = addrs;
        let default = self.target.as_ref().is_some_and(|t| Arc::ptr_eq(t, &call.target));
        if let Some(at) = self
            .preferred
            .filter(|_| default)
            .and_then(|p| call.addrs.iter().position(|a| *a == p))
        {
            call.addrs.swap(0, at);
        }
        call.next_addr = 0;
        self.next_address(key, registry, wheel, now);
    }

    /// Tries the next address, or fails with the last error.
    fn next_address(&mut self, key: usize, registry: &Registry, wheel: &mut Timers, now: Instant) {
        loop {
            let Some(call) = self.calls.get_mut(key) else { return };
            if let Some(mut old) = call.stream.take() {
                let _ = registry.deregister(&mut old);
            }
            let Some(addr) = call.addrs.get(call.next_addr).copied() else {
                let why = if call.last_error.is_empty() {
                    "no address".to_owned()
                } else {
                    call.last_error.clone()
                };
                let error = if why == "no answer to the connection" {
                    CallError::Timeout("connect")
                } else {
                    CallError::Connect(why)
                };
                return self.fail(key, registry, error);
            };
            call.next_addr += 1;
            match TcpStream::connect(addr) {
                Ok(mut stream) => {
                    if let Err(e) =
                        registry.register(&mut stream, Token(BASE + key), Interest::READABLE | Interest::WRITABLE)
                    {
                        call.last_error = e.to_string();
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    call.stream = Some(stream);
                    call.phase = Phase::Connecting;
                    // With more addresses to try, one that does not answer gets 3 s at most.
                    let more = call.next_addr < call.addrs.len();
                    let connect = call.target.timeouts.unwrap_or(self.timeouts).connect;
                    let limit = if more { connect.min(PER_ADDRESS) } else { connect };
                    call.deadline = now + limit;
                    log::debug!("call {}: connecting to {addr}", call.id.0);
                    return self.arm(key, wheel);
                }
                Err(e) => call.last_error = e.to_string(),
            }
        }
    }

    /// Writes what the socket takes. While the request is still going out (a photo on a
    /// slow uplink), the first-byte deadline counts from the last progress.
    fn flush(&mut self, key: usize, now: Instant) -> Result<(), CallError> {
        let Some(call) = self.calls.get_mut(key) else {
            return Ok(());
        };
        let first_byte = call.target.timeouts.unwrap_or(self.timeouts).first_byte;
        let before = call.written;
        let result = write_some(call);
        if call.written > before && call.phase == Phase::Waiting {
            call.deadline = now + first_byte;
        }
        result
    }

    fn read(&mut self, key: usize, registry: &Registry, wheel: &mut Timers, now: Instant) {
        let mut buf = std::mem::take(&mut self.buf);
        let outcome = self.read_into(key, &mut buf, now);
        self.buf = buf;
        match outcome {
            Ok(Read_::More) => self.read_again.push(key),
            Ok(Read_::Blocked) => {
                if let Err(e) = self.flush(key, now) {
                    return self.fail(key, registry, e);
                }
                self.arm(key, wheel);
            }
            Ok(Read_::Finished) => self.close(key, registry),
            Err(e) => self.fail(key, registry, e),
        }
    }

    fn read_into(&mut self, key: usize, buf: &mut [u8], now: Instant) -> Result<Read_, CallError> {
        let Some(call) = self.calls.get_mut(key) else {
            return Ok(Read_::Finished);
        };
        let idle = call.target.timeouts.unwrap_or(self.timeouts).idle;
        if !matches!(call.phase, Phase::Waiting | Phase::Reading) {
            return Ok(Read_::Blocked);
        }
        let mut total = 0;
        let mut out = Vec::new();
        let mut eof = false;
        loop {
            if total >= READ_BUDGET {
                break;
            }
            let n = {
                let Some(stream) = call.stream.as_mut() else {
                    return Ok(Read_::Finished);
                };
                match call.tls.as_mut() {
                    None => match stream.read(buf) {
                        Ok(0) => {
                            eof = true;
                            0
                        }
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(CallError::Broken(e.to_string())),
                    },
                    Some(tls) => match tls_read(tls, stream, buf)? {
                        TlsRead::Data(n) => n,
                        TlsRead::Eof => {
                            eof = true;
                            0
                        }
                        TlsRead::Blocked => break,
                        TlsRead::Again => continue,
                    },
                }
            };
            if n > 0 {
                total += n;
                call.phase = Phase::Reading;
                call.deadline = now + idle;
                call.parser.feed(&buf[..n], &mut out).map_err(response_error)?;
            }
            for event in out.drain(..) {
                let event = match event {
                    ResponseEvent::Head(h) => CallEvent::Head(h),
                    ResponseEvent::Body(b) => CallEvent::Body(b),
                    ResponseEvent::End => CallEvent::End,
                };
                let end = matches!(event, CallEvent::End);
                self.events.push_back((call.id, event));
                if end {
                    return Ok(Read_::Finished);
                }
            }
            if eof {
                call.parser.eof(&mut out).map_err(response_error)?;
                for event in out.drain(..) {
                    match event {
                        ResponseEvent::Body(b) => self.events.push_back((call.id, CallEvent::Body(b))),
                        ResponseEvent::End => self.events.push_back((call.id, CallEvent::End)),
                        ResponseEvent::Head(h) => self.events.push_back((call.id, CallEvent::Head(h))),
                    }
                }
                return Ok(Read_::Finished);
            }
        }
        Ok(if total >= READ_BUDGET {
            Read_::More
        } else {
            Read_::Blocked
        })
    }

    fn fail(&mut self, key: usize, registry: &Registry, error: CallError) {
        if let Some(call) = self.calls.get(key) {
            log::debug!("call {}: {}", call.id.0, error.to_string().escape_debug());
            self.events.push_back((call.id, CallEvent::Failed(error)));
        }
        self.close(key, registry);
    }

    fn close(&mut self, key: usize, registry: &Registry) {
        if !self.calls.contains(key) {
            return;
        }
        let mut call = self.calls.remove(key);
        if let Some(stream) = call.stream.as_mut() {
            let _ = registry.deregister(stream);
        }
        self.read_again.retain(|k| *k != key);
    }
}

/// Writes what the socket takes: into rustls as it takes it, then rustls' records (or
/// the plain request) into the socket.
fn write_some(call: &mut Call) -> Result<(), CallError> {
    let Some(stream) = call.stream.as_mut() else {
        return Ok(());
    };
    if let Some(tls) = call.tls.as_mut() {
        loop {
            if call.written < call.request.len() {
                match tls.writer().write(&call.request[call.written..]) {
                    Ok(n) => call.written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(CallError::Tls(e.to_string())),
                }
            }
            if !tls.wants_write() {
                break;
            }
            match tls.write_tls(stream) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CallError::Broken(e.to_string())),
            }
        }
        if call.written == call.request.len() && !call.request.is_empty() {
            call.request = Vec::new(); // all in rustls: its memory goes now
        }
        return Ok(());
    }
    while call.written < call.request.len() {
        match stream.write(&call.request[call.written..]) {
            Ok(0) => return Err(CallError::Broken("the socket took nothing".into())),
            Ok(n) => call.written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CallError::Broken(e.to_string())),
        }
    }
    if !call.request.is_empty() {
        call.request = Vec::new(); // all sent: its memory goes now
    }
    Ok(())
}

enum Read_ {
    /// The socket has nothing more now.
    Blocked,
    /// The budget ran out with more to read.
    More,
    /// The answer ended (or the call is gone).
    Finished,
}

enum TlsRead {
    Data(usize),
    Eof,
    Blocked,
    /// Records were read but held no plaintext yet.
    Again,
}

/// Plaintext first (rustls may hold some from the last read), then more records.
fn tls_read(tls: &mut ClientConnection, stream: &mut TcpStream, buf: &mut [u8]) -> Result<TlsRead, CallError> {
    match tls.reader().read(buf) {
        Ok(0) => return Ok(TlsRead::Eof), // close_notify
        Ok(n) => return Ok(TlsRead::Data(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        // The peer closed without close_notify: the parser tells a whole answer from a cut one.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(TlsRead::Eof),
        Err(e) => return Err(CallError::Tls(e.to_string())),
    }
    match tls.read_tls(stream) {
        Ok(0) => Ok(TlsRead::Eof),
        Ok(_) => {
            tls.process_new_packets().map_err(|e| CallError::Tls(e.to_string()))?;
            // The handshake may have replies to send; the caller flushes when blocked.
            if tls.wants_write() {
                let _ = tls.write_tls(stream);
            }
            Ok(TlsRead::Again)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(TlsRead::Blocked),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(TlsRead::Again),
        Err(e) => Err(CallError::Broken(e.to_string())),
    }
}

fn response_error(e: ResponseError) -> CallError {
    match e {
        ResponseError::Truncated => CallError::Broken("the connection closed mid-answer".into()),
        ResponseError::TooLarge => CallError::Broken("the answer's head is too large".into()),
        ResponseError::Malformed(why) => CallError::Broken(format!("not an HTTP answer: {why}")),
    }
}
