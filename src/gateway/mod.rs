//! The gateway: one state machine over every connection, device, card and upload.
//!
//! Methods come in three kinds (as in quinn-proto): getters; `handle_*`, which feed an input
//! at a given `now`; and `poll_*`, which drain what the inputs produced. After any `handle_*`
//! call, drain `poll_output` and `poll_event` until they return `None`, then sleep until
//! `poll_timeout` and call `handle_timeout`. `handle_timeout` may be called early or twice:
//! it only acts on what is really due.

mod card_answer;
mod deliver;
mod device;
mod inbound;
mod journal;
mod keep;
mod media;
mod outbound;
mod paired;
mod promises;
mod push;
mod resume;
mod timers;

use std::collections::{HashMap, VecDeque};

use crate::agent::AgentEvent;
use crate::auth::Role;
use crate::config::Config;
use crate::dedup::Dedup;
use crate::ids::{ConnId, DeviceId, IdGen};
use crate::limits::{CLOSE_POLICY, DEDUP_CAPACITY, DEDUP_TOTAL_CAPACITY, MAX_KNOWN_DEVICES};
use crate::prompts::Prompts;
use crate::time::Time;
use crate::uploads::Uploads;
use crate::wire::server::{encode, ErrorFrame};
use crate::wire::Rejection;

pub use card_answer::CardAnswered;
pub(crate) use device::AvatarState;
use device::Device;
use device::MAX_STREAMS_PER_DEVICE;
pub use paired::{PairOutcome, PairRequest, RevokeOutcome};
use timers::{claim, TimerKey, Timers};

/// What the driver knows about a connection's peer when it is accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peer {
    /// The TCP peer is 127.0.0.0/8 or ::1.
    pub loopback: bool,
    /// The upgrade request carried a header that a proxy adds (`Forwarded`,
    /// `X-Forwarded-For`, `X-Real-IP`, `Via` …: decisions S1, L53).
    pub forwarded: bool,
    /// Whose failed `hello`s this connection's count with (L52): the peer's address, or
    /// the client address a local proxy reported.
    pub source: crate::throttle::SourceKey,
}

/// Something for the driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send one text WebSocket message.
    Send { conn: ConnId, frame: String },
    /// Close with this code and reason, after the frames already queued. The gateway has
    /// forgotten the connection: nothing more will be sent to it.
    Close {
        conn: ConnId,
        code: u16,
        reason: &'static str,
    },
    /// The connection passed `hello` (for the driver's logs, and to stop notifying it).
    Authenticated {
        conn: ConnId,
        device: DeviceId,
        service: bool,
    },
    /// Notify a device that has no live connection (issue 18): by Web Push to its
    /// [`Gateway::push_subscriptions`], and by ntfy when that is set.
    Notify(crate::push::Notification),
    /// The push subscriptions changed: keep [`Gateway::push_snapshot`].
    PushChanged,
    /// Keep this in the journal, in order (issue 24). A `Confirm` asks for
    /// [`Gateway::handle_journal_committed`] once everything before it is on disk.
    Journal(crate::journal::Record),
    /// Read the journal, in order with the records; answer with
    /// [`Gateway::handle_journal_read`].
    JournalRead { token: u64, read: crate::journal::Read },
    /// Keep a file sent to a device in the media store as `name` (L63); answer with
    /// [`Gateway::handle_media_saved`] or [`Gateway::handle_media_failed`].
    SaveMedia { name: String, data: Vec<u8> },
    /// Delete every file of this device from the media store (`forget`, L60): those whose
    /// key begins with the device's digest ([`crate::media::key_is_for`]), after the saves
    /// asked for before it (in order with [`Output::SaveMedia`] and the saves of uploads).
    DeleteMedia { device: DeviceId },
    /// How [`Gateway::handle_card_answer`]'s `request` went: the answer to send the
    /// notification's button (issue 25).
    CardAnswered { request: u64, outcome: CardAnswered },
    /// How [`Gateway::handle_pair`]'s `request` went (issue 26).
    Paired { request: u64, outcome: PairOutcome },
    /// How [`Gateway::handle_revoke`]'s `request` went (issue 26).
    Revoked { request: u64, outcome: RevokeOutcome },
}

