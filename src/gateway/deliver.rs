//! `deliver` (S1–S5): a service's or the agent's message to a device, sent now or held for
//! a device that can be notified (L45), and confirmed only once the journal keeps it.

use super::journal::{stamp, Waiting};
use super::keep::Reply;
use super::promises::HeldDelivery;
use super::Gateway;
use crate::agent::CommandError;
use crate::auth::Role;
use crate::base64::{decode_bounded, BoundedDecodeError};
use crate::ids::{ConnId, DeviceId};
use crate::limits::MAX_MEDIA_BYTES;
use crate::time::Time;
use crate::wire::client::Deliver;
use crate::wire::server::{encode, Delivered};
use crate::wire::{ErrorCode, Rejection};

impl Gateway {
    pub(super) fn on_deliver(&mut self, now: Time, conn: ConnId, sender: &DeviceId, role: Role, d: Deliver<'_>) {
        let id = d.id.as_ref();
        let peer = self.conns.get(&conn).map(|c| c.peer).unwrap_or_default();
        // S1: a service token, or loopback that no proxy vouched for, when the owner trusts
        // loopback at all (L53: MOBILE_TRUST_LOOPBACK=off behind a TCP forwarder).
        let trusted_loopback = self.config.trust_loopback && peer.loopback && !peer.forwarded;
        if !role.is_service() && !trusted_loopback {
            let r = Rejection::new(ErrorCode::Forbidden, "deliver is only for service connections");
            return self.send_error(conn, &r.with_id(Some(id)), false);
        }
        if role == Role::Device && self.is_bound(sender) && !self.targets_itself(sender, &d.target) {
            // L53: a token bound to one device (H2) never reaches another one.
            let r = Rejection::new(
                ErrorCode::Forbidden,
                "a device-bound token may only deliver to its own device",
            );
            return self.send_error(conn, &r.with_id(Some(id)), false);
        }
        // S4: a repeat is confirmed again, not re-sent. A service's deliveries are its
        // token's, whatever device id each of its connections says (L34). The two kinds of
        // sender are kept apart by prefix, so no phone can name itself into a service's.
        let key = match role {
            Role::Service(index) => DeviceId(format!("s:{index}")),
            Role::Device => DeviceId(format!("d:{sender}")),
        };
        let sender = &key;
        if let Some(target) = self.delivered.get(now, sender, id) {
            // A repeat is confirmed before its media is decoded again, and only once the
            // first is kept (issue 24 §2).
            let frame = delivered_frame(id, target, false);
            if !self.join_held_delivery(conn, sender, id) {
                self.send(conn, frame);
            }
            return;
        }
        let file = match d.media {
            None => None,
            Some(m) => {
                let data = match decode_bounded(&m.data, MAX_MEDIA_BYTES) {
                    Ok(data) => data,
                    Err(e) => {
                        let r = match e {
                            BoundedDecodeError::TooBig => Rejection::too_big("file is over 8 MiB"),
                            BoundedDecodeError::Invalid => Rejection::bad_frame("media.data is not valid base64"),
                        };
                        return self.send_error(conn, &r.with_id(Some(id)), false);
                    }
                };
                Some(crate::agent::OutgoingFile {
                    kind: m.kind,
                    mime: m.mime.into_owned(),
                    filename: m.filename.into_owned(),
                    caption: None,
                    data,
                    reply_to: None,
                })
            }
        };
        match self.deliver_now(now, sender, id, &d.target, d.text.as_deref(), file) {
            Ok((target, Some(keys))) if self.journal_on() => {
                // issue 24 §2: `delivered` with `held` only once the hold is on disk.
                let held = HeldDelivery {
                    conn,
                    repeats: Vec::new(),
                    frame: delivered_frame(id, target.as_str(), true),
                    sender: sender.clone(),
                    id: id.to_owned(),
                    target,
                    keys,
                };
                self.confirm(Waiting::HeldDelivery(Box::new(held)));
            }
            Ok((target, held)) => self.send(conn, delivered_frame(id, target.as_str(), held.is_some())),
            Err(CommandError::BadTarget) => {
                let r = Rejection::bad_frame("deliver needs a target (no MOBILE_HOME_DEVICE set)");
                self.send_error(conn, &r.with_id(Some(id)), false)
            }
            Err(_) => {
                // S3: not fatal, carries the id, not recorded so cron can retry.
                let r = Rejection::new(ErrorCode::DeviceOffline, "target device is not online");
                self.send_error(conn, &r.with_id(Some(id)), false)
            }
        }
    }

    /// Whether `device` is bound to a token of its own (H2): an extra token's, or a paired
    /// device's (L69). Only that token can claim it, and it acts for that device alone.
    fn is_bound(&self, device: &DeviceId) -> bool {
        self.config.extra_tokens.iter().any(|(d, _)| d == device.as_str())
            || self.pairing.tokens.is_paired(device.as_str())
    }

    /// Whether a `deliver` target names `device` itself.
    fn targets_itself(&self, device: &DeviceId, raw_target: &str) -> bool {
        self.deliver_target(raw_target).as_ref() == Some(device)
    }

    /// S3: the device a `deliver` target names (`mobile:<id>` or `<id>`; empty: the home
    /// device, if one is set).
    fn deliver_target(&self, raw_target: &str) -> Option<DeviceId> {
        let raw = raw_target.trim();
        let target = raw.strip_prefix("mobile:").unwrap_or(raw).trim();
        match (target.is_empty(), &self.config.home_device) {
            (false, _) => Some(DeviceId(target.to_owned())),
            (true, Some(home)) => Some(DeviceId(home.clone())),
            (true, None) => None,
        }
    }

