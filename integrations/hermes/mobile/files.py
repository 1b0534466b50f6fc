"""Files both ways: uploads from the phone handed to Hermes, Hermes' files to the phone.

Over the Unix socket a file travels by path (the gateway and Hermes share a host);
over `/agent` it travels inline, base64 in the protocol line, and an upload is kept
under $HERMES_HOME/cache/mobile. No Hermes import at module level.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import mimetypes
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .common import DEFAULT_LIMITS, clip, mib, printable, safe_name

logger = logging.getLogger(__name__)

# A text document up to this size is given to the model inline, as Hermes' Telegram
# adapter does (MAX_TEXT_INJECT_BYTES); a larger one by its path only.
MAX_TEXT_INLINE_BYTES = 100 * 1024
# Hermes' own list when it cannot be imported (gateway.platforms.base, 0.19), abridged.
_TEXT_EXTS = {".txt", ".md", ".markdown", ".csv", ".tsv", ".log", ".json", ".jsonl", ".xml", ".yaml",
              ".yml", ".toml", ".ini", ".cfg", ".conf", ".html", ".css", ".py", ".js", ".ts", ".sh",
              ".c", ".h", ".go", ".rs", ".java", ".sql", ".diff", ".patch", ".srt", ".vtt", ".tex"}
# Files the gateway sent inline are kept this long under $HERMES_HOME/cache/mobile.
INLINE_KEEP_SECS = 7 * 24 * 3600
INLINE_KEEP_FILES = 200
KINDS_IN = {"image", "video", "audio", "voice", "document"}
_IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".heic"}
_VIDEO_EXTS = {".mp4", ".mov", ".webm", ".mkv", ".m4v"}
_VOICE_EXTS = {".ogg", ".opus", ".oga", ".mp3", ".m4a", ".wav"}


def guess_mime(name: str) -> Optional[str]:
    mime, _ = mimetypes.guess_type(name)
    return mime


def kind_for_path(path: str, is_voice: bool = False, force_document: bool = False) -> str:
    ext = Path(path).suffix.lower()
    if force_document:
        return "document"
    if is_voice and ext in _VOICE_EXTS:
        return "voice"
    if ext == ".gif":
        return "animation"
    if ext in _IMAGE_EXTS:
        return "image"
    if ext in _VIDEO_EXTS:
        return "video"
    return "document"


# ---------------------------------------------------------------------------
# In: the phone's uploads
# ---------------------------------------------------------------------------


@dataclass
class Incoming:
    """A gateway `message` as Hermes takes it: `kind` is one of KINDS_IN or "text"."""

    kind: str
    text: str
    media_urls: List[str] = field(default_factory=list)
    media_types: List[str] = field(default_factory=list)


async def incoming(device: str, text: str, file: Optional[Dict[str, Any]]) -> Incoming:
    if not file:
        return Incoming("text", text)
    kind = str(file.get("kind") or "document")
    if kind not in KINDS_IN:
        kind = "document"
    if kind == "voice" and text.strip():
        # The app already recognized the speech: hand the note over as an audio
        # attachment, which Hermes never transcribes again (a VOICE message it
        # always does, slowly or not at all without an STT provider).
        kind = "audio"
    name = safe_name(file.get("name") or "file")
    mime = str(file.get("mime") or guess_mime(name) or "application/octet-stream")
    path = file.get("path")
    why = None
    if not path and file.get("data"):
        path, why = await asyncio.to_thread(save_inline, device, name, str(file["data"]))
    if not path:
        err = file.get("error") or why or "it could not be saved"
        note = f"[The user sent {name}, but the gateway could not pass it on: {err}]"
        return Incoming("text", f"{text}\n\n{note}" if text else note)
    if kind == "document" and not mime.startswith(("image/", "audio/", "video/")):
        return Incoming(kind, await asyncio.to_thread(document_text, str(path), name, mime, text))
    # Media, also when sent as a document: an attachment, which Hermes sorts by its type.
    return Incoming(kind, text, [str(path)], [mime])


def document_text(path: str, name: str, mime: str, text: str) -> str:
    """The message text for a document, as Hermes gives one from its own adapters.

    Its Telegram adapter puts a small text document's content in the message
    ("[Content of notes.txt]: …") and Hermes then adds a note naming the file, taking
    the name from the saved file's name (`doc_<id>_<name>` in its own cache). The
    gateway's saved copy is named `<ms>-<device>-<name>`, which Hermes would show as
    is, so the note is built here, with the file's own name and the saved path, and
    the file is not also passed as an attachment (Hermes would announce it again).
    """
    display = re.sub(r"[^\w.\- ]", "_", name)  # as Hermes shows a document's name
    content = _text_content(path, name, mime)
    if content is not None:
        injection = f"[Content of {display}]:\n{content}"
        text = f"{injection}\n\n{text}" if text else injection
        mime = mime if mime.startswith("text/") else "text/plain"
    elif mime.startswith("text/"):
        # Too large, or not UTF-8: Hermes' note for a text document would say its
        # content follows; its note for other documents tells the model to read it.
        mime = "application/octet-stream"
    note = _document_note(display, _agent_path(path), mime)
    return f"{note}\n\n{text}" if text else note


def _text_exts() -> set:
    try:
        from gateway.platforms.base import _TEXT_INJECT_EXTENSIONS

        return set(_TEXT_INJECT_EXTENSIONS)
    except Exception:
        return _TEXT_EXTS


def _text_content(path: str, name: str, mime: str) -> Optional[str]:
    """A text document's content when it is small enough to inline, else None.

    Like Hermes' adapters, gated on a text-like extension or MIME type, not on whether
    the bytes happen to decode: binary formats can start with decodable headers.
    """
    if Path(name).suffix.lower() not in _text_exts() and not mime.startswith("text/"):
        return None
    try:
        if os.path.getsize(path) > MAX_TEXT_INLINE_BYTES:
            return None
        with open(path, "rb") as f:
            return f.read(MAX_TEXT_INLINE_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _agent_path(path: str) -> str:
    """The path as the model's tools see it (Hermes translates cache paths for Docker)."""
    try:
        from tools.credential_files import to_agent_visible_cache_path

        return str(to_agent_visible_cache_path(path))
    except Exception:
        return path


