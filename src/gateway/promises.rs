//! Output held for an offline device whose acknowledgement is a promise (issue 24 §4):
//! the agent's `ok` (`Accepted::Kept`) or a service's `delivered` waits for the commit
//! that keeps it, a repeat (S4) waits with the first, and a failed commit undoes what was
//! held, so that the sender, told `not_kept` or `device_offline`, sends it again.

use super::journal::Waiting;
use super::Gateway;
use crate::ids::{ConnId, DeviceId, MessageId};
use crate::wire::{ErrorCode, Rejection};

#[derive(Debug)]
pub(super) struct Promise {
    pub device: DeviceId,
    /// Journal keys of what was held.
    pub keys: Vec<String>,
    /// An agent's `deliver` (sender key, id): its S4 record goes too.
    pub delivery: Option<(DeviceId, String)>,
    /// The reply this version finished (`done`): the agent may send it again under its id.
    pub finished: Option<MessageId>,
}

#[derive(Debug)]
pub(super) struct HeldDelivery {
    pub conn: ConnId,
    /// Connections that repeated it (S4) before its commit: they get the same answer.
    pub repeats: Vec<ConnId>,
    pub frame: String,
    pub sender: DeviceId,
    pub id: String,
    pub target: DeviceId,
    pub keys: Vec<String>,
}

impl Gateway {
    /// The agent's command made a promise (output held for an offline device): its
    /// confirmation waits for a commit (`Accepted::Kept`).
    pub(super) fn keep_promised(&mut self, promise: Promise) {
        if !self.journal_on() {
            return;
        }
        self.confirm(Waiting::Promised(Box::new(promise)));
        if let Some(j) = self.journal.as_mut() {
            j.kept = Some(j.next_ticket);
        }
    }

    /// The agent's repeated `deliver` waits for the first one's commit (`Accepted::Kept` with
    /// its ticket), if it still waits.
    pub(super) fn join_promise(&mut self, sender: &DeviceId, id: &str) {
        let Some(j) = self.journal.as_mut() else { return };
        let ticket = j.waiting.iter().find_map(|(t, w)| match w {
            Waiting::Promised(p) if p.delivery.as_ref().is_some_and(|(s, i)| s == sender && i == id) => Some(*t),
            _ => None,
        });
        if ticket.is_some() {
            j.kept = ticket;
        }
    }

    /// A repeat (S4) of a held delivery still waiting for its commit waits with it and gets
    /// the same answer: `delivered` before the commit could be a promise the disk breaks.
    /// Returns whether there was one to wait for.
    pub(super) fn join_held_delivery(&mut self, conn: ConnId, sender: &DeviceId, id: &str) -> bool {
        let Some(j) = self.journal.as_mut() else { return false };
        let waiting = j.waiting.iter_mut().find_map(|(_, w)| match w {
            Waiting::HeldDelivery(d) if d.sender == *sender && d.id == id => Some(d),
            _ => None,
        });
        let Some(d) = waiting else { return false };
        // Each connection is answered once: a flood of repeats costs nothing more.
        if d.conn != conn && !d.repeats.contains(&conn) {
            d.repeats.push(conn);
        }
        true
    }

    pub(super) fn held_delivery_kept(&mut self, d: HeldDelivery) {
        for conn in std::iter::once(d.conn).chain(d.repeats) {
            self.send_if_open(conn, d.frame.clone());
        }
    }

    /// The agent hears `not_kept` and sends it again: what was held for it goes, or the
    /// phone would get it twice.
    /// A key a later promise held again (a stream's next version, in a transaction after the
    /// one that failed) stays: that version's own commit decides (review D #5).
    pub(super) fn undo_promise(&mut self, p: Promise) {
        if let Some((sender, id)) = &p.delivery {
            self.delivered.remove(sender, id);
        }
        let keys: Vec<String> = p
            .keys
            .into_iter()
            .filter(|key| !self.promised_later(&p.device, key))
            .collect();
        // The agent may send a finished reply again under its id; a version that did not
        // finish it leaves `finished` alone (a later final version, sent live, is in it).
        let finished = p
            .finished
            .filter(|id| keys.iter().any(|k| k.strip_prefix("m:") == Some(id.as_str())));
        if let Some(d) = self.devices.get_mut(&p.device) {
            d.hold.remove(&keys);
            if let Some(id) = finished {
                d.finished.remove(&id);
            }
        }
        log::warn!(
            "output held for {:?} not kept by the journal: the agent is told not_kept",
            p.device
        );
    }

    /// Whether a promise still waiting for its commit (so a later one than any being
    /// undone) holds `key` for `device`.
    fn promised_later(&self, device: &DeviceId, key: &str) -> bool {
        self.journal.as_ref().is_some_and(|j| {
            j.waiting.iter().any(|(_, w)| match w {
                Waiting::Promised(p) => p.device == *device && p.keys.iter().any(|k| k == key),
                _ => false,
            })
        })
    }

    pub(super) fn undo_held_delivery(&mut self, d: HeldDelivery) {
        self.delivered.remove(&d.sender, &d.id);
        if let Some(dev) = self.devices.get_mut(&d.target) {
            dev.hold.remove(&d.keys);
        }
        log::warn!(
            "deliver {:?} to {:?} not kept by the journal: answered device_offline",
            d.id,
            d.target
        );
        let r = Rejection::new(ErrorCode::DeviceOffline, "target device is not online").with_id(Some(&d.id));
        for conn in std::iter::once(d.conn).chain(d.repeats) {
            if self.conns.contains_key(&conn) {
                self.send_error(conn, &r, false);
            }
        }
    }
}
