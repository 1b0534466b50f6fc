//! The journal's write side (issue 24): records, seqs, and the answers that wait for a
//! commit (`received`, a held `delivered`, `forgotten`, the answering phone's `prompt_done`).
//!
//! The core emits [`Record`]s as [`Output::Journal`]; the server's store applies them in
//! order and reports each `Confirm` ticket once it is on disk
//! ([`Gateway::handle_journal_committed`]). Frames that carry a seq wait only while their
//! seq is not yet reserved on disk (a device's first block, L57); of them only `prompt_done`
//! waits for a commit (L61).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::promises::{HeldDelivery, Promise};
use super::{Gateway, Output};
use crate::agent::AgentEvent;
use crate::ids::{ConnId, DeviceId};
use crate::journal::body::Body;
use crate::journal::owed::{self, EventKey};
use crate::journal::seqs::Seqs;
use crate::journal::{Entry, JournalConfig, Owed, Read, Record, Window};
use crate::limits::MAX_GATE_BYTES;
use crate::time::Time;
use crate::wire::journal::{with_seq, Received};
use crate::wire::server::encode;
use crate::wire::{ErrorCode, Rejection};

/// A streamed reply is kept at most this often while it streams; its first and final
/// versions always (issue 24 §1).
pub(super) const STREAM_JOURNAL_INTERVAL: Duration = Duration::from_secs(1);

/// An answer that may go only once its records are on disk.
#[derive(Debug)]
pub(super) enum Waiting {
    /// A pairing (issue 26): its request, device and token, answered once kept.
    Paired(Box<super::paired::PairWaiting>),
    /// A revocation (issue 26), acknowledged once kept.
    Revoked(Box<super::paired::RevokeReply>),
    Reserve {
        device: DeviceId,
        upto: u64,
    },
    Received {
        conn: ConnId,
        id: String,
        seq: u64,
    },
    /// A `deliver` held for an offline device (L45): `delivered` after the commit, or
    /// `device_offline` and the delivery undone if the commit failed.
    HeldDelivery(Box<HeldDelivery>),
    Forgotten {
        conn: ConnId,
        id: String,
        device: DeviceId,
    },
    /// Agent events behind this ticket may go (a message's id is on disk: L58).
    Events,
    /// Output held for the agent (`Accepted::Kept`): if its commit fails, the agent is told
    /// `not_kept` and sends it again, so the hold lets it go.
    Promised(Box<Promise>),
    /// The connection's frames wait behind one that says something was done
    /// (`prompt_done` for the answering phone) until the commit that keeps it, and after a
    /// failed one too, since it was done in memory. Frames behind it wait too, so that they
    /// leave in seq order: a client never keeps a seq above one it has not got.
    Release(ConnId),
    /// A card answered from a notification (issue 25): the button hears how once it is
    /// kept.
    CardAnswer {
        request: u64,
        option_id: String,
    },
    /// A card's outcome for its notification (L66): pushed once its closing is kept.
    Notify(Box<crate::push::Notification>),
}

/// A resume's replay, read a page at a time.
#[derive(Debug)]
pub(super) struct Replay {
    pub conn: ConnId,
    pub device: DeviceId,
    /// The client's `resume.after`.
    pub after: u64,
    /// The device's latest seq when the replay began: a later change goes to the client as
    /// a live frame, held back until the replay ends, so a page leaves it out.
    pub ceiling: u64,
    /// Where a paused replay goes on from.
    pub cursor: u64,
    /// Bytes sent since the connection's queue last drained.
    pub unacked: usize,
}

/// A read whose answer is on its way.
#[derive(Debug)]
pub(super) enum PendingRead {
    Replay(Replay),
    History {
        conn: ConnId,
        id: String,
    },
    /// Owed events read back for the next agent: how many keys were asked for.
    Owed {
        asked: usize,
    },
}

