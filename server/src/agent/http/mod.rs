//! The HTTP agents (issue 11): `openai:<base URL>`, any OpenAI-compatible chat-completions
//! server, and `hermes:<base URL>`, Hermes' runs API with its approvals as cards.
//!
//! Sans-IO like the demo: events and time go in, core commands come out, and what must
//! touch the world (a request, a cancel, a file to read, a conversation to save) comes out
//! of [`HttpAgent::poll_io`], in the port's words, for the server's HTTP client and file
//! worker. Their answers come back through [`HttpAgent::handle_call`] and
//! [`HttpAgent::handle_loaded`].
//!
//! A device has one turn at a time; messages sent meanwhile wait in its inbox (bounded)
//! and at most `concurrency` turns talk to the backend at once. A turn streams its reply
//! as coalesced edits (M2), keeps a cut stream's partial answer (marked), retries only
//! before anything was shown, and always ends with `end_turn`. Output for a phone that
//! went offline is held by the core (M4): the backend's stream is held to its end.
//! A message stays owed to the agent (L64) until its turn has ended or it is dropped, so
//! a restart in the meantime answers it again rather than losing it from an inbox.

mod calls;
mod conversation;
mod hermes;
mod input;
mod openai;
mod reply;
mod scheduler;
mod sentences;
#[cfg(test)]
mod transcripts;
mod turn;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use hermes_mobile::agent::PromptKind;
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::upstream::{Endpoint, RunId};
use hermes_mobile::wire::DownloadKind;
use hermes_mobile::{AgentCommand, AgentEvent, CommandError, DeviceId, MessageId, OutgoingFile, PromptId, Time};

use super::io::{AgentIo, CallId, LoadError};
use super::{PureAgent, Refused};
use hermes::Card;
use input::input_of;
use scheduler::Device;
use turn::Turn;

/// Messages a device may send while its turn runs; more are refused with a note.
const INBOX_LIMIT: usize = 8;
/// Bytes those messages may hold (photos for a vision model are the big ones).
const INBOX_BYTES: usize = 16 * 1024 * 1024;
/// Bytes waiting in all devices' inboxes together.
const INBOX_TOTAL_BYTES: usize = 64 * 1024 * 1024;
/// Attempts of one request (the first and two retries).
const MAX_ATTEMPTS: u32 = 3;
/// The longest wait before a retry, whatever `Retry-After` says.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// Bytes of an error answer's body kept, for its message.
const ERROR_BODY_LIMIT: usize = 8 * 1024;
/// The largest file sent for a `MEDIA:` tag (the gateway's file limit).
const MEDIA_LIMIT: usize = 8 * 1024 * 1024;
/// The largest conversation file read back.
const CONVERSATION_LIMIT: usize = 4 * 1024 * 1024;
/// The largest SSE event accepted (one `data:` payload), and a non-streamed completion.
const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// A reply longer than this is cut (a model looping): every edit re-sends the whole text.
const MAX_REPLY_BYTES: usize = 256 * 1024;
/// Files sent for the `MEDIA:` tags of one reply; more are named in a note.
const MAX_MEDIA_PER_REPLY: usize = 10;
/// A turn longer than this is stopped: a backend that sends only keepalives would
/// otherwise hold its slot for ever.
const MAX_TURN: Duration = Duration::from_secs(30 * 60);
/// Devices whose conversation stays in memory while idle; past it the one idle longest
/// is let go (its file stays, and is read again when it is back).
const MAX_RESIDENT: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    OpenAi,
    Hermes,
}

/// The owner's settings (server/src/config/http.rs reads them).
#[derive(Clone)]
pub struct HttpSettings {
    pub backend: Backend,
    pub endpoint: Endpoint,
    pub model: String,
    pub key: Option<String>,
    pub system: Option<String>,
    pub temperature: Option<f64>,
    /// Extra headers; `{device}` and `{conversation}` in a value are filled in per device.
    pub headers: Vec<(String, String)>,
    pub vision: bool,
    pub media_dirs: Vec<String>,
    pub edit_interval: Duration,
    pub history_chars: usize,
    pub history_turns: usize,
    /// Seconds an approval card lives: Hermes' `approvals.timeout`.
    pub approval_ttl: u64,
    pub concurrency: usize,
    /// Where conversations are kept (`<state dir>/conversations`).
    pub history_dir: PathBuf,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("backend", &self.backend)
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// What the backend's last attempt showed, for `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    Unknown,
    Reachable,
    Unreachable(String),
}

