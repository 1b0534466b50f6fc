"""Checks on what callers hand to the client: message ids and files (a path, bytes or a
binary file object), shared by the outbox and service deliveries."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from . import _util as u
from .events import HermesError

FileInput = str | os.PathLike[str] | bytes | IO[bytes]


def check_id(mid: str) -> None:
    # G8: the gateway cuts ids at 128 characters; a longer one could never be matched.
    if not isinstance(mid, str) or not 1 <= len(mid) <= u.MAX_ID_CHARS:
        raise HermesError("bad_frame", f"an id must be 1 to {u.MAX_ID_CHARS} characters")


def read_file(file: FileInput, limit: int) -> tuple[bytes, str]:
    """The bytes and the file name of a path, bytes or binary file object; too_big over
    `limit` before reading more than it."""
    if isinstance(file, (bytes, bytearray, memoryview)):
        data = bytes(file)
        name = ""
    elif isinstance(file, (str, os.PathLike)):
        path = Path(file)
        try:
            if path.stat().st_size > limit:
                raise HermesError("too_big", f"{path.name} is over {limit} bytes")
            data = path.read_bytes()
        except OSError as e:
            raise HermesError("read_failed", f"cannot read {path}: {e.strerror or e}") from None
        name = path.name
    else:
        data = file.read(limit + 1)
        raw_name = getattr(file, "name", "")
        name = Path(raw_name).name if isinstance(raw_name, str) else ""
    if len(data) > limit:
        raise HermesError("too_big", f"the file is over {limit} bytes")
    return data, name
