//! The upstream HTTP response parser and SSE decoder on arbitrary bytes (issue 11): no
//! panic, and the bytes held between reads stay within the parsers' limits.
#![no_main]

use hermes_mobile::upstream::{ResponseEvent, ResponseParser, SseDecoder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A plausible head first half the time, so the body paths are reached.
    let mut raw = Vec::new();
    if data.first().is_some_and(|b| b & 1 == 1) {
        raw.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    }
    raw.extend_from_slice(data);
    let mut parser = ResponseParser::new(false);
    let mut sse = SseDecoder::new(4096);
    let mut events = Vec::new();
    let mut items = Vec::new();
    let mut rest = &raw[..];
    while !rest.is_empty() {
        let n = (usize::from(rest[0]) * 5 + 1).min(rest.len());
        let (push, tail) = rest.split_at(n);
        rest = tail;
        if parser.feed(push, &mut events).is_err() {
            return;
        }
        for e in events.drain(..) {
            if let ResponseEvent::Body(b) = e {
                if sse.feed(&b, &mut items).is_err() {
                    return;
                }
            }
        }
        items.clear();
    }
    let _ = parser.eof(&mut events);
});
