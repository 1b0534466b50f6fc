//! Where the decoded bytes of each part of an upload go (decisions U4), so that a file costs
//! about one base64 decode whatever the order its parts arrive in.
//!
//! Apps cut files into equal chunks with a shorter last one. Once one non-last part has
//! arrived, its size is taken as the *stride*: part `p` is decoded straight into
//! `p × stride` of a zero-allocated buffer (the operating system hands out zero pages, so
//! untouched room costs no memory), and the finished buffer is the file. A part that breaks
//! the pattern, or a last part that arrives first, falls back to arrival-order placement; the
//! file is then put in part order with one copy at the end.

use crate::base64::{decode_at, InvalidBase64};
use crate::limits::MAX_MEDIA_BYTES;

const MISSING: u32 = u32::MAX;
/// Room the base64 decoder wants past the exact decoded size (its size check is conservative).
const SLACK: usize = 3;

#[derive(Debug)]
pub(crate) struct Assembly {
    parts: u32,
    /// Decoded bytes, at their offsets; may hold untouched zero room.
    buf: Vec<u8>,
    /// Per part: offset into `buf`, or MISSING.
    offsets: Vec<u32>,
    /// Per part: decoded length.
    lens: Vec<u32>,
    /// Placement by `part × stride` while the pattern holds.
    stride: Option<usize>,
    /// The pattern broke (or never started): parts are appended at `end`.
    appending: bool,
    /// One past the last byte written.
    end: usize,
    /// The last part, when it came before the stride was known.
    early_last: Option<Vec<u8>>,
    received: u32,
    bytes: usize,
}

impl Assembly {
    pub fn new(parts: u32) -> Assembly {
        let n = parts as usize;
        Assembly {
            parts,
            buf: Vec::new(),
            offsets: vec![MISSING; n],
            lens: vec![0; n],
            stride: None,
            appending: false,
            end: 0,
            early_last: None,
            received: 0,
            bytes: 0,
        }
    }

