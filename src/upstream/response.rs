//! An HTTP/1.1 response parser: bytes in, head and body bytes out (issue 11).
//!
//! The head is parsed with `httparse`; the body is framed by `Content-Length`, by
//! `Transfer-Encoding: chunked` (chunk sizes through `httparse::parse_chunk_size`, which
//! skips chunk extensions; trailers are read and dropped), or by the connection closing.
//! Interim `1xx` responses are skipped. Body bytes are handed out as they arrive, never
//! collected, so a streamed answer costs only what the caller keeps.
//!
//! Memory is bounded: the head, a chunk-size line and the trailers may each be at most
//! `MAX_HEAD_BYTES`.

/// The most a response head (or a chunk-size line, or the trailers) may take.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;

/// The status and headers (names lower-cased).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
}

impl ResponseHead {
    /// The first header of that (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseEvent {
    Head(ResponseHead),
    /// Body bytes, in order.
    Body(Vec<u8>),
    /// The body is complete (the connection may be reused unless it was close-delimited).
    End,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// Not HTTP/1.x, or a header httparse refuses.
    Malformed(&'static str),
    /// The head, a chunk-size line or the trailers passed `MAX_HEAD_BYTES`.
    TooLarge,
    /// The connection closed before the body was complete.
    Truncated,
}

impl std::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResponseError::Malformed(what) => write!(f, "malformed HTTP response: {what}"),
            ResponseError::TooLarge => f.write_str("HTTP response head too large"),
            ResponseError::Truncated => f.write_str("the connection closed in the middle of the response"),
        }
    }
}

impl std::error::Error for ResponseError {}

#[derive(Debug)]
enum State {
    Head,
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    Trailers,
    UntilClose,
    Done,
}

/// Parses one response. `no_body` for a response to `HEAD` (or 204/304, which it sees).
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    buf: Vec<u8>,
    no_body: bool,
}

impl ResponseParser {
    pub fn new(no_body: bool) -> ResponseParser {
        ResponseParser {
            state: State::Head,
            buf: Vec::new(),
            no_body,
        }
    }

