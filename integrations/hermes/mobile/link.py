"""The link client: one connection to the gateway's agent link, kept up by itself.

The gateway listens on a Unix socket (or its `/agent` WebSocket route) and speaks
JSON lines (docs/agent-protocol.md). `Link` says `hello`, hands every event to its
owner, answers commands' `ref`s, and reconnects with capped exponential backoff
whenever the link drops, so the gateway and Hermes can be started and restarted in
any order. `deliver_once` is the short delivery-only connection `hermes send` and
cron use when no adapter runs in their process.

No Hermes import here; the WebSocket mode uses `websockets`, which Hermes 0.19
depends on, imported only when that mode is used.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import secrets
import time
from typing import Any, Callable, Dict, List, Optional

from .common import (
    DEFAULT_LIMITS,
    HOME_CHAT_ID,
    PLATFORM_NAME,
    PROTOCOL_VERSION,
    device_for,
    dumps,
    printable,
    truthy,
)
from .files import deliver_media

logger = logging.getLogger(__name__)

# One protocol line may be 16 MiB; leave room for the newline and a little slack.
MAX_LINE_BYTES = 16 * 1024 * 1024 + 1024
HANDSHAKE_TIMEOUT = 10.0
COMMAND_TIMEOUT = 30.0
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
# A link up at least this long counts as healthy: its drop reconnects at once.
STABLE_LINK = 30.0
# How long a command waits for a link that is down before it gives up.
CONNECT_WAIT = 5.0


class LinkError(Exception):
    """The gateway answered a command with `error`."""

    def __init__(self, code: str, message: str = ""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class NotConnected(Exception):
    """No link to the gateway right now."""


# ---------------------------------------------------------------------------
# Settings and transports
# ---------------------------------------------------------------------------


def default_socket() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "hermes-mobile", "agent.sock")


def settings_of(pconfig: Any) -> Dict[str, Any]:
    """Where the gateway is: `extra.url` (+ `extra.token`) or a Unix socket path.

    Environment variables win over config.yaml, as elsewhere in Hermes:
    MOBILE_AGENT_URL / MOBILE_AGENT_TOKEN / MOBILE_AGENT_SOCKET.
    """
    extra = dict(getattr(pconfig, "extra", None) or {}) if pconfig is not None else {}
    url = (os.environ.get("MOBILE_AGENT_URL") or str(extra.get("url") or "")).strip()
    token = (os.environ.get("MOBILE_AGENT_TOKEN") or str(extra.get("token") or "")).strip()
    sock = (os.environ.get("MOBILE_AGENT_SOCKET") or str(extra.get("socket") or "")).strip()
    sock = os.path.expanduser(os.path.expandvars(sock)) if sock else default_socket()
    if url:
        # A remote gateway cannot read our files, nor we its: files travel inline.
        inline = truthy(extra.get("inline", True))
        return {"mode": "ws", "url": url, "token": token, "inline": inline, "where": url}
    return {"mode": "unix", "socket": sock, "inline": truthy(extra.get("inline", False)), "where": sock}


def _hermes_version() -> str:
    try:
        from hermes_cli import __version__

        return str(__version__)
    except Exception:
        return "unknown"


def _parse_line(line: Any) -> Dict[str, Any]:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        logger.warning("[mobile] ignoring a line from the gateway that is not JSON")
        return {"t": "_invalid"}
    return obj if isinstance(obj, dict) else {"t": "_invalid"}


class UnixTransport:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str) -> "UnixTransport":
        reader, writer = await asyncio.open_unix_connection(path, limit=MAX_LINE_BYTES)
        return cls(reader, writer)

    async def send(self, obj: Dict[str, Any]) -> None:
        data = (dumps(obj) + "\n").encode("utf-8")
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()

    async def recv(self) -> Optional[Dict[str, Any]]:
        while True:
            line = await self._reader.readline()
            if not line:
                return None
            if not line.endswith(b"\n"):
                return None  # the peer closed mid-line
            line = line.strip()
            if not line:
                continue
            return _parse_line(line)

    async def close(self) -> None:
        try:
            self._writer.close()
            await asyncio.wait_for(self._writer.wait_closed(), 2)
        except Exception:
            pass


class WsTransport:
    def __init__(self, ws: Any):
        self._ws = ws

    @classmethod
    async def open(cls, url: str) -> "WsTransport":
        import websockets  # a dependency of hermes-agent 0.19

        ws = await websockets.connect(url, max_size=MAX_LINE_BYTES, open_timeout=HANDSHAKE_TIMEOUT)
        return cls(ws)

    async def send(self, obj: Dict[str, Any]) -> None:
        import websockets

        try:
            await self._ws.send(dumps(obj))
        except websockets.ConnectionClosed as exc:
            # Callers treat a dropped link the same for both transports.
            raise ConnectionError(f"the gateway closed the link ({exc})") from exc

    async def recv(self) -> Optional[Dict[str, Any]]:
        import websockets

        while True:
            try:
                msg = await self._ws.recv()
            except websockets.ConnectionClosed:
                return None
            if isinstance(msg, bytes):
                msg = msg.decode("utf-8", "replace")
            if not msg.strip():
                continue
            return _parse_line(msg)

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self._ws.close(), 2)
        except Exception:
            pass


async def open_transport(settings: Dict[str, Any]):
    if settings["mode"] == "ws":
        return await WsTransport.open(settings["url"])
    return await UnixTransport.open(settings["socket"])


async def handshake(transport, settings: Dict[str, Any], role: str) -> Dict[str, Any]:
    """Send `hello`, return the `welcome`. Raises LinkError on an `error` answer."""
    hello: Dict[str, Any] = {
        "t": "hello",
        "v": PROTOCOL_VERSION,
        "agent": f"hermes/{_hermes_version()}",
        "inline": bool(settings.get("inline")),
    }
    if role != "agent":
        hello["role"] = role
    if settings.get("token"):
        hello["token"] = settings["token"]
    await transport.send(hello)

    async def _wait() -> Dict[str, Any]:
        while True:
            obj = await transport.recv()
            if obj is None:
                raise ConnectionError("the gateway closed the link during the handshake")
            t = obj.get("t")
            if t == "welcome":
                return obj
            if t == "error":
                raise LinkError(str(obj.get("code") or "error"), str(obj.get("message") or ""))

    return await asyncio.wait_for(_wait(), HANDSHAKE_TIMEOUT)


# ---------------------------------------------------------------------------
# The agent link
# ---------------------------------------------------------------------------


class Link:
    """The adapter's connection to the gateway.

    `on_up(welcome)` runs when a link is up, `on_event(obj)` for every event that is
    not the answer to a command, and `on_down()` when it drops. After the gateway said
    `replaced` (another agent took the link), `run()` returns and `replaced` is set.
    """

    def __init__(
        self,
        settings: Dict[str, Any],
        on_up: Callable[[Dict[str, Any]], None],
        on_event: Callable[[Dict[str, Any]], None],
        on_down: Callable[[], None],
    ):
        self.settings = settings
        self.ready = asyncio.Event()
        self.replaced = False
        self.closing = False
        self._on_up = on_up
        self._on_event = on_event
        self._on_down = on_down
        self._transport = None
        self._refs = itertools.count(1)
        self._pending: Dict[str, asyncio.Future] = {}

    @property
    def up(self) -> bool:
        return self._transport is not None

    async def run(self) -> None:
        delay = BACKOFF_FIRST
        failures = 0
        while not self.closing:
            try:
                transport, welcome = await self._open()
            except LinkError as exc:
                logger.error("[mobile] the gateway refused the link: %s", printable(exc, 200))
                await asyncio.sleep(BACKOFF_MAX)
                continue
            except Exception as exc:
                failures += 1
                log = logger.warning if failures in (1, 10) or failures % 100 == 0 else logger.debug
                log("[mobile] cannot reach the gateway at %s (%s); retrying in %.1f s",
                    self.settings["where"], exc or type(exc).__name__, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            failures = 0
            linked_at = time.monotonic()
            await self._serve(transport, welcome)
            if self.replaced:
                return
            self._on_down()
            if not self.closing:
                # A link that stayed up a while resets the backoff; one that keeps
                # dropping at once (say, two agents replacing each other) backs off.
                stable = time.monotonic() - linked_at >= STABLE_LINK
                delay = BACKOFF_FIRST if stable else min(delay * 2, BACKOFF_MAX)
                logger.warning("[mobile] the link to the gateway dropped; reconnecting in %.1f s", delay)
                await asyncio.sleep(delay)

    async def _open(self):
        """A transport that has said `hello` and got `welcome` (closed again on failure)."""
        transport = None
        try:
            transport = await asyncio.wait_for(open_transport(self.settings), HANDSHAKE_TIMEOUT)
            welcome = await handshake(transport, self.settings, role="agent")
            return transport, welcome
        except BaseException:
            if transport is not None:
                await transport.close()
            raise

    async def _serve(self, transport, welcome: Dict[str, Any]) -> None:
        try:
            # Inside the try: a welcome the adapter cannot use ends this connection
            # (and the link tries again), not the link for good.
            self._on_up(welcome)
            self._transport = transport
            self.ready.set()
            logger.info("[mobile] linked to %s at %s", printable(welcome.get("gateway", "the gateway")),
                        self.settings["where"])
            await self._read_loop(transport)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("[mobile] link error: %s", exc)
        finally:
            self._transport = None
            self.ready.clear()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(NotConnected("the link to the gateway dropped"))
            self._pending.clear()
            await transport.close()

    async def _read_loop(self, transport) -> None:
        while True:
            obj = await transport.recv()
            if obj is None:
                return
            t = obj.get("t")
            ref = obj.get("ref")
            if t in ("ok", "error") and isinstance(ref, str) and ref in self._pending:
                fut = self._pending.pop(ref)
                if not fut.done():
                    if t == "ok":
                        fut.set_result(obj)
                    else:
                        fut.set_exception(LinkError(str(obj.get("code") or "error"), str(obj.get("message") or "")))
                continue
            if t == "error":
                logger.warning("[mobile] gateway error: %s %s", printable(obj.get("code")),
                               printable(obj.get("message"), 200))
                if obj.get("code") == "replaced":
                    self.replaced = True
                continue
            self._on_event(obj)

    async def command(self, body: Dict[str, Any], timeout: float = COMMAND_TIMEOUT) -> Dict[str, Any]:
        """Send a command with a `ref` and wait for its `ok` (or raise LinkError)."""
        transport = self._transport
        if transport is None:
            try:
                await asyncio.wait_for(self.ready.wait(), CONNECT_WAIT)
            except asyncio.TimeoutError:
                raise NotConnected("not connected to the hermes-mobile gateway") from None
            transport = self._transport
            if transport is None:
                raise NotConnected("not connected to the hermes-mobile gateway")
        ref = f"h{next(self._refs)}"
        body = dict(body, ref=ref)
        fut = asyncio.get_running_loop().create_future()
        self._pending[ref] = fut
        try:
            await transport.send(body)
            return await asyncio.wait_for(fut, timeout)
        except (ConnectionError, OSError) as exc:
            raise NotConnected(str(exc)) from exc
        finally:
            self._pending.pop(ref, None)

    async def notify(self, body: Dict[str, Any]) -> None:
        """Fire-and-forget command (typing, avatar, end_turn): failures only logged."""
        transport = self._transport
        if transport is None:
            return
        try:
            await transport.send(body)
        except Exception as exc:
            logger.debug("[mobile] %s not sent: %s", body.get("t"), exc)


# ---------------------------------------------------------------------------
# A delivery-only connection (`hermes send`, cron without a live adapter)
# ---------------------------------------------------------------------------


async def deliver_once(settings: Dict[str, Any], bodies: List[Dict[str, Any]],
                       offline_who: str) -> Dict[str, Any]:
    """Open a `deliver` connection, send `bodies` (each with a `ref`), wait for each answer."""
    try:
        transport = await asyncio.wait_for(open_transport(settings), HANDSHAKE_TIMEOUT)
    except Exception as exc:
        return {"error": f"cannot reach the hermes-mobile gateway at {settings['where']}: {exc or type(exc).__name__}"}
    try:
        await handshake(transport, settings, role="deliver")
        delivered_to = None
        for body in bodies:
            await transport.send(body)
            answer = await asyncio.wait_for(_await_ref(transport, body["ref"]), COMMAND_TIMEOUT)
            if answer.get("t") == "error":
                code = str(answer.get("code") or "error")
                if code == "device_offline":
                    return {"error": f"device_offline: the phone {offline_who} is not connected"}
                return {"error": f"{code}: {answer.get('message') or ''}".strip()}
            delivered_to = answer.get("device") or delivered_to
        return {"success": True, "message_id": bodies[0]["id"], "device": delivered_to}
    except LinkError as exc:
        return {"error": f"the gateway refused the delivery connection: {exc}"}
    except asyncio.TimeoutError:
        return {"error": "the hermes-mobile gateway did not answer in time"}
    except Exception as exc:
        return {"error": f"delivery failed: {exc or type(exc).__name__}"}
    finally:
        await transport.close()


async def _await_ref(transport, ref: str) -> Dict[str, Any]:
    while True:
        obj = await transport.recv()
        if obj is None:
            raise ConnectionError("the gateway closed the delivery connection")
        if obj.get("ref") == ref and obj.get("t") in ("ok", "error"):
            return obj


# ---------------------------------------------------------------------------
# `hermes send` and cron without a live adapter: one `deliver` per file
# ---------------------------------------------------------------------------


async def standalone_send(
    pconfig: Any,
    chat_id: str,
    message: str,
    *,
    thread_id: Optional[str] = None,
    media_files: Optional[list] = None,
    force_document: bool = False,
) -> Dict[str, Any]:
    settings = settings_of(pconfig)
    text = (message or "").strip()
    medias: List[dict] = []
    for item in media_files or []:
        path, is_voice = (item[0], bool(item[1])) if isinstance(item, (list, tuple)) else (item, False)
        media, note = deliver_media(str(path), is_voice, force_document, settings.get("mode") == "ws")
        if media:
            medias.append(media)
        elif note:
            text = f"{text}\n\n{note}" if text else note
    if not text and not medias:
        return {"error": "nothing to send"}
    device = device_for(chat_id) if chat_id and chat_id != HOME_CHAT_ID else None
    target = f"{PLATFORM_NAME}:{device}" if device else None
    first: Dict[str, Any] = {"t": "deliver", "id": f"hermes-{secrets.token_hex(8)}"}
    if text:
        first["text"] = text[: DEFAULT_LIMITS["text_chars"]]
    if medias:
        first["media"] = medias.pop(0)
    bodies = [first] + [{"t": "deliver", "id": f"hermes-{secrets.token_hex(8)}", "media": m} for m in medias]
    for i, body in enumerate(bodies):
        if target:
            body["target"] = target
        body["ref"] = f"d{i}"
    return await deliver_once(settings, bodies, device if target else "the home device")
