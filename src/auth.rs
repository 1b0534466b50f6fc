//! Token checks for `hello` (H1–H3, S1, S2). Every comparison is constant-time, and every
//! configured token is compared on every attempt, so timing says nothing about which token
//! matched or how much of one did.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Config;
use crate::devices::{Check, DeviceTokens};
use crate::wire::{ErrorCode, Rejection};

/// Compares two secrets in constant time: their SHA-256 digests are compared with `subtle`,
/// so the time depends neither on where they differ nor on their lengths (hashing a
/// token is linear in its length, but that length is the sender's own, and it is bounded
/// by the frame limit). Equal digests mean equal strings.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let (da, db) = (Sha256::digest(a), Sha256::digest(b));
    da.as_slice().ct_eq(db.as_slice()).into()
}

/// What a `hello` may become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A phone: addressable by its device id.
    Device,
    /// A `MOBILE_DELIVER_TOKENS` connection: may `deliver`, never addressable (S2). The
    /// index of its token is the sender its `deliver` ids are deduplicated under (L34).
    Service(u16),
}

impl Role {
    pub fn is_service(self) -> bool {
        matches!(self, Role::Service(_))
    }
}

/// Who a `hello` is: its role, and whether it may list and revoke devices (issue 26 §3:
/// the shared `MOBILE_TOKEN`, or a device paired with `--owner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub role: Role,
    pub owner: bool,
}

/// Checks a token and a device id against the configuration and the paired devices.
pub fn authorize(config: &Config, paired: &DeviceTokens, token: &str, device_id: &str) -> Result<Access, Rejection> {
    if token.is_empty() {
        return Err(Rejection::new(ErrorCode::AuthFailed, "token is required"));
    }
    let main = ct_eq(token.as_bytes(), config.token.as_bytes());
    let service = service_index(config, token);
    let extra = extra_binding(config, token, device_id);
    let device = paired.check(token, device_id);
    let owner = match device {
        Check::Own { owner } => owner,
        // H2 both ways, for device tokens as for `MOBILE_EXTRA_TOKENS`.
        Check::OtherDevice => return Err(bound_elsewhere()),
        Check::NotADeviceToken { paired } => {
            if !(main || service.is_some() || extra.here || extra.elsewhere) {
                return Err(Rejection::new(ErrorCode::AuthFailed, "invalid token"));
            }
            if paired {
                return Err(Rejection::new(
                    ErrorCode::Forbidden,
                    "this device is paired: it connects only with its own token",
                ));
            }
            let elsewhere = extra.elsewhere && !extra.here && !main && service.is_none();
            if elsewhere || (extra.device_is_bound && !extra.here) {
                return Err(bound_elsewhere());
            }
            if let Some(index) = service {
                // H3 is about phones: a service connection is never a device (S2), so the
                // list of allowed devices does not apply to it (L34).
                return Ok(Access {
                    role: Role::Service(index),
                    owner: false,
                });
            }
            if main && !extra.here && !config.shared_token {
                return Err(Rejection::new(
                    ErrorCode::AuthFailed,
                    "the shared token is turned off (MOBILE_SHARED_TOKEN=off): pair this device",
                ));
            }
            main && !extra.here
        }
    };
    if !config.allowed_devices.is_empty() && !config.allowed_devices.iter().any(|d| d == device_id) {
        return Err(Rejection::new(ErrorCode::AuthFailed, "device is not allowed"));
    }
    Ok(Access {
        role: Role::Device,
        owner,
    })
}

fn bound_elsewhere() -> Rejection {
    Rejection::new(ErrorCode::Forbidden, "device id is bound to another token")
}

/// The index of the `MOBILE_DELIVER_TOKENS` entry `token` is; every entry is compared.
fn service_index(config: &Config, token: &str) -> Option<u16> {
    let mut service = None;
    for (i, t) in config.deliver_tokens.iter().enumerate() {
        if ct_eq(token.as_bytes(), t.as_bytes()) && service.is_none() {
            service = Some(u16::try_from(i).unwrap_or(u16::MAX));
        }
    }
    service
}

/// How `token` and `device_id` read against `MOBILE_EXTRA_TOKENS` (H2); every entry is
/// compared.
struct ExtraBinding {
    /// The token is bound to this device.
    here: bool,
    /// The token is bound to another device.
    elsewhere: bool,
    /// The device has a bound token.
    device_is_bound: bool,
}

fn extra_binding(config: &Config, token: &str, device_id: &str) -> ExtraBinding {
    let mut b = ExtraBinding {
        here: false,
        elsewhere: false,
        device_is_bound: false,
    };
    for (dev, t) in &config.extra_tokens {
        let same_token = ct_eq(token.as_bytes(), t.as_bytes());
        let same_device = dev == device_id;
        b.here |= same_token && same_device;
        b.elsewhere |= same_token && !same_device;
        b.device_is_bound |= same_device;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq_compares_contents_and_lengths() {
        assert!(ct_eq(b"secret", b"secret"));
        assert!(!ct_eq(b"secret", b"secreT"));
        assert!(!ct_eq(b"secret", b"secret2"));
        assert!(!ct_eq(b"", b"x"));
        assert!(ct_eq(b"", b""));
    }
}
