"""The asyncio Protocol v1 client: the same rules as the reference client web/protocol.js
(docs/web-client.md). Rule ids (G1, H5, I1, M1, M2, U1, …) are those of decisions.md.

    async with connect("ws://127.0.0.1:8787/ws", token=TOKEN, device_id="py-1") as client:
        client.send_text("hello")
        async for event in client:
            ...

`Client` is put together here from one module per concern: `_core` (options, state, the
event queue), `connection` (the reconnect loop and keep-alive), `outbox` (queueing,
confirming and re-sending messages), `sending` (the send methods), `request_frames`
(`deliver`, `push_*`), `journal` (resume, `seq_file`, `history`, `forget`), `devices`
(an owner's `devices` and `revoke`), `reassembly`
(incoming messages and files) and `cards`. This module owns the lifecycle, reading events,
and routing each received frame to its handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection

from . import _util as u
from .cards import close_card, remember_card, validate_card
from .connection import ConnectionMixin
from .devices import DevicesMixin
from .events import Avatar, Error, Event, HermesError, Invalid, Ready, Resumed, Status, Typing
from .journal import JournalMixin
from .sending import SendingMixin

__all__ = ["Client", "connect"]

log = logging.getLogger("hermes_mobile_client")

E = TypeVar("E", bound=Event)

# The answers to requests; each settles the request with its id.
_ANSWER_TYPES = (
    "delivered",
    "push_subscribed",
    "push_unsubscribed",
    "push_sent",
    "history",
    "forgotten",
    "devices",
    "revoked",
)
# The frames of journal entries, which carry a seq (L57).
# After a fatal error the gateway closes the connection; if it has not after this, we do.
_FATAL_CLOSE_GRACE = 2.0


class Client(SendingMixin, JournalMixin, DevicesMixin, ConnectionMixin):
    """A Protocol v1 client with reconnects, an outbox and reassembly. See the README.

    Create it with `connect(...)` and use it as `async with`; iterate it for events.
    """

    # ---- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        self.start()
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            # The application failed while holding an event: it has not handled it, so its
            # seq is not kept and the next run gets it again (journal.py).
            self._seq_pending = None
        await self.close()

    def start(self) -> None:
        """Starts connecting (in the background), resetting the backoff. Called by
        `async with`; after `close()`, `noaccess` or `replaced` it starts again."""
        self._signals()
        if self._runner is not None and not self._runner.done():
            return
        self._stopped = False
        self._finished = False
        self.final_status = None
        self._attempt = 0
        self._runner = asyncio.get_running_loop().create_task(self._run())

    def reconnect(self) -> None:
        """Reconnects now: skips the backoff wait when offline, drops and reopens an open
        connection (e.g. the network changed), or starts again after `noaccess`/`replaced`
        (taking the device back from the connection that replaced it)."""
        if self._runner is None or self._runner.done():
            self.start()
            return
        self._attempt = 0
        ws = self._ws
        if ws is not None:
            self._drop_reason = "reconnect"
            self._spawn(self._close_ws(ws))
        elif self._wake is not None:
            self._wake.set()

    async def close(self) -> None:
        """Closes the connection for good; state `closed`. Queued messages stay queued
        until `start()`; awaiting their ids raises `closed`. The seq of the last event
        taken counts as handled (`seq`, `seq_file`)."""
        self._commit_seq()
        was_running = self._runner is not None and not self._runner.done()
        self._stopped = True
        ws = self._ws
        if ws is not None:
            await self._close_ws(ws)
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._runner  # ending anyway
        self._detach()
        for t in list(self._background):
            t.cancel()
        if was_running or self.state not in ("noaccess", "replaced", "closed"):
            self._finish(Status("closed"))

    def _detach(self) -> None:
        """Forgets the connection that ended: its tasks stop, its requests fail."""
        self._ws = None
        self._is_ready = False
        for t in self._conn_tasks:
            t.cancel()
        self._conn_tasks = []
        self._fail_requests()

    @property
    def online(self) -> bool:
        """True between `ready` and the connection's end."""
        return self._is_ready

    @property
    def web_push_key(self) -> str:
        """The gateway's VAPID public key (base64url), or '' when it sends no pushes."""
        push = self.capabilities.get("push")
        webpush = push.get("webpush") if isinstance(push, dict) else None
        key = webpush.get("vapid_public_key") if isinstance(webpush, dict) else None
        return key if isinstance(key, str) else ""

    async def wait_online(self, timeout: float | None = None) -> Ready:
        """Waits until the client is online and returns the `ready` info. Raises
        HermesError: `timeout`; `auth_failed`/`forbidden` (no access); `replaced`;
        `closed`; `offline` (dropped with `reconnect=False`)."""
        try:
            await asyncio.wait_for(self._until_online(), timeout)
        except asyncio.TimeoutError:
            raise HermesError("timeout", "not online in time") from None
        assert self.ready is not None
        return self.ready

    # ---- reading events -----------------------------------------------------------------

    def __aiter__(self) -> Client:
        return self

    async def __anext__(self) -> Event:
        signal = self._signals()[0]
        while True:
            if self._events:
                ev = self._events.popleft()
                self._hand_over(ev)
                return ev
            if self._finished:
                raise StopAsyncIteration
            signal.clear()
            await signal.wait()

    async def next_event(self, timeout: float | None = None) -> Event:
        """The next event. Raises HermesError `timeout`, or `closed` when the client has
        stopped for good and every event was taken."""
        try:
            return await asyncio.wait_for(self.__anext__(), timeout)
        except asyncio.TimeoutError:
            raise HermesError("timeout", "no event in time") from None
        except StopAsyncIteration:
            raise HermesError("closed", "the client has stopped") from None

    async def wait_for(
        self,
        event_type: type[E],
        where: Callable[[E], bool] | None = None,
        timeout: float | None = 30.0,
    ) -> E:
        """Takes events until one of `event_type` (matching `where`) comes and returns it;
        the events before it are dropped. Raises HermesError `timeout` or `closed`."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            ev = await self.next_event(left)
            if isinstance(ev, event_type) and (where is None or where(ev)):
                return ev

    # ---- incoming frames ----------------------------------------------------------------

    def _receive(self, raw: str | bytes, ws: ClientConnection, conn: int) -> None:
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")  # G6
            except UnicodeDecodeError:
                self._emit(Invalid("binary frame is not UTF-8"))
                return
        try:
            f = json.loads(raw)
        except ValueError:
            self._emit(Invalid("frame is not JSON"))
            return
        if not isinstance(f, dict):
            self._emit(Invalid("frame is not an object"))
            return
        self._hook("in", f)
        try:
            self._handle(f, ws, conn)
        except Exception as e:  # a bug here must not kill the connection
            log.exception("handling a %r frame failed", f.get("t"))
            self._emit(Invalid(str(e), f))

    def _handle(self, f: dict[str, Any], ws: ClientConnection, conn: int) -> None:
        t = u.lowercase(f.get("t"))
        if not self._is_ready and t not in ("ready", "error"):
            return  # nothing comes before ready; after a ready this client dropped, nothing counts
        if t == "ready":
            self._on_ready(f, ws, conn)
        elif t == "pong":
            self._on_pong(f.get("ts"), conn)
        elif t == "message":
            self._incoming_messages.feed(f)
        elif t == "media":
            self._incoming_media.feed(f, self.media_dir)
        elif t == "prompt":
            self._on_prompt(f)
        elif t == "prompt_done":
            done = close_card(self.cards, f)
            if done is not None:
                self._emit(done)
        elif t == "avatar":
            s = u.lowercase(f.get("state"))
            self._emit(Avatar(s if s in u.AVATAR_STATES else "idle"))
        elif t == "typing":
            self._emit(Typing(f.get("stop") is not True))
        elif t == "error":
            self._on_error(f, ws, conn)
        elif t == "received":
            self._on_received(f, conn)
        elif t == "resumed":
            n = u.as_int(f.get("seq"))
            self._emit(Resumed(n if n is not None and n >= 0 else 0))
        elif t in _ANSWER_TYPES:
            self._on_answer(t, f)
        # other types are ignored (protocol "Versioning")

    def _on_ready(self, f: dict[str, Any], ws: ClientConnection, conn: int) -> None:
        ready = self._take_ready(f)
        if not self._journal_ready(ready.seq):
            self._drop_reason = "reconnect"  # at once, resuming from 0
            self._spawn(self._close_ws(ws))
            return
        self.ready = ready
        self._is_ready = True
        self._attempt = 0
        loop = asyncio.get_running_loop()
        self._resend_or_give_up(loop.time())
        self._set_status(Status("online"))
        self._emit(self.ready)
        self._conn_tasks.append(loop.create_task(self._keepalive(ws, conn)))
        self._conn_tasks.append(loop.create_task(self._pump(ws, conn)))

    def _take_ready(self, f: dict[str, Any]) -> Ready:
        """Adopts the capabilities, limits and device id a `ready` frame gives."""
        caps = f.get("capabilities") if isinstance(f.get("capabilities"), dict) else {}
        assert isinstance(caps, dict)
        self.capabilities = caps
        mt, mm = u.as_int(caps.get("max_text_chars")), u.as_int(caps.get("max_media_bytes"))
        if mt and mt > 0:
            self.max_text_chars = mt
        if mm and mm > 0:
            self.max_media_bytes = min(mm, u.MAX_MEDIA_BYTES)
        dev = f.get("device") if isinstance(f.get("device"), dict) else {}
        assert isinstance(dev, dict)
        dev_id = dev.get("id") if isinstance(dev.get("id"), str) else self.device_id
        self.device_id = str(dev_id)  # H4: keep the id the gateway uses
        seq = u.as_int(f.get("seq"))
        return Ready(
            v=u.as_int(f.get("v")) or 1,
            session=f["session"] if isinstance(f.get("session"), str) else "",
            device_id=self.device_id,
            device_name=dev["name"] if isinstance(dev.get("name"), str) else self.device_id,
            avatar_url=f["avatar_url"] if isinstance(f.get("avatar_url"), str) else "",
            capabilities=caps,
            seq=seq if seq is not None and seq >= 0 else None,
        )

    def _on_error(self, f: dict[str, Any], ws: ClientConnection, conn: int) -> None:
        code = f["code"] if isinstance(f.get("code"), str) else "unknown"
        message = f["message"] if isinstance(f.get("message"), str) else ""
        fatal = f.get("fatal") is True
        eid = f["id"] if isinstance(f.get("id"), str) else None
        if fatal:
            self._fatal = code
        request = None
        if eid is not None and eid in self._requests:
            request = self._requests[eid].type
            self._settle_request(eid, HermesError(code, message or code))
        # G9: the error names the offending frame (L10: a card answer's prompt_id).
        entry = self._refused_entry(eid, conn) if eid is not None else None
        prompt_id = entry.prompt_id if entry is not None and entry.type == "prompt" else None
        if prompt_id is None and eid is not None and eid in self.cards:
            prompt_id = eid
        if entry is not None and not fatal:
            self._reject(entry, code, message)
        self._emit(Error(code, message, fatal, eid, prompt_id, request))
        if fatal:
            self._spawn(self._abort_unless_closed(ws, conn))

    async def _abort_unless_closed(self, ws: ClientConnection, conn: int) -> None:
        # The close should follow a fatal error; if it does not, drop the connection.
        await asyncio.sleep(_FATAL_CLOSE_GRACE)
        if conn == self._conn and self._ws is ws:
            self._abort(ws)

    def _on_prompt(self, f: dict[str, Any]) -> None:
        card = validate_card(f)
        if card is None:
            self._emit(Invalid("bad prompt card", {"t": "prompt", "id": f.get("id")}))
            return
        remember_card(self.cards, card)
        self._emit(card)


def connect(
    url: str,
    *,
    token: str,
    device_id: str | None = None,
    **options: Any,
) -> Client:
    """A client for the gateway at `url` (`ws://host:8787/ws`), to use as
    `async with connect(...) as client:`. Options are Client's keyword arguments."""
    return Client(url, token=token, device_id=device_id, **options)
