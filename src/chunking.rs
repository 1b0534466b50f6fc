//! Splitting a reply into `message` frames (decisions M1).
//!
//! Each piece holds at most `limit` characters. A piece ends just after the last newline
//! within the limit, else just after the last white space, else at the limit itself; so the
//! pieces joined are the text, unchanged, and no character is ever cut in two. One pass over
//! the text: each piece is scanned once.

/// The pieces of `text`, each at most `limit` characters (at least one piece, even for "").
pub fn split_reply(text: &str, limit: usize) -> Vec<&str> {
    let limit = limit.max(1);
    let mut pieces = Vec::with_capacity(text.len() / limit.max(1) + 1);
    let mut rest = text;
    loop {
        let cut = cut_point(rest, limit);
        let (piece, tail) = rest.split_at(cut);
        pieces.push(piece);
        if tail.is_empty() {
            return pieces;
        }
        rest = tail;
    }
}

/// Byte offset where the first piece of `rest` ends.
fn cut_point(rest: &str, limit: usize) -> usize {
    // Fewer bytes than the limit means fewer characters too: the whole rest fits.
    if rest.len() <= limit {
        return rest.len();
    }
    let end = limit_offset(rest, limit);
    if end == rest.len() {
        return end;
    }
    let window = &rest[..end];
    // memrchr for the newline; a backwards char scan for other white space only when needed.
    if let Some(nl) = window.rfind('\n') {
        return nl + 1;
    }
    match window.char_indices().rev().find(|(_, c)| c.is_whitespace()) {
        Some((at, c)) => at + c.len_utf8(),
        None => end,
    }
}

/// Byte offset just past the first `limit` characters of `s` (or `s.len()`).
fn limit_offset(s: &str, limit: usize) -> usize {
    let bytes = s.as_bytes();
    // ASCII text, the common case: characters are bytes, and `is_ascii` is vectorized.
    if bytes.len() >= limit && bytes[..limit].is_ascii() {
        return limit;
    }
    // Count character starts (bytes that are not UTF-8 continuation bytes).
    let mut chars = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if (b & 0xC0) != 0x80 {
            if chars == limit {
                return i;
            }
            chars += 1;
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_newline_then_space_then_character() {
        // decisions M1
        assert_eq!(split_reply("ab\ncd ef", 6), vec!["ab\n", "cd ef"]);
        assert_eq!(split_reply("ab cd ef", 6), vec!["ab cd ", "ef"]);
        assert_eq!(split_reply("abcdefgh", 3), vec!["abc", "def", "gh"]);
        assert_eq!(split_reply("", 3), vec![""]);
        assert_eq!(split_reply("日本語日本語", 4), vec!["日本語日", "本語"]);
    }
}
