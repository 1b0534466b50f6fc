//! Files the gateway keeps in its media store (L26, L63): the names the core gives them, the
//! `url` a history item carries, and which files the store still has.
//!
//! The core names every file it asks the server to keep (a person's upload or voice note, a
//! file sent to a device): `<key>-<device>-<name>`. The key is 32 hex digits: a digest of
//! the device id, then 64 random bits. The digest binds the file to its device, so the
//! `/files/` route tells whose a file is from its name alone, across restarts and with no
//! index beside the directory; the random half keeps names unique. Access rests on the
//! token checked against the device (L63), never on a name being hard to guess.

use std::collections::{HashSet, VecDeque};

use ::base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ::base64::Engine;
use sha2::{Digest, Sha256};

use crate::ids::DeviceId;
use crate::mime::sanitize_filename;

/// Hex digits of a key: the device's digest (16), then the random part (16).
pub const KEY_LEN: usize = 32;
const DIGEST_LEN: usize = 16;
/// The longest file name written, in bytes: file systems allow 255 (issue 8 #11).
pub const MAX_NAME_BYTES: usize = 240;
/// The device's share of a name: a device id may be 120 characters of up to 4 bytes each.
const MAX_DEVICE_BYTES: usize = 48;
/// An extension longer than this is treated as part of the name.
const MAX_EXTENSION_BYTES: usize = 16;
/// Keys remembered as kept. L26 keeps at most 200 files; a directory filled by hand is
/// remembered up to this many, the newest first.
pub const MAX_KEPT: usize = 4096;
/// Where the route lives: `/files/<device, percent-encoded>/<key>`.
pub const ROUTE: &str = "/files/";

