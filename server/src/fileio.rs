//! File reads and writes off the event loop.
//!
//! Saving an 8 MiB upload, or reading the file an agent names, can take tens of
//! milliseconds on an SD card; on the loop that would stall every connection. One worker
//! thread does them in order and wakes the loop (a `mio::Waker`) when each is done. The
//! buffers move to the worker and back, so nothing is copied.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use hermes_mobile::{AgentEvent, DeviceId};
use mio::Waker;

use crate::agent::io::LoadError;
use crate::state::MediaStore;

/// Names a job, to match its result; chosen by the caller (the wiring).
pub type Ticket = u64;

enum Job {
    /// Save the file or voice note the event carries; hand the event back.
    Save { ticket: Ticket, event: Box<AgentEvent> },
    /// Read a file of at most `limit` bytes.
    Load {
        ticket: Ticket,
        path: PathBuf,
        limit: usize,
    },
    /// Keep a file sent to a device in the media store under the core's name (L63).
    SaveMedia { name: String, data: Vec<u8> },
    /// Delete every file of the device from the media store (`forget`); the names go back
    /// as `Done::MediaRemoved`.
    DeleteMedia { device: DeviceId },
    /// Read the media store's file `key` (32 hex digits, checked) for the `/files/` route.
    Fetch { ticket: Ticket, key: String },
    /// Replace a small file atomically (an HTTP agent's conversation); nothing to report.
    Persist { path: PathBuf, contents: Vec<u8> },
    /// Replace a file with the newest contents in `slot`, if still there ([`FileWorker::persist_latest`]).
    PersistLatest { path: PathBuf, slot: Slot },
}

/// The newest contents of a file not yet written: a newer snapshot replaces an older one.
type Slot = Arc<Mutex<Option<Vec<u8>>>>;

/// A finished job.
pub enum Done {
    Saved {
        ticket: Ticket,
        event: Box<AgentEvent>,
        result: io::Result<PathBuf>,
    },
    Loaded {
        ticket: Ticket,
        result: Result<Vec<u8>, LoadError>,
    },
    /// A `SaveMedia` is done.
    MediaSaved { name: String, result: io::Result<()> },
    /// L26's bounds removed these files from the media store.
    MediaRemoved(Vec<String>),
    /// A `Fetch` is done: the file's name and bytes.
    Fetched {
        ticket: Ticket,
        result: Result<(String, Vec<u8>), FetchError>,
    },
}

/// Why the media store's file could not be read for the route.
#[derive(Debug)]
pub enum FetchError {
    /// No such file (any more): 404.
    NotFound,
    /// It is there but could not be read: 500, logged.
    Unreadable(String),
}

pub struct FileWorker {
    jobs: Option<Sender<Job>>,
    latest: HashMap<PathBuf, Slot>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
}

impl FileWorker {
    pub fn start(state_dir: &Path, waker: Arc<Waker>) -> io::Result<FileWorker> {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel::<Done>();
        let mut store = MediaStore::new(&std::path::absolute(state_dir)?);
        let thread = std::thread::Builder::new().name("file-io".into()).spawn(move || {
            for job in job_rx {
                let done = run(&mut store, job);
                let removed = store.take_removed();
                let removed = (!removed.is_empty()).then_some(Done::MediaRemoved(removed));
                if done.is_none() && removed.is_none() {
                    continue;
                }
                for done in done.into_iter().chain(removed) {
                    if done_tx.send(done).is_err() {
                        return;
                    }
                }
                let _ = waker.wake();
            }
        })?;
        Ok(FileWorker {
            jobs: Some(jobs),
            latest: HashMap::new(),
            done,
            thread: Some(thread),
        })
    }

    fn submit(&mut self, job: Job) {
        if let Some(jobs) = &self.jobs {
            // The worker lives as long as the server; a send fails only if it panicked.
            if jobs.send(job).is_err() {
                log::error!("the file worker has stopped; files can no longer be saved or read");
            }
        }
    }