/// Counters for health checks, tests and memory accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub connections: usize,
    pub authenticated: usize,
    pub devices_online: usize,
    pub devices_known: usize,
    pub open_uploads: usize,
    pub upload_bytes: usize,
    /// Memory unfinished uploads hold (bytes, reserved room, bookkeeping): what L51 bounds,
    /// as the totals keep it.
    pub upload_held: usize,
    /// The same, summed over the connections: a test checks the totals against it.
    pub upload_held_by_conn: usize,
    pub held_bytes: usize,
    pub open_prompts: usize,
    pub dedup_entries: usize,
    pub timers: usize,
}

#[derive(Debug)]
enum ConnState {
    AwaitingHello,
    /// `owner`: it may list and revoke devices (issue 26).
    Ready {
        device: DeviceId,
        role: Role,
        owner: bool,
    },
}

#[derive(Debug)]
struct Conn {
    peer: Peer,
    state: ConnState,
    uploads: Uploads,
    stall_slot: Option<Time>,
    /// Frames waiting behind a replay or a seq reservation (issue 24, L57, L58).
    held_back: Option<Vec<String>>,
    held_back_bytes: usize,
    /// Its `resume` replay is being read.
    replaying: bool,
    /// It sent `resume`: it gets `received` and `resumed` (L58).
    resumed: bool,
    /// Its device's hold goes to it once its frames are released (a `hello` without
    /// `resume` while seqs wait for their reservation): until then the hold keeps it.
    hold_on_release: bool,
    /// Commits its frames wait for (`Gateway::send_after_commit`).
    commits_awaited: u32,
}

/// Frames one connection may have waiting behind a replay or a seq reservation (L58):
/// past it, it is closed with 1013 to resume later.
const MAX_HELD_BACK_BYTES: usize = 4 * 1024 * 1024;

/// The timer heap is never swept below this many entries.
const TIMERS_COMPACT_MIN: usize = 1024;

/// The Protocol v1 state machine. See the module docs for the run-loop rule.
#[derive(Debug)]
pub struct Gateway {
    config: Config,
    ids: IdGen,
    conns: HashMap<ConnId, Conn>,
    devices: HashMap<DeviceId, Device>,
    /// `text`/`audio`/`media` ids per device (I1, I2), with their journal seq (0 without).
    seen: Dedup<u64>,
    /// `deliver` ids per sender, remembering the device reached (S4).
    delivered: Dedup<String>,
    prompts: Prompts,
    /// Web Push subscriptions per device (issue 18).
    push: crate::push::Registry,
    timers: Timers,
    sweep_slot: Option<Time>,
    prompts_slot: Option<Time>,
    /// The timer heap's size past which stale entries are swept out (doubles with it).
    timers_compact_at: usize,
    /// Failed `hello`s per source address (L52).
    throttle: crate::throttle::Throttle,
    /// What every connection's uploads hold together (L31, L51).
    upload_totals: crate::uploads::UploadTotals,
    outputs: VecDeque<Output>,
    events: VecDeque<AgentEvent>,
    /// The latest `now` any input carried: the clock for bookkeeping deep in a call chain.
    now: Time,
    /// The journal (issue 24); `None` when the driver keeps none.
    journal: Option<journal::Journal>,
    /// What the media store keeps (L63).
    media: media::MediaState,
    /// Paired devices, pairing codes and failed pairings (issue 26).
    pairing: paired::Pairing,
}

impl Gateway {
    pub fn new(config: Config) -> Gateway {
        let window = config.dedup_window;
        Gateway {
            ids: IdGen::new(config.seed),
            journal: config.journal.map(journal::Journal::new),
            conns: HashMap::new(),
            devices: HashMap::new(),
            seen: Dedup::new(window, DEDUP_CAPACITY, DEDUP_TOTAL_CAPACITY),
            delivered: Dedup::new(window, DEDUP_CAPACITY, DEDUP_TOTAL_CAPACITY),
            prompts: Prompts::new(window),
            push: crate::push::Registry::default(),
            timers: Timers::default(),
            sweep_slot: None,
            prompts_slot: None,
            timers_compact_at: TIMERS_COMPACT_MIN,
            throttle: Default::default(),
            upload_totals: Default::default(),
            outputs: VecDeque::new(),
            events: VecDeque::new(),
            now: Time::ZERO,
            media: Default::default(),
            pairing: Default::default(),
            config,
        }
    }

