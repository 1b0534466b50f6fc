//! The media store's side in the core (L63): the names files are kept under, which of them
//! the store still has (so that an item carries `url` only while its file is there), and
//! who may fetch one back.
//!
//! The core names a file and the server saves it under that name: the journal's entry is
//! written once, with its name, and never waits for the disk. The server reports back what
//! it saved, what it could not save and what L26's bounds removed, and at start-up what the
//! directory holds.

use std::collections::{HashMap, HashSet};

use super::{Gateway, Output};
use crate::agent::{AgentEvent, Audio, OutgoingFile};
use crate::auth::Role;
use crate::ids::DeviceId;
use crate::journal::body::Body;
use crate::media::{self, FileRefusal, Kept};
use crate::throttle::SourceKey;
use crate::time::Time;
use crate::uploads::ReceivedFile;
use crate::wire::ErrorCode;

/// Bytes of sent files that may wait for the file worker at once: past it a file is not
/// kept (its item has no `url`), so that an agent sending files faster than the disk takes
/// them cannot fill memory.
pub const MAX_SAVING_BYTES: usize = 32 * 1024 * 1024;

/// Devices remembered as swept; past it the set starts again (a `forget` then costs one
/// more sweep), so that minted device ids cannot grow it.
const MAX_SWEPT: usize = 4096;

/// What the core knows of the media store.
#[derive(Debug, Default)]
pub(super) struct MediaState {
    kept: Kept,
    /// Sent files handed to the server and not yet reported, with their sizes.
    saving: HashMap<String, usize>,
    saving_bytes: usize,
    /// Devices with a sweep of their files (`forget`) queued since the core last named a
    /// file of theirs: the file worker's queue is in order, so that sweep takes every file
    /// named before it, and a later `forget` needs no other (review D #9, E #3).
    swept: HashSet<DeviceId>,
}

impl Gateway {
    /// Names a person's upload or voice note, which the server saves before the agent gets
    /// it (L42), whether or not a journal keeps it.
    pub(super) fn name_upload(
        &mut self,
        device: &DeviceId,
        audio: &mut Option<Audio>,
        file: &mut Option<ReceivedFile>,
    ) {
        let key = media::new_key(device, self.ids.next_u64());
        self.media.swept.remove(device);
        if let Some(a) = audio {
            let name = format!("voice.{}", a.format.as_str());
            a.media_name = Some(media::disk_name(&key, device.as_str(), &name, ""));
        } else if let Some(f) = file {
            f.media_name = Some(media::disk_name(&key, device.as_str(), &f.filename, ""));
        }
    }

    /// A file sent to a device, kept in the media store too while history is on, so that
    /// its item can carry `url`. Its name, for the entry's body; `None` when it is not
    /// kept (history off, or too much already waiting for the disk).
    pub(super) fn save_sent_file(&mut self, device: &DeviceId, file: &OutgoingFile) -> Option<String> {
        if !self.history_on() {
            return None;
        }
        let bytes = file.data.len();
        if self.media.saving_bytes + bytes > MAX_SAVING_BYTES {
            log::warn!(
                "device {device:?}: file {:?} not kept in the media store: {} bytes already wait for the disk",
                file.filename,
                self.media.saving_bytes
            );
            return None;
        }
        let key = media::new_key(device, self.ids.next_u64());
        self.media.swept.remove(device);
        let name = media::disk_name(&key, device.as_str(), &file.filename, "");
        self.media.saving.insert(name.clone(), bytes);
        self.media.saving_bytes += bytes;
        self.outputs.push_back(Output::SaveMedia {
            name: name.clone(),
            data: file.data.clone(),
        });
        Some(name)
    }

    /// A message whose voice note or file the server saves now, as it hands it to the agent
    /// (L42): a `forget` after it sweeps again, since a sweep queued before would run
    /// before that save (review F #5).
    pub(super) fn upload_released(&mut self, event: &AgentEvent) {
        if let AgentEvent::MessageReceived {
            device, audio, file, ..
        } = event
        {
            let named = audio.as_ref().is_some_and(|a| a.media_name.is_some())
                || file.as_ref().is_some_and(|f| f.media_name.is_some());
            if named {
                self.media.swept.remove(device);
            }
        }
    }

    /// At start-up, before any input: the names of the files the media store holds.
    pub fn restore_media<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for key in names.into_iter().filter_map(media::key_of_name) {
            self.media.kept.insert(key);
        }
    }

    /// The server saved a file under `name` (an upload, a voice note or a sent file).
    pub fn handle_media_saved(&mut self, name: &str) {
        self.media_reported(name);
        if let Some(key) = media::key_of_name(name) {
            self.media.kept.insert(key);
        }
    }

    /// The server could not save the file it was to keep as `name`.
    pub fn handle_media_failed(&mut self, name: &str) {
        self.media_reported(name);
    }

    /// L26's bounds removed the file `name` from the media store.
    pub fn handle_media_removed(&mut self, name: &str) {
        if let Some(key) = media::key_of_name(name) {
            self.media.kept.remove(key);
        }
    }

    fn media_reported(&mut self, name: &str) {
        if let Some(bytes) = self.media.saving.remove(name) {
            self.media.saving_bytes -= bytes;
        }
    }

    /// `forget`: the device's files leave the media store, and no item names them again.
    /// A sweep of the directory is queued unless one already is that takes every file the
    /// device has (L60): however many `forget`s come, one sweep per file named between
    /// them. Whether a sweep was queued, for the log.
    pub(super) fn forget_media(&mut self, device: &DeviceId) -> bool {
        self.media.kept.remove_for(device);
        if self.media.swept.contains(device) {
            return false;
        }
        if self.media.swept.len() >= MAX_SWEPT {
            self.media.swept.clear();
        }
        self.media.swept.insert(device.clone());
        self.outputs.push_back(Output::DeleteMedia { device: device.clone() });
        true
    }

    /// Whether the media store still has the file `key` of `device`.
    pub fn file_kept(&self, device: &DeviceId, key: &str) -> bool {
        media::key_is_for(key, device) && self.media.kept.contains(key)
    }

    /// The `/files/` route's credential check (L63): `token` must pass what a `hello` as
    /// `device` passes (H1–H3), behind the same throttle (L52), and be a phone's.
    pub fn authorize_file(
        &mut self,
        now: Time,
        source: SourceKey,
        token: &str,
        device: &DeviceId,
    ) -> Result<(), FileRefusal> {
        self.now = self.now.max(now);
        if let Some(left) = self.throttle.blocked(source, now) {
            let retry_after_secs = u64::try_from(left.as_millis().div_ceil(1000)).unwrap_or(u64::MAX);
            return Err(FileRefusal::Blocked { retry_after_secs });
        }
        match self.authorize_from(now, source, token, device) {
            Ok(a) if a.role == Role::Device => Ok(()),
            Ok(_) => Err(FileRefusal::Forbidden),
            Err(r) if r.code == ErrorCode::Forbidden => Err(FileRefusal::Forbidden),
            Err(_) => Err(FileRefusal::Unauthorized),
        }
    }

    /// A body on its way to a client: its stored name becomes `url` while the store still
    /// has the file, and is never shown.
    pub(super) fn show_file(&self, device: &DeviceId, body: &mut Body) {
        // Nor whether a card was notified: the server's own bookkeeping (L66).
        body.notified = false;
        let key = body.stored.take();
        let key = key.as_deref().and_then(media::key_of_name);
        body.url = key
            .filter(|key| self.file_kept(device, key))
            .map(|key| media::url(device, key));
    }
}