def _document_note(display: str, path: str, mime: str) -> str:
    try:
        from gateway.run import _build_document_context_note

        return str(_build_document_context_note(display, path, mime))
    except Exception:
        pass  # without Hermes (the unit tests), or another version: its 0.19 wording
    if mime.startswith("text/"):
        return (f"[The user sent a text document: '{display}'. Its content has been included below. "
                f"The file is also saved at: {path}]")
    return (f"[The user sent a document: '{display}'. It is saved at: {path}. Its text is not inlined "
            f"here (it's a binary format such as PDF or DOCX). To read it, extract the document's text "
            f"yourself — for example with the terminal tool or the ocr-and-documents skill — before "
            f"answering, instead of asking the user to paste the contents.]")


def _hermes_home() -> Path:
    try:
        from hermes_constants import get_hermes_home
    except Exception:
        from hermes_cli.config import get_hermes_home
    return Path(get_hermes_home())


def save_inline(device: str, name: str, data: str) -> Tuple[Optional[str], Optional[str]]:
    """Keep a file the gateway sent inline (`inline:true`) where Hermes' tools can read it.

    Returns (path, None) or (None, why): the user is told when a file could not be kept.
    The folder is pruned on the way (older than a week, or beyond 200 files), so a
    long-running Hermes does not fill the disk with uploads.
    """
    try:
        raw = base64.b64decode(data, validate=True)
    except Exception:
        return None, "its data was not valid base64"
    try:
        folder = _hermes_home() / "cache" / "mobile"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _prune_inline(folder)
        who = safe_name(device).encode("utf-8")[:40].decode("utf-8", "ignore")
        path = folder / f"{int(time.time() * 1000)}-{secrets.token_hex(3)}-{who}-{name}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        return str(path), None
    except OSError as exc:
        logger.warning("[mobile] could not keep an inline upload from %s: %s", printable(device), exc)
        return None, f"it could not be saved ({exc.strerror or exc})"


def _prune_inline(folder: Path) -> None:
    try:
        files = sorted((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    cutoff = time.time() - INLINE_KEEP_SECS
    for i, p in enumerate(files):
        try:
            if i < len(files) - INLINE_KEEP_FILES or p.stat().st_mtime < cutoff:
                p.unlink()
        except OSError:
            pass


# ---------------------------------------------------------------------------
# Out: Hermes' files to the phone
# ---------------------------------------------------------------------------


async def send_file_body(device: str, path: str, kind: str, limits: Dict[str, Any], inline: bool,
                         caption: Optional[str] = None, reply_to: Optional[str] = None,
                         name: Optional[str] = None) -> Tuple[str, Any]:
    """What to send for one of Hermes' files: ("body", a `send_file` command),
    ("note", a text naming a file too large for the phone) or ("error", why)."""
    p = Path(str(path)).expanduser()
    name = safe_name(name or p.name)
    try:
        size = p.stat().st_size
        if not p.is_file():
            raise OSError("not a file")
    except OSError as exc:
        return "error", f"file_unreadable: {name}: {exc}"
    limit = int(limits.get("media_bytes") or DEFAULT_LIMITS["media_bytes"])
    if size > limit:
        note = (f"📎 {name} ({mib(size)}) is too large for the phone (the limit is {mib(limit)}), "
                "so it was not sent.")
        return "note", f"{caption}\n\n{note}" if caption else note
    body: Dict[str, Any] = {"t": "send_file", "device": device, "kind": kind, "name": name}
    mime = guess_mime(name)
    if mime:
        body["mime"] = mime
    if caption:
        body["caption"] = clip(caption, int(limits.get("text_chars") or 12000))
    if reply_to:
        body["reply_to"] = str(reply_to)[:128]
    if inline:
        try:
            body["data"] = base64.b64encode(await asyncio.to_thread(p.read_bytes)).decode("ascii")
        except OSError as exc:
            return "error", f"file_unreadable: {name}: {exc}"
    else:
        body["path"] = str(p.resolve())
    return "body", body


def deliver_media(path: str, is_voice: bool, force_document: bool,
                  inline: bool) -> Tuple[Optional[dict], Optional[str]]:
    """A `deliver`'s `media` for `hermes send`/cron, or (None, a note for the text)."""
    p = Path(path).expanduser()
    name = safe_name(p.name)
    try:
        size = p.stat().st_size
    except OSError as exc:
        return None, f"{name} could not be read ({exc})"
    if size > DEFAULT_LIMITS["media_bytes"]:
        return None, f"📎 {name} ({mib(size)}) is too large for the phone, so it was not sent."
    media: Dict[str, Any] = {"kind": kind_for_path(str(p), is_voice, force_document), "name": name}
    mime = guess_mime(name)
    if mime:
        media["mime"] = mime
    if inline:
        media["data"] = base64.b64encode(p.read_bytes()).decode("ascii")
    else:
        media["path"] = str(p.resolve())
    return media, None
