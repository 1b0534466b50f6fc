//! Where the decoded bytes of each part of an upload go (decisions U4), so that a file costs
//! about one base64 decode whatever order its parts arrive in, and the memory it holds
//! stays inside the device's budget whatever the client declares (U2, L31).
//!
//! `buf` holds the file's longest in-order prefix: a part that continues it is decoded
//! straight onto its end, exactly as a plain decode of the whole file would run. `buf` is
//! given room for the whole file as the first part suggests (`size × parts`, one allocation
//! for the usual equal chunks), but only as much as the caller's `room` allows: room is
//! *speculative* memory, and the caller counts it against the same budget as the bytes. A
//! part that arrives early, or that continues the prefix when no room is left, is decoded
//! into an exact buffer of its own, a *segment*; segments join `buf` when it has room for
//! them, and at the latest in [`Assembly::finish`]. So every byte is decoded once and copied
//! at most once.

use std::collections::HashMap;

use crate::base64::{decode_into, InvalidBase64};
use crate::limits::MAX_MEDIA_BYTES;

/// What a segment costs beside its bytes (its map entry and allocation), counted in
/// [`Assembly::held`] so that many tiny parts are not free.
const SEGMENT_OVERHEAD: usize = 64;

#[derive(Debug)]
pub(crate) struct Assembly {
    parts: u32,
    /// Parts `0..in_buf`, in order.
    buf: Vec<u8>,
    /// The part `buf` waits for.
    in_buf: u32,
    /// Parts received but not (yet) in `buf`, each in an exact buffer.
    segments: HashMap<u32, Vec<u8>>,
    /// What `segments` hold, their overhead included: kept, not summed per call.
    segments_held: usize,
    received: u32,
    bytes: usize,
}

impl Assembly {
    pub fn new(parts: u32) -> Assembly {
        Assembly {
            parts,
            buf: Vec::new(),
            in_buf: 0,
            segments: HashMap::new(),
            segments_held: 0,
            received: 0,
            bytes: 0,
        }
    }

    pub fn has(&self, part: u32) -> bool {
        part < self.in_buf || self.segments.contains_key(&part)
    }

    /// Decoded bytes received.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Memory this upload holds: `buf`'s capacity (its bytes and its speculative room) and
    /// every segment with its overhead.
    pub fn held(&self) -> usize {
        self.buf.capacity() + self.segments_held
    }

    /// Gives back `buf`'s speculative room, so that another upload of the device may use the
    /// budget. The bytes stay; later in-order parts become segments if no room comes back.
    pub fn reclaim(&mut self) {
        self.buf.shrink_to_fit();
    }

    pub fn is_complete(&self) -> bool {
        self.received == self.parts
    }

    /// Decodes one part not received before. `room` is how much memory beyond the part's own
    /// bytes this call may reserve; it is reduced by what was reserved. On error the part
    /// was not taken (room reserved for it may remain).
    pub fn place(&mut self, part: u32, b64: &str, room: &mut usize) -> Result<(), InvalidBase64> {
        // What the decoder asks for: a Vec at capacity would double if asked for more.
        let want = b64.len().div_ceil(4) * 3;
        let granted = if part == self.in_buf {
            self.make_room(want, room)
        } else {
            None
        };
        let decoded = match granted {
            Some(speculative) => {
                let before = self.buf.len();
                decode_into(b64, &mut self.buf)?;
                let n = self.buf.len() - before;
                if n + 3 < want {
                    // White space (L11) made the estimate large: keep only the room granted.
                    self.buf.shrink_to(self.buf.len() + speculative);
                }
                self.in_buf += 1;
                n
            }
            None => {
                let mut segment = Vec::with_capacity(want);
                decode_into(b64, &mut segment)?;
                if segment.len() + 3 < want {
                    segment.shrink_to_fit();
                }
                let n = segment.len();
                self.segments_held += segment.capacity() + SEGMENT_OVERHEAD;
                self.segments.insert(part, segment);
                n
            }
        };
        self.received += 1;
        self.bytes += decoded;
        self.absorb(room);
        Ok(())
    }

