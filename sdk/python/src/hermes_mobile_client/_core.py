"""The state every part of the client shares: the options, the connection state, the event
queue and its signals, and the primitives to send a frame. `Client` is built on it from
one mixin per concern (connection, outbox, sending, requests)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websockets.asyncio.client import ClientConnection

from . import _util as u
from ._version import __version__
from .events import Card, Event, HermesError, Ready, Status
from .frame_hooks import FRAME_LOG_ENV, FrameHook, FrameLog, call_hooks
from .reassembly import MediaAssembler, MessageAssembler
from .seq_file import SeqFile

if TYPE_CHECKING:  # these modules build on this one
    from .outbox import OutboxEntry
    from .request_frames import PendingRequest

log = logging.getLogger("hermes_mobile_client")

# How many dropped events are worth a warning: the first, then rarely, not every one.
_DROPPED_EVENTS_WARNINGS = (1, 100, 10000)


class ClientCore:
    """The shared state and primitives of `Client`. See the README for the options."""

    def __init__(
        self,
        url: str,
        *,
        token: str,
        device_id: str | None = None,
        device_name: str = "Python client",
        platform: str = "python",
        app_version: str = __version__,
        user: Mapping[str, str] | None = None,
        media_dir: str | os.PathLike[str] | None = None,
        reconnect: bool = True,
        ping_interval: float = 25.0,
        backoff_min: float = 0.5,
        backoff_max: float = 15.0,
        resend_window: float = 60.0,
        resend_confirmed: bool = False,
        ready_timeout: float = 20.0,
        open_timeout: float = 10.0,
        request_timeout: float = 15.0,
        typing_interval: float = 2.0,
        max_events: int = 10000,
        frame_hook: FrameHook | None = None,
        seq_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if not isinstance(token, str) or not token:
            raise HermesError("bad_config", "token is required")
        if not url.startswith(("ws://", "wss://")):
            raise HermesError("bad_config", "the url must start with ws:// or wss://")
        self.url = url
        self.token = token
        self.device_id = device_id or u.new_device_id()
        self.device_name = device_name
        self.platform = platform
        self.app_version = app_version
        self.user = dict(user) if user else None
        self.media_dir = Path(media_dir) if media_dir is not None else None
        self.auto_reconnect = reconnect
        self.ping_interval = ping_interval
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.resend_window = resend_window
        self.resend_confirmed = resend_confirmed
        self.ready_timeout = ready_timeout
        self.open_timeout = open_timeout
        self.request_timeout = request_timeout
        self.typing_interval = typing_interval
        self.max_events = max_events
        self._hooks: list[FrameHook] = [frame_hook] if frame_hook else []
        if os.environ.get(FRAME_LOG_ENV):
            self._hooks.append(FrameLog(os.environ[FRAME_LOG_ENV]))
        self._seq_file = SeqFile(seq_file) if seq_file is not None else None
        self._init_state()

    def _init_state(self) -> None:
        self.state = "idle"
        self.ready: Ready | None = None
        self.capabilities: dict[str, Any] = {}
        self.max_text_chars = u.MAX_TEXT_CHARS
        self.max_media_bytes = u.MAX_MEDIA_BYTES
        self.cards: dict[str, Card] = {}
        self.final_status: Status | None = None

        self._ws: ClientConnection | None = None
        self._conn = 0  # numbers the connections: work of an older one stops
        self._is_ready = False
        self._stopped = True
        self._finished = False
        self._attempt = 0
        self._fatal: str | None = None
        self._drop_reason = ""
        self._last_rx = 0.0
        self._ping_seq = 0
        self._last_typing = 0.0
        self._outbox: list[OutboxEntry] = []
        self._outcomes: dict[str, HermesError | None] = {}
        self._incoming_messages = MessageAssembler(self._emit)
        self._incoming_media = MediaAssembler(self._emit)
        self._requests: dict[str, PendingRequest] = {}
        # The journal (issue 24; journal.py): the highest seq handed to the application
        # (what seq_file keeps), the highest on a frame received (what a reconnect resumes
        # after), and the seq of the event the application holds now.
        kept = self._seq_file.load() if self._seq_file is not None else None
        self._seq_handed = kept or 0  # a new client (no file) resumes after 0 (L56)
        self._seq_seen = self._seq_handed
        self._seq_pending: int | None = None
        self._resume_sent = 0  # this connection's hello.resume.after
        self._by_received = False  # this connection confirms messages with `received`
        self._seq_save_failed = False
        self._events: deque[Event] = deque()
        self._dropped_events = 0
        self._runner: asyncio.Task[None] | None = None
        self._conn_tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[Any]] = set()
        # Made on first use: an asyncio.Event must be created inside the running loop.
        self._event_signal: asyncio.Event | None = None
        self._state_signal: asyncio.Event | None = None
        self._outbox_signal: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None

    # ---- events and state ---------------------------------------------------------------

    def _emit(self, ev: Event) -> None:
        self._events.append(ev)
        if len(self._events) > self.max_events:
            self._events.popleft()
            self._dropped_events += 1
            if self._dropped_events in _DROPPED_EVENTS_WARNINGS:
                log.warning("events are not being read: %d dropped", self._dropped_events)
        self._signals()[0].set()

    def _signals(self) -> tuple[asyncio.Event, asyncio.Event, asyncio.Event, asyncio.Event]:
        """(new event, state changed, outbox changed, wake the backoff wait)."""
        if self._event_signal is None:
            self._event_signal = asyncio.Event()
            self._state_signal = asyncio.Event()
            self._outbox_signal = asyncio.Event()
            self._wake = asyncio.Event()
        assert self._state_signal
        assert self._outbox_signal
        assert self._wake
        return self._event_signal, self._state_signal, self._outbox_signal, self._wake

    def _set_status(self, status: Status) -> None:
        self.state = status.state
        self._emit(status)
        _, state_signal, _, _ = self._signals()
        state_signal.set()
        self._state_signal = asyncio.Event()  # waiters hold the one that was set

    def _finish(self, status: Status) -> None:
        self._stopped = True
        self._finished = True
        self.final_status = status
        self._set_status(status)
        # Whoever awaits a message id learns why it will not be confirmed now; the messages
        # stay queued, and go if the client is started again.
        err = self._stop_error()
        for e in self._outbox:
            for w in e.waiters:
                if not w.done():
                    w.set_exception(err)
            e.waiters.clear()

    async def _until_online(self) -> None:
        while True:
            if self._is_ready:
                return
            if self._finished or self._runner is None:
                raise self._stop_error()
            await self._signals()[1].wait()

    def _stop_error(self) -> HermesError:
        st = self.final_status
        if st is None:
            return HermesError("closed", "the client is not started")
        if st.state == "noaccess":
            return HermesError(st.code or "auth_failed", "no access: check the token and the device id")
        if st.state == "replaced":
            return HermesError("replaced", "another connection took this device id over")
        if st.state == "offline":
            return HermesError("offline", st.reason or "could not connect")
        return HermesError("closed", "the client was closed")

    # ---- sending frames and background work ---------------------------------------------

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        # Keeps a reference: the loop holds tasks only weakly.
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _close_ws(self, ws: ClientConnection) -> None:
        try:
            await asyncio.wait_for(ws.close(), 2.0)
        except Exception:
            self._abort(ws)

    @staticmethod
    def _abort(ws: ClientConnection) -> None:
        transport = getattr(ws, "transport", None)
        if transport is not None:
            transport.abort()

    async def _send_frame(self, ws: ClientConnection, frame: dict[str, Any]) -> None:
        self._hook("out", frame)
        await ws.send(json.dumps(frame, ensure_ascii=False, separators=(",", ":")))

    def _hook(self, direction: str, frame: Mapping[str, Any]) -> None:
        call_hooks(self._hooks, direction, frame)

    async def _ping(self, ws: ClientConnection) -> int:
        self._ping_seq += 1
        ts = self._ping_seq
        await self._send_frame(ws, {"t": "ping", "id": u.new_id("p"), "ts": ts})
        return ts
