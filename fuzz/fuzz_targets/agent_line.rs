//! The agent protocol on arbitrary bytes (issue 9): the line reader never holds more than
//! a line's limit plus what was pushed, the codec never panics, and an agent link fed the
//! lines as a peer never panics and writes only whole JSON lines.
#![no_main]

use hermes_mobile::agent_link::{AgentLink, LineItem, LineReader, LinkOutput, PeerId, QueueLimits};
use hermes_mobile::Time;
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let mut link = AgentLink::new("fuzz", 300, Some("agent-token-0123456789".into()), QueueLimits::default());
    let peer = PeerId(1);
    link.handle_peer_open(peer, data.first().is_some_and(|b| b & 1 == 1));
    link.handle_line(Time::ZERO, peer, br#"{"t":"hello","v":1}"#);
    let mut reader = LineReader::new(LIMIT);
    // Cut the input into pushes of varying sizes, as a socket would.
    let mut rest = data;
    let mut t = 0;
    while !rest.is_empty() {
        let n = (usize::from(rest[0]) * 7 + 1).min(rest.len());
        let (push, tail) = rest.split_at(n);
        rest = tail;
        reader.push(push);
        assert!(reader.buffered() <= LIMIT + push.len());
        while let Some(item) = reader.next_line() {
            t += 1;
            match item {
                LineItem::Line(line) => {
                    assert!(line.len() <= LIMIT);
                    let _ = hermes_mobile::agent_link::parse_agent_line(&line);
                    link.handle_line(Time::from_millis(t), peer, &line);
                }
                LineItem::TooBig => link.handle_too_big(peer),
            }
        }
        while let Some(out) = link.poll_output() {
            if let LinkOutput::Write { line, .. } = out {
                assert!(line.ends_with('\n'));
                assert!(serde_json::from_str::<serde_json::Value>(&line).is_ok());
            }
        }
    }
});
