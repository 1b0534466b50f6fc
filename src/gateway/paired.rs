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
use crate::devices::tokens::MAX_PAIRED;
use crate::devices::{CodeError, DeviceTokens, KeptCode, PairAttempts, PairCodes, PairError, Paired};
use crate::ids::{ConnId, DeviceId};
use crate::journal::Record;
use crate::limits::MAX_DEVICE_FIELD_CHARS;
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
    /// Revocations done in memory whose commit failed: asked again, they are written again.
    unkept_revocations: std::collections::BTreeSet<String>,
    /// When each paired device's `last_seen` was last written (unix ms).
    seen_written: std::collections::HashMap<String, u64>,
    /// The wall clock as of a moment of the core's: `(now, unix ms)`, from the driver.
    wall: (Time, u64),
}

/// A `POST /pair` as the server read it.
#[derive(Clone, PartialEq, Eq)]
pub struct PairRequest {
    pub code: String,
    /// Empty: one is generated.
    pub device_id: String,
    pub name: String,
    pub platform: String,
}

/// Never the code, even in a debug log.
impl std::fmt::Debug for PairRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairRequest")
            .field("code", &"<redacted>")
            .field("device_id", &self.device_id)
            .field("name", &self.name)
            .field("platform", &self.platform)
            .finish()
    }
}

/// How a pairing went ([`Output::Paired`]).
#[derive(Clone, PartialEq, Eq)]
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
    /// The id is an owner device's, and the code is not an owner's (L69).
    OwnerDevice,
    /// No journal to keep a device in.
    Unavailable,
    /// The commit failed: the device is not paired.
    NotKept,
}

/// Never the token, even in a debug log.
impl std::fmt::Debug for PairOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PairOutcome::Paired { device, .. } => write!(f, "Paired({device:?}, <token>)"),
            PairOutcome::Forbidden => f.write_str("Forbidden"),
            PairOutcome::Throttled { retry_after } => write!(f, "Throttled({retry_after:?})"),
            PairOutcome::BadRequest(why) => write!(f, "BadRequest({why:?})"),
            PairOutcome::Full => f.write_str("Full"),
            PairOutcome::OwnerDevice => f.write_str("OwnerDevice"),
            PairOutcome::Unavailable => f.write_str("Unavailable"),
            PairOutcome::NotKept => f.write_str("NotKept"),
        }
    }
}

/// A pairing waiting for the commit that keeps it.
pub(super) struct PairWaiting {
    request: u64,
    device: DeviceId,
    token: String,
    /// The device as it was paired before (a reinstall), for a commit that fails.
    previous: Option<Paired>,
}

