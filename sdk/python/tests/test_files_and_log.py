"""Pure checks, no gateway: where received files are saved, and the frame log."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from hermes_mobile_client import _util as u
from hermes_mobile_client.frame_hooks import FrameLog


def test_a_peers_file_name_stays_in_the_folder_and_fits_the_file_system(tmp_path: Path) -> None:
    for name in ("../../etc/passwd", "..", "/abs/path", "a\\b", "\x1b[31mred", ".hidden", ""):
        saved = u.write_new_file(tmp_path, name, b"x")
        assert saved.parent == tmp_path, (name, saved)
    # 134 Cyrillic characters are 264 bytes: over the file system's 255 unless cut.
    long_name = "ж" * 134 + ".txt"
    saved = u.write_new_file(tmp_path, long_name, b"y")
    assert saved.read_bytes() == b"y"
    assert saved.name.endswith(".txt")
    assert len(saved.name.encode()) <= 240
    again = u.write_new_file(tmp_path, long_name, b"z")  # never overwritten: -1 fits too
    assert again != saved
    assert again.read_bytes() == b"z"


def test_the_frame_log_is_private_and_never_holds_the_token(tmp_path: Path) -> None:
    path = tmp_path / "frames.jsonl"
    log = FrameLog(str(path))
    log("out", {"t": "hello", "token": "secret-token-0123456789", "device": {"id": "d"}})
    log("in", {"t": "pong"})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert "secret-token" not in text
    first = json.loads(text.splitlines()[0])
    assert first["frame"]["token"] == "***"


def test_a_progress_line_strips_a_peers_terminal_escapes() -> None:
    import io

    from hermes_mobile_client.chat import Chat

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    chat = Chat(None, out, Path("."))  # type: ignore[arg-type]
    chat.progress("  receiving \x1b]0;owned\x07evil\x1b[2J.png: 1/2 parts")
    shown = out.getvalue()
    assert shown.startswith("\r\x1b[K")  # the chat's own line reset, and no other escape
    assert "\x1b" not in shown[len("\r\x1b[K") :]
    assert "\x07" not in shown
    assert "evil" in shown


def test_a_deliver_file_name_is_cut_to_200_characters_keeping_its_extension() -> None:
    from hermes_mobile_client.request_frames import _delivery_media

    media = _delivery_media(b"report body", "r" * 300 + ".pdf", None, None)
    assert len(media["filename"]) == 200
    assert media["filename"].endswith(".pdf")
    assert media["mime"] == "application/pdf"
