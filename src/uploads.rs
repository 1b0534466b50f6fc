//! Multipart upload reassembly for one connection (decisions U1–U6, I2).
//!
//! Chunks are decoded straight from the frame's borrowed base64 into the upload's buffer
//! (`reassembly` decides where). Every limit is checked on the decoded size computed from the
//! base64 length, before a byte is decoded.

use std::collections::HashMap;
use std::time::Duration;

use crate::base64::{decode_bounded, decoded_len_against, BoundedDecodeError};
use crate::limits::{MAX_MEDIA_BYTES, MAX_OPEN_UPLOADS, MAX_UPLOAD_BUFFER_BYTES};
use crate::mime::guess_mime;
use crate::reassembly::Assembly;
use crate::time::Time;
use crate::wire::client::{MediaChunk, UploadKind};
use crate::wire::Rejection;

/// A finished upload, ready for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedFile {
    pub id: String,
    pub kind: UploadKind,
    /// As sent, or guessed from `filename` (U6).
    pub mime: String,
    /// As sent (truncated, G8). Sanitize before it touches a file system (`mime::sanitize_filename`).
    pub filename: String,
    pub caption: Option<String>,
    pub data: Vec<u8>,
    /// Its name in the media store, given by the core once it accepts the file (L63); the
    /// server saves it under that name (`None`: under one of its own, L26).
    pub media_name: Option<String>,
}

/// What one accepted chunk did.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// Stored; more parts are awaited.
    Stored,
    /// A part already received for an unfinished upload: ignored (U4).
    Repeated,
    Completed(ReceivedFile),
}

#[derive(Debug)]
struct Upload {
    kind: UploadKind,
    mime: String,
    filename: String,
    caption: Option<String>,
    parts: u32,
    assembly: Assembly,
    last_chunk: Time,
}

/// The open uploads of one connection (one device: a device has one live connection, H5).
#[derive(Debug, Default)]
pub struct Uploads {
    open: HashMap<String, Upload>,
    /// Decoded bytes of the open uploads: what the limits count (U2).
    buffered: usize,
    /// Memory the open uploads hold: their bytes plus the room reserved for parts still to
    /// come. Kept within the same 8 MiB as the bytes, plus bookkeeping (L31).
    held: usize,
}

fn mime_for(chunk: &MediaChunk<'_>) -> String {
    if chunk.mime.trim().is_empty() {
        guess_mime(&chunk.filename).to_owned()
    } else {
        chunk.mime.clone().into_owned()
    }
}

impl Uploads {
    /// Takes one `media` chunk. On error the upload it belonged to is gone (U3).
    pub fn accept(&mut self, now: Time, chunk: &MediaChunk<'_>) -> Result<ChunkOutcome, Rejection> {
        self.accept_within(now, chunk, usize::MAX)
    }

    /// [`Uploads::accept`], with at most `shared_room` bytes of speculative room in all for
    /// this device's uploads: the gateway's share across devices (L31).
    pub fn accept_within(
        &mut self,
        now: Time,
        chunk: &MediaChunk<'_>,
        shared_room: usize,
    ) -> Result<ChunkOutcome, Rejection> {
        // Every size limit below is at most the room left in the device's buffer (a file's
        // bytes are inside it), so the size is exact wherever it decides a refusal (L11).
        const _: () = assert!(MAX_MEDIA_BYTES <= MAX_UPLOAD_BUFFER_BYTES);
        let size = decoded_len_against(&chunk.data, MAX_UPLOAD_BUFFER_BYTES.saturating_sub(self.buffered));
        let id = chunk.id.as_ref();
        let open_count = self.open.len();
        // One lookup on the hot path (a chunk of an upload already open).
        let verdict = match self.open.get_mut(id) {
            Some(u) if u.parts != chunk.parts => {
                Err(Rejection::bad_frame("parts differs from the upload's first chunk"))
            }
            // U4: ignored. U5: and it does not count as progress, or resending one chunk
            // would keep a never-finished upload alive forever.
            Some(u) if u.assembly.has(chunk.part) => return Ok(ChunkOutcome::Repeated),
            Some(u) if u.assembly.bytes() + size > MAX_MEDIA_BYTES => Err(Rejection::too_big("file is over 8 MiB")),
            Some(_) => Ok(()),
            None if chunk.parts == 1 => return Self::single(chunk).map(ChunkOutcome::Completed),
            None if open_count >= MAX_OPEN_UPLOADS => {
                return Err(Rejection::too_big("too many unfinished uploads (at most 8)"))
            }
            None if size > MAX_MEDIA_BYTES => return Err(Rejection::too_big("file is over 8 MiB")),
            None => Ok(()),
        };
        let verdict = verdict.and_then(|()| {
            if self.buffered + size > MAX_UPLOAD_BUFFER_BYTES {
                Err(Rejection::too_big("unfinished uploads are over 8 MiB in total"))
            } else {
                Ok(())
            }
        });
        if let Err(rejection) = verdict {
            self.drop_upload(id);
            return Err(rejection);
        }

        if !self.open.contains_key(id) {
            let upload = Upload {
                kind: chunk.kind,
                mime: mime_for(chunk),
                filename: chunk.filename.clone().into_owned(),
                caption: chunk.caption.as_ref().map(|c| c.clone().into_owned()),
                parts: chunk.parts,
                assembly: Assembly::new(chunk.parts),
                last_chunk: now,
            };
            self.open.insert(id.to_owned(), upload);
        }
        let mut room = self.room_for(id, size, shared_room);
        let upload = self.open.get_mut(id).expect("present: found or inserted above");
        let (bytes_before, held_before) = (upload.assembly.bytes(), upload.assembly.held());
        let placed = upload.assembly.place(chunk.part, &chunk.data, &mut room);
        // Even a refused part may have left room reserved: the books follow the memory.
        self.buffered += upload.assembly.bytes() - bytes_before;
        self.held = self.held - held_before + upload.assembly.held();
        if placed.is_err() {
            self.drop_upload(id);
            return Err(Rejection::bad_frame("data is not valid base64"));
        }
        upload.last_chunk = now;
        if !upload.assembly.is_complete() {
            return Ok(ChunkOutcome::Stored);
        }
        let upload = self.open.remove(id).expect("the upload was just updated");
        self.buffered -= upload.assembly.bytes();
        self.held -= upload.assembly.held();
        Ok(ChunkOutcome::Completed(ReceivedFile {
            id: id.to_owned(),
            kind: upload.kind,
            mime: upload.mime,
            filename: upload.filename,
            caption: upload.caption,
            data: upload.assembly.finish(),
            media_name: None,
        }))
    }

