//! A Server-Sent Events decoder: bytes in, events out (issue 11).
//!
//! It follows the WHATWG "event stream interpretation": lines end in CRLF, LF or CR (a CR at
//! the end of one read and an LF at the start of the next are one line end); a line
//! starting with `:` is a comment (servers send them as keepalives; they are bytes read,
//! so they reset the gateway's idle timer like any others); `field: value` with one optional space after the colon;
//! `data` lines are joined with `\n`; an empty line dispatches the event, and an event
//! with no `data` is dropped. A UTF-8 byte order mark at the very start is skipped.
//!
//! No crate fitted: the sans-IO SSE parsers on crates.io were 0.1 releases of one author
//! each, or tied to an async runtime (docs/design.md). This one is about a hundred lines.
//!
//! Memory is bounded: a line or an event's data longer than `max_event_bytes` is an error
//! as soon as it passes the limit, before more is buffered.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` name; empty means the default, "message".
    pub event: String,
    pub data: String,
    /// The last `id:` seen, if any (it persists across events, as the spec says).
    pub id: Option<String>,
}

/// What the decoder found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    Event(SseEvent),
    /// A comment line (`: keepalive`): no event, but proof the upstream is alive.
    Comment,
    /// `retry:` with a valid number of milliseconds.
    Retry(u64),
}

/// A line or an event over the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseTooLong {
    pub limit: usize,
}

impl std::fmt::Display for SseTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an event stream line or event is longer than {} bytes", self.limit)
    }
}

impl std::error::Error for SseTooLong {}

/// The default bound: an event of 4 MiB is far more than any model sends per delta.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    event: String,
    last_id: Option<String>,
    /// The previous read ended in CR: an LF first in the next one is the same line end.
    after_cr: bool,
    /// Still at the very start of the stream (a BOM may be skipped).
    at_start: bool,
    max_event_bytes: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    pub fn new(max_event_bytes: usize) -> SseDecoder {
        SseDecoder {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            event: String::new(),
            last_id: None,
            after_cr: false,
            at_start: true,
            max_event_bytes,
        }
    }

    /// Decodes `bytes`, appending what it completes to `out`. After an error the decoder
    /// must not be used again (the stream is broken off).
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseItem>) -> Result<(), SseTooLong> {
        if self.at_start && !bytes.is_empty() {
            // A BOM may itself be split across reads: compare what we have.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            let have = self.line.len() + bytes.len();
            if have < BOM.len() && BOM.starts_with(&[&self.line[..], bytes].concat()) {
                self.line.extend_from_slice(bytes);
                return Ok(());
            }
            self.at_start = false;
            let mut joined = std::mem::take(&mut self.line);
            joined.extend_from_slice(bytes);
            let rest = joined.strip_prefix(BOM).unwrap_or(&joined).to_vec();
            return self.feed(&rest, out);
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.push_line_bytes(bytes)?;
                    break;
                }
                Some(at) => {
                    self.push_line_bytes(&bytes[..at])?;
                    let cr = bytes[at] == b'\r';
                    bytes = &bytes[at + 1..];
                    if cr {
                        match bytes.first() {
                            Some(b'\n') => bytes = &bytes[1..],
                            None => self.after_cr = true,
                            Some(_) => {}
                        }
                    }
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&line, out)?;
                    self.line = line;
                    self.line.clear();
                }
            }
        }
        Ok(())
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), SseTooLong> {
        if self.line.len() + bytes.len() > self.max_event_bytes {
            return Err(SseTooLong {
                limit: self.max_event_bytes,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseItem>) -> Result<(), SseTooLong> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseItem::Event(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                    id: self.last_id.clone(),
                }));
            } else {
                self.event.clear();
            }
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            out.push(SseItem::Comment);
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    return Err(SseTooLong {
                        limit: self.max_event_bytes,
                    });
                }
                if self.has_data {
                    self.data.push('\n');
                } else {
                    // One allocation for the usual one-line event, not a doubling series.
                    self.data.reserve_exact(value.len());
                }
                match std::str::from_utf8(value) {
                    Ok(text) => self.data.push_str(text),
                    Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
                }
                self.has_data = true;
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => self.last_id = Some(String::from_utf8_lossy(value).into_owned()),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                    out.push(SseItem::Retry(ms));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<SseItem> {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, &mut out).unwrap();
        }
        out
    }

    fn data(items: &[SseItem]) -> Vec<&str> {
        items
            .iter()
            .filter_map(|i| match i {
                SseItem::Event(e) => Some(e.data.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn data_lines_join_and_an_empty_line_dispatches() {
        let items = decode(&[b"data: a\ndata:b\ndata:  c\n\n"]);
        assert_eq!(data(&items), ["a\nb\n c"]);
    }

    #[test]
    fn every_line_end_works_and_crlf_split_across_reads_is_one() {
        for chunks in [
            &[&b"data: x\r\n\r\ndata: y\r\n\r\n"[..]][..],
            &[b"data: x\r\r", b"data: y\r\r"],
            &[b"data: x\r", b"\n\r", b"\ndata: y\r\n", b"\r\n"],
            &[b"data: x\n\ndata: y\n\n"],
        ] {
            assert_eq!(data(&decode(chunks)), ["x", "y"], "{chunks:?}");
        }
    }

    #[test]
    fn comments_are_reported_and_events_without_data_dropped() {
        let items = decode(&[b": keepalive\n\nevent: ping\n\nevent: delta\ndata: {}\n\n"]);
        assert_eq!(items[0], SseItem::Comment);
        assert_eq!(
            items[1],
            SseItem::Event(SseEvent {
                event: "delta".into(),
                data: "{}".into(),
                id: None
            })
        );
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn a_bom_is_skipped_even_split_and_retry_and_id_are_read() {
        let items = decode(&[b"\xEF", b"\xBB\xBFid: 7\nretry: 1500\ndata: z\n\n"]);
        assert_eq!(items[0], SseItem::Retry(1500));
        assert!(matches!(&items[1], SseItem::Event(e) if e.data == "z" && e.id.as_deref() == Some("7")));
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        assert!(data(&decode(&[b"data: half"])).is_empty());
        assert!(data(&decode(&[b"data: half\n"])).is_empty());
    }

    #[test]
    fn long_lines_are_refused_before_they_are_buffered() {
        let mut d = SseDecoder::new(16);
        let mut out = Vec::new();
        assert!(d.feed(b"data: 0123456789", &mut out).is_ok());
        assert_eq!(d.feed(b"abcdef", &mut out), Err(SseTooLong { limit: 16 }));
        let mut d = SseDecoder::new(16);
        let err = d.feed(b"data: 0123456789\ndata: 0123456789\n", &mut out);
        assert!(err.is_err(), "an event's data is bounded too");
    }
}
