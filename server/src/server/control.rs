//! The control socket (issue 26 §3): `<state dir>/control.sock`, mode 0600, so only the
//! gateway's own user (and root) can use it. `hermes-mobile pair`, `devices` and `devices
//! revoke` talk to the running gateway through it: one JSON line each way, then the
//! gateway closes. A revocation is answered after the commit that keeps it.
//!
//! Bounded like everything else on the loop: at most [`MAX_CONTROL`] connections, a line
//! of at most [`MAX_LINE`] bytes, and [`CONTROL_TIMEOUT`] for the whole exchange.

use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hermes_mobile::devices::{codes, KeptCode};
use hermes_mobile::gateway::RevokeOutcome;
use mio::net::{UnixListener, UnixStream};
use mio::{Interest, Token};
use serde::Deserialize;
use serde_json::json;

use super::Server;
use crate::timer::TimerKey;

pub(super) const CONTROL_LISTENER: Token = Token(usize::MAX - 8);
/// Control connections get `CONTROL_BASE + slab key`: above the agent link's Unix peers.
const CONTROL_BASE: usize = usize::MAX / 4 * 3;
const MAX_CONTROL: usize = 4;
const MAX_LINE: usize = 4096;
pub(super) const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// The socket's name in the state directory.
pub const CONTROL_SOCKET: &str = "control.sock";

/// One request, as the CLI sends it.
#[derive(Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
enum Request {
    /// A new pairing code, made by the CLI (the gateway keeps only its digest).
    Pair {
        code: String,
        owner: bool,
        ttl: u64,
    },
    Devices,
    Revoke {
        device: String,
        forget: bool,
    },
}

struct ControlConn {
    stream: UnixStream,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Its revocation waits for this request's commit.
    waiting: Option<u64>,
    serial: u64,
}

#[derive(Default)]
pub(super) struct Control {
    listener: Option<UnixListener>,
    path: Option<PathBuf>,
    conns: slab::Slab<ControlConn>,
    next: u64,
}

impl Control {
    /// Listens at `path`, owner-only. A socket left by a gateway that is gone is replaced;
    /// one that still answers belongs to another gateway on the same state directory.
    pub(super) fn listen(&mut self, registry: &mio::Registry, path: PathBuf) -> io::Result<()> {
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            if !meta.file_type().is_socket() {
                let why = format!("{} exists and is not a socket; not touching it", path.display());
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, why));
            }
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                let why = format!(
                    "{} is in use: another gateway runs on this state directory",
                    path.display()
                );
                return Err(io::Error::new(io::ErrorKind::AddrInUse, why));
            }
            std::fs::remove_file(&path)?;
        }
        let old = super::link_transports::set_umask(0o177);
        let bound = UnixListener::bind(&path);
        super::link_transports::set_umask(old);
        let mut listener = bound?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        registry.register(&mut listener, CONTROL_LISTENER, Interest::READABLE)?;
        self.listener = Some(listener);
        self.path = Some(path);
        Ok(())
    }

    /// Removes the socket file (a clean stop): the CLI then acts on the journal itself.
    pub(super) fn stop(&mut self) {
        self.listener = None;
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }

    pub(super) fn owns(token: Token) -> Option<usize> {
        token.0.checked_sub(CONTROL_BASE).filter(|k| *k < MAX_CONTROL)
    }
}

