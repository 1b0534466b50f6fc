//! The loop's decisions without its I/O (issue 24 §0): the core, the agent, push and the
//! journal's record queue, wired together and stepped on the caller's clock. There is no
//! mio here, no socket, no thread and no `Instant`: I/O results go in through `handle_*`,
//! I/O requests come out of [`Wiring::poll_io`], and [`Wiring::poll_timeout`] says when to
//! call [`Wiring::handle_timeout`]. This is what quinn-proto's `Connection` is to its
//! endpoint: the event loop (`server::Server`) only moves bytes, readiness and completions,
//! and the in-memory driver of the tests (server/tests/wiring/) steps the same code on
//! virtual time, the journal in memory.
//!
//! The usage rule, as str0m's: after any `handle_*`, drain `poll_io` until `None`. The core,
//! the agent and push are stepped against each other inside `poll_io` until all three are
//! quiet, so the caller decides when a batch of inputs is answered (once per wake-up in the
//! loop: messages read together are taken by the core before any reply goes out).

use std::collections::VecDeque;
use std::path::PathBuf;

mod devices;

use hermes_mobile::agent_link::{FileHandover, PeerId};
use hermes_mobile::gateway::{PairOutcome, RevokeOutcome};
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::journal::{Read, ReadResult, Record};
use hermes_mobile::{AgentEvent, CardAnswered, ConnId, DeviceId, Gateway, Output, Peer, Time};

use crate::agent::io::{AgentIo, CallEvent, CallId, LoadError, LoadTag, PeerInput};
use crate::agent::{Agent, Refused};
use crate::card_answer::{AnswerBody, Refusals, Reply};
use crate::fileio::Ticket;
use crate::http_client::Target;
use crate::push::card_token::Verdict;
use crate::push::{Push, PushIo};

/// Work for the event loop, in the order it was decided.
pub enum WiringIo {
    /// A frame for a phone's connection.
    Send { conn: ConnId, frame: String },
    /// The core closed the connection (after the frames queued before it) and forgot it.
    Close {
        conn: ConnId,
        code: u16,
        reason: &'static str,
    },
    /// The core accepted the connection's `hello` (for the log and the read budget, L35).
    Authenticated {
        conn: ConnId,
        device: DeviceId,
        service: bool,
    },
    /// An HTTP agent's call to its endpoint; its news comes back through `handle_call`.
    Call { id: CallId, request: Vec<u8> },
    /// A push call to its push service; its news comes back through `handle_call`.
    PushCall {
        id: CallId,
        target: std::sync::Arc<Target>,
        request: Vec<u8>,
    },
    /// Drop a call.
    Cancel(CallId),
    /// A line (with its newline) for a peer of the agent link.
    /// `owed`: tell [`Wiring::handle_link_written`] once the line's last byte is written.
    LinkWrite {
        peer: PeerId,
        line: String,
        owed: Option<EventKey>,
    },
    /// End a peer of the agent link; the agent hears of it through `handle_peer(Closed)`.
    LinkClose { peer: PeerId, reason: String },
    /// Save the event's file or voice note; answer with `handle_file_saved(ticket, ..)`.
    SaveFile { ticket: Ticket, event: Box<AgentEvent> },
    /// Keep a file sent to a device in the media store as `name` (L63); answer with
    /// `handle_media_saved(name, ..)`.
    SaveMedia { name: String, data: Vec<u8> },
    /// Delete the device's files from the media store (`forget`); the removed names come
    /// back as `handle_media_removed`. In order with the saves asked for before it.
    DeleteMedia { device: DeviceId },
    /// Read a file the agent names; answer with `handle_file_loaded(ticket, ..)`.
    LoadFile {
        ticket: Ticket,
        path: PathBuf,
        limit: usize,
    },
    /// Replace a file atomically (an HTTP agent's conversation).
    Persist { path: PathBuf, contents: Vec<u8> },
    /// Replace a file of which only the newest contents matter (the push subscriptions).
    PersistLatest { path: PathBuf, contents: Vec<u8> },
    /// Records for the store, in order: one batch per time the wiring went quiet.
    JournalWrite(Vec<Record>),
    /// A read of the store, behind every record before it; answer with
    /// `handle_journal_read(token, ..)`.
    JournalRead { token: u64, read: Read },
    /// The answer to `POST /card-answer` `request` ([`Wiring::handle_card_answer`]).
    CardAnswered { request: u64, reply: Reply },
    /// The answer to `POST /pair` `request` ([`Gateway::handle_pair`]).
    Paired { request: u64, outcome: PairOutcome },
    /// How the control socket's revocation `request` went ([`Gateway::handle_revoke`]).
    Revoked { request: u64, outcome: RevokeOutcome },
}