/// The first 16 hex digits of the SHA-256 of the device id.
fn device_digest(device: &str) -> String {
    Sha256::digest(device.as_bytes())[..DIGEST_LEN / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A new key for a file of `device`; `random` from the core's id generator.
pub fn new_key(device: &DeviceId, random: u64) -> String {
    format!("{}{random:016x}", device_digest(device.as_str()))
}

/// Exactly [`KEY_LEN`] lower-case hex digits: the only thing of a URL that ever comes near
/// a file name.
pub fn is_key(s: &str) -> bool {
    s.len() == KEY_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `key` names a file of `device`.
pub fn key_is_for(key: &str, device: &DeviceId) -> bool {
    is_key(key) && key[..DIGEST_LEN] == device_digest(device.as_str())
}

/// The key a stored name begins with, if it is a name the core gave.
pub fn key_of_name(name: &str) -> Option<&str> {
    let key = name.get(..KEY_LEN)?;
    (is_key(key) && name[KEY_LEN..].starts_with('-')).then_some(key)
}

/// `<prefix>-<device>-<stem><suffix><.ext>`, sanitized (L18) and at most
/// [`MAX_NAME_BYTES`] bytes, cut at character boundaries with the extension kept, so that
/// agents and people still see what the file is (L26).
pub fn disk_name(prefix: &str, device: &str, filename: &str, suffix: &str) -> String {
    let device = sanitize_filename(device);
    let name = sanitize_filename(filename);
    let (stem, ext) = match name.rfind('.') {
        Some(dot) if dot > 0 && name.len() - dot <= MAX_EXTENSION_BYTES => name.split_at(dot),
        _ => (name.as_str(), ""),
    };
    let prefix = format!("{prefix}-{}-", cut(&device, MAX_DEVICE_BYTES));
    let room = MAX_NAME_BYTES.saturating_sub(prefix.len() + suffix.len() + ext.len());
    format!("{prefix}{}{suffix}{ext}", cut(stem, room))
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The `url` of a kept file of `device`. The device id goes in unpadded base64url: it may
/// hold any character but a control (L50), `/`, `%` and `.` among them, and a path segment
/// of dots (even `%2E%2E`) is one a browser resolves away before it sends the request.
pub fn url(device: &DeviceId, key: &str) -> String {
    format!("{ROUTE}{}/{key}", URL_SAFE_NO_PAD.encode(device.as_str()))
}

/// A request path of the route, taken apart: `None` for anything but exactly
/// `/files/<device>/<key>` with a well-encoded device and a well-formed key.
pub fn parse_path(path: &str) -> Option<(DeviceId, String)> {
    let (device, key) = path.strip_prefix(ROUTE)?.split_once('/')?;
    if device.is_empty() || !is_key(key) {
        return None;
    }
    let device = String::from_utf8(URL_SAFE_NO_PAD.decode(device).ok()?).ok()?;
    Some((DeviceId(device), key.to_owned()))
}

/// Why the route refuses a request's credential (L63).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileRefusal {
    /// No token, a wrong one, or a device H3 does not allow: 401.
    Unauthorized,
    /// A token bound to another device, or a deliver token: 403.
    Forbidden,
    /// The address failed too often (L52): 429, its token not looked at.
    Blocked { retry_after_secs: u64 },
}

/// The keys of the files the media store still has, as the server reports them.
#[derive(Debug, Default)]
pub struct Kept {
    keys: HashSet<String>,
    /// Oldest first, to forget the oldest past [`MAX_KEPT`].
    order: VecDeque<String>,
}

impl Kept {
    pub fn insert(&mut self, key: &str) {
        if self.keys.insert(key.to_owned()) {
            self.order.push_back(key.to_owned());
        }
        while self.order.len() > MAX_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
            }
        }
    }

    pub fn remove(&mut self, key: &str) {
        if self.keys.remove(key) {
            self.order.retain(|k| k != key);
        }
    }

    pub fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// Forgets every file of `device` (`forget`).
    pub fn remove_for(&mut self, device: &DeviceId) {
        self.keys.retain(|k| !key_is_for(k, device));
        self.order.retain(|k| !key_is_for(k, device));
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_binds_its_device_and_a_name_gives_its_key_back() {
        let tel = DeviceId::from("tel-1");
        let key = new_key(&tel, 0xfeed);
        assert!(is_key(&key) && key.ends_with("000000000000feed"));
        assert!(key_is_for(&key, &tel));
        assert!(!key_is_for(&key, &DeviceId::from("tel-2")));
        let name = disk_name(&key, "tel-1", "../photo.png", "");
        assert_eq!(name, format!("{key}-tel-1-_photo.png"));
        assert_eq!(key_of_name(&name), Some(key.as_str()));
        assert_eq!(key_of_name("1712345678901-tel-1-photo.png"), None, "L26's older names");
        assert!(!is_key(&key.to_uppercase()) && !is_key(&key[1..]));
    }

    #[test]
    fn names_are_cut_in_bytes_keeping_the_extension() {
        let name = disk_name("k", &"é".repeat(120), &format!("{}.jpeg", "日".repeat(196)), "-1");
        assert!(name.len() <= MAX_NAME_BYTES, "{} bytes", name.len());
        assert!(name.ends_with("-1.jpeg"), "{name}");
    }

    #[test]
    fn the_url_round_trips_through_the_route_and_nothing_else_does() {
        let key = new_key(&DeviceId::from("x"), 1);
        for device in ["tel-1", "a/b", "..", ".", "100%", "телефон 1", "a?b#c"] {
            let url = url(&DeviceId::from(device), &key);
            assert!(!url[ROUTE.len()..].contains(['.', '%', '?', '#']), "{url}");
            assert_eq!(parse_path(&url), Some((DeviceId::from(device), key.clone())), "{url}");
        }
        for bad in [
            format!("/files/tel-1/{key}/x"),
            format!("/files/tel-1/../{key}"),
            format!("/files//{key}"),
            format!("/files/tel-1/{}", &key[..31]),
            format!("/files/dGVsLTE=/{key}"),
            format!("/files/%2E%2E/{key}"),
            format!("/files/_w/{key}"),
            "/files/tel-1/../../etc/passwd".to_owned(),
            "/files/".to_owned(),
        ] {
            assert_eq!(parse_path(&bad), None, "{bad}");
        }
    }

    #[test]
    fn kept_keys_are_bounded_oldest_first() {
        let mut kept = Kept::default();
        for i in 0..=MAX_KEPT {
            kept.insert(&format!("{i:032x}"));
        }
        assert_eq!(kept.len(), MAX_KEPT);
        assert!(!kept.contains(&format!("{:032x}", 0)));
        kept.remove(&format!("{:032x}", 1));
        assert!(!kept.contains(&format!("{:032x}", 1)) && kept.contains(&format!("{:032x}", 2)));
    }
}
