//! The HTTP agents (issue 11): `openai:<base URL>`, any OpenAI-compatible chat-completions
//! server, and `hermes:<base URL>`, Hermes' runs API with its approvals as cards.
//!
//! Sans-IO like the demo: events and time go in, core commands come out, and what must
//! touch the world (a request, a cancel, a file to read, a history to save) comes out of
//! [`HttpAgent::poll_io`] for the server's HTTP client and file worker. Their answers come
//! back through [`HttpAgent::handle_call`] and [`HttpAgent::handle_loaded`].
//!
//! A device has one turn at a time; messages sent meanwhile wait in its inbox (bounded)
//! and at most `concurrency` turns talk to the backend at once. A turn streams its reply
//! as coalesced edits (M2), keeps a cut stream's partial answer (marked), retries only
//! before anything was shown, and always ends with `end_turn`. Output for a phone that
//! went offline is held by the core (M4): the backend's stream is held to its end.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use hermes_mobile::agent::PromptKind;
use hermes_mobile::agent_link::FileHandover;
use hermes_mobile::upstream::openai::take_data_images;
use hermes_mobile::upstream::{
    hermes_runs, media_path_allowed, parse_run_event, parse_run_started, parse_stream_data, status_outcome,
    take_media_tags, ChatRequest, Coalescer, Endpoint, History, ResponseHead, Retry, RunEvent, RunId, SseDecoder,
    SseItem, StreamItem,
};
use hermes_mobile::wire::{DownloadKind, UploadKind};
use hermes_mobile::{
    AgentCommand, AgentEvent, CommandError, DeviceId, MessageId, OutgoingFile, PromptId, PromptRequest, Time,
};
use serde_json::{json, Value};

use super::{Agent, Refused};
use crate::fileio::LoadError;
use crate::http_client::{CallError, CallEvent, CallId};

/// Messages a device may send while its turn runs; more are refused with a note.
const INBOX_LIMIT: usize = 8;
/// Attempts of one request (the first and two retries).
const MAX_ATTEMPTS: u32 = 3;
/// The longest wait before a retry, whatever `Retry-After` says.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// Bytes of an error answer's body kept, for its message.
const ERROR_BODY_LIMIT: usize = 8 * 1024;
/// The largest file sent for a `MEDIA:` tag (the gateway's file limit).
const MEDIA_LIMIT: usize = 8 * 1024 * 1024;
/// Text files up to this size go to the model with their content.
const TEXT_FILE_LIMIT: usize = 32 * 1024;
/// The largest SSE event accepted (one `data:` payload).
const MAX_EVENT_BYTES: usize = 1024 * 1024;

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

/// Work for the server.
#[derive(Debug)]
pub enum HttpIo {
    Call {
        id: CallId,
        request: Vec<u8>,
    },
    Cancel(CallId),
    /// Read a file for a `MEDIA:` tag; answer with [`HttpAgent::handle_loaded`].
    Load {
        tag: u64,
        path: PathBuf,
        limit: usize,
    },
    /// Write this file atomically (a device's conversation).
    Persist {
        path: PathBuf,
        contents: Vec<u8>,
    },
}

/// What the backend's last attempt showed, for `/healthz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    Unknown,
    Reachable,
    Unreachable(String),
}

