//! Splitting a byte stream into lines without ever holding more than one line's limit.
//!
//! The agent link over a pipe or a Unix socket is a stream; its unit is a line. A peer may
//! send a line of any length, so a line that passes the limit is dropped as soon as it
//! does, and the rest of it is skipped as it arrives, never buffered (issue 9: "a line over
//! the frame limit is refused without being held").

/// What the reader found.
#[derive(Debug, PartialEq, Eq)]
pub enum LineItem {
    /// One complete line, without its `\n` (and without a `\r` before it).
    Line(Vec<u8>),
    /// A line passed the limit; its bytes are being skipped up to its `\n`.
    TooBig,
}

/// Bytes in, lines out. Feed it with [`LineReader::push`] only after [`LineReader::next_line`]
/// returned `None`: then it holds at most `limit` bytes plus the last push.
#[derive(Debug)]
pub struct LineReader {
    buf: Vec<u8>,
    /// Where the unread part of `buf` starts: lines are taken by moving this, and the
    /// buffer is compacted once per push, so a chunk of many short lines costs linear time.
    start: usize,
    /// Bytes of `buf` already searched for `\n`.
    scanned: usize,
    limit: usize,
    /// Inside a line that was refused: drop bytes up to the next `\n`.
    skipping: bool,
}

impl LineReader {
    pub fn new(limit: usize) -> LineReader {
        LineReader {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            limit,
            skipping: false,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.skipping {
            match bytes.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    self.skipping = false;
                    bytes = &bytes[end + 1..];
                }
                None => return,
            }
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete line, or `TooBig` once per line over the limit.
    pub fn next_line(&mut self) -> Option<LineItem> {
        loop {
            if self.skipping {
                return None;
            }
            let from = self.scanned.max(self.start);
            match self.buf[from..].iter().position(|b| *b == b'\n') {
                Some(offset) => {
                    let end = from + offset;
                    let mut line = &self.buf[self.start..end];
                    self.start = end + 1;
                    self.scanned = self.start;
                    if line.last() == Some(&b'\r') {
                        line = &line[..line.len() - 1];
                    }
                    if line.len() > self.limit {
                        return Some(LineItem::TooBig);
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue; // blank lines are allowed and mean nothing
                    }
                    return Some(LineItem::Line(line.to_vec()));
                }
                None if self.buf.len() - self.start > self.limit => {
                    self.buf = Vec::new();
                    self.start = 0;
                    self.scanned = 0;
                    self.skipping = true;
                    return Some(LineItem::TooBig);
                }
                None => {
                    self.scanned = self.buf.len();
                    if self.start == self.buf.len() {
                        self.buf.clear();
                        self.start = 0;
                        self.scanned = 0;
                        if self.buf.capacity() > 64 * 1024 {
                            self.buf = Vec::new(); // a big line went: so does its buffer
                        }
                    }
                    return None;
                }
            }
        }
    }

    /// Bytes held (a partial line).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(r: &mut LineReader) -> Vec<LineItem> {
        std::iter::from_fn(|| r.next_line()).collect()
    }

    #[test]
    fn lines_split_across_pushes_come_out_whole() {
        let mut r = LineReader::new(100);
        r.push(b"{\"a\":1}\n{\"b\"");
        assert_eq!(drain(&mut r), vec![LineItem::Line(b"{\"a\":1}".to_vec())]);
        r.push(b":2}\r\n\n  \n");
        assert_eq!(drain(&mut r), vec![LineItem::Line(b"{\"b\":2}".to_vec())]);
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn a_line_over_the_limit_is_refused_once_and_never_held() {
        // issue 9: refused without being held.
        let mut r = LineReader::new(10);
        r.push(b"0123456789ABC");
        assert_eq!(drain(&mut r), vec![LineItem::TooBig]);
        assert_eq!(r.buffered(), 0);
        r.push(&[b'x'; 1000]);
        assert_eq!(r.buffered(), 0, "the rest of the long line is skipped as it arrives");
        assert_eq!(drain(&mut r), vec![]);
        r.push(b"yyy\nok\n");
        assert_eq!(drain(&mut r), vec![LineItem::Line(b"ok".to_vec())]);
    }

    #[test]
    fn a_complete_line_over_the_limit_is_refused_and_the_next_one_kept() {
        let mut r = LineReader::new(4);
        r.push(b"123456\nabc\n");
        assert_eq!(drain(&mut r), vec![LineItem::TooBig, LineItem::Line(b"abc".to_vec())]);
    }
}
