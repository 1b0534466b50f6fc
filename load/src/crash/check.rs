//! The crash run's verdict, from what was recorded (record.rs) alone:
//!
//! 1. every message a phone got `received` for is in the agent's log exactly once (the
//!    gateway hands a message over only after its id is committed: never twice, never lost);
//! 2. every reply the agent wrote for such a message reached its phone, live or in the final
//!    resume. A reply the agent never wrote (killed mid-turn), or wrote into the pipe of a
//!    gateway that died before answering `ok`, is counted apart: the gateway never had it;
//! 3. no seq went backwards or was reused: each frame of a connection is above the seq its
//!    `hello` resumed after and not below the one before it, and one seq never names two
//!    entries;
//! 4. nothing reached a phone twice (one message version, one seq, one chunk).

use std::collections::{BTreeMap, HashMap};

use super::record::{AgentEvent, AgentKind, Conn, Frame, PhoneLog, Sent};

/// Violations and notes listed in full, at most; the rest are counted.
const SHOWN: usize = 20;

pub struct Section {
    pub title: &'static str,
    pub summary: String,
    /// What the run saw that breaks no rule, but a reader should know.
    pub notes: Vec<String>,
    pub violations: Vec<String>,
}

pub struct Report {
    pub sections: Vec<Section>,
}

impl Report {
    pub fn violations(&self) -> usize {
        self.sections.iter().map(|s| s.violations.len()).sum()
    }

    pub fn print(&self) {
        for (i, s) in self.sections.iter().enumerate() {
            let verdict = if s.violations.is_empty() {
                "OK".to_owned()
            } else {
                format!("VIOLATED ({})", s.violations.len())
            };
            println!("({}) {}: {verdict}. {}", i + 1, s.title, s.summary);
            print_list("VIOLATION", &s.violations);
            print_list("note", &s.notes);
        }
    }
}

fn print_list(label: &str, items: &[String]) {
    for item in items.iter().take(SHOWN) {
        println!("    {label}: {item}");
    }
    if items.len() > SHOWN {
        println!("    … and {} more", items.len() - SHOWN);
    }
}

pub fn check(phones: &[PhoneLog], agent: &[AgentEvent]) -> Report {
    Report {
        sections: vec![
            agent_once(phones, agent),
            replies(phones, agent),
            seqs(phones),
            nothing_twice(phones),
        ],
    }
}

/// "sent at 1.20 s to #0, 3.40 s to #1; received seq 17 at 3.41 s from #1".
fn story(sent: &Sent) -> String {
    let sends: Vec<String> = sent.sends.iter().map(|(at, g)| format!("{at:.3} s to #{g}")).collect();
    let received: Vec<String> = sent
        .received
        .iter()
        .map(|(seq, at, g)| format!("received seq {} at {at:.3} s from #{g}", show(*seq)))
        .collect();
    let received = if received.is_empty() {
        "never received".to_owned()
    } else {
        received.join(", ")
    };
    format!("sent at {}; {received}", sends.join(", "))
}

fn show(seq: Option<u64>) -> String {
    seq.map_or_else(|| "(none)".to_owned(), |s| s.to_string())
}

/// What the agent's log says of one message: "got at 3.42 s (agent 812), wrote at 3.45 s".
fn agent_story(events: &[&AgentEvent]) -> String {
    if events.is_empty() {
        return "not in the agent's log".to_owned();
    }
    let parts: Vec<String> = events
        .iter()
        .map(|e| {
            let what = match &e.kind {
                AgentKind::Got { .. } => "got".to_owned(),
                AgentKind::Wrote(_) => "wrote its reply".to_owned(),
                AgentKind::Unsent(_) => "could not write its reply (pipe gone)".to_owned(),
                AgentKind::Again(_) => "got it again after a restart and dropped it".to_owned(),
                AgentKind::Ok(_) => "got the gateway's ok".to_owned(),
                AgentKind::Error { code, .. } => format!("got error {code}"),
                AgentKind::Start | AgentKind::Eof => String::new(),
            };
            format!("{what} at {:.3} s (agent pid {})", e.at, e.pid)
        })
        .collect();
    format!("agent: {}", parts.join(", "))
}

