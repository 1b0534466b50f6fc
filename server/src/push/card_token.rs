//! The single-use tokens behind a notification's buttons (issue 25, L67): pure, on the
//! caller's clock (unix seconds).
//!
//! A token is `base64url(expiry ‖ HMAC-SHA256(key, what it answers ‖ expiry))`, where what
//! it answers is the device, the card's id, the option and the digest of everything the
//! card shows ([`hermes_mobile::prompts::Card::answer_digest`]). So a `deny` token never
//! approves, a token of one device never answers another's card, and a token never answers
//! a card that shows something else, even one reopened under the same id. The expiry rides
//! in the token, under the MAC, because the core's clock starts again at every restart:
//! the card's own expiry must agree with it to within [`EXPIRY_SLACK_SECS`].
//!
//! Single use: a card closes at its first answer, for good (the journal keeps that), and a
//! token used once is remembered in memory until it expires as well. The one gap: an
//! answer whose commit failed (the route said 500 `not_kept`) leaves the card open on disk,
//! and after a restart its token works again (L67).

use std::collections::VecDeque;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hmac;

/// The key's length in bytes.
pub const KEY_BYTES: usize = 32;
/// Mint and check each read the card's expiry through the wall clock, a few ms apart,
/// and the clock may be stepped (NTP) in between: they must agree to within this.
pub const EXPIRY_SLACK_SECS: u64 = 120;
/// Tokens remembered as used; the oldest goes first past it (each card refuses a second
/// answer anyway).
const MAX_SPENT: usize = 4096;
/// A token's length in bytes: the expiry (8) and the MAC (32).
const TOKEN_BYTES: usize = 8 + 32;
const CONTEXT: &[u8] = b"hermes-mobile card answer v1\0";

/// What a token answers.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub device: &'a str,
    pub card: &'a str,
    pub option: &'a str,
    pub digest: &'a [u8; 32],
}

/// How a token reads against a card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Valid,
    /// Not a token for this device, card, option and card's contents (or another key's).
    Forbidden,
    /// Its card has expired, or it was used before: the card is closed for it.
    Closed,
}

pub struct CardTokens {
    key: hmac::Key,
    /// (expiry, MAC) of tokens used, oldest first.
    spent: VecDeque<(u64, [u8; 32])>,
}

impl CardTokens {
    pub fn new(key: &[u8; KEY_BYTES]) -> CardTokens {
        CardTokens {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
            spent: VecDeque::new(),
        }
    }

