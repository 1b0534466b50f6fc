"""Reassembly of what the agent sends: the chunks and versions of a message joined into
whole `Message` events (M1, M2), and the parts of a file joined into one `Media` event."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _util as u
from .events import Event, Invalid, Media, MediaProgress, Message

Emit = Callable[[Event], None]

# Finished messages are forgotten once this many are tracked, down to the lower mark.
MAX_TRACKED_MESSAGES = 500
TRACKED_MESSAGES_AFTER_TRIM = 400
# Downloads stalled this long are dropped (like the gateway's U5).
STALLED_DOWNLOAD_SECONDS = 120


@dataclass
class _MessageState:
    gen: int = 0
    text: str = ""
    prev: str = ""
    chunks: dict[int, str] = field(default_factory=dict)
    total: int = 1
    version: int = 0
    final: bool = False
    started: bool = False


class MessageAssembler:
    """M1/M2: joins the chunks of the latest version; a new version starts at chunk 0.
    Emits one `Message` per whole version, never one per chunk."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._messages: dict[str, _MessageState] = {}

    def feed(self, f: dict[str, Any]) -> None:
        mid, text = f.get("id"), f.get("text")
        if not isinstance(mid, str) or not isinstance(text, str):
            self._emit(Invalid("bad message", f))
            return
        c = f.get("chunk") if isinstance(f.get("chunk"), dict) else {}
        assert isinstance(c, dict)
        total = u.as_int(c.get("total"))
        total = total if total is not None and total > 0 else 1
        index = u.as_int(c.get("index"))
        index = index if index is not None and 0 <= index < total else 0
        edit = f.get("edit") is True
        m = self._state_for(mid, edit, index)
        if not m.started or index == 0 or total != m.total:
            m.started = True
            m.prev = m.text
            m.chunks = {}
            m.total = total
            m.version += 1
        m.chunks[index] = text
        if len(m.chunks) < m.total:
            return  # M1: one event per whole version
        m.text = "".join(m.chunks[i] for i in range(m.total))
        fin = f.get("final")
        m.final = fin is True or (fin is None and not edit)
        key = f"{mid}#{m.gen}" if m.gen else mid
        seq = u.as_seq(f.get("seq"))  # all chunks of a version carry the same (L57)
        self._emit(
            Message(id=mid, text=m.text, final=m.final, edit=edit, version=m.version, key=key, seq=seq)
        )

    def _state_for(self, mid: str, edit: bool, index: int) -> _MessageState:
        m = self._messages.get(mid)
        if m is not None and m.final and not edit and index == 0:
            # M2: nothing follows a final version, so this is a new message under a reused
            # id (an agent restarted its counter). It gets a key of its own.
            m = _MessageState(gen=m.gen + 1)
            self._messages[mid] = m
        if m is None:
            m = _MessageState()
            self._messages[mid] = m
            self._trim()
        return m

    def _trim(self) -> None:
        if len(self._messages) <= MAX_TRACKED_MESSAGES:
            return
        for mid in list(self._messages):
            if self._messages[mid].final:
                del self._messages[mid]
            if len(self._messages) <= TRACKED_MESSAGES_AFTER_TRIM:
                break


@dataclass
class _Download:
    meta: dict[str, Any]
    parts: list[bytes | None]
    got: int = 0
    size: int = 0
    touched: float = 0.0


class MediaAssembler:
    """Joins the parts of incoming files (`media` frames sharing an id): a `MediaProgress`
    per part, then one `Media` with the bytes, or saved in `media_dir`. A link (`url`)
    needs no joining."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._downloads: dict[str, _Download] = {}

    def feed(self, f: dict[str, Any], media_dir: Path | None) -> None:
        mid = f.get("id")
        if not isinstance(mid, str) or not mid:
            self._emit(Invalid("media without id", {"t": "media"}))
            return
        meta = media_meta(f, mid)
        data = f.get("data")
        if not isinstance(data, str) and isinstance(f.get("url"), str):
            self._downloads.pop(mid, None)
            self._emit(Media(**meta, url=f["url"]))
            return
        if not isinstance(data, str) and meta["seq"] is not None:
            # A journaled file whose bytes the gateway no longer keeps (L58): its metadata.
            self._downloads.pop(mid, None)
            self._emit(Media(**meta))
            return
        if not isinstance(data, str):
            self._emit(Invalid("media without data or url", {"t": "media", "id": mid}))
            return
        parts = u.as_int(f.get("parts"))
        parts = 1 if parts is None else parts
        part = u.as_int(f.get("part"))
        part = 0 if part is None else part
        if parts < 1 or parts > u.MAX_MEDIA_PARTS or part < 0 or part >= parts:
            self._emit(Invalid("bad part/parts", {"t": "media", "id": mid}))
            return
        now = time.monotonic()
        d = self._downloads.get(mid)
        if d is None or len(d.parts) != parts:
            d = _Download(meta=meta, parts=[None] * parts)
            self._downloads[mid] = d
        d.touched = now
        if d.parts[part] is None and not self._store_part(d, mid, part, data):
            return
        self._emit(_progress(d, mid, part, parts))
        if d.got == parts:
            self._complete(d, mid, media_dir)
        for did in [k for k, x in self._downloads.items() if now - x.touched > STALLED_DOWNLOAD_SECONDS]:
            del self._downloads[did]

    def _store_part(self, d: _Download, mid: str, part: int, data: str) -> bool:
        """Decodes a new part into `d`; False (the download dropped) when it is not base64
        or the file grows over 8 MiB."""
        try:
            chunk = u.b64decode(data)
        except ValueError:
            self._downloads.pop(mid, None)
            self._emit(Invalid("invalid base64", {"t": "media", "id": mid}))
            return False
        d.size += len(chunk)
        if d.size > u.MAX_MEDIA_BYTES:
            self._downloads.pop(mid, None)
            self._emit(Invalid("media over 8 MiB", {"t": "media", "id": mid}))
            return False
        d.parts[part] = chunk
        d.got += 1
        return True

    def _complete(self, d: _Download, mid: str, media_dir: Path | None) -> None:
        self._downloads.pop(mid, None)
        blob = b"".join(p for p in d.parts if p is not None)
        info = dict(d.meta)
        info["size"] = len(blob)
        if media_dir is not None:
            name = info["filename"] or f"{mid}.bin"
            path = u.write_new_file(media_dir, name, blob)
            self._emit(Media(**info, path=path))
        else:
            self._emit(Media(**info, data=blob))


def media_meta(f: dict[str, Any], mid: str) -> dict[str, Any]:
    """The fields of a `Media` event that every part repeats."""
    kind = u.lowercase(f.get("kind"))
    size = u.as_int(f.get("size"))
    return {
        "id": mid,
        "kind": kind if kind in u.DOWNLOAD_KINDS else "document",
        "mime": u.str_field(f, "mime"),
        "filename": u.str_field(f, "filename"),
        "caption": u.str_field(f, "caption"),
        "size": size if size is not None and size >= 0 else 0,
        "reply_to": f["reply_to"] if isinstance(f.get("reply_to"), str) else None,
        "seq": u.as_seq(f.get("seq")),
    }


def _progress(d: _Download, mid: str, part: int, parts: int) -> MediaProgress:
    return MediaProgress(
        id=mid,
        filename=str(d.meta["filename"]),
        received=d.size,
        size=int(d.meta["size"]),
        part=part,
        parts=parts,
        got=d.got,
    )
