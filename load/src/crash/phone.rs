//! One phone of the crash run: turns one at a time, each a message with a new id, re-sent
//! (same id) on each new connection until its `received` comes; every `hello` resumes after
//! the highest seq the phone has kept. It records every frame, and never asserts: the
//! checks read what it saw at the end. Every wait is bounded.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::gateway::Address;
use super::record::{Conn, Frame, PhoneLog, Sent};
use super::Rng;
use crate::client::Client;

/// How long a phone waits for the gateway to be back (a start itself waits at most 30 s).
const RECONNECT_WAIT: Duration = Duration::from_secs(60);
/// From `hello` to `resumed`.
const REPLAY_WAIT: Duration = Duration::from_secs(30);
/// A message with no `received` on a live connection is sent again after this.
const RESEND_AFTER: Duration = Duration::from_secs(10);
/// A message with no `received` this long after its first send fails the run.
const CONFIRM_WAIT: Duration = Duration::from_secs(90);
/// How long a phone waits for a reply before its next turn. A reply that comes later, or
/// only in a replay, still counts: this only paces the turns.
const REPLY_WAIT: Duration = Duration::from_secs(2);
/// One read's wait, so that deadlines and the stop flag are looked at often.
const TICK: Duration = Duration::from_millis(100);
/// One in this many sends, and of `received`s, is followed by the phone losing its network:
/// the socket dropped, a pause of up to `OFFLINE_MS`, a reconnect. Replies then wait for the
/// phone in the journal, and re-sends meet the dedup window.
const DROP_ONE_IN: u64 = 10;
const OFFLINE_MS: u64 = 300;

/// What the phones share with the run.
pub struct Shared {
    pub address: Address,
    pub token: String,
    /// Makes this run's message ids its own.
    pub run: String,
    pub t0: Instant,
    pub seed: u64,
    /// No new turns: finish the one in flight and return.
    pub stop: AtomicBool,
    /// Something else failed: return now.
    pub abort: AtomicBool,
}

/// The message in flight.
struct Turn {
    sent: usize,
    first_sent: Instant,
    /// The last send on the current connection (none yet on it).
    last_sent: Option<Instant>,
    /// Set once `received` came: when to stop waiting for the reply.
    reply_by: Option<Instant>,
}

enum HelloError {
    NoJournal(String),
    Failed(String),
}

pub struct Phone {
    shared: Arc<Shared>,
    pub log: PhoneLog,
    /// The highest seq kept: of a message's last chunk, a file, a card or its closing (as
    /// web/protocol.js keeps it; a `received` seq is the phone's own entry, never replayed).
    hw: u64,
    conn: Option<Client>,
    turns: u64,
    current: Option<Turn>,
    by_id: HashMap<String, usize>,
    /// The messages whose reply (`re: <id>`) this phone has seen.
    replies: HashSet<String>,
    rng: Rng,
}