    /// True once `End` was produced.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Consumes `bytes`. After an error the parser must not be used again.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<ResponseEvent>) -> Result<(), ResponseError> {
        // Bytes held over from an earlier read (a partial head or chunk line) go first.
        let rest = if self.buf.is_empty() {
            self.run(bytes, out)?
        } else {
            let mut joined = std::mem::take(&mut self.buf);
            joined.extend_from_slice(bytes);
            self.run(&joined, out)?
        };
        self.buf = rest;
        Ok(())
    }

    /// The connection closed: ends a close-delimited body, else it is an error unless
    /// the response was complete.
    pub fn eof(&mut self, out: &mut Vec<ResponseEvent>) -> Result<(), ResponseError> {
        match self.state {
            State::UntilClose => {
                self.state = State::Done;
                out.push(ResponseEvent::End);
                Ok(())
            }
            State::Done => Ok(()),
            _ => Err(ResponseError::Truncated),
        }
    }

    /// Runs the state machine over `input`; returns the bytes it could not use yet.
    fn run(&mut self, mut input: &[u8], out: &mut Vec<ResponseEvent>) -> Result<Vec<u8>, ResponseError> {
        loop {
            match self.state {
                State::Done => return Ok(Vec::new()),
                State::Head => {
                    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let mut resp = httparse::Response::new(&mut headers);
                    let len = match resp.parse(input) {
                        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD_BYTES => len,
                        Ok(httparse::Status::Complete(_)) => return Err(ResponseError::TooLarge),
                        Ok(httparse::Status::Partial) if input.len() > MAX_HEAD_BYTES => {
                            return Err(ResponseError::TooLarge)
                        }
                        Ok(httparse::Status::Partial) => return Ok(input.to_vec()),
                        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::TooLarge),
                        Err(_) => return Err(ResponseError::Malformed("bad status line or header")),
                    };
                    let status = resp.code.unwrap_or(0);
                    let head = ResponseHead {
                        status,
                        reason: resp.reason.unwrap_or("").to_owned(),
                        headers: resp
                            .headers
                            .iter()
                            .map(|h| {
                                (
                                    h.name.to_ascii_lowercase(),
                                    String::from_utf8_lossy(h.value).trim().to_owned(),
                                )
                            })
                            .collect(),
                    };
                    input = &input[len..];
                    if (100..200).contains(&status) {
                        continue; // 100 Continue, 103 Early Hints: the real head follows
                    }
                    self.state = self.body_state(&head)?;
                    out.push(ResponseEvent::Head(head));
                    if matches!(self.state, State::Done) {
                        out.push(ResponseEvent::End);
                    }
                }
                State::Length(left) => {
                    let take = (input.len() as u64).min(left) as usize;
                    if take > 0 {
                        out.push(ResponseEvent::Body(input[..take].to_vec()));
                    }
                    // Bytes past the body (a pipelined response) are not ours: dropped.
                    let left = left - take as u64;
                    self.state = State::Length(left);
                    if left == 0 {
                        self.state = State::Done;
                        out.push(ResponseEvent::End);
                    }
                    return Ok(Vec::new());
                }
                State::UntilClose => {
                    if !input.is_empty() {
                        out.push(ResponseEvent::Body(input.to_vec()));
                    }
                    return Ok(Vec::new());
                }
                State::ChunkSize => match httparse::parse_chunk_size(input) {
                    Ok(httparse::Status::Complete((len, 0))) => {
                        input = &input[len..];
                        self.state = State::Trailers;
                    }
                    Ok(httparse::Status::Complete((len, size))) => {
                        input = &input[len..];
                        self.state = State::ChunkData(size);
                    }
                    Ok(httparse::Status::Partial) if input.len() > MAX_HEAD_BYTES => {
                        return Err(ResponseError::TooLarge)
                    }
                    Ok(httparse::Status::Partial) => return Ok(input.to_vec()),
                    Err(_) => return Err(ResponseError::Malformed("bad chunk size")),
                },
                State::ChunkData(left) => {
                    if input.is_empty() {
                        return Ok(Vec::new());
                    }
                    let take = (input.len() as u64).min(left) as usize;
                    out.push(ResponseEvent::Body(input[..take].to_vec()));
                    input = &input[take..];
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left)
                    };
                }
                State::ChunkEnd => {
                    if input.len() < 2 {
                        if input.first().is_some_and(|&b| b != b'\r') {
                            return Err(ResponseError::Malformed("no CRLF after a chunk"));
                        }
                        return Ok(input.to_vec());
                    }
                    if &input[..2] != b"\r\n" {
                        return Err(ResponseError::Malformed("no CRLF after a chunk"));
                    }
                    input = &input[2..];
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    // Trailer fields, then an empty line; read and dropped.
                    match input.windows(2).position(|w| w == b"\r\n") {
                        Some(0) => {
                            input = &input[2..];
                            self.state = State::Done;
                            out.push(ResponseEvent::End);
                        }
                        Some(at) => input = &input[at + 2..],
                        None if input.len() > MAX_HEAD_BYTES => return Err(ResponseError::TooLarge),
                        None => return Ok(input.to_vec()),
                    }
                }
            }
        }
    }

    fn body_state(&self, head: &ResponseHead) -> Result<State, ResponseError> {
        if self.no_body || head.status == 204 || head.status == 304 {
            return Ok(State::Done);
        }
        let chunked = head
            .headers
            .iter()
            .filter(|(n, _)| n == "transfer-encoding")
            .flat_map(|(_, v)| v.split(','))
            .next_back()
            .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        if chunked {
            return Ok(State::ChunkSize);
        }
        let mut lengths = head.headers.iter().filter(|(n, _)| n == "content-length");
        match (lengths.next(), lengths.next()) {
            (Some((_, v)), None) => match v.parse::<u64>() {
                Ok(0) => Ok(State::Done),
                Ok(n) => Ok(State::Length(n)),
                Err(_) => Err(ResponseError::Malformed("bad Content-Length")),
            },
            (Some(_), Some(_)) => Err(ResponseError::Malformed("two Content-Length headers")),
            (None, _) => Ok(State::UntilClose),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]], eof: bool) -> Result<(u16, Vec<u8>, bool), ResponseError> {
        let mut p = ResponseParser::new(false);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out)?;
        }
        if eof {
            p.eof(&mut out)?;
        }
        let mut status = 0;
        let mut body = Vec::new();
        let mut ended = false;
        for e in out {
            match e {
                ResponseEvent::Head(h) => status = h.status,
                ResponseEvent::Body(b) => body.extend(b),
                ResponseEvent::End => ended = true,
            }
        }
        Ok((status, body, ended))
    }

    #[test]
    fn content_length_bodies_end_at_their_length() {
        let r = parse(&[b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", b"lo"], false).unwrap();
        assert_eq!(r, (200, b"hello".to_vec(), true));
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let raw: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;name=val\r\nRust\r\n6\r\n is ok\r\n0\r\nX-Trailer: 1\r\n\r\n";
        assert_eq!(parse(&[raw], false).unwrap(), (200, b"Rust is ok".to_vec(), true));
        // One byte per read.
        let bytes: Vec<&[u8]> = raw.chunks(1).collect();
        assert_eq!(parse(&bytes, false).unwrap(), (200, b"Rust is ok".to_vec(), true));
    }

    #[test]
    fn close_delimited_bodies_end_at_eof_and_others_are_truncated() {
        assert_eq!(
            parse(&[b"HTTP/1.1 200 OK\r\n\r\nstream"], true).unwrap(),
            (200, b"stream".to_vec(), true)
        );
        assert_eq!(
            parse(&[b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nstream"], true),
            Err(ResponseError::Truncated)
        );
        assert_eq!(
            parse(
                &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nstr"],
                true
            ),
            Err(ResponseError::Truncated)
        );
    }

    #[test]
    fn interim_responses_are_skipped_and_no_body_statuses_end_at_once() {
        let r = parse(
            &[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno"],
            false,
        );
        assert_eq!(r.unwrap(), (401, b"no".to_vec(), true));
        assert_eq!(
            parse(&[b"HTTP/1.1 204 No Content\r\n\r\n"], false).unwrap(),
            (204, vec![], true)
        );
    }

    #[test]
    fn malformed_and_oversized_heads_are_errors() {
        assert!(matches!(
            parse(&[b"SMTP ready\r\n\r\n"], false),
            Err(ResponseError::Malformed(_))
        ));
        let big = format!("HTTP/1.1 200 OK\r\nX: {}\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(parse(&[big.as_bytes()], false), Err(ResponseError::TooLarge));
        assert!(matches!(
            parse(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], false),
            Err(ResponseError::Malformed(_))
        ));
        assert!(matches!(
            parse(
                &[b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"],
                false
            ),
            Err(ResponseError::Malformed(_))
        ));
    }
}
