//! The event loop: one thread, one `mio::Poll`, connections in a slab, a timer wheel, the
//! core and the agent. It moves bytes between sockets and the core, reads the clock, fires
//! timers, and does nothing a test of the core could not see.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use std::collections::VecDeque;
use std::sync::Arc;

use hermes_mobile::agent_link::{AgentLink, FileHandover, QueueLimits};
use hermes_mobile::{AgentEvent, ConnId, Gateway, Output, Peer, Time};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::agent::demo::DemoAgent;
use crate::agent::http::HttpAgent;
use crate::agent::io::{LoadTag, PeerInput};
use crate::agent::link::LinkAgent;
use crate::agent::{Agent, Refused};
use crate::config::{AgentKind, ServerConfig};
use crate::conn::{Connections, Discarded, Drained, Incoming, Phase};
use crate::fileio::{FileWorker, Ticket};
use crate::http::{self, Head, Route};
use crate::http_client::{dns::Resolver, HttpClient, Target};
use crate::signals::StopSignals;
use crate::timer::{ConnRef, ConnTimer, TimerKey};
use crate::wheel::Wheel;

mod agent_work;
mod link;
mod link_transports;
mod timers;

use link_transports::{LinkTransports, PeerHome};

const LISTENER: Token = Token(usize::MAX - 1);
const SIGNALS: Token = Token(usize::MAX - 2);
/// How long a plain response's socket may stay open for the peer to read it and go.
const DRAIN_LINGER: Duration = Duration::from_secs(2);
/// How long after memory was let go the heap is trimmed: long enough for a burst to end,
/// short enough that RSS is back down soon after (issue 8: 30 s after the abuse).
const TRIM_DELAY: Duration = Duration::from_secs(10);
/// Lines queued for an `/agent` connection before it counts as not reading (L40's queue in
/// base64, and then some).
const AGENT_OUTBOX_LIMIT: usize = 64 * 1024 * 1024;
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

pub struct Server {
    poll: Poll,
    listener: Option<TcpListener>,
    local_addr: SocketAddr,
    /// The connections, and the one count of the bytes queued for them.
    conns: Connections,
    /// Every deadline of the server (the core's earliest among them).
    wheel: Wheel<TimerKey>,
    core: Gateway,
    agent: Agent,
    origin: Instant,
    config: ServerConfig,
    /// Saves uploads and reads agents' files off the loop.
    files: FileWorker,
    /// Core events on their way to the agent, in order: one whose file is being saved
    /// holds back those behind it.
    parked: VecDeque<Parked>,
    /// The agent link's pipes and sockets (`exec:`, `link`).
    link_transports: LinkTransports,
    /// The HTTP agents' client (`openai:`, `hermes:`).
    http: Option<HttpClient>,
    /// Files the agent asked for: the file worker's ticket and the agent's tag.
    agent_loads: Vec<(Ticket, LoadTag)>,
    /// `/agent` is served (link mode with `MOBILE_AGENT_TOKEN`).
    agent_route: bool,
    /// A link peer's reading paused behind a command's file: read again once it is read.
    link_paused: bool,
    /// Link peers (and the child's stderr) whose read budget ran out this turn.
    link_read_again: Vec<LinkRead>,
    /// Slab keys to free once the current batch of events is handled (mio may still report
    /// a deregistered token in the same batch).
    dead: Vec<usize>,
    touched: Vec<usize>,
    incoming: Vec<Incoming>,
    /// Connections that had more to read when their read budget ran out (no readiness
    /// event will come for what is already buffered): read again next turn.
    read_again: Vec<usize>,
    /// Connections whose peer closed in the same read as its last messages: ended after
    /// those messages' turns have run (issue 8 #4), not before.
    ended_after_drive: Vec<(usize, String)>,
    due: Vec<TimerKey>,
    /// SIGINT or SIGTERM was acted on: connections are closing; `TimerKey::Shutdown`
    /// ends the grace period.
    shutting_down: bool,
    /// The grace period is over: the loop ends now, whatever is still open.
    grace_over: bool,
    /// accept() is failing for lack of resources: warn once per streak, not every retry.
    accept_failing: bool,
    signals: StopSignals,
    /// SIGINT or SIGTERM arrived.
    stop_requested: bool,
}

