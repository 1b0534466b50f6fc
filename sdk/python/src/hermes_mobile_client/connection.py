"""The connection loop: open the WebSocket, say hello, read frames until it ends, then
reconnect after a backoff with jitter, or stop for good (no access, replaced, or
`reconnect=False`). Also the keep-alive ping that notices a dead connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from . import _util as u
from ._core import ClientCore
from ._version import __version__
from .events import Status, Typing

log = logging.getLogger("hermes_mobile_client")

FATAL_AUTH = ("auth_failed", "forbidden")
MAX_ATTEMPT = 30  # past it the backoff is at its maximum anyway; keeps 2**attempt small


class ConnectionMixin(ClientCore):
    # Provided by Client, which knows every frame type and every per-connection state.
    def _receive(self, raw: str | bytes, ws: ClientConnection, conn: int) -> None:
        raise NotImplementedError

    def _detach(self) -> None:
        raise NotImplementedError

    async def _run(self) -> None:
        while not self._stopped:
            self._conn += 1
            conn = self._conn
            self._fatal = None
            self._drop_reason = ""
            self._set_status(Status("connecting", attempt=self._attempt))
            code, reason = await self._connect_once(conn)
            if self._stopped:
                return
            self._emit(Typing(False))
            fatal = self._fatal or (reason if code == 1008 and reason in FATAL_AUTH else None)
            if self._stop_for_good(fatal, reason):
                return
            why = self._drop_reason or fatal or reason or (str(code) if code else "closed")
            if not self.auto_reconnect:
                self._finish(Status("offline", reason=why, attempt=self._attempt))
                return
            await self._wait_before_retry(why)

    async def _connect_once(self, conn: int) -> tuple[int, str]:
        """One connection, from opening to its end: (close code, reason)."""
        code, reason = 0, ""
        try:
            ws = await ws_connect(
                self.url,
                max_size=u.MAX_FRAME_BYTES,
                ping_interval=None,  # keep-alive is the protocol's own ping (K1/K2)
                compression=None,
                open_timeout=self.open_timeout,
                close_timeout=2.0,
                user_agent_header=f"hermes-mobile-client-python/{__version__}",
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            reason = str(e) or type(e).__name__
        else:
            self._ws = ws
            try:
                code, reason = await self._serve(ws, conn)
            except ConnectionClosed as e:
                code, reason = _close_info(e)
            except Exception as e:  # a bug must not end the client: reconnect
                log.exception("the connection failed")
                reason = f"client error: {e}"
            finally:
                self._detach()
                if ws.state.name != "CLOSED":
                    self._spawn(self._close_ws(ws))
        return code, reason

    def _stop_for_good(self, fatal: str | None, reason: str) -> bool:
        if fatal in FATAL_AUTH:
            # The token or the device binding is wrong: retrying cannot help.
            self._finish(Status("noaccess", code=str(fatal), reason=reason))
            return True
        if reason == "replaced":
            # H5: the same device id connected elsewhere. Fighting back would loop.
            self._finish(Status("replaced", reason="replaced"))
            return True
        return False

    async def _wait_before_retry(self, why: str) -> None:
        """Status `offline` with the delay, then waits it out (or until `reconnect()`)."""
        loop = asyncio.get_running_loop()
        base = min(self.backoff_max, self.backoff_min * 2**self._attempt)
        # Exponential, with jitter: a restarted gateway is not hit by every client at once.
        delay = base * (0.5 + random.random() * 0.5)
        if self._drop_reason == "reconnect":
            delay = 0.0  # reconnect(): at once
        self._attempt = min(self._attempt + 1, MAX_ATTEMPT)
        self._set_status(Status("offline", reason=why, attempt=self._attempt, retry_in=delay))
        wake = self._signals()[3]
        wake.clear()
        deadline = loop.time() + delay
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(wake.wait(), max(0.0, deadline - loop.time()))

    async def _serve(self, ws: ClientConnection, conn: int) -> tuple[int, str]:
        """Says hello and reads frames until the connection ends: (close code, reason)."""
        loop = asyncio.get_running_loop()
        hello = self._hello_frame()
        self._last_rx = loop.time()
        try:
            await self._send_frame(ws, hello)
        except ConnectionClosed as e:
            return _close_info(e)
        deadline = loop.time() + self.ready_timeout
        while True:
            timeout = None if self._is_ready else max(0.0, deadline - loop.time())
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout)
            except asyncio.TimeoutError:
                self._drop_reason = "no ready"
                return 0, "no ready"
            except ConnectionClosed as e:
                return _close_info(e)
            if conn != self._conn:
                return 0, "stale"
            self._last_rx = loop.time()
            self._receive(raw, ws, conn)

    def _hello_frame(self) -> dict[str, Any]:
        device = {
            "id": self.device_id,
            "name": self.device_name,
            "platform": self.platform,
            "app_version": self.app_version,
        }
        hello: dict[str, Any] = {"t": "hello", "id": u.new_id("h"), "token": self.token, "device": device}
        if self.user:
            hello["user"] = self.user
        # Issue 24: always; a gateway without a journal ignores it (G5, L56). journal.py.
        self._resume_sent = self._seq_seen
        hello["resume"] = {"after": self._seq_seen}
        return hello

    async def _keepalive(self, ws: ClientConnection, conn: int) -> None:
        loop = asyncio.get_running_loop()
        while conn == self._conn:
            await asyncio.sleep(self.ping_interval)
            if conn != self._conn:
                return
            if loop.time() - self._last_rx > self.ping_interval * 2 + 10:
                # A dead TCP connection is noticed late: drop it and reconnect.
                self._drop_reason = "silent"
                self._abort(ws)
                return
            try:
                await self._ping(ws)  # keep-alive every 25 s (K1/K2)
            except ConnectionClosed:
                return


def _close_info(e: ConnectionClosed) -> tuple[int, str]:
    rcvd = e.rcvd
    if rcvd is None:
        return 1006, ""  # no close frame came: an abnormal closure
    return int(rcvd.code), rcvd.reason
