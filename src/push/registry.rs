//! The push subscriptions the gateway keeps for each device (issue 18).
//!
//! Bounded twice: at most [`MAX_PER_DEVICE`] per device (the same endpoint again replaces
//! its keys) and at most [`MAX_DEVICES`] devices. Anyone with the app token can mint device
//! ids, so past the cap the device whose subscriptions were used longest ago is dropped
//! (logged), rather than refusing a new phone forever because of abandoned ones
//! (docs/decisions-local.md L46). The snapshot is what the server keeps in the state
//! directory; it carries no token and nothing a phone did not send for this purpose.

use serde::{Deserialize, Serialize};

use crate::ids::DeviceId;

/// Subscriptions per device (issue 18).
pub const MAX_PER_DEVICE: usize = 4;
/// Devices with subscriptions: 64 × 4 × about 2.2 KB is at most about 560 KB.
pub const MAX_DEVICES: usize = 64;
/// The longest `app_url` kept (the page's address, for a notification to open), in
/// bytes of visible ASCII: with the rest of a payload it fits one 4 KB record.
pub const MAX_APP_URL_CHARS: usize = 1024;

/// One browser's push subscription: where to POST, and the keys to encrypt for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    pub endpoint: String,
    /// The browser's P-256 public key, uncompressed (65 bytes), base64url.
    pub p256dh: String,
    /// The 16-byte authentication secret, base64url.
    pub auth: String,
    /// The chat page's address as the page gave it, for a notification to open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_url: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct DeviceSubscriptions {
    device: String,
    subscriptions: Vec<Subscription>,
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    v: u32,
    devices: Vec<DeviceSubscriptions>,
}

/// Every device's subscriptions, least recently used first.
#[derive(Debug, Default)]
pub struct Registry {
    devices: Vec<DeviceSubscriptions>,
}

impl Registry {
    pub fn get(&self, device: &DeviceId) -> &[Subscription] {
        self.position(device)
            .map_or(&[][..], |i| self.devices[i].subscriptions.as_slice())
    }

    pub fn has(&self, device: &DeviceId) -> bool {
        self.position(device).is_some()
    }

    /// All subscriptions, for `/healthz`.
    pub fn count(&self) -> usize {
        self.devices.iter().map(|d| d.subscriptions.len()).sum()
    }

    /// Whether subscribing `sub` again would change nothing: the device already has it as its
    /// newest and is itself the most recently subscribed. The order counts too, since it is
    /// what eviction reads after a restart (L46).
    pub fn is_newest(&self, device: &DeviceId, sub: &Subscription) -> bool {
        self.devices
            .last()
            .is_some_and(|d| d.device == device.as_str() && d.subscriptions.last() == Some(sub))
    }

    /// Adds or replaces (same endpoint) a subscription. Past `MAX_PER_DEVICE`, the device's
    /// oldest goes; past `MAX_DEVICES`, the least recently used device goes (its id is
    /// returned, for the log).
    pub fn subscribe(&mut self, device: &DeviceId, sub: Subscription) -> Option<String> {
        let mut evicted = None;
        let mut entry = match self.position(device) {
            Some(i) => self.devices.remove(i),
            None => {
                if self.devices.len() >= MAX_DEVICES {
                    evicted = Some(self.devices.remove(0).device);
                }
                DeviceSubscriptions {
                    device: device.as_str().to_owned(),
                    subscriptions: Vec::new(),
                }
            }
        };
        entry.subscriptions.retain(|s| s.endpoint != sub.endpoint);
        if entry.subscriptions.len() >= MAX_PER_DEVICE {
            entry.subscriptions.remove(0);
        }
        entry.subscriptions.push(sub);
        self.devices.push(entry);
        evicted
    }

    /// Removes all of a device's subscriptions; whether it had any.
    pub fn unsubscribe(&mut self, device: &DeviceId) -> bool {
        match self.position(device) {
            Some(i) => {
                self.devices.remove(i);
                true
            }
            None => false,
        }
    }