/// A core event waiting for its turn to reach the agent.
/// A link input to read again next turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkRead {
    Peer(PeerHome),
    ChildStderr,
}

enum Parked {
    Ready(Box<AgentEvent>, Option<FileHandover>),
    Saving(Ticket),
}

fn conn_id(key: usize, generation: u32) -> ConnId {
    ConnId((u64::from(generation) << 32) | key as u64)
}

fn conn_timer(key: usize, generation: u32, timer: ConnTimer) -> TimerKey {
    TimerKey::Conn(ConnRef { key, generation }, timer)
}

fn split_id(id: ConnId) -> (usize, u32) {
    ((id.0 & 0xffff_ffff) as usize, (id.0 >> 32) as u32)
}

impl Server {
    /// Binds the listener. A port in use is an error for the caller to report.
    pub fn bind(config: ServerConfig, seed: u64) -> io::Result<Server> {
        let ip: std::net::IpAddr = config.host.parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MOBILE_HOST {:?} is not an IP address", config.host),
            )
        })?;
        let mut listener = TcpListener::bind(SocketAddr::new(ip, config.port))?;
        let local_addr = listener.local_addr()?;
        let poll = Poll::new()?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        let signals = StopSignals::register(poll.registry(), SIGNALS)?;
        let origin = Instant::now();
        let mut core_config = config.core.clone();
        core_config.seed = seed;
        let waker = Arc::new(mio::Waker::new(poll.registry(), link_transports::WAKER)?);
        let files = FileWorker::start(&config.state_dir, waker.clone())?;
        let mut http = None;
        let mut link_transports = LinkTransports::new();
        let link = || {
            let gateway = format!("hermes-mobile/{}", env!("CARGO_PKG_VERSION"));
            let ttl = config.core.prompt_ttl.as_secs();
            let link = AgentLink::new(&gateway, ttl, config.agent_token.clone(), QueueLimits::default());
            Agent::Link(LinkAgent::new(link))
        };
        let agent = match &config.agent {
            AgentKind::Demo => Agent::Demo(DemoAgent::new(config.demo_step, seed.rotate_left(17))),
            AgentKind::Exec(command) => {
                link_transports.set_command(command.clone());
                link()
            }
            AgentKind::Http { .. } => {
                let settings = config.http.as_ref().expect("an HTTP agent has its settings");
                let e = &settings.agent.endpoint;
                let tls = if e.tls {
                    let name = crate::http_client::tls::server_name(&e.host)
                        .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
                    let config = crate::http_client::tls::client_config(settings.ca_file.as_deref())
                        .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
                    Some((config, name))
                } else {
                    None
                };
                let target = Target {
                    host: e.host.clone(),
                    port: e.port,
                    tls,
                };
                http = Some(HttpClient::new(target, settings.timeouts, Resolver::start(waker)?));
                Agent::Http(HttpAgent::new(settings.agent.clone(), seed.rotate_left(23)))
            }
            AgentKind::Link(path) => {
                let path = path.clone().unwrap_or_else(|| config.state_dir.join("agent.sock"));
                link_transports
                    .listen(poll.registry(), path.clone())
                    .map_err(|e| io::Error::new(e.kind(), format!("agent link socket {}: {e}", path.display())))?;
                link()
            }
        };
        let agent_route = matches!(config.agent, AgentKind::Link(_)) && config.agent_token.is_some();
        Ok(Server {
            poll,
            listener: Some(listener),
            local_addr,
            conns: Connections::with_capacity(64),
            wheel: Wheel::new(origin, Duration::from_millis(10), 4096),
            core: Gateway::new(core_config),
            agent,
            origin,
            files,
            parked: VecDeque::new(),
            link_transports,
            http,
            agent_loads: Vec::new(),
            agent_route,
            link_paused: false,
            link_read_again: Vec::new(),
            config,
            dead: Vec::new(),
            touched: Vec::new(),
            incoming: Vec::new(),
            ended_after_drive: Vec::new(),
            read_again: Vec::new(),
            due: Vec::new(),
            shutting_down: false,
            grace_over: false,
            accept_failing: false,
            signals,
            stop_requested: false,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The agent, for the start-up log line.
    pub fn agent_summary(&self) -> String {
        match &self.config.agent {
            AgentKind::Demo => "demo".into(),
            AgentKind::Exec(command) => format!("exec {}", command.escape_debug()),
            AgentKind::Http { label } => label.clone(),
            AgentKind::Link(_) => {
                let path = self
                    .link_transports
                    .socket_path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                if self.agent_route {
                    format!("link on {path} and /agent")
                } else {
                    format!("link on {path}")
                }
            }
        }
    }

    fn time(&self, at: Instant) -> Time {
        Time::from_millis(u64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(u64::MAX))
    }

    fn instant(&self, t: Time) -> Instant {
        self.origin + Duration::from_millis(t.as_millis())
    }

    /// Runs until SIGINT/SIGTERM, then closes every connection with 1001 and returns.
    pub fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        if matches!(self.config.agent, AgentKind::Exec(_)) {
            self.start_child(Instant::now());
        }
        loop {
            if self.stop_requested && !self.shutting_down {
                self.begin_shutdown(Instant::now());
            }
            if self.shutting_down && (self.conns.is_empty() || self.grace_over) {
                self.link_transports.stop_children(SHUTDOWN_GRACE);
                log::info!("stopped");
                return Ok(());
            }
            let mut timeout = self
                .wheel
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            let upstream_again = self.http.as_ref().is_some_and(HttpClient::wants_read_again);
            if !self.read_again.is_empty() || !self.link_read_again.is_empty() || upstream_again {
                timeout = Some(Duration::ZERO);
            }
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            for key in std::mem::take(&mut self.read_again) {
                self.on_io(key, now);
            }
            for read in std::mem::take(&mut self.link_read_again) {
                match read {
                    LinkRead::Peer(home) => self.read_link_peer(home, now),
                    LinkRead::ChildStderr => self.read_child_stderr(),
                }
            }
            self.upstream_read_again(now);
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(now),
                    SIGNALS => self.stop_requested |= self.signals.received(),
                    link_transports::WAKER => {
                        self.on_upstream_wake(now);
                        self.on_files_done(now)
                    }
                    link_transports::AGENT_LISTENER => self.on_agent_accept(now),
                    link_transports::CHILD_STDOUT => self.read_link_peer(PeerHome::Child, now),
                    link_transports::CHILD_STDIN => self.flush_link_peer(PeerHome::Child, now),
                    link_transports::CHILD_STDERR => self.read_child_stderr(),
                    token if self.link_transports.unix_peer_of(token).is_some() => self.on_unix_peer(token, now),
                    token => match HttpClient::owns(token) {
                        Some(call) => self.on_upstream_ready(call, now),
                        None => self.on_io(token.0, now),
                    },
                }
            }
            self.fire_timers(now);
            self.drive(now);
            self.resume_link_reads(now);
            let ended = std::mem::take(&mut self.ended_after_drive);
            if !ended.is_empty() {
                for (key, reason) in ended {
                    self.kill(key, &reason);
                }
                // The closes may have armed core timers (a device's bookkeeping, L32).
                self.drive(now);
            }
            for key in self.dead.drain(..) {
                self.conns.free_dead(key);
            }
        }
    }

    fn accept_all(&mut self, now: Instant) {
        loop {
            let Some(listener) = &self.listener else { return };
            match listener.accept() {
                Ok((stream, peer)) => {
                    self.accept_failing = false;
                    self.on_accept(stream, peer, now)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    // EMFILE and friends: the pending connection stays in the backlog; try again
                    // shortly rather than spin or die.
                    if !self.accept_failing {
                        log::warn!("accept failed: {e}; retrying every 100 ms until it works");
                    }
                    self.accept_failing = true;
                    self.wheel.arm(now + Duration::from_millis(100), TimerKey::AcceptRetry);
                    return;
                }
            }
        }
    }

    fn on_accept(&mut self, mut stream: TcpStream, peer: SocketAddr, now: Instant) {
        if self.conns.len() >= self.config.max_connections {
            log::warn!(
                "refused {peer}: {} connections open (MOBILE_MAX_CONNECTIONS)",
                self.conns.len()
            );
            let _ = stream.write(&http::response(
                "503 Service Unavailable",
                "text/plain",
                "too many connections\n",
                "",
            ));
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        let _ = stream.set_nodelay(true);
        let registry = self.poll.registry();
        let register = |stream: &mut TcpStream, key| {
            registry.register(stream, Token(key), Interest::READABLE | Interest::WRITABLE)
        };
        let (key, generation) = match self.conns.insert(stream, peer, now, register) {
            Ok(added) => added,
            Err(e) => return log::warn!("cannot register {peer}: {e}"),
        };
        // decisions H7: the request head and the upgrade are inside the hello timeout.
        self.wheel.insert(
            now + self.config.core.hello_timeout,
            conn_timer(key, generation, ConnTimer::Hello),
        );
        log::debug!("conn {key}: accepted from {peer}");
        // Edge-triggered: the request may already be waiting.
        self.on_io(key, now);
    }

    fn on_io(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        match conn.phase() {
            Phase::Http { .. } => self.on_http(key, now),
            Phase::Respond { .. } => self.on_respond(key, now),
            Phase::Ws(_) => self.on_ws(key, now),
            Phase::Drain(_) => match conn.drain() {
                Discarded::Closed => self.kill(key, "http response sent"),
                Discarded::Budget => self.read_again.push(key),
                Discarded::All => {}
            },
            Phase::Dead => {}
        }
    }

    fn on_http(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        match conn.read_head() {
            Ok(true) => {}
            Ok(false) => return self.kill(key, "closed before the request was complete"),
            Err(e) => return self.kill(key, &format!("read failed: {e}")),
        }
        let Phase::Http { head, .. } = conn.phase() else { return };
        let Head::Complete { route, len, path } = http::parse(head) else {
            return;
        };
        let leftover = head.get(len..).unwrap_or_default().to_vec();
        let (out, upgrade) = match route {
            Route::Upgrade { .. } if self.shutting_down => (
                http::response("503 Service Unavailable", "text/plain", "shutting down\n", ""),
                None,
            ),
            Route::Upgrade { agent: true, .. } if !self.agent_route => (
                http::response(
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "no /agent here (MOBILE_AGENT=link with MOBILE_AGENT_TOKEN opens it)\n",
                    "",
                ),
                None,
            ),
            Route::Upgrade {
                response,
                forwarded,
                agent,
            } => (response, Some((leftover, forwarded, agent))),
            Route::Health => {
                let stats = self.core.stats();
                let body = serde_json::json!({
                    "status": "ok",
                    "version": env!("CARGO_PKG_VERSION"),
                    "connections": stats.connections,
                    "devices_online": stats.devices_online,
                    // Every socket the server holds, this request's own included: closing
                    // ones and plain HTTP ones too, which `connections` does not count.
                    "sockets": self.conns.len(),
                    // What the core holds, for an operator watching memory (L32, L36).
                    "devices_known": stats.devices_known,
                    "held_bytes": stats.held_bytes,
                    "upload_bytes": stats.upload_bytes,
                    "open_prompts": stats.open_prompts,
                    "dedup_entries": stats.dedup_entries,
                    "timers": stats.timers,
                    "queued_bytes": self.conns.queued_bytes(),
                    "agent": self.agent.health(),
                })
                .to_string();
                (
                    http::response("200 OK", "application/json", &body, "Cache-Control: no-store\r\n"),
                    None,
                )
            }
            Route::Asset(req) => match &self.config.web {
                Some(web) => (web.respond(&req), None),
                None => (
                    http::response("404 Not Found", "text/plain; charset=utf-8", "not found\n", ""),
                    None,
                ),
            },
            Route::Reply(bytes) => (bytes, None),
        };
        let status = String::from_utf8_lossy(&out[..out.len().min(12)]).into_owned();
        log::debug!(
            "conn {key}: GET {path:?} -> {}",
            status.trim_start_matches("HTTP/1.1 ").trim_end()
        );
        let Some(conn) = self.conns.get_mut(key) else { return };
        conn.respond(out, upgrade);
        self.on_respond(key, now);
    }

    fn on_respond(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        match conn.write_response() {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => return self.kill(key, &format!("write failed: {e}")),
        }
        let Some((leftover, forwarded, agent)) = conn.take_upgrade() else {
            conn.start_drain();
            let generation = conn.generation;
            self.wheel
                .insert(now + DRAIN_LINGER, conn_timer(key, generation, ConnTimer::Drain));
            return self.on_io(key, now);
        };
        conn.upgrade(leftover, now);
        let (generation, peer, accepted_at) = (conn.generation, conn.peer, conn.accepted_at);
        if agent {
            // An agent over the network: the link, not the core, speaks with it; its
            // `hello` must carry MOBILE_AGENT_TOKEN (checked by the link).
            let link_peer = self.link_transports.new_peer(PeerHome::Ws(key, generation));
            self.conns.make_agent_peer(key, link_peer);
            log::info!("conn {key}: {peer} opened /agent");
            let opened = PeerInput::Opened {
                peer: link_peer,
                needs_token: true,
            };
            self.agent.handle_peer(self.time(now), opened);
            self.wheel.insert(
                now + self.config.keepalive,
                conn_timer(key, generation, ConnTimer::KeepAlive),
            );
            return self.on_ws(key, now);
        }
        conn.open_phone();
        let loopback = peer.ip().is_loopback()
            || matches!(peer.ip(), std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()));
        log::info!(
            "conn {key}: {peer} opened a WebSocket{}",
            if forwarded { " (via a proxy)" } else { "" }
        );
        // decisions H7: the hello timeout counts from accept, not from now.
        let accepted = self.time(accepted_at);
        self.core
            .handle_open(accepted, conn_id(key, generation), Peer { loopback, forwarded });
        self.wheel.insert(
            now + self.config.keepalive,
            conn_timer(key, generation, ConnTimer::KeepAlive),
        );
        // A client may have sent its first frames right behind the upgrade request.
        self.on_ws(key, now);
    }

    fn on_ws(&mut self, key: usize, now: Instant) {
        // Its read side already ended this turn: nothing more is read from it.
        if self.ended_after_drive.iter().any(|(k, _)| *k == key) {
            return;
        }
        let t = self.time(now);
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.agent_peer().is_some() && !conn.life().is_closing() {
            // Lines behind a command's file wait in the socket, not in memory (L42).
            if !self.agent.wants_lines() {
                self.link_paused = true;
                return;
            }
        }
        let Some(conn) = self.conns.get_mut(key) else { return };
        let mut incoming = std::mem::take(&mut self.incoming);
        let read = conn.read_ws(now, &mut incoming);
        let (id, in_core) = (conn_id(key, conn.generation), conn.in_core());
        let mut too_big = false;
        if let Some(peer) = conn.agent_peer() {
            let authenticated = conn.authenticated();
            for msg in incoming.drain(..) {
                let input = match &msg {
                    Incoming::Message(bytes) => PeerInput::Line { peer, line: bytes },
                    // tungstenite cannot read on after an oversized message: the link
                    // ends (1009), unlike a stream link, which skips the line (L38).
                    Incoming::TooBig => {
                        too_big = true;
                        PeerInput::TooBig { peer }
                    }
                    Incoming::InvalidUtf8 => PeerInput::Line { peer, line: &[0xff] },
                };
                self.agent.handle_peer(t, input);
            }
            if !authenticated && self.agent.peer_said_hello(peer) {
                // Its hello was accepted: lines up to the full limit from now on.
                conn.agent_authenticated();
            }
        }
        for msg in incoming.drain(..) {
            if !in_core {
                continue;
            }
            match msg {
                Incoming::Message(bytes) => self.core.handle_message(t, id, &bytes),
                Incoming::TooBig => self.core.handle_frame_too_big(t, id),
                // decisions G6: invalid UTF-8 is bad_frame; the core sees it as such.
                Incoming::InvalidUtf8 => self.core.handle_message(t, id, &[0xff]),
            }
        }
        self.incoming = incoming;
        self.touched.push(key);
        if too_big {
            return self.decide_close(key, 1009, "too_big", "agent sent a message over 16 MiB", now);
        }
        if read == Ok(Drained::Budget) {
            self.read_again.push(key);
        }
        if let Err(reason) = read {
            // Input in order: messages read from this connection in this turn (in this call
            // or an earlier one) are answered first, while the device is still online, so
            // the agent's reply is not held for a device that left (issue 8 #4).
            self.ended_after_drive.push((key, reason));
        }
    }

    /// Feeds core events to the agent and agent commands to the core until both are quiet,
    /// then hands the frames to their connections.
    fn drive(&mut self, now: Instant) {
        let t = self.time(now);
        loop {
            let mut progress = false;
            while let Some(out) = self.core.poll_output() {
                progress = true;
                self.on_output(out, now);
            }
            while let Some(event) = self.core.poll_event() {
                progress = true;
                if let Some(event) = self.park(event) {
                    self.agent.handle_event(t, event, None);
                }
            }
            while let Some(Parked::Ready(..)) = self.parked.front() {
                if let Some(Parked::Ready(event, file)) = self.parked.pop_front() {
                    self.agent.handle_event(t, *event, file);
                }
            }
            while let Some(command) = self.agent.poll_command() {
                progress = true;
                let what = Refused::of(&command);
                match self.core.handle_agent(t, command) {
                    Ok(accepted) => self.agent.handle_accepted(t, &accepted),
                    Err(e) => {
                        log::warn!("agent command refused ({what:?}): {e}");
                        self.agent.handle_refused(t, what, &e);
                    }
                }
            }
            progress |= self.pump_agent_io(now);
            if !progress {
                break;
            }
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for key in touched.drain(..) {
            self.flush_conn(key, now);
        }
        self.touched = touched;
        if let Some(at) = self.core.poll_timeout().map(|t| self.instant(t)) {
            self.wheel.arm(at, TimerKey::Core);
        }
        if let Some(at) = self.agent.poll_timeout().map(|t| self.instant(t)) {
            self.wheel.arm(at, TimerKey::Agent);
        }
    }

    fn on_output(&mut self, out: Output, now: Instant) {
        let id = match &out {
            Output::Send { conn, .. } | Output::Close { conn, .. } | Output::Authenticated { conn, .. } => *conn,
        };
        let (key, generation) = split_id(id);
        let Some(conn) = self.conns.live(key, generation) else {
            return;
        };
        match out {
            Output::Send { frame, .. } => self.conns.queue(key, frame),
            Output::Close { code, reason, .. } => {
                conn.leave_core();
                self.decide_close(key, code, reason, reason, now);
            }
            Output::Authenticated { device, service, .. } => {
                log::info!(
                    "conn {key}: hello as {device:?}{}",
                    if service { " (service)" } else { "" }
                );
                conn.phone_authenticated(device.0);
            }
        }
        self.touched.push(key);
    }

    /// The connection is to close with `code`/`reason` once its queued frames are out. The
    /// deadline is armed now, when the close is decided, not when the close frame is
    /// written: a peer that stops reading would otherwise hold the socket, its buffers and
    /// a `MOBILE_MAX_CONNECTIONS` slot for as long as it likes.
    fn decide_close(&mut self, key: usize, code: u16, reason: &str, log_reason: &str, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        conn.reason = Some(log_reason.to_owned());
        let by = conn.decide_close(code, reason, now);
        self.wheel
            .insert(by, conn_timer(key, conn.generation, ConnTimer::CloseBy));
        self.touched.push(key);
    }

    fn flush_conn(&mut self, key: usize, now: Instant) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        if !matches!(conn.phase(), Phase::Ws(_)) {
            return;
        }
        // An `/agent` agent may be handed the whole queue of what waited for it (L40: up to
        // 32 MiB, inline files in base64): its own, larger bound, outside the phones' share.
        let limit = if conn.agent_peer().is_some() {
            AGENT_OUTBOX_LIMIT
        } else {
            self.config.max_queue_bytes
        };
        let close_by = conn.life().close_by();
        let generation = conn.generation;
        let result = self.conns.pump(key, now);
        let Some(conn) = self.conns.get_mut(key) else { return };
        let too_slow = conn.queued_bytes() > limit;
        // The close frame went out: the peer's answer is awaited until an earlier deadline.
        let sooner = conn
            .life()
            .close_by()
            .filter(|by| close_by.is_some_and(|was| by < &was));
        if let Err(reason) = result {
            return self.kill(key, &reason);
        }
        if too_slow {
            return self.kill(key, "client too slow: frames not read");
        }
        if let Some(by) = sooner {
            self.wheel.insert(by, conn_timer(key, generation, ConnTimer::CloseBy));
        }
        // L36: frames queued for all clients together stay within the memory budget's share;
        // past it, the client with the most unread goes first.
        while let Some(slowest) = self.conns.slowest_phone_over(self.config.max_outbox_total) {
            self.kill(
                slowest,
                "client too slow: frames for all clients over the memory budget",
            );
        }
    }

    /// Ends a connection now. The slab entry is freed after the current batch.
    fn kill(&mut self, key: usize, reason: &str) {
        let Some(conn) = self.conns.get(key) else { return };
        let was_ws = matches!(conn.phase(), Phase::Ws(_));
        let Some(conn) = self.conns.end(key, self.poll.registry()) else {
            return;
        };
        let id = conn_id(key, conn.generation);
        let reason = conn.reason.take().unwrap_or_else(|| reason.to_owned());
        if was_ws {
            match conn.who() {
                Some(who) => log::info!("conn {key}: {} {who:?} closed: {reason}", conn.peer),
                None => log::info!("conn {key}: {} (no hello) closed: {reason}", conn.peer),
            }
        } else {
            log::debug!("conn {key}: {reason}");
        }
        let in_core = conn.leave_core();
        let agent_peer = conn.agent_peer();
        let t = self.time(Instant::now());
        if in_core {
            self.core.handle_close(t, id);
        }
        if let Some(peer) = agent_peer {
            self.link_transports.forget(peer);
            self.agent.handle_peer(t, PeerInput::Closed { peer });
        }
        self.dead.push(key);
        self.schedule_trim(Instant::now());
    }

    /// Arms one heap trim `TRIM_DELAY` from now unless one is armed: a burst of ends gets
    /// one trim after it, and an idle server none.
    fn schedule_trim(&mut self, now: Instant) {
        self.wheel.arm(now + TRIM_DELAY, TimerKey::Trim);
    }
}