    // ----- getters -----

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn stats(&self) -> Stats {
        let conns = self.conns.values();
        Stats {
            connections: self.conns.len(),
            authenticated: self
                .conns
                .values()
                .filter(|c| matches!(c.state, ConnState::Ready { .. }))
                .count(),
            devices_online: self.devices.values().filter(|d| d.conn.is_some()).count(),
            devices_known: self.devices.len(),
            open_uploads: conns.clone().map(|c| c.uploads.open_count()).sum(),
            upload_bytes: conns.map(|c| c.uploads.buffered()).sum(),
            upload_held: self.upload_totals.held(),
            upload_held_by_conn: self.conns.values().map(|c| c.uploads.held()).sum(),
            held_bytes: self.devices.values().map(|d| d.hold.bytes()).sum(),
            open_prompts: self.prompts.open_count(),
            dedup_entries: self.seen.len() + self.delivered.len(),
            timers: self.timers.len(),
        }
    }

    /// Memory every unfinished upload holds together (L51), for the server's share check.
    pub fn upload_held(&self) -> usize {
        self.upload_totals.held()
    }

    /// Decoded bytes held by one device's unfinished uploads (U2).
    pub fn upload_bytes(&self, device: &DeviceId) -> usize {
        self.devices
            .get(device)
            .and_then(|d| d.conn)
            .and_then(|c| self.conns.get(&c))
            .map_or(0, |c| c.uploads.buffered())
    }

    pub fn is_online(&self, device: &DeviceId) -> bool {
        self.devices.get(device).is_some_and(|d| d.conn.is_some())
    }

    // ----- inputs -----

    /// A TCP connection was accepted. The hello timeout runs from now (H7).
    pub fn handle_open(&mut self, now: Time, conn: ConnId, peer: Peer) {
        self.now = self.now.max(now);
        if self.conns.contains_key(&conn) {
            log::error!("connection {conn:?} opened twice; ignoring the second open");
            return;
        }
        self.conns.insert(
            conn,
            Conn {
                peer,
                state: ConnState::AwaitingHello,
                uploads: Uploads::default(),
                stall_slot: None,
                held_back: None,
                held_back_bytes: 0,
                replaying: false,
                resumed: false,
                hold_on_release: false,
                commits_awaited: 0,
            },
        );
        self.timers.push(now + self.config.hello_timeout, TimerKey::Hello(conn));
    }

    /// The WebSocket layer refused a message over `MAX_FRAME_BYTES` (or, before `hello`,
    /// over `MAX_PRE_HELLO_FRAME_BYTES`, L35) before buffering it (G7).
    pub fn handle_frame_too_big(&mut self, _now: Time, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else { return };
        let message = match c.state {
            ConnState::AwaitingHello => "frame before hello is over 64 KiB",
            ConnState::Ready { .. } => "frame is over 16 MiB",
        };
        self.fail(conn, Rejection::too_big(message));
    }

    /// The connection is gone (closed by the peer, or an I/O error). Its uploads are freed.
    /// Calling it for a connection the gateway already closed is fine.
    pub fn handle_close(&mut self, now: Time, conn: ConnId) {
        self.now = self.now.max(now);
        self.forget_conn(conn);
    }

