//! RFC 8291 message encryption for Web Push: `aes128gcm` (RFC 8188) with one record.
//!
//! Each message gets a fresh P-256 key pair and salt; the browser's key (`p256dh`) and
//! authentication secret (`auth`) come from its subscription. [`seal`] is the
//! deterministic part (from the ECDH secret on), tested against the RFC's Appendix A;
//! [`encrypt`] adds the random parts with `ring`.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey};
use ring::hkdf::{self, KeyType, Salt, HKDF_SHA256};
use ring::rand::{SecureRandom, SystemRandom};

/// The record size written in the header: push services take at most 4,096 bytes of body.
const RECORD_SIZE: u32 = 4096;
/// salt (16) + rs (4) + idlen (1) + keyid (65).
pub const HEADER_BYTES: usize = 86;
/// The AES-GCM tag, plus the padding delimiter of the last record.
const OVERHEAD: usize = 16 + 1;
/// The most plaintext one record (and so one push) can carry.
pub const MAX_PLAINTEXT: usize = RECORD_SIZE as usize - HEADER_BYTES - OVERHEAD;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EceError {
    /// The browser's key is not a P-256 point.
    BadKey,
    /// Over `MAX_PLAINTEXT`.
    TooLong,
    /// The system's random source failed.
    Random,
}

impl std::fmt::Display for EceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EceError::BadKey => "the subscription's p256dh is not a P-256 point",
            EceError::TooLong => "the payload is over one 4096-byte record",
            EceError::Random => "the system's random source failed",
        })
    }
}

/// Whether `key` is a point on P-256 (the check `push_subscribe` makes): an agreement
/// with it succeeds only if it is.
pub fn is_p256_point(key: &[u8]) -> bool {
    let rng = SystemRandom::new();
    let Ok(private) = EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng) else {
        return false;
    };
    agreement::agree_ephemeral(private, &UnparsedPublicKey::new(&agreement::ECDH_P256, key), |_| ()).is_ok()
}

/// Encrypts `plaintext` for a subscription: the whole request body.
pub fn encrypt(ua_public: &[u8], auth: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, EceError> {
    if plaintext.len() > MAX_PLAINTEXT {
        return Err(EceError::TooLong);
    }
    let rng = SystemRandom::new();
    let mut salt = [0u8; 16];
    rng.fill(&mut salt).map_err(|_| EceError::Random)?;
    let private = EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng).map_err(|_| EceError::Random)?;
    let as_public = private.compute_public_key().map_err(|_| EceError::Random)?;
    let peer = UnparsedPublicKey::new(&agreement::ECDH_P256, ua_public);
    let secret = agreement::agree_ephemeral(private, &peer, |s| {
        let mut out = [0u8; 32];
        out.copy_from_slice(s);
        out
    })
    .map_err(|_| EceError::BadKey)?;
    seal(&secret, ua_public, as_public.as_ref(), auth, &salt, plaintext)
}

/// RFC 8291 section 3.4 and RFC 8188 section 2, from the ECDH secret on: the header
/// (salt, record size, the sender's key as key id) and the one sealed record.
pub fn seal(
    ecdh_secret: &[u8; 32],
    ua_public: &[u8],
    as_public: &[u8],
    auth: &[u8],
    salt: &[u8; 16],
    plaintext: &[u8],
) -> Result<Vec<u8>, EceError> {
    if plaintext.len() > MAX_PLAINTEXT {
        return Err(EceError::TooLong);
    }
    if ua_public.len() != 65 || as_public.len() != 65 {
        return Err(EceError::BadKey);
    }
    let (cek, nonce) = derive(ecdh_secret, ua_public, as_public, auth, salt);
    let mut body = Vec::with_capacity(HEADER_BYTES + plaintext.len() + OVERHEAD);
    body.extend_from_slice(salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(65);
    body.extend_from_slice(as_public);
    let mut record = Vec::with_capacity(plaintext.len() + OVERHEAD);
    record.extend_from_slice(plaintext);
    record.push(2); // the last (and only) record's delimiter; no padding
    let key = LessSafeKey::new(UnboundKey::new(&aead::AES_128_GCM, &cek).expect("16 bytes is an AES-128 key"));
    key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut record)
        .expect("one record is far under AES-GCM's limit");
    body.extend_from_slice(&record);
    Ok(body)
}

