//! Character-level helpers. Every limit counts Unicode scalar values, never bytes (decisions G1).

use std::borrow::Cow;

/// The prefix of `s` holding at most `max` characters, cut on a character boundary
/// (decisions G8: truncation is silent).
pub fn truncate_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((byte, _)) => &s[..byte],
        None => s,
    }
}

/// A file name of at most `max` characters (decisions G8), its extension kept when it is
/// short (at most 16 characters, dot included): `report.pdf` stays a PDF however long it was.
pub fn cut_filename(name: &str, max: usize) -> Cow<'_, str> {
    if !exceeds_chars(name, max) {
        return Cow::Borrowed(name);
    }
    let ext = match name.rfind('.') {
        Some(dot) if dot > 0 && name[dot..].chars().count() <= 16.min(max) => &name[dot..],
        _ => "",
    };
    let stem = truncate_chars(name, max - ext.chars().count());
    Cow::Owned(format!("{stem}{ext}"))
}

/// Whether `s` has more than `max` characters, without counting past `max + 1`.
pub fn exceeds_chars(s: &str, max: usize) -> bool {
    // A string of at most `max` bytes has at most `max` characters: the common case is free.
    s.len() > max && s.chars().nth(max).is_some()
}

/// Lower-cases a protocol keyword (decisions G2). ASCII input, the common case, is borrowed
/// unless it has upper-case letters.
pub fn lower(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(s.to_ascii_lowercase())
        } else {
            Cow::Borrowed(s)
        }
    } else {
        Cow::Owned(s.to_lowercase())
    }
}

/// True for a string with no characters other than white space: the spec's "empty message".
pub fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_counts_characters_not_bytes() {
        // decisions G1, G8
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("ab", 5), "ab");
        assert_eq!(truncate_chars("日本語", 0), "");
    }

    #[test]
    fn exceeds_counts_characters() {
        assert!(!exceeds_chars("日本語", 3));
        assert!(exceeds_chars("日本語", 2));
        assert!(!exceeds_chars("", 0));
    }

    #[test]
    fn lower_is_unicode_aware() {
        // decisions G2: the Kelvin sign lower-cases to 'k', as Python's str.lower does.
        assert_eq!(lower("AC\u{212A}"), "ack");
        assert!(matches!(lower("text"), Cow::Borrowed(_)));
        assert_eq!(lower("TeXt"), "text");
    }
}
