//! Device tokens (issue 26 §2): one per paired device, at least 256 bits, kept only as
//! its SHA-256 digest, bound to its device both ways exactly as a `MOBILE_EXTRA_TOKENS`
//! entry is (H2): it connects only as its device, and a paired device id is reachable only
//! with its own token.
//!
//! Pure. Every check compares the presented token's digest with every paired device's in
//! constant time, so timing says nothing of which device matched or how much of a token.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A token's randomness, in bytes.
pub const TOKEN_BYTES: usize = 32;
/// Paired devices at most (the journal keeps history for 64; the rest is generous).
pub const MAX_PAIRED: usize = 256;

/// A new device token as its 43 base64url characters.
pub fn encode(random: &[u8; TOKEN_BYTES]) -> String {
    crate::wire::push::b64url(random)
}

/// The digest a token is kept as.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A paired device as the gateway keeps it.
#[derive(Clone, PartialEq, Eq)]
pub struct Paired {
    pub id: String,
    pub name: String,
    pub platform: String,
    pub owner: bool,
    /// Unix milliseconds.
    pub paired_at: u64,
    /// Its latest `hello` or disconnection, unix milliseconds; `None` before its first.
    pub last_seen: Option<u64>,
    token_digest: [u8; 32],
}

/// Never the digest, even in a log.
impl std::fmt::Debug for Paired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paired")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("platform", &self.platform)
            .field("owner", &self.owner)
            .field("paired_at", &self.paired_at)
            .field("last_seen", &self.last_seen)
            .finish()
    }
}

impl Paired {
    pub fn new(id: &str, name: &str, platform: &str, owner: bool, paired_at: u64, token: &str) -> Paired {
        Paired::from_digest(id, name, platform, owner, paired_at, digest(token))
    }

    /// As the store read it back.
    pub fn from_digest(
        id: &str,
        name: &str,
        platform: &str,
        owner: bool,
        paired_at: u64,
        token_digest: [u8; 32],
    ) -> Paired {
        Paired {
            id: id.to_owned(),
            name: name.to_owned(),
            platform: platform.to_owned(),
            owner,
            paired_at,
            last_seen: None,
            token_digest,
        }
    }

    /// What the store keeps of its token.
    pub fn token_digest(&self) -> &[u8; 32] {
        &self.token_digest
    }
}

/// How a presented token and device id read against the paired devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The token is this device's own: an owner device or not.
    Own { owner: bool },
    /// The token is another paired device's: `forbidden` (H2).
    OtherDevice,
    /// No paired device has this token; `paired`: the id is a paired device's, which only
    /// its own token may use.
    NotADeviceToken { paired: bool },
}

/// Why a pairing was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairError {
    /// [`MAX_PAIRED`] devices are paired already.
    Full,
}

/// The paired devices, by id.
#[derive(Debug, Default)]
pub struct DeviceTokens {
    devices: BTreeMap<String, Paired>,
}

impl DeviceTokens {
    /// Pairs a device. An id paired already is paired again (a reinstall): its old token
    /// stops working at once. Returns whether it replaced one.
    pub fn pair(&mut self, device: Paired) -> Result<bool, PairError> {
        if !self.devices.contains_key(&device.id) && self.devices.len() >= MAX_PAIRED {
            return Err(PairError::Full);
        }
        Ok(self.devices.insert(device.id.clone(), device).is_some())
    }

    /// Reads `token` and `device_id` against every paired device.
    pub fn check(&self, token: &str, device_id: &str) -> Check {
        let wanted = digest(token);
        let mut own = None;
        let mut other = false;
        let mut paired = false;
        for d in self.devices.values() {
            let same: bool = d.token_digest.ct_eq(&wanted).into();
            let this = d.id == device_id;
            paired |= this;
            if same && this {
                own = Some(d.owner);
            }
            other |= same && !this;
        }
        match own {
            Some(owner) => Check::Own { owner },
            None if other => Check::OtherDevice,
            None => Check::NotADeviceToken { paired },
        }
    }