impl std::fmt::Debug for WiringIo {
    /// Sizes rather than contents: a request may carry a key, a file anything.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WiringIo::Send { conn, frame } => write!(f, "Send({}, {frame})", conn.0),
            WiringIo::Close { conn, code, reason } => write!(f, "Close({}, {code}, {reason:?})", conn.0),
            WiringIo::Authenticated { conn, device, .. } => write!(f, "Authenticated({}, {device:?})", conn.0),
            WiringIo::Call { id, request } | WiringIo::PushCall { id, request, .. } => {
                write!(f, "Call({}, {} bytes)", id.0, request.len())
            }
            WiringIo::Cancel(id) => write!(f, "Cancel({})", id.0),
            WiringIo::LinkWrite { peer, line, .. } => write!(f, "LinkWrite({}, {} bytes)", peer.0, line.len()),
            WiringIo::LinkClose { peer, reason } => write!(f, "LinkClose({}, {reason:?})", peer.0),
            WiringIo::SaveFile { ticket, .. } => write!(f, "SaveFile({ticket})"),
            WiringIo::SaveMedia { name, data } => write!(f, "SaveMedia({name:?}, {} bytes)", data.len()),
            WiringIo::DeleteMedia { device } => write!(f, "DeleteMedia({device:?})"),
            WiringIo::LoadFile { ticket, path, .. } => write!(f, "LoadFile({ticket}, {path:?})"),
            WiringIo::Persist { path, contents } | WiringIo::PersistLatest { path, contents } => {
                write!(f, "Persist({path:?}, {} bytes)", contents.len())
            }
            WiringIo::JournalWrite(records) => write!(f, "JournalWrite({} records)", records.len()),
            WiringIo::JournalRead { token, .. } => write!(f, "JournalRead({token})"),
            WiringIo::CardAnswered { request, reply } => write!(f, "CardAnswered({request}, {reply:?})"),
            WiringIo::Paired { request, .. } => write!(f, "Paired({request})"),
            WiringIo::Revoked { request, outcome } => write!(f, "Revoked({request}, {outcome:?})"),
        }
    }
}

/// A core event on its way to the agent: one whose file is being saved holds back those
/// behind it, so the agent sees them in the order the phone sent them.
enum Parked {
    Ready(Box<AgentEvent>, Option<FileHandover>),
    Saving(Ticket),
}

pub struct Wiring {
    core: Gateway,
    agent: Agent,
    push: Option<Push>,
    /// This batch's records, not yet handed to the store; `None` without a journal.
    records: Option<Vec<Record>>,
    parked: VecDeque<Parked>,
    /// Files the agent asked for: the file job's ticket and the agent's tag.
    loads: Vec<(Ticket, LoadTag)>,
    next_ticket: Ticket,
    io: VecDeque<WiringIo>,
    /// `POST /card-answer`s refused (issue 25), for `/healthz` and the log.
    refusals: Refusals,
}

impl Wiring {
    /// `core` already restored from the journal's snapshot, if there is one; `journal`:
    /// records are kept (a store is open).
    pub fn new(core: Gateway, agent: Agent, push: Option<Push>, journal: bool) -> Wiring {
        Wiring {
            core,
            agent,
            push,
            records: journal.then(Vec::new),
            parked: VecDeque::new(),
            loads: Vec::new(),
            next_ticket: 0,
            io: VecDeque::new(),
            refusals: Refusals::default(),
        }
    }