    /// Fires what is due at `now`. Safe to call spuriously.
    pub fn handle_timeout(&mut self, now: Time) {
        self.now = self.now.max(now);
        while let Some((at, key)) = self.timers.pop_due(now) {
            match key {
                TimerKey::Hello(conn) => {
                    let waiting = self
                        .conns
                        .get(&conn)
                        .is_some_and(|c| matches!(c.state, ConnState::AwaitingHello));
                    if waiting {
                        // decisions G10, H7; the code is our choice, see docs/decisions-local.md.
                        self.fail(conn, Rejection::bad_frame("hello timeout"));
                    }
                }
                TimerKey::Uploads(conn) => self.on_upload_timer(now, at, conn),
                TimerKey::Idle(device) => self.on_idle_timer(now, at, device),
                TimerKey::Hold(device) => self.on_hold_timer(now, at, device),
                TimerKey::Unkept(device) => self.on_unkept_timer(now, at, device),
                TimerKey::Forget(device) => {
                    if let Some(d) = self.devices.get_mut(&device) {
                        if claim(&mut d.forget_slot, at) {
                            self.forget_device_if_unused(&device);
                        }
                    }
                }
                TimerKey::Prompts => {
                    if claim(&mut self.prompts_slot, at) {
                        for id in self.prompts.due(now) {
                            self.expire_prompt(now, id);
                        }
                        self.arm_prompts();
                    }
                }
                TimerKey::Sweep => {
                    if claim(&mut self.sweep_slot, at) {
                        self.seen.expire(now);
                        self.delivered.expire(now);
                        self.prompts.expire_closed(now);
                        self.throttle.sweep(now);
                        self.arm_sweep(now);
                    }
                }
            }
        }
    }

    // ----- outputs -----

    pub fn poll_output(&mut self) -> Option<Output> {
        self.compact_timers_if_due();
        self.outputs.pop_front()
    }

    /// Drops timer entries whose owner is gone or has re-armed (lazily cancelled ones), once
    /// the heap has doubled since the last sweep: amortized O(1) per entry, and the heap stays
    /// within about twice the live timers (issue 8: records evicted at their cap, L32, left
    /// 132,000 entries behind in an abuse run).
    fn compact_timers_if_due(&mut self) {
        if self.timers.len() <= self.timers_compact_at {
            return;
        }
        let (conns, devices) = (&self.conns, &self.devices);
        let (sweep_slot, prompts_slot) = (self.sweep_slot, self.prompts_slot);
        self.timers.retain(|at, key| match key {
            TimerKey::Hello(conn) => conns.contains_key(conn),
            TimerKey::Uploads(conn) => conns.get(conn).is_some_and(|c| c.stall_slot == Some(at)),
            TimerKey::Idle(d) => devices.get(d).is_some_and(|d| d.idle_slot == Some(at)),
            TimerKey::Hold(d) => devices.get(d).is_some_and(|d| d.hold_slot == Some(at)),
            TimerKey::Forget(d) => devices.get(d).is_some_and(|d| d.forget_slot == Some(at)),
            TimerKey::Prompts => prompts_slot == Some(at),
            TimerKey::Sweep => sweep_slot == Some(at),
            TimerKey::Unkept(d) => devices.get(d).is_some_and(|d| d.unkept_slot == Some(at)),
        });
        self.timers_compact_at = (self.timers.len() * 2).max(TIMERS_COMPACT_MIN);
    }

