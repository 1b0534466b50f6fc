//! The socket under a WebSocket, counting what a message still arriving holds, so that the
//! memory budget sees it (issue 23 #2, decisions L51).
//!
//! tungstenite gathers a message's frames in buffers of its own and says nothing until the
//! message is whole: 8 peers each sending 15 MiB of a 16 MiB message held 120 MiB that no
//! budget saw. Worse, it reserves a frame's whole announced length as soon as its header
//! arrives (on a 32-bit Pi, address space runs out long before memory does). So this
//! wrapper reads the frame headers as the bytes go by ([`FrameScan`]) and charges a
//! connection the larger of what its message in progress announced and what was read
//! since the last whole message: the charge is known before the memory is spent.

use std::io::{self, Read, Write};

use mio::net::TcpStream;

pub struct Counted {
    stream: TcpStream,
    /// Bytes read since the last whole message was handed out.
    since_message: usize,
    scan: FrameScan,
}

impl Counted {
    /// `leftover`: bytes already read past the HTTP head, which tungstenite reads first.
    pub fn new(stream: TcpStream, leftover: &[u8]) -> Counted {
        let mut scan = FrameScan::default();
        scan.feed(leftover);
        Counted {
            stream,
            since_message: leftover.len(),
            scan,
        }
    }

    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// What the message in progress holds or has reserved (L51).
    pub fn partial(&self) -> usize {
        let announced = usize::try_from(self.scan.message).unwrap_or(usize::MAX);
        self.since_message.max(announced)
    }

    /// tungstenite handed out a whole message or a control frame.
    pub fn message_done(&mut self) {
        self.since_message = 0;
    }

    /// The reader is given up (an oversized message): bytes are discarded raw from now
    /// on, past this wrapper, and nothing is held for it.
    pub fn abandon(&mut self) {
        self.since_message = 0;
        self.scan = FrameScan::default();
        self.scan.stopped = true;
    }
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.since_message = self.since_message.saturating_add(n);
        self.scan.feed(&buf[..n]);
        Ok(n)
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// RFC 6455 frame headers, read as bytes go by: how many payload bytes the data message in
/// progress has announced (its finished fragments and the current frame).
#[derive(Debug, Default)]
pub struct FrameScan {
    head: [u8; 14],
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: u64,
    /// The current frame is a data frame (text, binary, continuation) with FIN set.
    ends_message: bool,
    /// Announced payload of the data message in progress.
    pub message: u64,
    stopped: bool,
}

impl FrameScan {
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.stopped {
            if self.left > 0 {
                let n = (bytes.len() as u64).min(self.left);
                self.left -= n;
                bytes = &bytes[n as usize..];
                if self.left == 0 {
                    self.frame_end();
                }
                continue;
            }
            self.head[self.have] = bytes[0];
            self.have += 1;
            bytes = &bytes[1..];
            if self.have >= 2 && self.have == self.header_len() {
                self.header_done();
            }
        }
    }

    /// The header's length once its first two bytes are in.
    fn header_len(&self) -> usize {
        let ext = match self.head[1] & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if self.head[1] & 0x80 != 0 { 4 } else { 0 };
        2 + ext + mask
    }

    fn header_done(&mut self) {
        let len = match self.head[1] & 0x7f {
            126 => u64::from(u16::from_be_bytes([self.head[2], self.head[3]])),
            127 => u64::from_be_bytes(self.head[2..10].try_into().expect("eight bytes")),
            short => u64::from(short),
        };
        let opcode = self.head[0] & 0x0f;
        let data = opcode < 8;
        if data {
            self.message = self.message.saturating_add(len);
        }
        self.ends_message = data && self.head[0] & 0x80 != 0;
        self.have = 0;
        self.left = len;
        if len == 0 {
            self.frame_end();
        }
    }

    fn frame_end(&mut self) {
        if self.ends_message {
            self.message = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame: FIN and opcode, then `len` bytes of payload (`sent` given).
    fn frame(fin: bool, opcode: u8, len: usize, sent: usize) -> Vec<u8> {
        let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
        match len {
            0..=125 => out.push(0x80 | len as u8),
            126..=0xffff => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&[1, 2, 3, 4]);
        out.extend(std::iter::repeat_n(b'x', sent));
        out
    }

    fn scanned(chunks: &[Vec<u8>], split: usize) -> u64 {
        let bytes: Vec<u8> = chunks.concat();
        let mut scan = FrameScan::default();
        for piece in bytes.chunks(split.max(1)) {
            scan.feed(piece);
        }
        scan.message
    }

    #[test]
    fn a_message_in_progress_is_charged_what_it_announced_however_the_bytes_arrive() {
        // decisions L51: a 15 MiB header with a few bytes behind it is 15 MiB.
        for split in [1, 3, 7, 2048] {
            assert_eq!(scanned(&[frame(true, 1, 15 << 20, 10)], split), 15 << 20);
            // Whole messages leave nothing; the next one's header counts at once.
            let two = [frame(true, 1, 300, 300), frame(true, 2, 70_000, 5)];
            assert_eq!(scanned(&two, split), 70_000);
            // Fragments add up; a ping between them is not the message's.
            let frags = [
                frame(false, 1, 1000, 1000),
                frame(true, 9, 4, 4),
                frame(false, 0, 200, 50),
            ];
            assert_eq!(scanned(&frags, split), 1200);
            let done = [frame(false, 1, 1000, 1000), frame(true, 0, 200, 200)];
            assert_eq!(scanned(&done, split), 0);
            assert_eq!(scanned(&[frame(true, 1, 0, 0), frame(true, 10, 0, 0)], split), 0);
        }
    }

    #[test]
    fn an_abandoned_reader_holds_nothing() {
        let mut scan = FrameScan::default();
        scan.feed(&frame(true, 1, 1 << 30, 0));
        assert_eq!(scan.message, 1 << 30);
        scan = FrameScan {
            stopped: true,
            ..FrameScan::default()
        };
        scan.feed(&frame(true, 1, 1 << 30, 0));
        assert_eq!(scan.message, 0);
    }
}