impl Server {
    pub(super) fn control_accept(&mut self, now: Instant) {
        loop {
            let Some(listener) = &self.control.listener else { return };
            let mut stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return log::warn!("control socket: accept failed: {e}"),
            };
            if self.control.conns.len() >= MAX_CONTROL {
                log::warn!("control socket: refused a connection, {MAX_CONTROL} open");
                continue;
            }
            let entry = self.control.conns.vacant_entry();
            let key = entry.key();
            let token = Token(CONTROL_BASE + key);
            if let Err(e) = self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            {
                log::warn!("control socket: cannot register a connection: {e}");
                continue;
            }
            self.control.next += 1;
            let serial = self.control.next;
            entry.insert(ControlConn {
                stream,
                input: Vec::new(),
                output: Vec::new(),
                waiting: None,
                serial,
            });
            self.wheel.insert(now + CONTROL_TIMEOUT, TimerKey::Control(key, serial));
        }
    }

    pub(super) fn control_io(&mut self, key: usize, now: Instant) {
        let Some(c) = self.control.conns.get_mut(key) else {
            return;
        };
        if c.output.is_empty() && c.waiting.is_none() {
            let mut buf = [0u8; 1024];
            let mut ended = false;
            loop {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(n) => c.input.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return self.control_close(key),
                }
                if c.input.len() > MAX_LINE || c.input.contains(&b'\n') {
                    break;
                }
            }
            let Some(end) = c.input.iter().position(|b| *b == b'\n') else {
                if c.input.len() > MAX_LINE {
                    self.control_answer(key, json!({"ok": false, "error": "request over 4 KiB"}));
                    return self.control_flush(key);
                }
                if ended {
                    self.control_close(key);
                }
                return;
            };
            let line = c.input[..end].to_vec();
            self.control_request(key, &line, now);
        }
        self.control_flush(key);
    }

    fn control_request(&mut self, key: usize, line: &[u8], now: Instant) {
        let t = self.time(now);
        let request = match serde_json::from_slice::<Request>(line) {
            Ok(r) => r,
            Err(e) => return self.control_answer(key, json!({"ok": false, "error": format!("bad request: {e}")})),
        };
        match request {
            Request::Pair { code, owner, ttl } => {
                let expires = t + Duration::from_secs(ttl.clamp(1, 86_400));
                let answer = match self.wiring.add_pair_code(t, KeptCode::new(&code, owner, expires)) {
                    Ok(()) => json!({"ok": true}),
                    Err(codes::CodeError::TooMany) => json!({
                        "ok": false,
                        "error": format!("{} pairing codes are waiting already; use one or wait for one to expire", codes::MAX_OUTSTANDING),
                    }),
                };
                self.control_answer(key, answer);
            }
            Request::Devices => {
                let items = self.wiring.core().paired_devices();
                self.control_answer(key, json!({"ok": true, "devices": items}));
            }
            Request::Revoke { device, forget } => {
                self.control.next += 1;
                let request = self.control.next;
                if let Some(c) = self.control.conns.get_mut(key) {
                    c.waiting = Some(request);
                }
                self.wiring.handle_revoke(t, request, &device, forget);
            }
        }
    }

    /// The wiring's answer to a waiting revocation.
    pub(super) fn control_revoked(&mut self, request: u64, outcome: RevokeOutcome) {
        let Some(key) = self
            .control
            .conns
            .iter()
            .find(|(_, c)| c.waiting == Some(request))
            .map(|(k, _)| k)
        else {
            return;
        };
        let answer = match outcome {
            RevokeOutcome::Revoked => json!({"ok": true}),
            RevokeOutcome::NotPaired => json!({"ok": false, "error": "no paired device with that id"}),
            RevokeOutcome::NotKept => json!({
                "ok": false,
                "error": "revoked until the gateway restarts, but the journal could not keep it: try again",
            }),
        };
        if let Some(c) = self.control.conns.get_mut(key) {
            c.waiting = None;
        }
        self.control_answer(key, answer);
        self.control_flush(key);
    }

    fn control_answer(&mut self, key: usize, answer: serde_json::Value) {
        if let Some(c) = self.control.conns.get_mut(key) {
            c.output = answer.to_string().into_bytes();
            c.output.push(b'\n');
            c.input.clear();
        }
    }

    /// Writes what is queued; once it is out, the exchange is over.
    fn control_flush(&mut self, key: usize) {
        let Some(c) = self.control.conns.get_mut(key) else {
            return;
        };
        while !c.output.is_empty() {
            match c.stream.write(&c.output) {
                Ok(0) => return self.control_close(key),
                Ok(n) => {
                    c.output.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.control_close(key),
            }
            if c.output.is_empty() {
                return self.control_close(key);
            }
        }
    }

    pub(super) fn control_overdue(&mut self, key: usize, serial: u64) {
        if self.control.conns.get(key).is_some_and(|c| c.serial == serial) {
            log::debug!("control socket: a connection took over {CONTROL_TIMEOUT:?}; closed");
            self.control_close(key);
        }
    }

    fn control_close(&mut self, key: usize) {
        if self.control.conns.contains(key) {
            let mut c = self.control.conns.remove(key);
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
    }
}
