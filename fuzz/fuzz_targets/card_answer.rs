//! `POST /card-answer` (issue 25): any request head and body the route may read. No panic,
//! a body taken is within its bounds, and no token a peer makes up is ever valid.
#![no_main]

use hermes_mobile_server::card_answer;
use hermes_mobile_server::push::card_token::{Answer, CardTokens, Verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = card_answer::parse(data) {
        assert!(!body.prompt_id.is_empty() && body.prompt_id.chars().count() <= 128);
        assert!(!body.option_id.is_empty() && body.option_id.chars().count() <= 32);
        let tokens = CardTokens::new(&[7; 32]);
        let digest = [1; 32];
        let answer = Answer {
            device: "tel-1",
            card: &body.prompt_id,
            option: &body.option_id,
            digest: &digest,
        };
        assert_ne!(tokens.check(&body.token, answer, 1_800_000_000, 1_700_000_000), Verdict::Valid);
    }
    // The same bytes as the rest of the route's request head.
    let mut request = b"POST /card-answer HTTP/1.1\r\nHost: x\r\n".to_vec();
    request.extend_from_slice(data);
    let _ = hermes_mobile_server::http::parse(&request);
});
