"""Limits, ids, base64 and file-name helpers shared by the client, the chat and `send`.

Rule ids (G1, U1, U6, …) are those of the protocol's decisions.md, as in web/protocol.js.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import time
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 16 * 1024 * 1024  # one WebSocket message, either direction
MAX_TEXT_CHARS = 12000  # G1: Unicode scalar values (code points), never bytes
MAX_MEDIA_BYTES = 8 * 1024 * 1024  # one file, both directions
MAX_AUDIO_BYTES = 8 * 1024 * 1024
MEDIA_CHUNK_BYTES = 3 * 1024 * 1024  # U1: the protocol's largest chunk (raw bytes)
# What this client sends per chunk (U1: the gateway takes chunks of any size): small parts
# let the keep-alive ping through on a slow link and make the progress move. As protocol.js.
UPLOAD_PART_BYTES = 512 * 1024
MAX_MEDIA_PARTS = 2048
MAX_ID_CHARS = 128  # G8

PROMPT_OPTIONS: dict[str, tuple[str, ...] | None] = {
    "exec_approval": ("once", "session", "always", "deny"),
    "slash_confirm": ("once", "always", "cancel"),
    "clarify": None,  # c0, c1, … and other (P3)
}
AVATAR_STATES = ("idle", "thinking", "speaking")
UPLOAD_KINDS = ("image", "video", "document", "audio")
DOWNLOAD_KINDS = ("image", "voice", "video", "document", "animation")
AUDIO_FORMATS = ("wav", "ogg")

_CLARIFY_OPTION = re.compile(r"^c\d+$")


def char_count(s: str) -> int:
    """Characters as the gateway counts them (G1): code points. Python's len() does that."""
    return len(s)


def new_device_id(prefix: str = "py") -> str:
    """A new device id, `py-` + 16 hex digits. Make it once and keep it (H4)."""
    return f"{prefix}-{secrets.token_hex(8)}"


def new_id(prefix: str = "p") -> str:
    """A new frame id: time-ordered and random, well under the 128 characters of G8."""
    ms = int(time.time() * 1000)
    return f"{prefix}-{_base36(ms)}-{secrets.token_hex(6)}"


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def is_blank(s: str | None) -> bool:
    return s is None or s.strip() == ""


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Standard base64, padding optional, line breaks skipped (L11). Raises ValueError."""
    cleaned = "".join(text.split())
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except binascii.Error as e:
        raise ValueError(f"invalid base64: {e}") from None


def b64url_encode(data: bytes) -> str:
    """Base64url without padding (RFC 4648 §5), as Web Push keys travel."""
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def b64url_decode(text: str) -> bytes:
    """Base64url or base64, with or without padding. Raises ValueError."""
    s = text.strip().replace("-", "+").replace("_", "/").rstrip("=")
    return b64decode(s)


# The gateway's table (src/mime.rs), so a file gets the same type whichever side guesses.
_MIME_BY_EXT = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "heic": "image/heic",
    "heif": "image/heif",
    "bmp": "image/bmp",
    "svg": "image/svg+xml",
    "mp4": "video/mp4",
    "m4v": "video/mp4",
    "mov": "video/quicktime",
    "webm": "video/webm",
    "mkv": "video/x-matroska",
    "3gp": "video/3gpp",
    "ogg": "audio/ogg",
    "oga": "audio/ogg",
    "opus": "audio/ogg",
    "mp3": "audio/mpeg",
    "m4a": "audio/mp4",
    "aac": "audio/aac",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "amr": "audio/amr",
    "pdf": "application/pdf",
    "txt": "text/plain",
    "log": "text/plain",
    "md": "text/markdown",
    "csv": "text/csv",
    "html": "text/html",
    "htm": "text/html",
    "json": "application/json",
    "xml": "application/xml",
    "zip": "application/zip",
    "gz": "application/gzip",
    "tar": "application/x-tar",
    "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "ppt": "application/vnd.ms-powerpoint",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "odt": "application/vnd.oasis.opendocument.text",
    "epub": "application/epub+zip",
}


def guess_mime(filename: str) -> str:
    """The MIME type for a file name's extension; `application/octet-stream` when unknown."""
    stem, dot, ext = filename.rpartition(".")
    if not dot or (not stem and not ext):
        return "application/octet-stream"
    return _MIME_BY_EXT.get(ext.lower(), "application/octet-stream")