impl std::fmt::Debug for PairWaiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PairWaiting({}, {:?}, <token>)", self.request, self.device)
    }
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
    Request { request: u64, device: DeviceId },
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
        // Looked at before it is spent: a pairing refused below leaves the code usable.
        let Some(owner) = self.pairing.codes.peek(now, &req.code) else {
            self.pairing.attempts.record_failure(source, now);
            log::info!("a pairing with a wrong, spent or expired code was refused");
            return Err(PairOutcome::Forbidden);
        };
        let previous = self.pairing.tokens.get(device.as_str()).cloned();
        if previous.as_ref().is_some_and(|p| p.owner) && !owner {
            // L69: an owner's phone is taken over only with an owner's code.
            log::warn!("a pairing as owner device {device:?} with a code that is not an owner's was refused");
            return Err(PairOutcome::OwnerDevice);
        }
        if previous.is_none() && self.pairing.tokens.len() >= MAX_PAIRED {
            return Err(PairOutcome::Full);
        }
        self.pairing.codes.redeem(now, &req.code);
        let name = truncate_chars(&req.name, MAX_DEVICE_FIELD_CHARS);
        let platform = truncate_chars(&req.platform, MAX_DEVICE_FIELD_CHARS);
        let paired = Paired::new(device.as_str(), name, platform, owner, self.wall_ms(now), &token);
        if let Err(PairError::Full) = self.pairing.tokens.pair(paired.clone()) {
            return Err(PairOutcome::Full); // checked above
        }
        let role = if owner { "an owner device" } else { "a device" };
        // Whoever holds the id now (the old token, or the shared one) goes: the id is
        // reachable only with the new token from this moment.
        if previous.is_some() {
            log::warn!("device {device:?} paired again as {role}: its old token stops working");
            self.cut_off(&device, "this device was paired again");
            // The old phone's lock screen goes too: its notifications and their buttons
            // (a reinstall subscribes again after its `ready`).
            self.close_cards_and_push(now, &device);
        } else {
            log::info!("device {device:?} paired as {role}");
            self.cut_off(
                &device,
                "this device id is paired now: it connects only with its own token",
            );
        }
        self.keep(Record::CodeSpent {
            digest: crate::devices::codes::digest(&req.code),
        });
        self.keep(Record::Pair(paired));
        let waiting = PairWaiting {
            request,
            device,
            token,
            previous,
        };
        self.confirm(Waiting::Paired(Box::new(waiting)));
        Ok(())
    }

    /// The id to pair: one a `hello` could use (G8's 120 characters, L50, H3), and not one
    /// `MOBILE_EXTRA_TOKENS` binds, whose token would stop working (L69).
    fn pair_device_id(&mut self, id: &str) -> Result<DeviceId, PairOutcome> {
        let device = if id.trim().is_empty() {
            self.ids.device_id()
        } else if id.chars().count() > MAX_DEVICE_FIELD_CHARS {
            return Err(PairOutcome::BadRequest("device.id is over 120 characters"));
        } else if let Some(problem) = crate::hidden::device_id_problem(id) {
            return Err(PairOutcome::BadRequest(problem));
        } else {
            DeviceId(id.to_owned())
        };
        let allowed = &self.config.allowed_devices;
        if !allowed.is_empty() && !allowed.iter().any(|d| d == device.as_str()) {
            return Err(PairOutcome::BadRequest(
                "this device id is not in MOBILE_ALLOWED_DEVICES: pair it with an id the list allows",
            ));
        }
        if self.config.extra_tokens.iter().any(|(d, _)| d == device.as_str()) {
            return Err(PairOutcome::BadRequest(
                "this device id is bound to a token of MOBILE_EXTRA_TOKENS",
            ));
        }
        Ok(device)
    }

    /// The commit (or failure) a pairing waited for.
    pub(super) fn pair_settled(&mut self, waiting: PairWaiting, kept: bool) {
        let PairWaiting {
            request,
            device,
            token,
            previous,
        } = waiting;
        let outcome = if kept {
            // Its row replaced the one a failed revocation left on disk.
            self.pairing.unkept_revocations.remove(device.as_str());
            PairOutcome::Paired { device, token }
        } else {
            // Not on disk: it must not work now and then stop at the next restart. Memory
            // goes back to what the disk holds (the device as it was before, or none),
            // unless a later pairing of the same id has replaced this one meanwhile.
            let ours = crate::devices::tokens::digest(&token);
            let current = self.pairing.tokens.get(device.as_str()).map(|p| *p.token_digest());
            if current == Some(ours) {
                match previous {
                    Some(p) => drop(self.pairing.tokens.pair(p)),
                    None => drop(self.pairing.tokens.revoke(device.as_str())),
                }
            }
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
        self.revoke_kept(RevokeReply::Request { request, device });
    }

    fn revoke_kept(&mut self, reply: RevokeReply) {
        if self.journal_on() {
            self.confirm(Waiting::Revoked(Box::new(reply)));
        } else {
            self.revoke_settled(reply, true);
        }
    }

    /// The commit (or failure) a revocation waited for. One whose commit failed is still
    /// revoked in memory, and may be asked again: that writes it again.
    pub(super) fn revoke_settled(&mut self, reply: RevokeReply, kept: bool) {
        let device = match &reply {
            RevokeReply::Request { device, .. } | RevokeReply::Frame { device, .. } => device.as_str(),
        };
        if kept {
            self.pairing.unkept_revocations.remove(device);
        } else if self.pairing.unkept_revocations.len() < crate::devices::tokens::MAX_PAIRED {
            self.pairing.unkept_revocations.insert(device.to_owned());
        }
        match reply {
            RevokeReply::Request { request, .. } => {
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
        let paired = self.pairing.tokens.revoke(device.as_str()).is_some();
        if !paired && !self.pairing.unkept_revocations.contains(device.as_str()) {
            // Not paired (any more), but its subscriptions go all the same: a revocation
            // whose subscriptions file was not written before a power cut is finished by
            // asking again (L71).
            if self.push.unsubscribe(device) {
                log::info!("device {device:?} is not paired; its push subscriptions were removed");
                self.outputs.push_back(Output::PushChanged);
            }
            return false;
        }
        self.pairing.seen_written.remove(device.as_str());
        log::info!(
            "device {device:?} revoked{}",
            if forget { ", and its journal forgotten" } else { "" }
        );
        self.cut_off(device, "this device was revoked");
        self.close_cards_and_push(now, device);
        if let Some(d) = self.devices.get_mut(device) {
            d.hold.take();
            d.hold_slot = None;
        }
        if forget {
            self.forget_media(device);
            self.keep(Record::Forget { device: device.clone() });
        }
        self.keep(Record::Unpair { device: device.clone() });
        true
    }

    /// What a phone that held `device` can still do from its lock screen ends: its open
    /// cards close as their TTL would close them (their notification buttons then answer
    /// 409), and its push subscriptions go.
    fn close_cards_and_push(&mut self, now: Time, device: &DeviceId) {
        let cards: Vec<_> = self.prompts.for_device(device).iter().map(|c| c.id.clone()).collect();
        for card in cards {
            self.expire_card(now, card);
        }
        if self.push.unsubscribe(device) {
            self.outputs.push_back(Output::PushChanged);
        }
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
