//! Push's files in the state directory, all mode 0600: the VAPID key (made on first
//! start, kept so that subscriptions survive a restart) and the subscriptions (replaced
//! atomically by the file worker whenever they change).

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::vapid::Vapid;

const KEY_FILE: &str = "push-vapid-key.p8";
const SUBSCRIPTIONS_FILE: &str = "push-subscriptions.json";
/// A subscriptions file larger than this is not ours (64 devices × 4 × 2.3 KB is ~600 KB).
const MAX_SUBSCRIPTIONS_BYTES: u64 = 2 * 1024 * 1024;

pub fn subscriptions_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SUBSCRIPTIONS_FILE)
}

/// The kept key, or a new one written with `O_EXCL` and mode 0600. A key file that is
/// not a key stops start-up: making a new one silently would orphan every subscription.
pub fn vapid_key(state_dir: &Path) -> Result<Vapid, String> {
    crate::state::create_private_dir(state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let path = state_dir.join(KEY_FILE);
    match fs::read(&path) {
        Ok(bytes) => {
            tighten(&path)?;
            Vapid::from_pkcs8(&bytes).map_err(|e| {
                format!(
                    "{}: {e}; move it away to make a new key (phones then turn notifications on again)",
                    path.display()
                )
            })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let (vapid, pkcs8) = Vapid::generate()?;
            // Written whole beside it, then linked into place: a power cut leaves no
            // empty key, and `link` fails rather than replace a key made meanwhile.
            let tmp = state_dir.join(format!("{KEY_FILE}.tmp-{}", std::process::id()));
            let _ = fs::remove_file(&tmp);
            let written = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .and_then(|mut file| file.write_all(&pkcs8).and_then(|()| file.sync_all()))
                .and_then(|()| fs::hard_link(&tmp, &path));
            let _ = fs::remove_file(&tmp);
            written.map_err(|e| format!("{}: {e}", path.display()))?;
            log::info!("push: made a VAPID key in {:?}", path);
            Ok(vapid)
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
        fs::remove_dir_all(&dir).unwrap();
    }
}