    /// Saves the event's file or voice note; `Done::Saved` carries `ticket` (the caller's).
    pub fn save(&mut self, ticket: Ticket, event: Box<AgentEvent>) {
        self.submit(Job::Save { ticket, event });
    }

    /// Deletes the device's files from the media store (`forget`, L60).
    pub fn delete_media(&mut self, device: DeviceId) {
        self.submit(Job::DeleteMedia { device });
    }

    /// Reads a file; `Done::Loaded` carries `ticket` (the caller's).
    pub fn load(&mut self, ticket: Ticket, path: PathBuf, limit: usize) {
        self.submit(Job::Load { ticket, path, limit });
    }

    /// Keeps a file sent to a device under the core's name; `Done::MediaSaved` follows.
    pub fn save_media(&mut self, name: String, data: Vec<u8>) {
        self.submit(Job::SaveMedia { name, data });
    }

    /// Reads the media store's file `key` (checked by the caller: 32 hex digits, never a
    /// path); `Done::Fetched` carries `ticket`.
    pub fn fetch(&mut self, ticket: Ticket, key: String) {
        self.submit(Job::Fetch { ticket, key });
    }

    /// Replaces `path` with `contents` atomically: a crash leaves the old file or the new.
    pub fn persist(&mut self, path: PathBuf, contents: Vec<u8>) {
        self.submit(Job::Persist { path, contents });
    }

    /// Like [`persist`](Self::persist) for a file of which only the newest contents matter
    /// (the push subscriptions): a snapshot not yet written is replaced rather than queued
    /// behind, so however fast they change, at most one waits (and one is being written).
    pub fn persist_latest(&mut self, path: PathBuf, contents: Vec<u8>) {
        let slot = self.latest.entry(path.clone()).or_default().clone();
        let waiting = match slot.lock() {
            Ok(mut s) => s.replace(contents).is_some(),
            Err(_) => return log::error!("the file worker has stopped; {path:?} can no longer be saved"),
        };
        if !waiting {
            self.submit(Job::PersistLatest { path, slot });
        }
    }

    /// A finished job, if any (after the waker fired).
    pub fn poll_done(&mut self) -> Option<Done> {
        self.done.try_recv().ok()
    }
}

