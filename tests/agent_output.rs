//! decisions M1–M4: splitting, streaming, media down, the turn's avatar/typing, offline hold.
mod common;
use common::*;
use hermes_mobile::client::{MediaAssembler, MessageAssembler};
use hermes_mobile::wire::server::{parse_server_frame, ServerFrame};
use hermes_mobile::wire::DownloadKind;
use hermes_mobile::{AgentCommand, CommandError, Config, DeviceId, MessageId, OutgoingFile, Time};
use serde_json::{json, Value};

fn reply(device: &str, id: &str, text: &str, done: bool) -> AgentCommand {
    AgentCommand::Reply {
        device: DeviceId::from(device),
        message: MessageId::from(id),
        text: text.into(),
        done,
    }
}

fn file(bytes: usize) -> OutgoingFile {
    OutgoingFile {
        kind: DownloadKind::Document,
        mime: String::new(),
        filename: "demo.bin".into(),
        caption: None,
        data: (0..bytes).map(|i| (i % 251) as u8).collect(),
        reply_to: Some("up-1".into()),
    }
}

/// Feeds frames to the client assemblers; returns the last complete message text.
fn assemble(frames: &[Value]) -> Option<String> {
    let mut a = MessageAssembler::default();
    let mut last = None;
    for f in frames {
        let bytes = f.to_string();
        if let Ok(ServerFrame::Message(m)) = parse_server_frame(bytes.as_bytes()) {
            if let Some(view) = a.push(&m) {
                last = Some(view.text);
            }
        }
    }
    last
}

#[test]
fn long_reply_is_split_at_3500_characters_on_newlines() {
    // decisions M1
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let text: String = "0123456789\n".repeat(1000);
    h.agent(reply("tel-1", "r1", &text, true));
    let messages = only(h.take(conn), "message");
    assert_eq!(messages.len(), 4);
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m["chunk"], json!({"index": i, "total": 4}));
        assert_eq!(m["final"], i == 3, "final only on the last chunk");
        assert_eq!(m["edit"], false);
        let t = m["text"].as_str().unwrap();
        assert!(t.chars().count() <= 3500);
        if i < 3 {
            assert!(t.ends_with('\n'), "cut after the last newline within the limit");
        }
    }
    assert_eq!(assemble(&messages).unwrap(), text);
}

#[test]
fn chunk_limit_is_configurable() {
    // decisions C1 MOBILE_CHUNK_LIMIT
    let mut c = Config::new(TOKEN);
    c.chunk_limit = 10;
    let mut h = Harness::with_config(c);
    let conn = h.connect("tel-1");
    h.agent(reply("tel-1", "r1", "aaaa bbbb cccc", true));
    let texts: Vec<String> = only(h.take(conn), "message")
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, ["aaaa bbbb ", "cccc"]);
}