/// The journal's state in the core.
#[derive(Debug)]
pub(super) struct Journal {
    pub config: JournalConfig,
    pub seqs: Seqs,
    pub next_ticket: u64,
    pub waiting: VecDeque<(u64, Waiting)>,
    next_read: u64,
    pub reads: HashMap<u64, PendingRead>,
    /// Agent events waiting for a commit, each with the ticket it waits for (0: none of
    /// its own, only those before it): a message reaches the agent only once its id is
    /// on disk, so a re-send after a crash can never make the agent act twice.
    pub gate: VecDeque<(u64, AgentEvent)>,
    /// What the gate holds, in bytes ([`MAX_GATE_BYTES`]).
    pub gate_bytes: usize,
    /// The highest ticket committed (or failed) so far.
    committed: u64,
    /// The ticket the agent's current command waits for (held output): `handle_agent`
    /// hands it back as `Accepted::Kept`.
    pub kept: Option<u64>,
    /// Replays that wait for their device's seqs to be reserved on disk (a crash must not
    /// hand out again a seq a replayed frame carried: L57).
    pub replays_waiting: Vec<Replay>,
    /// Replays that wait for their connection's queue to drain.
    pub replays_paused: Vec<Replay>,
}

impl Journal {
    pub fn new(config: JournalConfig) -> Journal {
        Journal {
            config,
            seqs: Seqs::default(),
            next_ticket: 0,
            waiting: VecDeque::new(),
            next_read: 0,
            reads: HashMap::new(),
            gate: VecDeque::new(),
            gate_bytes: 0,
            committed: 0,
            kept: None,
            replays_waiting: Vec::new(),
            replays_paused: Vec::new(),
        }
    }
}

/// A journal entry being written, before its key's details.
pub(super) struct NewEntry<'a> {
    pub device: &'a DeviceId,
    pub key: String,
    pub seq: u64,
    pub first_seq: u64,
    pub at: Time,
    pub held: bool,
    pub deadline: Option<Time>,
    pub body: Body,
    pub blob: Option<Vec<u8>>,
}

/// `frames`, each with `seq` (none without a journal: seq 0).
pub(super) fn stamp(frames: Vec<String>, seq: u64) -> Vec<String> {
    if seq == 0 {
        return frames;
    }
    frames.into_iter().map(|f| with_seq(f, seq)).collect()
}

impl Gateway {
    pub(super) fn journal_on(&self) -> bool {
        self.journal.is_some()
    }