    pub fn poll_event(&mut self) -> Option<AgentEvent> {
        let event = self.events.pop_front()?;
        self.upload_released(&event);
        Some(event)
    }

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.next()
    }

    // ----- plumbing shared by the submodules -----

    /// Tells the agent, in order behind any event that waits for a commit.
    fn event(&mut self, event: AgentEvent) {
        match self.journal.as_mut().filter(|j| !j.gate.is_empty()) {
            Some(j) => j.gate.push_back((0, event)),
            None => self.events.push_back(event),
        }
    }

    fn send(&mut self, conn: ConnId, frame: String) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return; // closed meanwhile (a reply's chunks after a close for a stalled journal)
        };
        if c.held_back.is_some() {
            c.held_back_bytes += frame.len();
            if c.held_back_bytes <= MAX_HELD_BACK_BYTES {
                c.held_back.get_or_insert_with(Vec::new).push(frame);
                return;
            }
            // A disk that stalls must not let one device's frames grow without bound: what
            // is kept is in the journal and a resume gets it; what comes next is held.
            log::warn!("{conn:?}: over {MAX_HELD_BACK_BYTES} bytes wait behind the journal; closed to resume later");
            c.held_back = None;
            self.close(conn, crate::limits::CLOSE_TRY_AGAIN, "journal busy");
            return;
        }
        self.outputs.push_back(Output::Send { conn, frame });
    }

    fn send_error(&mut self, conn: ConnId, rejection: &Rejection, fatal: bool) {
        let frame = encode(
            "error",
            &ErrorFrame {
                code: rejection.code.as_str().into(),
                message: rejection.message.as_ref().into(),
                fatal,
                id: rejection.id.as_deref().map(Into::into),
            },
        );
        self.send(conn, frame);
    }

    /// A fatal error: the `error` frame, then close 1008 with the code as reason (G10).
    fn fail(&mut self, conn: ConnId, rejection: Rejection) {
        log::info!("{conn:?}: fatal {}: {}", rejection.code.as_str(), rejection.message);
        self.send_error(conn, &rejection, true);
        self.close(conn, CLOSE_POLICY, rejection.code.as_str());
    }

    fn close(&mut self, conn: ConnId, code: u16, reason: &'static str) {
        // What waited behind a replay goes before the close (an error frame, say), except
        // seqs the client must not keep: ones not yet reserved on disk (L57), and any while
        // the replay has not sent everything below them (L58: the client's next resume
        // would skip the rest). The journal has those entries for the next resume; with
        // history off it has not, and they go without their seq.
        let seqs_ok = self.conns.get(&conn).is_none_or(|c| match &c.state {
            ConnState::Ready { device, .. } => {
                !c.replaying && c.commits_awaited == 0 && self.latest_safe_seq(device) == self.latest_seq(device)
            }
            ConnState::AwaitingHello => true,
        });
        let history = self.history_on();
        let waiting = self.conns.get_mut(&conn).and_then(|c| c.held_back.take());
        for frame in waiting.unwrap_or_default() {
            let frame = match (seqs_ok || !crate::wire::journal::has_seq(&frame), history) {
                (true, _) => frame,
                (false, true) => continue,
                (false, false) => crate::wire::journal::without_seq(frame),
            };
            self.outputs.push_back(Output::Send { conn, frame });
        }
        if self.forget_conn(conn) {
            self.outputs.push_back(Output::Close { conn, code, reason });
        }
    }

    /// Drops a connection and everything that lives with it. Returns whether it existed.
    fn forget_conn(&mut self, conn: ConnId) -> bool {
        let Some(c) = self.conns.remove(&conn) else {
            return false;
        };
        self.upload_totals.update(c.uploads.footprint(), Default::default());
        if let Some(j) = self.journal.as_mut() {
            j.replays_waiting.retain(|r| r.conn != conn);
            j.replays_paused.retain(|r| r.conn != conn);
        }
        if let ConnState::Ready {
            device,
            role: Role::Device,
            ..
        } = c.state
        {
            if let Some(d) = self.devices.get_mut(&device) {
                if d.conn == Some(conn) {
                    d.conn = None;
                    let held = !d.hold.is_empty();
                    self.paired_seen(&device);
                    self.event(AgentEvent::DeviceOffline { device: device.clone() });
                    if held {
                        // A replay cut short left its hold, whose timer it had stopped.
                        self.arm_hold(self.now, &device);
                    }
                }
            }
            self.forget_device_if_unused(&device);
        }
        true
    }

    /// Forgets the device if nothing waits for it; if only its reply bookkeeping does, the
    /// forget timer is armed for when that ends.
    fn forget_device_if_unused(&mut self, device: &DeviceId) {
        let now = self.now;
        let Some(d) = self.devices.get_mut(device) else { return };
        if d.is_forgettable(now) {
            self.devices.remove(device);
        } else if let Some(until) = d.retain_until.filter(|t| *t > now && d.conn.is_none()) {
            self.timers
                .arm(&mut d.forget_slot, until, TimerKey::Forget(device.clone()));
        }
    }

    /// The device's record, created if new. Past `MAX_KNOWN_DEVICES` (L32), the offline
    /// device idle the longest is forgotten first, with whatever it held: anyone with the
    /// app token can mint device ids, and each may hold output and dedup entries.
    fn device_entry(&mut self, device: &DeviceId) -> &mut Device {
        if !self.devices.contains_key(device) && self.devices.len() >= MAX_KNOWN_DEVICES {
            let oldest = self
                .devices
                .iter()
                .filter(|(_, d)| d.conn.is_none())
                .min_by_key(|(_, d)| d.last_active)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                log::info!("device {oldest:?}: forgotten, {MAX_KNOWN_DEVICES} devices known (L32)");
                if let Some(mut gone) = self.devices.remove(&oldest) {
                    // Its hold goes with it on disk too, or a restart would bring it back.
                    let keys = gone.hold.take().iter().map(|h| h.key()).collect();
                    self.keep_unheld(&oldest, keys);
                }
            }
        }
        let now = self.now;
        let d = self.devices.entry(device.clone()).or_insert_with(Device::new);
        d.last_active = now;
        d
    }

    /// Makes room for `bytes` more held output in all (L32): the oldest held output of any
    /// device goes first. `false` if it cannot fit even then.
    fn make_hold_room(&mut self, bytes: usize) -> bool {
        let mut total: usize = self.devices.values().map(|d| d.hold.bytes()).sum();
        let mut gone: Vec<(DeviceId, String)> = Vec::new();
        let cap = self.config.max_held_total;
        let mut fits = true;
        while total + bytes > cap {
            let oldest = self
                .devices
                .iter_mut()
                // An online device's hold is being replayed to it (L58): not taken from under it.
                .filter(|(_, d)| d.conn.is_none())
                .filter_map(|(id, d)| d.hold.oldest().map(|at| (at, id, d)))
                .min_by_key(|(at, _, _)| *at);
            let Some((_, id, d)) = oldest else {
                fits = false;
                break;
            };
            let (freed, key) = d.hold.drop_oldest();
            total -= freed;
            gone.extend(key.map(|k| (id.clone(), k)));
        }
        if !gone.is_empty() {
            log::info!(
                "dropped {} held outputs: {cap} bytes held for offline devices (L32)",
                gone.len()
            );
        }
        for (device, key) in gone {
            self.keep_unheld(&device, vec![key]);
        }
        fits
    }

    /// Arms the cards' one timer for the earliest open card.
    fn arm_prompts(&mut self) {
        if let Some(at) = self.prompts.next_expiry() {
            self.timers.arm(&mut self.prompts_slot, at, TimerKey::Prompts);
        }
    }

    fn arm_sweep(&mut self, now: Time) {
        if !(self.seen.is_empty() && self.delivered.is_empty() && self.throttle.is_empty()) {
            let at = now + self.config.dedup_window / 10;
            self.timers.arm(&mut self.sweep_slot, at, TimerKey::Sweep);
        }
    }

    fn on_upload_timer(&mut self, now: Time, at: Time, conn: ConnId) {
        let stall = self.config.upload_stall;
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if !claim(&mut c.stall_slot, at) {
            return;
        }
        let before = c.uploads.footprint();
        for id in c.uploads.expire(now, stall) {
            log::debug!("{conn:?}: dropped stalled upload {id:?} (U5)");
        }
        self.upload_totals.update(before, c.uploads.footprint());
        if let Some(next) = c.uploads.next_deadline(stall) {
            self.timers.arm(&mut c.stall_slot, next, TimerKey::Uploads(conn));
        }
    }

    fn on_hold_timer(&mut self, now: Time, at: Time, device: DeviceId) {
        let max_age = self.hold_time(&device);
        let Some(d) = self.devices.get_mut(&device) else { return };
        if !claim(&mut d.hold_slot, at) {
            return;
        }
        let dropped = d.hold.expire(now, max_age);
        if !dropped.is_empty() {
            log::info!(
                "device {device:?}: dropped {} held outputs after {}s offline (M4)",
                dropped.len(),
                max_age.as_secs()
            );
        }
        if let Some(next) = d.hold.next_deadline(max_age) {
            self.timers.arm(&mut d.hold_slot, next, TimerKey::Hold(device.clone()));
        }
        self.keep_unheld(&device, dropped);
        self.forget_device_if_unused(&device);
    }
}
