//! Token checks for `hello` (H1–H3, S1, S2). Every comparison is constant-time, and every
//! configured token is compared on every attempt, so timing says nothing about which token
//! matched or how much of one did.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Config;
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

/// Checks a token and a device id against the configuration.
pub fn authorize(config: &Config, token: &str, device_id: &str) -> Result<Role, Rejection> {
    let token = token.as_bytes();
    if token.is_empty() {
        return Err(Rejection::new(ErrorCode::AuthFailed, "token is required"));
    }
    let main = ct_eq(token, config.token.as_bytes());
    let mut service = None;
    for (i, t) in config.deliver_tokens.iter().enumerate() {
        if ct_eq(token, t.as_bytes()) && service.is_none() {
            service = Some(u16::try_from(i).unwrap_or(u16::MAX));
        }
    }
    // H2 both ways: the token's own binding, and the device id's bindings.
    let mut bound_elsewhere = false;
    let mut bound_here = false;
    let mut device_is_bound = false;
    let mut device_accepts = false;
    for (dev, t) in &config.extra_tokens {
        let same_token = ct_eq(token, t.as_bytes());
        let same_device = dev == device_id;
        bound_here |= same_token && same_device;
        bound_elsewhere |= same_token && !same_device;
        device_is_bound |= same_device;
        device_accepts |= same_device && same_token;
    }
    if !(main || service.is_some() || bound_here || bound_elsewhere) {
        return Err(Rejection::new(ErrorCode::AuthFailed, "invalid token"));
    }
    if (bound_elsewhere && !bound_here && !main && service.is_none()) || (device_is_bound && !device_accepts) {
        return Err(Rejection::new(
            ErrorCode::Forbidden,
            "device id is bound to another token",
        ));
    }
    // H3 is about phones: a service connection is never a device (S2), so the list of
    // allowed devices does not apply to it (L34).
    if let Some(index) = service {
        return Ok(Role::Service(index));
    }
    if !config.allowed_devices.is_empty() && !config.allowed_devices.iter().any(|d| d == device_id) {
        return Err(Rejection::new(ErrorCode::AuthFailed, "device is not allowed"));
    }
    Ok(Role::Device)
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
