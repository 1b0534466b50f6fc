//! The state directory: the generated token (decisions C3) and received media (U6).

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hermes_mobile::media::MAX_NAME_BYTES;

/// Random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The state directory, made owner-only (0700) if it is not there.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Where a token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    Configured,
    Stored(PathBuf),
    Created(PathBuf),
}

/// The token in the state directory, created (256 random bits, owner-only) if missing.
pub fn stored_token(state_dir: &Path) -> Result<(String, TokenOrigin), String> {
    let path = state_dir.join("token");
    match fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok((t.trim().to_owned(), TokenOrigin::Stored(path))),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read the token at {}: {e}", path.display())),
    }
    let token = hex(&random_bytes::<32>().map_err(|e| format!("no random source: {e}"))?);
    create_private_dir(state_dir)
        .map_err(|e| format!("cannot create the state directory {}: {e}", state_dir.display()))?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot write the token to {}: {e}", path.display()))?;
    // `mode` applies only when the file is created: an existing (empty) one keeps whatever
    // it had, so owner-only is enforced here, before the token is written (C3; issue 8 #17).
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot make {} owner-only: {e}", path.display()))?;
    writeln!(file, "{token}").map_err(|e| format!("cannot write the token to {}: {e}", path.display()))?;
    Ok((token, TokenOrigin::Created(path)))
}

/// Finished uploads on disk under `media/`, so agents that work with files can read them.
/// Bounded: the oldest files go once there are more than `max_files` or `max_bytes`. A
/// running total decides when; the directory is listed only to learn the total once, and
/// to choose what to remove when over (issue 8: no listing per saved upload on the loop).
#[derive(Debug)]
pub struct MediaStore {
    dir: PathBuf,
    max_files: usize,
    max_bytes: u64,
    /// Files and bytes under `dir`, once listed.
    totals: Option<(usize, u64)>,
    /// Names the bounds removed since [`MediaStore::take_removed`] (the core is told, L63).
    removed: Vec<String>,
}

impl MediaStore {
    pub fn new(state_dir: &Path) -> MediaStore {
        MediaStore {
            dir: state_dir.join("media"),
            max_files: 200,
            max_bytes: 256 * 1024 * 1024,
            totals: None,
            removed: Vec::new(),
        }
    }

    /// The names of the files the bounds removed since the last call.
    pub fn take_removed(&mut self) -> Vec<String> {
        std::mem::take(&mut self.removed)
    }

    /// The file the core named with `key` (32 hex digits), found by listing the directory.
    pub fn find(&self, key: &str) -> io::Result<Option<PathBuf>> {
        if !hermes_mobile::media::is_key(key) {
            return Ok(None);
        }
        let entries = match fs::read_dir(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            entries => entries?,
        };
        let found = entries.filter_map(Result::ok).find(|e| {
            let name = e.file_name();
            name.to_str().and_then(hermes_mobile::media::key_of_name) == Some(key)
        });
        Ok(found.map(|e| e.path()))
    }

    /// Deletes every file of `device` (`forget`, L60): each whose key the core gave for
    /// it. Files of other devices and files the core did not name stay.
    pub fn delete_for(&mut self, device: &hermes_mobile::DeviceId) -> io::Result<()> {
        let entries = match fs::read_dir(&self.dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            entries => entries?,
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let mine = hermes_mobile::media::key_of_name(&name)
                .is_some_and(|key| hermes_mobile::media::key_is_for(key, device));
            if mine {
                fs::remove_file(entry.path())?;
                self.removed.push(name);
            }
        }
        self.totals = None; // listed again at the next save
        Ok(())
    }

    /// The names of the files under `media/`, for the core at start-up (L63).
    pub fn names(state_dir: &Path) -> Vec<String> {
        let Ok(entries) = fs::read_dir(state_dir.join("media")) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }

    /// Writes a file as `<ms>-<device>-<sanitized name>` (decisions U6, L26); returns its path.
    /// Never overwrites: a second file with the same name in the same millisecond gets `-1`,
    /// `-2`, … before its extension. For a file the core did not name (L63).
    pub fn save(&mut self, now_ms: u128, device: &str, filename: &str, data: &[u8]) -> io::Result<PathBuf> {
        create_private_dir(&self.dir)?;
        for n in 0..100 {
            let path = self.dir.join(disk_name(now_ms, device, filename, n));
            match self.write_new(&path, data) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                result => return result.map(|()| path),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "100 files of that name this millisecond",
        ))
    }

    /// Writes a file under the name the core gave it (L63). The name holds 64 random bits,
    /// so one already there is this same file, saved before a restart handed its message
    /// over again: it is written anew (a crash may have cut it short), not counted twice.
    pub fn save_as(&mut self, name: &str, data: &[u8]) -> io::Result<PathBuf> {
        if hermes_mobile::media::key_of_name(name).is_none() || name.contains('/') || name.len() > MAX_NAME_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a media name"));
        }
        create_private_dir(&self.dir)?;
        let path = self.dir.join(name);
        match self.write_new(&path, data) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let mut file = fs::OpenOptions::new().write(true).truncate(true).open(&path)?;
                file.write_all(data).map(|()| path)
            }
            result => result.map(|()| path),
        }
    }

    /// Creates `path` (never an existing file), writes `data` and counts it against the
    /// bounds, removing the oldest files when over.
    fn write_new(&mut self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        if let Err(e) = file.write_all(data) {
            // A partial file would be counted nowhere (disk full): it goes.
            let _ = fs::remove_file(path);
            return Err(e);
        }
        let (files, bytes) = match self.totals {
            Some((n, b)) => (n + 1, b + data.len() as u64),
            // The first save lists the directory once (the new file included).
            None => self.list()?.iter().fold((0, 0), |(n, b), f| (n + 1, b + f.1)),
        };
        self.totals = Some((files, bytes));
        if files > self.max_files || bytes > self.max_bytes {
            self.prune()?;
        }
        Ok(())
    }

    /// The files under `dir`: (modified, length, path).
    fn list(&self) -> io::Result<Vec<(std::time::SystemTime, u64, PathBuf)>> {
        Ok(fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                let modified = meta.modified().ok()?;
                meta.is_file().then(|| (modified, meta.len(), e.path()))
            })
            .collect())
    }

    fn prune(&mut self) -> io::Result<()> {
        let mut files = self.list()?;
        files.sort();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        let mut count = files.len();
        for (_, len, path) in files {
            if count <= self.max_files && total <= self.max_bytes {
                break;
            }
            fs::remove_file(&path)?;
            if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                self.removed.push(name.to_owned());
            }
            total -= len;
            count -= 1;
        }
        self.totals = Some((count, total));
        Ok(())
    }
}

