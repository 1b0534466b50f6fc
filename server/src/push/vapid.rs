//! RFC 8292 VAPID: the gateway's P-256 key, and the signed JWT a push service checks.
//!
//! `Authorization: vapid t=<JWT>, k=<public key>`, the JWT signed with ES256 (the raw
//! 64-byte r‖s form JWS uses, which is ring's "fixed" encoding). Its `aud` is the
//! endpoint's origin, `exp` 12 hours ahead (RFC 8292 allows at most 24), and `sub` the
//! contact from `MOBILE_PUSH_SUBJECT`.

use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

use hermes_mobile::wire::push::b64url;

/// How far ahead `exp` is set.
pub const TOKEN_LIFETIME_SECS: u64 = 12 * 3600;

/// The gateway's VAPID key pair.
pub struct Vapid {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    public_b64: String,
}

impl std::fmt::Debug for Vapid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vapid({})", self.public_b64)
    }
}

impl Vapid {
    /// A new key pair, and its PKCS#8 form to keep.
    pub fn generate() -> Result<(Vapid, Vec<u8>), String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "cannot generate a VAPID key: the system's random source failed".to_owned())?;
        let bytes = pkcs8.as_ref().to_vec();
        Ok((Vapid::from_pkcs8(&bytes)?, bytes))
    }

    /// The key pair kept in the state directory.
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<Vapid, String> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|e| format!("not a P-256 PKCS#8 key ({e})"))?;
        let public_b64 = b64url(key.public_key().as_ref());
        Ok(Vapid { key, rng, public_b64 })
    }

    /// base64url of the 65-byte uncompressed public key (`vapid_public_key`, `k=`).
    pub fn public_key(&self) -> &str {
        &self.public_b64
    }

    /// The JWT for `aud`, expiring `TOKEN_LIFETIME_SECS` after `now_unix`.
    pub fn token(&self, aud: &str, sub: &str, now_unix: u64) -> String {
        let header = b64url(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({ "aud": aud, "exp": now_unix + TOKEN_LIFETIME_SECS, "sub": sub });
        let signing_input = format!("{header}.{}", b64url(claims.to_string().as_bytes()));
        let signature = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .expect("ECDSA signing fails only if the random source does");
        format!("{signing_input}.{}", b64url(signature.as_ref()))
    }

    /// The `Authorization` header's value.
    pub fn authorization(&self, aud: &str, sub: &str, now_unix: u64) -> String {
        format!("vapid t={}, k={}", self.token(aud, sub, now_unix), self.public_b64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_mobile::wire::push::from_b64url;
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    #[test]
    fn the_jwt_has_the_claims_and_an_es256_signature_over_header_and_claims() {
        let (vapid, pkcs8) = Vapid::generate().unwrap();
        let auth = vapid.authorization("https://push.example:8443", "mailto:owner@example.org", 1_800_000_000);
        let (t, k) = auth
            .strip_prefix("vapid t=")
            .and_then(|rest| rest.split_once(", k="))
            .expect("vapid t=…, k=…");
        assert_eq!(k, vapid.public_key());
        let key = from_b64url(k).unwrap();
        assert_eq!((key.len(), key[0]), (65, 4));
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value = serde_json::from_slice(&from_b64url(parts[0]).unwrap()).unwrap();
        assert_eq!(header, serde_json::json!({"typ": "JWT", "alg": "ES256"}));
        let claims: serde_json::Value = serde_json::from_slice(&from_b64url(parts[1]).unwrap()).unwrap();
        assert_eq!(
            claims,
            serde_json::json!({"aud": "https://push.example:8443", "exp": 1_800_000_000u64 + 12 * 3600, "sub": "mailto:owner@example.org"})
        );
        let signature = from_b64url(parts[2]).unwrap();
        assert_eq!(signature.len(), 64, "JWS ES256 is r||s, not DER");
        let signed = format!("{}.{}", parts[0], parts[1]);
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &key)
            .verify(signed.as_bytes(), &signature)
            .expect("the signature verifies with the public key");
        // base64url without padding everywhere: the only `=` are the header's own two.
        assert!(!t.contains('=') && !k.contains('='));
        // The kept key is the same key.
        assert_eq!(Vapid::from_pkcs8(&pkcs8).unwrap().public_key(), vapid.public_key());
        assert!(Vapid::from_pkcs8(b"not a key").is_err());
    }
}
