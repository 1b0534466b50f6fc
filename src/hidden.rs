//! Characters a person cannot see (issue 23, findings 4, 7 and 8; decisions L49).
//!
//! An approval card exists so that the person sees exactly what will run. Bidi controls
//! (U+202E RIGHT-TO-LEFT OVERRIDE and friends: the "Trojan Source" class, CVE-2021-42574)
//! reorder what is shown without changing what runs, and other format characters
//! (zero-width spaces, joiners, tags) hide text altogether. The class is the same in the
//! gateway, the page and both SDKs: Unicode general categories Cf, Zl and Zp, and the
//! control characters (Cc) other than TAB and LF, which a command may legitimately hold.
//!
//! Rust's standard library has no general-category lookup, and Cf is a short, stable list,
//! so it is written out here (Unicode 16.0); a test checks it against Python's
//! `unicodedata` when Python is there, and the known members always.

/// Unicode 16.0's `Cf` (format) characters, as inclusive ranges in order.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` is a Unicode format character (general category Cf).
pub fn is_format(c: char) -> bool {
    let c = u32::from(c);
    FORMAT
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// Whether `c` is invisible or reorders what is shown: Cf, Zl (U+2028), Zp (U+2029), or
/// a control character other than TAB and LF.
pub fn is_hidden(c: char) -> bool {
    (c.is_control() && c != '\t' && c != '\n') || matches!(c, '\u{2028}' | '\u{2029}') || is_format(c)
}

/// Whether `s` holds any [`is_hidden`] character.
pub fn has_hidden(s: &str) -> bool {
    s.chars().any(is_hidden)
}

/// `s` with each hidden character written as `⟨U+202E⟩`, for a log line or a notification
/// that a person reads. What is sent to the agent is never this: it is for showing only.
pub fn reveal(s: &str) -> std::borrow::Cow<'_, str> {
    if !has_hidden(s) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_hidden(c) {
            out.push_str(&format!("\u{27E8}U+{:04X}\u{27E9}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Why a device id is refused at `hello` (decisions L50, refining G8), if it is: leading or
/// trailing white space, or any control or format character. `tel-1 ` beside a bound
/// `tel-1`, or `tel-\u{202E}1`, would look like another device in every list and log.
pub fn device_id_problem(id: &str) -> Option<&'static str> {
    if id.trim() != id {
        return Some("device.id has leading or trailing white space");
    }
    if id.chars().any(|c| c.is_control() || is_hidden(c)) {
        return Some("device.id holds a control or invisible character");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trojan_source_controls_are_hidden() {
        // issue 23 #4: U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C.
        let bidi = (0x202A..=0x202E).chain(0x2066..=0x2069).chain([0x200E, 0x200F, 0x061C]);
        for c in bidi.map(|c| char::from_u32(c).unwrap()) {
            assert!(is_hidden(c), "{:04X}", u32::from(c));
        }
        for c in [
            '\u{200B}',
            '\u{200D}',
            '\u{FEFF}',
            '\u{2028}',
            '\u{2029}',
            '\u{E0041}',
            '\r',
            '\u{1B}',
            '\u{85}',
        ] {
            assert!(is_hidden(c), "{:04X}", u32::from(c));
        }
        for c in ['a', ' ', '\t', '\n', 'é', '\u{05D0}', '😀', '\u{FE0F}', '\u{3000}'] {
            assert!(!is_hidden(c), "{:04X}", u32::from(c));
        }
    }

    #[test]
    fn reveal_shows_each_hidden_character_and_keeps_the_rest() {
        let cmd = "rm -rf /home/user/\u{202E} tmp.log \u{202C}";
        assert!(has_hidden(cmd));
        assert_eq!(reveal(cmd), "rm -rf /home/user/⟨U+202E⟩ tmp.log ⟨U+202C⟩");
        assert_eq!(reveal("ls\n-la\t"), "ls\n-la\t");
        assert!(matches!(reveal("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(reveal("\u{E0041}"), "⟨U+E0041⟩");
    }

    #[test]
    fn look_alike_device_ids_are_refused() {
        // decisions L50
        assert_eq!(device_id_problem("tel-1"), None);
        assert_eq!(device_id_problem("Pixel 8 Pro"), None);
        assert_eq!(device_id_problem("телефон-1"), None);
        for bad in [
            "tel-1 ",
            " tel-1",
            "tel-1\0",
            "tel\n1",
            "tel-\u{202E}1",
            "tel\u{200B}1",
            "\u{3000}tel",
        ] {
            assert!(device_id_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn the_format_table_is_sorted_and_matches_python() {
        assert!(FORMAT.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(FORMAT.iter().all(|&(lo, hi)| lo <= hi));
        // Python's unicodedata is the reference when it is there (CI installs Python).
        let script = "import sys,unicodedata as u\n\
            print(u.unidata_version)\n\
            print(','.join('%X' % c for c in range(0x110000) if u.category(chr(c)) == 'Cf'))";
        let Ok(out) = std::process::Command::new("python3").args(["-c", script]).output() else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let (Some(version), Some(list)) = (lines.next(), lines.next()) else {
            return;
        };
        let theirs: Vec<u32> = list
            .split(',')
            .filter_map(|h| u32::from_str_radix(h, 16).ok())
            .collect();
        let ours: Vec<u32> = (0..0x110000u32)
            .filter(|&c| char::from_u32(c).is_some_and(is_format))
            .collect();
        // An older Python's Unicode (14 in Debian 12) lacks a few of 15's: every format
        // character it knows must be in the table.
        for c in &theirs {
            assert!(ours.contains(c), "U+{c:04X} is Cf in Unicode {version}");
        }
        if version.starts_with("15.") || version.starts_with("16.") {
            assert_eq!(ours, theirs, "Unicode {version}");
        }
    }
}