    /// Appends the segments that now continue the prefix, while `buf` has room for them.
    fn absorb(&mut self, room: &mut usize) {
        while let Some(len) = self.segments.get(&self.in_buf).map(Vec::len) {
            if self.make_room(len, room).is_none() {
                return;
            }
            let segment = self.segments.remove(&self.in_buf).expect("present: just looked up");
            self.segments_held -= segment.capacity() + SEGMENT_OVERHEAD;
            self.buf.extend_from_slice(&segment);
            self.in_buf += 1;
        }
    }

    /// Room in `buf` for `additional` more bytes, reserving from `room` if needed: the first
    /// time for the whole file as the parts so far suggest, later doubling like `Vec` does,
    /// never past one file's limit, and never more than `room` allows beyond the bytes
    /// themselves. Returns the speculative room granted (beyond `additional`), or `None`
    /// when `buf` would have to grow by less than a doubling: moving its bytes for a little
    /// room each time would make the copying quadratic, so the part becomes a segment.
    fn make_room(&mut self, additional: usize, room: &mut usize) -> Option<usize> {
        let needed = self.buf.len() + additional;
        let capacity = self.buf.capacity();
        if needed <= capacity {
            return Some(capacity - needed);
        }
        let wanted = if capacity == 0 {
            additional.saturating_mul(self.parts as usize)
        } else {
            capacity.saturating_mul(2)
        }
        .min(MAX_MEDIA_BYTES)
        .max(needed);
        // The bytes themselves are paid for by the upload limits; only what lies beyond
        // them is speculative, drawn from `room`.
        let target = wanted.min(needed.saturating_add(*room));
        if capacity > 0 && target < wanted {
            return None;
        }
        self.buf.reserve_exact(target - self.buf.len());
        *room -= target - needed;
        Some(target - needed)
    }

    /// The file, in part order. Call once `is_complete`.
    pub fn finish(mut self) -> Vec<u8> {
        debug_assert!(self.received == self.parts, "finish before complete");
        if self.in_buf < self.parts {
            self.buf.reserve_exact(self.bytes - self.buf.len());
            for part in self.in_buf..self.parts {
                if let Some(segment) = self.segments.remove(&part) {
                    self.buf.extend_from_slice(&segment);
                }
            }
        }
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base64::encode;

    fn run(chunks: &[&[u8]], order: &[usize]) -> Vec<u8> {
        run_with_room(chunks, order, MAX_MEDIA_BYTES)
    }

    fn run_with_room(chunks: &[&[u8]], order: &[usize], room: usize) -> Vec<u8> {
        let mut a = Assembly::new(chunks.len() as u32);
        let mut room = room;
        for &i in order {
            let b64 = encode(chunks[i]);
            a.place(i as u32, &b64, &mut room).unwrap();
            assert!(a.has(i as u32));
        }
        assert!(a.is_complete());
        assert_eq!(a.bytes(), chunks.iter().map(|c| c.len()).sum::<usize>());
        a.finish()
    }

    #[test]
    fn any_order_gives_the_file() {
        let chunks: [&[u8]; 4] = [b"aaaa", b"bbbb", b"cccc", b"dd"];
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
            assert_eq!(run(&chunks, &order), b"aaaabbbbccccdd", "order {order:?}");
        }
    }