/// The content-encryption key and nonce of the one record.
fn derive(
    ecdh_secret: &[u8; 32],
    ua_public: &[u8],
    as_public: &[u8],
    auth: &[u8],
    salt: &[u8; 16],
) -> ([u8; 16], [u8; 12]) {
    // PRK_key = HKDF-Extract(auth_secret, ecdh_secret); IKM = HKDF-Expand(PRK_key, key_info, 32)
    let prk_key = Salt::new(HKDF_SHA256, auth).extract(ecdh_secret);
    let mut ikm = [0u8; 32];
    let key_info: &[&[u8]] = &[b"WebPush: info\0", ua_public, as_public];
    expand(&prk_key, key_info, &mut ikm);
    // PRK = HKDF-Extract(salt, IKM); CEK and NONCE from it (RFC 8188 section 2.2, 2.3).
    let prk = Salt::new(HKDF_SHA256, salt).extract(&ikm);
    let mut cek = [0u8; 16];
    expand(&prk, &[b"Content-Encoding: aes128gcm\0"], &mut cek);
    let mut nonce = [0u8; 12];
    expand(&prk, &[b"Content-Encoding: nonce\0"], &mut nonce);
    (cek, nonce)
}

struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn expand(prk: &hkdf::Prk, info: &[&[u8]], out: &mut [u8]) {
    prk.expand(info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .expect("HKDF-SHA256 gives up to 8160 bytes; we ask for at most 32");
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_mobile::wire::push::{b64url, from_b64url};

    fn d(s: &str) -> Vec<u8> {
        from_b64url(s).unwrap()
    }

    // RFC 8291 Appendix A.
    const AS_PUBLIC: &str = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";
    const UA_PUBLIC: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const SALT: &str = "DGv6ra1nlYgDCS1FRnbzlw";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";
    const ECDH_SECRET: &str = "kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs";
    const CEK: &str = "oIhVW04MRdy2XN9CiKLxTg";
    const NONCE: &str = "4h_95klXJ5E_qnoN";
    const BODY: &str = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN";
    const PLAINTEXT: &[u8] = b"When I grow up, I want to be a watermelon";

    fn vector() -> ([u8; 32], [u8; 16]) {
        (d(ECDH_SECRET).try_into().unwrap(), d(SALT).try_into().unwrap())
    }

    #[test]
    fn the_key_and_nonce_are_the_rfcs() {
        let (secret, salt) = vector();
        let (cek, nonce) = derive(&secret, &d(UA_PUBLIC), &d(AS_PUBLIC), &d(AUTH), &salt);
        assert_eq!(b64url(&cek), CEK);
        assert_eq!(b64url(&nonce), NONCE);
    }

    #[test]
    fn the_body_is_the_rfcs_byte_for_byte_with_its_header_layout() {
        let (secret, salt) = vector();
        let body = seal(&secret, &d(UA_PUBLIC), &d(AS_PUBLIC), &d(AUTH), &salt, PLAINTEXT).unwrap();
        assert_eq!(b64url(&body), BODY);
        assert_eq!(&body[..16], &salt);
        assert_eq!(&body[16..20], &4096u32.to_be_bytes());
        assert_eq!(body[20], 65);
        assert_eq!(&body[21..86], &d(AS_PUBLIC)[..]);
        assert_eq!(body.len(), HEADER_BYTES + PLAINTEXT.len() + 1 + 16);
    }

    #[test]
    fn a_payload_over_one_record_and_a_key_off_the_curve_are_refused() {
        let (secret, salt) = vector();
        let big = vec![b'x'; MAX_PLAINTEXT + 1];
        assert_eq!(
            seal(&secret, &d(UA_PUBLIC), &d(AS_PUBLIC), &d(AUTH), &salt, &big),
            Err(EceError::TooLong)
        );
        let full = vec![b'x'; MAX_PLAINTEXT];
        let body = seal(&secret, &d(UA_PUBLIC), &d(AS_PUBLIC), &d(AUTH), &salt, &full).unwrap();
        assert_eq!(body.len(), 4096);
        let mut off_curve = d(UA_PUBLIC);
        off_curve[64] ^= 1;
        assert!(!is_p256_point(&off_curve));
        assert!(is_p256_point(&d(UA_PUBLIC)));
        assert_eq!(encrypt(&off_curve, &d(AUTH), b"x"), Err(EceError::BadKey));
        // Fresh salt and key each time.
        let a = encrypt(&d(UA_PUBLIC), &d(AUTH), b"x").unwrap();
        let b = encrypt(&d(UA_PUBLIC), &d(AUTH), b"x").unwrap();
        assert_ne!(a[..86], b[..86]);
    }
}
