//! Multipart upload reassembly for one connection (decisions U1–U6, I2).
//!
//! Chunks are decoded straight from the frame's borrowed base64 into the upload's single
//! buffer, in arrival order; a table records where each part landed. When the parts arrived
//! in order (the usual case) the buffer *is* the file; otherwise it is reordered with one copy.
//! Every limit is checked on the decoded size computed from the base64 length, before a
//! byte is decoded.

use std::collections::HashMap;
use std::time::Duration;

use crate::base64::{decode_into, decoded_len};
use crate::limits::{MAX_MEDIA_BYTES, MAX_OPEN_UPLOADS, MAX_UPLOAD_BUFFER_BYTES};
use crate::mime::guess_mime;
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

const MISSING: u32 = u32::MAX;

#[derive(Debug)]
struct Upload {
    kind: UploadKind,
    mime: String,
    filename: String,
    caption: Option<String>,
    parts: u32,
    received: u32,
    /// Decoded bytes, in arrival order.
    buf: Vec<u8>,
    /// Per part: offset into `buf`, or MISSING. Lengths follow from the next offset.
    offsets: Vec<u32>,
    /// Per part: decoded length.
    lens: Vec<u32>,
    in_order: bool,
    last_chunk: Time,
}

impl Upload {
    fn into_file(self, id: &str) -> ReceivedFile {
        let data = if self.in_order {
            self.buf
        } else {
            let mut data = Vec::with_capacity(self.buf.len());
            for (off, len) in self.offsets.iter().zip(&self.lens) {
                let (off, len) = (*off as usize, *len as usize);
                data.extend_from_slice(&self.buf[off..off + len]);
            }
            data
        };
        ReceivedFile {
            id: id.to_owned(),
            kind: self.kind,
            mime: self.mime,
            filename: self.filename,
            caption: self.caption,
            data,
        }
    }
}

/// Makes room for `additional` more bytes, doubling like `Vec` does (so 2048 small chunks cost
/// O(n) copying), but never past `MAX_MEDIA_BYTES`: an upload's capacity stays within twice
/// its accounted bytes and within one file's limit.
fn reserve_bounded(buf: &mut Vec<u8>, additional: usize) {
    let needed = buf.len() + additional;
    if needed <= buf.capacity() {
        return;
    }
    let target = needed.max(buf.capacity() * 2).min(MAX_MEDIA_BYTES).max(needed);
    buf.reserve_exact(target - buf.len());
}

/// The open uploads of one connection (one device: a device has one live connection, H5).
#[derive(Debug, Default)]
pub struct Uploads {
    open: HashMap<String, Upload>,
    buffered: usize,
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
        let size = decoded_len(&chunk.data);
        let existing_parts = self.open.get(chunk.id.as_ref()).map(|u| u.parts);
        if let Some(parts) = existing_parts {
            if parts != chunk.parts {
                self.drop_upload(&chunk.id);
                return Err(Rejection::bad_frame("parts differs from the upload's first chunk"));
            }
        } else if chunk.parts == 1 {
            return Self::single(chunk, size).map(ChunkOutcome::Completed);
        } else if self.open.len() >= MAX_OPEN_UPLOADS {
            return Err(Rejection::too_big("too many unfinished uploads (at most 8)"));
        }

        if self
            .open
            .get(chunk.id.as_ref())
            .is_some_and(|u| u.offsets[chunk.part as usize] != MISSING)
        {
            if let Some(u) = self.open.get_mut(chunk.id.as_ref()) {
                u.last_chunk = now;
            }
            return Ok(ChunkOutcome::Repeated);
        }
        let current = self.open.get(chunk.id.as_ref()).map_or(0, |u| u.buf.len());
        if current + size > MAX_MEDIA_BYTES {
            self.drop_upload(&chunk.id);
            return Err(Rejection::too_big("file is over 8 MiB"));
        }
        if self.buffered + size > MAX_UPLOAD_BUFFER_BYTES {
            self.drop_upload(&chunk.id);
            return Err(Rejection::too_big("unfinished uploads are over 8 MiB in total"));
        }

        let parts = chunk.parts as usize;
        let upload = self
            .open
            .entry(chunk.id.clone().into_owned())
            .or_insert_with(|| Upload {
                kind: chunk.kind,
                mime: mime_for(chunk),
                filename: chunk.filename.clone().into_owned(),
                caption: chunk.caption.as_ref().map(|c| c.clone().into_owned()),
                parts: chunk.parts,
                received: 0,
                buf: Vec::new(),
                offsets: vec![MISSING; parts],
                lens: vec![0; parts],
                in_order: true,
                last_chunk: now,
            });
        let offset = upload.buf.len();
        reserve_bounded(&mut upload.buf, size);
        if decode_into(&chunk.data, &mut upload.buf).is_err() {
            self.drop_upload(&chunk.id);
            return Err(Rejection::bad_frame("data is not valid base64"));
        }
        let decoded = upload.buf.len() - offset;
        let part = chunk.part as usize;
        // Arrival order equals part order only if every earlier part came before this one.
        upload.in_order &= upload.received == chunk.part;
        // Both fit in u32: the buffer is bounded by MAX_MEDIA_BYTES.
        upload.offsets[part] = offset as u32;
        upload.lens[part] = decoded as u32;
        upload.received += 1;
        upload.last_chunk = now;
        self.buffered += decoded;

        if upload.received < upload.parts {
            return Ok(ChunkOutcome::Stored);
        }
        let upload = self
            .open
            .remove(chunk.id.as_ref())
            .expect("the upload was just updated");
        self.buffered -= upload.buf.len();
        Ok(ChunkOutcome::Completed(upload.into_file(&chunk.id)))
    }

    /// A whole file in one frame: not an open upload (U2), limited only by MAX_MEDIA_BYTES.
    fn single(chunk: &MediaChunk<'_>, size: usize) -> Result<ReceivedFile, Rejection> {
        if size > MAX_MEDIA_BYTES {
            return Err(Rejection::too_big("file is over 8 MiB"));
        }
        let mut data = Vec::with_capacity(size);
        decode_into(&chunk.data, &mut data).map_err(|_| Rejection::bad_frame("data is not valid base64"))?;
        Ok(ReceivedFile {
            id: chunk.id.clone().into_owned(),
            kind: chunk.kind,
            mime: mime_for(chunk),
            filename: chunk.filename.clone().into_owned(),
            caption: chunk.caption.as_ref().map(|c| c.clone().into_owned()),
            data,
        })
    }

    fn drop_upload(&mut self, id: &str) {
        if let Some(u) = self.open.remove(id) {
            self.buffered -= u.buf.len();
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

    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    pub fn is_open(&self, id: &str) -> bool {
        self.open.contains_key(id)
    }
}