/// One message of the user, as the backend will get it.
#[derive(Debug, Clone)]
struct Input {
    /// The `content` of the user message (a string, or parts with an image).
    content: Value,
    /// What the history keeps of it (text only).
    text: String,
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
    Stop(DeviceId),
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

#[derive(Debug)]
struct Turn {
    input: Input,
    message: MessageId,
    coalescer: Coalescer,
    call: Option<CallId>,
    sse: SseDecoder,
    attempt: u32,
    retry_at: Option<Time>,
    /// A version of the reply was handed to the core.
    shown: bool,
    /// The stream said it was complete (`[DONE]`, a finish reason, `run.completed`).
    complete: bool,
    /// The run's whole output from `run.completed` (used when no delta came).
    output: Option<String>,
    run: Option<RunId>,
    /// An approval card is open for this turn.
    card: Option<PromptId>,
    /// `/stop` was asked for.
    stopping: bool,
    /// The reply is final; files still being read.
    finishing: usize,
}

#[derive(Debug)]
struct Device {
    history: History,
    /// Counts `/new`s: a header with `{conversation}` names a fresh session after one.
    conversation: u64,
    inbox: VecDeque<Input>,
    turn: Option<Turn>,
    /// Waiting for a backend slot (in `HttpAgent::waiting`).
    queued: bool,
}

pub struct HttpAgent {
    settings: HttpSettings,
    devices: HashMap<DeviceId, Device>,
    calls: HashMap<CallId, (Role, Answer)>,
    next_call: u64,
    next_id: u64,
    run_tag: String,
    running: usize,
    waiting: VecDeque<DeviceId>,
    /// Devices whose turn just ended: their inbox is looked at next.
    pending: VecDeque<DeviceId>,
    loads: HashMap<u64, (DeviceId, String)>,
    next_load: u64,
    out: VecDeque<AgentCommand>,
    io: VecDeque<HttpIo>,
    reach: Reach,
}

impl HttpAgent {
    /// `saved`: conversations read back from the state directory at start-up.
    pub fn new(settings: HttpSettings, run: u64, saved: Vec<(DeviceId, String)>) -> HttpAgent {
        let mut agent = HttpAgent {
            settings,
            devices: HashMap::new(),
            calls: HashMap::new(),
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
        };
        for (device, json) in saved {
            match agent.restore(&json) {
                Some(d) => {
                    agent.devices.insert(device, d);
                }
                None => log::warn!("conversation of {device:?} is not readable; starting it afresh"),
            }
        }
        agent
    }

    fn restore(&self, json: &str) -> Option<Device> {
        let v: Value = serde_json::from_str(json).ok()?;
        let history = History::from_json(
            &v.get("history")?.to_string(),
            self.settings.history_chars,
            self.settings.history_turns,
        )
        .ok()?;
        Some(Device {
            history,
            conversation: v.get("conversation").and_then(Value::as_u64).unwrap_or(1),
            inbox: VecDeque::new(),
            turn: None,
            queued: false,
        })
    }

    pub fn poll_io(&mut self) -> Option<HttpIo> {
        self.io.pop_front()
    }

    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    /// The file of `MEDIA:` tag `tag` was read (or not).
    pub fn handle_loaded(&mut self, now: Time, tag: u64, result: Result<Vec<u8>, LoadError>) {
        let Some((device, path)) = self.loads.remove(&tag) else {
            return;
        };
        match result {
            Ok(data) => {
                let filename = path.rsplit('/').next().unwrap_or("file").to_owned();
                let mime = mime_of(&filename);
                let kind = if mime.starts_with("image/") {
                    DownloadKind::Image
                } else if mime.starts_with("audio/") {
                    DownloadKind::Voice
                } else if mime.starts_with("video/") {
                    DownloadKind::Video
                } else {
                    DownloadKind::Document
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
                log::warn!("agent: file {} not sent: {why}", path.escape_debug());
                let text = format!("(The file {path} could not be sent: {why}.)");
                self.say(&device, text);
            }
        }
        self.file_done(now, &device);
    }

    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{}-{}", self.run_tag, self.next_id)
    }

    fn new_call(&mut self, role: Role, request: Vec<u8>) -> CallId {
        self.next_call += 1;
        let id = CallId(self.next_call);
        self.calls.insert(id, (role, Answer::default()));
        self.io.push_back(HttpIo::Call { id, request });
        id
    }

    fn device(&mut self, device: &DeviceId) -> &mut Device {
        let (chars, turns) = (self.settings.history_chars, self.settings.history_turns);
        self.devices.entry(device.clone()).or_insert_with(|| Device {
            history: History::new(chars, turns),
            conversation: 1,
            inbox: VecDeque::new(),
            turn: None,
            queued: false,
        })
    }

