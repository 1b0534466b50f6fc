"""Card resolution: exec_approval, clarify and slash_confirm cards, each answering
exactly the Hermes request it was opened for.

Hermes resolves a session's approvals oldest first, so an answer to a card whose
command was already stopped (`/stop`, `/new`, Hermes' own timeout) would approve
whatever command waits next. `Cards` keeps each card's own entry in Hermes' approval
queue and resolves only that one; an answer to a card Hermes no longer waits for gets
a note and does nothing.

Hermes is reached only through `HermesWaits`, which imports its modules when called,
so this module (and its tests, with a fake) runs without Hermes.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional

from .common import chat_id_for, clamp_ttl, clip, device_for, printable, prompt_id
from .link import LinkError, NotConnected

logger = logging.getLogger(__name__)

# A card's state is kept this long past its expiry when Hermes cannot tell us whether
# it still waits (so a late answer can still be told apart from an unknown card).
PROMPT_GRACE = 60.0
APPROVAL_OPTIONS = ("once", "session", "always", "deny")
SLASH_OPTIONS = ("once", "always", "cancel")
NO_LONGER_WAITING = ("That card is no longer waiting for an answer (the request was stopped, "
                     "timed out, or Hermes restarted), so nothing was done. Please ask again.")
_TEXT_FALLBACK_RE = re.compile(r"\n*_?Text fallback:.*$", re.DOTALL)


class _Gone:
    """Marker: Hermes no longer waits for the approval a card was about to ask."""


GONE = _Gone()


class HermesWaits:
    """Hermes' pending approvals, clarify questions and slash confirmations (0.19).

    `runner()` is Hermes' gateway runner (None when unknown), for its run generations.
    """

    def __init__(self, runner: Callable[[], Any] = lambda: None):
        self._runner = runner

    def run_generation(self, session_key: str) -> Optional[int]:
        """The session's current run: Hermes counts up at every turn and at /stop or /new."""
        generations = getattr(self._runner(), "__dict__", {}).get("_session_run_generation")
        if not isinstance(generations, dict):
            return None
        return int(generations.get(session_key, 0))

    @staticmethod
    def run_registered(session_key: str) -> bool:
        """Whether a run of this session still has its approval callback registered: a
        stopped run does until its thread has unwound (Hermes' runner forgets it at once)."""
        try:
            from tools import approval

            return session_key in approval._gateway_notify_cbs
        except Exception:
            return False

    @staticmethod
    def approval_queue(session_key: str) -> Optional[list]:
        """A copy of the session's approval queue, oldest first; None if unreadable."""
        try:
            from tools import approval

            with approval._lock:
                return list(approval._gateway_queues.get(session_key) or [])
        except Exception:
            return None

    @staticmethod
    def shown(command: str) -> str:
        """The command as Hermes shows it on a card (it redacts secrets)."""
        try:
            from gateway.run import _redact_approval_command

            return str(_redact_approval_command(command))
        except Exception:
            return command

    @staticmethod
    def approval_waiting(session_key: str, entry: Any) -> bool:
        from tools import approval

        with approval._lock:
            return any(e is entry for e in approval._gateway_queues.get(session_key) or [])

    @staticmethod
    def clarify_waiting(clarify_id: str) -> bool:
        from tools import clarify_gateway

        with clarify_gateway._lock:
            return clarify_id in clarify_gateway._entries

    @staticmethod
    def slash_waiting(session_key: str, confirm_id: str) -> bool:
        from tools import slash_confirm

        pending = slash_confirm.get_pending(session_key)
        return bool(pending and pending.get("confirm_id") == confirm_id)

    @staticmethod
    def resolve_entry(session_key: str, entry: Any, choice: str) -> bool:
        """Resolve one queued approval, the way resolve_gateway_approval resolves the
        oldest. False when Hermes no longer waits for it (stopped, timed out, answered)."""
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

    @staticmethod
    def has_blocking_approval(session_key: str) -> bool:
        from tools.approval import has_blocking_approval

        return bool(has_blocking_approval(session_key))

    @staticmethod
    def resolve_oldest(session_key: str, choice: str) -> int:
        from tools.approval import resolve_gateway_approval

        return int(resolve_gateway_approval(session_key, choice) or 0)

    @staticmethod
    def resolve_clarify(clarify_id: str, answer: str) -> bool:
        from tools.clarify_gateway import resolve_gateway_clarify

        return bool(resolve_gateway_clarify(clarify_id, answer))

    @staticmethod
    async def resolve_slash(session_key: str, confirm_id: str, choice: str) -> Any:
        from tools import slash_confirm

        return await slash_confirm.resolve(session_key, confirm_id, choice)

    @staticmethod
    def asks(session_key: str) -> bool:
        """Whether Hermes waits for the user in this session (an approval or a clarify)."""
        try:
            from tools import approval, clarify_gateway

            if approval.has_blocking_approval(session_key):
                return True
            return clarify_gateway.get_pending_for_session(session_key, include_choice_prompts=True) is not None
        except Exception:
            return False

    @staticmethod
    def timeout(kind: str) -> Any:
        """Hermes' own wait for a kind of card, in seconds (None if unknown)."""
        try:
            if kind == "exec_approval":
                from tools.approval import _get_approval_timeout

                return _get_approval_timeout()
            if kind == "clarify":
                from tools.clarify_gateway import get_clarify_timeout

                return get_clarify_timeout()
            from tools.slash_confirm import DEFAULT_TIMEOUT_SECONDS

            return DEFAULT_TIMEOUT_SECONDS
        except Exception:
            return 300 if kind == "slash_confirm" else None