    /// A token for `answer` of a card that expires at `expires_unix`.
    pub fn mint(&self, answer: Answer<'_>, expires_unix: u64) -> String {
        let tag = self.tag(answer, expires_unix);
        let mut bytes = [0u8; TOKEN_BYTES];
        bytes[..8].copy_from_slice(&expires_unix.to_be_bytes());
        bytes[8..].copy_from_slice(tag.as_ref());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Reads `token` against the open card it names, whose expiry is `card_expires_unix`.
    /// The work is one HMAC whatever the token: it is decoded from at most its own length.
    pub fn check(&self, token: &str, answer: Answer<'_>, card_expires_unix: u64, now_unix: u64) -> Verdict {
        let Some((expires, mac)) = decode(token) else {
            return Verdict::Forbidden;
        };
        let msg = message(answer, expires);
        // Constant time (ring): nothing is learnt from where a guess differs.
        if hmac::verify(&self.key, &msg, &mac).is_err() {
            return Verdict::Forbidden;
        }
        if expires.abs_diff(card_expires_unix) > EXPIRY_SLACK_SECS {
            // A token of another card under the same id, with the same contents.
            return Verdict::Forbidden;
        }
        if expires < now_unix || self.spent.iter().any(|(_, m)| *m == mac) {
            return Verdict::Closed;
        }
        Verdict::Valid
    }

    /// A token was used: it is refused from now on, until it expires.
    pub fn spend(&mut self, token: &str, now_unix: u64) {
        let Some((expires, mac)) = decode(token) else { return };
        self.spent.retain(|(e, _)| *e >= now_unix);
        if self.spent.len() >= MAX_SPENT {
            self.spent.pop_front();
        }
        self.spent.push_back((expires, mac));
    }

    fn tag(&self, answer: Answer<'_>, expires_unix: u64) -> hmac::Tag {
        hmac::sign(&self.key, &message(answer, expires_unix))
    }
}

/// What the MAC covers: each field with its length, so no two answers share a message.
fn message(a: Answer<'_>, expires_unix: u64) -> Vec<u8> {
    let mut msg = Vec::with_capacity(CONTEXT.len() + 64 + a.device.len() + a.card.len() + a.option.len());
    msg.extend_from_slice(CONTEXT);
    for field in [a.device.as_bytes(), a.card.as_bytes(), a.option.as_bytes(), a.digest] {
        msg.extend_from_slice(&(field.len() as u64).to_be_bytes());
        msg.extend_from_slice(field);
    }
    msg.extend_from_slice(&expires_unix.to_be_bytes());
    msg
}

fn decode(token: &str) -> Option<(u64, [u8; 32])> {
    // 40 bytes are 54 characters: anything longer is not a token, and is not decoded.
    if token.len() != TOKEN_BYTES.div_ceil(3) * 4 - 2 {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
    let bytes: [u8; TOKEN_BYTES] = bytes.try_into().ok()?;
    let expires = u64::from_be_bytes(bytes[..8].try_into().ok()?);
    let mac = bytes[8..].try_into().ok()?;
    Some((expires, mac))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000;
    const DIGEST: [u8; 32] = [7; 32];

    fn deny() -> Answer<'static> {
        Answer {
            device: "tel-1",
            card: "c1",
            option: "deny",
            digest: &DIGEST,
        }
    }

    #[test]
    fn a_token_answers_only_its_device_card_option_and_contents() {
        let tokens = CardTokens::new(&[1; KEY_BYTES]);
        let token = tokens.mint(deny(), T0 + 300);
        assert_eq!(token.len(), 54);
        assert_eq!(tokens.check(&token, deny(), T0 + 300, T0), Verdict::Valid);
        let other = [8; 32];
        for wrong in [
            Answer {
                option: "once",
                ..deny()
            },
            Answer {
                device: "tel-2",
                ..deny()
            },
            Answer { card: "c2", ..deny() },
            Answer {
                digest: &other,
                ..deny()
            },
            // The fields are length-prefixed: moving a character across them changes it.
            Answer {
                device: "tel-1c",
                card: "1",
                ..deny()
            },
        ] {
            assert_eq!(
                tokens.check(&token, wrong, T0 + 300, T0),
                Verdict::Forbidden,
                "{wrong:?}"
            );
        }
        for garbage in ["", "x", &token[..53], &format!("{token}A"), &"A".repeat(10_000)] {
            assert_eq!(tokens.check(garbage, deny(), T0 + 300, T0), Verdict::Forbidden);
        }
        // One bit of the MAC or of the expiry changed.
        let mut bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in [0, 7, 8, 39] {
            bytes[i] ^= 1;
            let forged = URL_SAFE_NO_PAD.encode(&bytes);
            assert_eq!(
                tokens.check(&forged, deny(), T0 + 300, T0),
                Verdict::Forbidden,
                "byte {i}"
            );
            bytes[i] ^= 1;
        }
    }

    #[test]
    fn the_expiry_binds_it_to_its_card_and_ends_it() {
        let tokens = CardTokens::new(&[1; KEY_BYTES]);
        let token = tokens.mint(deny(), T0 + 300);
        // The card's expiry as read after a restart, a little off: still its card.
        assert_eq!(tokens.check(&token, deny(), T0 + 301, T0), Verdict::Valid);
        assert_eq!(tokens.check(&token, deny(), T0 + 299, T0 + 299), Verdict::Valid);
        // A card under the same id, opened later: not its card.
        let later = T0 + 300 + EXPIRY_SLACK_SECS + 1;
        assert_eq!(tokens.check(&token, deny(), later, T0), Verdict::Forbidden);
        // Past its expiry: closed, whatever the card says.
        assert_eq!(tokens.check(&token, deny(), T0 + 300, T0 + 301), Verdict::Closed);
    }

    #[test]
    fn a_token_is_single_use_and_a_new_key_ends_every_token() {
        let mut tokens = CardTokens::new(&[1; KEY_BYTES]);
        let token = tokens.mint(deny(), T0 + 300);
        let cancel = tokens.mint(
            Answer {
                option: "cancel",
                ..deny()
            },
            T0 + 300,
        );
        tokens.spend(&token, T0 + 10);
        assert_eq!(tokens.check(&token, deny(), T0 + 300, T0 + 11), Verdict::Closed);
        let cancel_answer = Answer {
            option: "cancel",
            ..deny()
        };
        assert_eq!(tokens.check(&cancel, cancel_answer, T0 + 300, T0 + 11), Verdict::Valid);
        // Spent tokens are forgotten once expired; the list stays bounded.
        for i in 0..(MAX_SPENT as u64 + 10) {
            let t = tokens.mint(Answer { card: "cx", ..deny() }, T0 + 400 + i);
            tokens.spend(&t, T0 + 350);
        }
        assert!(tokens.spent.len() <= MAX_SPENT);
        let rekeyed = CardTokens::new(&[2; KEY_BYTES]);
        assert_eq!(rekeyed.check(&cancel, cancel_answer, T0 + 300, T0), Verdict::Forbidden);
    }
}
