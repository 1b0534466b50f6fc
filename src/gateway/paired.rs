//! Paired devices in the gateway (issue 26): pairing codes traded for device tokens at
//! `POST /pair`, the `devices` and `revoke` frames of owner connections, and revocation,
//! which takes effect at once. The rules of codes and tokens are [`crate::devices`]'; this
//! module applies them to connections, cards, holds and the journal.
//!
//! Durability: a pairing is answered, and a revocation acknowledged, only after the commit
//! that keeps it. Both take effect in memory at once: a revoked token is refused from the
//! moment the revocation is asked for, not only once it is on disk.

use std::time::Duration;

use super::journal::Waiting;
use super::{ConnState, Gateway, Output};
use crate::auth::Role;
use crate::devices::{CodeError, DeviceTokens, KeptCode, PairAttempts, PairCodes, PairError, Paired};
use crate::ids::{ConnId, DeviceId};
use crate::journal::Record;
use crate::limits::{MAX_DEVICE_FIELD_CHARS, MAX_ID_CHARS};
use crate::text::truncate_chars;
use crate::throttle::SourceKey;
use crate::time::Time;
use crate::wire::devices::{DeviceItem, DevicesList, Revoked};
use crate::wire::server::encode;
use crate::wire::{ErrorCode, Rejection};

/// `last_seen` is written to the journal at most this often per device.
const SEEN_WRITE_EVERY_MS: u64 = 60_000;

/// What the gateway holds of pairing: one field of [`Gateway`].
#[derive(Debug, Default)]
pub(super) struct Pairing {
    pub(super) tokens: DeviceTokens,
    codes: PairCodes,
    attempts: PairAttempts,
    /// When each paired device's `last_seen` was last written (unix ms).
    seen_written: std::collections::HashMap<String, u64>,
    /// The wall clock as of a moment of the core's: `(now, unix ms)`, from the driver.
    wall: (Time, u64),
}

/// A `POST /pair` as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairRequest {
    pub code: String,
    /// Empty: one is generated.
    pub device_id: String,
    pub name: String,
    pub platform: String,
}

/// How a pairing went ([`Output::Paired`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairOutcome {
    /// Kept: the device's token works from now on.
    Paired {
        device: DeviceId,
        token: String,
    },
    /// A wrong, spent or expired code.
    Forbidden,
    /// Too many failures from this address: wait this long.
    Throttled {
        retry_after: Duration,
    },
    BadRequest(&'static str),
    /// [`crate::devices::tokens::MAX_PAIRED`] devices are paired.
    Full,
    /// No journal to keep a device in.
    Unavailable,
    /// The commit failed: the device is not paired.
    NotKept,
}

/// How a revocation went ([`Output::Revoked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeOutcome {
    /// Done in memory and kept.
    Revoked,
    NotPaired,
    /// Done in memory, but the journal could not keep it: a restart would let it in again.
    NotKept,
}

/// Who waits for a revocation's commit.
#[derive(Debug)]
pub(super) enum RevokeReply {
    /// The driver's request (the CLI).
    Request(u64),
    /// An owner's `revoke` frame.
    Frame { conn: ConnId, id: String, device: DeviceId },
}

impl Gateway {
    /// Paired devices and waiting codes read back at start-up.
    pub fn restore_devices(&mut self, paired: Vec<Paired>, codes: Vec<KeptCode>) {
        for device in paired {
            if let Err(PairError::Full) = self.pairing.tokens.pair(device) {
                log::warn!("more paired devices in the journal than this build keeps; the rest are ignored");
                break;
            }
        }
        for code in codes {
            let _ = self.pairing.codes.add(self.now, code);
        }
    }

    /// The wall clock at `now` (unix ms), for the times a device list shows.
    pub fn handle_wall_clock(&mut self, now: Time, unix_ms: u64) {
        self.pairing.wall = (now, unix_ms);
    }

    fn wall_ms(&self, now: Time) -> u64 {
        let (at, ms) = self.pairing.wall;
        ms.saturating_add(now.since(at).as_millis() as u64)
    }

    /// A new pairing code (`hermes-mobile pair`): it works at once, and is kept.
    pub fn add_pair_code(&mut self, now: Time, code: KeptCode) -> Result<(), CodeError> {
        self.now = self.now.max(now);
        self.pairing.codes.add(now, code.clone())?;
        log::info!("a pairing code was made{}", if code.owner { " (owner)" } else { "" });
        self.keep(Record::PairCode(code));
        Ok(())
    }

