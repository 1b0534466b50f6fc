//! Issue 23 in the core, on virtual time: hidden characters on cards (L49), look-alike
//! device ids (L50), the uploads' share of the memory budget (L51), failed hellos throttled
//! per address (L52) and who may deliver (L53).
mod common;
use std::time::Duration;

use common::*;
use hermes_mobile::throttle::SourceKey;
use hermes_mobile::{AgentCommand, AgentEvent, Config, DeviceId, Peer, PromptId, PromptRequest};
use serde_json::json;

fn approval(command: &str) -> AgentCommand {
    AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from("p1"),
        request: PromptRequest::ExecApproval {
            command: command.into(),
            description: "cleans up".into(),
            options: vec![],
        },
        ttl_secs: None,
    }
}

#[test]
fn a_card_with_hidden_characters_says_so_and_keeps_the_command_exact() {
    // decisions L49 (issue 23 #4): the Trojan Source card.
    let mut h = Harness::new();
    let phone = h.connect("tel-1");
    let command = "rm -rf /home/user/\u{202E} tmp.log \u{202C}";
    h.agent(approval(command));
    let card = h.take(phone).remove(0);
    assert_eq!(card["t"], "prompt");
    assert_eq!(card["hidden_chars"], true);
    assert_eq!(card["command"], command, "the command itself is never altered");
    h.send(phone, json!({"t":"prompt","prompt_id":"p1","option_id":"deny"}));
    assert!(matches!(&h.take_events()[..], [AgentEvent::PromptAnswered { option_id, .. }] if option_id == "deny"));
}

#[test]
fn hidden_characters_anywhere_on_a_card_mark_it_and_plain_cards_carry_no_mark() {
    // decisions L49: text, description and option labels count too.
    let mut h = Harness::new();
    let phone = h.connect("tel-1");
    h.agent(approval("ls -la\n\tpwd"));
    let plain = h.take(phone).remove(0);
    assert!(plain.get("hidden_chars").is_none(), "{plain}");
    let cases = [
        PromptRequest::ExecApproval {
            command: "ls".into(),
            description: "lists\u{200B}".into(),
            options: vec![],
        },
        PromptRequest::Clarify {
            question: "Which\u{2066} one?".into(),
            choices: vec!["a".into()],
        },
        PromptRequest::Clarify {
            question: "Which one?".into(),
            choices: vec!["b\u{FEFF}".into()],
        },
    ];
    for (i, request) in cases.into_iter().enumerate() {
        h.agent(AgentCommand::OpenPrompt {
            device: DeviceId::from("tel-1"),
            prompt: PromptId::from(format!("q{i}").as_str()),
            request,
            ttl_secs: None,
        });
        let card = h.take(phone).remove(0);
        assert_eq!(card["hidden_chars"], true, "{card}");
    }
}

#[test]
fn look_alike_device_ids_are_refused_at_hello() {
    // decisions L50 (refines G8): `tel-1 ` must not sit beside a bound `tel-1`.
    for id in [
        "tel-1 ",
        " tel-1",
        "tel-1\u{0}",
        "tel\n1",
        "tel-\u{202E}1",
        "tel\u{200B}-1",
    ] {
        let mut h = Harness::new();
        let conn = h.open();
        h.hello(conn, id);
        let frames = h.take(conn);
        assert_eq!(frames.len(), 1, "{id:?}: {frames:?}");
        assert_eq!(error_of(&frames)["code"], "bad_frame", "{id:?}");
        assert_eq!(error_of(&frames)["fatal"], true);
        assert_eq!(h.closed[&conn], (1008, "bad_frame".to_owned()));
    }
    let mut h = Harness::new();
    h.connect("Pixel 8 — кухня");
}

fn part(id: &str, part: usize, parts: usize, bytes: usize) -> serde_json::Value {
    json!({"t":"media","id":id,"kind":"document","filename":"f.bin","part":part,"parts":parts,"data":b64(&vec![7u8; bytes])})
}

#[test]
fn unfinished_uploads_of_every_device_together_stay_inside_their_share() {
    // decisions L51 (issue 23 #2): device ids are free to mint, so U2's 8 MiB per device
    // bounds nothing alone.
    const MIB: usize = 1024 * 1024;
    let mut config = Config::new(TOKEN);
    config.max_upload_speculation = 2 * MIB;
    config.max_upload_total = 12 * MIB;
    let mut h = Harness::with_config(config);
    let mut refused = 0;
    for d in 0..4 {
        let phone = h.connect(&format!("mint-{d}"));
        for u in 0..2 {
            // 4 MiB of an 8 MiB upload each: two devices fill the 10 MiB of bytes.
            h.send(phone, part(&format!("u{u}"), 0, 2, 2 * MIB));
            h.send(phone, part(&format!("v{u}"), 0, 2, 2 * MIB));
        }
        let frames = h.take(phone);
        for f in &frames {
            assert_eq!(f["code"], "too_big", "{f}");
            assert_eq!(f["fatal"], false, "an upload refusal is not fatal");
            refused += 1;
        }
        assert!(h.gw.stats().upload_held <= 12 * MIB, "{:?}", h.gw.stats());
    }
    assert!(refused >= 8, "parts past the share were refused ({refused})");
    // What was refused is dropped whole (U3): the bytes held are the ones accepted.
    let stats = h.gw.stats();
    assert!(stats.upload_bytes <= 10 * MIB, "{stats:?}");
    let phone = h.connect("mint-9");
    h.send(phone, part("big", 0, 2, 2 * MIB));
    assert_eq!(h.take(phone)[0]["code"], "too_big", "still full: nothing was freed");
    // mint-0's 8 MiB go with its connection; then an upload fits and completes.
    let mint0 = h.connect("mint-0");
    h.close(mint0);
    h.send(phone, part("big", 0, 2, 2 * MIB));
    h.send(phone, part("big", 1, 2, 2 * MIB));
    assert!(h.take(phone).iter().all(|f| f["t"] != "error"));
    assert!(matches!(
        h.take_events().last(),
        Some(AgentEvent::MessageReceived { file: Some(_), .. })
    ));
}

