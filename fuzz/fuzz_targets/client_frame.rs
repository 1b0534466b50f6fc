//! Client frame parsing on arbitrary bytes: never panics; an accepted frame respects the
//! truncation and range rules (decisions G8, U3).
#![no_main]

use hermes_mobile::wire::{parse_client_frame, ClientFrame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_client_frame(data) {
        Ok(ClientFrame::Text(t)) => {
            assert!(t.id.chars().count() <= 128);
            assert!(t.text.chars().count() <= 12_000);
        }
        Ok(ClientFrame::Media(m)) => {
            assert!(m.parts >= 1 && m.parts <= 2048 && m.part < m.parts);
            assert!(m.filename.chars().count() <= 200);
        }
        Ok(ClientFrame::Hello(h)) => assert!(h.device_id.chars().count() <= 120),
        Ok(_) => {}
        Err(r) => assert!(r.id.as_ref().is_none_or(|id| id.chars().count() <= 128)),
    }
});
