//! Line-oriented agent-link peers (the `exec:` child's pipes, Unix socket connections):
//! lines cut by a bounded [`LineReader`] a budget at a time, and writes queued in a
//! bounded outbox, written as the peer takes them.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use hermes_mobile::agent_link::{LineItem, LineReader, PeerId};
use hermes_mobile::journal::owed::EventKey;
use hermes_mobile::limits::MAX_FRAME_BYTES;

/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 * 1024;
/// Lines and bytes taken from one peer per loop turn; the rest waits for the next turn, so
/// an agent that writes without pause cannot keep the loop from the phones.
const LINES_PER_TURN: usize = 64;
const BYTES_PER_TURN: usize = 1024 * 1024;

/// Bytes queued for a peer, written as it accepts them.
#[derive(Default)]
pub struct Outbox {
    /// Each line with the event it carries, if that is owed to the agent (L64).
    lines: VecDeque<(Vec<u8>, Option<EventKey>)>,
    /// Bytes of the front line already written.
    written: usize,
    pub bytes: usize,
}

impl Outbox {
    pub fn push(&mut self, line: String, owed: Option<EventKey>) {
        self.bytes += line.len();
        self.lines.push_back((line.into_bytes(), owed));
    }

    /// The owed events of the lines not written whole, as the peer ends: they go to the
    /// next agent (a line cut short is no line to the agent).
    pub fn take_unwritten(&mut self) -> impl Iterator<Item = EventKey> + '_ {
        self.bytes = 0;
        self.written = 0;
        self.lines.drain(..).filter_map(|(_, owed)| owed)
    }

    /// Writes until empty or `WouldBlock`. The owed events of lines written whole go to
    /// `done`: only then has the agent got them (a line still queued dies with the process).
    pub fn flush(&mut self, out: &mut impl Write, done: &mut Vec<EventKey>) -> io::Result<()> {
        while let Some((front, _)) = self.lines.front() {
            match out.write(&front[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.written += n;
                    self.bytes -= n;
                    if self.written == front.len() {
                        done.extend(self.lines.pop_front().and_then(|(_, owed)| owed));
                        self.written = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// How reading a stream peer ended.
pub enum ReadEnd {
    /// Nothing more for now (`WouldBlock`), or the link asked to pause.
    Paused,
    /// This turn's budget is spent; more may be waiting: read again next turn.
    Budget,
    /// The peer closed or the read failed.
    Closed(String),
}

/// A line-oriented peer: the child (stdout in, stdin out) or a Unix socket connection.
pub struct StreamPeer {
    pub peer: PeerId,
    reader: LineReader,
    pub outbox: Outbox,
}

impl StreamPeer {
    pub fn new(peer: PeerId) -> StreamPeer {
        StreamPeer {
            peer,
            reader: LineReader::new(MAX_FRAME_BYTES),
            outbox: Outbox::default(),
        }
    }

    /// Hands complete lines to `on_line`, reading more from `src` as needed, for as long
    /// as `on_line(peer, None)` says more are welcome and this turn's budget lasts.
    /// Memory: one line's limit plus a chunk.
    pub fn pump(&mut self, src: &mut impl Read, on_line: &mut dyn FnMut(PeerId, Option<LineItem>) -> bool) -> ReadEnd {
        let mut chunk = vec![0u8; READ_CHUNK];
        let (mut lines, mut bytes) = (0, 0);
        loop {
            loop {
                if !on_line(self.peer, None) {
                    return ReadEnd::Paused;
                }
                let Some(item) = self.reader.next_line() else { break };
                if let LineItem::Line(l) = &item {
                    bytes += l.len();
                }
                on_line(self.peer, Some(item));
                lines += 1;
                if lines >= LINES_PER_TURN || bytes >= BYTES_PER_TURN {
                    return ReadEnd::Budget;
                }
            }
            match src.read(&mut chunk) {
                Ok(0) => return ReadEnd::Closed("closed by the agent".into()),
                Ok(n) => {
                    bytes += n;
                    self.reader.push(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return ReadEnd::Paused,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return ReadEnd::Closed(format!("read failed: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outbox_writes_what_the_peer_takes_and_keeps_the_rest() {
        struct Trickle(Vec<u8>, usize);
        impl Write for Trickle {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                if self.1 == 0 {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let n = buf.len().min(self.1);
                self.1 -= n;
                self.0.extend_from_slice(&buf[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let key = |k: &str| EventKey {
            device: hermes_mobile::DeviceId::from("tel-1"),
            key: k.into(),
        };
        let mut out = Outbox::default();
        out.push("hello\n".into(), Some(key("m1")));
        out.push("world\n".into(), Some(key("m2")));
        let mut sink = Trickle(Vec::new(), 8);
        let mut done = Vec::new();
        out.flush(&mut sink, &mut done).unwrap();
        assert_eq!(sink.0, b"hello\nwo");
        assert_eq!(out.bytes, 4);
        // L64 (review B #1): an event is the agent's only once its whole line is written.
        assert_eq!(done, vec![key("m1")]);
        sink.1 = 100;
        out.flush(&mut sink, &mut done).unwrap();
        assert_eq!(sink.0, b"hello\nworld\n");
        assert_eq!(out.bytes, 0);
        assert_eq!(done, vec![key("m1"), key("m2")]);
    }
}
