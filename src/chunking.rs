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
    let mut last_newline = None;
    let mut last_space = None;
    for (count, (at, c)) in rest.char_indices().enumerate() {
        if count == limit {
            return last_newline.or(last_space).unwrap_or(at);
        }
        let after = at + c.len_utf8();
        if c == '\n' {
            last_newline = Some(after);
        } else if c.is_whitespace() {
            last_space = Some(after);
        }
    }
    rest.len()
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
