//! Property: resume after any seq gives exactly the entries changed after it, once each,
//! whatever happened before: streamed replies, cards opened and answered, the phone coming
//! and going, restarts clean or killed (issue 24, L57, L58). On virtual time, the journal
//! in memory.
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use hermes_mobile::{AgentCommand, Config, DeviceId, MessageId, PromptId, PromptRequest};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    Reply { message: u8, done: bool },
    Card { id: u8 },
    Answer { id: u8 },
    Text { id: u8 },
    Online,
    Offline,
    Wait { ms: u64 },
    Restart { killed: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, any::<bool>()).prop_map(|(message, done)| Op::Reply { message, done }),
        1 => (0u8..3).prop_map(|id| Op::Card { id }),
        1 => (0u8..3).prop_map(|id| Op::Answer { id }),
        2 => (0u8..5).prop_map(|id| Op::Text { id }),
        1 => Just(Op::Online),
        1 => Just(Op::Offline),
        2 => (0u64..2500).prop_map(|ms| Op::Wait { ms }),
        1 => any::<bool>().prop_map(|killed| Op::Restart { killed }),
    ]
}

fn run(ops: &[Op]) -> Harness {
    let mut h = Harness::with_journal(Config::new(TOKEN));
    let mut phone = Some(h.connect("tel-1"));
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Reply { message, done } => {
                let _ = h.try_agent(AgentCommand::Reply {
                    device: DeviceId::from("tel-1"),
                    message: MessageId::from(format!("r{message}").as_str()),
                    text: format!("version {step}"),
                    done: *done,
                });
            }
            Op::Card { id } => {
                let _ = h.try_agent(AgentCommand::OpenPrompt {
                    device: DeviceId::from("tel-1"),
                    prompt: PromptId::from(format!("c{id}-{step}").as_str()),
                    request: PromptRequest::SlashConfirm {
                        text: "go?".into(),
                        options: vec![],
                    },
                    ttl_secs: Some(60),
                });
                let _ = id;
            }
            Op::Answer { id } => {
                if let Some(p) = phone {
                    let open: Vec<String> = h
                        .sent
                        .values()
                        .flatten()
                        .filter(|f| f["t"] == "prompt")
                        .filter_map(|f| f["id"].as_str().map(str::to_owned))
                        .filter(|c| c.starts_with(&format!("c{id}-")))
                        .collect();
                    if let Some(card) = open.last() {
                        h.send(p, json!({"t":"prompt","prompt_id":card,"option_id":"once"}));
                    }
                }
            }
            Op::Text { id } => {
                if let Some(p) = phone {
                    h.send(p, json!({"t":"text","id":format!("m{id}"),"text":"hi"}));
                }
            }
            Op::Online => phone = phone.or_else(|| Some(h.connect("tel-1"))),
            Op::Offline => {
                if let Some(p) = phone.take() {
                    h.close(p);
                }
            }
            Op::Wait { ms } => h.advance_ms(*ms),
            Op::Restart { killed } => {
                h.restart(*killed);
                phone = None;
            }
        }
    }
    if let Some(p) = phone {
        h.close(p);
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn resume_after_any_seq_gives_exactly_what_changed_after_it_once(ops in proptest::collection::vec(op(), 1..40)) {
        let mut h = run(&ops);
        let entries = h.journal.as_ref().unwrap().entries(&DeviceId::from("tel-1"));
        let latest = entries.iter().map(|e| e.seq).max().unwrap_or(0);
        let mut afters: BTreeSet<u64> = entries.iter().map(|e| e.seq).collect();
        afters.extend([0, latest]);
        for after in afters {
            let conn = h.open();
            h.send(conn, json!({"t":"hello","token":TOKEN,"device":{"id":"tel-1"},"resume":{"after":after}}));
            let frames = h.take(conn);
            let types = Harness::types(&frames);
            prop_assert_eq!(types.first().map(String::as_str), Some("ready"));
            let resumed = types.iter().position(|t| t == "resumed").expect("resumed");
            prop_assert_eq!(&frames[resumed], &json!({"t":"resumed","seq":frames[0]["seq"]}));
            // ready.seq is at least every entry's seq (reserved seqs may have been used by
            // versions not kept).
            prop_assert!(frames[0]["seq"].as_u64().unwrap() >= latest);
            let mut got: BTreeMap<String, usize> = BTreeMap::new();
            for f in &frames[1..resumed] {
                let seq = f["seq"].as_u64().unwrap();
                prop_assert!(seq > after, "{} at seq {} replayed after {}", f, seq, after);
                let key = match f["t"].as_str().unwrap() {
                    "message" if f["chunk"]["index"] != 0 => continue,
                    "message" => format!("m:{}", f["id"].as_str().unwrap()),
                    "prompt" | "prompt_done" => format!("{}:{}", f["t"].as_str().unwrap(), f["id"].as_str().unwrap()),
                    other => format!("{other}:{}", f["id"]),
                };
                *got.entry(key).or_default() += 1;
            }
            prop_assert!(got.values().all(|n| *n == 1), "twice: {:?}", got);
            let mut want = BTreeSet::new();
            for e in entries.iter().filter(|e| e.seq > after) {
                match &e.key[..2] {
                    "m:" => { want.insert(e.key.clone()); }
                    "p:" => {
                        if e.first_seq > after { want.insert(format!("prompt:{}", &e.key[2..])); }
                        if !e.open { want.insert(format!("prompt_done:{}", &e.key[2..])); }
                    }
                    _ => {}
                }
            }
            let got: BTreeSet<String> = got.into_keys().collect();
            prop_assert_eq!(got, want);
            h.close(conn);
        }
    }
}
