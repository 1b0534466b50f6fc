//! The embedded demo agent, exactly as ../shared/spec/demo-agent.md says. Deterministic, so
//! tests can rely on its replies; its streaming runs on the event loop's timers.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use hermes_mobile::agent::PromptKind;
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::wire::{DownloadKind, UploadKind};
use hermes_mobile::{
    AgentCommand, AgentEvent, CommandError, DeviceId, MessageId, OutgoingFile, PromptId, PromptRequest, Time,
};

use super::{PureAgent, Refused};

const HELP: &str = "Demo agent commands:
any text — echo: <text>
/help — this list
/stream <text> — streams <text> word by word
/long <n> — one message of n characters (1..100000)
/approve <command> — an exec_approval card
/confirm <what> — a slash_confirm card
/ask <question> | <choice 1> | <choice 2> … — a clarify card
/image — a small PNG
/file <n> — a document of n bytes (1..8388608)
/ttl <seconds> <command> — /approve with its own card lifetime
Voice and files are answered too.";

/// A 48×48 PNG (an "H" on a blue tile): small, and visible when a client shows it.
pub const DEMO_PNG: &[u8] = include_bytes!("demo.png");

#[derive(Debug)]
struct Stream {
    device: DeviceId,
    message: MessageId,
    text: String,
    /// Byte offsets where each version ends.
    ends: Vec<usize>,
    next: usize,
    due: Time,
    /// The message it answers: the demo is done with it after the last version (L64).
    owed: Option<EventKey>,
}

#[derive(Debug)]
pub struct DemoAgent {
    step: Duration,
    run: String,
    counter: u64,
    /// Cards it opened and not yet heard back about: only to say why one was refused.
    /// The answer itself needs nothing from here (the card carries it: issue 24).
    cards: HashSet<PromptId>,
    streams: Vec<Stream>,
    out: VecDeque<AgentCommand>,
    /// Owed events it is done with, for `poll_handed`.
    handed: VecDeque<EventKey>,
}

impl DemoAgent {
    /// `run` tells this start's ids from the last one's: a client that kept a finished
    /// `demo-m1` must not see a new reply arrive under the same id after a restart.
    pub fn new(step: Duration, run: u64) -> DemoAgent {
        DemoAgent {
            step,
            run: format!("{:04x}", run & 0xffff),
            counter: 0,
            cards: HashSet::new(),
            streams: Vec::new(),
            out: VecDeque::new(),
            handed: VecDeque::new(),
        }
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("demo-{}-{prefix}{}", self.run, self.counter)
    }

    /// One whole message, then the end of the turn.
    fn say(&mut self, device: &DeviceId, text: String) {
        let message = MessageId(self.next_id("m"));
        self.out.push_back(AgentCommand::Reply {
            device: device.clone(),
            message,
            text,
            done: true,
        });
        self.end_turn(device);
    }

    fn end_turn(&mut self, device: &DeviceId) {
        self.out.push_back(AgentCommand::EndTurn { device: device.clone() });
    }

    fn card(&mut self, device: &DeviceId, request: PromptRequest, ttl_secs: Option<u64>) {
        let prompt = PromptId(self.next_id("p"));
        self.cards.insert(prompt.clone());
        self.out.push_back(AgentCommand::OpenPrompt {
            device: device.clone(),
            prompt,
            request,
            ttl_secs,
        });
        self.end_turn(device);
    }

    fn approve(&mut self, device: &DeviceId, command: &str, ttl_secs: Option<u64>) {
        if command.is_empty() {
            return self.say(device, "error: /approve needs a command".into());
        }
        let request = PromptRequest::ExecApproval {
            command: command.to_owned(),
            description: "demo approval".into(),
            options: vec!["once".into(), "session".into(), "always".into(), "deny".into()],
        };
        self.card(device, request, ttl_secs);
    }

