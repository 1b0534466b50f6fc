//! The HTTP agent's event handling (issue 17): any order of phone messages, call news
//! (heads, body bytes, ends, failures), file answers, card answers and time, for both
//! backends: no panic, and a deadline the agent asks for is never in the past.
#![no_main]

use std::path::PathBuf;
use std::time::Duration;

use arbitrary::Arbitrary;
use hermes_mobile::agent::{PromptKind, UserInfo};
use hermes_mobile::upstream::{Endpoint, ResponseHead};
use hermes_mobile::{AgentCommand, AgentEvent, DeviceId, Time};
use hermes_mobile_server::agent::http::{Backend, HttpAgent, HttpSettings};
use hermes_mobile_server::agent::io::{AgentIo, CallError, CallEvent, LoadError};
use hermes_mobile_server::agent::PureAgent;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Text { device: u8, text: String },
    Command { device: u8, which: u8 },
    Head { call: u8, status: u16, stream: bool, retry_after: Option<u8> },
    Body { call: u8, bytes: Vec<u8> },
    End { call: u8 },
    Failed { call: u8, which: u8 },
    Loaded { load: u8, ok: Option<Vec<u8>> },
    Answer { prompt: u8, choice: u8, expired: bool },
    Wait { ms: u16 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    hermes: bool,
    ops: Vec<Op>,
}

fn settings(hermes: bool) -> HttpSettings {
    HttpSettings {
        backend: if hermes { Backend::Hermes } else { Backend::OpenAi },
        endpoint: Endpoint::parse("http://127.0.0.1:8000/v1").expect("a fixed URL"),
        model: "m".into(),
        key: None,
        system: None,
        temperature: None,
        headers: Vec::new(),
        vision: true,
        media_dirs: vec!["/srv".into()],
        edit_interval: Duration::from_millis(300),
        history_chars: 4000,
        history_turns: 8,
        approval_ttl: 60,
        concurrency: 2,
        history_dir: PathBuf::from("/state/conversations"),
    }
}

fn device(n: u8) -> DeviceId {
    DeviceId(format!("tel-{}", n % 3))
}

fuzz_target!(|input: Input| {
    let mut agent = HttpAgent::new(settings(input.hermes), 7);
    let mut now = Time::ZERO;
    let (mut calls, mut loads, mut prompts) = (Vec::new(), Vec::new(), Vec::new());
    for op in input.ops.into_iter().take(400) {
        match op {
            Op::Text { device: d, text } => agent.handle_event(now, message(device(d), text)),
            Op::Command { device: d, which } => {
                let text = ["/new", "/stop", " /stop "][usize::from(which % 3)];
                agent.handle_event(now, message(device(d), text.into()));
            }
            Op::Head { call, status, stream, retry_after } => {
                let mut headers = Vec::new();
                if stream {
                    headers.push(("content-type".into(), "text/event-stream".into()));
                }
                if let Some(s) = retry_after {
                    headers.push(("retry-after".into(), s.to_string()));
                }
                let head = ResponseHead { status: status % 600, reason: String::new(), headers };
                if let Some(id) = pick(&calls, call) {
                    agent.handle_call(now, id, CallEvent::Head(head));
                }
            }
            Op::Body { call, bytes } => {
                if let Some(id) = pick(&calls, call) {
                    agent.handle_call(now, id, CallEvent::Body(bytes));
                }
            }
            Op::End { call } => {
                if let Some(id) = pick(&calls, call) {
                    agent.handle_call(now, id, CallEvent::End);
                }
            }
            Op::Failed { call, which } => {
                let error = match which % 4 {
                    0 => CallError::Connect("refused".into()),
                    1 => CallError::Timeout("idle"),
                    2 => CallError::Broken("reset".into()),
                    _ => CallError::Busy,
                };
                if let Some(id) = pick(&calls, call) {
                    agent.handle_call(now, id, CallEvent::Failed(error));
                }
            }
            Op::Loaded { load, ok } => {
                if let Some(tag) = pick(&loads, load) {
                    let result = ok.ok_or(LoadError::Unreadable("No such file".into()));
                    agent.handle_loaded(now, tag, result);
                }
            }
            Op::Answer { prompt, choice, expired } => {
                let Some((device, prompt)) = pick(&prompts, prompt) else { continue };
                let event = if expired {
                    AgentEvent::PromptExpired { device, prompt, kind: PromptKind::ExecApproval, option_id: None, asked: String::new() }
                } else {
                    let option_id = ["once", "session", "always", "deny"][usize::from(choice % 4)].into();
                    AgentEvent::PromptAnswered {
                        device,
                        prompt,
                        kind: PromptKind::ExecApproval,
                        option_id,
                        label: None,
                        text: None,
                        asked: String::new(),
                    }
                };
                agent.handle_event(now, event);
            }
            Op::Wait { ms } => {
                now = now + Duration::from_millis(u64::from(ms) * 40);
                agent.handle_timeout(now);
            }
        }
        while let Some(io) = agent.poll_io() {
            match io {
                AgentIo::Call { id, .. } => calls.push(id),
                AgentIo::Load { tag, .. } => loads.push(tag),
                _ => {}
            }
        }
        while let Some(command) = agent.poll_command() {
            if let AgentCommand::OpenPrompt { device, prompt, .. } = command {
                prompts.push((device, prompt));
            }
        }
        // handle_timeout(now) ran the due work: what is left is due later.
        agent.handle_timeout(now);
        while agent.poll_command().is_some() || agent.poll_io().is_some() {}
        assert!(agent.poll_timeout().is_none_or(|at| at > now), "a deadline in the past");
    }
});

fn message(device: DeviceId, text: String) -> AgentEvent {
    AgentEvent::MessageReceived {
        device,
        id: "m".into(),
        user: UserInfo::default(),
        text: Some(text),
        audio: None,
        file: None,
        redelivered: false,
    }
}

fn pick<T: Clone>(items: &[T], n: u8) -> Option<T> {
    (!items.is_empty()).then(|| items[usize::from(n) % items.len()].clone())
}
