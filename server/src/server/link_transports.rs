//! The agent link's transports in the event loop: an `exec:` child's pipes, the `link`
//! Unix socket, and `/agent` WebSockets (those live in the connection slab; see
//! `on_ws`). Every descriptor is non-blocking and registered with mio; lines are cut by a
//! bounded [`LineReader`]; writes queue in a bounded outbox.

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hermes_mobile::agent_link::{LineItem, PeerId};
use hermes_mobile::journal::owed::EventKey;
use mio::net::{UnixListener, UnixStream};
use mio::unix::pipe;
use mio::{Interest, Registry, Token};
use slab::Slab;

pub use super::link_lines::ReadEnd;
use super::link_lines::StreamPeer;

/// Tokens: the fixed ones sit just under the server's own (`usize::MAX - 1`, `- 2`);
/// Unix peers get `UNIX_BASE + slab key` (well above any connection key, on 32-bit too).
pub const WAKER: Token = Token(usize::MAX - 3);
pub const AGENT_LISTENER: Token = Token(usize::MAX - 4);
pub const CHILD_STDOUT: Token = Token(usize::MAX - 5);
pub const CHILD_STDIN: Token = Token(usize::MAX - 6);
pub const CHILD_STDERR: Token = Token(usize::MAX - 7);
const UNIX_BASE: usize = usize::MAX / 2;

/// An agent that does not read what it is sent is dropped past this (it can reconnect).
const MAX_OUTBOX_BYTES: usize = 64 * 1024 * 1024;
/// Unix socket connections at once (one agent, a few `hermes send`).
const MAX_UNIX_PEERS: usize = 16;
/// A child's stderr read per loop turn.
const STDERR_PER_TURN: usize = 64 * 1024;
/// A child's stderr line is logged cut to this.
const MAX_STDERR_LINE: usize = 4096;
/// Restart delays of a child that keeps exiting (issue 9: exponential, capped).
const FIRST_RESTART: Duration = Duration::from_secs(1);
const MAX_RESTART: Duration = Duration::from_secs(60);
/// Environment variables a child never inherits: it needs none of the gateway's secrets.
/// (The `_FILE` variants name where a secret is, L55: not the child's business either. A
/// child of the same user could still read the files themselves, or systemd's
/// `$CREDENTIALS_DIRECTORY`: run the gateway as its own user, as the .deb does.)
const SECRET_VARS: &[&str] = &[
    "MOBILE_TOKEN",
    "MOBILE_EXTRA_TOKENS",
    "MOBILE_DELIVER_TOKENS",
    "MOBILE_AGENT_TOKEN",
    "MOBILE_NTFY_TOKEN",
    "MOBILE_TOKEN_FILE",
    "MOBILE_EXTRA_TOKENS_FILE",
    "MOBILE_DELIVER_TOKENS_FILE",
    "MOBILE_AGENT_TOKEN_FILE",
    "MOBILE_NTFY_TOKEN_FILE",
    "MOBILE_AGENT_KEY",
    "MOBILE_AGENT_KEY_FILE",
];

struct ChildAgent {
    child: Child,
    stdin: pipe::Sender,
    stdout: pipe::Receiver,
    stderr: Option<pipe::Receiver>,
    stderr_line: Vec<u8>,
    io: StreamPeer,
    started: Instant,
}

struct UnixPeer {
    stream: UnixStream,
    io: StreamPeer,
}

/// Where a peer of the link lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerHome {
    Child,
    Unix(usize),
    /// An `/agent` WebSocket: its connection key and generation.
    Ws(usize, u32),
}

