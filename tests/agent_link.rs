//! The agent link's codec and state (docs/agent-protocol.md, issue 9), sans-IO: lines in,
//! lines and commands out, on a virtual clock.

mod common;

use std::time::Duration;

use hermes_mobile::agent_link::{
    parse_agent_line, AgentLine, AgentLink, FileHandover, LineItem, LineReader, LinkCommand, LinkOutput, LinkRole,
    Origin, PeerId, QueueLimits, AGENT_AWAY_TEXT, AGENT_LOST_TEXT, QUEUE_FULL_TEXT,
};
use hermes_mobile::ids::{DeviceId, MessageId, PromptId};
use hermes_mobile::uploads::ReceivedFile;
use hermes_mobile::wire::client::UploadKind;
use hermes_mobile::wire::DownloadKind;
use hermes_mobile::{Accepted, AgentCommand, AgentEvent, CommandError, PromptRequest, Time, UserInfo};
use proptest::prelude::*;
use serde_json::{json, Value};

const AGENT: PeerId = PeerId(1);

fn new_link() -> AgentLink {
    AgentLink::new(
        "hermes-mobile/test",
        300,
        Some("agent-token".into()),
        QueueLimits::default(),
    )
}

/// Lines written to `peer`, parsed; commands, in order.
type Drained = (Vec<(PeerId, Value)>, Vec<(Origin, LinkCommand)>, Vec<PeerId>);

fn drain(link: &mut AgentLink) -> Drained {
    let (mut lines, mut commands, mut closed) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(out) = link.poll_output() {
        match out {
            LinkOutput::Write { peer, line, .. } => {
                assert!(
                    line.ends_with('\n') && !line[..line.len() - 1].contains('\n'),
                    "one line: {line}"
                );
                lines.push((peer, serde_json::from_str(&line).unwrap()));
            }
            LinkOutput::Command { origin, command } => commands.push((origin, *command)),
            LinkOutput::Close { peer, .. } => closed.push(peer),
            LinkOutput::Handed(_) => {}
        }
    }
    (lines, commands, closed)
}

fn attach(link: &mut AgentLink, peer: PeerId, now: Time) -> Vec<Value> {
    link.handle_peer_open(peer, false);
    link.handle_line(now, peer, br#"{"t":"hello","v":1,"agent":"test"}"#);
    drain(link)
        .0
        .into_iter()
        .filter(|(p, _)| *p == peer)
        .map(|(_, v)| v)
        .collect()
}

fn text_event(device: &str, id: &str, text: &str) -> AgentEvent {
    AgentEvent::MessageReceived {
        device: DeviceId(device.into()),
        id: id.into(),
        user: UserInfo {
            id: "u1".into(),
            name: "Ann".into(),
        },
        text: Some(text.into()),
        audio: None,
        file: None,
        redelivered: false,
    }
}

/// `device:text` of a gateway notice (a delivery from the gateway itself).
fn notice(command: &AgentCommand) -> Option<String> {
    match command {
        AgentCommand::Deliver {
            target,
            text: Some(text),
            sender,
            ..
        } if sender == "gateway" => Some(format!("{target}:{text}")),
        _ => None,
    }
}

fn ready(command: &LinkCommand) -> &AgentCommand {
    match command {
        LinkCommand::Ready(c) => c,
        other => panic!("not ready: {other:?}"),
    }
}

#[test]
fn hello_is_answered_with_welcome_limits_and_devices_online() {
    let mut link = new_link();
    link.handle_event(
        Time::ZERO,
        AgentEvent::DeviceOnline {
            device: DeviceId("tel-1".into()),
            name: "Pixel".into(),
            user: UserInfo {
                id: "u1".into(),
                name: "Ann".into(),
            },
        },
        None,
    );
    let lines = attach(&mut link, AGENT, Time::ZERO);
    assert_eq!(lines.len(), 1);
    let w = &lines[0];
    assert_eq!(w["t"], "welcome");
    assert_eq!(w["v"], 1);
    assert_eq!(w["limits"]["line_bytes"], 16 * 1024 * 1024);
    assert_eq!(w["limits"]["media_bytes"], 8 * 1024 * 1024);
    assert_eq!(
        w["devices"],
        json!([{"device":"tel-1","name":"Pixel","user":{"id":"u1","name":"Ann"}}])
    );
    assert!(link.is_attached());
}

#[test]
fn lines_before_hello_and_bad_lines_get_errors_and_the_link_stays() {
    let mut link = new_link();
    link.handle_peer_open(AGENT, false);
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"typing","ref":"r0","device":"tel-1"}"#);
    link.handle_line(Time::ZERO, AGENT, b"not json at all");
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"hello","v":1}"#);
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"reply","ref":"r1","device":"tel-1"}"#);
    link.handle_line(
        Time::ZERO,
        AGENT,
        br#"{"t":"reply","ref":"r2","device":5,"id":"a","text":"x"}"#,
    );
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"dance","ref":"r3"}"#);
    link.handle_line(Time::ZERO, AGENT, br#"[1,2]"#);
    link.handle_too_big(AGENT);
    let (lines, commands, closed) = drain(&mut link);
    let codes: Vec<(String, Value)> = lines
        .iter()
        .filter(|(_, v)| v["t"] == "error")
        .map(|(_, v)| (v["code"].as_str().unwrap().to_owned(), v["ref"].clone()))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("hello_required".into(), json!("r0")),
            ("bad_line".into(), Value::Null),
            ("bad_line".into(), json!("r1")),
            ("bad_line".into(), json!("r2")),
            ("unknown_type".into(), json!("r3")),
            ("bad_line".into(), Value::Null),
            ("too_big".into(), Value::Null),
        ]
    );
    assert!(commands.is_empty());
    assert!(closed.is_empty(), "bad input never kills the link");
    assert!(link.is_attached());
}

