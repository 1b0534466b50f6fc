"""The outbox: every message (text, audio, file, card answer) goes through it, in order,
one at a time. It keeps a message until the gateway confirms it, sends it again with the
same id after a reconnect (I1/I2), and holds it while offline.

The confirmation is the gateway's `received` for a text, voice note or file on a
connection that resumed from a journal (it is on disk, L58), else the `pong` to a ping
sent after the message (the gateway answers in order, so it has read the message)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from . import _util as u
from ._core import ClientCore
from ._input import check_id
from .events import Confirmed, HermesError, Rejected, Unsent
from .upload import ProgressCallback, media_part_frames, upload_progress

log = logging.getLogger("hermes_mobile_client")

# What `received` confirms (L58); card answers are confirmed by a pong.
RECEIVED_TYPES = ("text", "audio", "media")

# Outcomes of messages that left the outbox, for `wait_confirmed` on an old id: a bounded
# memory, trimmed by the oldest.
MAX_OUTCOMES = 1000
OUTCOMES_TRIMMED = 200


class MessageId(str):
    """The id of a message handed to the outbox (a `str`). Awaiting it waits until the
    gateway has confirmed the message and returns the id; it raises `HermesError` when the
    message is rejected (the gateway's code), given up (`unsent`) or the client is closed
    (`closed`)."""

    _client: OutboxMixin | None = None

    def __await__(self) -> Generator[Any, None, str]:
        client = self._client
        if client is None:
            raise HermesError("bad_config", "this id belongs to no client")
        return client.wait_confirmed(str(self)).__await__()


@dataclass(eq=False)
class OutboxEntry:
    """One message in the outbox: text, audio, media or a card answer (prompt)."""

    id: str
    type: str
    frame: dict[str, Any] | None = None
    data: bytes = b""
    kind: str = ""
    mime: str = ""
    filename: str = ""
    caption: str = ""
    format: str = ""
    text: str = ""
    prompt_id: str = ""
    on_progress: ProgressCallback | None = None
    conn: int = 0  # the connection that last carried it
    done: bool = False  # wholly sent on that connection
    confirmed: bool = False
    rejected: bool = False
    active_at: float = 0.0
    ack_seq: int = 0  # the ping whose pong confirms it
    by_received: bool = False  # confirmed by `received` instead, on that connection
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class OutboxMixin(ClientCore):
    """Queueing, sending in order, confirming, re-sending and rejecting messages."""

    @property
    def pending(self) -> list[str]:
        """Ids of messages not yet confirmed by the gateway, in order."""
        return [e.id for e in self._outbox if not e.confirmed]

    def _queue(self, e: OutboxEntry) -> MessageId:
        check_id(e.id)
        self._outbox.append(e)
        self._outcomes.pop(e.id, None)
        if self._outbox_signal is not None:
            self._outbox_signal.set()
        mid = MessageId(e.id)
        mid._client = self
        return mid

    async def _pump(self, ws: ClientConnection, conn: int) -> None:
        """Sends what this connection has not carried yet, in order, one entry at a time
        (the per-device upload buffer is 8 MiB, so files never interleave)."""
        loop = asyncio.get_running_loop()
        signal = self._signals()[2]
        while self._is_ready and conn == self._conn:
            e = next((x for x in self._outbox if not x.confirmed and x.conn != conn), None)
            if e is None:
                signal.clear()
                await signal.wait()
                continue
            e.conn = conn
            e.done = False
            e.rejected = False
            e.active_at = loop.time()
            try:
                ok = await self._transmit(e, ws, conn)
                if not ok or conn != self._conn:
                    return  # lost mid-way: sent again after the next ready
                if e.rejected or e.confirmed:  # `received` may come before the send returns
                    continue
                e.done = True
                e.by_received = self._by_received and e.type in RECEIVED_TYPES
                if not e.by_received:
                    e.ack_seq = await self._ping(ws)  # the pong confirms it
            except ConnectionClosed:
                return

    async def _transmit(self, e: OutboxEntry, ws: ClientConnection, conn: int) -> bool:
        if e.type in ("text", "prompt"):
            assert e.frame is not None
            await self._send_frame(ws, e.frame)
            return True
        if e.type == "audio":
            frame: dict[str, Any] = {
                "t": "audio",
                "id": e.id,
                "format": e.format,
                "data": u.b64encode(e.data),
            }
            if e.text:
                frame["text"] = e.text
            await self._send_frame(ws, frame)
            return True
        return await self._send_media_parts(e, ws, conn)

    async def _send_media_parts(self, e: OutboxEntry, ws: ClientConnection, conn: int) -> bool:
        """U1: the file in parts; False when the connection changed or the gateway refused
        the file before its last part."""
        loop = asyncio.get_running_loop()
        self._progress(e, 0)
        frames = media_part_frames(
            id=e.id, kind=e.kind, mime=e.mime, filename=e.filename, caption=e.caption, data=e.data
        )
        for frame, loaded in frames:
            if conn != self._conn or e.rejected:
                return False
            await self._send_frame(ws, frame)  # returns once the socket's buffer drained
            now = loop.time()
            e.active_at = now
            self._last_rx = max(self._last_rx, now)  # bytes are leaving: the link lives
            self._progress(e, loaded)
        return True

    def _progress(self, e: OutboxEntry, loaded: int) -> None:
        ev = upload_progress(e.id, loaded, len(e.data), e.confirmed)
        if e.on_progress is not None:
            try:
                e.on_progress(ev)
            except Exception:
                log.exception("the progress callback failed")
        self._emit(ev)

    # ---- outcomes -----------------------------------------------------------------------

    def _on_pong(self, ts: Any, conn: int) -> None:
        if u.as_int(ts) is None:
            return
        # The gateway answers frames in order: a pong proves it read everything sent
        # before that ping on this connection.
        for e in list(self._outbox):
            if not e.confirmed and e.conn == conn and e.done and not e.by_received and e.ack_seq <= ts:
                self._confirm(e, None)

    def _on_received(self, f: dict[str, Any], conn: int) -> None:
        """`received`: the message with this id is in the journal at `seq` (L58); again,
        with the same seq, for a re-sent one."""
        mid, seq = f.get("id"), u.as_seq(f.get("seq"))
        e = next((x for x in self._outbox if x.id == mid and x.conn == conn and not x.confirmed), None)
        if e is not None and seq is not None:
            self._confirm(e, seq)

    def _confirm(self, e: OutboxEntry, seq: int | None) -> None:
        e.confirmed = True
        if e.type == "media":
            self._progress(e, len(e.data))
        self._emit(Confirmed(e.id, e.type, seq))
        self._settle_waiters(e, None)
        if seq is not None or not self.resend_confirmed:
            self._outbox.remove(e)

    def _resend_or_give_up(self, now: float) -> None:
        """After `ready`. I1/I2: sent but unconfirmed messages active within the window go
        again with the same ids; the gateway drops repeats. Older unconfirmed ones are
        given up (Unsent)."""
        for e in list(self._outbox):
            recent = bool(e.active_at) and now - e.active_at <= self.resend_window
            if e.confirmed:
                # `received` means on disk: with a journal a confirmed message never goes again.
                if self.resend_confirmed and recent and not self._by_received:
                    e.confirmed = False
                else:
                    self._outbox.remove(e)
            elif e.active_at and not recent:
                self._outbox.remove(e)
                self._emit(Unsent(e.id, e.type))
                self._settle_waiters(e, HermesError("unsent", "not confirmed before the connection was lost"))

    def _refused_entry(self, eid: str, conn: int) -> OutboxEntry | None:
        """The message an `error` names (G9): by its id, or a card answer by its prompt_id
        (L10), sent on this connection."""
        entry = next((x for x in self._outbox if x.id == eid and x.conn == conn), None)
        if entry is None:
            entry = next(
                (x for x in self._outbox if x.type == "prompt" and x.prompt_id == eid and x.conn == conn),
                None,
            )
        return entry

    def _reject(self, entry: OutboxEntry, code: str, message: str) -> None:
        # A refused message is not sent again.
        entry.rejected = True
        if entry in self._outbox:
            self._outbox.remove(entry)
        self._emit(Rejected(entry.id, entry.type, code, message))
        self._settle_waiters(entry, HermesError(code, message or code))

    def _settle_waiters(self, e: OutboxEntry, err: HermesError | None) -> None:
        self._outcomes[e.id] = err
        if len(self._outcomes) > MAX_OUTCOMES:
            for k in list(self._outcomes)[:OUTCOMES_TRIMMED]:
                del self._outcomes[k]
        for w in e.waiters:
            if not w.done():
                if err is None:
                    w.set_result(None)
                else:
                    w.set_exception(err)
        e.waiters.clear()

    async def wait_confirmed(self, message_id: str, timeout: float | None = None) -> str:
        """Waits until the gateway has confirmed the message `message_id` (see MessageId)."""
        e = next((x for x in self._outbox if x.id == message_id), None)
        if e is None:
            if message_id not in self._outcomes:
                raise HermesError("unknown", f"no message {message_id!r} in this client")
            err = self._outcomes[message_id]
            if err is not None:
                raise err
            return message_id
        if e.confirmed:
            return message_id
        if self._finished:
            raise self._stop_error()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        e.waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise HermesError("timeout", "not confirmed in time") from None
        return message_id
