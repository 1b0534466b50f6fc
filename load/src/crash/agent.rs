//! The crash test's agent (`hermes-mobile-load crash-agent FILE SEED`), an `exec:` child of
//! the gateway speaking docs/agent-protocol.md. It answers each `message` with one final
//! `reply` whose text names the message id (`re: <id>`), after a short pause drawn from the
//! id and the seed, so that kills also land while a turn is in the agent's hands.
//!
//! Every event goes to FILE as one line, appended with one `write` and flushed before the
//! agent acts on it, so the file is the truth of what the agent got and did:
//!
//! ```text
//! <unix µs> <pid> start
//! <unix µs> <pid> got <message id> <device>      before any reply is written
//! <unix µs> <pid> wrote <message id>             the reply and end_turn are in the pipe
//! <unix µs> <pid> unsent <message id>            the pipe was gone (the gateway died first)
//! <unix µs> <pid> again <message id>             a redelivered message it had already got
//! <unix µs> <pid> ok <message id>                the gateway took the reply (its `ok`)
//! <unix µs> <pid> error <message id> <code>      the gateway refused it
//! <unix µs> <pid> eof                            stdin closed: the gateway is gone or stopping
//! ```
//!
//! A gateway that is SIGKILLed does not signal its agent: the agent still reads what was
//! already in its stdin pipe (and logs it: the agent did get those), then sees EOF and exits.
//! It stops pausing once its parent is gone, so that it has logged what it got before a new
//! gateway can hand the same messages over again.
//!
//! The log is also the agent's memory, as a real agent keeps its sessions: a message the
//! gateway hands over again after a restart (`redelivered`, L64) that the log says it got is
//! dropped (`again`); it is answered only if no reply of it was ever written.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::time::Duration;

use serde_json::{json, Value};

/// The longest pause before a reply, in ms.
const MAX_PAUSE_MS: u64 = 40;

struct Log {
    file: File,
    pid: u32,
}

impl Log {
    /// One event, one `write` on an O_APPEND file: lines from several agents (an orphan of a
    /// killed gateway and its successor's) never interleave.
    fn event(&mut self, what: &str) {
        let line = format!("{} {} {what}\n", super::unix_micros(), self.pid);
        if let Err(e) = self.file.write_all(line.as_bytes()).and_then(|()| self.file.flush()) {
            eprintln!("crash-agent: cannot write its log: {e}");
            std::process::exit(1);
        }
    }
}

/// The pause before answering `id`: reproducible from the seed, 0 to `MAX_PAUSE_MS` ms.
fn pause_for(id: &str, seed: u64) -> Duration {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    Duration::from_millis(super::Rng::new(h).below(MAX_PAUSE_MS + 1))
}

fn send(out: &mut impl Write, lines: &[Value]) -> std::io::Result<()> {
    let mut text = String::new();
    for v in lines {
        text.push_str(&v.to_string());
        text.push('\n');
    }
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// How long a redelivered message waits for the agents before this one to finish.
const ORPHAN_WAIT: Duration = Duration::from_secs(5);

/// Whether the log (every agent's of this run) says `id` was got, and a reply of it written.
///
/// The agent of a SIGKILLed gateway may still be reading what was in its pipe while the
/// next gateway hands the same message over again (a start takes ~10 ms); as one agent's
/// memory, the log is read once every earlier agent has logged its `eof`.
fn remembered(path: &str, id: &str) -> (bool, bool) {
    let me = std::process::id().to_string();
    let deadline = std::time::Instant::now() + ORPHAN_WAIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let (mut got, mut wrote) = (false, false);
        let mut running = std::collections::HashSet::new();
        for line in text.lines() {
            let w: Vec<&str> = line.split(' ').collect();
            match (w.get(1), w.get(2), w.get(3)) {
                (Some(&pid), Some(&"start"), _) if pid != me => {
                    running.insert(pid);
                }
                (Some(&pid), Some(&"eof"), _) => {
                    running.remove(pid);
                }
                (_, Some(&"got"), Some(&i)) if i == id => got = true,
                (_, Some(&"wrote"), Some(&i)) if i == id => wrote = true,
                _ => {}
            }
        }
        if running.is_empty() || std::time::Instant::now() >= deadline {
            return (got, wrote);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn run(path: &str, seed: u64) -> ! {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| {
            eprintln!("crash-agent: cannot open {path}: {e}");
            std::process::exit(1)
        });
    let mut log = Log {
        file,
        pid: std::process::id(),
    };
    log.event("start");
    let mut out = std::io::stdout().lock();
    if send(
        &mut out,
        &[json!({"t":"hello","v":1,"agent":"crash-agent","inline":false})],
    )
    .is_err()
    {
        log.event("eof");
        std::process::exit(0);
    }
    // Once a write fails (or the parent changed) the gateway is gone; what it had already
    // put in the pipe is still read to its EOF and logged, since the agent did get it.
    let parent = std::os::unix::process::parent_id();
    let mut gone = false;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let field = |k: &str| v[k].as_str().unwrap_or("").to_owned();
        match v["t"].as_str() {
            Some("message") => {
                let (id, device) = (field("id"), field("device"));
                if v["redelivered"] == true {
                    let (got, wrote) = remembered(path, &id);
                    if got {
                        log.event(&format!("again {id}"));
                        if wrote {
                            continue;
                        }
                    } else {
                        log.event(&format!("got {id} {device}"));
                    }
                } else {
                    log.event(&format!("got {id} {device}"));
                }
                gone |= std::os::unix::process::parent_id() != parent;
                if !gone {
                    std::thread::sleep(pause_for(&id, seed));
                    let reply = json!({"t":"reply","ref":id,"device":device,"id":format!("re-{id}"),
                        "text":format!("re: {id}"),"done":true});
                    let end = json!({"t":"end_turn","device":device});
                    gone = send(&mut out, &[reply, end]).is_err();
                }
                log.event(&format!("{} {id}", if gone { "unsent" } else { "wrote" }));
            }
            Some("ok") if !field("ref").is_empty() => log.event(&format!("ok {}", field("ref"))),
            Some("error") if !field("ref").is_empty() => {
                log.event(&format!("error {} {}", field("ref"), field("code")))
            }
            _ => {}
        }
    }
    log.event("eof");
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_are_bounded_and_reproducible() {
        for i in 0..200 {
            let id = format!("m-{i}");
            let p = pause_for(&id, 7);
            assert!(p <= Duration::from_millis(MAX_PAUSE_MS));
            assert_eq!(p, pause_for(&id, 7));
        }
        let spread: std::collections::HashSet<_> = (0..200).map(|i| pause_for(&format!("m-{i}"), 7)).collect();
        assert!(spread.len() > 20, "pauses vary: {}", spread.len());
    }
}