    /// S3–S5 for any sender (a service connection, or the agent link): resolves the target,
    /// sends text then media with new server ids, and records `id` for the sender (S4).
    /// A repeat within the window is confirmed again without being sent again. An offline
    /// target that can be notified gets it held (L45, issue 18) instead of S3's
    /// `device_offline`: then the journal keys of what is held come back.
    pub(super) fn deliver_now(
        &mut self,
        now: Time,
        sender: &DeviceId,
        id: &str,
        raw_target: &str,
        text: Option<&str>,
        file: Option<crate::agent::OutgoingFile>,
    ) -> Result<(DeviceId, Option<Vec<String>>), CommandError> {
        if let Some(target) = self.delivered.get(now, sender, id) {
            return Ok((DeviceId(target.clone()), None));
        }
        let Some(target) = self.deliver_target(raw_target) else {
            return Err(CommandError::BadTarget);
        };
        if file.as_ref().is_some_and(|f| f.data.len() > MAX_MEDIA_BYTES) {
            return Err(CommandError::FileTooBig);
        }
        let held = match self.devices.get(&target).and_then(|d| d.conn) {
            // Only a Web Push subscription makes a delivery wait (issue 18: "a deliver to an
            // offline device without a subscription is still answered device_offline"),
            // ntfy or not: ntfy knows no device, and a mistyped target must fail for cron.
            None if !self.has_subscription(&target) => return Err(CommandError::DeviceOffline),
            None => Some(self.hold_delivery(now, &target, text, file)?),
            Some(conn) => {
                self.deliver_live(now, conn, &target, text, file);
                None
            }
        };
        self.delivered.insert(now, sender, id, target.0.clone());
        self.keep_dedup(crate::journal::Window::Delivered, sender, id, now, target.0.clone());
        self.arm_sweep(now);
        Ok((target, held))
    }

    /// S4: text first, then media, each with a new server id.
    fn deliver_live(
        &mut self,
        now: Time,
        conn: ConnId,
        target: &DeviceId,
        text: Option<&str>,
        file: Option<crate::agent::OutgoingFile>,
    ) {
        if let Some(text) = text {
            let message_id = crate::ids::MessageId(self.ids.frame_id("d"));
            let version = Reply {
                text,
                done: true,
                held: false,
                edit: false,
            };
            let seq = self.keep_reply(now, target, &message_id, version);
            for frame in stamp(self.message_frames(message_id.as_str(), text, false, true), seq) {
                self.send(conn, frame);
            }
        }
        if let Some(file) = file {
            let media_id = self.ids.frame_id("f");
            let seq = self.keep_file(now, target, &media_id, &file, false);
            for frame in stamp(self.media_frames(&media_id, &file), seq) {
                self.send(conn, frame);
            }
        }
    }

    /// (c) of issue 18: a delivery for an offline device that can be notified waits in its
    /// hold, text then file, within the same limits as the agent's output (L32). Returns
    /// the journal keys of what it holds.
    fn hold_delivery(
        &mut self,
        now: Time,
        target: &DeviceId,
        text: Option<&str>,
        file: Option<crate::agent::OutgoingFile>,
    ) -> Result<Vec<String>, CommandError> {
        let message = text.map(|_| crate::ids::MessageId(self.ids.frame_id("d")));
        let media = file.as_ref().map(|_| self.ids.frame_id("f"));
        let d = self.device_entry(target);
        let mut growth = 0;
        if let (Some(id), Some(text)) = (&message, text) {
            growth += d.hold.message_growth(id, text.len())?;
        }
        if let Some(f) = &file {
            growth += d.hold.file_growth(f.data.len())?;
        }
        // Text and file together, before either is kept: a delivery is held whole or not at
        // all, or the journal would keep a part its sender was told failed.
        if d.hold.bytes() + growth > crate::limits::MAX_HELD_BYTES {
            return Err(CommandError::HoldFull);
        }
        if !self.make_hold_room(growth) {
            return Err(CommandError::HoldFull);
        }
        let mut keys = Vec::new();
        if let (Some(id), Some(text)) = (&message, text) {
            let version = Reply {
                text,
                done: true,
                held: true,
                edit: false,
            };
            let seq = self.keep_reply(now, target, id, version);
            let d = self.devices.get_mut(target).expect("the device was created above");
            d.hold.message(now, id, text, false, true, seq)?;
            keys.push(format!("m:{}", id.as_str()));
        }
        let what = match (text, &file) {
            (Some(text), _) => crate::push::preview(text),
            (None, Some(f)) => crate::push::preview(&f.filename),
            (None, None) => String::new(),
        };
        if let (Some(id), Some(file)) = (media, file) {
            let seq = self.keep_file(now, target, &id, &file, true);
            keys.push(format!("f:{id}"));
            let d = self.devices.get_mut(target).expect("the device was created above");
            d.hold.file(now, id, file, seq)?;
        }
        self.arm_hold(now, target);
        self.notify(target, crate::push::NotifyEvent::Deliver { text: what });
        Ok(keys)
    }
}

/// S5's confirmation, the same for a first delivery and a repeat (S4).
fn delivered_frame(id: &str, device: &str, held: bool) -> String {
    encode(
        "delivered",
        &Delivered {
            id: id.into(),
            device: device.into(),
            held,
        },
    )
}
