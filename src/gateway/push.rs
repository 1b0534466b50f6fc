//! The push extension in the gateway (issue 18, docs/push.md): subscriptions per device,
//! and the events that notify a device with no live connection: (a) a card opened for
//! it, (b) the agent's final reply for it, (c) a `deliver` aimed at it, which is then held
//! instead of refused (docs/decisions-local.md L45). A connected phone is never notified.

use std::time::Duration;

use super::{Gateway, Output};
use crate::ids::{ConnId, DeviceId};
use crate::push::{Notification, NotifyEvent, Subscription};
use crate::time::Time;
use crate::wire::push::{b64url, PushSubscribe};
use crate::wire::server::{encode, PushAnswer};
use crate::wire::{ErrorCode, Rejection};

impl Gateway {
    /// A device's subscriptions (what the server encrypts and POSTs to).
    pub fn push_subscriptions(&self, device: &DeviceId) -> &[Subscription] {
        self.push.get(device)
    }

    /// All subscriptions, for `/healthz`.
    pub fn push_subscription_count(&self) -> usize {
        self.push.count()
    }

    /// The subscriptions as the server keeps them in the state directory.
    pub fn push_snapshot(&self) -> String {
        self.push.snapshot()
    }

    /// Subscriptions read back at start-up; how many.
    pub fn restore_push(&mut self, json: &str) -> Result<usize, String> {
        self.push = crate::push::Registry::restore(json)?;
        Ok(self.push.count())
    }

    /// The push service answered 404 or 410: that subscription is gone for good.
    pub fn handle_push_gone(&mut self, now: Time, device: &DeviceId, endpoint: &str) {
        self.now = self.now.max(now);
        if self.push.remove(device, endpoint) {
            log::info!("device {device:?}: a push subscription was removed: the push service says it is gone");
            self.outputs.push_back(Output::PushChanged);
        }
    }

    /// How a `push_test` went: `push_sent`, or an `error` with the reason (which names the
    /// push service's status).
    pub fn handle_push_test_result(&mut self, now: Time, conn: ConnId, id: &str, result: Result<(), String>) {
        self.now = self.now.max(now);
        if !self.conns.contains_key(&conn) {
            return;
        }
        match result {
            Ok(()) => self.send(conn, encode("push_sent", &PushAnswer { id: id.into() })),
            Err(why) => {
                let r = Rejection::new(ErrorCode::InternalError, why).with_id(Some(id));
                self.send_error(conn, &r, false);
            }
        }
    }

    pub(super) fn on_push_subscribe(&mut self, conn: ConnId, device: &DeviceId, frame: PushSubscribe<'_>) {
        let id = frame.id.as_ref();
        let Some(push) = self.push_config_or_refuse(conn, id) else {
            return;
        };
        if !(push.point_check)(&frame.p256dh) {
            let r = Rejection::bad_frame("subscription.keys.p256dh is not a P-256 point");
            return self.send_error(conn, &r.with_id(Some(id)), false);
        }
        if let Err(e) = push.hosts.check(&frame.endpoint) {
            log::info!("device {device:?}: push endpoint refused: {e}");
            let r = Rejection::new(ErrorCode::Forbidden, e.to_string()).with_id(Some(id));
            return self.send_error(conn, &r, false);
        }
        let sub = Subscription {
            endpoint: frame.endpoint.into_owned(),
            p256dh: b64url(&frame.p256dh),
            auth: b64url(&frame.auth),
            app_url: frame.app_url.map(|u| u.into_owned()),
        };
        // The page registers again after every `ready`: the same subscription, from the
        // device that subscribed last, changes nothing, and nothing is written.
        let unchanged = self.push.is_newest(device, &sub);
        if let Some(old) = self.push.subscribe(device, sub) {
            log::info!(
                "device {old:?}: push subscriptions dropped: {} devices have some",
                crate::push::MAX_DEVICES
            );
        }
        log::info!(
            "device {device:?}: push subscription kept ({} for it)",
            self.push.get(device).len()
        );
        if !unchanged {
            self.outputs.push_back(Output::PushChanged);
        }
        self.send(conn, encode("push_subscribed", &PushAnswer { id: id.into() }));
    }

    pub(super) fn on_push_unsubscribe(&mut self, conn: ConnId, device: &DeviceId, id: &str) {
        if self.push_config_or_refuse(conn, id).is_none() {
            return;
        }
        if self.push.unsubscribe(device) {
            log::info!("device {device:?}: push subscriptions removed");
            self.outputs.push_back(Output::PushChanged);
        }
        self.send(conn, encode("push_unsubscribed", &PushAnswer { id: id.into() }));
    }

    /// Sent now, to the sender's own subscriptions, even while it is connected.
    pub(super) fn on_push_test(&mut self, conn: ConnId, device: &DeviceId, id: &str) {
        if self.push_config_or_refuse(conn, id).is_none() {
            return;
        }
        if !self.push.has(device) {
            let r = Rejection::new(ErrorCode::Forbidden, "this device has no push subscription").with_id(Some(id));
            return self.send_error(conn, &r, false);
        }
        let event = NotifyEvent::Test {
            conn,
            id: id.to_owned(),
        };
        self.outputs.push_back(Output::Notify(Notification {
            device: device.clone(),
            event,
        }));
    }

    fn push_config_or_refuse(&mut self, conn: ConnId, id: &str) -> Option<crate::push::PushConfig> {
        let push = self.config.push.clone().filter(|p| p.vapid_public_key.is_some());
        if push.is_none() {
            let r = Rejection::new(
                ErrorCode::UnsupportedFrame,
                "push is off on this gateway (MOBILE_PUSH=off)",
            );
            self.send_error(conn, &r.with_id(Some(id)), false);
        }
        push
    }

    /// Whether a device with no live connection can be told that something waits.
    pub(super) fn can_notify(&self, device: &DeviceId) -> bool {
        self.config
            .push
            .as_ref()
            .is_some_and(|p| p.ntfy || (p.vapid_public_key.is_some() && self.push.has(device)))
    }

    /// Whether a device has a Web Push subscription (and Web Push is on).
    pub(super) fn has_subscription(&self, device: &DeviceId) -> bool {
        self.config
            .push
            .as_ref()
            .is_some_and(|p| p.vapid_public_key.is_some() && self.push.has(device))
    }

    /// Asks the driver to notify an offline device (never a connected one).
    pub(super) fn notify(&mut self, device: &DeviceId, event: NotifyEvent) {
        if self.online_device(device) || !self.can_notify(device) {
            return;
        }
        self.outputs.push_back(Output::Notify(Notification {
            device: device.clone(),
            event,
        }));
    }

    /// How long output waits for an offline device: M4's window, or longer for a device
    /// that can be notified (issue 18).
    pub(super) fn hold_time(&self, device: &DeviceId) -> Duration {
        match &self.config.push {
            Some(p) if self.can_notify(device) => p.hold.max(self.config.offline_hold),
            _ => self.config.offline_hold,
        }
    }

    fn online_device(&self, device: &DeviceId) -> bool {
        self.devices.get(device).is_some_and(|d| d.conn.is_some())
    }
}