    #[test]
    fn irregular_and_empty_chunks() {
        let chunks: [&[u8]; 4] = [b"a", b"bbbbbb", b"", b"ddd"];
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 3, 0, 1]] {
            assert_eq!(run(&chunks, &order), b"abbbbbbddd", "order {order:?}");
        }
    }

    #[test]
    fn in_order_parts_need_one_allocation() {
        let chunks: [&[u8]; 3] = [b"aaaa", b"bbbb", b"cc"];
        let mut a = Assembly::new(3);
        let mut room = MAX_MEDIA_BYTES;
        // Three parts as the decoder estimates the first (6 bytes for 8 base64 characters).
        for (i, c) in chunks.iter().enumerate() {
            let b64 = encode(c);
            a.place(i as u32, &b64, &mut room).unwrap();
            assert_eq!(a.buf.capacity(), 18, "part {i}");
        }
        assert!(a.segments.is_empty());
    }

    #[test]
    fn speculative_room_never_exceeds_what_the_caller_allows() {
        // decisions U2, L31 (issue 8 #2): parts: 2048 with a 4 KiB first part must not
        // reserve 8 MiB that nobody accounts.
        let part = vec![1u8; 4096];
        let b64 = encode(&part);
        for allowed in [0usize, 100, 64 * 1024] {
            let mut a = Assembly::new(2048);
            let mut room = allowed;
            a.place(0, &b64, &mut room).unwrap();
            // The decoder's estimate may ask for two bytes more than the part decodes to.
            assert!(a.held() <= 4096 + 2 + allowed, "held {} with room {allowed}", a.held());
        }
    }

    #[test]
    fn without_room_the_parts_become_segments_and_finish_joins_them() {
        let chunks: [&[u8]; 4] = [b"aaaa", b"bbbb", b"cccc", b"dd"];
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]] {
            assert_eq!(run_with_room(&chunks, &order, 0), b"aaaabbbbccccdd", "order {order:?}");
        }
    }

    #[test]
    fn white_space_padding_does_not_inflate_what_a_part_holds() {
        // decisions L11 with L31: the decoder's estimate counts white space as data.
        let padded = format!("{}{}", encode(b"abc"), " ".repeat(100_000));
        for part in [0, 1] {
            let mut a = Assembly::new(2);
            let mut room = 0;
            a.place(part, &padded, &mut room).unwrap();
            assert!(a.held() <= 3 + 3 + SEGMENT_OVERHEAD, "part {part} holds {}", a.held());
        }
    }

    #[test]
    fn reclaim_gives_back_the_speculative_room() {
        let mut a = Assembly::new(4);
        let mut room = MAX_MEDIA_BYTES;
        a.place(0, &encode(b"aaaaaaaa"), &mut room).unwrap();
        assert_eq!(a.held(), 36, "room for four parts as the decoder estimates them");
        a.reclaim();
        assert_eq!(a.held(), 8);
        let mut none = 0;
        a.place(1, &encode(b"bbbb"), &mut none).unwrap();
        assert_eq!(a.held(), 8 + 6 + SEGMENT_OVERHEAD, "a segment, not a regrown buffer");
        a.place(2, &encode(b"cc"), &mut none).unwrap();
        a.place(3, &encode(b"d"), &mut none).unwrap();
        assert_eq!(a.finish(), b"aaaaaaaabbbbccd");
    }

    #[test]
    fn a_failed_decode_changes_nothing() {
        let mut a = Assembly::new(2);
        let mut room = MAX_MEDIA_BYTES;
        assert!(a.place(0, "@@@@", &mut room).is_err());
        assert!(!a.has(0));
        assert_eq!((a.bytes(), a.received), (0, 0));
        assert!(a.place(1, "!!", &mut room).is_err());
        assert!(!a.has(1));
    }

    #[test]
    fn a_full_8_mib_file_in_3_mib_chunks() {
        const MIB: usize = 1024 * 1024;
        let data: Vec<u8> = (0..8 * MIB).map(|i| (i % 251) as u8).collect();
        let chunks: Vec<&[u8]> = data.chunks(3 * MIB).collect();
        assert_eq!(run(&chunks, &[1, 2, 0]), data);
        assert_eq!(run(&chunks, &[0, 1, 2]), data);
    }
}