impl Drop for FileWorker {
    /// Pending saves finish before the process exits.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One job on the worker's thread; what it reports, if anything.
fn run(store: &mut MediaStore, job: Job) -> Option<Done> {
    Some(match job {
        Job::Save { ticket, event } => {
            let result = save(store, &event);
            Done::Saved { ticket, event, result }
        }
        Job::Load { ticket, path, limit } => Done::Loaded {
            ticket,
            result: load(&path, limit),
        },
        Job::SaveMedia { name, data } => {
            let result = store.save_as(&name, &data).map(|_| ());
            if let Err(e) = &result {
                log::warn!("could not keep a sent file in the media store: {e}");
            }
            Done::MediaSaved { name, result }
        }
        Job::DeleteMedia { device } => {
            if let Err(e) = store.delete_for(&device) {
                log::warn!("could not delete the files of device {device:?} (forget): {e}");
            }
            return None;
        }
        Job::Fetch { ticket, key } => Done::Fetched {
            ticket,
            result: fetch(store, &key),
        },
        Job::Persist { path, contents } => {
            if let Err(e) = persist(&path, &contents) {
                log::warn!("could not save {:?}: {e}", path);
            }
            return None;
        }
        Job::PersistLatest { path, slot } => {
            let contents = slot.lock().map(|mut s| s.take()).unwrap_or_default();
            if let Some(contents) = contents {
                if let Err(e) = persist(&path, &contents) {
                    log::warn!("could not save {:?}: {e}", path);
                }
            }
            return None;
        }
    })
}

/// The media store's file `key`, found by listing the directory (no path is built from a
/// request), read as an agent's file is (a regular file, at most 8 MiB, never blocking).
fn fetch(store: &MediaStore, key: &str) -> Result<(String, Vec<u8>), FetchError> {
    let unreadable = |e: String| FetchError::Unreadable(e);
    let Some(path) = store.find(key).map_err(|e| unreadable(e.to_string()))? else {
        return Err(FetchError::NotFound);
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    match load(&path, hermes_mobile::limits::MAX_MEDIA_BYTES) {
        Ok(data) => Ok((name, data)),
        Err(LoadError::TooBig) => Err(unreadable(format!("{name}: over 8 MiB"))),
        Err(LoadError::Unreadable(why)) => Err(unreadable(why)),
    }
}

fn save(store: &mut MediaStore, event: &AgentEvent) -> io::Result<PathBuf> {
    let AgentEvent::MessageReceived {
        device, file, audio, ..
    } = event
    else {
        return Err(io::Error::other("nothing to save"));
    };
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    // The core names what it accepts (L63); an event owed since an older build may not.
    let result = match (file, audio) {
        (Some(file), _) => match &file.media_name {
            Some(name) => store.save_as(name, &file.data),
            None => store.save(ms, device.as_str(), &file.filename, &file.data),
        },
        (None, Some(audio)) => match &audio.media_name {
            Some(name) => store.save_as(name, &audio.data),
            None => {
                let name = format!("voice.{}", audio.format.as_str());
                store.save(ms, device.as_str(), &name, &audio.data)
            }
        },
        (None, None) => return Err(io::Error::other("nothing to save")),
    };
    match &result {
        Ok(path) => log::debug!("device {device:?}: saved {:?}", path),
        Err(e) => log::warn!("device {device:?}: could not save an upload under the state directory: {e}"),
    }
    result
}

/// Writes a temporary file beside `path` (mode 0600: a conversation is private), syncs
/// it, and renames it over `path`.
fn persist(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        // 0700: the file names are digests of device ids, still nobody else's business.
        std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o700).create(dir)?;
    }
    let tmp = path.with_extension("tmp");
    // A leftover from a crash may have looser permissions, which `open` would keep; and
    // create_new never follows a file or link put there in between.
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

/// Reads a regular file of at most `limit` bytes; never reads more than `limit + 1`.
/// Anything else (a FIFO, a device, a directory) is refused before it is opened, and the
/// open itself cannot block (`O_NONBLOCK`: a FIFO swapped in after the check fails fast):
/// one stuck read would stall every save and load behind it, and shutdown with them.
fn load(path: &Path, limit: usize) -> Result<Vec<u8>, LoadError> {
    use std::os::unix::fs::OpenOptionsExt;
    const O_NONBLOCK: i32 = 0o4000;
    const O_NOCTTY: i32 = 0o400;
    let unreadable = |e: io::Error| LoadError::Unreadable(format!("{}: {e}", path.display()));
    let not_regular = || LoadError::Unreadable(format!("{}: not a regular file", path.display()));
    if !fs::metadata(path).map_err(unreadable)?.is_file() {
        return Err(not_regular());
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK | O_NOCTTY)
        .open(path)
        .map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    if meta.len() > limit as u64 {
        return Err(LoadError::TooBig);
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(limit as u64 + 1).read_to_end(&mut data).map_err(unreadable)?;
    if data.len() > limit {
        return Err(LoadError::TooBig); // it grew while being read
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_refuses_big_and_odd_files() {
        let dir = std::env::temp_dir().join(format!("fileio-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        fs::write(&path, vec![7u8; 100]).unwrap();
        assert_eq!(load(&path, 100).unwrap().len(), 100);
        assert_eq!(load(&path, 99), Err(LoadError::TooBig));
        assert!(matches!(load(&dir, 100), Err(LoadError::Unreadable(_))));
        assert!(matches!(load(&dir.join("missing"), 100), Err(LoadError::Unreadable(_))));
        // A FIFO would block the worker forever on open: refused before it is opened.
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        assert!(matches!(load(&fifo, 100), Err(LoadError::Unreadable(why)) if why.contains("not a regular file")));
        fs::remove_dir_all(&dir).unwrap();
    }
}