    /// `owed` is taken by a stream, the one answer that outlives the step.
    fn on_text(&mut self, now: Time, device: &DeviceId, text: &str, owed: &mut Option<EventKey>) {
        let Some(command_line) = text.strip_prefix('/') else {
            return self.say(device, format!("echo: {text}"));
        };
        let (command, rest) = match command_line.split_once(char::is_whitespace) {
            Some((c, r)) => (c, r.trim()),
            None => (command_line, ""),
        };
        match command {
            "help" => self.say(device, HELP.into()),
            "stream" if !rest.is_empty() => self.stream(now, device, rest, owed.take()),
            "stream" => self.say(device, "error: /stream needs some text".into()),
            "long" => match rest.parse::<usize>() {
                Ok(n) if (1..=100_000).contains(&n) => {
                    self.say(device, "0123456789\n".repeat(n / 11 + 1)[..n].to_owned())
                }
                _ => self.say(
                    device,
                    format!("error: /long needs a number from 1 to 100000, got {rest:?}"),
                ),
            },
            "approve" => self.approve(device, rest, None),
            "ttl" => {
                let (secs, command) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                match secs.parse::<u64>() {
                    Ok(s) if s >= 1 && !command.trim().is_empty() => self.approve(device, command.trim(), Some(s)),
                    _ => self.say(device, "error: /ttl needs <seconds> (at least 1) and a command".into()),
                }
            }
            "confirm" if !rest.is_empty() => {
                let request = PromptRequest::SlashConfirm {
                    text: rest.to_owned(),
                    options: vec!["once".into(), "always".into(), "cancel".into()],
                };
                self.card(device, request, None);
            }
            "confirm" => self.say(device, "error: /confirm needs something to confirm".into()),
            "ask" => {
                let mut parts = rest.split('|').map(str::trim);
                let question = parts.next().unwrap_or("").to_owned();
                let choices: Vec<String> = parts.filter(|c| !c.is_empty()).map(str::to_owned).collect();
                if question.is_empty() || choices.is_empty() {
                    return self.say(
                        device,
                        "error: /ask needs <question> | <choice 1> | <choice 2> …".into(),
                    );
                }
                let request = PromptRequest::Clarify { question, choices };
                self.card(device, request, None);
            }
            "image" => {
                let file = OutgoingFile {
                    kind: DownloadKind::Image,
                    mime: "image/png".into(),
                    filename: "demo.png".into(),
                    caption: None,
                    data: DEMO_PNG.to_vec(),
                    reply_to: None,
                };
                self.out.push_back(AgentCommand::SendFile {
                    device: device.clone(),
                    file,
                });
                self.end_turn(device);
            }
            "file" => match rest.parse::<usize>() {
                Ok(n) if (1..=8_388_608).contains(&n) => {
                    let file = OutgoingFile {
                        kind: DownloadKind::Document,
                        mime: "application/octet-stream".into(),
                        filename: format!("demo-{n}.bin"),
                        caption: None,
                        data: (0..n).map(|i| (i % 251) as u8).collect(),
                        reply_to: None,
                    };
                    self.out.push_back(AgentCommand::SendFile {
                        device: device.clone(),
                        file,
                    });
                    self.end_turn(device);
                }
                _ => self.say(
                    device,
                    format!("error: /file needs a size from 1 to 8388608 bytes, got {rest:?}"),
                ),
            },
            other => self.say(device, format!("error: unknown command /{other} (try /help)")),
        }
    }

    fn stream(&mut self, now: Time, device: &DeviceId, text: &str, owed: Option<EventKey>) {
        // Version k ends after the k-th word; the last version is the whole text.
        let mut ends = Vec::new();
        let mut in_word = false;
        for (i, c) in text.char_indices() {
            if c.is_whitespace() && in_word {
                ends.push(i);
            }
            in_word = !c.is_whitespace();
        }
        ends.push(text.len());
        let stream = Stream {
            device: device.clone(),
            message: MessageId(self.next_id("s")),
            text: text.to_owned(),
            ends,
            next: 0,
            due: now,
            owed,
        };
        self.streams.push(stream);
        self.handle_timeout(now);
    }
}