/// What a call is for.
#[derive(Debug, Clone)]
enum CallRole {
    /// The turn's main request: the chat stream, or the run's start.
    Main(DeviceId),
    /// The run's event stream.
    Events(DeviceId),
    Approval {
        device: DeviceId,
        choice: String,
    },
    /// `user`: the phone sent /stop (a failure is reported to it); otherwise the gateway
    /// stops a run it no longer reads.
    Stop {
        device: DeviceId,
        run: RunId,
        user: bool,
    },
}

/// The answer to a call, as it comes.
#[derive(Debug, Default)]
struct Answer {
    status: Option<u16>,
    retry_after: Option<String>,
    /// A 200 with `text/event-stream`: its body goes to the SSE decoder.
    stream: bool,
    /// Kept for error answers, the run's start and a non-streamed completion.
    body: Vec<u8>,
}

/// A file being read for the agent.
#[derive(Debug)]
enum Load {
    /// A `MEDIA:` file for the phone.
    Media { device: DeviceId, path: String },
    /// A device's conversation, read back.
    Conversation(DeviceId),
}

pub struct HttpAgent {
    settings: HttpSettings,
    devices: HashMap<DeviceId, Device>,
    calls: HashMap<CallId, (CallRole, Answer)>,
    cards: HashMap<PromptId, Card>,
    next_call: u64,
    next_id: u64,
    run_tag: String,
    running: usize,
    waiting: VecDeque<DeviceId>,
    /// Devices whose turn just ended or whose file came in: their inbox is looked at next.
    pending: VecDeque<DeviceId>,
    loads: HashMap<u64, Load>,
    next_load: u64,
    out: VecDeque<AgentCommand>,
    io: VecDeque<AgentIo>,
    /// Owed events it is done with, for `poll_handed`.
    handed: VecDeque<EventKey>,
    reach: Reach,
}

impl HttpAgent {
    pub fn new(settings: HttpSettings, run: u64) -> HttpAgent {
        HttpAgent {
            settings,
            devices: HashMap::new(),
            calls: HashMap::new(),
            cards: HashMap::new(),
            next_call: 0,
            next_id: 0,
            run_tag: format!("{:04x}", run & 0xffff),
            running: 0,
            waiting: VecDeque::new(),
            pending: VecDeque::new(),
            loads: HashMap::new(),
            next_load: 0,
            out: VecDeque::new(),
            io: VecDeque::new(),
            handed: VecDeque::new(),
            reach: Reach::Unknown,
        }
    }

    pub fn poll_io(&mut self) -> Option<AgentIo> {
        self.io.pop_front()
    }

    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    /// A file the agent asked for was read (or not).
    pub fn handle_loaded(&mut self, now: Time, tag: u64, result: Result<Vec<u8>, LoadError>) {
        match self.loads.remove(&tag) {
            Some(Load::Media { device, path }) => self.media_loaded(device, path, result),
            Some(Load::Conversation(device)) => self.conversation_loaded(device, result),
            None => {}
        }
        self.start_waiting(now);
    }

