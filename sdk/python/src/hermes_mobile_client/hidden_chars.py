"""Hidden characters (issue 23): text that displays as something other than what it is.

The class is Unicode's format characters (Cf: the bidi controls such as U+202E, zero-width
spaces and joiners, the byte order mark), line and paragraph separators (Zl, Zp), and
controls (Cc) other than TAB and LF. A card whose command holds one can show one command
and run another (Trojan Source, CVE-2021-42574), so a client shows each of them as a
visible marker, ``⟨U+202E⟩``. The gateway (Rust) and web/protocol.js use the same class.
Revealing is for display only: what a client sends back (a card's option id) never changes.
"""

from __future__ import annotations

import unicodedata

_HIDDEN_CATEGORIES = frozenset(("Cf", "Zl", "Zp"))


def is_hidden_char(c: str) -> bool:
    """True for one character of the class (ZWJ too, on purpose: it hides as well)."""
    category = unicodedata.category(c)
    return category in _HIDDEN_CATEGORIES or (category == "Cc" and c not in "\t\n")


def has_hidden_chars(text: str) -> bool:
    """True when `text` holds a hidden character."""
    return any(is_hidden_char(c) for c in text)


def reveal_hidden_chars(text: str) -> str:
    """`text` with each hidden character replaced by ``⟨U+XXXX⟩`` (upper-case hex, at least
    four digits): ``"rm x\\u202e"`` becomes ``"rm x⟨U+202E⟩"``."""
    return "".join(f"⟨U+{ord(c):04X}⟩" if is_hidden_char(c) else c for c in text)