#[test]
fn streaming_sends_whole_versions_with_edits_and_one_final() {
    // decisions M2
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(reply("tel-1", "s1", "Hello", false));
    h.agent(reply("tel-1", "s1", "Hello there", false));
    h.agent(reply("tel-1", "s1", "Hello there, friend", true));
    let messages = only(h.take(conn), "message");
    let seen: Vec<(String, bool, bool)> = messages
        .iter()
        .map(|m| {
            (
                m["text"].as_str().unwrap().to_owned(),
                m["edit"].as_bool().unwrap(),
                m["final"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("Hello".into(), false, false),
            ("Hello there".into(), true, false),
            ("Hello there, friend".into(), true, true)
        ]
    );
    assert!(messages.iter().all(|m| m["id"] == "s1"));
    assert_eq!(assemble(&messages).unwrap(), "Hello there, friend");
    assert_eq!(
        h.gw.handle_agent(h.now, reply("tel-1", "s1", "more", false)),
        Err(CommandError::MessageFinished)
    );
}

#[test]
fn a_turn_runs_thinking_message_speaking_typing_stop_then_idle_3_s_later() {
    // decisions M3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"text","id":"u1","text":"hi"}));
    h.advance_to(Time::from_millis(500));
    h.agent(reply("tel-1", "r1", "echo: hi", true));
    h.agent(AgentCommand::EndTurn {
        device: DeviceId::from("tel-1"),
    });
    h.advance_to(Time::from_millis(3_499));
    let frames = h.take(conn);
    assert_eq!(
        Harness::types(&frames),
        ["avatar", "typing", "message", "avatar", "typing"]
    );
    assert_eq!(frames[0]["state"], "thinking");
    assert_eq!(frames[1], json!({"t":"typing"}));
    assert_eq!(frames[3]["state"], "speaking");
    assert_eq!(frames[4], json!({"t":"typing","stop":true}));
    h.advance_to(Time::from_millis(3_500));
    assert_eq!(h.take(conn), vec![json!({"t":"avatar","state":"idle"})]);
}

#[test]
fn speaking_comes_after_the_whole_first_output_and_once_per_turn() {
    // decisions M3 (docs/decisions-local.md L5)
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"text","id":"u1","text":"hi"}));
    h.take(conn);
    h.agent(reply("tel-1", "r1", &"x".repeat(8000), true));
    h.agent(reply("tel-1", "r2", "second", true));
    assert_eq!(
        Harness::types(&h.take(conn)),
        ["message", "message", "message", "avatar", "message"]
    );
}

#[test]
fn idle_counts_from_the_last_agent_frame() {
    // decisions M3 step 4
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(reply("tel-1", "s", "a", false));
    h.advance_to(Time::from_secs(2));
    h.agent(reply("tel-1", "s", "a b", true));
    h.take(conn);
    h.advance_to(Time::from_millis(4_999));
    assert!(h.take(conn).is_empty());
    h.advance_to(Time::from_secs(5));
    assert_eq!(h.take(conn), vec![json!({"t":"avatar","state":"idle"})]);
}

#[test]
fn thinking_stays_until_the_agent_answers() {
    // decisions M3: no idle before any agent frame
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"text","id":"u1","text":"hi"}));
    h.take(conn);
    h.advance_to(Time::from_secs(60));
    assert!(h.take(conn).is_empty());
}

#[test]
fn unknown_avatar_states_are_sent_as_idle() {
    // decisions M3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(AgentCommand::Avatar {
        device: DeviceId::from("tel-1"),
        state: "Thinking".into(),
    });
    h.agent(AgentCommand::Avatar {
        device: DeviceId::from("tel-1"),
        state: "dancing".into(),
    });
    h.agent(AgentCommand::Typing {
        device: DeviceId::from("tel-1"),
    });
    assert_eq!(
        h.take(conn),
        vec![
            json!({"t":"avatar","state":"thinking"}),
            json!({"t":"avatar","state":"idle"}),
            json!({"t":"typing"})
        ]
    );
}

#[test]
fn an_agents_long_file_name_and_caption_are_cut_as_a_clients_would_be() {
    // decisions G8 (200 characters for a file name, the extension kept; 12,000 for a
    // caption), so the frame stays inside docs/protocol-v1.schema.json (L48); an empty
    // reply_to is no reply_to.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let mut f = file(10);
    f.filename = format!("{}.pdf", "é".repeat(300));
    f.caption = Some("c".repeat(12_005));
    f.reply_to = Some(String::new());
    h.agent(AgentCommand::SendFile {
        device: DeviceId::from("tel-1"),
        file: f,
    });
    let media = only(h.take(conn), "media");
    let m = &media[0];
    assert_eq!(m["filename"].as_str().unwrap(), format!("{}.pdf", "é".repeat(196)));
    assert_eq!(m["caption"].as_str().unwrap().chars().count(), 12_000);
    assert!(m.get("reply_to").is_none(), "{}", m["reply_to"]);
}