    fn media_loaded(&mut self, device: DeviceId, path: String, result: Result<Vec<u8>, LoadError>) {
        match result {
            Ok(data) => {
                let filename = path.rsplit('/').next().unwrap_or("file").to_owned();
                let mime = hermes_mobile::mime::guess_mime(&filename);
                let kind = match mime.split('/').next() {
                    Some("image") => DownloadKind::Image,
                    Some("audio") => DownloadKind::Voice,
                    Some("video") => DownloadKind::Video,
                    _ => DownloadKind::Document,
                };
                let file = OutgoingFile {
                    kind,
                    mime: mime.to_owned(),
                    filename,
                    caption: None,
                    data,
                    reply_to: None,
                };
                self.out.push_back(AgentCommand::SendFile {
                    device: device.clone(),
                    file,
                });
            }
            Err(e) => {
                let why = match e {
                    LoadError::TooBig => "it is over 8 MiB".to_owned(),
                    LoadError::Unreadable(why) => why,
                };
                log::warn!("agent: a MEDIA: file was not sent: {}", why.escape_debug());
                self.say(&device, sentences::file_not_sent(&why));
            }
        }
        self.part_done(&device);
    }

    fn conversation_loaded(&mut self, device: DeviceId, result: Result<Vec<u8>, LoadError>) {
        let (chars, turns) = (self.settings.history_chars, self.settings.history_turns);
        let path = conversation::path_of(&self.settings.history_dir, &device);
        // A file that cannot be read now is never overwritten: this run keeps the
        // conversation in memory only (a passing error, the next start tries again); one
        // that is not a conversation is kept aside as `.bad` and replaced.
        let mut keep_file = false;
        let restored = match result {
            Ok(data) => {
                let back = conversation::from_json(&data, &device, chars, turns);
                if back.is_none() {
                    log::warn!(
                        "agent: {device:?}: {} is not a readable conversation; kept as .bad, starting afresh",
                        path.display()
                    );
                    self.io.push_back(AgentIo::Persist {
                        path: path.with_extension("json.bad"),
                        contents: data,
                    });
                }
                back
            }
            Err(LoadError::Unreadable(why)) if why.contains("No such file") => None,
            Err(e) => {
                log::warn!(
                    "agent: {device:?}: {} was not read ({e:?}); this conversation is not saved until a restart",
                    path.display()
                );
                keep_file = true;
                None
            }
        };
        let Some(d) = self.devices.get_mut(&device) else { return };
        if let Some((conversation, history)) = restored {
            d.conversation = conversation;
            d.history = history;
        }
        d.loading = false;
        d.unsaved = keep_file;
        if std::mem::take(&mut d.new_pending) {
            self.reset_conversation(&device);
        }
        self.pending.push_back(device);
    }

    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{}-{}", self.run_tag, self.next_id)
    }

    fn new_call(&mut self, role: CallRole, request: Vec<u8>) -> CallId {
        self.next_call += 1;
        let id = CallId(self.next_call);
        self.calls.insert(id, (role, Answer::default()));
        self.io.push_back(AgentIo::Call { id, request });
        id
    }

    fn load(&mut self, what: Load, path: PathBuf, limit: usize) {
        self.next_load += 1;
        let tag = self.next_load;
        self.loads.insert(tag, what);
        self.io.push_back(AgentIo::Load { tag, path, limit });
    }

    fn reply(&mut self, device: &DeviceId, message: MessageId, text: String, done: bool) {
        self.out.push_back(AgentCommand::Reply {
            device: device.clone(),
            message,
            text,
            done,
        });
    }

    /// One whole message (not part of a turn's reply).
    fn say(&mut self, device: &DeviceId, text: String) {
        let message = MessageId(self.id("note"));
        self.reply(device, message, text, true);
    }

    /// A message that answers the phone outside any turn: it ends the phone's turn unless
    /// one is running (or waiting), whose own end will come.
    fn note(&mut self, device: &DeviceId, text: String) {
        self.say(device, text);
        if !self.devices.get(device).is_some_and(Device::busy) {
            self.out.push_back(AgentCommand::EndTurn { device: device.clone() });
        }
    }

    fn persist(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get(device).filter(|d| !d.unsaved) else {
            return;
        };
        let contents = conversation::to_json(device, d.conversation, &d.history);
        self.io.push_back(AgentIo::Persist {
            path: conversation::path_of(&self.settings.history_dir, device),
            contents,
        });
    }

    /// The extra headers with this device's values filled in.
    fn headers_for(&self, device: &DeviceId) -> Vec<(String, String)> {
        let conversation = self.devices.get(device).map_or(1, |d| d.conversation);
        self.headers_with(device, conversation)
    }

    fn headers_with(&self, device: &DeviceId, conversation: u64) -> Vec<(String, String)> {
        self.settings
            .headers
            .iter()
            .map(|(n, v)| {
                let v = v
                    .replace("{device}", &header_value(device.as_str()))
                    .replace("{conversation}", &conversation.to_string());
                (n.clone(), v)
            })
            .collect()
    }

    fn turn_mut(&mut self, device: &DeviceId) -> Option<&mut Turn> {
        self.devices.get_mut(device).and_then(|d| d.turn.as_mut())
    }
}