    /// Pairing codes still waiting.
    pub fn pair_codes_waiting(&self, now: Time) -> usize {
        self.pairing.codes.outstanding(now)
    }

    /// `POST /pair`: trades a code for `token` (fresh randomness from the driver). The
    /// outcome comes as [`Output::Paired`] with `request`, after the commit that keeps it.
    pub fn handle_pair(&mut self, now: Time, request: u64, source: SourceKey, req: PairRequest, token: String) {
        self.now = self.now.max(now);
        let outcome = match self.pair(now, request, source, req, token) {
            Ok(()) => return,
            Err(outcome) => outcome,
        };
        self.outputs.push_back(Output::Paired { request, outcome });
    }

    fn pair(
        &mut self,
        now: Time,
        request: u64,
        source: SourceKey,
        req: PairRequest,
        token: String,
    ) -> Result<(), PairOutcome> {
        if !self.journal_on() {
            return Err(PairOutcome::Unavailable);
        }
        if let Some(retry_after) = self.pairing.attempts.blocked(source, now) {
            return Err(PairOutcome::Throttled { retry_after });
        }
        let device = self.pair_device_id(&req.device_id)?;
        let Some(owner) = self.pairing.codes.redeem(now, &req.code) else {
            self.pairing.attempts.record_failure(source, now);
            log::info!("a pairing with a wrong, spent or expired code was refused");
            return Err(PairOutcome::Forbidden);
        };
        let name = truncate_chars(&req.name, MAX_DEVICE_FIELD_CHARS);
        let platform = truncate_chars(&req.platform, MAX_DEVICE_FIELD_CHARS);
        let paired = Paired::new(device.as_str(), name, platform, owner, self.wall_ms(now), &token);
        let replaced = match self.pairing.tokens.pair(paired.clone()) {
            Ok(replaced) => replaced,
            Err(PairError::Full) => return Err(PairOutcome::Full),
        };
        let role = if owner { "an owner device" } else { "a device" };
        if replaced {
            log::info!("device {device:?} paired again as {role}: its old token stops working");
            self.cut_off(&device, "this device was paired again");
        } else {
            log::info!("device {device:?} paired as {role}");
        }
        self.keep(Record::CodeSpent {
            digest: crate::devices::codes::digest(&req.code),
        });
        self.keep(Record::Pair(paired));
        self.confirm(Waiting::Paired(Box::new((request, device, token))));
        Ok(())
    }

    fn pair_device_id(&mut self, id: &str) -> Result<DeviceId, PairOutcome> {
        if id.trim().is_empty() {
            return Ok(self.ids.device_id());
        }
        if id.chars().count() > MAX_ID_CHARS {
            return Err(PairOutcome::BadRequest("device.id is over 128 characters"));
        }
        if let Some(problem) = crate::hidden::device_id_problem(id) {
            return Err(PairOutcome::BadRequest(problem));
        }
        Ok(DeviceId(id.to_owned()))
    }

    /// The commit (or failure) a pairing waited for.
    pub(super) fn pair_settled(&mut self, request: u64, device: DeviceId, token: String, kept: bool) {
        let outcome = if kept {
            PairOutcome::Paired { device, token }
        } else {
            // Not on disk: it must not work now and then stop at the next restart.
            self.pairing.tokens.revoke(device.as_str());
            PairOutcome::NotKept
        };
        self.outputs.push_back(Output::Paired { request, outcome });
    }

    /// `hermes-mobile devices revoke` (`request`) : the outcome comes as
    /// [`Output::Revoked`], after the commit that keeps it.
    pub fn handle_revoke(&mut self, now: Time, request: u64, device: &str, forget: bool) {
        self.now = self.now.max(now);
        let device = DeviceId(device.to_owned());
        if !self.revoke(now, &device, forget) {
            let outcome = RevokeOutcome::NotPaired;
            return self.outputs.push_back(Output::Revoked { request, outcome });
        }
        self.revoke_kept(RevokeReply::Request(request));
    }

    fn revoke_kept(&mut self, reply: RevokeReply) {
        if self.journal_on() {
            self.confirm(Waiting::Revoked(Box::new(reply)));
        } else {
            self.revoke_settled(reply, true);
        }
    }