#[test]
fn files_go_down_in_3_mib_raw_chunks() {
    // decisions U1
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let f = file(7 * 1024 * 1024);
    h.agent(AgentCommand::SendFile {
        device: DeviceId::from("tel-1"),
        file: f.clone(),
    });
    let media = only(h.take(conn), "media");
    assert_eq!(media.len(), 3);
    let mut assembler = MediaAssembler::default();
    let mut done = None;
    for (i, m) in media.iter().enumerate() {
        assert_eq!((m["part"].as_u64(), m["parts"].as_u64()), (Some(i as u64), Some(3)));
        assert_eq!(m["final"], i == 2);
        assert_eq!(m["size"], 7 * 1024 * 1024);
        assert_eq!(
            (m["kind"].as_str(), m["mime"].as_str()),
            (Some("document"), Some("application/octet-stream"))
        );
        assert_eq!(m["reply_to"], "up-1");
        let raw = hermes_mobile::base64::decoded_len(m["data"].as_str().unwrap());
        assert_eq!(raw, if i < 2 { 3 * 1024 * 1024 } else { 1024 * 1024 });
        let s = m.to_string();
        if let Ok(ServerFrame::Media(frame)) = parse_server_frame(s.as_bytes()) {
            done = assembler.push(&frame).unwrap();
        }
    }
    assert_eq!(done.expect("assembled").data, f.data);
}

#[test]
fn files_over_8_mib_are_refused() {
    let mut h = Harness::new();
    h.connect("tel-1");
    let cmd = AgentCommand::SendFile {
        device: DeviceId::from("tel-1"),
        file: file(8 * 1024 * 1024 + 1),
    };
    assert_eq!(h.gw.handle_agent(h.now, cmd), Err(CommandError::FileTooBig));
}

#[test]
fn output_for_an_offline_device_is_held_and_sent_after_ready() {
    // decisions M4
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.close(conn);
    h.agent(reply("tel-1", "r1", "while you were away", true));
    h.agent(AgentCommand::SendFile {
        device: DeviceId::from("tel-1"),
        file: file(10),
    });
    h.agent(AgentCommand::Typing {
        device: DeviceId::from("tel-1"),
    });
    assert!(h.gw.stats().held_bytes > 0);
    h.advance_to(Time::from_secs(60));
    let conn = h.open();
    h.hello(conn, "tel-1");
    let frames = h.take(conn);
    assert_eq!(
        Harness::types(&frames),
        ["ready", "message", "media"],
        "typing is not held"
    );
    assert_eq!(frames[1]["text"], "while you were away");
    assert_eq!(h.gw.stats().held_bytes, 0);
}

#[test]
fn a_stream_held_offline_arrives_as_its_latest_version() {
    // decisions M2, M4 (docs/decisions-local.md L6)
    let mut h = Harness::new();
    h.agent(reply("tel-1", "s", "one", false));
    h.agent(reply("tel-1", "s", "one two", false));
    h.agent(reply("tel-1", "s", "one two three", false));
    let conn = h.connect_frames("tel-1");
    let messages = only(conn.1, "message");
    assert_eq!(messages.len(), 1);
    assert_eq!(
        (messages[0]["text"].as_str(), messages[0]["edit"].as_bool()),
        (Some("one two three"), Some(false))
    );
    h.agent(reply("tel-1", "s", "one two three four", true));
    let next = only(h.take(conn.0), "message");
    assert_eq!(
        (next[0]["edit"].as_bool(), next[0]["final"].as_bool()),
        (Some(true), Some(true))
    );
}

#[test]
fn held_output_expires_after_10_minutes() {
    // decisions M4
    let mut h = Harness::new();
    h.agent(reply("tel-1", "r1", "old news", true));
    h.advance_to(Time::from_millis(599_999));
    assert!(h.gw.stats().held_bytes > 0);
    h.advance_to(Time::from_secs(600));
    assert_eq!(h.gw.stats().held_bytes, 0);
    assert_eq!(
        h.gw.stats().devices_known,
        0,
        "nothing is kept for a device that is gone"
    );
    let conn = h.connect_frames("tel-1");
    assert_eq!(Harness::types(&conn.1), ["ready"]);
}