def _answered(entry: Any) -> bool:
    """Hermes' queue entry was answered already (its event set or its result given)."""
    try:
        return bool(entry.event.is_set()) or getattr(entry, "result", None) is not None
    except Exception:
        return False


def _safe_call(fn: Callable[[str], str], value: str) -> str:
    try:
        return fn(value)
    except Exception:
        return value


# ---------------------------------------------------------------------------
# The cards Hermes asks for, as open_prompt commands
# ---------------------------------------------------------------------------


def approval_card(device: str, command: str, description: str, allow_permanent: bool,
                  smart_denied: bool, ttl: int, limit: int) -> Dict[str, Any]:
    if smart_denied:
        options = ["once", "deny"]
    elif allow_permanent:
        options = list(APPROVAL_OPTIONS)
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
    return {
        "t": "open_prompt", "device": device, "prompt": prompt_id("ap"), "kind": "exec_approval",
        "command": clip(command or "", limit), "description": clip(desc, limit), "options": options, "ttl": ttl,
    }


def clarify_card(device: str, question: str, choices: List[str], ttl: int, limit: int) -> Dict[str, Any]:
    return {
        "t": "open_prompt", "device": device, "prompt": prompt_id("cl"), "kind": "clarify",
        "question": clip(question or "", limit), "choices": choices, "ttl": ttl,
    }


def slash_card(device: str, title: str, message: str, ttl: int, limit: int) -> Dict[str, Any]:
    text = _TEXT_FALLBACK_RE.sub("", str(message or title or "Confirm?")).strip()
    return {
        "t": "open_prompt", "device": device, "prompt": prompt_id("sc"), "kind": "slash_confirm",
        "text": clip(text, limit), "options": list(SLASH_OPTIONS), "ttl": ttl,
    }


