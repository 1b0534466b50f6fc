//! The HTTP agents (issue 11): `openai:<base URL>`, any OpenAI-compatible chat-completions
//! server, and `hermes:<base URL>`, Hermes' runs API with its approvals as cards.
//!
//! Sans-IO like the demo: events and time go in, core commands come out, and what must
//! touch the world (a request, a cancel, a file to read, a conversation to save) comes out
//! of [`HttpAgent::poll_io`], in the port's words, for the server's HTTP client and file
//! worker. Their answers
//! come back through [`HttpAgent::handle_call`] and [`HttpAgent::handle_loaded`].
//!
//! A device has one turn at a time; messages sent meanwhile wait in its inbox (bounded)
//! and at most `concurrency` turns talk to the backend at once. A turn streams its reply
//! as coalesced edits (M2), keeps a cut stream's partial answer (marked), retries only
//! before anything was shown, and always ends with `end_turn`. Output for a phone that
//! went offline is held by the core (M4): the backend's stream is held to its end.

mod conversation;
mod input;
#[cfg(test)]
mod transcripts;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use hermes_mobile::agent::PromptKind;
use hermes_mobile::upstream::openai::take_data_images;
use hermes_mobile::upstream::{
    hermes_runs, media_path_allowed, parse_run_event, parse_run_started, parse_stream_data, status_outcome,
    take_media_tags, ChatRequest, Coalescer, Endpoint, History, ResponseHead, Retry, RunEvent, RunId, SseDecoder,
    SseItem, StreamItem,
};
use hermes_mobile::wire::DownloadKind;
use hermes_mobile::{
    AgentCommand, AgentEvent, CommandError, DeviceId, MessageId, OutgoingFile, PromptId, PromptRequest, Time,
};
use serde_json::{json, Value};

use super::io::{AgentIo, CallError, CallEvent, CallId, LoadError};
use super::{PureAgent, Refused};
use input::{input_of, Input};

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

/// The owner's settings (server/src/config.rs reads them).
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
enum Role {
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

/// An approval card: what its answer is for. Kept until the card is answered or expires,
/// also when its turn has ended (the phone may still tap it).
#[derive(Debug)]
struct Card {
    device: DeviceId,
    run: RunId,
    /// For `{conversation}` in the headers, should the device be let go meanwhile.
    conversation: u64,
}

#[derive(Debug)]
struct Turn {
    input: Input,
    message: MessageId,
    started: Time,
    coalescer: Coalescer,
    call: Option<CallId>,
    sse: SseDecoder,
    attempt: u32,
    retry_at: Option<Time>,
    /// A version of the reply was handed to the core.
    shown: bool,
    /// The stream said it was complete (`[DONE]`, a finish reason, `run.completed`).
    complete: bool,
    /// The run's whole output from `run.completed`, or a non-streamed completion.
    output: Option<String>,
    run: Option<RunId>,
    /// `/stop` was asked for.
    stopping: bool,
    /// The model stopped at its length limit (`finish_reason: length`).
    length_cut: bool,
    /// The reply is final; this many files are still being read.
    finishing: usize,
}

#[derive(Debug)]
struct Device {
    history: History,
    /// Counts `/new`s: a header with `{conversation}` names a fresh session after one.
    conversation: u64,
    /// Its file is being read: turns wait for it.
    loading: bool,
    /// `/new` came while the file was read.
    new_pending: bool,
    /// Its file could not be read: it is not overwritten (see `conversation_loaded`).
    unsaved: bool,
    inbox: VecDeque<Input>,
    turn: Option<Turn>,
    /// Waiting for a backend slot (in `HttpAgent::waiting`).
    queued: bool,
    last_active: Time,
}

impl Device {
    fn idle(&self) -> bool {
        self.turn.is_none() && self.inbox.is_empty() && !self.queued && !self.loading
    }

