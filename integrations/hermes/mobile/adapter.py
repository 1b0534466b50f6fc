"""The `mobile` platform: Hermes <-> the hermes-mobile gateway's agent link.

The gateway speaks Protocol v1 to phones and a small JSON-lines protocol to one agent
(docs/agent-protocol.md in the hermes-mobile repository). This adapter is that agent:
it connects to the gateway's Unix socket (or its `/agent` WebSocket route), says
`hello`, and then maps every gateway event onto Hermes and every Hermes output onto a
gateway command. It reconnects by itself, with capped exponential backoff, whenever the
link drops, so the gateway and Hermes can be started and restarted in any order.

`hermes send` and cron use `_standalone_send` when no adapter runs in their process: a
short delivery-only connection (`hello` with `"role":"deliver"`) that sends one
`deliver` and waits for the gateway's `ok` or `error`.

Only the standard library and Hermes itself are used; the WebSocket mode uses the
`websockets` package, which Hermes 0.19 depends on.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import itertools
import json
import logging
import mimetypes
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from gateway.config import Platform
from gateway.platforms.base import (
    BasePlatformAdapter,
    MessageEvent,
    MessageType,
    SendResult,
)

logger = logging.getLogger(__name__)

PLATFORM_NAME = "mobile"
PROTOCOL_VERSION = 1
# `chat_id` of the platform's default home channel: "the gateway's MOBILE_HOME_DEVICE".
# A `deliver` without a target goes there (see _ensure_home_channel).
HOME_CHAT_ID = "~home"
HOME_ENV = "MOBILE_HOME_CHANNEL"
# One protocol line may be 16 MiB; leave room for the newline and a little slack.
MAX_LINE_BYTES = 16 * 1024 * 1024 + 1024
DEFAULT_LIMITS = {
    "line_bytes": 16 * 1024 * 1024,
    "media_bytes": 8 * 1024 * 1024,
    "text_chars": 12000,
    "prompt_ttl_secs": 300,
    "max_prompt_ttl_secs": 86400,
}
HANDSHAKE_TIMEOUT = 10.0
COMMAND_TIMEOUT = 30.0
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
# A link up at least this long counts as healthy: its drop reconnects at once.
STABLE_LINK = 30.0
# How long connect() waits for the first `welcome` before returning anyway (the link
# keeps retrying in the background; the gateway may simply not be up yet).
CONNECT_WAIT = 5.0
# After a message is handed to Hermes, how long before we decide no turn started for it
# (a command answered inline, a message merged into a running turn) and end the
# gateway's turn ourselves, so the phone's typing indicator cannot hang.
IDLE_TURN_GRACE = 3.0
# How long a message waits for Hermes to list this adapter as its `mobile` platform
# before it is handed over anyway (Hermes registers an adapter only after connect()
# returns, and its authorization check looks the adapter up there).
REGISTER_WAIT = 30.0
# The longest a backlog message waits for the turn of the one before it to end.
BACKLOG_TURN_WAIT = 300.0
# Before the first backlog message: time for a turn Hermes resumes by itself to start.
BACKLOG_SETTLE = 0.2
# Messages that arrive this soon after `welcome` are the gateway's backlog (it hands
# over what it kept right after the handshake); later ones are live.
BACKLOG_WINDOW = 1.0
# Commands that must reach Hermes at once, never held behind a backlog turn.
URGENT_COMMANDS = {"stop", "approve", "deny", "cancel", "abort"}
# A card's state is kept this long past its expiry when Hermes cannot tell us whether
# it still waits (so a late answer can still be told apart from an unknown card).
PROMPT_GRACE = 60.0
# Files the gateway sent inline are kept this long under $HERMES_HOME/cache/mobile.
INLINE_KEEP_SECS = 7 * 24 * 3600
INLINE_KEEP_FILES = 200

_HOME_NOTICE_RE = re.compile(r"^\W*No home channel is set for ", re.UNICODE)
_TEXT_FALLBACK_RE = re.compile(r"\n*_?Text fallback:.*$", re.DOTALL)


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


def _default_socket() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "hermes-mobile", "agent.sock")


def _settings(pconfig: Any) -> Dict[str, Any]:
    """Where the gateway is: `extra.url` (+ `extra.token`) or a Unix socket path.

    Environment variables win over config.yaml, as elsewhere in Hermes:
    MOBILE_AGENT_URL / MOBILE_AGENT_TOKEN / MOBILE_AGENT_SOCKET.
    """
    extra = dict(getattr(pconfig, "extra", None) or {}) if pconfig is not None else {}
    url = (os.environ.get("MOBILE_AGENT_URL") or str(extra.get("url") or "")).strip()
    token = (os.environ.get("MOBILE_AGENT_TOKEN") or str(extra.get("token") or "")).strip()
    sock = (os.environ.get("MOBILE_AGENT_SOCKET") or str(extra.get("socket") or "")).strip()
    sock = os.path.expanduser(os.path.expandvars(sock)) if sock else _default_socket()
    if url:
        # A remote gateway cannot read our files, nor we its: files travel inline.
        inline = _truthy(extra.get("inline", True))
        return {"mode": "ws", "url": url, "token": token, "inline": inline, "where": url}
    return {"mode": "unix", "socket": sock, "inline": _truthy(extra.get("inline", False)), "where": sock}


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def _hermes_version() -> str:
    try:
        from hermes_cli import __version__

        return str(__version__)
    except Exception:
        return "unknown"


def _dumps(obj: Dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class _UnixTransport:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str) -> "_UnixTransport":
        reader, writer = await asyncio.open_unix_connection(path, limit=MAX_LINE_BYTES)
        return cls(reader, writer)

    async def send(self, obj: Dict[str, Any]) -> None:
        data = (_dumps(obj) + "\n").encode("utf-8")
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


class _WsTransport:
    def __init__(self, ws: Any):
        self._ws = ws

    @classmethod
    async def open(cls, url: str) -> "_WsTransport":
        import websockets  # a dependency of hermes-agent 0.19

        ws = await websockets.connect(url, max_size=MAX_LINE_BYTES, open_timeout=HANDSHAKE_TIMEOUT)
        return cls(ws)

    async def send(self, obj: Dict[str, Any]) -> None:
        import websockets

        try:
            await self._ws.send(_dumps(obj))
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


def _parse_line(line: Any) -> Dict[str, Any]:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        logger.warning("[mobile] ignoring a line from the gateway that is not JSON")
        return {"t": "_invalid"}
    return obj if isinstance(obj, dict) else {"t": "_invalid"}


async def _open_transport(settings: Dict[str, Any]):
    if settings["mode"] == "ws":
        return await _WsTransport.open(settings["url"])
    return await _UnixTransport.open(settings["socket"])


async def _handshake(transport, settings: Dict[str, Any], role: str) -> Dict[str, Any]:
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
# Small helpers
# ---------------------------------------------------------------------------

_KIND_TO_TYPE = {
    "image": MessageType.PHOTO,
    "video": MessageType.VIDEO,
    "audio": MessageType.AUDIO,
    "voice": MessageType.VOICE,
    "document": MessageType.DOCUMENT,
}
_IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".webp", ".bmp", ".heic"}
_VIDEO_EXTS = {".mp4", ".mov", ".webm", ".mkv", ".m4v"}
_VOICE_EXTS = {".ogg", ".opus", ".oga", ".mp3", ".m4a", ".wav"}


def _kind_for_path(path: str, is_voice: bool = False, force_document: bool = False) -> str:
    ext = Path(path).suffix.lower()
    if force_document:
        return "document"
    if is_voice and ext in _VOICE_EXTS:
        return "voice"
    if ext == ".gif":
        return "animation"
    if ext in _IMAGE_EXTS:
        return "image"
    if ext in _VIDEO_EXTS:
        return "video"
    return "document"


def _guess_mime(name: str) -> Optional[str]:
    mime, _ = mimetypes.guess_type(name)
    return mime


def _safe_name(name: str) -> str:
    """A file name safe to show and to store: no path, no control characters, and at
    most 150 UTF-8 bytes (file systems count bytes, 255 at most, and a prefix is added
    when saving), keeping the extension."""
    name = os.path.basename(str(name or "")).replace("\x00", "")
    name = re.sub(r"[\x00-\x1f/\\]", "_", name).strip(". ") or "file"
    if len(name.encode("utf-8")) > 150:
        stem, ext = os.path.splitext(name)
        ext = ext if len(ext.encode("utf-8")) <= 16 else ""
        budget = 150 - len(ext.encode("utf-8"))
        name = stem.encode("utf-8")[:budget].decode("utf-8", "ignore") + ext
    return name


def _printable(value: Any, limit: int = 80) -> str:
    """A string a peer chose, escaped for a log line (no newlines, no control codes)."""
    return str(value)[:limit].encode("unicode_escape").decode("ascii")


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def chat_id_for(device: str) -> str:
    """The Hermes chat id of a device: its id as digits ("77" + 3 digits per UTF-8 byte).

    Hermes 0.19 takes a `platform:chat` target (`hermes send --to`, the send_message
    tool) as an explicit chat only when it is made of digits; any other id is looked
    up by name in its channel directory and then dropped, because the id found is
    parsed again by the same rule. Device ids are free-form strings (`tel-1`), so
    Hermes sees each device under this reversible numeric id, and the device id is
    registered as that chat's name (channel_aliases.json), so `mobile:tel-1` and
    `mobile:<digits>` both reach the phone.
    """
    return "77" + "".join(f"{b:03d}" for b in device.encode("utf-8"))


def device_for(chat_id: Any) -> str:
    """The device id behind a Hermes chat id (a chat id that does not decode is a device id)."""
    s = str(chat_id or "").strip()
    if len(s) > 2 and s.startswith("77") and s.isdigit() and (len(s) - 2) % 3 == 0:
        try:
            raw = bytes(int(s[i:i + 3]) for i in range(2, len(s), 3))
            text = raw.decode("utf-8")
            if text and text.isprintable():
                return text
        except (ValueError, UnicodeDecodeError):
            pass
    if s.startswith(PLATFORM_NAME + ":"):
        s = s[len(PLATFORM_NAME) + 1:]
    return s


def _clamp_ttl(seconds: Any, limits: Dict[str, Any]) -> int:
    try:
        ttl = int(seconds)
    except (TypeError, ValueError):
        ttl = int(limits.get("prompt_ttl_secs") or 300)
    top = int(limits.get("max_prompt_ttl_secs") or 86400)
    return max(1, min(ttl, top))


def _prompt_id(prefix: str) -> str:
    # Card ids must be unique per device for a while (duplicate_prompt); Hermes' own
    # ids restart after a restart, so never reuse them as card ids.
    return f"{prefix}-{secrets.token_hex(6)}"


# ---------------------------------------------------------------------------
# The adapter
# ---------------------------------------------------------------------------


class MobileAdapter(BasePlatformAdapter):
    """Hermes platform adapter for the hermes-mobile gateway's agent link."""

    # Streamed replies stay open on the phone until a `done:true` version; make the
    # stream consumer always send its final edit so every stream is closed.
    REQUIRES_EDIT_FINALIZE = True

    def __init__(self, config: Any, **_kwargs: Any):
        super().__init__(config, Platform(PLATFORM_NAME))
        self._link_settings = _settings(config)
        self._transport = None
        self._ready = asyncio.Event()
        self._closing = False
        self._replaced = False
        self._runner: Optional[asyncio.Task] = None
        self._refs = itertools.count(1)
        self._pending: Dict[str, asyncio.Future] = {}
        self._limits: Dict[str, Any] = dict(DEFAULT_LIMITS)
        self._devices: Dict[str, Dict[str, Any]] = {}
        # Streams not yet sent with done:true, per device: {message id: last text}.
        self._open: Dict[str, Dict[str, str]] = collections.defaultdict(dict)
        self._finished: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        self._prompts: Dict[str, Dict[str, Any]] = {}
        self._aliased: set = set()
        self._turns: Dict[str, int] = collections.defaultdict(int)
        # Messages handed to Hermes per chat, and how many of them an end_turn covered.
        self._handed: Dict[str, int] = collections.defaultdict(int)
        self._ended: Dict[str, int] = {}
        self._tasks: set = set()
        # Messages not yet handed to Hermes, per device, and each device's consumer:
        # one at a time per device, so Hermes sees them in the order the phone sent.
        self._inbox: Dict[str, "collections.deque[Dict[str, Any]]"] = {}
        self._inbox_tasks: Dict[str, asyncio.Task] = {}
        self._linked_at = 0.0
        self._ensure_home_channel()

    # -- Hermes properties ---------------------------------------------------

    @property
    def authorization_is_upstream(self) -> bool:
        # The gateway authenticated the phone (its app token, device bindings,
        # allowed devices) before any message reaches the agent link.
        return True

    def _ensure_home_channel(self) -> None:
        """Give the platform a home channel unless the owner chose one.

        Without one, Hermes answers a device's first message with a "No home channel
        is set" notice. Our default home is HOME_CHAT_ID: a `deliver` without a target,
        which the gateway sends to MOBILE_HOME_DEVICE. `/sethome` or MOBILE_HOME_CHANNEL
        still choose a device.
        """
        try:
            from gateway.config import HomeChannel

            chosen = os.environ.get(HOME_ENV) not in (None, "", HOME_CHAT_ID)
            if getattr(self.config, "home_channel", None) is None and not chosen:
                self.config.home_channel = HomeChannel(
                    platform=self.platform, chat_id=HOME_CHAT_ID, name="the gateway's home device"
                )
                # Cron in this process reads the home channel from the environment.
                os.environ[HOME_ENV] = HOME_CHAT_ID
        except Exception:
            logger.debug("[mobile] could not set the default home channel", exc_info=True)

    # -- connection ----------------------------------------------------------

    async def connect(self, *, is_reconnect: bool = False) -> bool:
        self._closing = False
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run_link())
        try:
            await asyncio.wait_for(self._ready.wait(), CONNECT_WAIT)
        except asyncio.TimeoutError:
            logger.warning(
                "[mobile] the hermes-mobile gateway is not reachable at %s yet; retrying in the background",
                self._link_settings["where"],
            )
        self._mark_connected()
        return True

    async def disconnect(self) -> None:
        self._closing = True
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            try:
                await asyncio.wait_for(runner, 3)
            except (asyncio.CancelledError, asyncio.TimeoutError, Exception):
                pass
        for task in list(self._tasks):
            task.cancel()
        dropped = sum(len(q) for q in self._inbox.values())
        if dropped:
            logger.warning("[mobile] shutting down with %d message(s) not yet handed to Hermes; "
                           "they are lost (the gateway counted them delivered)", dropped)
        self._inbox.clear()
        self._running = False

    async def _run_link(self) -> None:
        delay = BACKOFF_FIRST
        failures = 0
        while not self._closing:
            transport = None
            try:
                transport = await asyncio.wait_for(_open_transport(self._link_settings), HANDSHAKE_TIMEOUT)
                welcome = await _handshake(transport, self._link_settings, role="agent")
            except asyncio.CancelledError:
                if transport is not None:
                    await transport.close()
                raise
            except LinkError as exc:
                logger.error("[mobile] the gateway refused the link: %s", _printable(exc, 200))
                if transport is not None:
                    await transport.close()
                await asyncio.sleep(BACKOFF_MAX)
                continue
            except Exception as exc:
                failures += 1
                log = logger.warning if failures in (1, 10) or failures % 100 == 0 else logger.debug
                log("[mobile] cannot reach the gateway at %s (%s); retrying in %.1f s",
                    self._link_settings["where"], exc or type(exc).__name__, delay)
                if transport is not None:
                    await transport.close()
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
                continue

            failures = 0
            linked_at = time.monotonic()
            self._linked_at = linked_at
            self._on_welcome(welcome)
            self._transport = transport
            self._ready.set()
            self._mark_connected()
            if self._prompts:
                self._spawn(self._reopen_cards())
            logger.info("[mobile] linked to %s at %s", _printable(welcome.get("gateway", "the gateway")),
                        self._link_settings["where"])
            try:
                await self._read_loop(transport)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("[mobile] link error: %s", exc)
            finally:
                self._transport = None
                self._ready.clear()
                for fut in self._pending.values():
                    if not fut.done():
                        fut.set_exception(NotConnected("the link to the gateway dropped"))
                self._pending.clear()
                await transport.close()
            if self._replaced:
                logger.error("[mobile] another agent took over the gateway's link; this Hermes stays off it "
                             "(restart Hermes to take it back)")
                # `hermes status` shows why; not reported to Hermes' fatal handler,
                # which would build a new adapter and take the link back at once.
                self._set_fatal_error("replaced", "another agent took over the hermes-mobile gateway's link",
                                      retryable=False)
                return
            self._write_runtime_status_safe("disconnected", platform_state="disconnected", error_code=None,
                                            error_message=None)
            if not self._closing:
                # A link that stayed up a while resets the backoff; one that keeps
                # dropping at once (say, two agents replacing each other) backs off.
                stable = time.monotonic() - linked_at >= STABLE_LINK
                delay = BACKOFF_FIRST if stable else min(delay * 2, BACKOFF_MAX)
                logger.warning("[mobile] the link to the gateway dropped; reconnecting in %.1f s", delay)
                await asyncio.sleep(delay)

    def _on_welcome(self, welcome: Dict[str, Any]) -> None:
        limits = welcome.get("limits")
        if isinstance(limits, dict):
            for key, value in limits.items():
                if isinstance(value, int) and value > 0:
                    self._limits[key] = value
        for dev in welcome.get("devices") or []:
            if isinstance(dev, dict) and dev.get("device"):
                self._remember_device(str(dev["device"]), dev.get("name"), dev.get("user"))

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
                logger.warning("[mobile] gateway error: %s %s", _printable(obj.get("code")), _printable(obj.get("message"), 200))
                if obj.get("code") == "replaced":
                    self._replaced = True
            elif t == "message":
                self._enqueue_message(obj)
            elif t == "prompt_answered":
                self._spawn(self._on_prompt_answered(obj))
            elif t == "prompt_expired":
                self._spawn(self._on_prompt_expired(obj))
            elif t == "device_online":
                if obj.get("device"):
                    device = str(obj["device"])
                    self._remember_device(device, obj.get("name"), obj.get("user"))
                    if any(st.get("unsent") and st.get("body", {}).get("device") == device
                           for st in self._prompts.values()):
                        self._spawn(self._reopen_cards(device))
            elif t in ("device_offline", "typing", "ok", "welcome"):
                pass
            else:
                logger.debug("[mobile] ignoring %r from the gateway", t)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("[mobile] handler failed: %s", task.exception(), exc_info=task.exception())

    # -- commands ------------------------------------------------------------

    async def _command(self, body: Dict[str, Any], timeout: float = COMMAND_TIMEOUT) -> Dict[str, Any]:
        """Send a command with a `ref` and wait for its `ok` (or raise LinkError)."""
        transport = self._transport
        if transport is None:
            try:
                await asyncio.wait_for(self._ready.wait(), CONNECT_WAIT)
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

    async def _notify(self, body: Dict[str, Any]) -> None:
        """Fire-and-forget command (typing, avatar, end_turn): failures only logged."""
        transport = self._transport
        if transport is None:
            return
        try:
            await transport.send(body)
        except Exception as exc:
            logger.debug("[mobile] %s not sent: %s", body.get("t"), exc)

    async def _result(self, body: Dict[str, Any], message_id: Optional[str] = None) -> SendResult:
        try:
            await self._command(body)
        except NotConnected as exc:
            return SendResult(success=False, error=str(exc), retryable=True)
        except asyncio.TimeoutError:
            return SendResult(success=False, error="the gateway did not answer", retryable=True)
        except LinkError as exc:
            return SendResult(success=False, error=str(exc))
        return SendResult(success=True, message_id=message_id)

    # -- text out ------------------------------------------------------------

    def _new_message_id(self) -> str:
        return f"h-{int(time.time() * 1000):x}-{secrets.token_hex(3)}"

    def _clip(self, text: str) -> str:
        limit = int(self._limits.get("text_chars") or 12000)
        text = text if isinstance(text, str) else str(text or "")
        # Hermes starts text that follows a tool call with a blank line.
        text = text.lstrip("\r\n")
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def _mark_finished(self, chat_id: str, message_id: str, text: str) -> None:
        self._open.get(chat_id, {}).pop(message_id, None)
        self._finished[message_id] = text
        while len(self._finished) > 512:
            self._finished.popitem(last=False)

    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: Optional[str] = None,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> SendResult:
        content = content or ""
        if _HOME_NOTICE_RE.match(content):
            # Backstop for the "No home channel is set" notice (see _ensure_home_channel).
            logger.info("[mobile] not sending Hermes' home-channel notice to %s", _printable(device_for(chat_id)))
            return SendResult(success=True, message_id="suppressed")
        if chat_id == HOME_CHAT_ID or (metadata and metadata.get("job_id")):
            # Cron output (and anything sent to the default home): a `deliver`, which
            # fails with device_offline instead of being held, as for `hermes send`.
            return await self._deliver_live(chat_id, content)
        if not content.strip():
            return SendResult(success=True, message_id=None)
        message_id = self._new_message_id()
        streaming = bool(metadata and metadata.get("expect_edits"))
        text = self._clip(content)
        if not text:
            # Only blank lines so far (text after a tool call starts with them): the
            # first edit with words becomes the message.
            self._open[chat_id][message_id] = ""
            return SendResult(success=True, message_id=message_id)
        result = await self._result(
            {"t": "reply", "device": device_for(chat_id), "id": message_id, "text": text, "done": not streaming},
            message_id,
        )
        if result.success:
            if streaming:
                self._open[chat_id][message_id] = text
            else:
                self._mark_finished(chat_id, message_id, text)
        return result

    async def edit_message(
        self,
        chat_id: str,
        message_id: str,
        content: str,
        *,
        finalize: bool = False,
    ) -> SendResult:
        text = self._clip(content or "")
        if not text:
            return SendResult(success=True, message_id=message_id)
        if message_id in self._finished:
            if self._finished[message_id] == text:
                return SendResult(success=True, message_id=message_id)
            return SendResult(success=False, error="message_finished: message already finished")
        result = await self._result(
            {"t": "reply", "device": device_for(chat_id), "id": message_id, "text": text, "done": bool(finalize)},
            message_id,
        )
        if result.success:
            if finalize:
                self._mark_finished(chat_id, message_id, text)
            else:
                self._open[chat_id][message_id] = text
        elif result.error and result.error.startswith("message_finished"):
            self._mark_finished(chat_id, message_id, text)
        return result

    async def _finish_open_streams(self, chat_id: str) -> None:
        for message_id, text in list(self._open.get(chat_id, {}).items()):
            if not text:
                self._open[chat_id].pop(message_id, None)
                continue
            body = {"t": "reply", "device": device_for(chat_id), "id": message_id, "text": text, "done": True}
            await self._result(body)
            self._mark_finished(chat_id, message_id, text)

    async def _deliver_live(self, chat_id: str, content: str) -> SendResult:
        body: Dict[str, Any] = {"t": "deliver", "id": f"hermes-{secrets.token_hex(8)}"}
        if chat_id and chat_id != HOME_CHAT_ID:
            body["target"] = f"{PLATFORM_NAME}:{device_for(chat_id)}"
        if not content.strip():
            return SendResult(success=True, message_id=None)
        body["text"] = self._clip(content)
        return await self._result(body, body["id"])

    # -- typing and the avatar -----------------------------------------------

    async def send_typing(self, chat_id: str, metadata=None) -> None:
        # Forward only inside a turn: Hermes' typing loop can outlive its turn
        # (e.g. after /new then cancel it refreshes every 2 s for good).
        if self._turns.get(chat_id, 0) > 0:
            await self._notify({"t": "typing", "device": device_for(chat_id)})
        else:
            logger.debug("[mobile] typing for %s outside a turn: not sent", _printable(device_for(chat_id)))

    async def stop_typing(self, chat_id: str) -> None:
        # The phone's indicator stops with `end_turn` (on_processing_complete).
        return None

    async def on_processing_start(self, event: MessageEvent) -> None:
        chat_id = event.source.chat_id
        self._turns[chat_id] += 1
        await self._notify({"t": "avatar", "device": device_for(chat_id), "state": "thinking"})
        await self._notify({"t": "typing", "device": device_for(chat_id)})

    async def on_processing_complete(self, event: MessageEvent, outcome: Any) -> None:
        chat_id = event.source.chat_id
        self._prune_prompts()
        self._turns[chat_id] = max(0, self._turns.get(chat_id, 0) - 1)
        if self._turns[chat_id] == 0:
            self._turns.pop(chat_id, None)
            await self._end_turn(chat_id)

    async def _end_turn(self, chat_id: str) -> None:
        self._ended[chat_id] = self._handed.get(chat_id, 0)
        await self._finish_open_streams(chat_id)
        await self._notify({"t": "end_turn", "device": device_for(chat_id)})

    async def _end_turn_if_idle(self, chat_id: str, seq: int) -> None:
        await asyncio.sleep(IDLE_TURN_GRACE)
        if self._turns.get(chat_id, 0) == 0 and self._ended.get(chat_id, 0) < seq:
            await self._end_turn(chat_id)

    # -- files out -----------------------------------------------------------

    async def _send_file(
        self,
        chat_id: str,
        path: str,
        kind: str,
        caption: Optional[str] = None,
        reply_to: Optional[str] = None,
        name: Optional[str] = None,
    ) -> SendResult:
        p = Path(str(path)).expanduser()
        name = _safe_name(name or p.name)
        try:
            size = p.stat().st_size
            if not p.is_file():
                raise OSError("not a file")
        except OSError as exc:
            return SendResult(success=False, error=f"file_unreadable: {name}: {exc}")
        limit = int(self._limits.get("media_bytes") or DEFAULT_LIMITS["media_bytes"])
        if size > limit:
            note = (f"📎 {name} ({_mib(size)}) is too large for the phone (the limit is {_mib(limit)}), "
                    "so it was not sent.")
            return await self.send(chat_id, f"{caption}\n\n{note}" if caption else note)
        body: Dict[str, Any] = {"t": "send_file", "device": device_for(chat_id), "kind": kind, "name": name}
        mime = _guess_mime(name)
        if mime:
            body["mime"] = mime
        if caption:
            body["caption"] = self._clip(caption)
        if reply_to:
            body["reply_to"] = str(reply_to)[:128]
        if self._link_settings.get("mode") == "ws":
            try:
                body["data"] = base64.b64encode(await asyncio.to_thread(p.read_bytes)).decode("ascii")
            except OSError as exc:
                return SendResult(success=False, error=f"file_unreadable: {name}: {exc}")
        else:
            body["path"] = str(p.resolve())
        return await self._result(body, f"f-{secrets.token_hex(4)}")

    async def send_image_file(self, chat_id, image_path, caption=None, reply_to=None, metadata=None, **kwargs):
        kind = "animation" if str(image_path).lower().endswith(".gif") else "image"
        return await self._send_file(chat_id, image_path, kind, caption, reply_to)

    async def send_document(self, chat_id, file_path, caption=None, file_name=None, reply_to=None,
                            metadata=None, **kwargs):
        return await self._send_file(chat_id, file_path, "document", caption, reply_to, name=file_name)

    async def send_voice(self, chat_id, audio_path, caption=None, reply_to=None, metadata=None, **kwargs):
        return await self._send_file(chat_id, audio_path, "voice", caption, reply_to)

    async def send_video(self, chat_id, video_path, caption=None, reply_to=None, metadata=None, **kwargs):
        return await self._send_file(chat_id, video_path, "video", caption, reply_to)

    async def send_image(self, chat_id, image_url, caption=None, reply_to=None, metadata=None):
        local = str(image_url or "")
        if local.startswith("file://"):
            local = local[len("file://"):]
        if local.startswith("/") and os.path.isfile(local):
            return await self.send_image_file(chat_id, local, caption, reply_to, metadata)
        return await super().send_image(chat_id, image_url, caption, reply_to, metadata)

    # -- cards ---------------------------------------------------------------

    async def _open_prompt(self, body: Dict[str, Any], state: Dict[str, Any]) -> SendResult:
        self._prune_prompts()
        state["body"] = body
        state["deadline"] = time.monotonic() + int(body.get("ttl") or 300)
        self._prompts[body["prompt"]] = state
        result = await self._result(body, body["prompt"])
        if not result.success:
            self._prompts.pop(body["prompt"], None)
        return result

    @staticmethod
    def _still_waiting(state: Dict[str, Any]) -> Optional[bool]:
        """Whether Hermes still waits for this card's answer (None: cannot tell)."""
        try:
            kind = state["kind"]
            if kind == "exec_approval":
                entry = state.get("entry")
                if entry is None:
                    return None
                from tools import approval

                with approval._lock:
                    return any(e is entry for e in approval._gateway_queues.get(state["session_key"]) or [])
            if kind == "clarify":
                from tools import clarify_gateway

                with clarify_gateway._lock:
                    return state["clarify_id"] in clarify_gateway._entries
            if kind == "slash_confirm":
                from tools import slash_confirm

                pending = slash_confirm.get_pending(state["session_key"])
                return bool(pending and pending.get("confirm_id") == state["confirm_id"])
        except Exception:
            logger.debug("[mobile] cannot tell whether a card is still awaited", exc_info=True)
        return None

    def _prune_prompts(self) -> None:
        """Forget cards Hermes no longer waits for (answered elsewhere, /stop, timeout).

        Their answers then get "no longer waiting" instead of resolving whatever
        Hermes asks next.
        """
        now = time.monotonic()
        for pid, state in list(self._prompts.items()):
            waiting = self._still_waiting(state)
            if waiting is False or (waiting is None and now > state.get("deadline", now) + PROMPT_GRACE):
                self._prompts.pop(pid, None)

    async def _reopen_cards(self, only_device: Optional[str] = None) -> None:
        """Open again every card Hermes still waits for, after a (re)connect.

        A gateway that restarted has forgotten its cards while Hermes' waits go on; the
        same card id comes back with the time it has left. A gateway that kept them
        answers duplicate_prompt, which is fine.
        """
        self._prune_prompts()
        now = time.monotonic()
        for pid, state in list(self._prompts.items()):
            body = state.get("body")
            left = int(state.get("deadline", now) - now)
            if body is None or left < 1:
                continue
            if only_device is not None and body.get("device") != only_device:
                continue
            try:
                await self._command(dict(body, ttl=left))
                state.pop("unsent", None)
                logger.info("[mobile] card %s opened again on %s", _printable(pid),
                            _printable(device_for(state["chat_id"])))
            except LinkError as exc:
                if exc.code == "duplicate_prompt":
                    state.pop("unsent", None)
                else:
                    # Tried again when the device comes online or the link is back.
                    state["unsent"] = True
                    logger.warning("[mobile] card %s could not be opened again: %s", _printable(pid), exc)
            except (NotConnected, asyncio.TimeoutError):
                return

    def _claim_approval(self, session_key: str, command: str, description: str) -> Any:
        """The entry in Hermes' approval queue this card answers.

        Hermes resolves approvals oldest first (resolve_gateway_approval), so an answer
        to a card whose command was already stopped would approve the next, different
        command. Keeping the entry lets the answer resolve exactly its own command, or
        none. Hermes queues the entry before it asks for the card and waits for the card
        to be sent. The entry is matched by its command as the card shows it (Hermes
        redacts secrets for the card, _redact_approval_command) and its description;
        with several unmatched entries the oldest is taken, as Hermes would.

        Returns None when Hermes' internals cannot be read (the answer then falls back
        to resolve_gateway_approval), or GONE when the queue holds nothing for this card
        (the request was stopped before its card went out).
        """
        try:
            from tools import approval

            with approval._lock:
                queue = list(approval._gateway_queues.get(session_key) or [])
        except Exception:
            return None
        try:
            from gateway.run import _redact_approval_command as shown
        except Exception:
            def shown(cmd):
                return cmd
        claimed = [s.get("entry") for s in self._prompts.values() if s.get("entry") is not None]
        free = [e for e in queue if not any(e is c for c in claimed)]
        if not free:
            return GONE

        def data(entry):
            return getattr(entry, "data", None) or {}

        for entry in free:
            d = data(entry)
            raw = str(d.get("command", ""))
            if command in (raw, _safe_call(shown, raw)) and str(d.get("description", description)) == description:
                return entry
        for entry in free:
            raw = str(data(entry).get("command", ""))
            if command in (raw, _safe_call(shown, raw)):
                return entry
        if len(free) > 1:
            logger.warning("[mobile] no queued approval matches this card's command; taking the oldest")
        return free[0]

    async def send_exec_approval(
        self,
        chat_id: str,
        command: str,
        session_key: str,
        description: str = "dangerous command",
        metadata: Optional[Dict[str, Any]] = None,
        allow_permanent: bool = True,
        smart_denied: bool = False,
    ) -> SendResult:
        if smart_denied:
            options = ["once", "deny"]
        elif allow_permanent:
            options = ["once", "session", "always", "deny"]
        else:
            options = ["once", "session", "deny"]
        desc = str(description or "dangerous command")
        if smart_denied:
            desc += "\n\nHermes' own check refused this command; allowing it applies to this one run only."
        if "always" in options:
            desc += (
                f"\n\n\"Always\" allow-lists the whole category \"{description}\" in Hermes' "
                "config.yaml for every future session, not just this command."
            )
        try:
            from tools.approval import _get_approval_timeout

            ttl = _clamp_ttl(_get_approval_timeout(), self._limits)
        except Exception:
            ttl = _clamp_ttl(None, self._limits)
        pid = _prompt_id("ap")
        body = {
            "t": "open_prompt", "device": device_for(chat_id), "prompt": pid, "kind": "exec_approval",
            "command": self._clip(command or ""), "description": self._clip(desc), "options": options, "ttl": ttl,
        }
        self._prune_prompts()
        entry = self._claim_approval(session_key, command or "", str(description or ""))
        if entry is GONE:
            # Stopped before its card went out: nothing to ask.
            logger.info("[mobile] approval for %s no longer pending; no card opened", _printable(device_for(chat_id)))
            return SendResult(success=True, message_id=None)
        if entry is None:
            logger.warning("[mobile] cannot read Hermes' approval queue; this card's answer will "
                           "resolve the session's oldest approval")
        return await self._open_prompt(
            body, {"kind": "exec_approval", "session_key": session_key, "chat_id": chat_id, "entry": entry}
        )

    async def send_clarify(
        self,
        chat_id: str,
        question: str,
        choices: Optional[list],
        clarify_id: str,
        session_key: str,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> SendResult:
        choices = [str(c) for c in (choices or []) if str(c).strip()]
        if not choices:
            # An open question: a plain message; Hermes takes the next message as the answer.
            return await super().send_clarify(chat_id, question, None, clarify_id, session_key, metadata)
        try:
            from tools.clarify_gateway import get_clarify_timeout

            ttl = _clamp_ttl(get_clarify_timeout(), self._limits)
        except Exception:
            ttl = _clamp_ttl(None, self._limits)
        pid = _prompt_id("cl")
        body = {
            "t": "open_prompt", "device": device_for(chat_id), "prompt": pid, "kind": "clarify",
            "question": self._clip(question or ""), "choices": choices, "ttl": ttl,
        }
        return await self._open_prompt(
            body, {"kind": "clarify", "clarify_id": clarify_id, "session_key": session_key, "chat_id": chat_id}
        )

    async def send_slash_confirm(
        self,
        chat_id: str,
        title: str,
        message: str,
        session_key: str,
        confirm_id: str,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> SendResult:
        text = _TEXT_FALLBACK_RE.sub("", str(message or title or "Confirm?")).strip()
        pid = _prompt_id("sc")
        try:
            from tools.slash_confirm import DEFAULT_TIMEOUT_SECONDS as ttl_default
        except Exception:
            ttl_default = 300
        body = {
            "t": "open_prompt", "device": device_for(chat_id), "prompt": pid, "kind": "slash_confirm",
            "text": self._clip(text), "options": ["once", "always", "cancel"],
            "ttl": _clamp_ttl(ttl_default, self._limits),
        }
        return await self._open_prompt(
            body, {"kind": "slash_confirm", "confirm_id": confirm_id, "session_key": session_key, "chat_id": chat_id}
        )

    async def _on_prompt_answered(self, ev: Dict[str, Any]) -> None:
        pid = str(ev.get("prompt"))
        state = self._prompts.pop(pid, None)
        if state is not None and self._still_waiting(state) is False:
            state = None
        if state is None:
            # Hermes no longer waits: it was stopped, timed out, or restarted (cards
            # outlive Hermes: the gateway keeps them and queues their answers).
            logger.info("[mobile] answer to card %s, which Hermes no longer waits for", _printable(pid))
            if ev.get("device"):
                await self.send(chat_id_for(str(ev["device"])),
                                "That card is no longer waiting for an answer (the request was stopped, "
                                "timed out, or Hermes restarted), so nothing was done. Please ask again.")
            return
        await self._resolve(state, str(ev.get("option") or ""), ev.get("label"), ev.get("text"))

    async def _on_prompt_expired(self, ev: Dict[str, Any]) -> None:
        state = self._prompts.pop(str(ev.get("prompt")), None)
        if state is None or self._still_waiting(state) is False:
            return
        kind = state["kind"]
        if kind == "exec_approval":
            await self._resolve(state, "deny", None, None, expired=True)
        elif kind == "slash_confirm":
            await self._resolve(state, "cancel", None, None)
        # clarify: Hermes' own clarify timeout (the card's ttl) ends the wait.

    async def _resolve(self, state, option, label, text, expired: bool = False) -> None:
        kind = state["kind"]
        chat_id = state["chat_id"]
        if kind == "exec_approval":
            if option not in ("once", "session", "always", "deny"):
                option = "deny"
            entry = state.get("entry")
            if entry is not None:
                count = 1 if _resolve_approval_entry(state["session_key"], entry, option) else 0
            else:
                from tools.approval import has_blocking_approval, resolve_gateway_approval

                if expired and not has_blocking_approval(state["session_key"]):
                    return
                count = resolve_gateway_approval(state["session_key"], option)
            logger.info("[mobile] approval %s%s for %s resolved %d waiting command(s)", option,
                        " (the card expired)" if expired else "", _printable(device_for(chat_id)), count)
            if count:
                self.resume_typing_for_chat(chat_id)
            elif not expired:
                await self.send(chat_id, "That approval is no longer pending, so nothing was run.")
        elif kind == "clarify":
            from tools.clarify_gateway import resolve_gateway_clarify

            answer = text if option == "other" or not label else label
            answer = str(answer if answer is not None else (label or text or ""))
            if not resolve_gateway_clarify(state["clarify_id"], answer):
                await self.send(chat_id, "That question has already expired; please ask again.")
            else:
                self.resume_typing_for_chat(chat_id)
        elif kind == "slash_confirm":
            from tools import slash_confirm

            if option not in ("once", "always", "cancel"):
                option = "cancel"
            result = await slash_confirm.resolve(state["session_key"], state["confirm_id"], option)
            if isinstance(result, str) and result.strip():
                await self.send(chat_id, result)
            elif result is None and option != "cancel":
                await self.send(chat_id, "That confirmation has already expired.")

    # -- messages in ---------------------------------------------------------

    def _remember_device(self, device: str, name: Any = None, user: Any = None) -> None:
        info = self._devices.setdefault(device, {})
        if name:
            info["name"] = str(name)
        if isinstance(user, dict):
            info["user"] = user
        if device not in self._aliased:
            self._aliased.add(device)
            self._spawn(asyncio.to_thread(_name_chat, device))

    def _enqueue_message(self, ev: Dict[str, Any]) -> None:
        device = str(ev.get("device") or "")
        if not device:
            return
        backlog = time.monotonic() - self._linked_at < BACKLOG_WINDOW
        self._inbox.setdefault(device, collections.deque()).append((ev, backlog))
        if device not in self._inbox_tasks:
            task = asyncio.create_task(self._drain_inbox(device))
            self._inbox_tasks[device] = task
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
            # Also when the task is cancelled before it ran at all (disconnect): a
            # stale entry would leave this device's later messages queued for good.
            task.add_done_callback(lambda t, d=device: self._inbox_tasks.get(d) is t and self._inbox_tasks.pop(d))

    async def _drain_inbox(self, device: str) -> None:
        """Hand one device's messages to Hermes one by one, in arrival order.

        Each message was its own task before, and a message with a file (saved in a
        thread) could overtake the text after it. handle_message returns as soon as
        Hermes has taken the message (the turn runs in its own task), so waiting for it
        costs nothing.
        """
        try:
            await self._until_registered()
            queue = self._inbox.get(device)
            settled = False
            while queue:
                if queue[0][1]:
                    if not settled:
                        # Hermes may resume a turn its last run left unfinished as soon
                        # as it is up; let that start, so the backlog waits for it.
                        await asyncio.sleep(BACKLOG_SETTLE)
                        settled = True
                    await self._until_idle(device, queue)
                ev, backlog = queue.popleft()
                try:
                    await self._on_message(ev)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("[mobile] a message from %s could not be handed to Hermes",
                                     _printable(device))
                    continue
        finally:
            if self._inbox_tasks.get(device) is asyncio.current_task():
                self._inbox_tasks.pop(device, None)
            if not self._inbox.get(device):
                self._inbox.pop(device, None)

    async def _until_idle(self, device: str, queue: "collections.deque") -> None:
        """Before a backlog message, let the turn in progress for this chat end.

        The gateway keeps what a phone sends while Hermes is away and hands it all over
        right after `welcome`. Hermes treats a message that arrives during a turn as an
        interruption ("⚡ Interrupting current task") and may answer a later one first;
        the user wrote them in order and expects them answered in order. The first one
        also waits for a turn Hermes resumed by itself (its last run was stopped in the
        middle of one). Live messages are never held. The hold ends at once when Hermes asks the user something
        (an approval or a clarify question: the next message may be the answer), or
        when a `/stop`, `/approve` or `/deny` waits anywhere behind.
        """
        chat_id = chat_id_for(device)
        seq = self._handed.get(chat_id, 0)
        deadline = time.monotonic() + BACKLOG_TURN_WAIT
        session_key = self._session_key_for(chat_id)
        while (self._turns.get(chat_id, 0) > 0 or self._ended.get(chat_id, 0) < seq
               or self._agent_running(session_key)) and time.monotonic() < deadline:
            if any(_is_urgent(str(ev.get("text") or "")) for ev, _ in queue):
                return
            if session_key and _hermes_asks(session_key):
                return
            await asyncio.sleep(0.1)

    def _agent_running(self, session_key: Optional[str]) -> bool:
        """Whether Hermes runs an agent for this session, its own resumed turn included
        (that one does not pass through on_processing_start)."""
        runner = getattr(getattr(self, "_message_handler", None), "__self__", None)
        running = getattr(runner, "_running_agents", None)
        return bool(session_key) and isinstance(running, dict) and session_key in running

    def _session_key_for(self, chat_id: str) -> Optional[str]:
        """The Hermes session key of a chat (the cards we opened for it know it)."""
        for state in self._prompts.values():
            if state.get("chat_id") == chat_id:
                return state.get("session_key")
        try:
            source = self.build_source(chat_id=chat_id, chat_type="dm")
            from gateway.session import build_session_key

            return build_session_key(source)
        except Exception:
            return None

    async def _until_registered(self) -> None:
        """Wait until Hermes lists this adapter as its `mobile` platform.

        The gateway hands over messages queued while Hermes was away as soon as the link
        is up, which is inside connect(); Hermes adds the adapter to its table only
        after connect() returns, and until then its authorization check cannot see that
        this platform authorizes upstream, so it would refuse the user.
        """
        deadline = time.monotonic() + REGISTER_WAIT
        while True:
            runner = getattr(getattr(self, "_message_handler", None), "__self__", None)
            adapters = getattr(runner, "adapters", None)
            # While Hermes restores its state at start-up it holds every message and
            # replays them all at once afterwards, as interruptions of each other.
            restoring = bool(getattr(runner, "_startup_restore_in_progress", False))
            if not restoring and (not isinstance(adapters, dict) or adapters.get(self.platform) is self):
                return
            if time.monotonic() > deadline:
                logger.warning("[mobile] Hermes has not registered the mobile adapter after %.0f s; "
                               "handing messages over anyway", REGISTER_WAIT)
                return
            await asyncio.sleep(0.05)

    async def _on_message(self, ev: Dict[str, Any]) -> None:
        device = str(ev.get("device") or "")
        if not device:
            return
        user = ev.get("user") if isinstance(ev.get("user"), dict) else {}
        self._remember_device(device, None, user)
        text = str(ev.get("text") or "")
        mtype = MessageType.TEXT
        media_urls: List[str] = []
        media_types: List[str] = []
        file = ev.get("file") if isinstance(ev.get("file"), dict) else None
        if file:
            kind = str(file.get("kind") or "document")
            mtype = _KIND_TO_TYPE.get(kind, MessageType.DOCUMENT)
            if kind == "voice" and text.strip():
                # The app already recognized the speech: hand the note over as an audio
                # attachment, which Hermes never transcribes again (a VOICE message it
                # always does, slowly or not at all without an STT provider).
                mtype = MessageType.AUDIO
            name = _safe_name(file.get("name") or "file")
            mime = str(file.get("mime") or _guess_mime(name) or "application/octet-stream")
            path = file.get("path")
            why = None
            if not path and file.get("data"):
                path, why = await asyncio.to_thread(_save_inline, device, name, str(file["data"]))
            if path:
                media_urls.append(str(path))
                media_types.append(mime)
            else:
                err = file.get("error") or why or "it could not be saved"
                note = f"[The user sent {name}, but the gateway could not pass it on: {err}]"
                text = f"{text}\n\n{note}" if text else note
                mtype = MessageType.TEXT
        elif text.startswith("/"):
            mtype = MessageType.COMMAND
        source = self.build_source(
            chat_id=chat_id_for(device),
            chat_name=self._devices.get(device, {}).get("name") or device,
            chat_type="dm",
            user_id=str(user.get("id") or device),
            user_name=str(user.get("name") or "") or None,
        )
        event = MessageEvent(
            text=text,
            message_type=mtype,
            source=source,
            raw_message=ev,
            message_id=str(ev.get("id") or "") or None,
            media_urls=media_urls,
            media_types=media_types,
        )
        chat_id = chat_id_for(device)
        self._handed[chat_id] += 1
        seq = self._handed[chat_id]
        await self.handle_message(event)
        self._spawn(self._end_turn_if_idle(chat_id, seq))

    async def get_chat_info(self, chat_id: str) -> Dict[str, Any]:
        device = device_for(chat_id)
        info = self._devices.get(device, {})
        return {"name": info.get("name") or device, "type": "dm", "chat_id": chat_id}


class _Gone:
    """Marker: Hermes no longer waits for the approval a card was about to ask."""


GONE = _Gone()


def _safe_call(fn, value):
    try:
        return fn(value)
    except Exception:
        return value


def _is_urgent(text: str) -> bool:
    """`/stop`, `/approve`, `/deny`…: a command (not a path like /home/x) to act on now."""
    m = re.match(r"^/([A-Za-z_]+)(?:@\S+)?(?:\s|$)", text.strip())
    return bool(m) and m.group(1).lower() in URGENT_COMMANDS


def _hermes_asks(session_key: str) -> bool:
    """Whether Hermes waits for the user in this session (an approval or a clarify)."""
    try:
        from tools import approval, clarify_gateway

        if approval.has_blocking_approval(session_key):
            return True
        return clarify_gateway.get_pending_for_session(session_key, include_choice_prompts=True) is not None
    except Exception:
        return False


def _resolve_approval_entry(session_key: str, entry: Any, choice: str) -> bool:
    """Resolve one queued approval, the way resolve_gateway_approval resolves the oldest.

    False when Hermes no longer waits for it (stopped, timed out, answered).
    """
    from tools import approval

    with approval._lock:
        queue = approval._gateway_queues.get(session_key) or []
        # An interrupt (/stop) sets result "deny" and the event before it drops the
        # entry; an answer in that gap must not turn the deny into an approval.
        if not any(e is entry for e in queue) or entry.event.is_set() or entry.result is not None:
            return False
        queue[:] = [e for e in queue if e is not entry]
        if not queue:
            approval._gateway_queues.pop(session_key, None)
        entry.result = choice
        entry.event.set()
    return True


def _save_inline(device: str, name: str, data: str) -> Tuple[Optional[str], Optional[str]]:
    """Keep a file the gateway sent inline (`inline:true`) where Hermes' tools can read it.

    Returns (path, None) or (None, why): the user is told when a file could not be kept.
    The folder is pruned on the way (older than a week, or beyond 200 files), so a
    long-running Hermes does not fill the disk with uploads.
    """
    try:
        raw = base64.b64decode(data, validate=True)
    except Exception:
        return None, "its data was not valid base64"
    try:
        try:
            from hermes_constants import get_hermes_home
        except Exception:
            from hermes_cli.config import get_hermes_home
        folder = Path(get_hermes_home()) / "cache" / "mobile"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _prune_inline(folder)
        who = _safe_name(device).encode("utf-8")[:40].decode("utf-8", "ignore")
        path = folder / f"{int(time.time() * 1000)}-{secrets.token_hex(3)}-{who}-{name}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        return str(path), None
    except OSError as exc:
        logger.warning("[mobile] could not keep an inline upload from %s: %s", _printable(device), exc)
        return None, f"it could not be saved ({exc.strerror or exc})"


def _prune_inline(folder: Path) -> None:
    try:
        files = sorted((p for p in folder.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    cutoff = time.time() - INLINE_KEEP_SECS
    for i, p in enumerate(files):
        try:
            if i < len(files) - INLINE_KEEP_FILES or p.stat().st_mtime < cutoff:
                p.unlink()
        except OSError:
            pass


def _name_chat(device: str) -> None:
    """Name the device's numeric chat id after the device (see chat_id_for).

    Hermes' channel directory is rebuilt from session history only every few
    minutes, but its alias file (channel_aliases.json) is applied on every lookup, so
    `hermes send --to mobile:<device id>` works as soon as the device has been seen.
    Only entries of this platform keyed by our numeric ids are written.
    """
    try:
        from gateway.channel_directory import CHANNEL_ALIASES_PATH
        from utils import atomic_json_write

        data: Dict[str, Any] = {}
        if CHANNEL_ALIASES_PATH.exists():
            with open(CHANNEL_ALIASES_PATH, encoding="utf-8") as f:
                loaded = json.load(f)
            if isinstance(loaded, dict):
                data = loaded
        ours = data.get(PLATFORM_NAME)
        if not isinstance(ours, dict):
            ours = {}
        key = chat_id_for(device)
        if ours.get(key) == device:
            return
        ours[key] = device
        data[PLATFORM_NAME] = ours
        atomic_json_write(CHANNEL_ALIASES_PATH, data)
    except Exception:
        logger.debug("[mobile] could not name %s in channel_aliases.json", _printable(device), exc_info=True)


# ---------------------------------------------------------------------------
# `hermes send` and cron without a live adapter: a delivery-only connection
# ---------------------------------------------------------------------------


def _deliver_media(
    path: str, is_voice: bool, force_document: bool, settings: Dict[str, Any]
) -> Tuple[Optional[dict], Optional[str]]:
    p = Path(path).expanduser()
    name = _safe_name(p.name)
    try:
        size = p.stat().st_size
    except OSError as exc:
        return None, f"{name} could not be read ({exc})"
    if size > DEFAULT_LIMITS["media_bytes"]:
        return None, f"📎 {name} ({_mib(size)}) is too large for the phone, so it was not sent."
    media: Dict[str, Any] = {"kind": _kind_for_path(str(p), is_voice, force_document), "name": name}
    mime = _guess_mime(name)
    if mime:
        media["mime"] = mime
    if settings.get("mode") == "ws":
        media["data"] = base64.b64encode(p.read_bytes()).decode("ascii")
    else:
        media["path"] = str(p.resolve())
    return media, None


async def _standalone_send(
    pconfig: Any,
    chat_id: str,
    message: str,
    *,
    thread_id: Optional[str] = None,
    media_files: Optional[list] = None,
    force_document: bool = False,
) -> Dict[str, Any]:
    settings = _settings(pconfig)
    text = (message or "").strip()
    medias: List[dict] = []
    for item in media_files or []:
        path, is_voice = (item[0], bool(item[1])) if isinstance(item, (list, tuple)) else (item, False)
        media, note = _deliver_media(str(path), is_voice, force_document, settings)
        if media:
            medias.append(media)
        elif note:
            text = f"{text}\n\n{note}" if text else note
    if not text and not medias:
        return {"error": "nothing to send"}
    device = device_for(chat_id) if chat_id and chat_id != HOME_CHAT_ID else None
    target = f"{PLATFORM_NAME}:{device}" if device else None
    bodies: List[Dict[str, Any]] = []
    first: Dict[str, Any] = {"t": "deliver", "id": f"hermes-{secrets.token_hex(8)}"}
    if text:
        first["text"] = text[: DEFAULT_LIMITS["text_chars"]]
    if medias:
        first["media"] = medias.pop(0)
    bodies.append(first)
    for media in medias:
        bodies.append({"t": "deliver", "id": f"hermes-{secrets.token_hex(8)}", "media": media})
    for i, body in enumerate(bodies):
        if target:
            body["target"] = target
        body["ref"] = f"d{i}"

    try:
        transport = await asyncio.wait_for(_open_transport(settings), HANDSHAKE_TIMEOUT)
    except Exception as exc:
        return {"error": f"cannot reach the hermes-mobile gateway at {settings['where']}: {exc or type(exc).__name__}"}
    try:
        await _handshake(transport, settings, role="deliver")
        delivered_to = None
        for body in bodies:
            await transport.send(body)
            answer = await asyncio.wait_for(_await_ref(transport, body["ref"]), COMMAND_TIMEOUT)
            if answer.get("t") == "error":
                code = str(answer.get("code") or "error")
                if code == "device_offline":
                    who = device if target else "the home device"
                    return {"error": f"device_offline: the phone {who} is not connected"}
                return {"error": f"{code}: {answer.get('message') or ''}".strip()}
            delivered_to = answer.get("device") or delivered_to
        return {"success": True, "message_id": first["id"], "device": delivered_to}
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
# Registration
# ---------------------------------------------------------------------------


def register(ctx) -> None:
    # Cron reads the platform's home channel from this variable when it delivers, in
    # whatever process runs the job (`hermes cron run` too, where no adapter exists):
    # without it `deliver: mobile` would fail there. The owner's own value wins.
    os.environ.setdefault(HOME_ENV, HOME_CHAT_ID)
    ctx.register_platform(
        name=PLATFORM_NAME,
        label="Mobile",
        adapter_factory=lambda cfg: MobileAdapter(cfg),
        check_fn=lambda: True,
        validate_config=None,
        required_env=[],
        install_hint="Install hermes-mobile and run its gateway with MOBILE_AGENT=link",
        emoji="📱",
        max_message_length=DEFAULT_LIMITS["text_chars"],
        allowed_users_env="MOBILE_ALLOWED_USERS",
        allow_all_env="MOBILE_ALLOW_ALL_USERS",
        cron_deliver_env_var=HOME_ENV,
        standalone_sender_fn=_standalone_send,
        platform_hint=(
            "You are talking with the user through the hermes-mobile phone app. "
            "To send the user a file or an image, put MEDIA:/absolute/path on its own line."
        ),
    )
