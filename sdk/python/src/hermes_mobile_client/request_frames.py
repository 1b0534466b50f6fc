"""Requests: a frame answered by one frame with its id, or by an `error` naming it.
`deliver` (service delivery) and `push_subscribe`/`push_unsubscribe`/`push_test`. They are
not queued like messages: each waits to be online, sends, and waits for its answer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from websockets.exceptions import ConnectionClosed

from . import _util as u
from ._core import ClientCore
from ._input import check_id, read_file
from .events import Delivered, HermesError


@dataclass
class PendingRequest:
    type: str
    answer: str  # the frame type that answers it
    future: asyncio.Future[dict[str, Any]]


class RequestsMixin(ClientCore):
    async def _request(
        self,
        frame: dict[str, Any],
        answer: str,
        timeout: float | None,
        check: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Waits to be online (within the timeout), sends `frame` and returns the answer.
        Not queued: a connection lost before the answer raises `offline` (retrying with
        the same id is safe: the gateway deduplicates deliveries, S4). `check`, once
        online, may raise instead of sending (what `ready` said the gateway cannot do)."""
        limit = self.request_timeout if timeout is None else timeout

        async def go() -> dict[str, Any]:
            await self._until_online()
            if check is not None:
                check()
            ws = self._ws
            if ws is None:
                raise HermesError("offline", "not connected to the gateway")
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            rid = str(frame["id"])
            self._requests[rid] = PendingRequest(type=str(frame["t"]), answer=answer, future=fut)
            try:
                await self._send_frame(ws, frame)
            except ConnectionClosed:
                self._settle_request(rid, HermesError("offline", "the connection to the gateway was lost"))
            try:
                return await fut
            finally:
                self._requests.pop(rid, None)

        try:
            return await asyncio.wait_for(go(), limit)
        except asyncio.TimeoutError:
            raise HermesError("timeout", f"the gateway did not answer {frame['t']} in time") from None

    def _settle_request(self, rid: str, err: HermesError | None, frame: dict[str, Any] | None = None) -> None:
        r = self._requests.pop(rid, None)
        if r is None or r.future.done():
            return
        if err is not None:
            r.future.set_exception(err)
        else:
            r.future.set_result(frame or {})

    def _on_answer(self, t: str, f: dict[str, Any]) -> None:
        """An answer frame (`delivered`, `push_*`, `history`, `forgotten`, `devices`,
        `revoked`): settles the request with its id, when that request expects this type."""
        rid = f.get("id")
        r = self._requests.get(rid) if isinstance(rid, str) else None
        if r is not None and r.answer == t and isinstance(rid, str):
            self._settle_request(rid, None, f)

    def _fail_requests(self) -> None:
        # An answer cannot come on another connection (the gateway keeps no request state).
        for rid in list(self._requests):
            self._settle_request(rid, HermesError("offline", "the connection to the gateway was lost"))

    async def deliver(
        self,
        text: str | None = None,
        *,
        to: str = "",
        file: str | os.PathLike[str] | bytes | IO[bytes] | None = None,
        filename: str | None = None,
        kind: str | None = None,
        mime: str | None = None,
        id: str | None = None,
        timeout: float | None = None,
    ) -> Delivered:
        """Service delivery (`deliver`, as cron or `hermes-mobile send`): `text` and/or a
        `file` to the device `to` (`mobile:<id>` or `<id>`; empty: the gateway's
        MOBILE_HOME_DEVICE). Needs a deliver token (MOBILE_DELIVER_TOKENS) or a loopback
        connection. Returns Delivered; raises HermesError with the gateway's code:
        `device_offline` (retry later, with the same id), `forbidden`, `bad_frame`, …, or
        `offline`/`timeout`. A repeat with the same `id` is confirmed, not sent twice (S4)."""
        if text is None and file is None:
            raise HermesError("bad_frame", "nothing to deliver: give text and/or a file")
        if text is not None and u.char_count(text) > self.max_text_chars:
            raise HermesError("too_big", f"text is over {self.max_text_chars} characters")
        did = id or u.new_id("d")
        check_id(did)
        frame: dict[str, Any] = {"t": "deliver", "id": did, "target": to}
        if text is not None:
            frame["text"] = text
        if file is not None:
            frame["media"] = _delivery_media(file, filename, kind, mime)
        answer = await self._request(frame, "delivered", timeout)
        device = answer.get("device")
        return Delivered(
            id=did, device=device if isinstance(device, str) else "", held=answer.get("held") is True
        )

    async def push_subscribe(
        self,
        subscription: Mapping[str, Any] | None = None,
        *,
        endpoint: str | None = None,
        p256dh: str | bytes | None = None,
        auth: str | bytes | None = None,
        app_url: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Registers a Web Push subscription for this device (docs/push.md): either a
        subscription object `{"endpoint", "keys": {"p256dh", "auth"}}` (a browser's
        PushSubscription.toJSON()) or `endpoint=`, `p256dh=`, `auth=` (bytes, or base64 /
        base64url text; they go as base64url without padding). Returns the gateway's
        `push_subscribed` frame; raises HermesError with its code (`forbidden` for a push
        service not allowed, `bad_frame` for a malformed subscription)."""
        sub = dict(subscription or {})
        ep = endpoint if endpoint is not None else sub.get("endpoint")
        keys = sub.get("keys") if isinstance(sub.get("keys"), dict) else {}
        assert isinstance(keys, dict)
        k1 = p256dh if p256dh is not None else keys.get("p256dh")
        k2 = auth if auth is not None else keys.get("auth")
        if not isinstance(ep, str) or not ep.lower().startswith("https://"):
            raise HermesError("bad_frame", "the subscription has no https endpoint")
        try:
            key_p256dh, key_auth = _key_b64url(k1), _key_b64url(k2)
        except ValueError as e:
            raise HermesError("bad_frame", str(e)) from None
        frame: dict[str, Any] = {
            "t": "push_subscribe",
            "id": u.new_id("ps"),
            "subscription": {"endpoint": ep, "keys": {"p256dh": key_p256dh, "auth": key_auth}},
        }
        if app_url:
            frame["app_url"] = app_url
        return await self._request(frame, "push_subscribed", timeout)

    async def push_unsubscribe(self, *, timeout: float | None = None) -> dict[str, Any]:
        """Removes this device's push subscriptions: `push_unsubscribe` → `push_unsubscribed`."""
        return await self._request(
            {"t": "push_unsubscribe", "id": u.new_id("pu")}, "push_unsubscribed", timeout
        )

    async def push_test(self, *, timeout: float | None = None) -> dict[str, Any]:
        """Asks the gateway to push a test notification: `push_test` → `push_sent`."""
        return await self._request({"t": "push_test", "id": u.new_id("pt")}, "push_sent", timeout)


def _delivery_media(
    file: str | os.PathLike[str] | bytes | IO[bytes],
    filename: str | None,
    kind: str | None,
    mime: str | None,
) -> dict[str, Any]:
    """The `media` object of a `deliver` frame: the whole file in one, up to 8 MiB."""
    data, name = read_file(file, u.MAX_MEDIA_BYTES)
    fname = u.cut_filename(filename if filename is not None else (name or "file"))
    fmime = mime if mime is not None else u.guess_mime(fname)
    fkind = (kind or u.delivery_kind(fmime)).lower()
    if fkind not in u.DOWNLOAD_KINDS:
        raise HermesError("unsupported_frame", "kind must be image, voice, video, document or animation")
    return {"kind": fkind, "mime": fmime, "filename": fname, "data": u.b64encode(data)}


def _key_b64url(k: Any) -> str:
    if isinstance(k, (bytes, bytearray, memoryview)):
        return u.b64url_encode(bytes(k))
    if isinstance(k, str) and k:
        return u.b64url_encode(u.b64url_decode(k))
    raise ValueError("a subscription key is missing")
