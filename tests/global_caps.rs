//! decisions L32 and L33 (issue 8 #3, #4): totals across device ids are bounded, because
//! anyone with the app token can mint device ids. The oldest goes first.
mod common;
use common::*;
use hermes_mobile::limits::{
    DEDUP_TOTAL_CAPACITY, MAX_HELD_TOTAL_BYTES, MAX_KNOWN_DEVICES, MAX_OPEN_PROMPTS_PER_DEVICE,
};
use hermes_mobile::wire::DownloadKind;
use hermes_mobile::{AgentCommand, CommandError, DeviceId, MessageId, OutgoingFile, PromptId, PromptRequest};
use serde_json::json;

const MIB: usize = 1024 * 1024;

fn file_for(device: &str, bytes: usize) -> AgentCommand {
    AgentCommand::SendFile {
        device: DeviceId::from(device),
        file: OutgoingFile {
            kind: DownloadKind::Document,
            mime: String::new(),
            filename: "x.bin".into(),
            caption: None,
            data: vec![1; bytes],
            reply_to: None,
        },
    }
}

#[test]
fn output_held_for_throwaway_devices_is_bounded_in_all_oldest_first() {
    let mut h = Harness::new();
    let devices: Vec<String> = (0..6).map(|i| format!("throwaway-{i}")).collect();
    for (i, d) in devices.iter().enumerate() {
        h.advance_ms(1000);
        h.gw.handle_agent(h.now, file_for(d, 7 * MIB))
            .unwrap_or_else(|e| panic!("device {i}: {e}"));
        assert!(h.gw.stats().held_bytes <= MAX_HELD_TOTAL_BYTES);
    }
    // The first devices' output went to make room; the latest is all there.
    let (_, frames) = h.connect_frames(&devices[0]);
    assert!(only(frames, "media").is_empty(), "the oldest held output was dropped");
    let (_, frames) = h.connect_frames(&devices[5]);
    assert_eq!(only(frames, "media")[0]["size"], 7 * MIB);
}

#[test]
fn known_devices_are_bounded_the_longest_idle_offline_one_goes_first() {
    let mut h = Harness::new();
    for i in 0..MAX_KNOWN_DEVICES + 20 {
        h.advance_ms(10);
        h.agent(AgentCommand::Reply {
            device: DeviceId::from(format!("minted-{i}").as_str()),
            message: MessageId::from("m"),
            text: "held".into(),
            done: true,
        });
    }
    assert_eq!(h.gw.stats().devices_known, MAX_KNOWN_DEVICES);
    let (_, frames) = h.connect_frames("minted-0");
    assert!(only(frames, "message").is_empty(), "forgotten first");
    let (_, frames) = h.connect_frames(&format!("minted-{}", MAX_KNOWN_DEVICES + 19));
    assert_eq!(only(frames, "message")[0]["text"], "held");
}

#[test]
fn dedup_entries_are_bounded_in_all() {
    // decisions I1 per device, L32 in all.
    let mut h = Harness::new();
    let per_device = 4000;
    let devices = DEDUP_TOTAL_CAPACITY / per_device + 1;
    for d in 0..devices {
        let conn = h.connect(&format!("chatty-{d}"));
        for i in 0..per_device {
            h.send(conn, json!({"t":"text","id":format!("m{i}"),"text":"hi"}));
        }
        h.take(conn);
        h.close(conn);
    }
    assert_eq!(h.gw.stats().dedup_entries, DEDUP_TOTAL_CAPACITY);
}

#[test]
fn cards_are_bounded_per_device_and_leave_no_timers_behind_once_answered() {
    // decisions L33; issue 8 #3.
    let mut h = Harness::new();
    let conn = h.connect("tel-1");
    let card = |id: String| AgentCommand::OpenPrompt {
        device: DeviceId::from("tel-1"),
        prompt: PromptId::from(id.as_str()),
        request: PromptRequest::SlashConfirm {
            text: "/x".into(),
            options: vec![],
        },
        ttl_secs: Some(86_400),
    };
    for i in 0..MAX_OPEN_PROMPTS_PER_DEVICE {
        h.agent(card(format!("p{i}")));
    }
    assert_eq!(
        h.gw.handle_agent(h.now, card("one-more".into())),
        Err(CommandError::TooManyPrompts)
    );
    let timers_with_cards_open = h.gw.stats().timers;
    for i in 0..MAX_OPEN_PROMPTS_PER_DEVICE {
        h.send(
            conn,
            json!({"t":"prompt","prompt_id":format!("p{i}"),"option_id":"once"}),
        );
    }
    for round in 0..20 {
        for i in 0..MAX_OPEN_PROMPTS_PER_DEVICE {
            h.agent(card(format!("r{round}-{i}")));
        }
        for i in 0..MAX_OPEN_PROMPTS_PER_DEVICE {
            h.send(
                conn,
                json!({"t":"prompt","prompt_id":format!("r{round}-{i}"),"option_id":"once"}),
            );
        }
        h.take(conn);
    }
    assert!(
        h.gw.stats().timers <= timers_with_cards_open + 2,
        "{} timers after 640 answered cards",
        h.gw.stats().timers
    );
}

#[test]
fn timers_of_records_evicted_at_the_cap_do_not_pile_up() {
    // issue 8 abuse run: streams to more throwaway devices than MAX_KNOWN_DEVICES re-created
    // evicted records over and over, each leaving timer entries for ten minutes.
    let mut h = Harness::new();
    for step in 0..20 {
        for i in 0..MAX_KNOWN_DEVICES + 44 {
            h.agent(AgentCommand::Reply {
                device: DeviceId::from(format!("minted-{i}").as_str()),
                message: MessageId::from("stream"),
                text: format!("version {step}"),
                done: false,
            });
        }
        h.advance_ms(50);
    }
    let timers = h.gw.stats().timers;
    // About two live timers per record (hold, forget); stale ones swept as the heap doubles.
    assert!(
        timers <= 4 * MAX_KNOWN_DEVICES + 64,
        "{timers} timer entries for 300 devices"
    );
}
