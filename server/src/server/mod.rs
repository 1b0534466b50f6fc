//! The event loop: one thread, one `mio::Poll`, connections in a slab, a timer wheel, the
//! core and the agent. It moves bytes between sockets and the core, reads the clock, fires
//! timers, and does nothing a test of the core could not see.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use std::sync::Arc;

use hermes_mobile::agent_link::{AgentLink, QueueLimits};
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::{ConnId, Gateway, Time};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};

use crate::agent::demo::DemoAgent;
use crate::agent::http::HttpAgent;
use crate::agent::link::LinkAgent;
use crate::agent::Agent;
use crate::config::{AgentKind, ServerConfig};
use crate::conn::{Connections, Incoming};
use crate::fileio::FileWorker;
use crate::http_client::{dns::Resolver, HttpClient, Target};
use crate::signals::StopSignals;
use crate::timer::{ConnRef, ConnTimer, TimerKey};
use crate::wheel::Wheel;
use crate::wiring::{Wiring, WiringIo};

mod card_answers;
mod carry_out;
mod control;
mod files;
mod http_side;
mod journal_io;
mod link;
mod link_lines;
mod link_transports;
mod pairing;
mod timers;
mod websocket;

pub use control::CONTROL_SOCKET;
pub use journal_io::JOURNAL_FILE;
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
use crate::push::PUSH_TIMEOUTS;

pub struct Server {
    poll: Poll,
    listener: Option<TcpListener>,
    local_addr: SocketAddr,
    /// The connections, and the one count of the bytes queued for them.
    conns: Connections,
    /// Every deadline of the server (the core's earliest among them).
    wheel: Wheel<TimerKey>,
    /// The core, the agent, push and the journal's records: every decision of the loop.
    wiring: Wiring,
    origin: Instant,
    config: ServerConfig,
    /// Saves uploads and reads agents' files off the loop.
    files: FileWorker,
    /// The agent link's pipes and sockets (`exec:`, `link`).
    link_transports: LinkTransports,
    /// The HTTP client of the HTTP agents (`openai:`, `hermes:`) and of push.
    http: Option<HttpClient>,
    /// `/agent` is served (link mode with `MOBILE_AGENT_TOKEN`).
    agent_route: bool,
    /// A link peer's reading paused behind a command's file: read again once it is read.
    link_paused: bool,
    /// Link peers (and the child's stderr) whose read budget ran out this turn.
    link_read_again: Vec<LinkRead>,
    /// Scratch for the turn's touched connections (`conn::Turn` keeps the list).
    touched: Vec<usize>,
    /// Lines for the agent link decided in this step, written once the phones' frames of
    /// the step are in their sockets: the agent's `ok` for a reply must never leave before
    /// the reply does, or a SIGKILL in between loses a reply the agent counts as delivered.
    link_out: Vec<crate::wiring::WiringIo>,
    /// A connection's queue drained, or a connection ended, during `drive`'s flush: the
    /// core may have more to say (a paused replay's next page, an ended agent's read-back,
    /// closing frames), so `drive` goes round once more.
    drained_news: bool,
    /// Owed events on their way to an `/agent` WebSocket, by connection key: handed over
    /// once its queue is written (L64), left owed if it dies first.
    agent_ws_owed: HashMap<usize, Vec<EventKey>>,
    incoming: Vec<Incoming>,
    due: Vec<TimerKey>,
    /// SIGINT or SIGTERM was acted on: connections are closing; `TimerKey::Shutdown`
    /// ends the grace period.
    shutting_down: bool,
    /// The grace period is over: the loop ends now, whatever is still open.
    grace_over: bool,
    /// accept() is failing for lack of resources: warn once per streak, not every retry.
    accept_failing: bool,
    /// Unauthenticated sockets dropped to make room (L54), for a log line now and then.
    evictions: u64,
    signals: StopSignals,
    /// SIGINT or SIGTERM arrived.
    stop_requested: bool,
    /// The journal's store thread (issue 24); `None` when it could not be opened.
    journal: Option<journal_io::JournalIo>,
    /// `"ok"`, or why there is no journal (`/healthz`).
    journal_status: String,
    /// `/files/` answers being read or written (L63).
    file_answers: files::FileAnswers,
    card_answers: card_answers::CardAnswers,
    /// `POST /pair`s waiting for their commit (issue 26).
    pair_answers: pairing::PairAnswers,
    /// `<state dir>/control.sock`: the CLI's way in (issue 26).
    control: control::Control,
    /// The state directory is this gateway's while it runs (L72).
    _state_lock: crate::state::StateLock,
}

