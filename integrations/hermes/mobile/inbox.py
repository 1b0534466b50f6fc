"""The per-device ordered inbox: messages reach Hermes one at a time, in the order sent.

Each device has a queue and one consumer task. A message with a file (saved in a
thread) can therefore not overtake the text after it.

The gateway keeps what a phone sends while Hermes is away and hands it all over right
after `welcome`: the backlog. Hermes treats a message that arrives during a turn as an
interruption ("⚡ Interrupting current task") and may answer a later one first, so a
backlog message waits until the turn before it is over (`Hold.busy`). Live messages are
held only while a stopped run of their session is still ending (`Hold.stopping`).

Nothing waits by polling: consumers sleep on a `Signal` that the adapter pokes whenever
something the hold looks at changes (a turn starts or ends, Hermes releases a session,
a card opens, a message arrives), and wake at their deadline otherwise. Hermes' own
tables are watched through `WatchedDict`. No Hermes import here.
"""

from __future__ import annotations

import asyncio
import weakref
import collections
import logging
import re
import time
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional

from .common import chat_id_for, printable

logger = logging.getLogger(__name__)

# How long a message waits for Hermes to be ready for it (it lists this adapter as its
# `mobile` platform, its start-up restore is over) before it is handed over anyway.
REGISTER_WAIT = 30.0
# The longest a backlog message waits for the turn of the one before it to end.
BACKLOG_TURN_WAIT = 300.0
# Before the first backlog message: time for a turn Hermes resumes by itself to start
# (a one-off grace, not a poll: nothing tells us a resumed turn is about to begin).
BACKLOG_SETTLE = 0.2
# Messages that arrive this soon after `welcome` are the gateway's backlog (it hands
# over what it kept right after the handshake); later ones are live.
BACKLOG_WINDOW = 1.0
# The longest a message waits for a stopped run of its session to end (see Hold.stopping).
STOPPED_RUN_WAIT = 10.0
# Commands that must reach Hermes at once, never held behind a backlog turn.
URGENT_COMMANDS = {"stop", "approve", "deny", "cancel", "abort"}


def is_urgent(text: str) -> bool:
    """`/stop`, `/approve`, `/deny`…: a command (not a path like /home/x) to act on now."""
    m = re.match(r"^/([A-Za-z_]+)(?:@\S+)?(?:\s|$)", text.strip())
    return bool(m) and m.group(1).lower() in URGENT_COMMANDS


