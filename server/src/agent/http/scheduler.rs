//! Who talks to the backend when: a device's inbox (bounded), one turn per device, at most
//! `concurrency` turns at once, served fairly, and which devices stay in memory.

use std::collections::VecDeque;

use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::upstream::{Coalescer, History};
use hermes_mobile::{AgentCommand, DeviceId, MessageId, Time};

use super::conversation;
use super::input::Input;
use super::sentences as say;
use super::turn::{Turn, TurnPhase};
use super::{HttpAgent, Load, CONVERSATION_LIMIT, INBOX_BYTES, INBOX_LIMIT, INBOX_TOTAL_BYTES, MAX_RESIDENT};

#[derive(Debug)]
pub(super) struct Device {
    pub history: History,
    /// Counts `/new`s: a header with `{conversation}` names a fresh session after one.
    pub conversation: u64,
    /// Its file is being read: turns wait for it.
    pub loading: bool,
    /// `/new` came while the file was read.
    pub new_pending: bool,
    /// Its file could not be read: it is not overwritten (see `conversation_loaded`).
    pub unsaved: bool,
    pub inbox: VecDeque<Input>,
    pub turn: Option<Turn>,
    /// Waiting for a backend slot (in `HttpAgent::waiting`).
    pub queued: bool,
    pub last_active: Time,
}

impl Device {
    fn idle(&self) -> bool {
        self.turn.is_none() && self.inbox.is_empty() && !self.queued && !self.loading
    }

    fn inbox_bytes(&self) -> usize {
        self.inbox.iter().map(Input::size).sum()
    }

    /// A turn runs or waits: a message outside a turn does not end the phone's turn.
    pub fn busy(&self) -> bool {
        self.turn.is_some() || self.queued || !self.inbox.is_empty()
    }
}

impl HttpAgent {
    /// The device's state; a device not in memory is created and its saved conversation
    /// read (its turns wait for that).
    pub(super) fn device(&mut self, now: Time, device: &DeviceId) -> &mut Device {
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

    /// A message for a turn; `owed`: its key, handed once it is answered or dropped.
    pub(super) fn on_message(&mut self, now: Time, device: DeviceId, mut input: Input, owed: Option<EventKey>) {
        let d = self.device(now, &device);
        let busy = d.turn.is_some() || d.queued || d.loading || !d.inbox.is_empty();
        let full = d.inbox.len() >= INBOX_LIMIT || d.inbox_bytes() + input.size() > INBOX_BYTES;
        let all: usize = self.devices.values().map(Device::inbox_bytes).sum();
        let d = self.devices.get_mut(&device).expect("made by device() above");
        let full = full || all + input.size() > INBOX_TOTAL_BYTES;
        if busy && full {
            self.say(&device, say::INBOX_FULL.into());
            self.handed.extend(owed);
            return;
        }
        input.owed = owed;
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
        let message = MessageId(self.id("r"));
        let turn = Turn::new(input, message, now, Coalescer::new(self.settings.edit_interval));
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

    /// Looks at the inboxes of devices whose turn ended, then gives free slots to the
    /// devices waiting for one.
    pub(super) fn start_waiting(&mut self, now: Time) {
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

    /// One part of a finishing turn is done (the reply itself, or one of its files); after
    /// the last, the turn ends and the device's next message may go.
    pub(super) fn part_done(&mut self, device: &DeviceId) {
        let Some(turn) = self.turn_mut(device) else { return };
        let TurnPhase::Finishing { left } = &mut turn.phase else {
            return;
        };
        *left = left.saturating_sub(1);
        if *left > 0 {
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

    /// `/stop` from the phone (a gateway command): the running answer, and the messages
    /// waiting behind it.
    pub(super) fn stop(&mut self, device: &DeviceId) {
        let dropped = match self.devices.get_mut(device) {
            Some(d) => {
                let inbox = std::mem::take(&mut d.inbox);
                let n = inbox.len();
                self.handed.extend(inbox.into_iter().filter_map(|i| i.owed));
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
                0 => say::NOTHING_TO_STOP.to_owned(),
                n => say::dropped_waiting(n),
            };
            return self.note(device, text);
        };
        if turn.finishing() || (turn.stopping() && !self.backend_stops_runs()) {
            if dropped > 0 {
                self.say(device, say::dropped_waiting(dropped));
            }
            return;
        }
        log::info!("agent: {device:?}: /stop ({dropped} waiting message(s) dropped)");
        self.stop_turn(device);
    }

    /// `/new` from the phone (a gateway command).
    pub(super) fn new_conversation(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get_mut(device) else { return };
        if d.turn.is_some() || !d.inbox.is_empty() || d.queued {
            return self.say(device, say::NEW_WHILE_BUSY.into());
        }
        if d.loading {
            // Applied once the saved conversation is in, before any later message.
            d.new_pending = true;
            return;
        }
        self.reset_conversation(device);
    }

    pub(super) fn reset_conversation(&mut self, device: &DeviceId) {
        let Some(d) = self.devices.get_mut(device) else { return };
        d.history.clear();
        d.conversation += 1;
        self.persist(device);
        self.note(device, say::NEW_CONVERSATION.into());
    }
}
