//! The whole gateway on arbitrary sequences of connects, frames, timeouts, agent commands
//! and disconnects across several connections: no panic, nothing sent to a connection after
//! it closed, and accounting that drains to zero when everyone leaves.
#![no_main]

use std::collections::HashSet;
use std::time::Duration;

use arbitrary::Arbitrary;
use hermes_mobile::{
    AgentCommand, Config, ConnId, DeviceId, Gateway, MessageId, Output, Peer, PromptId, PromptRequest, Time,
};
use hermes_mobile::journal::memory::MemoryJournal;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Open {
        loopback: bool,
        forwarded: bool,
        /// The last byte of its address: failed hellos are throttled per address (L52).
        source: u8,
    },
    Hello {
        conn: u8,
        device: u8,
        token: u8,
    },
    Frame {
        conn: u8,
        bytes: Vec<u8>,
    },
    Known {
        conn: u8,
        which: u8,
        x: u8,
    },
    TooBig {
        conn: u8,
    },
    Close {
        conn: u8,
    },
    Advance {
        ms: u32,
    },
    Reply {
        device: u8,
        message: u8,
        done: bool,
        len: u16,
    },
    Card {
        device: u8,
        prompt: u8,
        ttl: u8,
    },
    EndTurn {
        device: u8,
    },
    Avatar {
        device: u8,
        state: u8,
    },
    /// A card answered from a notification (issue 25), the token checked by the server.
    CardAnswer {
        prompt: u8,
        option: u8,
    },
    /// Pairing (issue 26): a code from the CLI, a `POST /pair` with one of four codes
    /// (each with its own device token, `paired-token-<code>`, as real tokens never
    /// repeat), a revocation from the CLI.
    AddCode {
        code: u8,
        owner: bool,
    },
    Pair {
        code: u8,
        device: u8,
        source: u8,
    },
    Revoke {
        device: u8,
        forget: bool,
    },
    /// The journal (issue 24): the store commits, fails, or the process restarts from it.
    Commit,
    FailCommit,
    Restart {
        killed: bool,
    },
}

const TOKENS: [&str; 7] = [
    "app-token",
    "bound-token",
    "cron-token",
    "paired-token-0",
    "paired-token-1",
    "paired-token-2",
    "paired-token-3",
];
const P256DH: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";