#[test]
fn a_wrong_version_is_refused_and_closed() {
    let mut link = new_link();
    link.handle_peer_open(AGENT, false);
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"hello","v":2}"#);
    let (lines, _, closed) = drain(&mut link);
    assert_eq!(lines[0].1["code"], "unsupported_version");
    assert_eq!(closed, vec![AGENT]);
    assert!(!link.is_attached());
}

#[test]
fn agent_route_needs_the_agent_token() {
    let mut link = new_link();
    link.handle_peer_open(PeerId(7), true);
    link.handle_line(Time::ZERO, PeerId(7), br#"{"t":"hello","v":1,"token":"app-token"}"#);
    let (lines, _, closed) = drain(&mut link);
    assert_eq!(lines[0].1["code"], "auth_failed");
    assert_eq!(closed, vec![PeerId(7)]);
    link.handle_peer_open(PeerId(8), true);
    link.handle_line(Time::ZERO, PeerId(8), br#"{"t":"hello","v":1,"token":"agent-token"}"#);
    let (lines, _, closed) = drain(&mut link);
    assert_eq!(lines[0].1["t"], "welcome");
    assert!(closed.is_empty());
}

#[test]
fn agent_token_guessing_is_throttled_per_address() {
    // decisions L52 (issue 23 #3): /agent is a door like /ws.
    use hermes_mobile::throttle::SourceKey;
    let mut link = new_link();
    let (guesser, other) = (
        SourceKey::of("203.0.113.1".parse().unwrap()),
        SourceKey::of("198.51.100.1".parse().unwrap()),
    );
    for n in 0..10 {
        link.handle_peer_open_from(PeerId(100 + n), true, guesser);
        link.handle_line(Time::ZERO, PeerId(100 + n), br#"{"t":"hello","v":1,"token":"guess"}"#);
        assert_eq!(drain(&mut link).0[0].1["message"], "wrong or missing agent token");
    }
    link.handle_peer_open_from(PeerId(200), true, guesser);
    link.handle_line(Time::ZERO, PeerId(200), br#"{"t":"hello","v":1,"token":"agent-token"}"#);
    let (lines, _, closed) = drain(&mut link);
    assert_eq!(lines[0].1["code"], "auth_failed");
    assert!(lines[0].1["message"]
        .as_str()
        .unwrap()
        .starts_with("too many failed attempts"));
    assert_eq!(closed, vec![PeerId(200)]);
    link.handle_peer_open_from(PeerId(201), true, other);
    link.handle_line(Time::ZERO, PeerId(201), br#"{"t":"hello","v":1,"token":"agent-token"}"#);
    assert_eq!(drain(&mut link).0[0].1["t"], "welcome");
}

#[test]
fn a_new_agent_replaces_the_old_and_in_flight_turns_end_for_the_phone() {
    let mut link = new_link();
    attach(&mut link, AGENT, Time::ZERO);
    link.handle_event(Time::ZERO, text_event("tel-1", "m1", "hi"), None);
    drain(&mut link);
    link.handle_peer_open(PeerId(2), false);
    link.handle_line(Time::from_secs(1), PeerId(2), br#"{"t":"hello","v":1}"#);
    let (lines, commands, closed) = drain(&mut link);
    assert_eq!(closed, vec![AGENT], "the old agent's connection is closed");
    let told = lines
        .iter()
        .find(|(p, _)| *p == AGENT)
        .expect("the old agent is told why");
    assert_eq!(told.1["code"], "replaced");
    assert!(commands.is_empty(), "{commands:?}");
    // Its turns in flight end for the phone once its connection has, when the server has
    // said which of its lines it never had (L41).
    link.handle_peer_closed(Time::from_secs(1), AGENT);
    let (_, commands, _) = drain(&mut link);
    let cmds: Vec<&AgentCommand> = commands.iter().map(|(_, c)| ready(c)).collect();
    assert_eq!(notice(cmds[0]), Some(format!("tel-1:{AGENT_LOST_TEXT}")));
    assert!(matches!(cmds[1], AgentCommand::EndTurn { device } if device.as_str() == "tel-1"));
}

#[test]
fn end_turn_clears_the_turn_so_a_later_detach_says_nothing() {
    let mut link = new_link();
    attach(&mut link, AGENT, Time::ZERO);
    link.handle_event(Time::ZERO, text_event("tel-1", "m1", "hi"), None);
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"end_turn","device":"tel-1"}"#);
    drain(&mut link);
    link.handle_peer_closed(Time::ZERO, AGENT);
    let (_, commands, _) = drain(&mut link);
    assert!(commands.is_empty(), "{commands:?}");
}

#[test]
fn messages_wait_in_order_while_detached_with_one_away_notice_per_device() {
    let mut link = new_link();
    for (i, device) in ["tel-1", "tel-1", "tel-2", "tel-1"].iter().enumerate() {
        link.handle_event(
            Time::from_secs(i as u64),
            text_event(device, &format!("m{i}"), "hi"),
            None,
        );
    }
    let (_, commands, _) = drain(&mut link);
    let notices: Vec<String> = commands.iter().filter_map(|(_, c)| notice(ready(c))).collect();
    assert_eq!(
        notices,
        vec![format!("tel-1:{AGENT_AWAY_TEXT}"), format!("tel-2:{AGENT_AWAY_TEXT}")]
    );
    let ends = commands
        .iter()
        .filter(|(_, c)| matches!(ready(c), AgentCommand::EndTurn { .. }))
        .count();
    assert_eq!(ends, 4, "every message's typing is stopped");
    assert_eq!(link.queued().0, 4);

    let lines = attach(&mut link, AGENT, Time::from_secs(10));
    let ids: Vec<&str> = lines[1..].iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["m0", "m1", "m2", "m3"]);
    assert_eq!(link.queued(), (0, 0));
    // Handed over once: a second agent gets none of them.
    let lines = attach(&mut link, PeerId(2), Time::from_secs(11));
    assert_eq!(lines.len(), 1, "{lines:?}");
}

#[test]
fn the_queue_is_bounded_by_count_bytes_and_age() {
    let limits = QueueLimits {
        events: 2,
        bytes: 1 << 20,
        max_age: Duration::from_secs(60),
    };
    let mut link = AgentLink::new("gw", 300, None, limits);
    link.handle_event(Time::ZERO, text_event("tel-1", "m0", "a"), None);
    link.handle_event(Time::ZERO, text_event("tel-1", "m1", "b"), None);
    link.handle_event(Time::ZERO, text_event("tel-1", "m2", "c"), None);
    let (_, commands, _) = drain(&mut link);
    assert!(commands
        .iter()
        .any(|(_, c)| notice(ready(c)) == Some(format!("tel-1:{QUEUE_FULL_TEXT}"))));
    assert_eq!(link.queued().0, 2);
    // Bytes: a big file does not fit.
    let mut link = AgentLink::new("gw", 300, None, QueueLimits { events: 10, ..limits });
    let big = AgentEvent::MessageReceived {
        device: DeviceId("tel-1".into()),
        id: "f".into(),
        user: UserInfo::default(),
        text: None,
        audio: None,
        file: Some(ReceivedFile {
            id: "f".into(),
            kind: UploadKind::Document,
            mime: "application/pdf".into(),
            filename: "a.pdf".into(),
            caption: None,
            data: vec![0; 2 << 20],
            media_name: None,
        }),
        redelivered: false,
    };
    link.handle_event(Time::ZERO, big, Some(FileHandover::Failed("disk full".into())));
    assert_eq!(link.queued().0, 0);
    // Age: older than max_age is dropped, at the latest when an agent attaches.
    let mut link = AgentLink::new("gw", 300, None, limits);
    link.handle_event(Time::ZERO, text_event("tel-1", "old", "a"), None);
    link.handle_event(Time::from_secs(50), text_event("tel-1", "new", "b"), None);
    let lines = attach(&mut link, AGENT, Time::from_secs(70));
    let ids: Vec<&str> = lines[1..].iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["new"]);
}

#[test]
fn a_message_handed_over_again_is_never_given_up_by_a_full_queue() {
    // L64: its phone had `received` long ago; it stays owed, for the next start, and the
    // phone is not told it was not kept.
    let limits = QueueLimits {
        events: 1,
        bytes: 1 << 20,
        max_age: Duration::from_secs(60),
    };
    let mut link = AgentLink::new("gw", 300, None, limits);
    link.handle_event(Time::ZERO, text_event("tel-1", "m0", "a"), None);
    let mut again = text_event("tel-1", "m1", "b");
    if let AgentEvent::MessageReceived { redelivered, .. } = &mut again {
        *redelivered = true;
    }
    link.handle_event(Time::ZERO, again, None);
    let mut handed = Vec::new();
    let mut notices = Vec::new();
    while let Some(out) = link.poll_output() {
        match out {
            LinkOutput::Handed(key) => handed.push(key),
            LinkOutput::Command { command, .. } => notices.extend(notice(ready(&command))),
            _ => {}
        }
    }
    assert!(handed.is_empty(), "given up: {handed:?}");
    assert!(!notices.contains(&format!("tel-1:{QUEUE_FULL_TEXT}")), "{notices:?}");
    assert_eq!(link.queued().0, 1);
    // A card's answer too: its phone saw the card close, and no one can send it again.
    let answer = AgentEvent::PromptAnswered {
        device: DeviceId("tel-1".into()),
        prompt: PromptId("p1".into()),
        kind: hermes_mobile::PromptKind::ExecApproval,
        option_id: "deny".into(),
        label: None,
        text: None,
        asked: "rm -rf /tmp/x".into(),
    };
    link.handle_event(Time::ZERO, answer, None);
    assert!(
        std::iter::from_fn(|| link.poll_output()).all(|out| !matches!(out, LinkOutput::Handed(_))),
        "a card's answer given up"
    );
}

#[test]
fn typing_and_presence_are_not_queued() {
    let mut link = new_link();
    let device = DeviceId("tel-1".into());
    link.handle_event(Time::ZERO, AgentEvent::UserTyping { device: device.clone() }, None);
    let online = AgentEvent::DeviceOnline {
        device: device.clone(),
        name: "P".into(),
        user: UserInfo::default(),
    };
    link.handle_event(Time::ZERO, online, None);
    link.handle_event(Time::ZERO, AgentEvent::DeviceOffline { device }, None);
    assert_eq!(link.queued().0, 0);
    let lines = attach(&mut link, AGENT, Time::ZERO);
    assert_eq!(lines.len(), 1, "only the welcome: {lines:?}");
    assert_eq!(lines[0]["devices"], json!([]), "tel-1 went offline again");
}

#[test]
fn a_turn_that_had_its_answer_ends_quietly_when_the_agent_goes() {
    // L41: only a turn without an answer gets the "agent stopped" notice.
    let mut link = new_link();
    attach(&mut link, AGENT, Time::ZERO);
    link.handle_event(Time::ZERO, text_event("tel-1", "m1", "hi"), None);
    link.handle_line(
        Time::ZERO,
        AGENT,
        br#"{"t":"reply","device":"tel-1","id":"a","text":"hello"}"#,
    );
    drain(&mut link);
    link.handle_peer_closed(Time::ZERO, AGENT);
    let (_, commands, _) = drain(&mut link);
    let cmds: Vec<&AgentCommand> = commands.iter().map(|(_, c)| ready(c)).collect();
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    assert!(matches!(cmds[0], AgentCommand::EndTurn { .. }));
}

#[test]
fn remote_agents_may_not_name_paths_on_the_gateway_host() {
    // L42: over /agent a path would read the gateway's own files (its token included).
    let mut link = new_link();
    link.handle_peer_open(PeerId(9), true);
    link.handle_line(Time::ZERO, PeerId(9), br#"{"t":"hello","v":1,"token":"agent-token"}"#);
    let line =
        br#"{"t":"send_file","ref":"f","device":"tel-1","kind":"document","name":"t","path":"/proc/self/environ"}"#;
    link.handle_line(Time::ZERO, PeerId(9), line);
    let (lines, commands, _) = drain(&mut link);
    assert!(commands.is_empty());
    assert_eq!(lines[1].1["code"], "forbidden");
    assert_eq!(lines[1].1["ref"], "f");
}

#[test]
fn a_refused_hello_is_the_last_thing_heard_from_that_peer() {
    let mut link = new_link();
    link.handle_peer_open(PeerId(7), true);
    link.handle_line(Time::ZERO, PeerId(7), br#"{"t":"hello","v":1,"token":"wrong"}"#);
    link.handle_line(Time::ZERO, PeerId(7), br#"{"t":"hello","v":1,"token":"agent-token"}"#);
    let (lines, _, _) = drain(&mut link);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(!link.is_attached(), "a second try on a refused connection is ignored");
}

#[test]
fn files_are_handed_over_as_a_path_or_inline() {
    let event = AgentEvent::MessageReceived {
        device: DeviceId("tel-1".into()),
        id: "m".into(),
        user: UserInfo::default(),
        text: None,
        audio: None,
        file: Some(ReceivedFile {
            id: "m".into(),
            kind: UploadKind::Image,
            mime: "image/png".into(),
            filename: "cat.png".into(),
            caption: Some("look".into()),
            data: b"PNGDATA".to_vec(),
            media_name: None,
        }),
        redelivered: false,
    };
    let mut link = new_link();
    attach(&mut link, AGENT, Time::ZERO);
    let path = std::path::PathBuf::from("/state/media/1-tel-1-cat.png");
    link.handle_event(Time::ZERO, event.clone(), Some(FileHandover::Saved(path)));
    let (lines, _, _) = drain(&mut link);
    assert_eq!(
        lines[0].1,
        json!({"t":"message","device":"tel-1","id":"m","user":{"id":"","name":""},"text":"look",
               "file":{"kind":"image","mime":"image/png","name":"cat.png","size":7,"path":"/state/media/1-tel-1-cat.png"}})
    );
    let mut link = new_link();
    link.handle_peer_open(AGENT, false);
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"hello","v":1,"inline":true}"#);
    drain(&mut link);
    link.handle_event(Time::ZERO, event, Some(FileHandover::Saved("/x".into())));
    let (lines, _, _) = drain(&mut link);
    assert_eq!(lines[0].1["file"]["data"], "UE5HREFUQQ==");
    assert!(lines[0].1["file"].get("path").is_none());
}

#[test]
fn commands_carry_their_ref_and_outcomes_answer_it() {
    let mut link = new_link();
    attach(&mut link, AGENT, Time::ZERO);
    link.handle_line(
        Time::ZERO,
        AGENT,
        br#"{"t":"reply","ref":"r1","device":"tel-1","id":"a-1","text":"Hel","done":false}"#,
    );
    let (_, commands, _) = drain(&mut link);
    let (origin, command) = &commands[0];
    assert_eq!(origin.reference.as_deref(), Some("r1"));
    assert_eq!(
        ready(command),
        &AgentCommand::Reply {
            device: DeviceId("tel-1".into()),
            message: MessageId("a-1".into()),
            text: "Hel".into(),
            done: false
        }
    );
    link.handle_outcome(origin, Ok(&Accepted::Done));
    link.handle_outcome(origin, Err(&CommandError::MessageFinished));
    link.handle_outcome(
        &Origin {
            peer: Some(AGENT),
            reference: None,
        },
        Ok(&Accepted::Done),
    );
    let (lines, _, _) = drain(&mut link);
    assert_eq!(lines[0].1, json!({"t":"ok","ref":"r1"}));
    assert_eq!(lines[1].1["code"], "message_finished");
    assert_eq!(lines.len(), 2, "no answer for success without a ref");
}

#[test]
fn every_command_error_has_a_stable_code() {
    // issue 9: every CommandError has a code.
    let errors = [
        (CommandError::MessageFinished, "message_finished"),
        (CommandError::FileTooBig, "file_too_big"),
        (CommandError::DuplicatePrompt, "duplicate_prompt"),
        (CommandError::InvalidPrompt("x"), "invalid_prompt"),
        (CommandError::TooManyStreams, "too_many_streams"),
        (CommandError::TooManyPrompts, "too_many_prompts"),
        (CommandError::HoldFull, "hold_full"),
        (CommandError::DeviceOffline, "device_offline"),
        (CommandError::BadTarget, "bad_target"),
    ];
    let mut link = new_link();
    attach(&mut link, AGENT, Time::ZERO);
    for (error, code) in errors {
        let origin = Origin {
            peer: Some(AGENT),
            reference: Some(code.into()),
        };
        link.handle_outcome(&origin, Err(&error));
        let (lines, _, _) = drain(&mut link);
        assert_eq!(lines[0].1["code"], code);
        assert_eq!(lines[0].1["ref"], code);
        assert!(!lines[0].1["message"].as_str().unwrap().is_empty());
    }
}

#[test]
fn delivery_connections_may_only_deliver_and_do_not_replace_the_agent() {
    let mut link = new_link();
    attach(&mut link, AGENT, Time::ZERO);
    link.handle_peer_open(PeerId(5), false);
    link.handle_line(Time::ZERO, PeerId(5), br#"{"t":"hello","v":1,"role":"deliver"}"#);
    link.handle_line(Time::ZERO, PeerId(5), br#"{"t":"typing","ref":"x","device":"tel-1"}"#);
    link.handle_line(
        Time::ZERO,
        PeerId(5),
        br#"{"t":"deliver","ref":"d","id":"cron-1","target":"mobile:tel-1","text":"done"}"#,
    );
    let (lines, commands, closed) = drain(&mut link);
    assert_eq!(lines[0].1["t"], "welcome");
    assert_eq!(lines[1].1["code"], "forbidden");
    assert!(closed.is_empty());
    assert_eq!(commands.len(), 1);
    assert!(
        matches!(ready(&commands[0].1), AgentCommand::Deliver { id, target, .. } if id == "cron-1" && target == "mobile:tel-1")
    );
    assert!(link.is_attached());
    link.handle_peer_closed(Time::ZERO, PeerId(5));
    assert!(link.is_attached());
}

#[test]
fn commands_parse_as_documented() {
    let parse = |s: &str| match parse_agent_line(s.as_bytes()).unwrap() {
        AgentLine::Command { command, .. } => command,
        other => panic!("{other:?}"),
    };
    match parse(
        r#"{"t":"send_file","device":"tel-1","kind":"image","name":"a.png","path":"/tmp/a.png","caption":"c","reply_to":"m1"}"#,
    ) {
        LinkCommand::NeedsFile {
            command: AgentCommand::SendFile { file, .. },
            path,
        } => {
            assert_eq!(path, std::path::PathBuf::from("/tmp/a.png"));
            assert_eq!(file.kind, DownloadKind::Image);
            assert_eq!(file.caption.as_deref(), Some("c"));
            assert_eq!(file.reply_to.as_deref(), Some("m1"));
        }
        other => panic!("{other:?}"),
    }
    match parse(r#"{"t":"send_file","device":"tel-1","kind":"document","name":"a.txt","data":"aGk="}"#) {
        LinkCommand::Ready(AgentCommand::SendFile { file, .. }) => assert_eq!(file.data, b"hi"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        parse(
            r#"{"t":"open_prompt","device":"tel-1","prompt":"p1","kind":"exec_approval","command":"rm x","description":"d","options":["once","deny"],"ttl":60}"#
        ),
        LinkCommand::Ready(AgentCommand::OpenPrompt {
            device: DeviceId("tel-1".into()),
            prompt: PromptId("p1".into()),
            request: PromptRequest::ExecApproval {
                command: "rm x".into(),
                description: "d".into(),
                options: vec!["once".into(), "deny".into()]
            },
            ttl_secs: Some(60),
        })
    );
    assert!(matches!(
        parse(r#"{"t":"open_prompt","device":"d","prompt":"p","kind":"clarify","question":"q?","choices":["a","b"]}"#),
        LinkCommand::Ready(AgentCommand::OpenPrompt {
            request: PromptRequest::Clarify { .. },
            ..
        })
    ));
    assert!(matches!(
        parse(r#"{"t":"open_prompt","device":"d","prompt":"p","kind":"slash_confirm","text":"Start over?"}"#),
        LinkCommand::Ready(AgentCommand::OpenPrompt {
            request: PromptRequest::SlashConfirm { .. },
            ..
        })
    ));
    assert!(matches!(
        parse(r#"{"t":"reply","device":"d","id":"a","text":"x"}"#),
        LinkCommand::Ready(AgentCommand::Reply { done: true, .. })
    ));
    let err = |s: &str| parse_agent_line(s.as_bytes()).unwrap_err().code;
    assert_eq!(
        err(r#"{"t":"send_file","device":"d","kind":"image","name":"a","path":"rel/a.png"}"#),
        "file_unreadable"
    );
    assert_eq!(
        err(r#"{"t":"send_file","device":"d","kind":"image","name":"a","data":"@@@"}"#),
        "bad_data"
    );
    assert_eq!(
        err(r#"{"t":"send_file","device":"d","kind":"sticker","name":"a","data":""}"#),
        "bad_line"
    );
    assert_eq!(err(r#"{"t":"deliver","ref":"d"}"#), "bad_line");
    let big = format!(
        r#"{{"t":"send_file","device":"d","kind":"image","name":"a","data":"{}"}}"#,
        "A".repeat(12 * 1024 * 1024)
    );
    assert_eq!(err(&big), "file_too_big");
    match parse_agent_line(br#"{"t":"hello","v":1,"agent":"x","inline":true,"role":"deliver"}"#).unwrap() {
        AgentLine::Hello(h) => {
            assert!(h.inline);
            assert_eq!(h.role, LinkRole::Deliver);
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_agent_line(&bytes);
    }

    #[test]
    fn json_objects_with_any_fields_never_panic(
        t in prop_oneof![Just("hello".to_string()), Just("reply".to_string()), Just("send_file".to_string()), Just("open_prompt".to_string()), Just("deliver".to_string()), Just("avatar".to_string()), "[a-z]{0,8}"],
        fields in proptest::collection::vec(("[a-z_]{1,10}", prop_oneof![
            any::<i64>().prop_map(|n| json!(n)), ".{0,20}".prop_map(|s| json!(s)), any::<bool>().prop_map(|b| json!(b)),
            Just(json!(null)), Just(json!(["once"])), Just(json!({"kind":"image"}))]), 0..8),
    ) {
        let mut obj = serde_json::Map::new();
        obj.insert("t".into(), json!(t));
        for (k, v) in fields { obj.insert(k, v); }
        let line = serde_json::to_vec(&Value::Object(obj)).unwrap();
        let _ = parse_agent_line(&line);
        let mut link = new_link();
        link.handle_peer_open(AGENT, false);
        link.handle_line(Time::ZERO, AGENT, br#"{"t":"hello","v":1}"#);
        link.handle_line(Time::ZERO, AGENT, &line);
        drain(&mut link);
    }

    #[test]
    fn replies_round_trip(device in "[a-z0-9-]{1,20}", id in "[a-zA-Z0-9]{1,40}", text in ".{0,200}", done in any::<bool>()) {
        let line = serde_json::to_vec(&json!({"t":"reply","device":device,"id":id,"text":text,"done":done})).unwrap();
        let parsed = parse_agent_line(&line).unwrap();
        prop_assert_eq!(parsed, AgentLine::Command { reference: None, command: LinkCommand::Ready(AgentCommand::Reply {
            device: DeviceId(device), message: MessageId(id), text, done })});
    }

    #[test]
    fn lines_come_out_whole_however_the_stream_is_cut(
        lines in proptest::collection::vec("[ -~]{1,60}", 1..20),
        cuts in proptest::collection::vec(1usize..50, 1..40),
    ) {
        let stream: Vec<u8> = lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect();
        let mut reader = LineReader::new(64);
        let mut out = Vec::new();
        let mut at = 0;
        let mut cut = cuts.iter().cycle();
        while at < stream.len() {
            let end = (at + cut.next().unwrap()).min(stream.len());
            reader.push(&stream[at..end]);
            prop_assert!(reader.buffered() <= 64 + 50);
            at = end;
            while let Some(item) = reader.next_line() {
                match item { LineItem::Line(l) => out.push(String::from_utf8(l).unwrap()), LineItem::TooBig => prop_assert!(false) }
            }
        }
        let expected: Vec<String> = lines.into_iter().filter(|l| !l.trim().is_empty()).collect();
        prop_assert_eq!(out, expected);
    }
}

/// The keys of the events the link hands over with a line (the server tells the journal
/// once the line is written whole) or gives up, in order.
fn handed(link: &mut AgentLink) -> Vec<String> {
    let mut keys = Vec::new();
    while let Some(out) = link.poll_output() {
        let key = match out {
            LinkOutput::Handed(key) | LinkOutput::Write { owed: Some(key), .. } => key,
            _ => continue,
        };
        keys.push(format!("{}/{}", key.device, key.key));
    }
    keys
}

#[test]
fn an_event_is_handed_when_written_or_given_up_and_a_redelivery_says_so() {
    // L64: the journal owes an event until the link wrote it to the agent or gave it up;
    // the line that carries it names it (review B #1: handed once written, not queued).
    let mut link = new_link();
    link.handle_event(Time::ZERO, text_event("tel-1", "a", "queued"), None);
    assert!(handed(&mut link).is_empty(), "queued while no agent is attached");
    link.handle_peer_open(AGENT, false);
    link.handle_line(Time::ZERO, AGENT, br#"{"t":"hello","v":1,"agent":"test"}"#);
    assert_eq!(handed(&mut link), ["tel-1/m:a"], "written after welcome");
    let mut again = text_event("tel-1", "b", "after a restart");
    if let AgentEvent::MessageReceived { redelivered, .. } = &mut again {
        *redelivered = true;
    }
    link.handle_event(Time::ZERO, again, None);
    let (lines, _, _) = drain(&mut link);
    assert_eq!(lines[0].1["redelivered"], true);
    link.handle_event(Time::ZERO, text_event("tel-1", "c", "live"), None);
    let (lines, _, _) = drain(&mut link);
    assert!(lines[0].1.get("redelivered").is_none(), "absent unless true");
    // Given up: an event that waited past max_age for an agent.
    let limits = QueueLimits::default();
    let mut link = AgentLink::new("gw", 300, None, limits);
    link.handle_event(Time::ZERO, text_event("tel-1", "old", "x"), None);
    handed(&mut link);
    let late = Time::ZERO + limits.max_age + std::time::Duration::from_secs(1);
    link.handle_event(late, text_event("tel-1", "new", "y"), None);
    assert_eq!(handed(&mut link), ["tel-1/m:old"]);
}
