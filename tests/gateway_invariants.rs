//! Arbitrary sequences of connects, frames, timeouts, agent commands and disconnects across
//! several connections: no panic, nothing sent to a closed connection (the harness asserts
//! it), and memory accounting that adds up and drains when everyone leaves.
mod common;
use common::*;
use hermes_mobile::{AgentCommand, ConnId, DeviceId, MessageId, PromptId, PromptRequest, Time};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    Open,
    Hello(u8, u8),
    Frame(u8, u8, u8),
    Close(u8),
    Advance(u32),
    Reply(u8, u8, bool),
    Card(u8, u8),
    EndTurn(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Open),
        (any::<u8>(), any::<u8>()).prop_map(|(c, d)| Op::Hello(c, d)),
        (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(c, k, x)| Op::Frame(c, k, x)),
        any::<u8>().prop_map(Op::Close),
        (0u32..200_000).prop_map(Op::Advance),
        (any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(d, m, done)| Op::Reply(d, m, done)),
        (any::<u8>(), any::<u8>()).prop_map(|(d, p)| Op::Card(d, p)),
        any::<u8>().prop_map(Op::EndTurn),
    ]
}

fn device(d: u8) -> String {
    format!("tel-{}", d % 3)
}

fn frame(kind: u8, x: u8) -> serde_json::Value {
    let id = format!("i{}", x % 5);
    match kind % 10 {
        0 => json!({"t":"text","id":id,"text":"hi"}),
        1 => json!({"t":"media","id":id,"kind":"image","part":x % 3,"parts":3,"data":b64(&vec![x; 1000])}),
        2 => json!({"t":"media","id":id,"kind":"image","part":0,"parts":1 + x % 2,"data":"!!"}),
        3 => json!({"t":"prompt","prompt_id":format!("p{}", x % 4),"option_id":"once"}),
        4 => json!({"t":"prompt","prompt_id":format!("p{}", x % 4),"option_id":"other"}),
        5 => json!({"t":"ping","ts":x}),
        6 => json!({"t":"deliver","id":id,"target":device(x),"text":"cron"}),
        7 => json!({"t":"audio","id":id,"format":"wav","data":b64(&[x; 10])}),
        8 => json!({"t":"typing"}),
        _ => json!({"t":"hello","token":TOKEN}),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_sessions_keep_the_gateway_consistent(ops in proptest::collection::vec(op(), 1..120)) {
        let mut h = Harness::new();
        let mut conns: Vec<ConnId> = Vec::new();
        for op in ops {
            let pick = |i: u8| conns.get(i as usize % conns.len().max(1)).copied();
            match op {
                Op::Open => conns.push(h.open()),
                Op::Hello(c, d) => if let Some(c) = pick(c) {
                    h.send(c, json!({"t":"hello","token":TOKEN,"device":{"id":device(d)}}));
                },
                Op::Frame(c, k, x) => if let Some(c) = pick(c) { h.send(c, frame(k, x)) },
                Op::Close(c) => if let Some(c) = pick(c) { h.close(c) },
                Op::Advance(ms) => h.advance_ms(u64::from(ms)),
                Op::Reply(d, m, done) => {
                    let _ = h.gw.handle_agent(h.now, AgentCommand::Reply {
                        device: DeviceId(device(d)), message: MessageId(format!("m{}", m % 4)), text: "reply".into(), done,
                    });
                }
                Op::Card(d, p) => {
                    let _ = h.gw.handle_agent(h.now, AgentCommand::OpenPrompt {
                        device: DeviceId(device(d)),
                        prompt: PromptId(format!("p{}", p % 4)),
                        request: PromptRequest::SlashConfirm { text: "sure?".into(), options: vec![] },
                        ttl_secs: Some(u64::from(p % 50)),
                    });
                }
                Op::EndTurn(d) => { let _ = h.gw.handle_agent(h.now, AgentCommand::EndTurn { device: DeviceId(device(d)) }); }
            }
            // Drain whatever the direct handle_agent calls produced, with the harness's checks.
            h.advance_ms(0);
            let stats = h.gw.stats();
            prop_assert!(stats.upload_bytes <= stats.connections * 8 * 1024 * 1024);
            prop_assert!(stats.devices_online <= stats.authenticated);
            prop_assert!(stats.authenticated <= stats.connections);
            // Issue 23 (L51): the uploads' totals are the sums, across every change.
            prop_assert_eq!(stats.upload_held, stats.upload_held_by_conn);
        }
        for c in conns {
            h.close(c);
        }
        h.advance_to(Time::from_millis(h.now.as_millis() + 3_600_000));
        let stats = h.gw.stats();
        prop_assert_eq!(stats.connections, 0);
        prop_assert_eq!(stats.upload_bytes, 0);
        prop_assert_eq!(stats.upload_held, 0);
        prop_assert_eq!(stats.held_bytes, 0);
        prop_assert_eq!(stats.open_prompts, 0);
        prop_assert_eq!(stats.dedup_entries, 0, "the dedup window drains");
        prop_assert_eq!(stats.devices_known, 0, "forgotten devices cost nothing");
        prop_assert_eq!(stats.timers, 0, "no timer outlives what it guards");
    }
}