fn known(which: u8, x: u8) -> String {
    let id = format!("i{}", x % 6);
    match which % 16 {
        0 => format!(r#"{{"t":"text","id":"{id}","text":"hi {x}"}}"#),
        1 => format!(
            r#"{{"t":"media","id":"{id}","kind":"image","part":{},"parts":3,"data":"AAAA"}}"#,
            x % 3
        ),
        2 => format!(r#"{{"t":"prompt","prompt_id":"p{}","option_id":"once"}}"#, x % 4),
        3 => format!(r#"{{"t":"prompt","prompt_id":"p{}","text":"free"}}"#, x % 4),
        4 => format!(r#"{{"t":"deliver","id":"{id}","target":"tel-{}","text":"x"}}"#, x % 3),
        5 => format!(r#"{{"t":"audio","id":"{id}","format":"wav","data":"UklGRg=="}}"#),
        6 => format!(r#"{{"t":"ping","ts":{x}}}"#),
        7 => r#"{"t":"typing"}"#.to_owned(),
        // issue 18: subscriptions (allowed and not), tests and unsubscribes.
        8 => format!(
            r#"{{"t":"push_subscribe","id":"{id}","subscription":{{"endpoint":"https://{}/p/{x}","keys":{{"p256dh":"{P256DH}","auth":"BTBZMqHH6r4Tts7J_aSIgg"}}}}}}"#,
            if x % 2 == 0 { "fcm.googleapis.com" } else { "evil.example" }
        ),
        9 => format!(r#"{{"t":"push_{}","id":"{id}"}}"#, if x % 2 == 0 { "test" } else { "unsubscribe" }),
        // issue 24: history pages, forget, and hellos that resume after a seq.
        11 => format!(r#"{{"t":"history","id":"{id}","before":{},"limit":{}}}"#, x % 40, x % 7),
        12 => format!(r#"{{"t":"forget","id":"{id}"}}"#),
        // issue 26: owner frames (the app token's connections are owners).
        10 => format!(r#"{{"t":"revoke","id":"{id}","device":"tel-{}"}}"#, x % 3),
        14 => format!(r#"{{"t":"devices","id":"{id}"}}"#),
        13 => format!(
            r#"{{"t":"hello","token":"app-token","device":{{"id":"tel-{}"}},"resume":{{"after":{}}}}}"#,
            x % 3,
            x / 3 % 30
        ),
        _ => format!(
            r#"{{"t":"hello","token":"app-token","device":{{"id":"tel-{}"}}}}"#,
            x % 3
        ),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut config = Config::new(TOKENS[0]);
    config.extra_tokens = vec![("tel-1".into(), TOKENS[1].into())];
    config.deliver_tokens = vec![TOKENS[2].into()];
    let hosts = hermes_mobile::push::AllowList::new([]).expect("the built-in list parses");
    config.push = Some(hermes_mobile::push::PushConfig::new(P256DH, hosts));
    let history = ops.len() % 2 == 0;
    config.journal = Some(hermes_mobile::journal::JournalConfig {
        history,
        items: 5000,
        days: 30,
    });
    let mut journal = MemoryJournal::new(history);
    let mut gw = Gateway::new(config);
    let mut now = Time::ZERO;
    let mut conns: Vec<ConnId> = Vec::new();
    let mut closed: HashSet<ConnId> = HashSet::new();
    let mut next = 0u64;
    let mut reads = Vec::new();
    // Card answers asked (issue 25) and not answered yet.
    let mut asked: HashSet<u64> = HashSet::new();
    let mut next_request = 0u64;
    let pick = |conns: &[ConnId], i: u8| conns.get(usize::from(i) % conns.len().max(1)).copied();

    for op in ops.iter().take(200) {
        match op {
            Op::Open {
                loopback,
                forwarded,
                source,
            } => {
                next += 1;
                let c = ConnId(next);
                gw.handle_open(
                    now,
                    c,
                    Peer {
                        loopback: *loopback,
                        forwarded: *forwarded,
                        source: hermes_mobile::throttle::SourceKey::of([192, 0, 2, *source].into()),
                    },
                );
                conns.push(c);
            }
            Op::Hello { conn, device, token } => {
                if let Some(c) = pick(&conns, *conn) {
                    let frame = format!(
                        r#"{{"t":"hello","token":"{}","device":{{"id":"tel-{}"}}}}"#,
                        TOKENS[usize::from(*token) % TOKENS.len()],
                        device % 3
                    );
                    gw.handle_message(now, c, frame.as_bytes());
                }
            }
            Op::Frame { conn, bytes } => {
                if let Some(c) = pick(&conns, *conn) {
                    gw.handle_message(now, c, bytes);
                }
            }
            Op::Known { conn, which, x } => {
                if let Some(c) = pick(&conns, *conn) {
                    gw.handle_message(now, c, known(*which, *x).as_bytes());
                }
            }
            Op::TooBig { conn } => {
                if let Some(c) = pick(&conns, *conn) {
                    gw.handle_frame_too_big(now, c);
                }
            }
            Op::Close { conn } => {
                if let Some(c) = pick(&conns, *conn) {
                    gw.handle_close(now, c);
                    closed.insert(c);
                }
            }
            Op::Advance { ms } => {
                now = now + Duration::from_millis(u64::from(*ms % 400_000));
                gw.handle_timeout(now);
            }
            Op::Reply {
                device,
                message,
                done,
                len,
            } => {
                let _ = gw.handle_agent(
                    now,
                    AgentCommand::Reply {
                        device: DeviceId(format!("tel-{}", device % 3)),
                        message: MessageId(format!("m{}", message % 4)),
                        text: "w ".repeat(usize::from(*len % 5000)),
                        done: *done,
                    },
                );
            }
            Op::Card { device, prompt, ttl } => {
                let _ = gw.handle_agent(
                    now,
                    AgentCommand::OpenPrompt {
                        device: DeviceId(format!("tel-{}", device % 3)),
                        prompt: PromptId(format!("p{}", prompt % 4)),
                        request: PromptRequest::Clarify {
                            question: "?".into(),
                            choices: vec!["a".into()],
                        },
                        ttl_secs: Some(u64::from(*ttl)),
                    },
                );
            }
            Op::EndTurn { device } => {
                let _ = gw.handle_agent(
                    now,
                    AgentCommand::EndTurn {
                        device: DeviceId(format!("tel-{}", device % 3)),
                    },
                );
            }
            Op::Commit => {
                if let Some(ticket) = journal.commit() {
                    gw.handle_journal_committed(now, ticket);
                }
            }
            Op::FailCommit => {
                journal.crash();
                gw.handle_journal_failed(now, u64::MAX);
            }
            Op::Restart { killed } => {
                if *killed {
                    journal.crash();
                } else {
                    journal.commit();
                }
                let config = gw.config().clone();
                gw = Gateway::new(config);
                gw.restore(now, journal.snapshot());
                closed.extend(conns.drain(..));
            }
            Op::CardAnswer { prompt, option } => {
                let option = ["once", "deny", "cancel", "c0", "c1", "other", "session"][usize::from(*option % 7)];
                next_request += 1;
                asked.insert(next_request);
                gw.handle_card_answer(now, next_request, &format!("p{}", prompt % 4), option);
            }
            Op::AddCode { code, owner } => {
                let kept = hermes_mobile::devices::KeptCode::new(
                    &format!("code-{}", code % 4),
                    *owner,
                    now + std::time::Duration::from_secs(600),
                );
                let _ = gw.add_pair_code(now, kept);
            }
            Op::Pair { code, device, source } => {
                next_request += 1;
                asked.insert(next_request);
                let req = hermes_mobile::gateway::PairRequest {
                    code: format!("code-{}", code % 4),
                    device_id: format!("tel-{}", device % 3),
                    name: "Phone".into(),
                    platform: "web".into(),
                };
                let source = hermes_mobile::throttle::SourceKey::of([192, 0, 2, *source].into());
                gw.handle_pair(now, next_request, source, req, format!("paired-token-{}", code % 4));
            }
            Op::Revoke { device, forget } => {
                next_request += 1;
                asked.insert(next_request);
                gw.handle_revoke(now, next_request, &format!("tel-{}", device % 3), *forget);
            }
            Op::Avatar { device, state } => {
                let state = ["idle", "thinking", "speaking", "weird"][usize::from(*state % 4)].to_owned();
                let _ = gw.handle_agent(
                    now,
                    AgentCommand::Avatar {
                        device: DeviceId(format!("tel-{}", device % 3)),
                        state,
                    },
                );
            }
        }
        while let Some(out) = gw.poll_output() {
            match out {
                Output::Send { conn, frame } => {
                    assert!(!closed.contains(&conn), "frame to a closed connection");
                    assert!(serde_json::from_str::<serde_json::Value>(&frame).is_ok());
                }
                Output::Close { conn, .. } => {
                    assert!(closed.insert(conn), "closed twice");
                }
                Output::Authenticated { conn, .. } => assert!(!closed.contains(&conn)),
                Output::Notify(_) | Output::PushChanged => {}
                Output::Journal(record) => journal.apply(record),
                Output::JournalRead { token, read } => reads.push((token, journal.read(&read))),
                Output::SaveMedia { name, .. } => gw.handle_media_saved(&name),
                Output::DeleteMedia { .. } => {}
                // Each request is answered once, and only one that was asked.
                Output::CardAnswered { request, .. }
                | Output::Paired { request, .. }
                | Output::Revoked { request, .. } => assert!(asked.remove(&request), "answered twice"),
            }
            // Reads are answered after the outputs before them, as the store's thread does.
            for (token, result) in reads.drain(..) {
                gw.handle_journal_read(now, token, Ok(result));
            }
        }
        // The agent takes every event: what it was owed is owed no more (L64); events a
        // restart came before are handed over again from the journal.
        while let Some(event) = gw.poll_event() {
            if let Some(key) = hermes_mobile::journal::owed::EventKey::of(&event) {
                gw.handle_agent_handed(key);
            }
        }
        let stats = gw.stats();
        assert!(stats.upload_bytes <= stats.connections * 8 * 1024 * 1024);
        assert!(stats.authenticated <= stats.connections);
    }
    for c in conns {
        gw.handle_close(now, c);
    }
    // Output held for a device with a push subscription lives PUSH_HOLD (24 h), not M4's
    // 10 minutes: step past it so that everything must have drained.
    gw.handle_timeout(now + hermes_mobile::push::PUSH_HOLD + Duration::from_secs(7200));
    while gw.poll_output().is_some() {}
    let stats = gw.stats();
    assert_eq!(
        (
            stats.connections,
            stats.upload_bytes,
            stats.held_bytes,
            stats.open_prompts
        ),
        (0, 0, 0, 0)
    );
});