impl PureAgent for DemoAgent {
    fn handle_event(&mut self, now: Time, event: AgentEvent) {
        let mut owed = EventKey::of(&event);
        match event {
            AgentEvent::MessageReceived {
                device,
                text,
                audio,
                file,
                ..
            } => {
                if let Some(audio) = audio {
                    let mut reply = format!("heard {} bytes of {}", audio.data.len(), audio.format.as_str());
                    if let Some(t) = text {
                        reply.push_str(&format!(": {t}"));
                    }
                    self.say(&device, reply);
                } else if let Some(file) = file {
                    let reply = format!(
                        "got {} {} ({} bytes, {})",
                        file.kind.as_str(),
                        file.filename,
                        file.data.len(),
                        file.mime
                    );
                    let message = MessageId(self.next_id("m"));
                    self.out.push_back(AgentCommand::Reply {
                        device: device.clone(),
                        message,
                        text: reply,
                        done: true,
                    });
                    let kind = match file.kind {
                        UploadKind::Image => DownloadKind::Image,
                        UploadKind::Document => DownloadKind::Document,
                        UploadKind::Audio => DownloadKind::Voice,
                        UploadKind::Video => DownloadKind::Video,
                    };
                    let back = OutgoingFile {
                        kind,
                        mime: file.mime,
                        filename: file.filename,
                        caption: None,
                        data: file.data,
                        reply_to: Some(file.id),
                    };
                    self.out.push_back(AgentCommand::SendFile {
                        device: device.clone(),
                        file: back,
                    });
                    self.end_turn(&device);
                } else if let Some(text) = text {
                    self.on_text(now, &device, &text, &mut owed);
                }
            }
            AgentEvent::PromptAnswered {
                device,
                prompt,
                kind,
                option_id,
                label,
                text,
                asked,
            } => {
                // The card carries all the answer needs (issue 24): a card opened before a
                // restart is answered as it would have been before.
                self.cards.remove(&prompt);
                let reply = match kind {
                    PromptKind::ExecApproval if option_id == "deny" => format!("denied: {asked}"),
                    PromptKind::ExecApproval => format!("approved ({option_id}): {asked}"),
                    PromptKind::SlashConfirm if option_id == "cancel" => format!("cancelled: {asked}"),
                    PromptKind::SlashConfirm => format!("confirmed ({option_id}): {asked}"),
                    PromptKind::Clarify => match (label, text) {
                        (Some(choice), _) => format!("you chose: {choice}"),
                        (None, Some(t)) => format!("you said: {t}"),
                        (None, None) => format!("you chose: {option_id}"),
                    },
                };
                self.say(&device, reply);
            }
            AgentEvent::PromptExpired {
                device, prompt, asked, ..
            } => {
                self.cards.remove(&prompt);
                self.say(&device, format!("expired: {asked}"));
            }
            AgentEvent::UserTyping { .. } | AgentEvent::DeviceOnline { .. } | AgentEvent::DeviceOffline { .. } => {}
        }
        // Answered within this step, unless a stream took it.
        self.handed.extend(owed);
    }

    fn handle_timeout(&mut self, now: Time) {
        let step = self.step;
        let mut finished = Vec::new();
        for (i, s) in self.streams.iter_mut().enumerate() {
            while s.due <= now && s.next < s.ends.len() {
                let done = s.next + 1 == s.ends.len();
                let text = s.text[..s.ends[s.next]].to_owned();
                self.out.push_back(AgentCommand::Reply {
                    device: s.device.clone(),
                    message: s.message.clone(),
                    text,
                    done,
                });
                s.next += 1;
                s.due = s.due + step;
                if done {
                    finished.push(i);
                }
            }
        }
        for i in finished.into_iter().rev() {
            let s = self.streams.remove(i);
            self.handed.extend(s.owed);
            self.out.push_back(AgentCommand::EndTurn { device: s.device });
        }
    }