impl PureAgent for HttpAgent {
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
                let command = text
                    .as_deref()
                    .map(str::trim)
                    .filter(|_| audio.is_none() && file.is_none());
                match command {
                    Some("/new") => {
                        self.device(now, &device);
                        self.new_conversation(&device);
                    }
                    Some("/stop") => self.stop(&device),
                    _ => match input_of(text, audio.is_some(), file, self.settings.vision) {
                        Ok(input) => self.on_message(now, device, input, owed.take()),
                        Err(note) => self.note(&device, note),
                    },
                }
            }
            AgentEvent::PromptAnswered {
                prompt,
                kind: PromptKind::ExecApproval,
                option_id,
                ..
            } => self.answer_card(&prompt, &option_id, false),
            AgentEvent::PromptExpired { prompt, .. } => self.answer_card(&prompt, "deny", true),
            AgentEvent::PromptAnswered { .. }
            | AgentEvent::UserTyping { .. }
            | AgentEvent::DeviceOnline { .. }
            | AgentEvent::DeviceOffline { .. } => {}
        }
        // All but a message for a turn is done with here: a gateway command, a note
        // instead of a turn, a card's answer (posted at once; nothing of it waits).
        self.handed.extend(owed);
        self.start_waiting(now);
    }

    fn handle_timeout(&mut self, now: Time) {
        let mut edits = Vec::new();
        let mut retries = Vec::new();
        let mut too_long = Vec::new();
        for (device, d) in &mut self.devices {
            let Some(turn) = d.turn.as_mut() else { continue };
            if turn.finishing() {
                continue;
            }
            if now >= turn.started + MAX_TURN {
                too_long.push(device.clone());
                continue;
            }
            if let Some(text) = turn.coalescer.poll(now) {
                turn.shown = true;
                edits.push((device.clone(), turn.message.clone(), text.to_owned()));
            }
            if turn.retry_at().is_some_and(|at| at <= now) {
                retries.push(device.clone());
            }
        }
        for (device, message, text) in edits {
            self.reply(&device, message, text, false);
        }
        for device in retries {
            self.send_main(&device);
        }
        for device in too_long {
            self.cut(&device, &sentences::turn_too_long(MAX_TURN.as_secs() / 60));
        }
        self.start_waiting(now);
    }

    fn poll_command(&mut self) -> Option<AgentCommand> {
        self.out.pop_front()
    }

    fn poll_handed(&mut self) -> Option<EventKey> {
        self.handed.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.devices
            .values()
            .filter_map(|d| d.turn.as_ref())
            .filter(|t| !t.finishing())
            .flat_map(|t| [t.coalescer.due_at(), t.retry_at(), Some(t.started + MAX_TURN)])
            .flatten()
            .min()
    }

    fn handle_refused(&mut self, _now: Time, what: Refused, error: &CommandError) {
        match what {
            Refused::Prompt { device, prompt } => {
                // The card never reached the phone: Hermes must not wait for it.
                log::warn!("agent: {device:?}: the approval card was refused ({error}); answering deny");
                self.answer_card(&prompt, "deny", false);
            }
            Refused::Reply { device, message } => {
                log::warn!("agent: {device:?}: reply {message:?} was refused ({error})");
            }
            _ => {}
        }
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A device id as it may go into a header value: other characters become `_`.
fn header_value(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}
