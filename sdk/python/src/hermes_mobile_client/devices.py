"""Paired devices (issue 26; docs/security.md): trading a pairing code for a device token
(`pair_with_code`, `POST /pair`), and an owner connection's `devices()` and `revoke()`.

A pairing code comes from `hermes-mobile pair` (the `#pair=<code>` of its link): single-use,
10 minutes by default. The device token it buys works only with the device id it is bound
to, and that id only with it, until the device is revoked. `devices` and `revoke` are
answered only on an owner connection (the shared MOBILE_TOKEN, or a device paired with
`--owner`); any other gets `forbidden`, not fatal.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from . import _util as u
from ._input import check_id
from .events import HermesError
from .request_frames import RequestsMixin

__all__ = ["Device", "DevicesMixin", "PairError", "pair_with_code"]

# What a refused `POST /pair` says in its `error`; anything else counts as `unavailable`.
PAIR_ERRORS = (
    "forbidden",
    "too_many_attempts",
    "bad_request",
    "full",
    "owner_device",
    "unavailable",
    "not_kept",
)
# 503 `busy`: the commit did not finish in time; like `not_kept`, run `pair` again.
_PAIR_ALIASES = {"busy": "not_kept"}
_PAIR_MESSAGES = {
    "forbidden": "the pairing code is wrong, spent or expired",
    "too_many_attempts": "too many failed pairing attempts from this address",
    "bad_request": "the gateway refused the pairing request",
    "full": "the gateway has as many paired devices as it keeps (256): revoke one first",
    "owner_device": "this device id is an owner device's: pair it with a code from "
    "`hermes-mobile pair --owner`",
    "unavailable": "this gateway cannot pair with a code",
    "not_kept": "the gateway could not confirm the pairing, and the code is spent: "
    "run `hermes-mobile pair` again",
}
_STATUS_ERRORS = {400: "bad_request", 403: "forbidden", 409: "full", 429: "too_many_attempts"}
# The wait to report when a 429 carries no readable Retry-After.
_DEFAULT_RETRY_AFTER = 60
_MAX_ANSWER_BYTES = 64 * 1024


class PairError(HermesError):
    """`pair_with_code()` failed. `code` is the gateway's answer: `forbidden` (a wrong, spent
    or expired code), `too_many_attempts` (more than 10 failures in a minute from this
    address; wait `retry_after` seconds), `bad_request` (e.g. a device id with hidden
    characters), `full` (256 devices are paired), `unavailable` (a gateway with no journal,
    or one older than pairing codes), `not_kept` (the commit failed: the code is spent and
    nothing is paired; run `hermes-mobile pair` again for a new code); or the client's own:
    `network` (the gateway could not be reached), `bad_config` (a URL that is not http(s)
    or ws(s)). A 503 `busy` (the commit did not finish in time; the pairing may still be
    kept later) arrives as `not_kept`: there too, run `hermes-mobile pair` again."""

    def __init__(self, code: str, message: str = "", retry_after: int | None = None) -> None:
        super().__init__(code, message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Device:
    """A paired device, as `devices()` gives it. Times are unix milliseconds; `last_seen` is
    None when it has not connected since it paired."""

    id: str
    name: str
    platform: str
    paired_at: int
    last_seen: int | None
    online: bool
    push: bool  # it has a push subscription
    owner: bool  # paired with --owner: it may list and revoke devices


def device_item(f: Any) -> Device | None:
    """One `devices` item; None for one without an id (nothing could revoke it)."""
    if not isinstance(f, dict) or not isinstance(f.get("id"), str) or not f["id"]:
        return None
    paired_at = u.as_int(f.get("paired_at"))
    return Device(
        id=f["id"],
        name=u.str_field(f, "name"),
        platform=u.str_field(f, "platform"),
        paired_at=paired_at if paired_at is not None else 0,
        last_seen=u.as_int(f.get("last_seen")),
        online=f.get("online") is True,
        push=f.get("push") is True,
        owner=f.get("owner") is True,
    )


class DevicesMixin(RequestsMixin):
    async def devices(self, *, timeout: float | None = None) -> list[Device]:
        """The paired devices, ordered by id (`devices` → `devices`). Only for an owner
        connection: raises HermesError `forbidden` otherwise (not fatal: the client stays
        online), or `offline`, `timeout`."""
        answer = await self._request({"t": "devices", "id": u.new_id("dv")}, "devices", timeout)
        raw = answer.get("items")
        items = [device_item(f) for f in (raw if isinstance(raw, list) else [])]
        return [d for d in items if d is not None]

    async def revoke(self, device_id: str, *, timeout: float | None = None) -> None:
        """Revokes a paired device (`revoke` → `revoked`): its token stops working, its live
        connections are closed (`auth_failed`), its push subscriptions and what the gateway
        holds for it are deleted; returns once that is on the gateway's disk. Owner
        connections only. Raises HermesError `forbidden` (not an owner), `bad_frame` (no
        paired device with that id, or an empty one), `offline`, `timeout`."""
        check_id(device_id)
        await self._request({"t": "revoke", "id": u.new_id("rv"), "device": device_id}, "revoked", timeout)


def pair_url(base_url: str) -> str:
    """`<base_url>/pair`. `base_url` is the gateway's http(s) address; its WebSocket URL
    (`ws://host:8787/ws`) is taken too."""
    parts = urllib.parse.urlsplit(base_url.strip())
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    if scheme not in ("http", "https") or not parts.netloc:
        raise PairError("bad_config", f"not an http(s) or ws(s) address: {base_url!r}")
    path = parts.path.rstrip("/")
    if parts.scheme.lower() in ("ws", "wss") and path.endswith("/ws"):
        path = path[: -len("/ws")]
    return urllib.parse.urlunsplit((scheme, parts.netloc, path + "/pair", "", ""))


def retry_after_seconds(value: str | None) -> int:
    """A Retry-After header in seconds: a number, or an HTTP date (RFC 9110)."""
    v = (value or "").strip()
    if v.isdigit():
        return int(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return _DEFAULT_RETRY_AFTER
    return max(0, int(when.timestamp() - time.time() + 0.999))


def pair_with_code(
    base_url: str,
    code: str,
    device_id: str | None = None,
    name: str | None = None,
    platform: str | None = None,
    *,
    timeout: float = 15.0,
) -> tuple[str, str]:
    """Trades a pairing code (`hermes-mobile pair`) for a device token: `POST <base_url>/pair`.
    Returns `(token, device_id)`: connect with both (`connect(url, token=token,
    device_id=device_id)`); the token works only with that id. Without `device_id` the gateway
    makes one. Keep the token like a password; the code is spent.

    `base_url`: the gateway's address, `http://192.168.1.20:8787` (or its `ws://…/ws`).
    Blocking (the standard library's urllib); from asyncio, `await asyncio.to_thread(…)`.
    Raises PairError (a HermesError) with the gateway's code and, for `too_many_attempts`,
    `retry_after` in seconds."""
    if not isinstance(code, str) or not code.strip():
        raise PairError("bad_request", "no pairing code")
    url = pair_url(base_url)
    device = {k: v for k, v in (("id", device_id), ("name", name), ("platform", platform)) if v}
    body = json.dumps({"code": code.strip(), "device": device}).encode()
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    retry_after: str | None = None
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read(_MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as e:
        status, retry_after = e.code, e.headers.get("Retry-After")
        try:
            raw = e.read(_MAX_ANSWER_BYTES)
        except (OSError, http.client.HTTPException):
            raw = b""
        finally:
            e.close()
    # URLError, refused, reset, timed out; a bad host; a peer that is not HTTP (BadStatusLine,
    # IncompleteRead and the rest of http.client's own exceptions).
    except (OSError, ValueError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", None) or e
        raise PairError("network", f"the gateway at {url} could not be reached: {reason}") from None
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None  # a gateway older than pairing codes, or a proxy's page
    answer = answer if isinstance(answer, dict) else {}
    dev = answer.get("device")
    paired_id = dev.get("id") if isinstance(dev, dict) else None
    token = answer.get("token")
    if status == 200 and isinstance(token, str) and token and isinstance(paired_id, str) and paired_id:
        return token, paired_id
    said = answer.get("error")
    said = _PAIR_ALIASES.get(said, said) if isinstance(said, str) else said
    why = said if said in PAIR_ERRORS else _STATUS_ERRORS.get(status, "unavailable")
    message = answer.get("message")
    text = message if isinstance(message, str) and message else _PAIR_MESSAGES[why]
    if said not in PAIR_ERRORS:
        text += f" (HTTP {status})"
    wait = retry_after_seconds(retry_after) if why == "too_many_attempts" else None
    raise PairError(why, text, wait)
