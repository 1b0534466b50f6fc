//! Pairing codes (issue 26 §1): short-lived, single-use secrets that a phone trades for a
//! device token of its own, so that no link or QR code ever carries a long-lived secret.
//!
//! Pure and on the caller's clock. Only a code's SHA-256 digest is kept, and a code is
//! looked up by comparing its digest with every outstanding one in constant time, so
//! neither memory nor timing says anything of a code.

use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::time::Time;

/// A code's randomness, in bytes (128 bits: beyond guessing within its 10 minutes, even
/// at the /pair route's rate limit).
pub const CODE_BYTES: usize = 16;
/// How long a code lasts unless `--ttl` says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
/// Codes outstanding at once: an owner pairs a phone or two at a time, and a bound keeps
/// a leaked CLI from filling memory.
pub const MAX_OUTSTANDING: usize = 8;

/// A code as its 22 base64url characters (for a link's `#pair=` and a QR code).
pub fn encode(random: &[u8; CODE_BYTES]) -> String {
    crate::wire::push::b64url(random)
}

/// What the gateway keeps of a code: never the code itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptCode {
    pub digest: [u8; 32],
    /// It pairs an owner device (`pair --owner`).
    pub owner: bool,
    pub expires: Time,
}

impl KeptCode {
    pub fn new(code: &str, owner: bool, expires: Time) -> KeptCode {
        KeptCode {
            digest: digest(code),
            owner,
            expires,
        }
    }
}

/// What a code is kept and looked up as.
pub fn digest(code: &str) -> [u8; 32] {
    Sha256::digest(code.trim().as_bytes()).into()
}

/// Why a code was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeError {
    /// [`MAX_OUTSTANDING`] codes are waiting already.
    TooMany,
}

/// The outstanding codes.
#[derive(Debug, Default)]
pub struct PairCodes {
    codes: Vec<KeptCode>,
}

impl PairCodes {
    /// Keeps a new code; expired ones go first.
    pub fn add(&mut self, now: Time, code: KeptCode) -> Result<(), CodeError> {
        self.expire(now);
        if self.codes.len() >= MAX_OUTSTANDING {
            return Err(CodeError::TooMany);
        }
        self.codes.push(code);
        Ok(())
    }

    /// Spends `code` if it is outstanding and not expired: whether it pairs an owner.
    pub fn redeem(&mut self, now: Time, code: &str) -> Option<bool> {
        self.find(now, code).map(|i| self.codes.remove(i).owner)
    }

    /// Whether `code` would pair an owner, without spending it (`None`: it pairs nothing).
    pub fn peek(&mut self, now: Time, code: &str) -> Option<bool> {
        self.find(now, code).map(|i| self.codes[i].owner)
    }

    /// Every outstanding digest is compared, whatever matches.
    fn find(&mut self, now: Time, code: &str) -> Option<usize> {
        self.expire(now);
        let wanted = digest(code);
        let mut found = None;
        for (i, kept) in self.codes.iter().enumerate() {
            let same: bool = kept.digest.ct_eq(&wanted).into();
            if same && found.is_none() {
                found = Some(i);
            }
        }
        found
    }

    /// Codes still waiting at `now`.
    pub fn outstanding(&self, now: Time) -> usize {
        self.codes.iter().filter(|c| c.expires > now).count()
    }

    /// What a restart keeps (the store's rows).
    pub fn kept(&self) -> &[KeptCode] {
        &self.codes
    }

    fn expire(&mut self, now: Time) {
        self.codes.retain(|c| c.expires > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(n: u8) -> String {
        encode(&[n; CODE_BYTES])
    }

    #[test]
    fn a_code_pairs_once_within_its_time_and_says_whether_it_is_an_owners() {
        let mut codes = PairCodes::default();
        let t0 = Time::from_secs(100);
        codes.add(t0, KeptCode::new(&code(1), false, t0 + DEFAULT_TTL)).unwrap();
        codes.add(t0, KeptCode::new(&code(2), true, t0 + DEFAULT_TTL)).unwrap();
        assert_eq!(code(1).len(), 22);
        assert_eq!(codes.redeem(t0, "wrong"), None);
        assert_eq!(codes.redeem(t0, &code(2)), Some(true));
        assert_eq!(codes.redeem(t0, &code(2)), None, "single use");
        // Past its ten minutes it pairs nothing.
        assert_eq!(codes.redeem(t0 + DEFAULT_TTL, &code(1)), None);
        assert_eq!(codes.outstanding(t0 + DEFAULT_TTL), 0);
        // Nothing of the code itself is kept.
        codes.add(t0, KeptCode::new(&code(3), false, t0 + DEFAULT_TTL)).unwrap();
        assert!(!format!("{codes:?}").contains(&code(3)));
    }

    #[test]
    fn at_most_eight_wait_and_an_expired_one_makes_room() {
        let mut codes = PairCodes::default();
        let t0 = Time::ZERO;
        for n in 0..MAX_OUTSTANDING as u8 {
            let ttl = Duration::from_secs(60 + u64::from(n));
            codes.add(t0, KeptCode::new(&code(n), false, t0 + ttl)).unwrap();
        }
        let ninth = KeptCode::new(&code(100), false, t0 + DEFAULT_TTL);
        assert_eq!(codes.add(t0, ninth.clone()), Err(CodeError::TooMany));
        assert_eq!(codes.add(Time::from_secs(60), ninth), Ok(()), "the first expired");
        assert_eq!(codes.redeem(Time::from_secs(61), &code(100)), Some(false));
    }
}