    fn inbox_bytes(&self) -> usize {
        self.inbox.iter().map(Input::size).sum()
    }
}

pub struct HttpAgent {
    settings: HttpSettings,
    devices: HashMap<DeviceId, Device>,
    calls: HashMap<CallId, (Role, Answer)>,
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
                self.say(&device, format!("(A file could not be sent: {why}.)"));
            }
        }
        self.file_done(&device);
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

    fn new_call(&mut self, role: Role, request: Vec<u8>) -> CallId {
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

    /// The device's state; a device not in memory is created and its saved conversation
    /// read (its turns wait for that).
    fn device(&mut self, now: Time, device: &DeviceId) -> &mut Device {
        if !self.devices.contains_key(device) {
            self.let_go_idle();
            let (chars, turns) = (self.settings.history_chars, self.settings.history_turns);
            self.devices.insert(
                device.clone(),
                Device {
                    history: History::new(chars, turns),
                    conversation: 1,
                    loading: true,
                    new_pending: false,
                    unsaved: false,
                    inbox: VecDeque::new(),
                    turn: None,
                    queued: false,
                    last_active: now,
                },
            );
            let path = conversation::path_of(&self.settings.history_dir, device);
            self.load(Load::Conversation(device.clone()), path, CONVERSATION_LIMIT);
        }
        let d = self.devices.get_mut(device).expect("inserted above");
        d.last_active = now;
        d
    }

    /// Keeps at most `MAX_RESIDENT` devices in memory: the idle one quiet the longest goes.
    fn let_go_idle(&mut self) {
        while self.devices.len() >= MAX_RESIDENT {
            let oldest = self
                .devices
                .iter()
                .filter(|(_, d)| d.idle())
                .min_by_key(|(_, d)| d.last_active)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => {
                    self.devices.remove(&id);
                }
                None => return, // all busy: bounded by the core's devices and inboxes
            }
        }
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
        let busy = self
            .devices
            .get(device)
            .is_some_and(|d| d.turn.is_some() || d.queued || !d.inbox.is_empty());
        if !busy {
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

    /// Hermes loads the history itself when its session header is set: then only the new
    /// turn is sent (docs/http-agents.md).
    fn server_keeps_history(&self) -> bool {
        self.settings
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("X-Hermes-Session-Id"))
    }

    fn on_message(&mut self, now: Time, device: DeviceId, input: Input) {
        let d = self.device(now, &device);
        let busy = d.turn.is_some() || d.queued || d.loading || !d.inbox.is_empty();
        let full = d.inbox.len() >= INBOX_LIMIT || d.inbox_bytes() + input.size() > INBOX_BYTES;
        let all: usize = self.devices.values().map(Device::inbox_bytes).sum();
        let d = self.devices.get_mut(&device).expect("made by device() above");
        let full = full || all + input.size() > INBOX_TOTAL_BYTES;
        if busy && full {
            self.say(
                &device,
                "Still busy with your earlier messages; this one was not sent. Try again in a moment.".into(),
            );
            return;
        }
        d.inbox.push_back(input);
        self.schedule(now, device);
    }

    /// Starts the device's next turn when a backend slot is free, or queues it for one.
    fn schedule(&mut self, now: Time, device: DeviceId) {
        let limit = self.settings.concurrency.max(1);
        let Some(d) = self.devices.get_mut(&device) else { return };
        if d.turn.is_some() || d.queued || d.loading || d.inbox.is_empty() {
            return;
        }
        if self.running >= limit {
            d.queued = true;
            self.waiting.push_back(device);
            return;
        }
        let Some(input) = d.inbox.pop_front() else { return };
        self.running += 1;
        let turn = Turn {
            input,
            message: MessageId(self.id("r")),
            started: now,
            coalescer: Coalescer::new(self.settings.edit_interval),
            call: None,
            sse: SseDecoder::new(MAX_EVENT_BYTES),
            attempt: 0,
            retry_at: None,
            shown: false,
            complete: false,
            output: None,
            run: None,
            stopping: false,
            length_cut: false,
            finishing: 0,
        };
        if let Some(d) = self.devices.get_mut(&device) {
            d.turn = Some(turn);
        }
        self.out.push_back(AgentCommand::Avatar {
            device: device.clone(),
            state: "thinking".into(),
        });
        self.out.push_back(AgentCommand::Typing { device: device.clone() });
        self.send_main(&device);
    }

    /// (Re)sends the turn's main request.
    fn send_main(&mut self, device: &DeviceId) {
        let keeps = self.server_keeps_history();
        let headers = self.headers_for(device);
        let Some(d) = self.devices.get(device) else { return };
        let Some(turn) = &d.turn else { return };
        let key = self.settings.key.as_deref();
        let request = match self.settings.backend {
            Backend::OpenAi => {
                let mut messages = if keeps {
                    History::system_message(self.settings.system.as_deref())
                        .into_iter()
                        .collect()
                } else {
                    d.history.messages(self.settings.system.as_deref())
                };
                messages.push(json!({"role": "user", "content": turn.input.content()}));
                ChatRequest {
                    endpoint: &self.settings.endpoint,
                    model: &self.settings.model,
                    key,
                    headers: &headers,
                    messages,
                    temperature: self.settings.temperature,
                }
                .to_bytes()
            }
            Backend::Hermes => {
                let input = match turn.input.content() {
                    Value::String(s) => Value::String(s),
                    parts => json!([{"role": "user", "content": parts}]),
                };
                let session = format!("mobile-{}-{}", header_value(device.as_str()), d.conversation);
                hermes_runs::start_run(
                    &self.settings.endpoint,
                    key,
                    &headers,
                    input,
                    d.history.messages(None),
                    self.settings.system.as_deref(),
                    &session,
                )
            }
        };
        match request {
            Ok(bytes) => {
                let id = self.new_call(Role::Main(device.clone()), bytes);
                if let Some(turn) = self.turn_mut(device) {
                    turn.call = Some(id);
                    turn.attempt += 1;
                    turn.sse = SseDecoder::new(MAX_EVENT_BYTES);
                }
            }
            Err(why) => self.fail_turn(device, format!("The request could not be made: {why}.")),
        }
    }

    fn turn_mut(&mut self, device: &DeviceId) -> Option<&mut Turn> {
        self.devices.get_mut(device).and_then(|d| d.turn.as_mut())
    }

    /// A call's news from the HTTP client.
    pub fn handle_call(&mut self, now: Time, id: CallId, event: CallEvent) {
        self.on_call_event(now, id, event);
        self.start_waiting(now);
    }

    fn on_call_event(&mut self, now: Time, id: CallId, event: CallEvent) {
        let Some((role, answer)) = self.calls.get_mut(&id) else {
            return;
        };
        let role = role.clone();
        match event {
            CallEvent::Head(head) => {
                self.reach = Reach::Reachable;
                answer.status = Some(head.status);
                answer.retry_after = head.header("retry-after").map(str::to_owned);
                answer.stream = head.status == 200 && is_stream(&head);
                log::debug!("agent call {}: {} {}", id.0, head.status, head.reason.escape_debug());
            }
            CallEvent::Body(bytes) => {
                if answer.stream {
                    let (Role::Main(device) | Role::Events(device)) = &role else {
                        return;
                    };
                    let device = device.clone();
                    return self.on_stream_bytes(now, &device, &bytes);
                }
                // A whole (non-streamed) completion may be long; an error body is not.
                let limit = if answer.status == Some(200) {
                    MAX_EVENT_BYTES
                } else {
                    ERROR_BODY_LIMIT
                };
                let room = limit.saturating_sub(answer.body.len());
                answer.body.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            CallEvent::End => {
                let (_, answer) = self.calls.remove(&id).expect("looked up above");
                self.on_call_end(now, role, answer);
            }
            CallEvent::Failed(error) => {
                self.calls.remove(&id);
                if !matches!(error, CallError::Timeout("idle" | "first byte") | CallError::Broken(_)) {
                    self.reach = Reach::Unreachable(error.to_string());
                }
                log::warn!(
                    "agent: {} failed: {}",
                    role_name(&role),
                    error.to_string().escape_debug()
                );
                self.on_call_failed(now, role, error);
            }
        }
    }

    fn on_stream_bytes(&mut self, now: Time, device: &DeviceId, bytes: &[u8]) {
        let backend = self.settings.backend;
        let Some(turn) = self.turn_mut(device) else { return };
        let mut items = Vec::new();
        if turn.sse.feed(bytes, &mut items).is_err() {
            log::warn!("agent: an event over {MAX_EVENT_BYTES} bytes; the stream is cut");
            return self.cut(device, "the agent sent an event too large to read");
        }
        for item in items {
            let SseItem::Event(event) = item else { continue };
            if self.turn_mut(device).is_none_or(|t| t.finishing > 0) {
                return; // the turn ended inside this read (an error event)
            }
            match backend {
                Backend::OpenAi => {
                    if !event.event.is_empty() && event.event != "message" {
                        // hermes.tool.progress and the like: the avatar already thinks.
                        continue;
                    }
                    match parse_stream_data(&event.data) {
                        StreamItem::Delta(d) => self.delta(now, device, &d),
                        StreamItem::Finished(reason) => {
                            if let Some(t) = self.turn_mut(device) {
                                t.complete = true;
                                t.length_cut = reason == "length";
                            }
                        }
                        // The answer is whole: the turn ends now, whether or not the server
                        // closes the connection.
                        StreamItem::Done => {
                            if let Some(t) = self.turn_mut(device) {
                                t.complete = true;
                            }
                            self.end_stream(device, None);
                        }
                        StreamItem::Error(message) => {
                            let note = format!("the model server reported: {message}");
                            self.cut(device, &note);
                        }
                        StreamItem::Malformed => log::warn!(
                            "agent: a stream event is not a chat chunk: {:?}",
                            event.data.chars().take(120).collect::<String>()
                        ),
                    }
                }
                Backend::Hermes => match parse_run_event(&event.data) {
                    RunEvent::Delta(d) => self.delta(now, device, &d),
                    RunEvent::ToolStarted { tool } => {
                        log::debug!("agent: {device:?}: tool {:?} started", tool);
                        self.out.push_back(AgentCommand::Avatar {
                            device: device.clone(),
                            state: "thinking".into(),
                        });
                        self.out.push_back(AgentCommand::Typing { device: device.clone() });
                    }
                    RunEvent::Approval {
                        command,
                        description,
                        choices,
                    } => self.open_approval(device, command, description, choices),
                    RunEvent::Completed { output } => {
                        if let Some(t) = self.turn_mut(device) {
                            t.complete = true;
                            t.output = Some(output);
                        }
                        self.end_stream(device, None);
                    }
                    RunEvent::Failed { error } => {
                        if let Some(t) = self.turn_mut(device) {
                            t.complete = true; // the run is over: nothing to stop
                        }
                        let note = format!("Hermes reported: {error}");
                        self.cut(device, &note);
                    }
                    RunEvent::Cancelled => {
                        if let Some(t) = self.turn_mut(device) {
                            t.complete = true;
                            t.stopping = true;
                        }
                        self.end_stream(device, None);
                    }
                    RunEvent::Ignored => {}
                    RunEvent::Malformed => log::warn!(
                        "agent: a run event is not JSON: {:?}",
                        event.data.chars().take(120).collect::<String>()
                    ),
                },
            }
        }
    }

    /// Ends the turn now with `note`: the call is dropped, and a Hermes run is told to stop
    /// (it would otherwise go on with nobody reading it).
    fn cut(&mut self, device: &DeviceId, note: &str) {
        let run_going = self.turn_mut(device).is_some_and(|t| t.run.is_some() && !t.complete);
        if run_going {
            self.send_stop(device, false);
        }
        self.end_stream(device, Some(note));
    }

    fn delta(&mut self, now: Time, device: &DeviceId, delta: &str) {
        let Some(turn) = self.turn_mut(device) else { return };
        if turn.coalescer.text().len() + delta.len() > MAX_REPLY_BYTES {
            let note = format!("cut: the answer passed {} KiB", MAX_REPLY_BYTES / 1024);
            return self.cut(device, &note);
        }
        if let Some(text) = turn.coalescer.push(now, delta) {
            let text = text.to_owned();
            turn.shown = true;
            let message = turn.message.clone();
            self.reply(device, message, text, false);
        }
    }

    fn open_approval(&mut self, device: &DeviceId, command: String, description: String, choices: Vec<String>) {
        let Some(run) = self.turn_mut(device).and_then(|t| t.run.clone()) else {
            return;
        };
        let prompt = PromptId(self.id("approval"));
        let conversation = self.devices.get(device).map_or(1, |d| d.conversation);
        self.cards.insert(
            prompt.clone(),
            Card {
                device: device.clone(),
                run,
                conversation,
            },
        );
        let description = if description.is_empty() {
            "dangerous command".to_owned()
        } else {
            description
        };
        self.out.push_back(AgentCommand::OpenPrompt {
            device: device.clone(),
            prompt,
            request: PromptRequest::ExecApproval {
                command,
                description,
                options: choices,
            },
            ttl_secs: Some(self.settings.approval_ttl),
        });
    }

    fn on_call_end(&mut self, now: Time, role: Role, answer: Answer) {
        let status = answer.status.unwrap_or(0);
        match role {
            Role::Main(device) => {
                if let Some(t) = self.turn_mut(&device) {
                    t.call = None;
                }
                if status == 200 && self.settings.backend == Backend::OpenAi {
                    if !answer.stream {
                        // A server that ignored `stream: true`: one whole completion.
                        let whole = serde_json::from_slice::<Value>(&answer.body).ok().and_then(|v| {
                            v.pointer("/choices/0/message/content")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        });
                        if let Some(t) = self.turn_mut(&device) {
                            t.complete = whole.is_some();
                            t.output = whole;
                        }
                    }
                    return self.end_stream(&device, None);
                }
                if (status == 200 || status == 202) && self.settings.backend == Backend::Hermes {
                    return match parse_run_started(&answer.body) {
                        Ok(run) => self.open_events(&device, run),
                        Err(why) => self.fail_turn(&device, format!("Hermes did not start the run: {why}.")),
                    };
                }
                self.refused(now, &device, status, &answer);
            }
            Role::Events(device) => {
                if let Some(t) = self.turn_mut(&device) {
                    t.call = None;
                }
                let whole = self.turn_mut(&device).is_some_and(|t| t.complete);
                if status == 200 && whole {
                    return self.end_stream(&device, None);
                }
                // A dropped event stream cannot be picked up again: the run is stopped
                // rather than left running (tools, approvals) with nobody reading it.
                let note = if status == 200 {
                    "interrupted: the run's event stream ended early".to_owned()
                } else {
                    status_outcome(status, None).0
                };
                self.cut(&device, &note);
            }
            Role::Approval { device, choice } => match status {
                200..=299 if choice == "always" => self.say(
                    &device,
                    "Approved always: Hermes added this kind of command to its allow-list (config.yaml) and will not ask again."
                        .into(),
                ),
                200..=299 => {}
                // Already answered, timed out in Hermes, or the run is over: closed quietly.
                409 => log::info!("agent: {device:?}: the approval was no longer pending (409)"),
                _ => {
                    let (sentence, _) = status_outcome(status, None);
                    self.say(&device, format!("Your answer did not reach Hermes: {sentence}"));
                }
            },
            Role::Stop { device, run, user } => {
                if !(200..=299).contains(&status) && status != 409 {
                    log::warn!("agent: {device:?}: stop of run {} answered {status}", run.as_str());
                    if user {
                        self.stop_failed(&device, &run, format!("Hermes answered {status}"));
                    }
                }
            }
        }
    }

    fn open_events(&mut self, device: &DeviceId, run: RunId) {
        let headers = self.headers_for(device);
        let request = hermes_runs::events(&self.settings.endpoint, self.settings.key.as_deref(), &headers, &run);
        log::info!("agent: {device:?}: run {} started", run.as_str());
        match request {
            Ok(bytes) => {
                let id = self.new_call(Role::Events(device.clone()), bytes);
                let stop_now = {
                    let Some(turn) = self.turn_mut(device) else { return };
                    turn.call = Some(id);
                    turn.run = Some(run);
                    turn.sse = SseDecoder::new(MAX_EVENT_BYTES);
                    turn.stopping
                };
                if stop_now {
                    self.send_stop(device, true);
                }
            }
            Err(why) => self.fail_turn(device, format!("The request could not be made: {why}.")),
        }
    }

    /// A non-2xx answer to the main request: retried when safe, else one sentence.
    fn refused(&mut self, now: Time, device: &DeviceId, status: u16, answer: &Answer) {
        let (mut sentence, retry) = status_outcome(status, answer.retry_after.as_deref());
        if status == 0 {
            sentence = "The agent's answer was not HTTP.".into();
        }
        let (attempt, stopping) = self
            .turn_mut(device)
            .map_or((MAX_ATTEMPTS, false), |t| (t.attempt, t.stopping));
        if stopping {
            return self.end_stream(device, None);
        }
        let wait = match retry {
            Retry::After(s) => Some(Duration::from_secs(s).min(MAX_RETRY_WAIT)),
            Retry::Backoff => Some(backoff(attempt)),
            Retry::No => None,
        };
        if let Some(wait) = wait.filter(|_| attempt < MAX_ATTEMPTS) {
            return self.retry_later(now, device, wait, &format!("status {status}"));
        }
        if let Some(detail) = error_detail(&answer.body) {
            sentence = format!("{sentence} ({detail})");
        }
        self.fail_turn(device, sentence);
    }

    fn retry_later(&mut self, now: Time, device: &DeviceId, wait: Duration, why: &str) {
        log::info!(
            "agent: {device:?}: retrying in {} ms ({})",
            wait.as_millis(),
            why.escape_debug()
        );
        if let Some(t) = self.turn_mut(device) {
            t.retry_at = Some(now + wait);
        }
    }

    fn on_call_failed(&mut self, now: Time, role: Role, error: CallError) {
        match role {
            Role::Main(device) => {
                let Some(turn) = self.turn_mut(&device) else { return };
                turn.call = None;
                let (shown, attempt, complete, stopping) = (turn.shown, turn.attempt, turn.complete, turn.stopping);
                if complete || stopping {
                    // All of it came (the connection broke after the end), or /stop.
                    return self.end_stream(&device, None);
                }
                if shown {
                    return self.end_stream(&device, Some(&format!("interrupted: {error}")));
                }
                if error.before_request() && attempt < MAX_ATTEMPTS {
                    return self.retry_later(now, &device, backoff(attempt), &error.to_string());
                }
                let sentence = self.sentence_for(&error);
                self.fail_turn(&device, sentence);
            }
            Role::Events(device) => {
                let Some(turn) = self.turn_mut(&device) else { return };
                turn.call = None;
                if turn.complete {
                    return self.end_stream(&device, None);
                }
                let note = format!("interrupted: the run's event stream: {error}");
                self.cut(&device, &note);
            }
            Role::Approval { device, .. } => {
                let sentence = self.sentence_for(&error);
                self.say(&device, format!("Your answer did not reach Hermes: {sentence}"));
            }
            Role::Stop { device, run, user } => {
                if user {
                    let sentence = self.sentence_for(&error);
                    self.stop_failed(&device, &run, sentence);
                }
            }
        }
    }

    /// The stop did not reach Hermes: say so, and let a later `/stop` try again.
    fn stop_failed(&mut self, device: &DeviceId, run: &RunId, why: String) {
        let current = self
            .turn_mut(device)
            .filter(|t| t.run.as_ref() == Some(run) && t.finishing == 0);
        let Some(t) = current else {
            return; // that run's turn is over
        };
        t.stopping = false;
        self.say(
            device,
            format!("The stop did not reach Hermes ({why}); send /stop again."),
        );
    }

    fn sentence_for(&self, error: &CallError) -> String {
        let e = &self.settings.endpoint;
        let at = format!("{}:{}", e.host, e.port);
        match error {
            CallError::Resolve(_) => format!("The agent's address {} does not resolve; check MOBILE_AGENT.", e.host),
            CallError::Connect(why) => format!("The agent at {at} is not reachable ({why}). Is it running?"),
            CallError::Tls(why) => format!(
                "The secure connection to {at} failed ({why}). For a self-signed server, set MOBILE_AGENT_CA_FILE."
            ),
            CallError::Timeout("connect") => format!("The agent at {at} did not answer the connection in time."),
            CallError::Timeout(_) => "The agent took too long to answer; try again.".into(),
            CallError::Broken(why) => format!("The connection to the agent broke ({why}); try again."),
            CallError::Busy => "Too many requests are open to the agent; try again in a moment.".into(),
        }
    }

    /// The turn ends with one sentence (after what was shown, if anything).
    fn fail_turn(&mut self, device: &DeviceId, sentence: String) {
        let Some(turn) = self.turn_mut(device) else { return };
        turn.complete = true;
        let text = if turn.shown {
            format!("{}\n\n⚠ {sentence}", turn.coalescer.text())
        } else {
            sentence
        };
        let message = turn.message.clone();
        self.reply(device, message, text, true);
        self.close_turn(device, Vec::new());
    }

    /// The stream is over, whole or not: the final version, its files, the conversation.
    fn end_stream(&mut self, device: &DeviceId, problem: Option<&str>) {
        let media_dirs = self.settings.media_dirs.clone();
        let Some(d) = self.devices.get_mut(device) else { return };
        let Some(turn) = d.turn.as_mut() else { return };
        if turn.finishing > 0 {
            return;
        }
        // The call, if one is still open, is dropped by `close_turn` below.
        let mut raw = turn.coalescer.text().to_owned();
        if raw.trim().is_empty() {
            raw = turn.output.take().unwrap_or_default();
        }
        let mut notes = Vec::new();
        if raw.len() > MAX_REPLY_BYTES {
            // A whole output (run.completed, a non-streamed answer) has the same bound.
            let mut end = MAX_REPLY_BYTES;
            while !raw.is_char_boundary(end) {
                end -= 1;
            }
            raw.truncate(end);
            notes.push(format!("(cut: the answer passed {} KiB)", MAX_REPLY_BYTES / 1024));
        }
        let (text, mut paths) = take_media_tags(&raw);
        let (model_text, images) = take_data_images(&text);
        // Each path once, and a few per reply: every file is a read on the one file worker
        // that every phone's uploads also wait for.
        let mut seen = std::collections::HashSet::new();
        paths.retain(|p| seen.insert(p.clone()));
        if paths.len() > MAX_MEDIA_PER_REPLY {
            notes.push(format!(
                "({} more files were named; only the first {MAX_MEDIA_PER_REPLY} are sent.)",
                paths.len() - MAX_MEDIA_PER_REPLY
            ));
            paths.truncate(MAX_MEDIA_PER_REPLY);
        }
        let mut allowed = Vec::new();
        for path in paths {
            if media_path_allowed(&path, &media_dirs) {
                allowed.push(path);
            } else {
                log::info!("agent: MEDIA:{:?} not sent: not in MOBILE_AGENT_MEDIA_DIRS", path);
                notes.push(format!(
                    "(The file {path} was not sent: it is outside MOBILE_AGENT_MEDIA_DIRS.)"
                ));
            }
        }
        if turn.length_cut {
            notes.push("(cut: the model reached its length limit)".into());
        }
        let empty = model_text.trim().is_empty();
        let mut text = model_text.clone();
        let problem = problem.map(str::to_owned).or_else(|| {
            (!turn.complete).then(|| "interrupted: the stream ended before the answer was complete".into())
        });
        if turn.stopping {
            text = if empty {
                "Stopped.".into()
            } else {
                format!("{text}\n\n(stopped)")
            };
        } else if let Some(why) = problem {
            let why = capitalize(&why);
            text = if empty {
                format!("⚠ {why}")
            } else {
                format!("{text}\n\n⚠ {why}")
            };
        } else if empty {
            let names: Vec<&str> = allowed.iter().map(|p| p.rsplit('/').next().unwrap_or(p)).collect();
            text = match (names.is_empty(), images.is_empty()) {
                (false, _) => format!("(sent {})", names.join(", ")),
                (true, false) => "(sent an image)".into(),
                (true, true) => "(The agent gave an empty answer.)".into(),
            };
        }
        for note in notes {
            text.push_str("\n\n");
            text.push_str(&note);
        }
        let user_text = turn.input.history.clone();
        let message = turn.message.clone();
        // The final version always goes, also when it equals the last edit (M2: `done`).
        self.reply(device, message, text, true);
        for (mime, data) in images {
            let ext = mime.rsplit('/').next().unwrap_or("img").to_owned();
            self.out.push_back(AgentCommand::SendFile {
                device: device.clone(),
                file: OutgoingFile {
                    kind: DownloadKind::Image,
                    mime,
                    filename: format!("image.{ext}"),
                    caption: None,
                    data,
                    reply_to: None,
                },
            });
        }
        // The conversation keeps what the model said, not the gateway's notes.
        if !empty {
            let d = self.devices.get_mut(device).expect("looked up above");
            d.history.push("user", &user_text);
            d.history.push("assistant", &model_text);
            self.persist(device);
        }
        self.close_turn(device, allowed);
    }

    /// The turn is over once its files are read, then the next one may start.
    fn close_turn(&mut self, device: &DeviceId, paths: Vec<String>) {
        let Some(turn) = self.devices.get_mut(device).and_then(|d| d.turn.as_mut()) else {
            return;
        };
        if let Some(call) = turn.call.take() {
            self.calls.remove(&call);
            self.io.push_back(AgentIo::Cancel(call));
        }
        turn.retry_at = None;
        // The reply itself counts as one (done just below), each file as one more.
        turn.finishing = paths.len() + 1;
        for path in paths {
            let what = Load::Media {
                device: device.clone(),
                path: path.clone(),
            };
            self.load(what, PathBuf::from(path), MEDIA_LIMIT);
        }
        self.file_done(device);
    }

    /// One of the turn's files is done (or, from `close_turn`, the reply itself).
    fn file_done(&mut self, device: &DeviceId) {
        let Some(turn) = self.turn_mut(device) else { return };
        turn.finishing = turn.finishing.saturating_sub(1);
        if turn.finishing > 0 {
            return;
        }
        let Some(d) = self.devices.get_mut(device) else { return };
        d.turn = None;
        self.running = self.running.saturating_sub(1);
        self.out.push_back(AgentCommand::EndTurn { device: device.clone() });
        // Its next message goes after the devices already waiting for a slot, so one busy
        // phone cannot keep the slots to itself.
        if self.waiting.is_empty() {
            self.pending.push_back(device.clone());
        } else if let Some(d) = self.devices.get_mut(device) {
            d.queued = true;
            self.waiting.push_back(device.clone());
        }
    }

    fn send_stop(&mut self, device: &DeviceId, user: bool) {
        let headers = self.headers_for(device);
        let Some(run) = self.turn_mut(device).and_then(|t| t.run.clone()) else {
            return;
        };
        match hermes_runs::stop(&self.settings.endpoint, self.settings.key.as_deref(), &headers, &run) {
            Ok(bytes) => {
                let role = Role::Stop {
                    device: device.clone(),
                    run,
                    user,
                };
                self.new_call(role, bytes);
            }
            Err(why) => log::warn!("agent: the stop request could not be made: {why}"),
        }
    }

    /// `/stop` from the phone (a gateway command): the running answer, and the messages
    /// waiting behind it.
    fn stop(&mut self, device: &DeviceId) {
        let backend = self.settings.backend;
        let dropped = match self.devices.get_mut(device) {
            Some(d) => {
                let n = std::mem::take(&mut d.inbox).len();
                if d.queued {
                    d.queued = false;
                    self.waiting.retain(|w| w != device);
                }
                n
            }
            None => 0,
        };
        let Some(turn) = self.turn_mut(device) else {
            let text = match dropped {
                0 => "Nothing to stop.".to_owned(),
                n => format!("Stopped: {n} waiting message(s) not sent."),
            };
            return self.note(device, text);
        };
        if turn.finishing > 0 || (turn.stopping && backend == Backend::OpenAi) {
            if dropped > 0 {
                self.say(device, format!("Stopped: {dropped} waiting message(s) not sent."));
            }
            return;
        }
        turn.stopping = true;
        turn.retry_at = None;
        let (has_run, has_call) = (turn.run.is_some(), turn.call.is_some());
        log::info!("agent: {device:?}: /stop ({dropped} waiting message(s) dropped)");
        match backend {
            // The run is told to stop; its stream then ends with run.cancelled.
            Backend::Hermes if has_run => self.send_stop(device, true),
            // Not started yet: stopped as soon as its id is known (`open_events`).
            Backend::Hermes if has_call => {}
            // A chat stream is simply dropped: the server stops when its client goes.
            _ => self.end_stream(device, None),
        }
    }

    /// `/new` from the phone (a gateway command).
    fn new_conversation(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get_mut(device) else { return };
        if d.turn.is_some() || !d.inbox.is_empty() || d.queued {
            return self.say(
                device,
                "An answer is still coming: /new after it ends (or /stop it first).".into(),
            );
        }
        if d.loading {
            // Applied once the saved conversation is in, before any later message.
            d.new_pending = true;
            return;
        }
        self.reset_conversation(device);
    }

    fn reset_conversation(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get_mut(device) else { return };
        d.history.clear();
        d.conversation += 1;
        self.persist(device);
        self.note(device, "Started a new conversation.".into());
    }

    /// Looks at the inboxes of devices whose turn ended, then gives free slots to the
    /// devices waiting for one.
    fn start_waiting(&mut self, now: Time) {
        while let Some(device) = self.pending.pop_front() {
            self.schedule(now, device);
        }
        while self.running < self.settings.concurrency.max(1) {
            let Some(device) = self.waiting.pop_front() else { break };
            if let Some(d) = self.devices.get_mut(&device) {
                d.queued = false;
            }
            self.schedule(now, device);
        }
    }

    fn answer_card(&mut self, prompt: &PromptId, choice: &str, expired: bool) {
        let Some(card) = self.cards.remove(prompt) else { return };
        let still_running = self
            .devices
            .get(&card.device)
            .and_then(|d| d.turn.as_ref())
            .is_some_and(|t| t.run.as_ref() == Some(&card.run) && t.finishing == 0);
        if expired && still_running {
            self.say(
                &card.device,
                "The approval card expired, so the command was denied.".into(),
            );
        }
        let headers = self.headers_with(&card.device, card.conversation);
        // Posted also when the run is over: Hermes answers 409, which closes it quietly.
        match hermes_runs::answer_approval(
            &self.settings.endpoint,
            self.settings.key.as_deref(),
            &headers,
            &card.run,
            choice,
        ) {
            Ok(bytes) => {
                let role = Role::Approval {
                    device: card.device,
                    choice: choice.to_owned(),
                };
                self.new_call(role, bytes);
            }
            Err(why) => log::warn!("agent: the approval answer could not be made: {why}"),
        }
    }
}

impl PureAgent for HttpAgent {
    fn handle_event(&mut self, now: Time, event: AgentEvent) {
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
                        Ok(input) => self.on_message(now, device, input),
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
        self.start_waiting(now);
    }

    fn handle_timeout(&mut self, now: Time) {
        let mut edits = Vec::new();
        let mut retries = Vec::new();
        let mut too_long = Vec::new();
        for (device, d) in &mut self.devices {
            let Some(turn) = d.turn.as_mut() else { continue };
            if turn.finishing > 0 {
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
            if turn.retry_at.is_some_and(|at| at <= now) {
                turn.retry_at = None;
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
            let note = format!("stopped after {} minutes", MAX_TURN.as_secs() / 60);
            self.cut(&device, &note);
        }
        self.start_waiting(now);
    }

    fn poll_command(&mut self) -> Option<AgentCommand> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.devices
            .values()
            .filter_map(|d| d.turn.as_ref())
            .filter(|t| t.finishing == 0)
            .flat_map(|t| [t.coalescer.due_at(), t.retry_at, Some(t.started + MAX_TURN)])
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

fn role_name(role: &Role) -> &'static str {
    match role {
        Role::Main(_) => "the request",
        Role::Events(_) => "the run's event stream",
        Role::Approval { .. } => "the approval answer",
        Role::Stop { .. } => "the stop request",
    }
}

fn is_stream(head: &ResponseHead) -> bool {
    head.header("content-type")
        .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"))
}

/// 1 s, 2 s, 4 s… after attempt `n` (1-based).
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1 << attempt.saturating_sub(1).min(5))
}

/// The `error.message` of an OpenAI-style error body, short and printable.
fn error_detail(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let message = v
        .pointer("/error/message")
        .or_else(|| v.get("error"))
        .or_else(|| v.get("detail"))
        .and_then(Value::as_str)?;
    let clean: String = message.chars().filter(|c| !c.is_control()).take(200).collect();
    (!clean.trim().is_empty()).then_some(clean)
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
