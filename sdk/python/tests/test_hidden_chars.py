"""Hidden characters (issue 23, Trojan Source): what a person approves is what runs. Pure
checks, no gateway: the class, the markers, cards, and how the terminal chat shows a card."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from hermes_mobile_client import Card, Client, has_hidden_chars, reveal_hidden_chars, validate_card
from hermes_mobile_client.chat import Chat

HIDDEN = {
    "\u202e": "RIGHT-TO-LEFT OVERRIDE",
    "\u202a": "LEFT-TO-RIGHT EMBEDDING",
    "\u2066": "LEFT-TO-RIGHT ISOLATE",
    "\u2069": "POP DIRECTIONAL ISOLATE",
    "\u200e": "LEFT-TO-RIGHT MARK",
    "\u061c": "ARABIC LETTER MARK",
    "\u200b": "ZERO WIDTH SPACE",
    "\u200d": "ZERO WIDTH JOINER (flagged on purpose)",
    "\ufeff": "BYTE ORDER MARK",
    "\u00ad": "SOFT HYPHEN",
    "\u2028": "LINE SEPARATOR (Zl)",
    "\u2029": "PARAGRAPH SEPARATOR (Zp)",
    "\x00": "NUL",
    "\r": "CARRIAGE RETURN",
    "\x1b": "ESCAPE",
    "\x0b": "VERTICAL TAB",
    "\x7f": "DELETE",
    "\x85": "NEXT LINE (C1)",
    "\U000e0001": "LANGUAGE TAG (astral Cf)",
}

TROJAN = "rm -rf /home/user/\u202e tmp.log \u202c"


@pytest.mark.parametrize("c", list(HIDDEN), ids=list(HIDDEN.values()))
def test_every_character_of_the_class_is_hidden(c: str) -> None:
    assert has_hidden_chars(f"ls {c}x")


ORDINARY = ["rm -rf /tmp/x", "tab\there", "two\nlines", "שלום עולם", "naïve café", "👍🏽", ""]


@pytest.mark.parametrize("text", ORDINARY)
def test_tab_newline_and_ordinary_text_are_not(text: str) -> None:
    assert not has_hidden_chars(text)


def test_reveal_shows_each_one_as_a_code_point_marker() -> None:
    assert reveal_hidden_chars(TROJAN) == "rm -rf /home/user/⟨U+202E⟩ tmp.log ⟨U+202C⟩"
    assert reveal_hidden_chars("\x00\t\n\r") == "⟨U+0000⟩\t\n⟨U+000D⟩"  # four digits at least
    assert reveal_hidden_chars("a\U000e0001b") == "a⟨U+E0001⟩b"
    assert reveal_hidden_chars("plain text") == "plain text"
    once = reveal_hidden_chars("x\u2066y\u2069")
    assert not has_hidden_chars(once)
    assert reveal_hidden_chars(once) == once


def prompt(**extra: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "t": "prompt",
        "id": "p-1",
        "kind": "exec_approval",
        "text": "Run this command?",
        "command": "ls",
        "description": "",
        "session": "mobile:x",
        "timeout_seconds": 60,
        "options": [
            {"id": "once", "label": "Once", "style": "primary"},
            {"id": "deny", "label": "Deny", "style": "danger"},
        ],
    }
    frame.update(extra)
    return frame


def test_a_card_says_whether_it_holds_hidden_characters_and_keeps_them() -> None:
    def card(**extra: Any) -> Card:
        c = validate_card(prompt(**extra))
        assert c is not None
        return c

    assert not card().hidden_chars
    assert card(hidden_chars=True).hidden_chars  # the gateway's flag
    assert not card(hidden_chars="yes").hidden_chars  # only a real true
    trojan = card(command=TROJAN)  # an older gateway sends no flag
    assert trojan.hidden_chars
    assert trojan.command == TROJAN, "the card keeps the exact command; revealing is for display"
    clarify = card(kind="clarify", options=[{"id": "c0", "label": "yes\u200b", "style": ""}])
    assert clarify.hidden_chars
    assert clarify.options[0].id == "c0"


def test_the_chat_shows_the_characters_and_answers_with_the_same_option(tmp_path: Path) -> None:
    client = Client("ws://127.0.0.1:9/ws", token="chat-test-token-0123456789", device_id="py-hidden")
    card = validate_card(prompt(command=TROJAN, description="tidy \u200bup"))
    assert card is not None
    client.cards[card.id] = card
    out = io.StringIO()
    chat = Chat(client, out, tmp_path)
    chat.show_card(card)
    shown = out.getvalue()
    assert "$ rm -rf /home/user/⟨U+202E⟩ tmp.log ⟨U+202C⟩\n" in shown
    assert "tidy ⟨U+200B⟩up" in shown
    assert "hidden characters" in shown
    assert not has_hidden_chars(shown.replace("\n", ""))

    chat.on_input("2")  # Deny
    # Offline, the answer waits in the outbox as the frame that will be sent.
    answers = [e.frame for e in client._outbox if e.type == "prompt"]
    assert len(answers) == 1
    assert answers[0] is not None
    assert (answers[0]["prompt_id"], answers[0]["option_id"]) == ("p-1", "deny")

    out.truncate(0)
    out.seek(0)
    chat.show_card(validate_card(prompt(id="p-2")) or card)
    assert "hidden characters" not in out.getvalue()  # no warning on a plain card