/// A link input to read again next turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkRead {
    Peer(PeerHome),
    ChildStderr,
}

/// The HTTP agents' client, for the endpoint and CA of their settings.
fn http_client(settings: &crate::config::HttpConfig, waker: Arc<mio::Waker>) -> io::Result<HttpClient> {
    let e = &settings.agent.endpoint;
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let tls = if e.tls {
        let name = crate::http_client::tls::server_name(&e.host).map_err(invalid)?;
        let config = crate::http_client::tls::client_config(settings.ca_file.as_deref(), "MOBILE_AGENT_CA_FILE", false)
            .map_err(invalid)?;
        Some((config, name))
    } else {
        None
    };
    let target = Target {
        host: e.host.clone(),
        port: e.port,
        tls,
        timeouts: None,
    };
    Ok(HttpClient::new(
        Some(target),
        settings.timeouts,
        Resolver::start(waker)?,
    ))
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
        // Before anything in the state directory is touched: one gateway per directory, and
        // the CLI changes the journal itself only while no gateway runs (L72).
        let state_lock = crate::state::lock_state_dir(&config.state_dir, Duration::from_secs(5))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", config.state_dir.display())))?
            .ok_or_else(|| {
                // `InvalidData`: printed as it is, not as a failure to listen.
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "another gateway runs on the state directory {} (it holds {})",
                        config.state_dir.display(),
                        crate::state::LOCK_FILE
                    ),
                )
            })?;
        let files = FileWorker::start(&config.state_dir, waker.clone())?;
        // After the file worker, which makes the state directory. Its errors are not about
        // listening: `InvalidData` tells the caller to print them as they are.
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("push: {m}"));
        let (push, subscriptions) = match &config.push {
            Some(settings) => {
                let mut settings = settings.clone();
                if settings.ntfy.is_some() && settings.public_url.is_none() {
                    // ntfy's Click needs the chat's address: the first one printed at start-up.
                    let lan = crate::pair::lan_addresses();
                    settings.guessed_url = crate::pair::page_urls(&config.host, local_addr.port(), &lan)
                        .into_iter()
                        .next();
                    log::info!(
                        "push: MOBILE_PUBLIC_URL is not set; ntfy notifications open {} and have no buttons",
                        settings.guessed_url.as_deref().unwrap_or("nothing")
                    );
                }
                let (push, subscriptions) = crate::push::Push::start(settings, &config.state_dir).map_err(invalid)?;
                core_config.push = Some(push.core_config());
                (Some(push), subscriptions)
            }
            None => (None, None),
        };
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
                http = Some(http_client(settings, waker.clone())?);
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
        if http.is_none() && push.is_some() {
            http = Some(HttpClient::new(None, PUSH_TIMEOUTS, Resolver::start(waker.clone())?));
        }
        let opening = journal_io::open(
            &config.state_dir,
            config.journal,
            core_config.dedup_window,
            journal_io::clock_at(origin),
            waker.clone(),
        )?;
        let journal = opening.io.is_some();
        if journal {
            core_config.journal = Some(config.journal);
        }
        let mut core = Gateway::new(core_config);
        core.handle_wall_clock(Time::ZERO, crate::journal::now_unix_ms());
        if let Some(snapshot) = opening.snapshot {
            core.restore(Time::ZERO, snapshot);
        }
        let mut control = control::Control::default();
        let control_path = config.state_dir.join(CONTROL_SOCKET);
        if let Err(e) = control.listen(poll.registry(), control_path.clone()) {
            if e.kind() == io::ErrorKind::AddrInUse {
                return Err(e);
            }
            log::warn!(
                "control socket {}: {e}; `hermes-mobile devices` and `pair` act on the journal instead",
                control_path.display()
            );
        }
        // L63: an item carries `url` only while the media store still holds its file.
        let media = crate::state::MediaStore::names(&config.state_dir);
        core.restore_media(media.iter().map(String::as_str));
        if let Some(json) = subscriptions {
            let count = core.restore_push(&json).map_err(|e| {
                invalid(format!(
                    "{}: {e}",
                    crate::push::subscriptions_file(&config.state_dir).display()
                ))
            })?;
            log::info!("push: {count} subscription(s) kept from before");
        }
        Ok(Server {
            poll,
            listener: Some(listener),
            local_addr,
            conns: Connections::with_capacity(64),
            wheel: Wheel::new(origin, Duration::from_millis(10), 4096),
            wiring: Wiring::new(core, agent, push, journal),
            origin,
            files,
            link_transports,
            http,
            agent_route,
            link_paused: false,
            link_read_again: Vec::new(),
            config,
            touched: Vec::new(),
            link_out: Vec::new(),
            drained_news: false,
            agent_ws_owed: HashMap::new(),
            incoming: Vec::new(),
            due: Vec::new(),
            shutting_down: false,
            grace_over: false,
            accept_failing: false,
            evictions: 0,
            signals,
            stop_requested: false,
            journal: opening.io,
            journal_status: opening.status,
            file_answers: Default::default(),
            card_answers: Default::default(),
            pair_answers: Default::default(),
            control,
            _state_lock: state_lock,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A pairing code made before the loop runs (the first start's): whether it was kept.
    pub fn add_pair_code(&mut self, code: &str, owner: bool, ttl: Duration) -> bool {
        let t = self.time(Instant::now());
        let kept = hermes_mobile::devices::KeptCode::new(code, owner, t + ttl);
        self.wiring.add_pair_code(t, kept).is_ok()
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
                self.close_journal();
                self.control.stop();
                log::info!("stopped");
                return Ok(());
            }
            let mut timeout = self
                .wheel
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            let upstream_again = self.http.as_ref().is_some_and(HttpClient::wants_read_again);
            if self.conns.turn().wants_read_again() || !self.link_read_again.is_empty() || upstream_again {
                timeout = Some(Duration::ZERO);
            }
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            // The times a device list shows (issue 26) follow the wall clock, NTP steps too.
            self.wiring
                .handle_wall_clock(self.time(now), crate::journal::now_unix_ms());
            for key in self.conns.turn().take_read_again() {
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
                        self.on_files_done(now);
                        self.on_journal_done(now);
                    }
                    link_transports::AGENT_LISTENER => self.on_agent_accept(now),
                    control::CONTROL_LISTENER => self.control_accept(now),
                    token if control::Control::owns(token).is_some() => {
                        self.control_io(control::Control::owns(token).unwrap_or(0), now)
                    }
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
            let ended = self.conns.turn().take_ended();
            if !ended.is_empty() {
                for (key, reason) in ended {
                    self.kill(key, &reason);
                }
                // The closes may have armed core timers (a device's bookkeeping, L32).
                self.drive(now);
            }
            self.conns.free_dead();
        }
    }

    /// Hands the frames queued in this step to their sockets.
    fn flush_touched(&mut self, now: Instant) {
        let mut touched = std::mem::take(&mut self.touched);
        self.conns.turn().take_touched(&mut touched);
        for key in touched.drain(..) {
            self.flush_conn(key, now);
        }
        self.touched = touched;
    }

    /// Steps the wiring until it is quiet, carrying out what it asks and handing it the
    /// HTTP client's news, then hands the frames to their connections and arms the wiring's
    /// deadline. Once per wake-up, after the whole batch of events and timers (again only
    /// for what the batch's closes armed, and in the shutdown), so `run` shows when frames
    /// leave.
    fn drive(&mut self, now: Instant) {
        let t = self.time(now);
        loop {
            loop {
                while let Some(io) = self.wiring.poll_io(t) {
                    self.carry_out(io, now);
                }
                if !self.upstream_news(t) {
                    break;
                }
            }
            self.flush_touched(now);
            let drained = std::mem::take(&mut self.drained_news);
            if self.link_out.is_empty() && !drained {
                break;
            }
            for io in std::mem::take(&mut self.link_out) {
                match io {
                    WiringIo::LinkWrite { peer, line, owed } => self.write_link_line(peer, line, owed, now),
                    WiringIo::LinkClose { peer, reason } => self.end_link_peer(peer, &reason, now),
                    other => self.carry_out(other, now),
                }
            }
            self.flush_touched(now); // an agent on `/agent` is a WebSocket too
        }
        if let Some(at) = self.wiring.poll_timeout().map(|t| self.instant(t)) {
            self.wheel.arm(at, TimerKey::Wiring);
        }
    }
}