def upload_kind(mime: str) -> str:
    """`kind` of an upload from its MIME type: image, video, audio, else document."""
    m = mime.lower()
    for k in ("image", "video", "audio"):
        if m.startswith(k + "/"):
            return k
    return "document"


def delivery_kind(mime: str) -> str:
    """`kind` of a delivered file (`deliver.media`), as `hermes-mobile send` picks it."""
    m = mime.lower()
    if m == "image/gif":
        return "animation"
    if m.startswith("image/"):
        return "image"
    if m.startswith("video/"):
        return "video"
    if m.startswith("audio/"):
        return "voice"
    return "document"


def sanitize_filename(name: str) -> str:
    """A name safe to join to a folder (U6, L18): no separators, no `..`, no control
    characters, no leading dot; never empty."""
    out = "".join("_" if (unicodedata.category(c) == "Cc" or c in "/\\:") else c for c in name)
    while ".." in out:
        out = out.replace("..", ".")
    start, end = 0, len(out)
    while start < end and (out[start] == "." or out[start].isspace()):
        start += 1
    while end > start and (out[end - 1] == "." or out[end - 1].isspace()):
        end -= 1
    return _fit_bytes(out[start:end] or "file")


# File systems take 255 bytes per name; room is left for the `-N` of unique_path (L26).
_MAX_NAME_BYTES = 240


def _fit_bytes(name: str) -> str:
    """At most _MAX_NAME_BYTES of UTF-8, cut at a character boundary, the extension kept."""
    if len(name.encode("utf-8")) <= _MAX_NAME_BYTES:
        return name
    dot = name.rfind(".")
    ext = name[dot:] if dot > 0 and len(name[dot:].encode("utf-8")) <= 16 else ""
    stem = name[: len(name) - len(ext)]
    room = _MAX_NAME_BYTES - len(ext.encode("utf-8"))
    while len(stem.encode("utf-8")) > room:
        stem = stem[:-1]
    return (stem or "file") + ext


def unique_path(folder: Path, filename: str) -> Path:
    """A path in `folder` for `filename` (sanitized) that does not exist yet: `name-1.ext`…"""
    name = sanitize_filename(filename)
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    candidate = folder / name
    n = 0
    while candidate.exists():
        n += 1
        candidate = folder / (f"{stem}-{n}.{ext}" if ext else f"{stem}-{n}")
    return candidate


def write_new_file(folder: Path, filename: str, data: bytes) -> Path:
    """Writes `data` to a new file in `folder` (created if need be), never overwriting."""
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        path = unique_path(folder, filename)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path


def fnv1a64(text: str) -> int:
    """FNV-1a over the UTF-8 bytes, as `hermes-mobile send` derives its device id."""
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def sender_device(delivery_id: str) -> str:
    """The device id a delivery says hello as: one per delivery id (H5, S4, L34)."""
    return f"hermes-send-{fnv1a64(delivery_id):016x}"


def is_clarify_option(option_id: str) -> bool:
    return option_id == "other" or bool(_CLARIFY_OPTION.match(option_id))


# Readers for fields of received frames, which may hold anything: a wrong type reads as empty.


def lowercase(v: Any) -> str:
    return v.lower() if isinstance(v, str) else ""  # G2: enum values are case-insensitive


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None  # JSON true is no number


def as_seq(v: Any) -> int | None:
    """A journal seq (issue 24): an integer from 1; anything else reads as none."""
    n = as_int(v)
    return n if n is not None and n >= 1 else None


def str_field(frame: Mapping[str, Any], key: str) -> str:
    v = frame.get(key)
    return v if isinstance(v, str) else ""


def cut_filename(name: str) -> str:
    """At most 200 characters (G8), the extension kept, so the frame stays inside the
    protocol's schema (the gateway would otherwise cut it to 200 itself, extension and all)."""
    if len(name) <= 200:
        return name
    dot = name.rfind(".")
    ext = name[dot:] if dot > 0 and len(name) - dot <= 16 else ""
    return name[: 200 - len(ext)] + ext