    pub fn has(&self, part: u32) -> bool {
        self.offsets[part as usize] != MISSING || (self.is_last(part) && self.early_last.is_some())
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_complete(&self) -> bool {
        self.received == self.parts
    }

    fn is_last(&self, part: u32) -> bool {
        part + 1 == self.parts
    }

    /// Decodes one part. `size` is its decoded size from the base64 length (exact for
    /// canonical base64, an upper bound otherwise). On error nothing changed.
    pub fn place(&mut self, part: u32, b64: &str, size: usize) -> Result<(), InvalidBase64> {
        let last = self.is_last(part);
        if !self.appending && self.stride.is_none() {
            if last && self.received == 0 {
                let mut early = vec![0u8; size + SLACK];
                let n = decode_at(b64, &mut early)?;
                early.truncate(n);
                self.early_last = Some(early);
                return self.count(n);
            }
            if size == 0 {
                self.start_appending();
            } else {
                self.start_stride(size);
            }
        }
        let at = match self.stride {
            Some(stride) if !self.appending => {
                let at = part as usize * stride;
                let fits = if last { size <= stride } else { size == stride };
                if fits && at + size + SLACK <= self.buf.len() {
                    Some(at)
                } else {
                    None
                }
            }
            _ => None,
        };
        let at = match at {
            Some(at) => at,
            None => {
                self.start_appending();
                self.buf.truncate(self.end);
                self.buf.resize(self.end + size + SLACK, 0);
                self.end
            }
        };
        let n = decode_at(b64, &mut self.buf[at..])?;
        self.record(part, at, n);
        self.count(n)
    }

    fn start_stride(&mut self, stride: usize) {
        // A valid file fits in MAX_MEDIA_BYTES whatever its last part; a part that would land
        // past it is over the limit anyway, and falls back to appending until refused.
        let room = (stride * self.parts as usize).min(MAX_MEDIA_BYTES);
        // Zeroed allocation: large ones are fresh zero pages, paid for only when written.
        self.buf = vec![0u8; room + SLACK];
        self.stride = Some(stride);
        if let Some(early) = self.early_last.take() {
            let at = (self.parts as usize - 1) * stride;
            if early.len() <= stride && at + early.len() + SLACK <= self.buf.len() {
                self.buf[at..at + early.len()].copy_from_slice(&early);
                self.record(self.parts - 1, at, early.len());
            } else {
                self.early_last = Some(early);
                self.start_appending();
            }
        }
    }

    fn start_appending(&mut self) {
        if self.appending {
            return;
        }
        self.appending = true;
        if let Some(early) = self.early_last.take() {
            self.buf.truncate(self.end);
            self.buf.extend_from_slice(&early);
            let at = self.end;
            self.record(self.parts - 1, at, early.len());
        }
    }

    fn record(&mut self, part: u32, at: usize, len: usize) {
        // Both fit in u32: buffers are bounded by a few times MAX_MEDIA_BYTES.
        self.offsets[part as usize] = at as u32;
        self.lens[part as usize] = len as u32;
        self.end = self.end.max(at + len);
    }

    fn count(&mut self, n: usize) -> Result<(), InvalidBase64> {
        self.received += 1;
        self.bytes += n;
        Ok(())
    }

    /// The file, in part order. Call once `is_complete`.
    pub fn finish(mut self) -> Vec<u8> {
        let mut expected = 0usize;
        let contiguous = self.offsets.iter().zip(&self.lens).all(|(&off, &len)| {
            let ok = off as usize == expected;
            expected += len as usize;
            ok
        });
        if contiguous {
            self.buf.truncate(expected);
            return self.buf;
        }
        let mut data = Vec::with_capacity(expected);
        for (&off, &len) in self.offsets.iter().zip(&self.lens) {
            let (off, len) = (off as usize, len as usize);
            data.extend_from_slice(&self.buf[off..off + len]);
        }
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base64::{decoded_len, encode};

    fn run(chunks: &[&[u8]], order: &[usize]) -> Vec<u8> {
        let mut a = Assembly::new(chunks.len() as u32);
        for &i in order {
            let b64 = encode(chunks[i]);
            a.place(i as u32, &b64, decoded_len(&b64)).unwrap();
        }
        assert!(a.is_complete());
        a.finish()
    }

    #[test]
    fn equal_chunks_in_any_order_land_in_place() {
        let chunks: [&[u8]; 4] = [b"aaaa", b"bbbb", b"cccc", b"dd"];
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
            assert_eq!(run(&chunks, &order), b"aaaabbbbccccdd", "order {order:?}");
        }
    }

    #[test]
    fn irregular_chunks_fall_back_to_a_reorder() {
        let chunks: [&[u8]; 4] = [b"a", b"bbbbbb", b"", b"ddd"];
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 3, 0, 1]] {
            assert_eq!(run(&chunks, &order), b"abbbbbbddd", "order {order:?}");
        }
    }

    #[test]
    fn a_last_part_longer_than_the_stride_is_still_right() {
        let chunks: [&[u8]; 3] = [b"aa", b"bb", b"cccccc"];
        assert_eq!(run(&chunks, &[2, 0, 1]), b"aabbcccccc");
        assert_eq!(run(&chunks, &[0, 2, 1]), b"aabbcccccc");
    }

    #[test]
    fn a_full_8_mib_file_in_3_mib_chunks_fits_in_place() {
        const MIB: usize = 1024 * 1024;
        let data: Vec<u8> = (0..8 * MIB).map(|i| (i % 251) as u8).collect();
        let chunks: Vec<&[u8]> = data.chunks(3 * MIB).collect();
        let mut a = Assembly::new(3);
        for i in [1usize, 2, 0] {
            let b64 = encode(chunks[i]);
            a.place(i as u32, &b64, decoded_len(&b64)).unwrap();
        }
        assert!(!a.appending, "stride placement held to the last byte");
        assert_eq!(a.finish(), data);
    }
}
