"""The `mobile` platform: Hermes <-> the hermes-mobile gateway's agent link.

The gateway speaks Protocol v1 to phones and a small JSON-lines protocol to one agent
(docs/agent-protocol.md in the hermes-mobile repository). This adapter is that agent.
It only translates; the parts with rules of their own live beside it:

- link.py: the connection to the gateway (and the delivery-only one of `hermes send`);
- inbox.py: the per-device ordered inbox and the hold of the gateway's backlog;
- cards.py: approval, clarify and slash-confirm cards and what each answers;
- files.py: uploads in and files out.

`hermes send` and cron use `link.standalone_send` when no adapter runs in their process.
Only the standard library and Hermes itself are used.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import secrets
import time
from typing import Any, Dict, List, Optional

from gateway.config import Platform
from gateway.platforms.base import (
    BasePlatformAdapter,
    MessageEvent,
    MessageType,
    SendResult,
)

from . import files
from .cards import Cards, HermesWaits, approval_card, clarify_card, slash_card
from .common import (
    DEFAULT_LIMITS,
    HOME_CHAT_ID,
    HOME_ENV,
    PLATFORM_NAME,
    chat_id_for,
    clip,
    device_for,
    ensure_home_channel,
    name_chat,
    printable,
)
from .inbox import Hold, Inbox, Turns, guard_is_stale, wake_from_anywhere, watch, watch_guard_owners, watch_runner
from .link import Link, LinkError, NotConnected, settings_of, standalone_send

logger = logging.getLogger(__name__)

# How long connect() waits for the first `welcome` before returning anyway (the link
# keeps retrying in the background; the gateway may simply not be up yet).
CONNECT_WAIT = 5.0
# After a message is handed to Hermes, how long before we decide no turn started for it
# (a command answered inline, a message merged into a running turn) and end the
# gateway's turn ourselves, so the phone's typing indicator cannot hang.
IDLE_TURN_GRACE = 3.0

_HOME_NOTICE_RE = re.compile(r"^\W*No home channel is set for ", re.UNICODE)
_MESSAGE_TYPES = {
    "text": MessageType.TEXT,
    "image": MessageType.PHOTO,
    "video": MessageType.VIDEO,
    "audio": MessageType.AUDIO,
    "voice": MessageType.VOICE,
    "document": MessageType.DOCUMENT,
}


class MobileAdapter(BasePlatformAdapter):
    """Hermes platform adapter for the hermes-mobile gateway's agent link."""

    # Streamed replies stay open on the phone until a `done:true` version; make the
    # stream consumer always send its final edit so every stream is closed.
    REQUIRES_EDIT_FINALIZE = True
    # The longest message the phone takes as one: the gateway's limit, which it chunks
    # for the phone (M1). Hermes' stream consumer splits a reply at this length (4,096
    # when an adapter does not say), and a split reply reached the phone as two.
    MAX_MESSAGE_LENGTH = DEFAULT_LIMITS["text_chars"]

    def __init__(self, config: Any, **_kwargs: Any):
        super().__init__(config, Platform(PLATFORM_NAME))
        self._limits: Dict[str, Any] = dict(DEFAULT_LIMITS)
        self._link = Link(settings_of(config), self._on_up, self._on_event, self._on_down)
        self._link_settings = self._link.settings
        self._runner: Optional[asyncio.Task] = None
        self._devices: Dict[str, Dict[str, Any]] = {}
        # Streams not yet sent with done:true, per device: {message id: last text}.
        self._open: Dict[str, Dict[str, str]] = collections.defaultdict(dict)
        self._finished: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        self._aliased: set = set()
        self._tasks: set = set()
        self._turns = Turns(self._wake)
        self._cards = Cards(HermesWaits(self._hermes_runner), self._limits, self._result, self._link.command,
                            self.send, self.resume_typing_for_chat)
        # Hermes' session guards (BasePlatformAdapter._active_sessions): a change
        # wakes the inbox, whose hold waits for the guard of the turn before.
        watch(self, "_active_sessions", self._wake)
        watch_guard_owners(self, self._wake)
        self._unwatch: List[Any] = []  # the watches on Hermes' runner
        hold = Hold(self._turns, self._session_key_for, self._running_agents, lambda: self._active_sessions,
                    HermesWaits.asks, self._hermes_ready, HermesWaits.run_registered,
                    lambda key: guard_is_stale(self, key))
        self._inbox = Inbox(self._on_message, hold)
        ensure_home_channel(self.config, self.platform)

    # -- Hermes properties ---------------------------------------------------

    @property
    def authorization_is_upstream(self) -> bool:
        # The gateway authenticated the phone (its app token, device bindings,
        # allowed devices) before any message reaches the agent link.
        return True

    # -- what the inbox's hold reads from Hermes -------------------------------

    def _hermes_runner(self) -> Any:
        return getattr(getattr(self, "_message_handler", None), "__self__", None)

    def _hermes_ready(self) -> bool:
        """Whether Hermes lists this adapter as its `mobile` platform and has finished
        restoring its state at start-up.

        The gateway hands over messages queued while Hermes was away as soon as the link
        is up, which is inside connect(); Hermes adds the adapter to its table only
        after connect() returns, and until then its authorization check cannot see that
        this platform authorizes upstream, so it would refuse the user. While Hermes
        restores its state it holds every message and replays them all at once
        afterwards, as interruptions of each other.
        """
        runner = self._hermes_runner()
        adapters = getattr(runner, "adapters", None)
        restoring = bool(getattr(runner, "_startup_restore_in_progress", False))
        return not restoring and (not isinstance(adapters, dict) or adapters.get(self.platform) is self)

    def _running_agents(self) -> Optional[dict]:
        running = getattr(self._hermes_runner(), "_running_agents", None)
        return running if isinstance(running, dict) else None

    def _session_key_for(self, chat_id: str) -> Optional[str]:
        """The Hermes session key of a chat (the cards we opened for it know it)."""
        key = self._cards.session_key_of(chat_id)
        if key:
            return key
        try:
            source = self.build_source(chat_id=chat_id, chat_type="dm")
            from gateway.session import build_session_key

            # As BasePlatformAdapter.handle_message keys its session guard.
            extra = getattr(self.config, "extra", None) or {}
            return build_session_key(
                source,
                group_sessions_per_user=extra.get("group_sessions_per_user", True),
                thread_sessions_per_user=extra.get("thread_sessions_per_user", False),
            )
        except Exception:
            return None

    def _wake(self) -> None:
        inbox = getattr(self, "_inbox", None)
        if inbox is not None:
            inbox.poke()

    @property
    def _auto_tts_default(self) -> bool:
        return self.__dict__.get("_auto_tts_default_value", False)

    @_auto_tts_default.setter
    def _auto_tts_default(self, value: bool) -> None:
        # Hermes sets this right after it adds the adapter to its table, on its start-up
        # and its reconnect paths (_sync_voice_mode_state_to_adapter): the one sign
        # the adapter gets that it is registered, so it wakes the inbox.
        self.__dict__["_auto_tts_default_value"] = value
        self._wake()

    def set_message_handler(self, handler) -> None:
        super().set_message_handler(handler)
        self._watch_runner()

    def _watch_runner(self) -> None:
        try:
            wake = wake_from_anywhere(self._wake)
        except RuntimeError:
            return  # no event loop yet: connect() watches
        self._unwatch.extend(watch_runner(self._hermes_runner(), wake, self._wake))

    # -- connection ----------------------------------------------------------

    async def connect(self, *, is_reconnect: bool = False) -> bool:
        self._link.closing = False
        if not self._unwatch:
            self._watch_runner()  # connected again after a disconnect()
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run_link())
        try:
            await asyncio.wait_for(self._link.ready.wait(), CONNECT_WAIT)
        except asyncio.TimeoutError:
            logger.warning(
                "[mobile] the hermes-mobile gateway is not reachable at %s yet; retrying in the background",
                self._link_settings["where"],
            )
        self._mark_connected()
        return True

    async def disconnect(self) -> None:
        self._link.closing = True
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            try:
                await asyncio.wait_for(runner, 3)
            except (asyncio.CancelledError, asyncio.TimeoutError, Exception):
                pass
        for task in list(self._tasks):
            task.cancel()
        dropped = self._inbox.cancel()
        if dropped:
            logger.warning("[mobile] shutting down with %d message(s) not yet handed to Hermes; "
                           "they are lost (the gateway counted them delivered)", dropped)
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch.clear()
        self._running = False

    async def _run_link(self) -> None:
        await self._link.run()
        if self._link.replaced:
            logger.error("[mobile] another agent took over the gateway's link; this Hermes stays off it "
                         "(restart Hermes to take it back)")
            # `hermes status` shows why; not reported to Hermes' fatal handler,
            # which would build a new adapter and take the link back at once.
            self._set_fatal_error("replaced", "another agent took over the hermes-mobile gateway's link",
                                  retryable=False)

    def _on_up(self, welcome: Dict[str, Any]) -> None:
        self._inbox.link_up()
        limits = welcome.get("limits")
        if isinstance(limits, dict):
            for key, value in limits.items():
                if isinstance(value, int) and value > 0:
                    self._limits[key] = value
        self.MAX_MESSAGE_LENGTH = int(self._limits["text_chars"])
        for dev in welcome.get("devices") or []:
            if isinstance(dev, dict) and dev.get("device"):
                self._remember_device(str(dev["device"]), dev.get("name"), dev.get("user"))
        self._mark_connected()
        if self._cards.prompts:
            self._spawn(self._cards.reopen())

    def _on_down(self) -> None:
        self._write_runtime_status_safe("disconnected", platform_state="disconnected", error_code=None,
                                        error_message=None)

    def _on_event(self, obj: Dict[str, Any]) -> None:
        t = obj.get("t")
        if t == "message":
            if obj.get("device"):
                self._inbox.push(obj)
        elif t == "prompt_answered":
            self._spawn(self._cards.answered(obj))
        elif t == "prompt_expired":
            self._spawn(self._cards.expired(obj))
        elif t == "device_online":
            if obj.get("device"):
                device = str(obj["device"])
                self._remember_device(device, obj.get("name"), obj.get("user"))
                if self._cards.unsent_for(device):
                    self._spawn(self._cards.reopen(device))
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

    async def _result(self, body: Dict[str, Any], message_id: Optional[str] = None) -> SendResult:
        try:
            await self._link.command(body)
        except NotConnected as exc:
            return SendResult(success=False, error=str(exc), retryable=True)
        except asyncio.TimeoutError:
            return SendResult(success=False, error="the gateway did not answer", retryable=True)
        except LinkError as exc:
            return SendResult(success=False, error=str(exc))
        return SendResult(success=True, message_id=message_id)

    # -- text out ------------------------------------------------------------

    def _clip(self, text: Any) -> str:
        return clip(text, int(self._limits.get("text_chars") or 12000))

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
            # Backstop for the "No home channel is set" notice (see common.ensure_home_channel).
            logger.info("[mobile] not sending Hermes' home-channel notice to %s", printable(device_for(chat_id)))
            return SendResult(success=True, message_id="suppressed")
        if chat_id == HOME_CHAT_ID or (metadata and metadata.get("job_id")):
            # Cron output (and anything sent to the default home): a `deliver`, which
            # fails with device_offline instead of being held, as for `hermes send`.
            return await self._deliver_live(chat_id, content)
        if not content.strip():
            return SendResult(success=True, message_id=None)
        message_id = f"h-{int(time.time() * 1000):x}-{secrets.token_hex(3)}"
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

    # -- typing, the avatar and turns --------------------------------------------

    async def send_typing(self, chat_id: str, metadata=None) -> None:
        # Forward only inside a turn: Hermes' typing loop can outlive its turn
        # (e.g. after /new then cancel it refreshes every 2 s for good).
        if self._turns.in_turn(chat_id):
            await self._link.notify({"t": "typing", "device": device_for(chat_id)})
        else:
            logger.debug("[mobile] typing for %s outside a turn: not sent", printable(device_for(chat_id)))

    async def stop_typing(self, chat_id: str) -> None:
        # The phone's indicator stops with `end_turn` (on_processing_complete).
        return None

    async def on_processing_start(self, event: MessageEvent) -> None:
        chat_id = event.source.chat_id
        self._turns.start(chat_id)
        await self._link.notify({"t": "avatar", "device": device_for(chat_id), "state": "thinking"})
        await self._link.notify({"t": "typing", "device": device_for(chat_id)})

    async def on_processing_complete(self, event: MessageEvent, outcome: Any) -> None:
        chat_id = event.source.chat_id
        self._cards.prune()
        if self._turns.complete(chat_id):
            await self._end_turn(chat_id)

    async def _end_turn(self, chat_id: str) -> None:
        self._turns.ended(chat_id)
        await self._finish_open_streams(chat_id)
        await self._link.notify({"t": "end_turn", "device": device_for(chat_id)})

    async def _end_turn_if_idle(self, chat_id: str, seq: int) -> None:
        await asyncio.sleep(IDLE_TURN_GRACE)
        if self._turns.unended(chat_id, seq):
            await self._end_turn(chat_id)

    # -- files out -----------------------------------------------------------

    async def _send_file(self, chat_id, path, kind, caption=None, reply_to=None, name=None) -> SendResult:
        inline = self._link_settings.get("mode") == "ws"
        what, value = await files.send_file_body(device_for(chat_id), path, kind, self._limits, inline,
                                                 caption, reply_to, name)
        if what == "error":
            return SendResult(success=False, error=value)
        if what == "note":
            return await self.send(chat_id, value)
        return await self._result(value, f"f-{secrets.token_hex(4)}")

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
        self._wake()  # Hermes asks the user: a held backlog message may be the answer
        body = approval_card(device_for(chat_id), command, description, allow_permanent, smart_denied,
                             self._cards.ttl("exec_approval"), int(self._limits.get("text_chars") or 12000))
        result = await self._cards.open_approval(chat_id, session_key, body, command or "", str(description or ""))
        return result if result is not None else SendResult(success=True, message_id=None)

    async def send_clarify(
        self,
        chat_id: str,
        question: str,
        choices: Optional[list],
        clarify_id: str,
        session_key: str,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> SendResult:
        self._wake()  # Hermes asks the user: a held backlog message may be the answer
        choices = [str(c) for c in (choices or []) if str(c).strip()]
        if not choices:
            # An open question: a plain message; Hermes takes the next message as the answer.
            return await super().send_clarify(chat_id, question, None, clarify_id, session_key, metadata)
        body = clarify_card(device_for(chat_id), question, choices, self._cards.ttl("clarify"),
                            int(self._limits.get("text_chars") or 12000))
        state = {"kind": "clarify", "clarify_id": clarify_id, "session_key": session_key, "chat_id": chat_id}
        return await self._cards.open(body, state)

    async def send_slash_confirm(
        self,
        chat_id: str,
        title: str,
        message: str,
        session_key: str,
        confirm_id: str,
        metadata: Optional[Dict[str, Any]] = None,
    ) -> SendResult:
        body = slash_card(device_for(chat_id), title, message, self._cards.ttl("slash_confirm"),
                          int(self._limits.get("text_chars") or 12000))
        state = {"kind": "slash_confirm", "confirm_id": confirm_id, "session_key": session_key, "chat_id": chat_id}
        return await self._cards.open(body, state)

    # -- messages in ---------------------------------------------------------

    def _remember_device(self, device: str, name: Any = None, user: Any = None) -> None:
        info = self._devices.setdefault(device, {})
        if name:
            info["name"] = str(name)
        if isinstance(user, dict):
            info["user"] = user
        if device not in self._aliased:
            self._aliased.add(device)
            self._spawn(asyncio.to_thread(name_chat, device))

    async def _on_message(self, ev: Dict[str, Any]) -> None:
        device = str(ev.get("device") or "")
        if not device:
            return
        user = ev.get("user") if isinstance(ev.get("user"), dict) else {}
        self._remember_device(device, None, user)
        text = str(ev.get("text") or "")
        file = ev.get("file") if isinstance(ev.get("file"), dict) else None
        got = await files.incoming(device, text, file)
        mtype = _MESSAGE_TYPES[got.kind]
        if got.kind == "text" and not file and got.text.startswith("/"):
            mtype = MessageType.COMMAND
        chat_id = chat_id_for(device)
        source = self.build_source(
            chat_id=chat_id,
            chat_name=self._devices.get(device, {}).get("name") or device,
            chat_type="dm",
            user_id=str(user.get("id") or device),
            user_name=str(user.get("name") or "") or None,
        )
        event = MessageEvent(
            text=got.text,
            message_type=mtype,
            source=source,
            raw_message=ev,
            message_id=str(ev.get("id") or "") or None,
            media_urls=got.media_urls,
            media_types=got.media_types,
        )
        seq = self._turns.handed(chat_id)
        await self.handle_message(event)
        self._spawn(self._end_turn_if_idle(chat_id, seq))

    async def get_chat_info(self, chat_id: str) -> Dict[str, Any]:
        device = device_for(chat_id)
        info = self._devices.get(device, {})
        return {"name": info.get("name") or device, "type": "dm", "chat_id": chat_id}


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
        standalone_sender_fn=standalone_send,
        platform_hint=(
            "You are talking with the user through the hermes-mobile phone app. "
            "To send the user a file or an image, put MEDIA:/absolute/path on its own line."
        ),
    )
