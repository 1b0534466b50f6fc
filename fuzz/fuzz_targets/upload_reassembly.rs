//! Upload reassembly on arbitrary chunk sequences (decisions U2–U5): never panics; limits
//! hold after every chunk; a completed file is exactly its accepted parts in order; and
//! accounting returns to zero when everything stalls out.
#![no_main]

use std::collections::HashMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use hermes_mobile::base64::encode;
use hermes_mobile::uploads::{ChunkOutcome, Uploads};
use hermes_mobile::wire::client::MediaChunk;
use hermes_mobile::wire::UploadKind;
use hermes_mobile::Time;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Chunk {
    id: u8,
    part: u16,
    parts: u16,
    len: u16,
    /// 200 to 207 multiply `len` into the megabytes, for the few large chunks that hit the
    /// byte limits; the rest (0xff, a mutator's favourite, included) stay small, so that a
    /// run costs microseconds, not the milliseconds of building and encoding megabytes.
    scale: u8,
    fill: u8,
    corrupt: bool,
    advance_ms: u16,
}

/// `encode(&vec![fill; len])` without running the (coverage-instrumented) encoder over
/// megabytes: the base64 of a repeated byte is its 3-byte group's four characters repeated.
fn encode_fill(fill: u8, len: usize) -> String {
    let mut b64 = encode(&[fill; 3]).repeat(len / 3);
    b64.push_str(&encode(&vec![fill; len % 3]));
    b64
}

fuzz_target!(|chunks: Vec<Chunk>| {
    let mut uploads = Uploads::default();
    let mut model: HashMap<String, (u32, HashMap<u32, Vec<u8>>)> = HashMap::new();
    let mut now = Time::ZERO;
    for c in chunks.iter().take(300) {
        now = now + Duration::from_millis(u64::from(c.advance_ms));
        let parts = u32::from(c.parts % 2049).max(1);
        let part = u32::from(c.part) % parts;
        let len = match c.scale {
            200..=207 => usize::from(c.len) * 16 * usize::from(c.scale - 199),
            _ => usize::from(c.len) % 512,
        };
        let data = vec![c.fill; len];
        let id = format!("f{}", c.id % 12);
        let mut b64 = encode_fill(c.fill, len);
        if c.corrupt {
            b64.push('!');
        }
        let chunk = MediaChunk {
            id: id.as_str().into(),
            kind: UploadKind::Document,
            mime: "".into(),
            filename: "x.bin".into(),
            caption: None,
            data: b64.as_str().into(),
            part,
            parts,
        };
        match uploads.accept(now, &chunk) {
            Ok(ChunkOutcome::Stored) => {
                let entry = model.entry(id).or_insert_with(|| (parts, HashMap::new()));
                entry.1.entry(part).or_insert(data);
            }
            Ok(ChunkOutcome::Repeated) => {}
            Ok(ChunkOutcome::Completed(file)) => {
                let mut entry = model.remove(&id).unwrap_or_else(|| (parts, HashMap::new()));
                entry.1.entry(part).or_insert(data);
                let expected: Vec<u8> = (0..entry.0)
                    .flat_map(|p| entry.1.remove(&p).expect("every part"))
                    .collect();
                assert_eq!(file.data, expected);
            }
            Err(_) => {
                model.remove(&id);
            }
        }
        assert!(uploads.buffered() <= 8 * 1024 * 1024);
        // decisions L31: bytes plus reserved room stay within the same 8 MiB, plus the
        // bookkeeping of at most 8 x 2048 parts.
        assert!(
            uploads.held() <= 8 * 1024 * 1024 + 8 * 2048 * 67,
            "held {}",
            uploads.held()
        );
        assert!(uploads.open_count() <= 8);
        let modelled: usize = model.values().flat_map(|(_, p)| p.values()).map(Vec::len).sum();
        assert_eq!(uploads.buffered(), modelled, "accounting matches what is held");
    }
    uploads.expire(now + Duration::from_secs(120), Duration::from_secs(120));
    assert_eq!(uploads.buffered(), 0);
    assert_eq!(uploads.held(), 0);
    assert_eq!(uploads.open_count(), 0);
});