    /// One whole message (not part of a turn's reply).
    fn say(&mut self, device: &DeviceId, text: String) {
        let message = MessageId(self.id("note"));
        self.out.push_back(AgentCommand::Reply {
            device: device.clone(),
            message,
            text,
            done: true,
        });
    }

    fn persist(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get(device) else { return };
        let history: Value = serde_json::from_str(&d.history.to_json()).unwrap_or(Value::Null);
        let contents = json!({"device": device.as_str(), "conversation": d.conversation, "history": history});
        let name = hex(device.as_str());
        self.io.push_back(HttpIo::Persist {
            path: self.settings.history_dir.join(format!("{name}.json")),
            contents: contents.to_string().into_bytes(),
        });
    }

    /// The extra headers with this device's values filled in.
    fn headers_for(&self, device: &DeviceId, conversation: u64) -> Vec<(String, String)> {
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

    fn on_message(&mut self, now: Time, device: DeviceId, input: Result<Input, String>) {
        let input = match input {
            Ok(i) => i,
            Err(note) => {
                self.say(&device, note);
                self.out.push_back(AgentCommand::EndTurn { device });
                return;
            }
        };
        let d = self.device(&device);
        if d.turn.is_some() || d.queued {
            if d.inbox.len() >= INBOX_LIMIT {
                self.say(
                    &device,
                    format!("Still busy with your earlier messages ({INBOX_LIMIT} wait already); this one was not sent. Try again in a moment."),
                );
                return;
            }
            d.inbox.push_back(input);
            return;
        }
        d.inbox.push_back(input);
        self.schedule(now, device);
    }

    /// Starts the device's next turn when a backend slot is free, or queues it for one.
    fn schedule(&mut self, now: Time, device: DeviceId) {
        let limit = self.settings.concurrency.max(1);
        let d = self.device(&device);
        if d.turn.is_some() || d.queued || d.inbox.is_empty() {
            return;
        }
        if self.running >= limit {
            self.device(&device).queued = true;
            self.waiting.push_back(device);
            return;
        }
        let Some(input) = self.device(&device).inbox.pop_front() else {
            return;
        };
        self.running += 1;
        let turn = Turn {
            input,
            message: MessageId(self.id("r")),
            coalescer: Coalescer::new(self.settings.edit_interval),
            call: None,
            sse: SseDecoder::new(MAX_EVENT_BYTES),
            attempt: 0,
            retry_at: None,
            shown: false,
            complete: false,
            output: None,
            run: None,
            card: None,
            stopping: false,
            finishing: 0,
        };
        self.device(&device).turn = Some(turn);
        self.out.push_back(AgentCommand::Avatar {
            device: device.clone(),
            state: "thinking".into(),
        });
        self.out.push_back(AgentCommand::Typing { device: device.clone() });
        self.send_main(now, &device);
    }

    /// (Re)sends the turn's main request.
    fn send_main(&mut self, _now: Time, device: &DeviceId) {
        let keeps = self.server_keeps_history();
        let Some(d) = self.devices.get(device) else { return };
        let Some(turn) = &d.turn else { return };
        let headers = self.headers_for(device, d.conversation);
        let key = self.settings.key.as_deref();
        let request = match self.settings.backend {
            Backend::OpenAi => {
                let mut messages = if keeps {
                    History::new(0, 2).messages(self.settings.system.as_deref())
                } else {
                    d.history.messages(self.settings.system.as_deref())
                };
                messages.push(json!({"role": "user", "content": turn.input.content}));
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
                let input = match &turn.input.content {
                    Value::String(s) => Value::String(s.clone()),
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
                self.on_call_end(now, id, role, answer);
            }
            CallEvent::Failed(error) => {
                self.calls.remove(&id);
                if !matches!(error, CallError::Timeout("idle" | "first byte") | CallError::Broken(_)) {
                    self.reach = Reach::Unreachable(error.to_string());
                }
                log::warn!("agent: {} failed: {error}", role_name(&role));
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
            if let Some(call) = turn.call.take() {
                self.io.push_back(HttpIo::Cancel(call));
                self.calls.remove(&call);
            }
            return self.end_stream(now, device, Some("the model server sent an event too large to read"));
        }
        for item in items {
            let SseItem::Event(event) = item else { continue };
            match backend {
                Backend::OpenAi => {
                    if !event.event.is_empty() && event.event != "message" {
                        // hermes.tool.progress and the like: the avatar says it works.
                        continue;
                    }
                    match parse_stream_data(&event.data) {
                        StreamItem::Delta(d) => self.delta(now, device, &d),
                        StreamItem::Finished(_) | StreamItem::Done => {
                            if let Some(t) = self.turn_mut(device) {
                                t.complete = true;
                            }
                        }
                        StreamItem::Error(message) => {
                            let note = format!("the model server reported: {message}");
                            return self.stop_stream(now, device, Some(&note));
                        }
                        StreamItem::Malformed => {
                            log::warn!(
                                "agent: a stream event is not a chat chunk: {:?}",
                                event.data.chars().take(120).collect::<String>()
                            );
                        }
                    }
                }
                Backend::Hermes => match parse_run_event(&event.data) {
                    RunEvent::Delta(d) => self.delta(now, device, &d),
                    RunEvent::ToolStarted { tool } => {
                        log::debug!("agent: {device:?}: tool {} started", tool.escape_debug());
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
                    }
                    RunEvent::Failed { error } => {
                        let note = format!("Hermes reported: {error}");
                        return self.stop_stream(now, device, Some(&note));
                    }
                    RunEvent::Cancelled => {
                        if let Some(t) = self.turn_mut(device) {
                            t.complete = true;
                            t.stopping = true;
                        }
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

    /// Ends the stream now (an error event): the call is dropped and the turn ends.
    fn stop_stream(&mut self, now: Time, device: &DeviceId, note: Option<&str>) {
        if let Some(call) = self.turn_mut(device).and_then(|t| t.call.take()) {
            self.calls.remove(&call);
            self.io.push_back(HttpIo::Cancel(call));
        }
        self.end_stream(now, device, note);
    }

    fn delta(&mut self, now: Time, device: &DeviceId, delta: &str) {
        let Some(turn) = self.turn_mut(device) else { return };
        if let Some(text) = turn.coalescer.push(now, delta) {
            let text = text.to_owned();
            turn.shown = true;
            let message = turn.message.clone();
            self.out.push_back(AgentCommand::Reply {
                device: device.clone(),
                message,
                text,
                done: false,
            });
        }
    }

    fn open_approval(&mut self, device: &DeviceId, command: String, description: String, choices: Vec<String>) {
        let prompt = PromptId(self.id("approval"));
        if let Some(turn) = self.turn_mut(device) {
            turn.card = Some(prompt.clone());
        }
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

    fn on_call_end(&mut self, now: Time, _id: CallId, role: Role, answer: Answer) {
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
                    return self.end_stream(now, &device, None);
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
                if status == 200 {
                    return self.end_stream(now, &device, None);
                }
                let (sentence, _) = status_outcome(status, None);
                self.end_stream(now, &device, Some(&sentence));
            }
            Role::Approval { device, choice } => match status {
                200..=299 => {
                    if choice == "always" {
                        self.say(
                            &device,
                            "Approved always: Hermes added this kind of command to its allow-list (config.yaml) and will not ask again.".into(),
                        );
                    }
                }
                // Already answered, or the run is over: the card is closed quietly.
                409 => log::info!("agent: {device:?}: the approval was no longer pending (409)"),
                _ => {
                    let (sentence, _) = status_outcome(status, None);
                    self.say(&device, format!("Your answer did not reach Hermes: {sentence}"));
                }
            },
            Role::Stop(device) => {
                if !(200..=299).contains(&status) && status != 409 {
                    log::warn!("agent: {device:?}: stop answered {status}");
                }
            }
        }
    }

    fn open_events(&mut self, device: &DeviceId, run: RunId) {
        let conversation = self.devices.get(device).map_or(1, |d| d.conversation);
        let headers = self.headers_for(device, conversation);
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
                    self.send_stop(device);
                }
            }
            Err(why) => self.fail_turn(device, format!("The request could not be made: {why}.")),
        }
    }

    /// A non-2xx answer to the main request: retried when safe, else one sentence.
    fn refused(&mut self, now: Time, device: &DeviceId, status: u16, answer: &Answer) {
        let (mut sentence, retry) = status_outcome(status, answer.retry_after.as_deref());
        if status == 0 {
            sentence = "The model server's answer was not HTTP.".into();
        }
        let attempt = self.turn_mut(device).map_or(MAX_ATTEMPTS, |t| t.attempt);
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
        log::info!("agent: {device:?}: retrying in {} ms ({why})", wait.as_millis());
        if let Some(t) = self.turn_mut(device) {
            t.retry_at = Some(now + wait);
        }
    }

    fn on_call_failed(&mut self, now: Time, role: Role, error: CallError) {
        match role {
            Role::Main(device) => {
                let Some(turn) = self.turn_mut(&device) else { return };
                turn.call = None;
                let (shown, attempt) = (turn.shown, turn.attempt);
                if shown {
                    let note = format!("interrupted: {error}");
                    return self.end_stream(now, &device, Some(&note));
                }
                if error.before_request() && attempt < MAX_ATTEMPTS {
                    return self.retry_later(now, &device, backoff(attempt), &error.to_string());
                }
                let sentence = self.sentence_for(&error);
                self.fail_turn(&device, sentence);
            }
            Role::Events(device) => {
                if let Some(t) = self.turn_mut(&device) {
                    t.call = None;
                }
                let note = format!("interrupted: the run's event stream {error}");
                self.end_stream(now, &device, Some(&note));
            }
            Role::Approval { device, .. } => {
                let sentence = self.sentence_for(&error);
                self.say(&device, format!("Your answer did not reach Hermes: {sentence}"));
            }
            Role::Stop(device) => {
                let sentence = self.sentence_for(&error);
                self.say(&device, format!("The stop did not reach Hermes: {sentence}"));
            }
        }
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

    /// The turn ends with one sentence and nothing else (nothing was shown).
    fn fail_turn(&mut self, device: &DeviceId, sentence: String) {
        let Some(turn) = self.turn_mut(device) else { return };
        turn.complete = true;
        let text = if turn.shown {
            format!("{}\n\n⚠ {sentence}", turn.coalescer.text())
        } else {
            sentence
        };
        let message = turn.message.clone();
        self.out.push_back(AgentCommand::Reply {
            device: device.clone(),
            message,
            text,
            done: true,
        });
        self.close_turn(device, None);
    }

    /// The stream is over, whole or not: the final version, its files, the history.
    fn end_stream(&mut self, now: Time, device: &DeviceId, problem: Option<&str>) {
        let media_dirs = self.settings.media_dirs.clone();
        let Some(d) = self.devices.get_mut(device) else { return };
        let Some(turn) = d.turn.as_mut() else { return };
        if turn.finishing > 0 {
            return;
        }
        if let Some(call) = turn.call.take() {
            self.calls.remove(&call);
            self.io.push_back(HttpIo::Cancel(call));
        }
        let mut text = turn.coalescer.text().to_owned();
        if text.trim().is_empty() {
            if let Some(output) = turn.output.take() {
                text = output;
            }
        }
        let (text, paths) = take_media_tags(&text);
        let (mut text, images) = take_data_images(&text);
        let mut notes = Vec::new();
        let mut allowed = Vec::new();
        for path in paths {
            if media_path_allowed(&path, &media_dirs) {
                allowed.push(path);
            } else {
                log::info!(
                    "agent: MEDIA:{} not sent: not in MOBILE_AGENT_MEDIA_DIRS",
                    path.escape_debug()
                );
                notes.push(format!(
                    "(The file {path} was not sent: it is outside MOBILE_AGENT_MEDIA_DIRS.)"
                ));
            }
        }
        let interrupted = match problem {
            Some(p) => Some(p.to_owned()),
            None if turn.stopping => None,
            None if !turn.complete => Some("interrupted: the stream ended before the answer was complete".into()),
            None => None,
        };
        let stopped = turn.stopping;
        let nothing = text.trim().is_empty() && allowed.is_empty() && images.is_empty();
        if stopped {
            text = if text.trim().is_empty() {
                "Stopped.".into()
            } else {
                format!("{text}\n\n(stopped)")
            };
        } else if let Some(why) = &interrupted {
            let why = capitalize(why);
            text = if text.trim().is_empty() {
                format!("⚠ {why}")
            } else {
                format!("{text}\n\n⚠ {why}")
            };
        } else if nothing {
            text = "(The agent gave an empty answer.)".into();
        }
        for note in notes {
            text.push_str("\n\n");
            text.push_str(&note);
        }
        let user_text = turn.input.text.clone();
        let message = turn.message.clone();
        let answer_for_history = text.clone();
        let _ = now;
        if !text.trim().is_empty() {
            self.out.push_back(AgentCommand::Reply {
                device: device.clone(),
                message,
                text,
                done: true,
            });
        }
        for (mime, data) in images {
            let ext = mime.rsplit('/').next().unwrap_or("img").to_owned();
            let filename = format!("image.{ext}");
            self.out.push_back(AgentCommand::SendFile {
                device: device.clone(),
                file: OutgoingFile {
                    kind: DownloadKind::Image,
                    mime,
                    filename,
                    caption: None,
                    data,
                    reply_to: None,
                },
            });
        }
        let d = self.devices.get_mut(device).expect("looked up above");
        d.history.push("user", &user_text);
        d.history.push("assistant", &answer_for_history);
        self.persist(device);
        self.close_turn(device, Some(allowed));
    }

    /// The turn is over once its files are read (`paths`), then the next one may start.
    fn close_turn(&mut self, device: &DeviceId, paths: Option<Vec<String>>) {
        let paths = paths.unwrap_or_default();
        let Some(turn) = self.devices.get_mut(device).and_then(|d| d.turn.as_mut()) else {
            return;
        };
        if let Some(call) = turn.call.take() {
            self.calls.remove(&call);
            self.io.push_back(HttpIo::Cancel(call));
        }
        turn.retry_at = None;
        turn.finishing = paths.len();
        for path in paths {
            self.next_load += 1;
            let tag = self.next_load;
            self.loads.insert(tag, (device.clone(), path.clone()));
            self.io.push_back(HttpIo::Load {
                tag,
                path: PathBuf::from(path),
                limit: MEDIA_LIMIT,
            });
        }
        if self.turn_mut(device).is_some_and(|t| t.finishing == 0) {
            self.finish_turn(device);
        }
    }

    fn file_done(&mut self, _now: Time, device: &DeviceId) {
        let Some(turn) = self.turn_mut(device) else { return };
        turn.finishing = turn.finishing.saturating_sub(1);
        if turn.finishing == 0 {
            self.finish_turn(device);
        }
    }

    fn finish_turn(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get_mut(device) else { return };
        if d.turn.take().is_none() {
            return;
        }
        self.running = self.running.saturating_sub(1);
        self.out.push_back(AgentCommand::EndTurn { device: device.clone() });
        // This device's next message first, then devices waiting for a slot.
        self.pending.push_back(device.clone());
    }

    fn send_stop(&mut self, device: &DeviceId) {
        let conversation = self.devices.get(device).map_or(1, |d| d.conversation);
        let headers = self.headers_for(device, conversation);
        let Some(run) = self.turn_mut(device).and_then(|t| t.run.clone()) else {
            return;
        };
        if let Ok(bytes) = hermes_runs::stop(&self.settings.endpoint, self.settings.key.as_deref(), &headers, &run) {
            self.new_call(Role::Stop(device.clone()), bytes);
        }
    }

    /// `/stop` from the phone (a gateway command).
    fn stop(&mut self, now: Time, device: &DeviceId) {
        let backend = self.settings.backend;
        let Some(turn) = self.turn_mut(device) else {
            self.say(device, "Nothing to stop.".into());
            self.out.push_back(AgentCommand::EndTurn { device: device.clone() });
            return;
        };
        if turn.finishing > 0 || turn.stopping {
            return;
        }
        turn.stopping = true;
        let dropped = self
            .devices
            .get_mut(device)
            .map_or(0, |d| std::mem::take(&mut d.inbox).len());
        if dropped > 0 {
            log::info!("agent: {device:?}: /stop dropped {dropped} waiting message(s)");
        }
        match backend {
            // A run is told to stop; its stream ends with run.cancelled.
            Backend::Hermes if self.turn_mut(device).is_some_and(|t| t.run.is_some()) => self.send_stop(device),
            // Not started yet (the run's id is not known): stopped when it is.
            Backend::Hermes if self.turn_mut(device).is_some_and(|t| t.call.is_some()) => {}
            // A chat stream is simply dropped: the model server stops when its client goes.
            _ => {
                if let Some(t) = self.turn_mut(device) {
                    t.complete = true;
                }
                self.stop_stream(now, device, None);
            }
        }
    }

    /// `/new` from the phone (a gateway command).
    fn new_conversation(&mut self, device: &DeviceId) {
        let d = self.device(device);
        d.history.clear();
        d.conversation += 1;
        self.persist(device);
        self.say(device, "Started a new conversation.".into());
        self.out.push_back(AgentCommand::EndTurn { device: device.clone() });
    }

    fn input_of(
        &self,
        text: Option<String>,
        audio: bool,
        file: Option<hermes_mobile::uploads::ReceivedFile>,
    ) -> Result<Input, String> {
        if audio {
            return match text.filter(|t| !t.trim().is_empty()) {
                Some(t) => Ok(Input {
                    content: Value::String(t.clone()),
                    text: t,
                }),
                None => Err("This agent reads text: a voice message needs speech-to-text, which it does not have. Turn on the app's speech recognition, or type your message.".into()),
            };
        }
        let Some(file) = file else {
            let t = text.unwrap_or_default();
            return Ok(Input {
                content: Value::String(t.clone()),
                text: t,
            });
        };
        let caption = file.caption.clone().filter(|c| !c.trim().is_empty());
        let about = format!("{} ({}, {} bytes)", file.filename, file.mime, file.data.len());
        if file.kind == UploadKind::Image && self.settings.vision {
            let url = format!(
                "data:{};base64,{}",
                file.mime,
                base64::engine::general_purpose::STANDARD.encode(&file.data)
            );
            let said = caption.clone().unwrap_or_else(|| "(an image)".into());
            return Ok(Input {
                content: json!([
                    {"type": "text", "text": said},
                    {"type": "image_url", "image_url": {"url": url}},
                ]),
                text: format!("[image {}] {}", file.filename, caption.unwrap_or_default())
                    .trim()
                    .to_owned(),
            });
        }
        let mut note = match file.kind {
            UploadKind::Image => format!("[The user sent an image: {about}. This model cannot see images.]"),
            UploadKind::Audio => format!("[The user sent an audio file: {about}.]"),
            UploadKind::Video => format!("[The user sent a video: {about}.]"),
            UploadKind::Document => format!("[The user sent a file: {about}.]"),
        };
        if file.kind == UploadKind::Document
            && file.data.len() <= TEXT_FILE_LIMIT
            && looks_textual(&file.mime, &file.filename)
        {
            if let Ok(content) = std::str::from_utf8(&file.data) {
                note.push_str(&format!("\n--- {} ---\n{content}\n--- end of file ---", file.filename));
            }
        }
        if let Some(c) = caption {
            note.push('\n');
            note.push_str(&c);
        }
        Ok(Input {
            content: Value::String(note.clone()),
            text: note,
        })
    }

    /// Slots freed and inboxes to look at, after a turn ended.
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
}

impl Agent for HttpAgent {
    fn handle_event(&mut self, now: Time, event: AgentEvent, _file: Option<FileHandover>) {
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
                    Some("/new") => return self.new_conversation(&device),
                    Some("/stop") => return self.stop(now, &device),
                    _ => {}
                }
                let input = self.input_of(text, audio.is_some(), file);
                self.on_message(now, device, input);
            }
            AgentEvent::PromptAnswered {
                device,
                prompt,
                kind: PromptKind::ExecApproval,
                option_id,
                ..
            } => self.answer_card(&device, &prompt, option_id, false),
            AgentEvent::PromptExpired { device, prompt, .. } => self.answer_card(&device, &prompt, "deny".into(), true),
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
        for (device, d) in &mut self.devices {
            let Some(turn) = d.turn.as_mut() else { continue };
            if turn.finishing == 0 {
                if let Some(text) = turn.coalescer.poll(now) {
                    turn.shown = true;
                    edits.push((device.clone(), turn.message.clone(), text.to_owned()));
                }
            }
            if turn.retry_at.is_some_and(|at| at <= now) {
                turn.retry_at = None;
                retries.push(device.clone());
            }
        }
        for (device, message, text) in edits {
            self.out.push_back(AgentCommand::Reply {
                device,
                message,
                text,
                done: false,
            });
        }
        for device in retries {
            self.send_main(now, &device);
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
            .flat_map(|t| [t.coalescer.due_at().filter(|_| t.finishing == 0), t.retry_at])
            .flatten()
            .min()
    }

    fn handle_refused(&mut self, _now: Time, what: Refused, error: &CommandError) {
        if let Refused::Prompt { device, prompt } = what {
            // The card never reached the phone: Hermes must not wait for it.
            log::warn!("agent: {device:?}: the approval card was refused ({error}); answering deny");
            self.answer_card(&device, &prompt, "deny".into(), false);
        }
    }

    fn http_agent(&mut self) -> Option<&mut HttpAgent> {
        Some(self)
    }
}

impl HttpAgent {
    fn answer_card(&mut self, device: &DeviceId, prompt: &PromptId, choice: String, expired: bool) {
        let Some(turn) = self.turn_mut(device) else { return };
        if turn.card.as_ref() != Some(prompt) {
            return;
        }
        turn.card = None;
        let Some(run) = turn.run.clone() else { return };
        if expired {
            self.say(device, "The approval card expired, so the command was denied.".into());
        }
        let conversation = self.devices.get(device).map_or(1, |d| d.conversation);
        let headers = self.headers_for(device, conversation);
        match hermes_runs::answer_approval(
            &self.settings.endpoint,
            self.settings.key.as_deref(),
            &headers,
            &run,
            &choice,
        ) {
            Ok(bytes) => {
                self.new_call(
                    Role::Approval {
                        device: device.clone(),
                        choice,
                    },
                    bytes,
                );
            }
            Err(why) => log::warn!("agent: the approval answer could not be made: {why}"),
        }
    }
}

fn role_name(role: &Role) -> &'static str {
    match role {
        Role::Main(_) => "the request",
        Role::Events(_) => "the run's event stream",
        Role::Approval { .. } => "the approval answer",
        Role::Stop(_) => "the stop request",
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

/// A device id as it may go into a header value or a file name part.
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

/// A file name for a device: its id in hex (any id, no path tricks).
pub fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn looks_textual(mime: &str, filename: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/json" | "application/xml" | "application/x-yaml" | "application/yaml"
        )
        || [
            ".txt", ".md", ".csv", ".json", ".yaml", ".yml", ".log", ".py", ".rs", ".toml", ".ini",
        ]
        .iter()
        .any(|e| filename.to_ascii_lowercase().ends_with(e))
}

fn mime_of(filename: &str) -> &'static str {
    let ext = filename.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ogg" | "oga" | "opus" => "audio/ogg",
        "mp3" => "audio/mpeg",
        "wav" => "audio/wav",
        "m4a" => "audio/mp4",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "pdf" => "application/pdf",
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" => "text/html",
        _ => "application/octet-stream",
    }
}