    fn poll_command(&mut self) -> Option<AgentCommand> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.streams.iter().map(|s| s.due).min()
    }

    fn poll_handed(&mut self) -> Option<EventKey> {
        self.handed.pop_front()
    }

    /// A stream the gateway refused stops stepping (issue 8 #3); a card it refused is
    /// forgotten; either way the user hears why.
    fn handle_refused(&mut self, _now: Time, what: Refused, error: &CommandError) {
        let device = match what {
            Refused::Reply { device, message } => {
                let Some(at) = self.streams.iter().position(|s| s.message == message) else {
                    return;
                };
                // Dropped for good: the note below is the message's answer.
                self.handed.extend(self.streams.remove(at).owed);
                device
            }
            Refused::Prompt { device, prompt } => {
                if !self.cards.remove(&prompt) {
                    return;
                }
                device
            }
            Refused::Other { .. } | Refused::Delivery { .. } => return,
        };
        self.say(&device, format!("error: the gateway refused it: {error}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_mobile::UserInfo;

    fn text(agent: &mut DemoAgent, now: Time, t: &str) -> Vec<AgentCommand> {
        agent.handle_event(
            now,
            AgentEvent::MessageReceived {
                device: DeviceId::from("tel-1"),
                id: "1".into(),
                user: UserInfo::default(),
                text: Some(t.into()),
                audio: None,
                file: None,
                redelivered: false,
            },
        );
        std::iter::from_fn(|| agent.poll_command()).collect()
    }

    fn reply_text(cmds: &[AgentCommand]) -> Vec<(String, bool)> {
        cmds.iter()
            .filter_map(|c| match c {
                AgentCommand::Reply { text, done, .. } => Some((text.clone(), *done)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_stream_the_gateway_refused_stops_and_the_user_hears_why() {
        // issue 8 #3: refused streams must not keep stepping, copying their text.
        let mut agent = DemoAgent::new(Duration::from_millis(100), 0);
        let cmds = text(&mut agent, Time::ZERO, "/stream a b c d");
        let Some(AgentCommand::Reply { device, message, .. }) = cmds.first().cloned() else {
            panic!("{cmds:?}")
        };
        agent.handle_refused(
            Time::ZERO,
            Refused::Reply { device, message },
            &CommandError::TooManyStreams,
        );
        assert_eq!(agent.poll_timeout(), None, "nothing left to step");
        let said = reply_text(&std::iter::from_fn(|| agent.poll_command()).collect::<Vec<_>>());
        assert_eq!(said.len(), 1);
        assert!(
            said[0].0.starts_with("error: the gateway refused it: too many replies"),
            "{said:?}"
        );
    }

    #[test]
    fn a_card_the_gateway_refused_is_forgotten() {
        let mut agent = DemoAgent::new(Duration::from_millis(100), 0);
        let cmds = text(&mut agent, Time::ZERO, "/confirm x");
        let Some(AgentCommand::OpenPrompt { device, prompt, .. }) = cmds.first().cloned() else {
            panic!("{cmds:?}")
        };
        agent.handle_refused(
            Time::ZERO,
            Refused::Prompt { device, prompt },
            &CommandError::TooManyPrompts,
        );
        assert!(agent.cards.is_empty());
    }

    #[test]
    fn echo_and_errors() {
        let mut a = DemoAgent::new(Duration::from_millis(100), 0);
        assert_eq!(
            reply_text(&text(&mut a, Time::ZERO, "hi there")),
            [("echo: hi there".to_owned(), true)]
        );
        for bad in ["/long abc", "/long 0", "/file 99999999", "/nope"] {
            let r = reply_text(&text(&mut a, Time::ZERO, bad));
            assert!(r[0].0.starts_with("error:"), "{bad}: {r:?}");
        }
    }

    #[test]
    fn long_is_exactly_n_characters_of_digit_lines() {
        let mut a = DemoAgent::new(Duration::from_millis(100), 0);
        let r = reply_text(&text(&mut a, Time::ZERO, "/long 25"));
        assert_eq!(r[0].0, "0123456789\n0123456789\n012");
        let r = reply_text(&text(&mut a, Time::ZERO, "/long 100000"));
        assert_eq!(r[0].0.len(), 100_000);
    }

    fn handed(agent: &mut DemoAgent) -> Vec<String> {
        std::iter::from_fn(|| agent.poll_handed()).map(|k| k.key).collect()
    }

    #[test]
    fn a_message_is_handed_when_its_answer_is_done() {
        // L64 (review B #1): until then the journal keeps it for a restart.
        let mut a = DemoAgent::new(Duration::from_millis(100), 0);
        text(&mut a, Time::ZERO, "hi");
        assert_eq!(handed(&mut a), ["m:1"], "answered within the step");
        text(&mut a, Time::ZERO, "/stream one two");
        assert!(handed(&mut a).is_empty(), "its last version is still to come");
        a.handle_timeout(Time::from_millis(100));
        assert_eq!(handed(&mut a), ["m:1"]);
    }

    #[test]
    fn a_stream_the_gateway_refused_is_done_with() {
        let mut a = DemoAgent::new(Duration::from_millis(100), 0);
        let cmds = text(&mut a, Time::ZERO, "/stream a b c");
        let Some(AgentCommand::Reply { device, message, .. }) = cmds.first().cloned() else {
            panic!("{cmds:?}")
        };
        a.handle_refused(
            Time::ZERO,
            Refused::Reply { device, message },
            &CommandError::TooManyStreams,
        );
        assert_eq!(handed(&mut a), ["m:1"], "dropped for good, with a note");
    }

    #[test]
    fn stream_adds_a_word_per_step() {
        let mut a = DemoAgent::new(Duration::from_millis(100), 0);
        let first = reply_text(&text(&mut a, Time::ZERO, "/stream one two  three"));
        assert_eq!(first, [("one".to_owned(), false)]);
        assert_eq!(a.poll_timeout(), Some(Time::from_millis(100)));
        a.handle_timeout(Time::from_millis(250));
        let rest: Vec<AgentCommand> = std::iter::from_fn(|| a.poll_command()).collect();
        assert_eq!(
            reply_text(&rest),
            [("one two".to_owned(), false), ("one two  three".to_owned(), true)]
        );
        assert!(matches!(rest.last(), Some(AgentCommand::EndTurn { .. })));
        assert_eq!(a.poll_timeout(), None);
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn the_png_is_valid() {
        assert_eq!(&DEMO_PNG[..8], b"\x89PNG\r\n\x1a\n");
        let mut at = 8;
        let mut names = Vec::new();
        while at < DEMO_PNG.len() {
            let len = u32::from_be_bytes(DEMO_PNG[at..at + 4].try_into().unwrap()) as usize;
            let body = &DEMO_PNG[at + 4..at + 8 + len];
            let crc = u32::from_be_bytes(DEMO_PNG[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc32(body), crc, "chunk CRC");
            names.push(String::from_utf8_lossy(&body[..4]).into_owned());
            at += 12 + len;
        }
        assert_eq!(names, ["IHDR", "IDAT", "IEND"]);
    }
}
