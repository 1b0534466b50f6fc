"""Frame hooks: every frame a client sends or receives, handed to callbacks for tests and
debugging, and the `HERMES_MOBILE_CLIENT_FRAME_LOG` JSON-lines log built on them."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("hermes_mobile_client")

FRAME_LOG_ENV = "HERMES_MOBILE_CLIENT_FRAME_LOG"

FrameHook = Callable[[str, Mapping[str, Any]], None]
"""Called with ("out", frame) for each frame sent and ("in", frame) for each JSON object
received, before it is handled. For tests and debugging; it must not change the frame.
Outgoing `hello` frames carry the token."""

_global_hooks: list[FrameHook] = []


def add_frame_hook(hook: FrameHook) -> None:
    """Calls `hook` for every frame any client of this process sends or receives."""
    _global_hooks.append(hook)


def remove_frame_hook(hook: FrameHook) -> None:
    if hook in _global_hooks:
        _global_hooks.remove(hook)


def call_hooks(client_hooks: Iterable[FrameHook], direction: str, frame: Mapping[str, Any]) -> None:
    """Runs a client's own hooks, then the process-wide ones. A failing hook is logged and
    never breaks the connection: hooks are observers."""
    for h in (*client_hooks, *_global_hooks):
        try:
            h(direction, frame)
        except Exception:
            log.exception("frame hook failed")


class FrameLog:
    """`HERMES_MOBILE_CLIENT_FRAME_LOG=path`: every frame as a JSON line {"dir", "frame"},
    in a file only its owner can read (0600: it holds message contents). The token in
    `hello` is written as `***`. A debugging aid only."""

    # One lock for all clients of the process: their lines must not interleave.
    _lock = threading.Lock()

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, direction: str, frame: Mapping[str, Any]) -> None:
        if "token" in frame:
            frame = {**frame, "token": "***"}
        line = json.dumps({"dir": direction, "frame": frame}, ensure_ascii=False) + "\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(line)