class Signal:
    """Wakes every waiter when poked: "something the holds look at changed"."""

    def __init__(self) -> None:
        self._waiters: set = set()

    def poke(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    async def wait(self, timeout: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        try:
            await asyncio.wait({fut}, timeout=timeout)
        finally:
            self._waiters.discard(fut)


async def wait_until(signal: Signal, pred: Callable[[], bool], timeout: float,
                     clock: Callable[[], float] = time.monotonic) -> bool:
    """Wait until `pred()` holds (re-checked on every poke); False at the deadline."""
    deadline = clock() + timeout
    while not pred():
        left = deadline - clock()
        if left <= 0:
            return False
        await signal.wait(left)
    return True


class WatchedDict(dict):
    """A dict that calls its listeners after every change.

    Hermes keeps the state the hold needs (its running agents, its adapter's session
    guards) in plain dicts and says nothing when they change; this stands in for such
    a dict so that a change wakes the inbox.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listeners: list = []

    def _changed(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                logger.debug("[mobile] a watcher failed", exc_info=True)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key):
        super().__delitem__(key)
        self._changed()

    def pop(self, *args):
        value = super().pop(*args)
        self._changed()
        return value

    def popitem(self):
        item = super().popitem()
        self._changed()
        return item

    def setdefault(self, key, default=None):
        value = super().setdefault(key, default)
        self._changed()
        return value

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self._changed()

    def clear(self):
        super().clear()
        self._changed()


def watch(owner: Any, attr: str, listener: Callable[[], None]) -> Optional[Callable[[], None]]:
    """Make `owner.attr` (a plain dict) a WatchedDict calling `listener`; return an
    unwatch function, or None when there is no such dict."""
    current = getattr(owner, attr, None)
    if not isinstance(current, WatchedDict):
        if type(current) is not dict:
            return None
        current = WatchedDict(current)
        setattr(owner, attr, current)
    current.listeners.append(listener)

    def unwatch() -> None:
        if listener in current.listeners:
            current.listeners.remove(listener)

    return unwatch


class Turns:
    """Hermes' turns per chat, and how many handed messages an `end_turn` covered.

    A turn runs from on_processing_start to on_processing_complete. A message that
    started no turn (a command answered at once, a message merged into a running turn)
    is covered by the adapter's own `end_turn` a little later.
    """

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self._running: Dict[str, int] = collections.defaultdict(int)
        self._handed: Dict[str, int] = collections.defaultdict(int)
        self._ended: Dict[str, int] = {}
        self._on_change = on_change

    def start(self, chat_id: str) -> None:
        self._running[chat_id] += 1
        self._on_change()

    def complete(self, chat_id: str) -> bool:
        """A turn ended; True when none is left running for the chat."""
        self._running[chat_id] = max(0, self._running.get(chat_id, 0) - 1)
        idle = self._running[chat_id] == 0
        if idle:
            self._running.pop(chat_id, None)
        self._on_change()
        return idle

    def handed(self, chat_id: str) -> int:
        """A message was handed to Hermes; its number in the chat."""
        self._handed[chat_id] += 1
        self._on_change()
        return self._handed[chat_id]

    def ended(self, chat_id: str) -> None:
        """`end_turn` went out: it covers every message handed so far."""
        self._ended[chat_id] = self._handed.get(chat_id, 0)
        self._on_change()

    def in_turn(self, chat_id: str) -> bool:
        return self._running.get(chat_id, 0) > 0

    def unended(self, chat_id: str, seq: int) -> bool:
        """No turn runs, and message `seq` is not yet covered by an end_turn."""
        return not self.in_turn(chat_id) and self._ended.get(chat_id, 0) < seq

    def busy(self, chat_id: str) -> bool:
        """A turn runs, or a handed message has not been ended yet."""
        return self.in_turn(chat_id) or self._ended.get(chat_id, 0) < self._handed.get(chat_id, 0)


class Hold:
    """What a backlog message waits for, read from the plugin's turns and Hermes' tables.

    `session_key(chat_id)` is Hermes' session key of a chat; `running()` Hermes' running
    agents and `guards()` its adapter's session guards (both keyed by session key);
    `asks(session_key)` whether Hermes waits for the user there; `ready()` whether
    Hermes is ready for messages at all; `registered(session_key)` whether a run of
    the session still has its callbacks registered with Hermes' tools; `stale(key)`
    whether the session's guard outlived its owner task (Hermes heals such a guard
    only when the next message comes, so it must not hold that message).
    """

    def __init__(
        self,
        turns: Turns,
        session_key: Callable[[str], Optional[str]],
        running: Callable[[], Optional[Mapping]],
        guards: Callable[[], Optional[Mapping]],
        asks: Callable[[str], bool],
        ready: Callable[[], bool] = lambda: True,
        registered: Callable[[str], bool] = lambda key: False,
        stale: Callable[[str], bool] = lambda key: False,
    ):
        self.turns = turns
        self._session_key = session_key
        self._running = running
        self._guards = guards
        self._asks = asks
        self._registered = registered
        self._stale = stale
        self.ready = ready

    def busy(self, device: str) -> bool:
        chat_id = chat_id_for(device)
        if self.turns.busy(chat_id):
            return True
        key = self._session_key(chat_id)
        if not key:
            return False
        # Hermes keeps the session's guard a little past on_processing_complete (its
        # cleanup awaits typing and debounce tasks first): a message handed over
        # before the guard goes is taken as an interruption of the turn that ended.
        if key in (self._running() or {}):
            return True
        return key in (self._guards() or {}) and not self._stale(key)

    def asks(self, device: str) -> bool:
        key = self._session_key(chat_id_for(device))
        return bool(key) and self._asks(key)

    def stopping(self, device: str) -> bool:
        """A stopped run of this chat's session is still unwinding.

        /stop and /new free the session in Hermes' runner at once, while the stopped
        run's thread goes on until it notices (an approval wait polls once a second).
        A run started meanwhile is torn down by the old one's cleanup, which
        unregisters the session's approval callback: its command then gets no card.
        """
        key = self._session_key(chat_id_for(device))
        if not key or not self._registered(key):
            return False
        return key not in (self._running() or {}) and key not in (self._guards() or {})


# How many (device, id) of taken messages are remembered to drop a redelivery.
TAKEN_REMEMBERED = 1024


class Inbox:
    """Per-device queues, each drained in order by one task through `hand_over`."""

    def __init__(
        self,
        hand_over: Callable[[Dict[str, Any]], Awaitable[None]],
        hold: Hold,
        *,
        clock: Callable[[], float] = time.monotonic,
        register_wait: float = REGISTER_WAIT,
        turn_wait: float = BACKLOG_TURN_WAIT,
        stopped_wait: float = STOPPED_RUN_WAIT,
        settle: float = BACKLOG_SETTLE,
        backlog_window: float = BACKLOG_WINDOW,
    ):
        self._hand_over = hand_over
        self._hold = hold
        self._clock = clock
        self._register_wait = register_wait
        self._turn_wait = turn_wait
        self._stopped_wait = stopped_wait
        self._settle = settle
        self._backlog_window = backlog_window
        self.signal = Signal()
        self._queues: Dict[str, "collections.deque"] = {}
        self._tasks: Dict[str, asyncio.Task] = {}
        self._linked_at = float("-inf")
        # (device, id) of the messages taken lately: a message the gateway hands over
        # again after its restart ("redelivered", L64) that this process already took
        # is dropped, so Hermes never answers it twice.
        self._taken: "collections.OrderedDict[tuple, None]" = collections.OrderedDict()

    def link_up(self) -> None:
        """The link is (back) up: what arrives now is the gateway's backlog."""
        self._linked_at = self._clock()

    def poke(self) -> None:
        self.signal.poke()

    def push(self, ev: Dict[str, Any]) -> None:
        device = str(ev.get("device") or "")
        if not device:
            return
        key = (device, str(ev.get("id") or ""))
        if ev.get("redelivered") is True and key in self._taken:
            logger.info("[mobile] %s: message %s handed over again after a gateway restart; already taken",
                        printable(device), printable(key[1]))
            return
        self._taken[key] = None
        while len(self._taken) > TAKEN_REMEMBERED:
            self._taken.popitem(last=False)
        backlog = self._clock() - self._linked_at < self._backlog_window
        self._queues.setdefault(device, collections.deque()).append((ev, backlog))
        if device not in self._tasks:
            task = asyncio.create_task(self._drain(device))
            self._tasks[device] = task
            task.add_done_callback(self._task_done)
            # Also when the task is cancelled before it ran at all (disconnect): a
            # stale entry would leave this device's later messages queued for good.
            task.add_done_callback(lambda t, d=device: self._tasks.get(d) is t and self._tasks.pop(d))
        # A /stop behind a held message ends the hold.
        self.poke()

    def pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def cancel(self) -> int:
        """Stop every consumer; return how many messages were never handed over."""
        for task in list(self._tasks.values()):
            task.cancel()
        dropped = self.pending()
        self._queues.clear()
        return dropped

    @staticmethod
    def _task_done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("[mobile] handler failed: %s", task.exception(), exc_info=task.exception())

    async def _drain(self, device: str) -> None:
        """Hand one device's messages to Hermes one by one, in arrival order.

        The hand-over returns as soon as Hermes has taken the message (the turn runs
        in its own task), so waiting for it costs nothing.
        """
        try:
            if not await wait_until(self.signal, self._hold.ready, self._register_wait, self._clock):
                logger.warning("[mobile] Hermes is not ready for the mobile adapter's messages after %.0f s; "
                               "handing messages over anyway", self._register_wait)
            queue = self._queues.get(device)
            settled = False
            while queue:
                if queue[0][1]:
                    if not settled:
                        await asyncio.sleep(self._settle)
                        settled = True
                    await self._until_free(device, queue)
                if not is_urgent(str(queue[0][0].get("text") or "")):
                    await wait_until(self.signal, lambda: not self._hold.stopping(device), self._stopped_wait,
                                     self._clock)
                ev, _backlog = queue.popleft()
                try:
                    await self._hand_over(ev)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("[mobile] a message from %s could not be handed to Hermes",
                                     printable(device))
        finally:
            if self._tasks.get(device) is asyncio.current_task():
                self._tasks.pop(device, None)
            if not self._queues.get(device):
                self._queues.pop(device, None)

    async def _until_free(self, device: str, queue: "collections.deque") -> None:
        """Before a backlog message, let the turn in progress for this chat end.

        The first one also waits for a turn Hermes resumed by itself (its last run was
        stopped in the middle of one). The hold ends at once when Hermes asks the user
        something (an approval or a clarify question: the next message may be the
        answer), or when a `/stop`, `/approve` or `/deny` waits anywhere behind.
        """
        def free() -> bool:
            if not self._hold.busy(device):
                return True
            if any(is_urgent(str(ev.get("text") or "")) for ev, _ in queue):
                return True
            return self._hold.asks(device)

        await wait_until(self.signal, free, self._turn_wait, self._clock)


def wake_from_anywhere(wake: Callable[[], None]) -> Callable[[], None]:
    """`wake` for a change made in any thread (Hermes runs its agents in threads)."""
    loop = asyncio.get_running_loop()

    def wake_in_loop() -> None:
        try:
            if asyncio.get_running_loop() is loop:
                wake()
                return
        except RuntimeError:
            pass  # not the loop's thread
        try:
            loop.call_soon_threadsafe(wake)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    return wake_in_loop


def guard_is_stale(adapter: Any, session_key: str) -> bool:
    """Hermes' own test (BasePlatformAdapter._session_task_is_stale): the session guard's
    owner task is done. Without it (another Hermes), no guard counts as stale."""
    check = getattr(adapter, "_session_task_is_stale", None)
    try:
        return bool(check and check(session_key))
    except Exception:
        return False


def watch_guard_owners(adapter: Any, wake: Callable[[], None]) -> None:
    """A guard's owner task (BasePlatformAdapter._session_tasks) that ends without
    clearing its guard leaves it stale: the end of each owner task wakes the hold."""
    seen: "weakref.WeakSet" = weakref.WeakSet()

    def on_change() -> None:
        for task in list(getattr(adapter, "_session_tasks", {}).values()):
            if task in seen or not hasattr(task, "add_done_callback"):
                continue
            seen.add(task)
            task.add_done_callback(lambda _task: wake())

    watch(adapter, "_session_tasks", on_change)


def watch_runner(runner: Any, wake_threadsafe: Callable[[], None], wake: Callable[[], None]) -> list:
    """Have Hermes wake the inbox when an agent its runner runs ends (its own resumed
    turns included), when its start-up restore is over, and when a run's thread is
    done; it tells its adapters none of these. Returns the unwatch functions."""
    unwatches = []
    try:
        from tools import approval

        # A run registers its approval callback when it starts and unregisters it
        # when its thread is done: the end of a stopped run (Hold.stopping).
        unwatches.append(watch(approval, "_gateway_notify_cbs", wake_threadsafe))
    except Exception:
        logger.debug("[mobile] cannot watch Hermes' approval callbacks", exc_info=True)
    if runner is None:
        return [u for u in unwatches if u is not None]
    unwatches.append(watch(runner, "_running_agents", wake_threadsafe))
    finish = getattr(runner, "_finish_startup_restore", None)
    if callable(finish) and getattr(runner, "_startup_restore_in_progress", False) \
            and not getattr(finish, "_mobile_wakes", False):
        async def finish_and_wake(*args, **kwargs):
            try:
                return await finish(*args, **kwargs)
            finally:
                wake()

        finish_and_wake._mobile_wakes = True
        runner._finish_startup_restore = finish_and_wake
    return [u for u in unwatches if u is not None]