pub struct LinkTransports {
    command: Option<String>,
    child: Option<ChildAgent>,
    /// Children that were told to stop and have not been reaped yet, with when they are
    /// killed if they have not exited.
    exiting: Vec<(Child, Instant)>,
    restart_delay: Duration,
    /// The child is to be started again when the restart timer fires.
    restart_wanted: bool,
    socket_path: Option<PathBuf>,
    listener: Option<UnixListener>,
    unix: Slab<UnixPeer>,
    homes: HashMap<PeerId, PeerHome>,
    next_peer: u64,
    /// Owed events whose lines were written whole, for the core (L64): [`Self::take_written`].
    written: Vec<EventKey>,
    /// Owed events whose lines an ended peer never had: [`Self::take_unwritten`].
    unwritten: Vec<EventKey>,
}

impl LinkTransports {
    pub fn new() -> LinkTransports {
        LinkTransports {
            command: None,
            child: None,
            exiting: Vec::new(),
            restart_delay: FIRST_RESTART,
            restart_wanted: false,
            socket_path: None,
            listener: None,
            unix: Slab::new(),
            homes: HashMap::new(),
            written: Vec::new(),
            unwritten: Vec::new(),
            next_peer: 1,
        }
    }

    pub fn new_peer(&mut self, home: PeerHome) -> PeerId {
        let peer = PeerId(self.next_peer);
        self.next_peer += 1;
        self.homes.insert(peer, home);
        peer
    }

    pub fn home(&self, peer: PeerId) -> Option<PeerHome> {
        self.homes.get(&peer).copied()
    }

    pub fn forget(&mut self, peer: PeerId) {
        self.homes.remove(&peer);
    }

    /// Every peer, to read again after a pause.
    pub fn all_peers(&self) -> Vec<PeerId> {
        self.homes.keys().copied().collect()
    }

    /// Every peer on a stream (child, Unix).
    pub fn stream_peers(&self) -> Vec<PeerId> {
        self.homes
            .iter()
            .filter(|(_, h)| !matches!(h, PeerHome::Ws(..)))
            .map(|(p, _)| *p)
            .collect()
    }

    // ---- exec: ---------------------------------------------------------------------

    pub fn set_command(&mut self, command: String) {
        self.command = Some(command);
    }