    // Getters.

    /// The core, for `/healthz` and the L51 budget.
    pub fn core(&self) -> &Gateway {
        &self.core
    }

    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    pub fn push(&self) -> Option<&Push> {
        self.push.as_ref()
    }

    /// Whether the link's peers may be read now (see [`Agent::wants_lines`]).
    pub fn wants_lines(&mut self) -> bool {
        self.agent.wants_lines()
    }

    pub fn peer_said_hello(&self, peer: PeerId) -> bool {
        self.agent.peer_said_hello(peer)
    }

    /// The earliest deadline of the core, the agent and push.
    pub fn poll_timeout(&mut self) -> Option<Time> {
        let push = self.push.as_ref().and_then(Push::poll_timeout);
        [self.core.poll_timeout(), self.agent.poll_timeout(), push]
            .into_iter()
            .flatten()
            .min()
    }

    // Inputs from the phones' connections.

    /// A phone's WebSocket opened (`at`: when it was accepted, H7).
    pub fn handle_open(&mut self, at: Time, conn: ConnId, peer: Peer) {
        self.core.handle_open(at, conn, peer);
    }

    pub fn handle_message(&mut self, now: Time, conn: ConnId, bytes: &[u8]) {
        self.core.handle_message(now, conn, bytes);
    }

    pub fn handle_frame_too_big(&mut self, now: Time, conn: ConnId) {
        self.core.handle_frame_too_big(now, conn);
    }

    /// The connection's queue of frames has drained: a resume's replay paused for it goes on.
    pub fn handle_drained(&mut self, conn: ConnId) {
        self.core.handle_drained(conn);
    }

    /// The connection is gone for the core. Safe for one the core closed itself.
    pub fn handle_close(&mut self, now: Time, conn: ConnId) {
        self.core.handle_close(now, conn);
    }