fn from(ip: &str) -> Peer {
    Peer {
        loopback: false,
        forwarded: false,
        source: SourceKey::of(ip.parse().unwrap()),
    }
}

fn hello_from(h: &mut Harness, ip: &str, token: &str) -> Vec<serde_json::Value> {
    let conn = h.open_with(from(ip));
    h.send(conn, json!({"t":"hello","token":token,"device":{"id":"tel-1"}}));
    h.take(conn)
}

#[test]
fn failed_hellos_are_throttled_per_address_without_delaying_another() {
    // decisions L52 (issue 23 #3)
    let mut h = Harness::new();
    for _ in 0..10 {
        let frames = hello_from(&mut h, "203.0.113.9", "guess-0123456789abcdef");
        assert_eq!(error_of(&frames)["message"], "invalid token");
    }
    // Blocked: even the right token is not looked at from there, so a block is no guess.
    let frames = hello_from(&mut h, "203.0.113.9", TOKEN);
    assert_eq!(error_of(&frames)["code"], "auth_failed");
    assert!(error_of(&frames)["message"]
        .as_str()
        .unwrap()
        .starts_with("too many failed attempts"));
    // The owner's phone elsewhere gets in at once.
    assert_eq!(hello_from(&mut h, "198.51.100.4", TOKEN)[0]["t"], "ready");
    // After the block, one more wrong guess blocks for twice as long.
    h.advance_ms(1_000);
    assert_eq!(hello_from(&mut h, "203.0.113.9", "guess-x")[0]["code"], "auth_failed");
    h.advance_ms(1_500);
    let frames = hello_from(&mut h, "203.0.113.9", TOKEN);
    assert!(error_of(&frames)["message"]
        .as_str()
        .unwrap()
        .contains("try again in 1 s"));
    h.advance_ms(500);
    assert_eq!(hello_from(&mut h, "203.0.113.9", TOKEN)[0]["t"], "ready");
    // Ten quiet minutes and the address is forgotten (and the sweep empties the table).
    h.advance_to(h.now + Duration::from_secs(700));
    for _ in 0..9 {
        hello_from(&mut h, "203.0.113.9", "guess");
    }
    assert_eq!(hello_from(&mut h, "203.0.113.9", TOKEN)[0]["t"], "ready");
}

/// A loopback peer with no proxy header (S1).
fn loopback() -> Peer {
    Peer {
        loopback: true,
        ..Peer::default()
    }
}

fn deliver(id: &str, target: &str) -> serde_json::Value {
    json!({"t":"deliver","id":id,"target":target,"text":"hi"})
}

#[test]
fn a_device_bound_token_delivers_only_to_its_own_device() {
    // decisions L53 (issue 23, "Deliver")
    let mut config = Config::new(TOKEN);
    config.extra_tokens = vec![("tel-2".into(), "tel-2-token-0123456789".into())];
    let mut h = Harness::with_config(config);
    let victim = h.connect("tel-1");
    let local = loopback();
    let bound = h.open_with(local);
    h.send(
        bound,
        json!({"t":"hello","token":"tel-2-token-0123456789","device":{"id":"tel-2"}}),
    );
    h.take(bound);
    h.send(bound, deliver("d1", "mobile:tel-1"));
    let frames = h.take(bound);
    assert_eq!(error_of(&frames)["code"], "forbidden");
    assert!(h.take(victim).is_empty(), "nothing reached tel-1");
    h.send(bound, deliver("d2", "tel-2"));
    let frames = h.take(bound);
    assert_eq!(frames.last().unwrap()["t"], "delivered", "{frames:?}");
}

#[test]
fn with_trust_loopback_off_only_a_deliver_token_delivers() {
    // decisions L53: MOBILE_TRUST_LOOPBACK=off, for a gateway behind a TCP forwarder.
    let mut config = Config::new(TOKEN);
    config.trust_loopback = false;
    config.deliver_tokens = vec!["cron-token-0123456789".into()];
    let mut h = Harness::with_config(config);
    let phone = h.connect("tel-1");
    let local = loopback();
    let conn = h.open_with(local);
    h.hello(conn, "cli");
    h.take(conn);
    h.send(conn, deliver("d1", "tel-1"));
    assert_eq!(error_of(&h.take(conn))["code"], "forbidden");
    let cron = h.open_with(local);
    h.send(
        cron,
        json!({"t":"hello","token":"cron-token-0123456789","device":{"id":"cron"}}),
    );
    h.take(cron);
    h.send(cron, deliver("d2", "tel-1"));
    assert_eq!(h.take(cron)[0]["t"], "delivered");
    assert_eq!(h.take(phone).len(), 1);
}
