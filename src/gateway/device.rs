//! What the gateway keeps per device: its connection, avatar, reply bookkeeping (M2, L32)
//! and held output (M4).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::agent::UserInfo;
use crate::hold::Hold;
use crate::ids::{ConnId, MessageId};
use crate::time::Time;

/// Avatar states (protocol-v1.md "Connection lifecycle and avatar states").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AvatarState {
    Idle,
    Thinking,
    Speaking,
}

impl AvatarState {
    /// Anything else is `idle` (M3).
    pub(super) fn parse(s: &str) -> AvatarState {
        match &*crate::text::lower(s.trim()) {
            "thinking" => AvatarState::Thinking,
            "speaking" => AvatarState::Speaking,
            _ => AvatarState::Idle,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            AvatarState::Idle => "idle",
            AvatarState::Thinking => "thinking",
            AvatarState::Speaking => "speaking",
        }
    }
}

/// Replies being streamed to a device: whether the phone has seen a version of each.
pub(super) const MAX_STREAMS_PER_DEVICE: usize = 64;
/// Recently finished reply ids remembered per device, to refuse edits after `done` (M2).
const FINISHED_MEMORY: usize = 256;

/// The last `FINISHED_MEMORY` finished reply ids: a set to ask, a queue to forget in order.
#[derive(Debug, Default)]
pub(super) struct RecentIds {
    order: VecDeque<MessageId>,
    set: HashSet<MessageId>,
}

impl RecentIds {
    pub(super) fn contains(&self, id: &MessageId) -> bool {
        self.set.contains(id)
    }

    pub(super) fn remove(&mut self, id: &MessageId) {
        if self.set.remove(id) {
            self.order.retain(|o| o != id);
        }
    }

    pub(super) fn push(&mut self, id: MessageId) {
        if self.order.len() >= FINISHED_MEMORY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        if self.set.insert(id.clone()) {
            self.order.push_back(id);
        }
    }
}

#[derive(Debug)]
pub(super) struct Device {
    pub(super) conn: Option<ConnId>,
    pub(super) name: String,
    pub(super) user: UserInfo,
    pub(super) avatar: AvatarState,
    pub(super) idle_at: Option<Time>,
    pub(super) idle_slot: Option<Time>,
    pub(super) streams: HashMap<MessageId, bool>,
    pub(super) finished: RecentIds,
    /// Replies streaming, as the journal has them: (first seq, latest seq, kept at).
    pub(super) journaled: HashMap<MessageId, (u64, u64, Time)>,
    /// Versions of those sent but not yet kept (text, edit): kept when their second is up,
    /// so the journal never stays behind a stream that stopped (issue 24 §1).
    pub(super) unkept: HashMap<MessageId, (String, bool)>,
    pub(super) unkept_slot: Option<Time>,
    pub(super) hold: Hold,
    pub(super) hold_slot: Option<Time>,
    /// Until when its reply bookkeeping (`streams`, `finished`) must outlive a disconnect,
    /// so that a reply streamed across a reconnect stays one bubble (M2, issue 8 #5).
    pub(super) retain_until: Option<Time>,
    pub(super) forget_slot: Option<Time>,
    /// The last hello or agent output, to evict the longest-idle device first (L32).
    pub(super) last_active: Time,
}

impl Device {
    pub(super) fn new() -> Device {
        Device {
            conn: None,
            name: String::new(),
            user: UserInfo::default(),
            avatar: AvatarState::Idle,
            idle_at: None,
            idle_slot: None,
            streams: HashMap::new(),
            finished: RecentIds::default(),
            journaled: HashMap::new(),
            unkept: HashMap::new(),
            unkept_slot: None,
            hold: Hold::default(),
            hold_slot: None,
            retain_until: None,
            forget_slot: None,
            last_active: Time::ZERO,
        }
    }

    /// Nothing waits for this device: it may be forgotten. Its reply bookkeeping is kept for
    /// the hold window after its last reply, then goes with it; a later version of such a
    /// reply is sent as a first version (`edit:false`).
    pub(super) fn is_forgettable(&self, now: Time) -> bool {
        self.conn.is_none()
            && self.hold.is_empty()
            && self.idle_at.is_none()
            && self.retain_until.is_none_or(|t| t <= now)
    }
}
