//! Base64 as the protocol uses it: the standard alphabet, padding optional. Clients built on
//! Python's `base64.encodebytes` wrap lines, which the original adapter accepted, so white
//! space is skipped on a slow path that never costs the common case anything.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;

const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The exact decoded size of canonical base64 (an upper bound for anything else), computed
/// without decoding, so limits are enforced before memory is spent (U3, G7).
pub fn decoded_len(b64: &str) -> usize {
    let bytes = b64.as_bytes();
    let pad = bytes.iter().rev().take(2).take_while(|&&b| b == b'=').count();
    let len = bytes.len() - pad;
    len / 4 * 3 + (len % 4 * 3) / 4
}

/// The exact decoded size of any base64 this module accepts, line breaks and other white
/// space skipped (L11). A pass over the input: call it only where [`decoded_len`]'s cheap
/// bound would refuse, so a line-wrapped file just under a limit is not refused as over it.
pub fn exact_decoded_len(b64: &str) -> usize {
    let mut significant = 0usize;
    let mut trailing_pad = 0usize;
    for &b in b64.as_bytes() {
        if b.is_ascii_whitespace() {
            continue;
        }
        significant += 1;
        trailing_pad = if b == b'=' { trailing_pad + 1 } else { 0 };
    }
    let len = significant - trailing_pad.min(2).min(significant);
    len / 4 * 3 + (len % 4 * 3) / 4
}

/// [`decoded_len`] made exact when, and only when, the bound is over `limit`: the answer to
/// "is this over the limit?" is then right for line-wrapped input too (L11).
pub fn decoded_len_against(b64: &str, limit: usize) -> usize {
    match decoded_len(b64) {
        bound if bound <= limit => bound,
        _ => exact_decoded_len(b64),
    }
}

/// The input was not base64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidBase64;

/// Appends the decoded bytes of `b64` to `out`. On error `out` is left as it was. The caller
/// reserves capacity (its growth policy is part of its memory budget).
pub fn decode_into(b64: &str, out: &mut Vec<u8>) -> Result<(), InvalidBase64> {
    let start = out.len();
    if ENGINE.decode_vec(b64.as_bytes(), out).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    if !b64.bytes().any(|b| b.is_ascii_whitespace()) {
        return Err(InvalidBase64);
    }
    let compact: Vec<u8> = b64.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if ENGINE.decode_vec(&compact, out).is_ok() {
        Ok(())
    } else {
        out.truncate(start);
        Err(InvalidBase64)
    }
}

/// Why [`decode_bounded`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundedDecodeError {
    /// It decodes to more than the limit (found before any memory was spent).
    TooBig,
    Invalid,
}

/// Decodes `b64` into an exact buffer if it decodes to at most `limit` bytes: the size is
/// checked first (exactly where it decides, L11), so an oversized input costs no memory.
pub fn decode_bounded(b64: &str, limit: usize) -> Result<Vec<u8>, BoundedDecodeError> {
    if decoded_len_against(b64, limit) > limit {
        return Err(BoundedDecodeError::TooBig);
    }
    // What the decoder asks for: a Vec at capacity would double if asked for more.
    let mut out = Vec::with_capacity(b64.len().div_ceil(4) * 3);
    decode_into(b64, &mut out).map_err(|_| BoundedDecodeError::Invalid)?;
    if out.capacity() > out.len() + 3 {
        out.shrink_to_fit(); // white space made the estimate large
    }
    Ok(out)
}

/// Standard padded base64, for frames the gateway builds as strings.
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoded_len_is_exact_for_canonical_input() {
        for n in 0..40usize {
            let data = vec![7u8; n];
            assert_eq!(decoded_len(&encode(&data)), n, "n = {n}");
            let unpadded = encode(&data).trim_end_matches('=').to_owned();
            assert_eq!(decoded_len(&unpadded), n, "unpadded n = {n}");
        }
    }

    #[test]
    fn line_breaks_do_not_count_toward_the_decoded_size() {
        // decisions L11; issue 8 #10
        for n in [0usize, 1, 2, 3, 57, 58, 1000] {
            let data = vec![1u8; n];
            let wrapped: String = encode(&data)
                .as_bytes()
                .chunks(76)
                .map(|l| format!("{}\n", std::str::from_utf8(l).unwrap()))
                .collect();
            assert_eq!(exact_decoded_len(&wrapped), n, "n = {n}");
            assert_eq!(decoded_len_against(&wrapped, n), n, "n = {n}");
            assert!(decoded_len(&wrapped) >= n);
        }
    }

    #[test]
    fn decodes_with_or_without_padding_and_line_breaks() {
        let mut out = Vec::new();
        decode_into("aGVsbG8=", &mut out).unwrap();
        decode_into("aGVsbG8", &mut out).unwrap();
        decode_into("aGVs\nbG8=\n", &mut out).unwrap();
        assert_eq!(out, b"hellohellohello");
        assert!(decode_into("not base64!", &mut out).is_err());
        assert_eq!(out.len(), 15, "a failed decode leaves the buffer as it was");
    }
}