    /// Starts the child. On failure the caller schedules a restart.
    pub fn spawn(&mut self, registry: &Registry, now: Instant) -> io::Result<PeerId> {
        let command = self.command.clone().unwrap_or_default();
        let mut cmd = Command::new("/bin/sh");
        // A simple command replaces the shell (`exec`), so the agent is the child; one with
        // shell syntax (`cd dir && python3 a.py`) keeps the shell. Either way the child
        // leads its own process group, and signals go to the whole group.
        let script = if command.contains(|c: char| ";&|<>()$`\n".contains(c)) {
            command.clone()
        } else {
            format!("exec {command}")
        };
        cmd.arg("-c")
            .arg(script)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in SECRET_VARS {
            cmd.env_remove(var);
        }
        let mut child = cmd.spawn()?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("the child's pipes are missing"));
        };
        let mut stdin = pipe::Sender::from(stdin);
        let mut stdout = pipe::Receiver::from(stdout);
        let mut stderr = pipe::Receiver::from(stderr);
        stdin.set_nonblocking(true)?;
        stdout.set_nonblocking(true)?;
        stderr.set_nonblocking(true)?;
        registry.register(&mut stdin, CHILD_STDIN, Interest::WRITABLE)?;
        registry.register(&mut stdout, CHILD_STDOUT, Interest::READABLE)?;
        registry.register(&mut stderr, CHILD_STDERR, Interest::READABLE)?;
        log::info!("agent: started pid {}: {}", child.id(), command.escape_debug());
        let peer = self.new_peer(PeerHome::Child);
        self.child = Some(ChildAgent {
            child,
            stdin,
            stdout,
            stderr: Some(stderr),
            stderr_line: Vec::new(),
            io: StreamPeer::new(peer),
            started: now,
        });
        Ok(peer)
    }

    pub fn child_peer(&self) -> Option<PeerId> {
        self.child.as_ref().map(|c| c.io.peer)
    }

    /// The child is gone or must go: it is told to stop, its pipes are dropped, and, with
    /// `restart`, it is to start again after a delay (longer the faster it died). Returns
    /// the delay, for the restart timer.
    pub fn end_child(&mut self, registry: &Registry, now: Instant, why: &str, restart: bool) -> Option<Duration> {
        let mut c = self.child.take()?;
        let _ = registry.deregister(&mut c.stdin);
        let _ = registry.deregister(&mut c.stdout);
        if let Some(mut e) = c.stderr.take() {
            let _ = registry.deregister(&mut e);
        }
        let status = match c.child.try_wait() {
            Ok(Some(status)) => status.to_string(),
            _ => {
                signal_group(&c.child, SIGTERM);
                "still running; sent SIGTERM".into()
            }
        };
        let peer = c.io.peer;
        self.unwritten.extend(c.io.outbox.take_unwritten());
        self.homes.remove(&peer);
        let ran = now.saturating_duration_since(c.started);
        let mut delay = None;
        if restart {
            if ran >= MAX_RESTART {
                self.restart_delay = FIRST_RESTART;
            }
            self.restart_wanted = true;
            delay = Some(self.restart_delay);
            log::warn!(
                "agent: pid {} ended ({why}; {status}) after {:.1} s; restarting in {} s",
                c.child.id(),
                ran.as_secs_f64(),
                self.restart_delay.as_secs()
            );
            self.restart_delay = (self.restart_delay * 2).min(MAX_RESTART);
        } else {
            log::info!("agent: pid {} stopping ({why})", c.child.id());
        }
        self.exiting.push((c.child, now + KILL_AFTER));
        self.reap(now);
        delay
    }

    /// The child is to be started again when the restart timer fires (its start failed).
    pub fn want_restart(&mut self) {
        self.restart_wanted = true;
    }

    /// Whether a restart is wanted; asking takes it.
    pub fn take_restart(&mut self) -> bool {
        std::mem::take(&mut self.restart_wanted)
    }

    /// Collects children that have exited (no zombies left behind) and kills the group of
    /// any still running past its deadline. Returns when to look again, if any is left.
    pub fn reap(&mut self, now: Instant) -> Option<Instant> {
        self.exiting.retain_mut(|(c, deadline)| {
            if matches!(c.try_wait(), Ok(Some(_)) | Err(_)) {
                return false;
            }
            if now >= *deadline {
                log::warn!("agent: pid {} did not exit after SIGTERM; killed", c.id());
                signal_group(c, SIGKILL);
                let _ = c.wait();
                return false;
            }
            true
        });
        self.exiting.iter().map(|(_, d)| *d).min()
    }

    /// At shutdown: waits up to `grace` for the children to exit, then kills them.
    pub fn stop_children(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        while !self.exiting.is_empty() && Instant::now() < deadline {
            self.reap(Instant::now());
            std::thread::sleep(Duration::from_millis(20));
        }
        for (c, _) in &mut self.exiting {
            log::warn!("agent: pid {} did not exit in time; killed", c.id());
            signal_group(c, SIGKILL);
            let _ = c.wait();
        }
        self.exiting.clear();
    }

    /// Reads the child's stdout.
    pub fn read_child(&mut self, on_line: &mut dyn FnMut(PeerId, Option<LineItem>) -> bool) -> Option<ReadEnd> {
        let c = self.child.as_mut()?;
        Some(c.io.pump(&mut c.stdout, on_line))
    }

    /// Logs what the child wrote to stderr, a line at a time, escaped. `true`: this turn's
    /// budget ran out with more perhaps waiting (read again next turn).
    pub fn read_child_stderr(&mut self) -> bool {
        let Some(c) = self.child.as_mut() else { return false };
        let Some(stderr) = c.stderr.as_mut() else { return false };
        let pid = c.child.id();
        let mut chunk = [0u8; 4096];
        let mut taken = 0;
        loop {
            if taken >= STDERR_PER_TURN {
                return true;
            }
            match stderr.read(&mut chunk) {
                Ok(0) => {
                    c.stderr = None; // closed; stdout tells when the child is gone
                    break;
                }
                Ok(n) => {
                    taken += n;
                    for &b in &chunk[..n] {
                        if b == b'\n' {
                            log_stderr(pid, &c.stderr_line);
                            c.stderr_line.clear();
                        } else if c.stderr_line.len() < MAX_STDERR_LINE {
                            c.stderr_line.push(b);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        false
    }

    // ---- link: a Unix socket -------------------------------------------------------

    /// Listens on `path` (mode 0600). A socket file left by a gateway that is gone is
    /// replaced; one that still answers is another gateway, and an error.
    pub fn listen(&mut self, registry: &Registry, path: PathBuf) -> io::Result<()> {
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket; not touching it", path.display()),
                ));
            }
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{} is in use by another gateway", path.display()),
                ));
            }
            std::fs::remove_file(&path)?;
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        // Owner-only from the moment it exists: the umask covers the bind, the chmod below
        // the rest (no other thread creates files at start-up).
        let old = set_umask(0o177);
        let bound = UnixListener::bind(&path);
        set_umask(old);
        let mut listener = bound?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        registry.register(&mut listener, AGENT_LISTENER, Interest::READABLE)?;
        log::info!("agent link: listening on {:?}", path);
        self.listener = Some(listener);
        self.socket_path = Some(path);
        Ok(())
    }

    pub fn socket_path(&self) -> Option<&PathBuf> {
        self.socket_path.as_ref()
    }

    /// Accepts waiting connections; returns the new peers.
    pub fn accept(&mut self, registry: &Registry) -> Vec<PeerId> {
        let mut peers = Vec::new();
        let Some(listener) = &self.listener else { return peers };
        loop {
            let mut stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("agent link: accept failed: {e}");
                    break;
                }
            };
            if self.unix.len() >= MAX_UNIX_PEERS {
                log::warn!("agent link: refused a connection, {MAX_UNIX_PEERS} open");
                continue;
            }
            let entry = self.unix.vacant_entry();
            let key = entry.key();
            let token = Token(UNIX_BASE + key);
            if let Err(e) = registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE) {
                log::warn!("agent link: cannot register a connection: {e}");
                continue;
            }
            let peer = PeerId(self.next_peer);
            self.next_peer += 1;
            self.homes.insert(peer, PeerHome::Unix(key));
            entry.insert(UnixPeer {
                stream,
                io: StreamPeer::new(peer),
            });
            log::debug!("agent link: peer {} connected", peer.0);
            peers.push(peer);
        }
        peers
    }

    /// The Unix peer behind a token.
    pub fn unix_peer_of(&self, token: Token) -> Option<PeerId> {
        let key = token.0.checked_sub(UNIX_BASE)?;
        self.unix.get(key).map(|p| p.io.peer)
    }

    pub fn unix_peer_of_home(&self, home: PeerHome) -> Option<PeerId> {
        match home {
            PeerHome::Unix(key) => self.unix.get(key).map(|p| p.io.peer),
            _ => None,
        }
    }

    pub fn read_unix(
        &mut self,
        key: usize,
        on_line: &mut dyn FnMut(PeerId, Option<LineItem>) -> bool,
    ) -> Option<ReadEnd> {
        let p = self.unix.get_mut(key)?;
        Some(p.io.pump(&mut p.stream, on_line))
    }

    pub fn close_unix(&mut self, registry: &Registry, key: usize) {
        if self.unix.contains(key) {
            let mut p = self.unix.remove(key);
            let _ = p.io.outbox.flush(&mut p.stream, &mut self.written);
            self.unwritten.extend(p.io.outbox.take_unwritten());
            let _ = registry.deregister(&mut p.stream);
            let _ = p.stream.shutdown(std::net::Shutdown::Both);
            self.homes.remove(&p.io.peer);
        }
    }

    // ---- writing -------------------------------------------------------------------

    /// Queues a line for a stream peer and writes what the peer takes now. `Err`: the
    /// peer is gone or not reading; the caller ends it.
    pub fn write(&mut self, home: PeerHome, line: String, owed: Option<EventKey>) -> Result<(), String> {
        let (outbox, result) = match home {
            PeerHome::Child => {
                let Some(c) = self.child.as_mut() else {
                    self.unwritten.extend(owed);
                    return Ok(());
                };
                c.io.outbox.push(line, owed);
                let r = c.io.outbox.flush(&mut c.stdin, &mut self.written);
                (&c.io.outbox, r)
            }
            PeerHome::Unix(key) => {
                let Some(p) = self.unix.get_mut(key) else {
                    self.unwritten.extend(owed);
                    return Ok(());
                };
                p.io.outbox.push(line, owed);
                let r = p.io.outbox.flush(&mut p.stream, &mut self.written);
                (&p.io.outbox, r)
            }
            PeerHome::Ws(..) => return Ok(()),
        };
        result.map_err(|e| format!("write failed: {e}"))?;
        if outbox.bytes > MAX_OUTBOX_BYTES {
            return Err(format!("not reading: over {} MiB queued", MAX_OUTBOX_BYTES >> 20));
        }
        Ok(())
    }

    /// The owed events written whole since the last call.
    pub fn take_written(&mut self) -> Vec<EventKey> {
        std::mem::take(&mut self.written)
    }

    /// A line for a peer already gone: its event, if owed, goes to the next agent.
    pub fn note_unwritten(&mut self, owed: Option<EventKey>) {
        self.unwritten.extend(owed);
    }

    /// The owed events whose lines an ended peer never had, since the last call.
    pub fn take_unwritten(&mut self) -> Vec<EventKey> {
        std::mem::take(&mut self.unwritten)
    }

    /// The peer's socket or pipe became writable.
    pub fn flush(&mut self, home: PeerHome) -> Result<(), String> {
        let result = match home {
            PeerHome::Child => match self.child.as_mut() {
                Some(c) => c.io.outbox.flush(&mut c.stdin, &mut self.written),
                None => Ok(()),
            },
            PeerHome::Unix(key) => match self.unix.get_mut(key) {
                Some(p) => p.io.outbox.flush(&mut p.stream, &mut self.written),
                None => Ok(()),
            },
            PeerHome::Ws(..) => Ok(()),
        };
        result.map_err(|e| format!("write failed: {e}"))
    }

    /// At shutdown: no more agents are accepted, and the socket file goes.
    pub fn stop_listening(&mut self, registry: &Registry) {
        if let Some(mut listener) = self.listener.take() {
            let _ = registry.deregister(&mut listener);
        }
        if let Some(path) = self.socket_path.take() {
            let _ = std::fs::remove_file(path);
        }
        self.restart_wanted = false;
    }
}

fn log_stderr(pid: u32, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end_matches('\r');
    if !text.is_empty() {
        log::info!("agent[{pid}]: {}", text.escape_debug());
    }
}

const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;
/// How long a child has between SIGTERM and SIGKILL.
const KILL_AFTER: Duration = Duration::from_secs(3);

/// Signals the child's process group (it leads one: `process_group(0)`), so that whatever
/// the agent started goes with it and cannot hold its stdout open.
fn signal_group(child: &Child, signal: i32) {
    extern "C" {
        // POSIX `int kill(pid_t pid, int sig)`; a negative pid names a process group.
        fn kill(pid: i32, sig: i32) -> i32;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) on the group our own unreaped child leads (its `Child` is
        // alive, so the pid, and the group id equal to it, cannot have been reused).
        unsafe { kill(-pid, signal) };
    }
}

pub(super) fn set_umask(mask: u32) -> u32 {
    extern "C" {
        // POSIX `mode_t umask(mode_t mask)`; it cannot fail.
        fn umask(mask: u32) -> u32;
    }
    // SAFETY: umask only swaps the process's file creation mask.
    unsafe { umask(mask) }
}