    /// Removes one subscription the push service says is gone (404, 410); whether it was there.
    pub fn remove(&mut self, device: &DeviceId, endpoint: &str) -> bool {
        let Some(i) = self.position(device) else { return false };
        let subs = &mut self.devices[i].subscriptions;
        let before = subs.len();
        subs.retain(|s| s.endpoint != endpoint);
        let removed = subs.len() != before;
        if subs.is_empty() {
            self.devices.remove(i);
        }
        removed
    }

    /// The device was heard from: it becomes the most recently used.
    pub fn touch(&mut self, device: &DeviceId) {
        if let Some(i) = self.position(device) {
            let entry = self.devices.remove(i);
            self.devices.push(entry);
        }
    }

    /// What the server keeps in the state directory.
    pub fn snapshot(&self) -> String {
        let snapshot = Snapshot {
            v: 1,
            devices: self.devices.clone(),
        };
        serde_json::to_string_pretty(&snapshot).expect("plain strings always serialize")
    }

    /// Reads a snapshot, keeping its bounds. Entries that are not subscriptions are an
    /// error: the file is the gateway's own.
    pub fn restore(json: &str) -> Result<Registry, String> {
        let snapshot: Snapshot = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if snapshot.v != 1 {
            return Err(format!("unknown version {}", snapshot.v));
        }
        let mut registry = Registry::default();
        for d in snapshot.devices {
            let device = DeviceId(d.device);
            for sub in d.subscriptions {
                registry.subscribe(&device, sub);
            }
        }
        Ok(registry)
    }

    fn position(&self, device: &DeviceId) -> Option<usize> {
        self.devices.iter().position(|d| d.device == device.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(n: usize) -> Subscription {
        Subscription {
            endpoint: format!("https://fcm.googleapis.com/fcm/send/{n}"),
            p256dh: format!("key{n}"),
            auth: "auth".into(),
            app_url: None,
        }
    }

    fn dev(s: &str) -> DeviceId {
        DeviceId(s.into())
    }

    #[test]
    fn the_same_endpoint_replaces_its_keys_and_four_is_the_most_per_device() {
        let mut r = Registry::default();
        r.subscribe(&dev("a"), sub(1));
        r.subscribe(
            &dev("a"),
            Subscription {
                p256dh: "new".into(),
                ..sub(1)
            },
        );
        assert_eq!(r.get(&dev("a")).len(), 1);
        assert_eq!(r.get(&dev("a"))[0].p256dh, "new");
        for n in 2..=6 {
            r.subscribe(&dev("a"), sub(n));
        }
        let endpoints: Vec<_> = r.get(&dev("a")).iter().map(|s| s.endpoint.clone()).collect();
        assert_eq!(endpoints, (3..=6).map(|n| sub(n).endpoint).collect::<Vec<_>>());
    }

    #[test]
    fn past_the_device_cap_the_least_recently_used_device_goes() {
        let mut r = Registry::default();
        for n in 0..MAX_DEVICES {
            assert_eq!(r.subscribe(&dev(&format!("d{n}")), sub(n)), None);
        }
        r.touch(&dev("d0"));
        assert_eq!(r.subscribe(&dev("new"), sub(99)), Some("d1".into()));
        assert!(r.has(&dev("d0")) && r.has(&dev("new")) && !r.has(&dev("d1")));
        assert_eq!(r.count(), MAX_DEVICES);
    }

    #[test]
    fn removing_the_last_subscription_forgets_the_device_and_a_snapshot_round_trips() {
        let mut r = Registry::default();
        r.subscribe(&dev("a"), sub(1));
        r.subscribe(
            &dev("b"),
            Subscription {
                app_url: Some("https://pi/".into()),
                ..sub(2)
            },
        );
        assert!(r.remove(&dev("a"), &sub(1).endpoint));
        assert!(!r.has(&dev("a")));
        assert!(!r.remove(&dev("a"), &sub(1).endpoint));
        let again = Registry::restore(&r.snapshot()).unwrap();
        assert_eq!(again.get(&dev("b")), r.get(&dev("b")));
        assert!(Registry::restore("{\"v\":2,\"devices\":[]}").is_err());
        assert!(Registry::restore("not json").is_err());
    }
}