impl Phone {
    pub fn new(shared: Arc<Shared>, index: usize) -> Phone {
        Phone {
            log: PhoneLog {
                device: format!("crash-{index}"),
                ..PhoneLog::default()
            },
            hw: 0,
            conn: None,
            turns: 0,
            current: None,
            by_id: HashMap::new(),
            replies: HashSet::new(),
            rng: Rng::new(shared.seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            shared,
        }
    }

    fn now(&self) -> f64 {
        self.shared.t0.elapsed().as_secs_f64()
    }

    fn generation(&self) -> u32 {
        self.log.conns.last().map_or(0, |c| c.generation)
    }

    fn fail(&mut self, why: String) {
        self.log.failure.get_or_insert(why);
        self.conn = None;
    }

    /// The connection is gone (dropped here, or broken): noted with why.
    fn lost(&mut self, why: String) {
        if self.conn.take().is_some() {
            let at = self.now();
            self.log.ends.push((at, why));
        }
    }

    /// Turns until the run says stop (the one in flight finished) or something fails.
    pub fn run_turns(&mut self) {
        while !self.shared.abort.load(Ordering::Relaxed) {
            if self.conn.is_none() {
                if let Err(e) = self.connect(false) {
                    return self.fail(e);
                }
                if let Some(t) = self.current.as_mut() {
                    t.last_sent = None;
                }
            }
            if self.current.is_none() {
                if self.shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                self.next_turn();
            }
            let t = self.current.as_mut().expect("a turn was just made");
            let sent = &self.log.sent[t.sent];
            if !sent.confirmed() {
                if t.first_sent.elapsed() > CONFIRM_WAIT {
                    let why = format!(
                        "{}: {} got no `received` within {CONFIRM_WAIT:?} ({} sends)",
                        self.log.device,
                        sent.id,
                        sent.sends.len()
                    );
                    return self.fail(why);
                }
                if t.last_sent.is_none_or(|at| at.elapsed() > RESEND_AFTER) {
                    t.last_sent = Some(Instant::now());
                    let i = t.sent;
                    self.send(i);
                    self.maybe_go_offline();
                    continue;
                }
            } else {
                if t.reply_by.is_none() {
                    t.reply_by = Some(Instant::now() + REPLY_WAIT);
                    self.maybe_go_offline();
                    continue;
                }
                let by = t.reply_by.expect("set above");
                if self.replies.contains(&sent.id) || Instant::now() >= by {
                    self.current = None;
                    continue;
                }
            }
            self.read();
        }
        self.close();
    }

    /// After the clean stop and restart: one last `hello` with `resume`, its replay, and a close.
    pub fn final_resume(&mut self) {
        if self.log.failure.is_some() {
            return;
        }
        match self.connect(true) {
            Ok(()) => self.close(),
            Err(e) => self.fail(format!("final resume: {e}")),
        }
    }

    /// Now and then, the phone loses its network for a moment (see `DROP_ONE_IN`).
    fn maybe_go_offline(&mut self) {
        if self.conn.is_some() && self.rng.below(DROP_ONE_IN) == 0 {
            self.lost("dropped on purpose".into());
            std::thread::sleep(Duration::from_millis(self.rng.below(OFFLINE_MS + 1)));
        }
    }

    fn next_turn(&mut self) {
        self.turns += 1;
        let id = format!("{}-{}-{}", self.shared.run, self.log.device, self.turns);
        self.by_id.insert(id.clone(), self.log.sent.len());
        self.log.sent.push(Sent { id, ..Sent::default() });
        self.current = Some(Turn {
            sent: self.log.sent.len() - 1,
            first_sent: Instant::now(),
            last_sent: None,
            reply_by: None,
        });
    }

    fn send(&mut self, i: usize) {
        let (at, generation) = (self.now(), self.generation());
        let sent = &mut self.log.sent[i];
        sent.sends.push((at, generation));
        let frame = json!({"t":"text","id":sent.id,"text":format!("turn {}", i + 1)});
        if let Some(c) = self.conn.as_mut() {
            if let Err(e) = c.send(&frame) {
                self.lost(format!("send: {e}"));
            }
        }
    }

    /// One frame, if one comes within a tick; a broken connection is dropped.
    fn read(&mut self) {
        let Some(c) = self.conn.as_mut() else { return };
        match c.recv_within(TICK) {
            Ok(Some(f)) => self.take(&f, false),
            Ok(None) => {}
            Err(e) => self.lost(format!("read: {e}")),
        }
    }

    fn close(&mut self) {
        if let Some(c) = self.conn.take() {
            c.close();
            let at = self.now();
            self.log.ends.push((at, "closed".into()));
        }
    }

    /// Connects to the gateway now up, with `hello` and `resume`, through the replay.
    fn connect(&mut self, final_resume: bool) -> Result<(), String> {
        let deadline = Instant::now() + RECONNECT_WAIT;
        let mut last = String::from("none");
        loop {
            if self.shared.abort.load(Ordering::Relaxed) {
                return Err("stopped: another part of the run failed".into());
            }
            let Some((generation, url)) = self.shared.address.wait(deadline) else {
                return Err(format!(
                    "{}: no gateway to connect to within {RECONNECT_WAIT:?} (last error: {last})",
                    self.log.device
                ));
            };
            match self.hello(generation, &url, final_resume) {
                Ok(c) => {
                    self.conn = Some(c);
                    return Ok(());
                }
                Err(HelloError::NoJournal(ready)) => {
                    return Err(format!(
                        "gateway #{generation} runs without a journal: its ready has no seq ({ready}); \
                         an old build? Build it with `cargo build --release -p hermes-mobile-server`"
                    ))
                }
                Err(HelloError::Failed(e)) => last = format!("#{generation}: {e}"),
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: could not connect within {RECONNECT_WAIT:?} (last error: {last})",
                    self.log.device
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn hello(&mut self, generation: u32, url: &str, final_resume: bool) -> Result<Client, HelloError> {
        let failed = |e: std::io::Error| HelloError::Failed(e.to_string());
        let mut c = Client::connect(url).map_err(failed)?;
        let after = self.hw;
        c.send(
            &json!({"t":"hello","token":self.shared.token,"device":{"id":self.log.device},
            "resume":{"after":after}}),
        )
        .map_err(failed)?;
        let deadline = Instant::now() + REPLAY_WAIT;
        let ready = loop {
            if let Some(f) = c.recv_within(TICK).map_err(failed)? {
                break f;
            }
            if Instant::now() >= deadline {
                return Err(HelloError::Failed("no ready".into()));
            }
        };
        if ready["t"] != "ready" {
            return Err(HelloError::Failed(format!("no ready: {ready}")));
        }
        let Some(ready_seq) = ready["seq"].as_u64() else {
            return Err(HelloError::NoJournal(ready.to_string()));
        };
        self.log.conns.push(Conn {
            generation,
            at: self.now(),
            after,
            ready_seq: Some(ready_seq),
            final_resume,
            frames: Vec::new(),
        });
        loop {
            match c.recv_within(TICK).map_err(failed)? {
                Some(f) if f["t"] == "resumed" => {
                    self.take(&f, true);
                    return Ok(c);
                }
                Some(f) => self.take(&f, true),
                None if Instant::now() >= deadline => return Err(HelloError::Failed("no resumed".into())),
                None => {}
            }
        }
    }

    /// Records one frame on the current connection.
    fn take(&mut self, f: &Value, replayed: bool) {
        let at = self.now();
        let generation = self.generation();
        let text = |k: &str| f[k].as_str().unwrap_or("").to_owned();
        let seq = f["seq"].as_u64();
        let frame = match f["t"].as_str().unwrap_or("") {
            "message" => {
                let chunk = f["chunk"]["index"].as_u64().unwrap_or(0);
                let last_chunk = chunk + 1 >= f["chunk"]["total"].as_u64().unwrap_or(1);
                if last_chunk {
                    self.hw = self.hw.max(seq.unwrap_or(0));
                    if let Some(to) = text("text").strip_prefix("re: ") {
                        self.replies.insert(to.to_owned());
                    }
                }
                Frame::Message {
                    id: text("id"),
                    text: text("text"),
                    seq,
                    last_chunk,
                    chunk,
                    replayed,
                    at,
                }
            }
            t @ ("media" | "prompt" | "prompt_done") => {
                self.hw = self.hw.max(seq.unwrap_or(0));
                let id = if t == "media" {
                    text("id")
                } else {
                    text("prompt_id") + &text("id")
                };
                Frame::Other {
                    t: t.to_owned(),
                    id,
                    seq,
                    at,
                }
            }
            "received" => {
                if let Some(&i) = self.by_id.get(f["id"].as_str().unwrap_or("")) {
                    self.log.sent[i].received.push((seq, at, generation));
                }
                Frame::Received {
                    id: text("id"),
                    seq,
                    at,
                }
            }
            "resumed" => Frame::Resumed { seq },
            "error" => Frame::Error {
                frame: f.to_string(),
                at,
            },
            _ => return,
        };
        if let Some(conn) = self.log.conns.last_mut() {
            conn.frames.push(frame);
        }
    }
}