    /// The commit (or failure) a revocation waited for.
    pub(super) fn revoke_settled(&mut self, reply: RevokeReply, kept: bool) {
        match reply {
            RevokeReply::Request(request) => {
                let outcome = if kept {
                    RevokeOutcome::Revoked
                } else {
                    RevokeOutcome::NotKept
                };
                self.outputs.push_back(Output::Revoked { request, outcome });
            }
            RevokeReply::Frame { conn, id, device } if kept => {
                let frame = Revoked {
                    id: id.into(),
                    device: device.as_str().into(),
                };
                self.send(conn, encode("revoked", &frame));
            }
            RevokeReply::Frame { conn, id, .. } => {
                let r = Rejection::new(ErrorCode::InternalError, "the revocation could not be kept; ask again");
                self.send_error(conn, &r.with_id(Some(&id)), false);
            }
        }
    }

    /// Revokes `device` at once: its token, its live connections, its open cards (so that
    /// a notification's buttons on a lost phone answer nothing), what is held for it and
    /// its push subscriptions; with `forget`, its journal too. Whether it was paired.
    fn revoke(&mut self, now: Time, device: &DeviceId, forget: bool) -> bool {
        if self.pairing.tokens.revoke(device.as_str()).is_none() {
            return false;
        }
        self.pairing.seen_written.remove(device.as_str());
        log::info!(
            "device {device:?} revoked{}",
            if forget { ", and its journal forgotten" } else { "" }
        );
        self.cut_off(device, "this device was revoked");
        let cards: Vec<_> = self.prompts.for_device(device).iter().map(|c| c.id.clone()).collect();
        for card in cards {
            self.expire_card(now, card);
        }
        if let Some(d) = self.devices.get_mut(device) {
            d.hold.take();
            d.hold_slot = None;
        }
        if self.push.unsubscribe(device) {
            self.outputs.push_back(Output::PushChanged);
        }
        if forget {
            self.forget_media(device);
            self.keep(Record::Forget { device: device.clone() });
        }
        self.keep(Record::Unpair { device: device.clone() });
        true
    }

    /// Closes every connection of `device` with a fatal `auth_failed` and 1008.
    fn cut_off(&mut self, device: &DeviceId, why: &'static str) {
        let conns: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(&c.state, ConnState::Ready { device: d, role: Role::Device, .. } if d == device))
            .map(|(conn, _)| *conn)
            .collect();
        for conn in conns {
            self.fail(conn, Rejection::new(ErrorCode::AuthFailed, why));
        }
    }

    /// The paired devices, by id, as `devices` lists them.
    pub fn paired_devices(&self) -> Vec<DeviceItem> {
        self.pairing
            .tokens
            .list()
            .map(|p| {
                let id = DeviceId(p.id.clone());
                DeviceItem {
                    online: self.is_online(&id),
                    push: self.push.has(&id),
                    id: p.id.clone(),
                    name: p.name.clone(),
                    platform: p.platform.clone(),
                    paired_at: p.paired_at,
                    last_seen: p.last_seen,
                    owner: p.owner,
                }
            })
            .collect()
    }

    /// A paired device connected or went: its `last_seen`, kept at most once a minute (a
    /// phone that reconnects on every wake-up would otherwise write a page each time).
    pub(super) fn paired_seen(&mut self, device: &DeviceId) {
        let at = self.wall_ms(self.now);
        if !self.pairing.tokens.seen(device.as_str(), at) {
            return;
        }
        let written = self.pairing.seen_written.get(device.as_str()).copied();
        if written.is_none_or(|w| at.saturating_sub(w) >= SEEN_WRITE_EVERY_MS) {
            self.pairing.seen_written.insert(device.as_str().to_owned(), at);
            self.keep(Record::Seen {
                device: device.clone(),
                at,
            });
        }
    }

    pub(super) fn on_devices(&mut self, conn: ConnId, owner: bool, id: &str) {
        if !owner {
            return self.send_error(conn, &not_owner(id), false);
        }
        let list = DevicesList {
            id: id.into(),
            items: self.paired_devices(),
        };
        self.send(conn, encode("devices", &list));
    }

    pub(super) fn on_revoke(&mut self, now: Time, conn: ConnId, owner: bool, id: &str, device: &str) {
        if !owner {
            return self.send_error(conn, &not_owner(id), false);
        }
        let device = DeviceId(device.to_owned());
        if !self.revoke(now, &device, false) {
            let r = Rejection::bad_frame("no paired device with that id").with_id(Some(id));
            return self.send_error(conn, &r, false);
        }
        self.revoke_kept(RevokeReply::Frame {
            conn,
            id: id.to_owned(),
            device,
        });
    }
}

fn not_owner(id: &str) -> Rejection {
    Rejection::new(ErrorCode::Forbidden, "only an owner device may list or revoke devices").with_id(Some(id))
}
