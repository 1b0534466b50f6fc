//! What a crash run observed, as plain data: each phone's sends, connections and frames, the
//! agent's log, and the kills. The checks (check.rs) read only this, so they are tested
//! without a gateway.

/// Seconds since the run began.
pub type At = f64;

/// One message a phone sent (one id; re-sent after each reconnect until `received`).
#[derive(Debug, Clone, Default)]
pub struct Sent {
    pub id: String,
    /// Each send: when, and to which gateway start.
    pub sends: Vec<(At, u32)>,
    /// Each `received` for it: its seq (`None`: the frame had none), when, which start.
    pub received: Vec<(Option<u64>, At, u32)>,
}

impl Sent {
    pub fn confirmed(&self) -> bool {
        !self.received.is_empty()
    }
}

/// A frame a phone got, as far as the checks care.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Message {
        id: String,
        text: String,
        seq: Option<u64>,
        last_chunk: bool,
        chunk: u64,
        /// Between `ready` and `resumed`: part of the replay.
        replayed: bool,
        at: At,
    },
    /// `media`, `prompt` or `prompt_done` (none is expected here; kept for the seq checks).
    Other {
        t: String,
        id: String,
        seq: Option<u64>,
        at: At,
    },
    Received {
        id: String,
        seq: Option<u64>,
        at: At,
    },
    Resumed {
        seq: Option<u64>,
    },
    Error {
        frame: String,
        at: At,
    },
}

/// One connection that got as far as `ready`.
#[derive(Debug, Clone, Default)]
pub struct Conn {
    /// The gateway start it was made to.
    pub generation: u32,
    pub at: At,
    /// The `resume.after` its `hello` carried: the phone's highest seq then.
    pub after: u64,
    pub ready_seq: Option<u64>,
    /// The last connection, after the clean stop and restart.
    pub final_resume: bool,
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Default)]
pub struct PhoneLog {
    pub device: String,
    pub sent: Vec<Sent>,
    pub conns: Vec<Conn>,
    /// Each connection's end: when, and why (dropped on purpose, an error).
    pub ends: Vec<(At, String)>,
    /// Why the phone stopped early (it could not reconnect, a message was never confirmed).
    pub failure: Option<String>,
}

impl PhoneLog {
    /// Whether the phone had a connection at `t`, for a report.
    pub fn state_at(&self, t: At) -> String {
        let on = self.conns.iter().filter(|c| c.at <= t).map(|c| {
            let what = format!("online (ready from #{} at {:.3} s)", c.generation, c.at);
            (c.at, what)
        });
        let off = self
            .ends
            .iter()
            .filter(|(at, _)| *at <= t)
            .map(|(at, why)| (*at, format!("offline since {at:.3} s ({why})")));
        on.chain(off)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map_or_else(|| "not yet connected".to_owned(), |(_, what)| what)
    }

    /// Everything the phone did and saw, one line each in time order: kept with a failed
    /// run's directory (`phones.log`).
    pub fn timeline(&self) -> Vec<(At, String)> {
        let d = &self.device;
        let mut lines = Vec::new();
        for s in &self.sent {
            for (at, g) in &s.sends {
                lines.push((*at, format!("{d} send {} to #{g}", s.id)));
            }
        }
        for (at, why) in &self.ends {
            lines.push((*at, format!("{d} connection ended: {why}")));
        }
        for c in &self.conns {
            lines.push((
                c.at,
                format!(
                    "{d} ready from #{} (resume after {}, ready.seq {:?}){}",
                    c.generation,
                    c.after,
                    c.ready_seq,
                    if c.final_resume { " final resume" } else { "" }
                ),
            ));
            for f in &c.frames {
                let line = match f {
                    Frame::Message {
                        id,
                        seq,
                        chunk,
                        replayed,
                        at,
                        ..
                    } => {
                        let how = if *replayed { "replayed" } else { "live" };
                        (*at, format!("{d} message {id} seq {seq:?} chunk {chunk} {how}"))
                    }
                    Frame::Other { t, id, seq, at } => (*at, format!("{d} {t} {id} seq {seq:?}")),
                    Frame::Received { id, seq, at } => (*at, format!("{d} received {id} seq {seq:?}")),
                    Frame::Resumed { seq } => (c.at, format!("{d} resumed seq {seq:?}")),
                    Frame::Error { frame, at } => (*at, format!("{d} error {frame}")),
                };
                lines.push(line);
            }
        }
        // Stable: a connection's `resumed` stays after its `ready`.
        lines.sort_by(|a, b| a.0.total_cmp(&b.0));
        lines
    }
}

/// One line of the agent's log (see agent.rs).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub at: At,
    pub pid: u32,
    pub kind: AgentKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AgentKind {
    Start,
    Got {
        id: String,
        device: String,
    },
    Wrote(String),
    Unsent(String),
    /// A redelivered message the agent had already got, dropped (L64).
    Again(String),
    Ok(String),
    Error {
        id: String,
        code: String,
    },
    Eof,
}

/// The agent's log, its times made relative to the run's start (`t0_us`, unix µs). Lines
/// that do not parse are returned apart: a torn line would itself be a finding.
pub fn parse_agent_log(text: &str, t0_us: u64) -> (Vec<AgentEvent>, Vec<String>) {
    let mut events = Vec::new();
    let mut bad = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let w: Vec<&str> = line.split(' ').collect();
        let parsed = (|| {
            let at = (w.first()?.parse::<u64>().ok()?.saturating_sub(t0_us)) as f64 / 1e6;
            let pid = w.get(1)?.parse().ok()?;
            let arg = |i: usize| w.get(i).map(|s| s.to_string());
            let kind = match (*w.get(2)?, w.len()) {
                ("start", 3) => AgentKind::Start,
                ("eof", 3) => AgentKind::Eof,
                ("got", 5) => AgentKind::Got {
                    id: arg(3)?,
                    device: arg(4)?,
                },
                ("wrote", 4) => AgentKind::Wrote(arg(3)?),
                ("unsent", 4) => AgentKind::Unsent(arg(3)?),
                ("again", 4) => AgentKind::Again(arg(3)?),
                ("ok", 4) => AgentKind::Ok(arg(3)?),
                ("error", 5) => AgentKind::Error {
                    id: arg(3)?,
                    code: arg(4)?,
                },
                _ => return None,
            };
            Some(AgentEvent { at, pid, kind })
        })();
        match parsed {
            Some(e) => events.push(e),
            None => bad.push(line.to_owned()),
        }
    }
    (events, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_log_parses_and_keeps_bad_lines_apart() {
        let text = "1000000 7 start\n1500000 7 got m1 crash-0\n1600000 7 wrote m1\n\
                    1700000 7 ok m1\n1800000 7 error m2 device_offline\n1900000 7 unsent m3\n\
                    1950000 8 again m1\n2000000 7 eof\n2000000 7 got torn\n";
        let (events, bad) = parse_agent_log(text, 1_000_000);
        assert_eq!(bad, ["2000000 7 got torn"]);
        assert_eq!(events.len(), 8);
        assert_eq!(events[6].kind, AgentKind::Again("m1".into()));
        assert_eq!(
            events[0],
            AgentEvent {
                at: 0.0,
                pid: 7,
                kind: AgentKind::Start
            }
        );
        assert_eq!(
            events[1].kind,
            AgentKind::Got {
                id: "m1".into(),
                device: "crash-0".into()
            }
        );
        assert_eq!(events[1].at, 0.5);
        assert_eq!(
            events[4].kind,
            AgentKind::Error {
                id: "m2".into(),
                code: "device_offline".into()
            }
        );
    }
}