/// `<ms>-<device>-<stem>[-n]<.ext>` (L26), cut as the core cuts its own names.
fn disk_name(now_ms: u128, device: &str, filename: &str, n: u32) -> String {
    let suffix = if n == 0 { String::new() } else { format!("-{n}") };
    hermes_mobile::media::disk_name(&now_ms.to_string(), device, filename, &suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_in_bytes_keeping_the_extension_and_never_overwrite() {
        // decisions U6, L26; issue 8 #11
        let dir = temp("media-names");
        let mut store = MediaStore::new(&dir);
        let device = "é".repeat(120);
        let filename = format!("{}.jpeg", "日".repeat(196));
        let a = store.save(1, &device, &filename, b"first").unwrap();
        let b = store.save(1, &device, &filename, b"second").unwrap();
        assert_ne!(a, b);
        for (path, body) in [(&a, "first"), (&b, "second")] {
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(name.len() <= MAX_NAME_BYTES, "{} bytes", name.len());
            assert!(name.ends_with(".jpeg"), "{name}");
            assert_eq!(fs::read_to_string(path).unwrap(), body);
        }
        fs::remove_dir_all(dir).unwrap();
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hm-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn an_existing_empty_token_file_is_made_owner_only_before_the_token_is_written() {
        // decisions C3; issue 8 #17
        let dir = temp("token-empty");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        fs::write(&path, "").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let (token, _) = stored_token(&dir).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap().trim(), token);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn token_is_created_once_private_and_reused() {
        // decisions C3
        let dir = temp("token");
        let (a, origin) = stored_token(&dir).unwrap();
        assert!(matches!(origin, TokenOrigin::Created(_)));
        assert_eq!(a.len(), 64, "256 bits in hex");
        let mode = fs::metadata(dir.join("token")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (b, origin) = stored_token(&dir).unwrap();
        assert_eq!(a, b);
        assert!(matches!(origin, TokenOrigin::Stored(_)));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn media_names_are_sanitized_and_the_directory_is_bounded() {
        // decisions U6
        let dir = temp("media");
        let mut store = MediaStore::new(&dir);
        store.max_files = 3;
        let p = store.save(1, "tel/1", "../../x.txt", b"hi").unwrap();
        assert!(p.starts_with(dir.join("media")));
        assert!(!p.file_name().unwrap().to_str().unwrap().contains('/'));
        for i in 2..=6 {
            store.save(i, "tel-1", "f.bin", b"x").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5)); // mtimes apart
        }
        assert_eq!(fs::read_dir(dir.join("media")).unwrap().count(), 3);
        let removed = store.take_removed();
        assert_eq!(removed.len(), 3, "{removed:?}");
        assert!(removed[0].starts_with("1-tel_1-"), "the oldest first: {removed:?}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_file_the_core_named_is_saved_under_that_name_once() {
        // L63: handed over again after a restart, the same file is written anew.
        let dir = temp("media-named");
        let mut store = MediaStore::new(&dir);
        let name = format!("{}-tel-1-cat.png", "0123456789abcdef".repeat(2));
        let path = store.save_as(&name, b"cut short").unwrap();
        assert_eq!(path, dir.join("media").join(&name));
        store.save_as(&name, b"whole").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"whole");
        assert_eq!(store.totals, Some((1, 9)), "counted once");
        for bad in ["../x", "cat.png", &format!("{}/x", "0".repeat(32))] {
            assert!(store.save_as(bad, b"x").is_err(), "{bad}");
        }
        assert_eq!(store.find(&name[..32]).unwrap(), Some(path));
        assert_eq!(store.find(&"f".repeat(32)).unwrap(), None);
        assert_eq!(store.find("..").unwrap(), None);
        assert_eq!(MediaStore::names(&dir), [name]);
        fs::remove_dir_all(dir).unwrap();
    }
}

/// `<state dir>/gateway.lock`, held with `flock` (issue 26, L72): a gateway holds it for its
/// whole life, taken before it touches anything in the directory; the CLI holds it while
/// it changes the journal with the gateway stopped. A lock ends with its process, so it
/// cannot go stale the way a socket file can.
#[derive(Debug)]
pub struct StateLock {
    _file: fs::File,
}

pub const LOCK_FILE: &str = "gateway.lock";

/// Takes the state directory's lock, waiting up to `wait` for another holder (the CLI
/// holds it for milliseconds); `Ok(None)` when it is still held after that.
pub fn lock_state_dir(dir: &Path, wait: std::time::Duration) -> io::Result<Option<StateLock>> {
    use std::os::unix::io::AsRawFd;
    create_private_dir(dir)?;
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(LOCK_FILE))?;
    let until = std::time::Instant::now() + wait;
    loop {
        // SAFETY: flock on a descriptor this function owns; it only sets a lock.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Some(StateLock { _file: file }));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e);
        }
        if std::time::Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