class Cards:
    """The cards open on phones, and what each one answers in Hermes.

    `send_card(body, message_id)` sends an open_prompt and returns a result with
    `.success`; `command(body)` sends one and raises LinkError on `error`,
    NotConnected or a timeout; `say(chat_id, text)` tells the user something;
    `resume_typing(chat_id)` restarts Hermes' typing once an answer lets it go on.
    """

    def __init__(
        self,
        hermes: Any,
        limits: Dict[str, Any],
        send_card: Callable[[Dict[str, Any], str], Awaitable[Any]],
        command: Callable[[Dict[str, Any]], Awaitable[Any]],
        say: Callable[[str, str], Awaitable[Any]],
        resume_typing: Callable[[str], None] = lambda chat_id: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.hermes = hermes
        self.limits = limits
        self.prompts: Dict[str, Dict[str, Any]] = {}
        self._send_card = send_card
        self._command = command
        self._say = say
        self._resume_typing = resume_typing
        self._clock = clock

    def ttl(self, kind: str) -> int:
        return clamp_ttl(self.hermes.timeout(kind), self.limits)

    def session_key_of(self, chat_id: str) -> Optional[str]:
        for state in self.prompts.values():
            if state.get("chat_id") == chat_id:
                return state.get("session_key")
        return None

    def unsent_for(self, device: str) -> bool:
        return any(st.get("unsent") and st.get("body", {}).get("device") == device for st in self.prompts.values())

    # -- open ----------------------------------------------------------------

    async def open(self, body: Dict[str, Any], state: Dict[str, Any]) -> Any:
        self.prune()
        state["body"] = body
        state["deadline"] = self._clock() + int(body.get("ttl") or 300)
        self.prompts[body["prompt"]] = state
        result = await self._send_card(body, body["prompt"])
        if not result.success:
            self.prompts.pop(body["prompt"], None)
        return result

    async def open_approval(self, chat_id: str, session_key: str, body: Dict[str, Any],
                            command: str, description: str) -> Optional[Any]:
        """Open an exec_approval card for the queued approval it answers; None when
        Hermes no longer waits for one (stopped before its card went out)."""
        self.prune()
        entry = self.claim_approval(session_key, command, description)
        if entry is GONE:
            logger.info("[mobile] approval for %s no longer pending; no card opened", printable(device_for(chat_id)))
            return None
        if entry is None:
            logger.warning("[mobile] cannot read Hermes' approval queue; this card's answer will "
                           "resolve the session's oldest approval")
        state = {"kind": "exec_approval", "session_key": session_key, "chat_id": chat_id, "entry": entry,
                 "run": self.hermes.run_generation(session_key)}
        return await self.open(body, state)

    def claim_approval(self, session_key: str, command: str, description: str) -> Any:
        """The entry in Hermes' approval queue this card answers.

        Keeping the entry lets the answer resolve exactly its own command, or none.
        Hermes queues the entry before it asks for the card and waits for the card to
        be sent. The entry is matched by its command as the card shows it (Hermes
        redacts secrets for the card) and its description; with several unmatched
        entries the oldest is taken, as Hermes would.

        Returns None when Hermes' internals cannot be read (the answer then falls back
        to the oldest approval), or GONE when the queue holds nothing for this card.
        """
        queue = self.hermes.approval_queue(session_key)
        if queue is None:
            return None
        claimed = [s.get("entry") for s in self.prompts.values() if s.get("entry") is not None]
        # An entry already answered (its event set) is on its way out of Hermes' queue.
        free = [e for e in queue if not any(e is c for c in claimed) and not _answered(e)]
        if not free:
            return GONE

        def matches(entry: Any) -> bool:
            raw = str((getattr(entry, "data", None) or {}).get("command", ""))
            return command in (raw, _safe_call(self.hermes.shown, raw))

        for entry in free:
            data = getattr(entry, "data", None) or {}
            if matches(entry) and str(data.get("description", description)) == description:
                return entry
        for entry in free:
            if matches(entry):
                return entry
        if len(free) > 1:
            logger.warning("[mobile] no queued approval matches this card's command; taking the oldest")
        return free[0]

    # -- what Hermes still waits for ------------------------------------------

    def still_waiting(self, state: Dict[str, Any]) -> Optional[bool]:
        """Whether Hermes still waits for this card's answer (None: cannot tell)."""
        try:
            kind = state["kind"]
            if kind == "exec_approval":
                entry = state.get("entry")
                if entry is None:
                    return None
                if self._run_stopped(state):
                    return False
                return self.hermes.approval_waiting(state["session_key"], entry)
            if kind == "clarify":
                return self.hermes.clarify_waiting(state["clarify_id"])
            if kind == "slash_confirm":
                return self.hermes.slash_waiting(state["session_key"], state["confirm_id"])
        except Exception:
            logger.debug("[mobile] cannot tell whether a card is still awaited", exc_info=True)
        return None

    def _run_stopped(self, state: Dict[str, Any]) -> bool:
        """Whether the run that asked for this approval was stopped (/stop, /new) or
        followed by another: its entry may still be queued, unanswered, for a while.

        Hermes' approval wait notices a stop only when it next polls its interrupt flag
        (once a second, later on a busy machine). An answer in that window would run
        the stopped command, and a new run of the session would be torn down by the old
        one's cleanup.
        """
        run = state.get("run")
        return run is not None and self.hermes.run_generation(state["session_key"]) not in (None, run)

    def _deny_stopped(self, state: Dict[str, Any]) -> None:
        """Deny a stopped run's approval now, as Hermes does once its wait notices the
        stop, so the stopped run ends at once."""
        entry = state.get("entry")
        if state.get("kind") == "exec_approval" and entry is not None and self._run_stopped(state):
            try:
                if self.hermes.resolve_entry(state["session_key"], entry, "deny"):
                    logger.info("[mobile] denied the approval of a stopped run for %s",
                                printable(device_for(state["chat_id"])))
            except Exception:
                logger.debug("[mobile] could not deny a stopped run's approval", exc_info=True)

    def prune(self) -> None:
        """Forget cards Hermes no longer waits for (answered elsewhere, /stop, timeout).

        Their answers then get "no longer waiting" instead of resolving whatever
        Hermes asks next.
        """
        now = self._clock()
        for pid, state in list(self.prompts.items()):
            waiting = self.still_waiting(state)
            if waiting is False or (waiting is None and now > state.get("deadline", now) + PROMPT_GRACE):
                self._deny_stopped(state)
                self.prompts.pop(pid, None)

    async def reopen(self, only_device: Optional[str] = None) -> None:
        """Open again every card Hermes still waits for, after a (re)connect.

        A gateway that restarted has forgotten its cards while Hermes' waits go on; the
        same card id comes back with the time it has left. A gateway that kept them
        answers duplicate_prompt, which is fine.
        """
        self.prune()
        now = self._clock()
        for pid, state in list(self.prompts.items()):
            body = state.get("body")
            left = int(state.get("deadline", now) - now)
            if body is None or left < 1:
                continue
            if only_device is not None and body.get("device") != only_device:
                continue
            try:
                await self._command(dict(body, ttl=left))
                state.pop("unsent", None)
                logger.info("[mobile] card %s opened again on %s", printable(pid),
                            printable(device_for(state["chat_id"])))
            except LinkError as exc:
                if exc.code == "duplicate_prompt":
                    state.pop("unsent", None)
                else:
                    # Tried again when the device comes online or the link is back.
                    state["unsent"] = True
                    logger.warning("[mobile] card %s could not be opened again: %s", printable(pid), exc)
            except (NotConnected, asyncio.TimeoutError):
                return

    # -- answers ---------------------------------------------------------------

    async def answered(self, ev: Dict[str, Any]) -> None:
        pid = str(ev.get("prompt"))
        state = self.prompts.pop(pid, None)
        if state is not None and self.still_waiting(state) is False:
            self._deny_stopped(state)
            state = None
        if state is None:
            # Hermes no longer waits: it was stopped, timed out, or restarted (cards
            # outlive Hermes: the gateway keeps them and queues their answers).
            logger.info("[mobile] answer to card %s, which Hermes no longer waits for", printable(pid))
            if ev.get("device"):
                await self._say(chat_id_for(str(ev["device"])), NO_LONGER_WAITING)
            return
        await self.resolve(state, str(ev.get("option") or ""), ev.get("label"), ev.get("text"))

    async def expired(self, ev: Dict[str, Any]) -> None:
        state = self.prompts.pop(str(ev.get("prompt")), None)
        if state is None or self.still_waiting(state) is False:
            if state is not None:
                self._deny_stopped(state)
            return
        kind = state["kind"]
        if kind == "exec_approval":
            await self.resolve(state, "deny", None, None, expired=True)
        elif kind == "slash_confirm":
            await self.resolve(state, "cancel", None, None)
        # clarify: Hermes' own clarify timeout (the card's ttl) ends the wait.

    async def resolve(self, state, option, label, text, expired: bool = False) -> None:
        kind = state["kind"]
        if kind == "exec_approval":
            await self._resolve_approval(state, option, expired)
        elif kind == "clarify":
            answer = text if option == "other" or not label else label
            answer = str(answer if answer is not None else (label or text or ""))
            if not self.hermes.resolve_clarify(state["clarify_id"], answer):
                await self._say(state["chat_id"], "That question has already expired; please ask again.")
            else:
                self._resume_typing(state["chat_id"])
        elif kind == "slash_confirm":
            if option not in SLASH_OPTIONS:
                option = "cancel"
            result = await self.hermes.resolve_slash(state["session_key"], state["confirm_id"], option)
            if isinstance(result, str) and result.strip():
                await self._say(state["chat_id"], result)
            elif result is None and option != "cancel":
                await self._say(state["chat_id"], "That confirmation has already expired.")

    async def _resolve_approval(self, state, option: str, expired: bool) -> None:
        chat_id = state["chat_id"]
        if option not in APPROVAL_OPTIONS:
            option = "deny"
        entry = state.get("entry")
        if entry is not None:
            count = 1 if self.hermes.resolve_entry(state["session_key"], entry, option) else 0
        else:
            if expired and not self.hermes.has_blocking_approval(state["session_key"]):
                return
            count = self.hermes.resolve_oldest(state["session_key"], option)
        logger.info("[mobile] approval %s%s for %s resolved %d waiting command(s)", option,
                    " (the card expired)" if expired else "", printable(device_for(chat_id)), count)
        if count:
            self._resume_typing(chat_id)
        elif not expired:
            await self._say(chat_id, "That approval is no longer pending, so nothing was run.")