    pub(super) fn history_on(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| j.config.history)
    }

    pub(super) fn keep(&mut self, record: Record) {
        if self.journal.is_some() {
            self.outputs.push_back(Output::Journal(record));
        }
    }

    /// How many `forget`s of `device` wait for their commit.
    pub(super) fn forgets_waiting(&self, device: &DeviceId) -> usize {
        self.journal.as_ref().map_or(0, |j| {
            j.waiting
                .iter()
                .filter(|(_, w)| matches!(w, Waiting::Forgotten { device: d, .. } if d == device))
                .count()
        })
    }

    /// `frame` goes to `conn` once what came before it is committed (at once without a
    /// journal).
    pub(super) fn send_after_commit(&mut self, conn: ConnId, frame: String) {
        if self.journal_on() {
            self.hold_back(conn);
            if let Some(c) = self.conns.get_mut(&conn) {
                c.commits_awaited += 1;
            }
            self.confirm(Waiting::Release(conn));
        }
        self.send(conn, frame);
    }

    /// A commit that `conn`'s frames waited for is done (or failed).
    fn commit_awaited(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.commits_awaited -= 1;
            self.release(conn);
        }
    }

    /// Asks the store to confirm everything so far; `waiting` runs once it has.
    pub(super) fn confirm(&mut self, waiting: Waiting) {
        let Some(j) = self.journal.as_mut() else { return };
        j.next_ticket += 1;
        let ticket = j.next_ticket;
        j.waiting.push_back((ticket, waiting));
        self.outputs.push_back(Output::Journal(Record::Confirm { ticket }));
    }

    pub(super) fn read(&mut self, read: Read, pending: PendingRead) {
        let Some(j) = self.journal.as_mut() else { return };
        j.next_read += 1;
        let token = j.next_read;
        j.reads.insert(token, pending);
        self.outputs.push_back(Output::JournalRead { token, read });
    }

    /// The device's next seq (0 without a journal). While it is not yet reserved on disk,
    /// the device's connection holds its frames back (L57).
    pub(super) fn next_seq(&mut self, device: &DeviceId) -> u64 {
        let Some(j) = self.journal.as_mut() else { return 0 };
        let next = j.seqs.next(device);
        let safe = j.seqs.is_safe(device);
        if let Some(upto) = next.reserve {
            self.reserve(device, upto);
        }
        if !safe {
            if let Some(conn) = self.devices.get(device).and_then(|d| d.conn) {
                self.hold_back(conn);
            }
        }
        next.seq
    }

    /// A hello reserves a block ahead if the device is short of one, so its first frames
    /// seldom wait.
    pub(super) fn top_up_seqs(&mut self, device: &DeviceId) {
        if let Some(upto) = self.journal.as_mut().and_then(|j| j.seqs.top_up(device)) {
            self.reserve(device, upto);
        }
    }

    fn reserve(&mut self, device: &DeviceId, upto: u64) {
        self.keep(Record::Reserve {
            device: device.clone(),
            upto,
        });
        self.confirm(Waiting::Reserve {
            device: device.clone(),
            upto,
        });
    }

    pub(super) fn latest_seq(&self, device: &DeviceId) -> Option<u64> {
        self.journal.as_ref().map(|j| j.seqs.latest(device))
    }

    /// The device's latest seq reserved on disk (L57): `ready.seq`, `resumed.seq`.
    pub(super) fn latest_safe_seq(&self, device: &DeviceId) -> Option<u64> {
        self.journal.as_ref().map(|j| j.seqs.latest_safe(device))
    }

    pub(super) fn put(&mut self, e: NewEntry<'_>) {
        let open = e.body.t == "prompt" && e.body.closed.is_none();
        let entry = Entry {
            device: e.device.clone(),
            key: e.key,
            seq: e.seq,
            first_seq: e.first_seq,
            at: e.at,
            held: e.held,
            open,
            deadline: e.deadline,
            body: e.body.to_json(),
            blob: e.blob,
        };
        self.keep(Record::Put(entry));
    }

    /// Records an idempotency entry (I2 or S4) so that it outlives a restart.
    pub(super) fn keep_dedup(&mut self, window: Window, device: &DeviceId, id: &str, now: Time, value: String) {
        self.keep(Record::Dedup {
            window,
            device: device.clone(),
            id: id.to_owned(),
            at: now,
            value,
        });
    }

    /// Held output the device will not get from its hold any more (sent, expired, dropped).
    pub(super) fn keep_unheld(&mut self, device: &DeviceId, keys: Vec<String>) {
        if !keys.is_empty() {
            self.keep(Record::Sent {
                device: device.clone(),
                keys,
            });
        }
    }

    /// `received` for a message accepted (or a duplicate of one) on a connection that
    /// resumed, once it is on disk (L58). A duplicate whose `received` is already on its
    /// way adds nothing: a flood of re-sends during a slow commit costs no memory.
    pub(super) fn confirm_received(&mut self, conn: ConnId, id: &str, seq: u64) {
        let resumed = self.conns.get(&conn).is_some_and(|c| c.resumed);
        let pending = self.journal.as_ref().is_some_and(|j| {
            j.waiting
                .iter()
                .any(|(_, w)| matches!(w, Waiting::Received { conn: c, id: i, .. } if *c == conn && i == id))
        });
        if resumed && seq > 0 && !pending {
            self.confirm(Waiting::Received {
                conn,
                id: id.to_owned(),
                seq,
            });
        }
    }

    /// Everything up to `ticket` is on disk.
    pub fn handle_journal_committed(&mut self, now: Time, ticket: u64) {
        self.now = self.now.max(now);
        self.open_gate(ticket);
        while let Some(waiting) = self.pop_waiting(ticket) {
            match waiting {
                Waiting::Reserve { device, upto } => {
                    if let Some(j) = self.journal.as_mut() {
                        j.seqs.reserved(&device, upto);
                    }
                    self.seqs_settled(&device);
                }
                Waiting::Received { conn, id, seq } => {
                    let frame = encode("received", &Received { id: id.into(), seq });
                    self.send_if_open(conn, frame);
                }
                Waiting::HeldDelivery(d) => self.held_delivery_kept(*d),
                Waiting::Release(conn) => self.commit_awaited(conn),
                Waiting::Forgotten { conn, id, .. } => {
                    let frame = encode("forgotten", &crate::wire::journal::Forgotten { id: id.into() });
                    self.send_if_open(conn, frame);
                }
                Waiting::Events => {}
                Waiting::Promised(_) => {}
                Waiting::CardAnswer { request, option_id } => self.card_answer_settled(request, option_id, true),
                Waiting::Paired(p) => self.pair_settled(*p, true),
                Waiting::Revoked(r) => self.revoke_settled(*r, true),
                Waiting::Notify(n) => self.outputs.push_back(Output::Notify(*n)),
            }
        }
    }

    /// The records up to `ticket` could not be kept: nothing that promised them is sent;
    /// a held `deliver` gets `device_offline` so its sender retries (issue 24 §4).
    pub fn handle_journal_failed(&mut self, now: Time, ticket: u64) {
        self.now = self.now.max(now);
        // The person's messages still reach the agent (at least once beats never); only
        // `received` is not sent, so the client keeps it until a later confirmation.
        // Only what waits now failed: a reservation asked again below gets a new ticket.
        let ticket = self.journal.as_ref().map_or(0, |j| j.next_ticket.min(ticket));
        self.owe_again(ticket);
        self.open_gate(ticket);
        while let Some(waiting) = self.pop_waiting(ticket) {
            match waiting {
                Waiting::Reserve { device, .. } => {
                    // Frames that waited for the block go now (L62: the gateway goes on
                    // serving); the device's next seq asks for a block again.
                    if let Some(j) = self.journal.as_mut() {
                        j.seqs.reserve_failed(&device);
                    }
                    self.seqs_settled(&device);
                }
                Waiting::Received { conn, id, .. } => {
                    log::warn!("{conn:?}: message {id:?} not confirmed: the journal could not keep it");
                }
                Waiting::HeldDelivery(d) => self.undo_held_delivery(*d),
                Waiting::Promised(p) => self.undo_promise(*p),
                Waiting::Release(conn) => self.commit_awaited(conn),
                Waiting::Forgotten { conn, id, .. } => {
                    let r = Rejection::new(ErrorCode::InternalError, "the journal could not forget");
                    if self.conns.contains_key(&conn) {
                        self.send_error(conn, &r.with_id(Some(&id)), false);
                    }
                }
                Waiting::Events => {}
                Waiting::CardAnswer { request, option_id } => self.card_answer_settled(request, option_id, false),
                Waiting::Paired(p) => self.pair_settled(*p, false),
                Waiting::Revoked(r) => self.revoke_settled(*r, false),
                Waiting::Notify(n) => self.outputs.push_back(Output::Notify(*n)),
            }
        }
    }

    /// The device's reservation settled: what waited for it (a replay, held-back frames)
    /// goes on.
    fn seqs_settled(&mut self, device: &DeviceId) {
        self.start_waiting_replays(device);
        if let Some(conn) = self.devices.get(device).and_then(|d| d.conn) {
            self.release(conn);
        }
    }

    /// An event for the agent that may go only once everything before it is on disk. It is
    /// owed to the agent in the same commit, until the agent has it (L64).
    pub(super) fn event_after_commit(&mut self, event: AgentEvent) {
        if !self.journal_on() {
            return self.events.push_back(event);
        }
        if let Some(row) = owed::owe(&event, self.now) {
            self.keep(Record::Owe(row));
        }
        self.confirm(Waiting::Events);
        if let Some(j) = self.journal.as_mut() {
            j.gate_bytes += owed::event_size(&event);
            j.gate.push_back((j.next_ticket, event));
        }
    }

    /// Whether a message of `bytes` may wait for its commit now: always when nothing
    /// waits, so that one phone alone can always send its largest file.
    pub(super) fn gate_has_room(&self, bytes: usize) -> bool {
        self.journal
            .as_ref()
            .is_none_or(|j| j.gate.is_empty() || j.gate_bytes + bytes <= MAX_GATE_BYTES)
    }

    /// The agent has the event (it was written to the agent, or an in-process agent took
    /// it), or it was given up: it is owed no more (L64).
    pub fn handle_agent_handed(&mut self, event: EventKey) {
        if self.journal_on() {
            let EventKey { device, key } = event;
            self.keep(Record::Handed { device, key });
        }
    }

    /// The events a failed commit lets through are owed again, in the next transaction:
    /// their rows went with the failed one, and one whose line then dies unwritten could
    /// not be read back for the next agent, nor handed over again after a restart (L64,
    /// review E #5).
    ///
    /// Once: if that transaction fails too, they are not kept again. Keeping them for a
    /// third try would hold them, and write them again and again, for as long as the disk
    /// fails (review G #1), and could owe again an event the agent has had since, whose
    /// hand-over mark went with the failed transaction (review G #2). The agent has them
    /// either way; only a restart before it does would lose them.
    fn owe_again(&mut self, ticket: u64) {
        let Some(j) = self.journal.as_ref() else { return };
        let rows: Vec<Owed> = j
            .gate
            .iter()
            .take_while(|(t, _)| *t <= ticket)
            .filter_map(|(_, event)| owed::owe(event, self.now))
            .collect();
        for row in rows {
            self.keep(Record::Owe(row));
        }
    }

    /// Lets the agent have the events whose commit is done, in order.
    fn open_gate(&mut self, ticket: u64) {
        let Some(j) = self.journal.as_mut() else { return };
        j.committed = j.committed.max(ticket);
        while j.gate.front().is_some_and(|(t, _)| *t <= j.committed) {
            if let Some((_, event)) = j.gate.pop_front() {
                j.gate_bytes -= owed::event_size(&event);
                self.events.push_back(event);
            }
        }
    }

    fn pop_waiting(&mut self, ticket: u64) -> Option<Waiting> {
        let j = self.journal.as_mut()?;
        if j.waiting.front().is_some_and(|(t, _)| *t <= ticket) {
            j.waiting.pop_front().map(|(_, w)| w)
        } else {
            None
        }
    }

    /// Frames for `conn` wait in order until [`Gateway::release`].
    pub(super) fn hold_back(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.held_back.get_or_insert_with(Vec::new);
        }
    }

    /// Lets `conn`'s frames go once nothing holds them back: no replay under way and
    /// every seq its device was given reserved on disk.
    pub(super) fn release(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else { return };
        if c.held_back.is_none() || c.replaying || c.commits_awaited > 0 {
            return;
        }
        let safe = match &c.state {
            super::ConnState::Ready { device, .. } => self.journal.as_ref().is_none_or(|j| j.seqs.is_safe(device)),
            super::ConnState::AwaitingHello => true,
        };
        if !safe {
            return;
        }
        let frames = self
            .conns
            .get_mut(&conn)
            .and_then(|c| {
                c.held_back_bytes = 0;
                c.held_back.take()
            })
            .unwrap_or_default();
        for frame in frames {
            self.outputs.push_back(Output::Send { conn, frame });
        }
        let hold_waits = self
            .conns
            .get_mut(&conn)
            .map(|c| std::mem::take(&mut c.hold_on_release));
        if let (Some(true), Some(device)) = (hold_waits, self.device_of(conn)) {
            self.flush_hold(conn, &device);
        }
    }

    fn device_of(&self, conn: ConnId) -> Option<DeviceId> {
        match &self.conns.get(&conn)?.state {
            super::ConnState::Ready { device, .. } => Some(device.clone()),
            super::ConnState::AwaitingHello => None,
        }
    }

    pub(super) fn send_if_open(&mut self, conn: ConnId, frame: String) {
        if self.conns.contains_key(&conn) {
            self.send(conn, frame);
        }
    }
}