/// The agent's events, by the message id they are about.
fn by_id(agent: &[AgentEvent]) -> HashMap<&str, Vec<&AgentEvent>> {
    let mut map: HashMap<&str, Vec<&AgentEvent>> = HashMap::new();
    for e in agent {
        let id = match &e.kind {
            AgentKind::Got { id, .. }
            | AgentKind::Wrote(id)
            | AgentKind::Unsent(id)
            | AgentKind::Again(id)
            | AgentKind::Ok(id) => id,
            AgentKind::Error { id, .. } => id,
            AgentKind::Start | AgentKind::Eof => continue,
        };
        map.entry(id.as_str()).or_default().push(e);
    }
    map
}

fn got(events: &[&AgentEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.kind, AgentKind::Got { .. }))
        .count()
}

/// Every message, by id, with its phone.
fn messages(phones: &[PhoneLog]) -> BTreeMap<&str, (&PhoneLog, &Sent)> {
    phones
        .iter()
        .flat_map(|p| p.sent.iter().map(move |s| (s.id.as_str(), (p, s))))
        .collect()
}

fn agent_once(phones: &[PhoneLog], agent: &[AgentEvent]) -> Section {
    let events = by_id(agent);
    let all = messages(phones);
    let mut violations = Vec::new();
    let mut confirmed = 0;
    for (id, (phone, sent)) in &all {
        if !sent.confirmed() {
            continue;
        }
        confirmed += 1;
        let evs = events.get(id).map(Vec::as_slice).unwrap_or(&[]);
        let n = got(evs);
        if n != 1 {
            let what = if n == 0 {
                "never reached the agent".to_owned()
            } else {
                format!("reached the agent {n} times")
            };
            violations.push(format!(
                "{id} ({}): {what}; {}; {}",
                phone.device,
                story(sent),
                agent_story(evs)
            ));
        }
        for e in evs {
            if let AgentKind::Got { device, .. } = &e.kind {
                if device != &phone.device {
                    violations.push(format!("{id} of {} reached the agent as {device}'s", phone.device));
                }
            }
        }
    }
    for (id, evs) in &events {
        if got(evs) == 0 || all.get(id).is_some_and(|(_, s)| s.confirmed()) {
            continue;
        }
        let known = all.get(id).map_or_else(
            || "no phone sent it".to_owned(),
            |(p, s)| format!("{}: {}", p.device, story(s)),
        );
        violations.push(format!(
            "the agent got {id}, which its phone never had `received` for ({known}); {}",
            agent_story(evs)
        ));
    }
    Section {
        title: "each confirmed message reached the agent exactly once",
        summary: format!(
            "{confirmed} messages confirmed by `received`, {} given to the agent",
            events.values().map(|e| got(e)).sum::<usize>()
        ),
        notes: Vec::new(),
        violations,
    }
}

/// The user message a reply names (`re: <id>`).
fn reply_to(text: &str) -> Option<&str> {
    text.strip_prefix("re: ")
}