    /// Revokes a device: its token stops working at once. Whether it was paired.
    pub fn revoke(&mut self, device_id: &str) -> Option<Paired> {
        self.devices.remove(device_id)
    }

    pub fn get(&self, device_id: &str) -> Option<&Paired> {
        self.devices.get(device_id)
    }

    /// Every paired device, by id.
    pub fn list(&self) -> impl Iterator<Item = &Paired> {
        self.devices.values()
    }

    pub fn is_paired(&self, device_id: &str) -> bool {
        self.devices.contains_key(device_id)
    }

    /// The device was seen at `at` (unix ms); whether it is paired.
    pub fn seen(&mut self, device_id: &str, at: u64) -> bool {
        match self.devices.get_mut(device_id) {
            Some(d) => {
                d.last_seen = Some(d.last_seen.map_or(at, |s| s.max(at)));
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(n: u8) -> String {
        encode(&[n; TOKEN_BYTES])
    }

    fn paired(id: &str, n: u8, owner: bool) -> Paired {
        Paired::new(id, "Phone", "android", owner, 1_800_000_000, &token(n))
    }

    #[test]
    fn a_device_token_opens_only_its_own_device_and_a_paired_id_only_with_it() {
        let mut devices = DeviceTokens::default();
        assert_eq!(devices.pair(paired("tel-1", 1, false)), Ok(false));
        assert_eq!(devices.pair(paired("tel-2", 2, true)), Ok(false));
        assert_eq!(token(1).len(), 43);
        assert_eq!(devices.check(&token(1), "tel-1"), Check::Own { owner: false });
        assert_eq!(devices.check(&token(2), "tel-2"), Check::Own { owner: true });
        // H2 both ways: another device's id, or a paired id with another token.
        assert_eq!(devices.check(&token(1), "tel-2"), Check::OtherDevice);
        assert_eq!(devices.check(&token(1), "tel-9"), Check::OtherDevice);
        assert_eq!(
            devices.check("the-shared-token", "tel-1"),
            Check::NotADeviceToken { paired: true }
        );
        assert_eq!(
            devices.check("the-shared-token", "tel-9"),
            Check::NotADeviceToken { paired: false }
        );
        // Nothing of a token is shown, not even its digest.
        let shown = format!("{:?}", devices.get("tel-1").unwrap());
        assert!(!shown.contains(&token(1)) && !shown.contains("digest"), "{shown}");
    }

    #[test]
    fn pairing_again_replaces_the_token_and_revoking_ends_it_at_once() {
        let mut devices = DeviceTokens::default();
        devices.pair(paired("tel-1", 1, false)).unwrap();
        assert_eq!(devices.pair(paired("tel-1", 3, false)), Ok(true), "a reinstall");
        assert_eq!(
            devices.check(&token(1), "tel-1"),
            Check::NotADeviceToken { paired: true }
        );
        assert_eq!(devices.check(&token(3), "tel-1"), Check::Own { owner: false });
        assert!(devices.revoke("tel-1").is_some());
        assert_eq!(
            devices.check(&token(3), "tel-1"),
            Check::NotADeviceToken { paired: false }
        );
        assert!(devices.revoke("tel-1").is_none());
    }

    #[test]
    fn the_list_is_bounded() {
        let mut devices = DeviceTokens::default();
        for n in 0..MAX_PAIRED {
            devices
                .pair(Paired::new(&format!("d{n}"), "", "", false, 0, &format!("t{n}")))
                .unwrap();
        }
        let one_more = Paired::new("extra", "", "", false, 0, "t");
        assert_eq!(devices.pair(one_more), Err(PairError::Full));
        // Pairing a known id again still works when full.
        assert_eq!(devices.pair(Paired::new("d0", "", "", false, 0, "new")), Ok(true));
        assert_eq!(devices.list().count(), MAX_PAIRED);
    }
}
