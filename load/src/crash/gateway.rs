//! The gateway under test: started on loopback with a free port on one state directory,
//! killed with SIGKILL, stopped with SIGTERM, started again; and the address the phones
//! reconnect to, which changes with each start.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a start may take before the run fails (a cold SQLite file, a slow CI disk).
const START_WAIT: Duration = Duration::from_secs(30);
/// How long a SIGTERM may take before it counts as not stopping.
const STOP_WAIT: Duration = Duration::from_secs(20);

/// Everything a start needs, the same for every start of one run.
pub struct Setup {
    pub bin: PathBuf,
    pub state_dir: PathBuf,
    pub token: String,
    /// `MOBILE_AGENT`, `exec:…`.
    pub agent: String,
    /// Where each start's log goes, as `gateway-<n>.log`.
    pub dir: PathBuf,
}

pub struct Gateway {
    pub generation: u32,
    pub child: Child,
    pub port: u16,
    pub started: Instant,
}

/// How a gateway went.
pub enum Stopped {
    /// It exited by itself after SIGTERM, with this status.
    Exited(std::process::ExitStatus),
    /// It was still running `STOP_WAIT` after SIGTERM, and was SIGKILLed.
    Hung,
}

impl Setup {
    /// Starts generation `generation` and waits for its `listening on ws://127.0.0.1:PORT/ws`
    /// line. The whole log (stderr, and stdout's pairing text) goes to `gateway-<n>.log`.
    pub fn start(&self, generation: u32) -> Result<Gateway, String> {
        let log = self.dir.join(format!("gateway-{generation}.log"));
        let stdout = File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let mut cmd = Command::new(&self.bin);
        // Only this run's settings: none of the caller's MOBILE_* (a token, a port) leak in.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("MOBILE_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("MOBILE_HOST", "127.0.0.1")
            .env("MOBILE_PORT", "0")
            .env("MOBILE_STATE_DIR", &self.state_dir)
            .env("MOBILE_TOKEN", &self.token)
            .env("MOBILE_AGENT", &self.agent)
            .env("MOBILE_WEB", "off")
            // Without it every start logs a warning that is noise here.
            .env("MOBILE_PUSH_SUBJECT", "mailto:crash-test@example.org")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        let mut copy = File::options()
            .append(true)
            .open(&log)
            .map_err(|e| format!("cannot append to {}: {e}", log.display()))?;
        // Copies the log to its file and reports the port once; it ends at the log's EOF.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(copy, "{line}");
                if let Some(port) = listening_port(&line) {
                    let _ = tx.send(port);
                }
            }
        });
        let deadline = started + START_WAIT;
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(port) => {
                    return Ok(Gateway {
                        generation,
                        child,
                        port,
                        started,
                    })
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!(
                            "gateway #{generation} exited ({status}) before listening; its log:\n{}",
                            tail(&log, 30)
                        ));
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "gateway #{generation} did not say `listening on` within {START_WAIT:?}; its log:\n{}",
                        tail(&log, 30)
                    ));
                }
            }
        }
    }
}

impl Gateway {
    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/ws", self.port)
    }

    /// SIGKILL (what `Child::kill` sends on Unix), and reaps it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits; SIGKILL if it has not stopped within `STOP_WAIT`.
    pub fn stop(mut self) -> Stopped {
        // SIGTERM through the shell's `kill` builtin: std sends only SIGKILL, and this keeps
        // the load tool free of a libc dependency of its own.
        let _ = Command::new("/bin/sh")
            .args(["-c", "kill -TERM \"$1\"", "sh", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + STOP_WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Stopped::Exited(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        Stopped::Hung
    }
}

/// The port in `… listening on ws://127.0.0.1:PORT/ws (agent: …)`.
fn listening_port(line: &str) -> Option<u16> {
    let rest = line.split("listening on ws://127.0.0.1:").nth(1)?;
    rest.split('/').next()?.parse().ok()
}

/// The last `n` lines of a log, for a report.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The gateway's current address, or none while it is down; the phones wait on it.
#[derive(Default)]
pub struct Address {
    now: Mutex<Option<(u32, String)>>,
    changed: Condvar,
}

impl Address {
    pub fn set(&self, to: Option<(u32, String)>) {
        *self.now.lock().unwrap() = to;
        self.changed.notify_all();
    }

    /// The address once the gateway is up, unless `deadline` comes first.
    pub fn wait(&self, deadline: Instant) -> Option<(u32, String)> {
        let mut now = self.now.lock().unwrap();
        loop {
            if let Some(up) = now.as_ref() {
                return Some(up.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            now = self.changed.wait_timeout(now, left).unwrap().0;
        }
    }
}

/// A path as one `sh` word: bare when it is plain, else single-quoted.
pub fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:=@,".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_comes_from_the_listening_line() {
        let line = "INFO  [hermes_mobile_server::cli] listening on ws://127.0.0.1:42085/ws (agent: exec)";
        assert_eq!(listening_port(line), Some(42085));
        assert_eq!(listening_port("INFO  web client: off"), None);
    }

    #[test]
    fn shell_words_quote_only_what_needs_it() {
        assert_eq!(shell_word("/tmp/a-b/c.log"), "/tmp/a-b/c.log");
        assert_eq!(shell_word("/tmp/a b/it's"), r"'/tmp/a b/it'\''s'");
    }
}