    /// Fires what is due at `now` in the core, the agent and push; safe to call spuriously.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.core.poll_timeout().is_some_and(|t| t <= now) {
            self.core.handle_timeout(now);
        }
        if self.agent.poll_timeout().is_some_and(|t| t <= now) {
            self.agent.handle_timeout(now);
        }
        if let Some(push) = self
            .push
            .as_mut()
            .filter(|p| p.poll_timeout().is_some_and(|t| t <= now))
        {
            push.handle_timeout(now);
        }
    }

    // Inputs from the agent's transports, the HTTP client and the file worker.

    /// What a transport saw of a link peer.
    pub fn handle_peer(&mut self, now: Time, input: PeerInput<'_>) {
        self.agent.handle_peer(now, input);
    }

    /// News of a call: push's or the agent's.
    pub fn handle_call(&mut self, now: Time, id: CallId, event: CallEvent) {
        match self.push.as_mut() {
            Some(push) if crate::push::owns(id) => push.handle_call(now, id, event),
            _ => self.agent.handle_call(now, id, event),
        }
    }

    /// A `SaveFile` is done: its event goes on to the agent, with where its file is.
    pub fn handle_file_saved(&mut self, ticket: Ticket, event: Box<AgentEvent>, result: std::io::Result<PathBuf>) {
        if let Some(name) = media_name(&event) {
            match &result {
                Ok(_) => self.core.handle_media_saved(name),
                Err(_) => self.core.handle_media_failed(name),
            }
        }
        let file = match result {
            Ok(path) => FileHandover::Saved(path),
            Err(e) => FileHandover::Failed(format!("the gateway could not save it: {e}")),
        };
        if let Some(slot) = self
            .parked
            .iter_mut()
            .find(|p| matches!(p, Parked::Saving(t) if *t == ticket))
        {
            *slot = Parked::Ready(event, Some(file));
        }
    }

    /// A `SaveMedia` is done (`saved`: the file is in the media store, L63).
    pub fn handle_media_saved(&mut self, name: &str, saved: bool) {
        if saved {
            self.core.handle_media_saved(name);
        } else {
            self.core.handle_media_failed(name);
        }
    }

    /// L26's bounds removed these files from the media store.
    pub fn handle_media_removed(&mut self, names: &[String]) {
        for name in names {
            self.core.handle_media_removed(name);
        }
    }

    /// The `/files/` route's credential check (L63): a failure counts against the address
    /// as a failed `hello` does (L52).
    pub fn authorize_file(
        &mut self,
        now: Time,
        source: hermes_mobile::throttle::SourceKey,
        token: &str,
        device: &DeviceId,
    ) -> Result<(), hermes_mobile::media::FileRefusal> {
        self.core.authorize_file(now, source, token, device)
    }

    /// `POST /card-answer` (issue 25, L67): the button's token is read against the open
    /// card it names, and a valid one answers the card as its device would. A refusal is
    /// answered now; an answer applied comes as [`WiringIo::CardAnswered`] once kept.
    pub fn handle_card_answer(&mut self, t: Time, request: u64, body: &AnswerBody) -> Option<Reply> {
        let Some(card) = self.core.card_for_answer(t, &body.prompt_id) else {
            let prompt = &body.prompt_id;
            self.refusals.record(t, || {
                format!("card {prompt:?} is not open (answered, expired or unknown)")
            });
            return Some(Reply::Closed);
        };
        let verdict = match self.push.as_ref() {
            Some(push) => push.check_answer(t, card, &body.option_id, &body.token),
            None => Verdict::Forbidden,
        };
        match verdict {
            Verdict::Valid => {}
            Verdict::Closed => {
                let prompt = &body.prompt_id;
                self.refusals
                    .record(t, || format!("a token for card {prompt:?} used before, or expired"));
                return Some(Reply::Closed);
            }
            Verdict::Forbidden => {
                // Peer-chosen strings escaped (L29); the token never.
                let (device, prompt, option) = (card.device.clone(), &body.prompt_id, &body.option_id);
                self.refusals.record(t, || {
                    format!("a token that is not for device {device:?}, card {prompt:?}, option {option:?}")
                });
                return Some(Reply::Forbidden);
            }
        }
        if let Some(push) = self.push.as_mut() {
            push.spend_token(&body.token);
        }
        self.core
            .handle_card_answer(t, request, &body.prompt_id, &body.option_id);
        None
    }

    /// `POST /card-answer`s refused so far.
    pub fn card_answer_refusals(&self) -> u64 {
        self.refusals.total
    }

    /// A `POST /card-answer` the route refused before it reached a card (a malformed,
    /// unsized or too large body): counted and logged with the others.
    pub fn card_answer_refused(&mut self, t: Time, why: &'static str) {
        self.refusals.record(t, || why.to_owned());
    }

    /// The wall clock card tokens read (a test's, to move with its virtual time).
    pub fn set_push_wall(&mut self, wall: fn() -> u64) {
        if let Some(push) = self.push.as_mut() {
            push.set_wall(wall);
        }
    }

    /// A `LoadFile` is done.
    pub fn handle_file_loaded(&mut self, now: Time, ticket: Ticket, result: Result<Vec<u8>, LoadError>) {
        let Some(at) = self.loads.iter().position(|(t, _)| *t == ticket) else {
            return;
        };
        let (_, tag) = self.loads.swap_remove(at);
        self.agent.handle_loaded(now, tag, result);
    }

    // Inputs from the journal's store.

    /// Lines that carried owed events were written whole to the agent (L64).
    pub fn handle_link_written(&mut self, keys: Vec<EventKey>) {
        for key in keys {
            self.core.handle_agent_handed(key);
        }
    }

    /// Lines that carried owed events died with their peer, unwritten: the events go to the
    /// next agent (L64), or, while the gateway stops, to the next start's.
    pub fn handle_link_unwritten(&mut self, keys: Vec<EventKey>, stopping: bool) {
        // Only what stays owed spares a phone the "send that again" (L41).
        if self.core.handle_agent_unwritten(keys.clone(), !stopping) {
            self.agent.handle_link_unwritten(&keys);
        }
    }

    /// Everything up to `ticket` is on disk.
    pub fn handle_journal_committed(&mut self, now: Time, ticket: u64) {
        self.core.handle_journal_committed(now, ticket);
        self.agent.handle_committed(now, ticket, true);
    }

    /// The transaction holding `ticket` failed: nothing of it is kept.
    pub fn handle_journal_failed(&mut self, now: Time, ticket: u64) {
        self.core.handle_journal_failed(now, ticket);
        self.agent.handle_committed(now, ticket, false);
    }

    pub fn handle_journal_read(&mut self, now: Time, token: u64, result: Result<ReadResult, String>) {
        self.core.handle_journal_read(now, token, result);
    }

    // Outputs.

    /// The next piece of work for the loop. The core, the agent and push are stepped until
    /// quiet first; once they are, the batch of records goes to the store.
    pub fn poll_io(&mut self, now: Time) -> Option<WiringIo> {
        if self.io.is_empty() {
            self.settle(now);
        }
        if let Some(io) = self.io.pop_front() {
            return Some(io);
        }
        let batch = self.records.as_mut().filter(|r| !r.is_empty())?;
        Some(WiringIo::JournalWrite(std::mem::take(batch)))
    }

    /// Feeds core events to the agent and agent commands to the core until both are quiet,
    /// with push's decisions and the agent's work queued for the loop on the way.
    fn settle(&mut self, t: Time) {
        loop {
            let mut progress = false;
            while let Some(out) = self.core.poll_output() {
                progress = true;
                self.on_output(t, out);
            }
            while let Some(event) = self.core.poll_event() {
                progress = true;
                if let Some(event) = self.park(event) {
                    self.hand_over(t, event, None);
                }
            }
            while let Some(Parked::Ready(..)) = self.parked.front() {
                // Handing over may emit records (L64's Handed): another round drains them.
                progress = true;
                if let Some(Parked::Ready(event, file)) = self.parked.pop_front() {
                    self.hand_over(t, *event, file);
                }
            }
            while let Some(command) = self.agent.poll_command() {
                progress = true;
                let what = Refused::of(&command);
                match self.core.handle_agent(t, command) {
                    Ok(accepted) => self.agent.handle_accepted(t, &accepted),
                    Err(e) => {
                        log::warn!("agent command refused ({what:?}): {e}");
                        self.agent.handle_refused(t, what, &e);
                    }
                }
            }
            progress |= self.pump_agent_io();
            progress |= self.pump_push(t);
            if !progress {
                break;
            }
        }
    }

    /// The event goes to the agent; it says later when it has it, if it was owed (L64).
    fn hand_over(&mut self, t: Time, event: AgentEvent, file: Option<FileHandover>) {
        self.agent.handle_event(t, event, file);
    }

    fn on_output(&mut self, t: Time, out: Output) {
        let io = match out {
            Output::Send { conn, frame } => WiringIo::Send { conn, frame },
            Output::Close { conn, code, reason } => WiringIo::Close { conn, code, reason },
            Output::Authenticated { conn, device, service } => {
                if let (Some(push), false) = (self.push.as_mut(), service) {
                    push.device_online(&device);
                }
                WiringIo::Authenticated { conn, device, service }
            }
            Output::Notify(n) => {
                if let Some(push) = self.push.as_mut() {
                    push.notify(t, n, &self.core);
                }
                return;
            }
            Output::PushChanged => {
                let Some(PushIo::Persist { path, contents }) = self.push.as_ref().map(|p| p.persist(&self.core)) else {
                    return;
                };
                WiringIo::PersistLatest { path, contents }
            }
            Output::Journal(record) => {
                if let Some(records) = self.records.as_mut() {
                    records.push(record);
                }
                return;
            }
            Output::JournalRead { token, read } => {
                // Order is the contract: the read sees every record before it.
                let Some(records) = self.records.as_mut() else { return };
                if !records.is_empty() {
                    self.io.push_back(WiringIo::JournalWrite(std::mem::take(records)));
                }
                WiringIo::JournalRead { token, read }
            }
            Output::SaveMedia { name, data } => WiringIo::SaveMedia { name, data },
            Output::DeleteMedia { device } => WiringIo::DeleteMedia { device },
            Output::CardAnswered { request, outcome } => WiringIo::CardAnswered {
                request,
                reply: match outcome {
                    CardAnswered::Applied { option_id } => Reply::Applied(option_id),
                    CardAnswered::Closed => Reply::Closed,
                    CardAnswered::NotKept => Reply::NotKept,
                },
            },
            Output::Paired { request, outcome } => WiringIo::Paired { request, outcome },
            Output::Revoked { request, outcome } => WiringIo::Revoked { request, outcome },
        };
        self.io.push_back(io);
    }

    /// A core event on its way to the agent. A file or voice note is saved first (off the
    /// loop); events behind it wait. An event with nothing ahead of it and no file is handed
    /// back, to go to the agent at once (no allocation on the common path).
    fn park(&mut self, event: AgentEvent) -> Option<AgentEvent> {
        let has_file = matches!(
            &event,
            AgentEvent::MessageReceived { file: Some(_), .. } | AgentEvent::MessageReceived { audio: Some(_), .. }
        );
        if has_file {
            let ticket = self.ticket();
            self.parked.push_back(Parked::Saving(ticket));
            self.io.push_back(WiringIo::SaveFile {
                ticket,
                event: Box::new(event),
            });
        } else if self.parked.is_empty() {
            return Some(event);
        } else {
            self.parked.push_back(Parked::Ready(Box::new(event), None));
        }
        None
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// The agent's work, queued for the loop; whether there was any.
    fn pump_agent_io(&mut self) -> bool {
        let mut progress = false;
        while let Some(io) = self.agent.poll_io() {
            progress = true;
            let io = match io {
                AgentIo::Call { id, request } => WiringIo::Call { id, request },
                AgentIo::Cancel(id) => WiringIo::Cancel(id),
                AgentIo::Load { tag, path, limit } => {
                    let ticket = self.ticket();
                    self.loads.push((ticket, tag));
                    WiringIo::LoadFile { ticket, path, limit }
                }
                AgentIo::Persist { path, contents } => WiringIo::Persist { path, contents },
                AgentIo::Write { peer, line, owed } => WiringIo::LinkWrite { peer, line, owed },
                AgentIo::Close { peer, reason } => WiringIo::LinkClose { peer, reason },
                AgentIo::Handed(key) => {
                    self.core.handle_agent_handed(key);
                    continue;
                }
            };
            self.io.push_back(io);
        }
        progress
    }

    /// Push's calls, queued for the loop, and what push learned, told to the core; whether
    /// anything happened.
    fn pump_push(&mut self, t: Time) -> bool {
        let Some(push) = self.push.as_mut() else { return false };
        let mut progress = false;
        while let Some(io) = push.poll(t, &mut self.core) {
            progress = true;
            self.io.push_back(match io {
                PushIo::Call { id, target, request } => WiringIo::PushCall { id, target, request },
                PushIo::Persist { path, contents } => WiringIo::PersistLatest { path, contents },
            });
        }
        progress
    }
}

/// The name the core gave a message's voice note or file in the media store (L63).
fn media_name(event: &AgentEvent) -> Option<&str> {
    let AgentEvent::MessageReceived { audio, file, .. } = event else {
        return None;
    };
    let audio = audio.as_ref().and_then(|a| a.media_name.as_deref());
    audio.or_else(|| file.as_ref().and_then(|f| f.media_name.as_deref()))
}