#[test]
fn hold_is_bounded_at_8_mib_per_device() {
    // decisions M4
    let mut h = Harness::new();
    let big = "x".repeat(5 * 1024 * 1024);
    h.agent(reply("tel-1", "a", &big, true));
    assert_eq!(
        h.gw.handle_agent(h.now, reply("tel-1", "b", &big, true)),
        Err(CommandError::HoldFull)
    );
    assert_eq!(h.gw.stats().held_bytes, 5 * 1024 * 1024);
}

#[test]
fn typing_stop_goes_out_even_without_output_and_idle_follows() {
    // decisions M3
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.send(conn, json!({"t":"text","id":"u1","text":"hi"}));
    h.take(conn);
    h.agent(AgentCommand::EndTurn {
        device: DeviceId::from("tel-1"),
    });
    assert_eq!(h.take(conn), vec![json!({"t":"typing","stop":true})]);
    h.advance_to(Time::from_secs(3));
    assert_eq!(h.take(conn), vec![json!({"t":"avatar","state":"idle"})]);
}

#[test]
fn a_final_reply_goes_out_however_many_streams_were_abandoned() {
    // decisions L14 bounds streams; issue 8 #9: it must not silence one-shot replies.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    for i in 0..64 {
        h.agent(reply("tel-1", &format!("s{i}"), "partial", false));
    }
    assert_eq!(
        h.gw.handle_agent(h.now, reply("tel-1", "s64", "one more stream", false)),
        Err(CommandError::TooManyStreams)
    );
    h.take(conn);
    h.agent(reply("tel-1", "final-1", "the answer", true));
    let frames = only(h.take(conn), "message");
    assert_eq!(frames.len(), 1);
    assert_eq!(
        (frames[0]["text"].as_str(), frames[0]["final"].as_bool()),
        (Some("the answer"), Some(true))
    );
}

fn message_frames(frames: Vec<Value>) -> Vec<(String, bool)> {
    only(frames, "message")
        .iter()
        .map(|f| (f["text"].as_str().unwrap_or("").to_owned(), f["edit"] == true))
        .collect()
}

#[test]
fn a_reply_streamed_across_a_reconnect_stays_one_bubble() {
    // decisions M2 across a drop and reconnect (issue 8 #5).
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(reply("tel-1", "m1", "one", false));
    assert_eq!(message_frames(h.take(conn)), [("one".to_owned(), false)]);
    h.close(conn);
    h.advance_ms(4000);
    let conn = h.connect("tel-1");
    h.agent(reply("tel-1", "m1", "one two", false));
    assert_eq!(
        message_frames(h.take(conn)),
        [("one two".to_owned(), true)],
        "an edit, not a new bubble"
    );
    h.agent(reply("tel-1", "m1", "one two three", true));
    h.close(conn);
    h.advance_ms(4000);
    h.connect("tel-1");
    assert_eq!(
        h.gw.handle_agent(h.now, reply("tel-1", "m1", "late edit", true)),
        Err(CommandError::MessageFinished),
        "no edit after done, reconnect or not"
    );
}

#[test]
fn a_reply_streamed_across_a_replacement_stays_one_bubble() {
    // decisions H5 with M2 (issue 8 #5).
    let mut h = Harness::new();
    let first = h.connect("tel-1");
    h.agent(reply("tel-1", "m1", "one", false));
    h.take(first);
    let second = h.connect("tel-1");
    assert_eq!(h.closed.get(&first).map(|c| c.1.as_str()), Some("replaced"));
    h.agent(reply("tel-1", "m1", "one two", true));
    assert_eq!(message_frames(h.take(second)), [("one two".to_owned(), true)]);
}

#[test]
fn reply_bookkeeping_of_an_offline_device_goes_after_the_hold_window() {
    // issue 8 #5: kept as long as replies can still be edited, and no longer.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    h.agent(reply("tel-1", "m1", "one", false));
    h.close(conn);
    assert_eq!(h.gw.stats().devices_known, 1);
    h.advance_ms(600_000);
    assert_eq!(h.gw.stats().devices_known, 0);
}
