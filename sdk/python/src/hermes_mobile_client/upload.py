"""Uploads in parts (U1): the `media` frames that carry a file, and the progress reported
while they go."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from . import _util as u
from .events import UploadProgress

ProgressCallback = Callable[[UploadProgress], None]


def part_size(size: int) -> int:
    """UPLOAD_PART_BYTES of raw bytes per part, larger only when the file would otherwise
    need more than MAX_MEDIA_PARTS parts."""
    return max(u.UPLOAD_PART_BYTES, -(-size // u.MAX_MEDIA_PARTS))


def media_part_frames(
    *, id: str, kind: str, mime: str, filename: str, caption: str, data: bytes
) -> Iterator[tuple[dict[str, Any], int]]:
    """The `media` frames of a file, the same id on every part (U1), each with the number
    of bytes sent once it has gone."""
    size = len(data)
    step = part_size(size)
    parts = max(1, -(-size // step))
    for part in range(parts):
        raw = data[part * step : (part + 1) * step]
        frame: dict[str, Any] = {
            "t": "media",
            "id": id,
            "kind": kind,
            "mime": mime,
            "filename": filename,
            "data": u.b64encode(raw),
            "part": part,
            "parts": parts,
        }
        if caption:
            frame["caption"] = caption
        yield frame, min(size, (part + 1) * step)


def upload_progress(id: str, loaded: int, total: int, confirmed: bool) -> UploadProgress:
    # 100 % only once the gateway has confirmed the file (a pong after its last chunk).
    percent = (loaded * 100 // total) if total else 100
    p = 100 if confirmed else min(99, percent)
    return UploadProgress(id=id, loaded=total if confirmed else loaded, total=total, percent=p)