fn replies(phones: &[PhoneLog], agent: &[AgentEvent]) -> Section {
    let events = by_id(agent);
    let all = messages(phones);
    let mut violations = Vec::new();
    let mut notes = Vec::new();
    let (mut confirmed, mut mid_turn, mut unacked, mut lost_before) = (0, 0, 0, 0);
    // How each reply first came: [live, replayed after a reconnect, in the final resume].
    let mut how = [0; 3];
    let mut others = 0;
    for phone in phones {
        // How each reply first came, as an index into `how`.
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for conn in &phone.conns {
            for f in &conn.frames {
                let Frame::Message { text, replayed, .. } = f else {
                    continue;
                };
                let Some(to) = reply_to(text) else {
                    others += 1;
                    continue;
                };
                match all.get(to) {
                    Some((owner, _)) if owner.device == phone.device => {
                        let way = if conn.final_resume { 2 } else { usize::from(*replayed) };
                        seen.entry(to).or_insert(way);
                    }
                    Some((owner, _)) => violations.push(format!(
                        "{}'s reply to {to} reached {} (connection to #{})",
                        owner.device, phone.device, conn.generation
                    )),
                    None => violations.push(format!("{} got a reply to {to}, which no phone sent", phone.device)),
                }
            }
        }
        for sent in phone.sent.iter().filter(|s| s.confirmed()) {
            confirmed += 1;
            if let Some(&way) = seen.get(sent.id.as_str()) {
                how[way] += 1;
                continue;
            }
            let evs = events.get(sent.id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let has = |f: &dyn Fn(&AgentKind) -> bool| evs.iter().any(|e| f(&e.kind));
            let line = format!("{} ({}): {}; {}", sent.id, phone.device, story(sent), agent_story(evs));
            if has(&|k| matches!(k, AgentKind::Ok(_))) {
                let wrote = evs
                    .iter()
                    .find(|e| matches!(e.kind, AgentKind::Wrote(_)))
                    .map_or(0.0, |e| e.at);
                violations.push(format!(
                    "the gateway took the reply (ok) and it never reached its phone, live or in the \
                     final resume: {line}; the phone was {} when the agent wrote it",
                    phone.state_at(wrote)
                ));
            } else if has(&|k| matches!(k, AgentKind::Error { .. })) {
                violations.push(format!("the gateway refused the reply: {line}"));
            } else if has(&|k| matches!(k, AgentKind::Wrote(_))) {
                unacked += 1;
                notes.push(format!(
                    "written into the pipe of a gateway that died before its ok: {line}"
                ));
            } else if got(evs) > 0 {
                mid_turn += 1;
                notes.push(format!("never written, the agent's turn was cut by the kill: {line}"));
            } else {
                lost_before += 1;
            }
        }
    }
    Section {
        title: "each reply the agent wrote for a confirmed message reached its phone",
        summary: format!(
            "{confirmed} confirmed: replies seen live {}, in a replay after a reconnect {}, only in the \
             final resume {}; {mid_turn} never written (the agent's turn cut by a kill); {unacked} \
             written but never taken (the gateway died before its ok); {lost_before} never reached \
             the agent (see 1); {others} other message frames",
            how[0], how[1], how[2]
        ),
        notes,
        violations,
    }
}

/// Claims `seq` for `entry` on one phone; a second entry for the same seq is a reuse.
fn claim(owners: &mut HashMap<u64, String>, seq: u64, entry: String, device: &str, out: &mut Vec<String>) {
    match owners.get(&seq) {
        Some(owner) if *owner != entry => out.push(format!("{device}: seq {seq} names both {owner} and {entry}")),
        Some(_) => {}
        None => {
            owners.insert(seq, entry);
        }
    }
}

fn conn_name(c: &Conn, i: usize) -> String {
    format!(
        "connection {i} (to #{}, at {:.3} s{}, resume after {})",
        c.generation,
        c.at,
        if c.final_resume { ", the final resume" } else { "" },
        c.after
    )
}

fn seqs(phones: &[PhoneLog]) -> Section {
    let mut violations = Vec::new();
    let mut notes = Vec::new();
    let (mut conns, mut highest, mut without) = (0, 0, 0);
    let mut ready_below = Vec::new();
    for phone in phones {
        let device = phone.device.as_str();
        let mut owners: HashMap<u64, String> = HashMap::new();
        let mut received: HashMap<&str, u64> = HashMap::new();
        for (i, conn) in phone.conns.iter().enumerate() {
            conns += 1;
            let name = || conn_name(conn, i);
            if conn.ready_seq.is_some_and(|r| r < conn.after) {
                ready_below.push(format!(
                    "{device} {}: ready.seq {} is below the seq the phone had seen",
                    name(),
                    show(conn.ready_seq)
                ));
            }
            let mut last = 0;
            for f in &conn.frames {
                let (what, seq) = match f {
                    Frame::Message { id, seq, .. } => (format!("message {id}"), *seq),
                    Frame::Other { t, id, seq, .. } => (format!("{t} {id}"), *seq),
                    Frame::Received { id, seq: Some(s), .. } => {
                        claim(
                            &mut owners,
                            *s,
                            format!("the phone's own {id}"),
                            device,
                            &mut violations,
                        );
                        if let Some(before) = received.insert(id, *s).filter(|b| b != s) {
                            violations.push(format!("{device}: {id} was received at seq {before}, then at {s}"));
                        }
                        continue;
                    }
                    Frame::Received { id, seq: None, .. } => {
                        violations.push(format!("{device} {}: received for {id} without a seq", name()));
                        continue;
                    }
                    Frame::Resumed { .. } | Frame::Error { .. } => continue,
                };
                let Some(seq) = seq else {
                    without += 1;
                    continue;
                };
                highest = highest.max(seq);
                if seq <= conn.after {
                    violations.push(format!(
                        "{device} {}: {what} at seq {seq}, not above the resume point",
                        name()
                    ));
                }
                if seq < last {
                    violations.push(format!("{device} {}: {what} at seq {seq} after seq {last}", name()));
                }
                last = last.max(seq);
                claim(&mut owners, seq, what, device, &mut violations);
            }
        }
    }
    if !ready_below.is_empty() {
        notes.push(format!(
            "{} hellos got a ready.seq below the phone's resume point (entries seen live but not \
             committed before a kill?); web/protocol.js takes that for a new journal and replays \
             everything from 0",
            ready_below.len()
        ));
        notes.extend(ready_below);
    }
    if without > 0 {
        notes.push(format!("{without} message frames carried no seq"));
    }
    Section {
        title: "no seq went backwards or was reused",
        summary: format!("{conns} connections, highest seq {highest}"),
        notes,
        violations,
    }
}

fn nothing_twice(phones: &[PhoneLog]) -> Section {
    let mut violations = Vec::new();
    let mut frames = 0;
    for phone in phones {
        let mut seen: HashMap<(&str, Option<u64>, u64), Vec<String>> = HashMap::new();
        for (i, conn) in phone.conns.iter().enumerate() {
            for f in &conn.frames {
                if let Frame::Message {
                    id,
                    seq,
                    chunk,
                    replayed,
                    at,
                    ..
                } = f
                {
                    frames += 1;
                    let how = if *replayed { "replayed" } else { "live" };
                    seen.entry((id, *seq, *chunk))
                        .or_default()
                        .push(format!("{how} at {at:.3} s on {}", conn_name(conn, i)));
                }
            }
        }
        let mut twice: Vec<_> = seen.into_iter().filter(|(_, w)| w.len() > 1).collect();
        twice.sort();
        for ((id, seq, chunk), where_) in twice {
            violations.push(format!(
                "{}: message {id} seq {} chunk {chunk} came {} times: {}",
                phone.device,
                show(seq),
                where_.len(),
                where_.join("; ")
            ));
        }
    }
    Section {
        title: "nothing reached a phone twice",
        summary: format!("{frames} message frames"),
        notes: Vec::new(),
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::record::At;

    fn ev(at: At, kind: AgentKind) -> AgentEvent {
        AgentEvent { at, pid: 9, kind }
    }

    fn got(id: &str) -> AgentKind {
        AgentKind::Got {
            id: id.into(),
            device: "p0".into(),
        }
    }

    fn sent(id: &str, seq: u64) -> Sent {
        Sent {
            id: id.into(),
            sends: vec![(1.0, 0)],
            received: vec![(Some(seq), 1.1, 0)],
        }
    }

    fn reply(to: &str, seq: u64) -> Frame {
        Frame::Message {
            id: format!("re-{to}"),
            text: format!("re: {to}"),
            seq: Some(seq),
            last_chunk: true,
            chunk: 0,
            replayed: false,
            at: 1.2,
        }
    }

    fn phone(sent: Vec<Sent>, conns: Vec<Conn>) -> PhoneLog {
        PhoneLog {
            device: "p0".into(),
            sent,
            conns,
            ..PhoneLog::default()
        }
    }

    fn conn(after: u64, frames: Vec<Frame>) -> Conn {
        Conn {
            after,
            ready_seq: Some(after),
            frames,
            ..Conn::default()
        }
    }

    fn verdicts(r: &Report) -> Vec<usize> {
        r.sections.iter().map(|s| s.violations.len()).collect()
    }

    #[test]
    fn a_clean_run_passes() {
        let p = phone(
            vec![sent("a", 1), sent("b", 3)],
            vec![conn(0, vec![reply("a", 2)]), conn(2, vec![reply("b", 4)])],
        );
        let agent = [
            ev(1.0, got("a")),
            ev(1.1, AgentKind::Wrote("a".into())),
            ev(1.2, AgentKind::Ok("a".into())),
            ev(2.0, got("b")),
            ev(2.1, AgentKind::Wrote("b".into())),
        ];
        let r = check(&[p], &agent);
        assert_eq!(verdicts(&r), [0, 0, 0, 0]);
    }

    #[test]
    fn a_message_given_twice_or_never_is_a_violation() {
        let p = phone(vec![sent("a", 1), sent("b", 2)], vec![]);
        let r = check(&[p], &[ev(1.0, got("a")), ev(2.0, got("a"))]);
        let one = &r.sections[0].violations;
        assert_eq!(one.len(), 2, "{one:?}");
        assert!(one[0].contains("a (p0): reached the agent 2 times"), "{one:?}");
        assert!(one[1].contains("b (p0): never reached the agent"), "{one:?}");
    }

    #[test]
    fn a_redelivery_the_agent_dropped_is_not_a_second_time() {
        // L64: after a restart the gateway may hand over again a message the agent had.
        let p = phone(vec![sent("a", 1)], vec![conn(0, vec![reply("a", 2)])]);
        let agent = [
            ev(1.0, got("a")),
            ev(1.1, AgentKind::Wrote("a".into())),
            ev(2.0, AgentKind::Again("a".into())),
        ];
        let r = check(&[p], &agent);
        assert_eq!(r.sections[0].violations.len(), 0, "{:?}", r.sections[0].violations);
    }

    #[test]
    fn an_unconfirmed_message_at_the_agent_is_a_violation() {
        let mut s = sent("a", 1);
        s.received.clear();
        let r = check(&[phone(vec![s], vec![])], &[ev(1.0, got("a"))]);
        assert!(r.sections[0].violations[0].contains("never had `received`"));
    }

    #[test]
    fn lost_replies_are_told_apart_by_what_the_agent_logged() {
        let p = phone(
            vec![sent("ok", 1), sent("wrote", 2), sent("cut", 3), sent("seen", 4)],
            vec![conn(0, vec![])],
        );
        let mut p = p;
        p.ends.push((0.5, "dropped on purpose".into()));
        p.conns.push(Conn {
            final_resume: true,
            at: 9.0,
            ..conn(4, vec![reply("seen", 5)])
        });
        let agent = [
            ev(1.0, got("ok")),
            ev(1.0, AgentKind::Wrote("ok".into())),
            ev(1.0, AgentKind::Ok("ok".into())),
            ev(2.0, got("wrote")),
            ev(2.0, AgentKind::Wrote("wrote".into())),
            ev(3.0, got("cut")),
            ev(3.0, AgentKind::Unsent("cut".into())),
            ev(4.0, got("seen")),
            ev(4.0, AgentKind::Ok("seen".into())),
        ];
        let r = check(&[p], &agent);
        let two = &r.sections[1];
        assert_eq!(two.violations.len(), 1, "{:?}", two.violations);
        assert!(two.violations[0].starts_with("the gateway took the reply (ok)"));
        assert!(two.violations[0].contains("ok (p0)"));
        assert!(two.violations[0]
            .ends_with("the phone was offline since 0.500 s (dropped on purpose) when the agent wrote it"));
        assert!(
            two.summary
                .contains("seen live 0, in a replay after a reconnect 0, only in the final resume 1"),
            "{}",
            two.summary
        );
        assert!(two.summary.contains("1 never written"), "{}", two.summary);
        assert!(two.summary.contains("1 written but never taken"), "{}", two.summary);
    }

    #[test]
    fn seqs_at_or_below_the_resume_point_or_reused_are_violations() {
        let p = phone(
            vec![sent("a", 1), sent("b", 2)],
            vec![
                conn(0, vec![reply("a", 2)]),
                conn(2, vec![reply("b", 2), reply("x", 5), reply("y", 4)]),
            ],
        );
        let r = check(&[p], &[]);
        let three = &r.sections[2].violations;
        assert!(three.iter().any(|v| v.contains("seq 2 names both")), "{three:?}");
        assert!(
            three.iter().any(|v| v.contains("message re-b at seq 2, not above")),
            "{three:?}"
        );
        assert!(
            three.iter().any(|v| v.contains("message re-y at seq 4 after seq 5")),
            "{three:?}"
        );
    }

    #[test]
    fn a_received_seq_that_changes_is_a_violation() {
        let mut s = sent("a", 1);
        s.received.push((Some(3), 2.0, 1));
        let frames = |seq| {
            vec![Frame::Received {
                id: "a".into(),
                seq: Some(seq),
                at: 1.0,
            }]
        };
        let p = phone(vec![s], vec![conn(0, frames(1)), conn(0, frames(3))]);
        let r = check(&[p], &[]);
        assert!(r.sections[2]
            .violations
            .iter()
            .any(|v| v.contains("a was received at seq 1, then at 3")));
    }

    #[test]
    fn ready_below_the_resume_point_is_a_note() {
        let mut c = conn(7, vec![]);
        c.ready_seq = Some(5);
        let r = check(&[phone(vec![], vec![c])], &[]);
        assert_eq!(r.violations(), 0);
        assert!(r.sections[2].notes[0].contains("1 hellos got a ready.seq below"));
    }

    #[test]
    fn a_message_twice_is_a_violation() {
        let p = phone(
            vec![sent("a", 1)],
            vec![conn(0, vec![reply("a", 2)]), conn(0, vec![reply("a", 2)])],
        );
        let r = check(&[p], &[ev(1.0, got("a"))]);
        assert_eq!(r.sections[3].violations.len(), 1);
        assert!(r.sections[3].violations[0].contains("message re-a seq 2 chunk 0 came 2 times"));
    }
}