    /// A whole file in one frame: not an open upload (U2), limited only by MAX_MEDIA_BYTES.
    fn single(chunk: &MediaChunk<'_>) -> Result<ReceivedFile, Rejection> {
        let data = decode_bounded(&chunk.data, MAX_MEDIA_BYTES).map_err(|e| match e {
            BoundedDecodeError::TooBig => Rejection::too_big("file is over 8 MiB"),
            BoundedDecodeError::Invalid => Rejection::bad_frame("data is not valid base64"),
        })?;
        Ok(ReceivedFile {
            id: chunk.id.clone().into_owned(),
            kind: chunk.kind,
            mime: mime_for(chunk),
            filename: chunk.filename.clone().into_owned(),
            caption: chunk.caption.as_ref().map(|c| c.clone().into_owned()),
            data,
            media_name: None,
        })
    }

    /// How much memory beyond a `size`-byte part upload `id` may reserve for parts still to
    /// come (L31). When the part itself would take the uploads past the budget, the other
    /// uploads first give back their speculative room: their bytes are within the limits
    /// (U2), so after that the budget is bytes, not guesses.
    fn room_for(&mut self, id: &str, size: usize, shared_room: usize) -> usize {
        let speculative = self.speculative();
        if self.held + size > MAX_UPLOAD_BUFFER_BYTES || speculative > shared_room {
            for (other, u) in self.open.iter_mut().filter(|(other, _)| other.as_str() != id) {
                let before = u.assembly.held();
                u.assembly.reclaim();
                self.held = self.held - before + u.assembly.held();
                log::trace!(
                    "upload {other:?} gave back {} bytes of room",
                    before - u.assembly.held()
                );
            }
        }
        let shared_left = shared_room.saturating_sub(self.speculative());
        MAX_UPLOAD_BUFFER_BYTES
            .saturating_sub(self.held + size)
            .min(shared_left)
    }

    /// Room reserved beyond the bytes received: what a client's announced `parts` bought.
    pub fn speculative(&self) -> usize {
        self.held.saturating_sub(self.buffered)
    }

    /// What these uploads hold, for the gateway's totals ([`UploadTotals`]).
    pub fn footprint(&self) -> Footprint {
        Footprint {
            held: self.held,
            speculative: self.speculative(),
        }
    }

    /// Drops upload `id` with all it holds (U3), if it is open.
    pub fn abandon(&mut self, id: &str) {
        self.drop_upload(id);
    }

    fn drop_upload(&mut self, id: &str) {
        if let Some(u) = self.open.remove(id) {
            self.buffered -= u.assembly.bytes();
            self.held -= u.assembly.held();
        }
    }

    /// Drops uploads with no new chunk for `stall` (U5). Returns their ids.
    pub fn expire(&mut self, now: Time, stall: Duration) -> Vec<String> {
        let stalled: Vec<String> = self
            .open
            .iter()
            .filter(|(_, u)| now.since(u.last_chunk) >= stall)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &stalled {
            self.drop_upload(id);
        }
        stalled
    }

    /// When the next upload stalls, if any is open.
    pub fn next_deadline(&self, stall: Duration) -> Option<Time> {
        self.open.values().map(|u| u.last_chunk + stall).min()
    }

    /// Decoded bytes held by unfinished uploads.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Memory held by unfinished uploads: bytes, reserved room and bookkeeping (L31).
    pub fn held(&self) -> usize {
        self.held
    }

    pub fn open_count(&self) -> usize {
        self.open.len()
    }
}

/// The memory one connection's uploads hold: all of it, and the part that is room reserved
/// ahead of parts (L31).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    pub held: usize,
    pub speculative: usize,
}

/// The uploads of every connection together: what L31's shared room and L51's share of the
/// memory budget bound. Changed only by [`UploadTotals::update`] with a connection's
/// footprint before and after a change, so the totals stay the sums (issue 23 #2).
#[derive(Debug, Default)]
pub struct UploadTotals {
    held: usize,
    speculative: usize,
}

impl UploadTotals {
    pub fn update(&mut self, before: Footprint, after: Footprint) {
        self.held = self.held - before.held + after.held;
        self.speculative = self.speculative - before.speculative + after.speculative;
    }

    /// Memory held by every unfinished upload: bytes, reserved room, bookkeeping.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Room reserved ahead of parts over every upload.
    pub fn speculative(&self) -> usize {
        self.speculative
    }
}
