//! Push's files in the state directory, all mode 0600: the VAPID key (made on first
//! start, kept so that subscriptions survive a restart) and the subscriptions (replaced
//! atomically by the file worker whenever they change).

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::vapid::Vapid;

const KEY_FILE: &str = "push-vapid-key.p8";
/// The key of the notification buttons' tokens (issue 25): 32 random bytes.
const CARD_KEY_FILE: &str = "card-answer.key";
const SUBSCRIPTIONS_FILE: &str = "push-subscriptions.json";
/// A subscriptions file larger than this is not ours (64 devices × 4 × 2.3 KB is ~600 KB).
const MAX_SUBSCRIPTIONS_BYTES: u64 = 2 * 1024 * 1024;

pub fn subscriptions_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SUBSCRIPTIONS_FILE)
}

/// The kept key, or a new one written with `O_EXCL` and mode 0600. A key file that is
/// not a key stops start-up: making a new one silently would orphan every subscription.
pub fn vapid_key(state_dir: &Path) -> Result<Vapid, String> {
    let path = state_dir.join(KEY_FILE);
    let bytes = private_file(state_dir, KEY_FILE, || Vapid::generate().map(|(_, pkcs8)| pkcs8))?;
    Vapid::from_pkcs8(&bytes).map_err(|e| {
        format!(
            "{}: {e}; move it away to make a new key (phones then turn notifications on again)",
            path.display()
        )
    })
}

/// The card answers' key (L67), made on first start. A new key ends every token out:
/// their buttons then answer 403, and the card is answered in the app.
pub fn card_key(state_dir: &Path) -> Result<[u8; super::card_token::KEY_BYTES], String> {
    let make = || {
        let mut key = [0u8; super::card_token::KEY_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
            .map_err(|_| "no randomness for the card answers' key".to_owned())?;
        Ok(key.to_vec())
    };
    let bytes = private_file(state_dir, CARD_KEY_FILE, make)?;
    bytes.try_into().map_err(|_| {
        format!(
            "{}: not a key; move it away to make a new one (notifications already sent lose their buttons)",
            state_dir.join(CARD_KEY_FILE).display()
        )
    })
}

/// A private file's bytes, made by `make` if there is none yet.
fn private_file(
    state_dir: &Path,
    name: &str,
    make: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    crate::state::create_private_dir(state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let path = state_dir.join(name);
    match fs::read(&path) {
        Ok(bytes) => {
            tighten(&path)?;
            Ok(bytes)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let bytes = make()?;
            // Written whole beside it, then linked into place: a power cut leaves no
            // empty key, and `link` fails rather than replace a key made meanwhile.
            let tmp = state_dir.join(format!("{name}.tmp-{}", std::process::id()));
            let _ = fs::remove_file(&tmp);
            let written = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()))
                .and_then(|()| fs::hard_link(&tmp, &path));
            let _ = fs::remove_file(&tmp);
            written.map_err(|e| format!("{}: {e}", path.display()))?;
            log::info!("push: made {:?}", path);
            Ok(bytes)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The kept subscriptions' JSON, if there is a file.
pub fn read_subscriptions(state_dir: &Path) -> Result<Option<String>, String> {
    let path = subscriptions_path(state_dir);
    match fs::metadata(&path) {
        Ok(m) if m.len() > MAX_SUBSCRIPTIONS_BYTES => {
            return Err(format!(
                "{}: over {MAX_SUBSCRIPTIONS_BYTES} bytes; not a subscriptions file",
                path.display()
            ))
        }
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    tighten(&path)?;
    fs::read_to_string(&path)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether `device` has a kept subscription (the CLI, with the gateway stopped).
pub fn has_subscription(state_dir: &Path, device: &hermes_mobile::DeviceId) -> bool {
    let Ok(Some(json)) = read_subscriptions(state_dir) else {
        return false;
    };
    hermes_mobile::push::Registry::restore(&json).is_ok_and(|r| r.has(device))
}

/// Drops a revoked device's subscriptions with the gateway stopped (issue 26): the file is
/// replaced whole, as the gateway replaces it.
pub fn drop_device(state_dir: &Path, device: &hermes_mobile::DeviceId) -> Result<(), String> {
    let Some(json) = read_subscriptions(state_dir)? else {
        return Ok(());
    };
    let path = subscriptions_path(state_dir);
    let mut registry = hermes_mobile::push::Registry::restore(&json).map_err(|e| format!("{}: {e}", path.display()))?;
    if !registry.unsubscribe(device) {
        return Ok(());
    }
    // A new file (never one found there, nor through a link), as the state directory's
    // owner: `sudo hermes-mobile devices revoke` has become that user (L72).
    let tmp = state_dir.join(format!("{SUBSCRIPTIONS_FILE}.tmp-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(registry.snapshot().as_bytes()).and_then(|()| f.sync_all()));
    written
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A file copied in with looser permissions is made private again.
fn tighten(path: &Path) -> Result<(), String> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_private_and_read_back_the_same() {
        let dir = std::env::temp_dir().join(format!("hm-push-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let first = vapid_key(&dir).unwrap();
        let mode = fs::metadata(dir.join(KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(vapid_key(&dir).unwrap().public_key(), first.public_key());
        assert_eq!(read_subscriptions(&dir).unwrap(), None);
        fs::write(dir.join(KEY_FILE), b"garbage").unwrap();
        assert!(vapid_key(&dir).unwrap_err().contains("move it away"));
        let card = card_key(&dir).unwrap();
        let mode = fs::metadata(dir.join(CARD_KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode, card_key(&dir).unwrap()), (0o600, card));
        assert_ne!(card, [0; 32]);
        fs::write(dir.join(CARD_KEY_FILE), b"short").unwrap();
        assert!(card_key(&dir).unwrap_err().contains("move it away"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
