//! Where the decoded bytes of each part of an upload go (decisions U4), so that a file costs
//! about one base64 decode whatever order its parts arrive in.
//!
//! `buf` holds the file's longest in-order prefix: a part that continues it is decoded
//! straight onto its end, exactly as a plain decode of the whole file would run. A part that
//! arrives early is decoded into a buffer of its own and *parked*; when the prefix reaches
//! it, it is appended. So every byte is decoded once, and copied at most once (only if its
//! part came early), and memory holds what was received and nothing more: no zeroed room,
//! no holes.

use std::collections::HashMap;

use crate::base64::{decode_into, InvalidBase64};
use crate::limits::MAX_MEDIA_BYTES;

#[derive(Debug)]
pub(crate) struct Assembly {
    parts: u32,
    /// Parts `0..next`, in order.
    buf: Vec<u8>,
    /// The part `buf` waits for.
    next: u32,
    /// Parts that came before their turn.
    parked: HashMap<u32, Vec<u8>>,
    received: u32,
    bytes: usize,
}

impl Assembly {
    pub fn new(parts: u32) -> Assembly {
        Assembly {
            parts,
            buf: Vec::new(),
            next: 0,
            parked: HashMap::new(),
            received: 0,
            bytes: 0,
        }
    }

    pub fn has(&self, part: u32) -> bool {
        part < self.next || self.parked.contains_key(&part)
    }

    /// Decoded bytes received.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_complete(&self) -> bool {
        self.received == self.parts
    }

    /// Decodes one part not received before. `size` is its decoded size from the base64
    /// length (exact for canonical base64, an upper bound otherwise). On error nothing changed.
    pub fn place(&mut self, part: u32, b64: &str, size: usize) -> Result<(), InvalidBase64> {
        let decoded = if part == self.next {
            self.make_room(size);
            let before = self.buf.len();
            decode_into(b64, &mut self.buf)?;
            let n = self.buf.len() - before;
            self.next += 1;
            self.unpark();
            n
        } else {
            let mut early = Vec::with_capacity(size);
            decode_into(b64, &mut early)?;
            let n = early.len();
            self.parked.insert(part, early);
            n
        };
        self.received += 1;
        self.bytes += decoded;
        Ok(())
    }

    /// Appends the parked parts that now continue the prefix.
    fn unpark(&mut self) {
        while let Some(early) = self.parked.remove(&self.next) {
            self.make_room(early.len());
            self.buf.extend_from_slice(&early);
            self.next += 1;
        }
    }

    /// Room for `additional` more bytes. The first time, for the whole file as the chunks
    /// so far suggest (one allocation for the usual equal chunks); later, doubling like
    /// `Vec` does, but never past one file's limit.
    fn make_room(&mut self, additional: usize) {
        let needed = self.buf.len() + additional;
        if needed <= self.buf.capacity() {
            return;
        }
        let guess = if self.buf.capacity() == 0 {
            additional.saturating_mul(self.parts as usize)
        } else {
            self.buf.capacity() * 2
        };
        let target = guess.min(MAX_MEDIA_BYTES).max(needed);
        self.buf.reserve_exact(target - self.buf.len());
    }

    /// The file, in part order. Call once `is_complete`.
    pub fn finish(self) -> Vec<u8> {
        debug_assert!(
            self.next == self.parts && self.parked.is_empty(),
            "finish before complete"
        );
        self.buf
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
        for (i, c) in chunks.iter().enumerate() {
            let b64 = encode(c);
            a.place(i as u32, &b64, decoded_len(&b64)).unwrap();
            assert!(
                a.buf.capacity() >= 10 && a.buf.capacity() <= 12,
                "capacity {}",
                a.buf.capacity()
            );
        }
        assert!(a.parked.is_empty());
    }

    #[test]
    fn a_failed_decode_changes_nothing() {
        let mut a = Assembly::new(2);
        assert!(a.place(0, "@@@@", 3).is_err());
        assert!(!a.has(0));
        assert_eq!((a.bytes(), a.received), (0, 0));
        assert!(a.place(1, "!!", 1).is_err());
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
