//! The upstream HTTP response parser and SSE decoder (issue 11), on random inputs cut at
//! random places: what comes out never depends on how the bytes were split into reads.

use hermes_mobile::upstream::{ResponseEvent, ResponseParser, SseDecoder, SseEvent, SseItem};
use proptest::prelude::*;

/// Cuts `bytes` at the given (sorted, deduplicated) points.
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut at = 0;
    for p in points {
        out.push(&bytes[at..p]);
        at = p;
    }
    out.push(&bytes[at..]);
    out
}

fn line_end() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("\n"), Just("\r\n"), Just("\r")]
}

/// Text without line breaks (SSE field values cannot hold them).
fn value() -> impl Strategy<Value = String> {
    "[^\r\n]{0,40}"
}

#[derive(Debug, Clone)]
struct Ev {
    name: String,
    lines: Vec<String>,
    comment_before: bool,
}

fn event() -> impl Strategy<Value = Ev> {
    ("[a-z.]{0,12}", prop::collection::vec(value(), 1..4), any::<bool>()).prop_map(|(name, lines, comment_before)| Ev {
        name,
        lines,
        comment_before,
    })
}

proptest! {
    #[test]
    fn sse_events_survive_any_split_and_any_line_end(
        events in prop::collection::vec(event(), 0..8),
        eol in line_end(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut stream = String::new();
        for e in &events {
            if e.comment_before {
                stream.push_str(&format!(": keepalive{eol}"));
            }
            if !e.name.is_empty() {
                stream.push_str(&format!("event: {}{eol}", e.name));
            }
            for l in &e.lines {
                stream.push_str(&format!("data: {l}{eol}"));
            }
            stream.push_str(eol);
        }
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        for piece in split(stream.as_bytes(), &cuts) {
            d.feed(piece, &mut out).unwrap();
        }
        let got: Vec<SseEvent> = out.iter().filter_map(|i| match i { SseItem::Event(e) => Some(e.clone()), _ => None }).collect();
        let comments = out.iter().filter(|i| matches!(i, SseItem::Comment)).count();
        prop_assert_eq!(comments, events.iter().filter(|e| e.comment_before).count());
        prop_assert_eq!(got.len(), events.len());
        for (g, e) in got.iter().zip(&events) {
            prop_assert_eq!(&g.event, &e.name);
            prop_assert_eq!(&g.data, &e.lines.join("\n"));
        }
    }

    #[test]
    fn sse_never_panics_and_stays_bounded(bytes in prop::collection::vec(any::<u8>(), 0..600), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let mut d = SseDecoder::new(64);
        let mut out = Vec::new();
        for piece in split(&bytes, &cuts) {
            if d.feed(piece, &mut out).is_err() {
                break;
            }
        }
        for item in out {
            if let SseItem::Event(e) = item {
                prop_assert!(e.data.len() <= 64 * 3, "lossy UTF-8 may triple bytes, no more");
            }
        }
    }

    #[test]
    fn response_bodies_survive_any_framing_and_any_split(
        body in prop::collection::vec(any::<u8>(), 0..300),
        framing in 0u8..3,
        chunk_sizes in prop::collection::vec(1usize..40, 1..10),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let mut raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n".to_vec();
        match framing {
            0 => {
                raw.extend(format!("Content-Length: {}\r\n\r\n", body.len()).bytes());
                raw.extend(&body);
            }
            1 => {
                raw.extend(b"Transfer-Encoding: chunked\r\n\r\n");
                let mut rest = &body[..];
                let mut i = 0;
                while !rest.is_empty() {
                    let n = chunk_sizes[i % chunk_sizes.len()].min(rest.len());
                    let ext = if i % 2 == 0 { ";x=1" } else { "" };
                    raw.extend(format!("{n:x}{ext}\r\n").bytes());
                    raw.extend(&rest[..n]);
                    raw.extend(b"\r\n");
                    rest = &rest[n..];
                    i += 1;
                }
                raw.extend(b"0\r\nTrailer: x\r\n\r\n");
            }
            _ => {
                raw.extend(b"\r\n");
                raw.extend(&body);
            }
        }
        let mut p = ResponseParser::new(false);
        let mut out = Vec::new();
        for piece in split(&raw, &cuts) {
            p.feed(piece, &mut out).unwrap();
        }
        p.eof(&mut out).unwrap();
        let mut got = Vec::new();
        let mut ends = 0;
        for e in out {
            match e {
                ResponseEvent::Head(h) => prop_assert_eq!(h.status, 200),
                ResponseEvent::Body(b) => got.extend(b),
                ResponseEvent::End => ends += 1,
            }
        }
        prop_assert_eq!(got, body);
        prop_assert_eq!(ends, 1);
    }

    #[test]
    fn responses_never_panic_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..400), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
        let mut raw = b"HTTP/1.1 200 OK\r\n".to_vec();
        raw.extend(bytes);
        let mut p = ResponseParser::new(false);
        let mut out = Vec::new();
        for piece in split(&raw, &cuts) {
            if p.feed(piece, &mut out).is_err() {
                return Ok(());
            }
        }
        let _ = p.eof(&mut out);
    }
}

mod coalescing {
    use hermes_mobile::upstream::Coalescer;
    use hermes_mobile::Time;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        /// issue 11: a 2,000-delta answer reaches the phone as at most one edit per
        /// interval plus the final version, and the final text is exact.
        #[test]
        fn many_deltas_become_few_edits_and_the_exact_final_text(
            gaps in prop::collection::vec(0u64..40, 2000),
            interval_ms in 50u64..1000,
        ) {
            let interval = Duration::from_millis(interval_ms);
            let mut c = Coalescer::new(interval);
            let mut now = 1_000u64;
            let mut sent: Vec<(u64, String)> = Vec::new();
            let mut expected = String::new();
            for (i, gap) in gaps.iter().enumerate() {
                now += gap;
                // The timer the caller armed fires first if it is due.
                if let Some(due) = c.due_at() {
                    let due = due.as_millis().max(now - gap);
                    if due <= now {
                        if let Some(v) = c.poll(Time::from_millis(due)) {
                            sent.push((due, v.to_owned()));
                        }
                    }
                }
                let delta = format!("w{i} ");
                expected.push_str(&delta);
                if let Some(v) = c.push(Time::from_millis(now), &delta) {
                    sent.push((now, v.to_owned()));
                }
            }
            for pair in sent.windows(2) {
                prop_assert!(pair[1].0 - pair[0].0 >= interval_ms, "edits {} ms apart", pair[1].0 - pair[0].0);
                prop_assert!(pair[1].1.starts_with(&pair[0].1), "a later version extends the earlier one");
            }
            let span = now - 1_000;
            prop_assert!(sent.len() as u64 <= span / interval_ms + 1);
            prop_assert_eq!(c.finish(), expected);
        }
    }
}
