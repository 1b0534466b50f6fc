"""The per-device ordered inbox and the hold of the gateway's backlog (inbox.py).

A fake Hermes: `FakeHermes.hand_over` takes a message the way Hermes' handle_message
does (it returns at once; the turn runs on), and the test plays the turn's lifecycle
(on_processing_start/complete, the session guard Hermes keeps a little longer).
"""

import asyncio

from mobile.common import chat_id_for
from mobile.inbox import Hold, Inbox, Signal, Turns, WatchedDict, is_urgent, wait_until

DEVICE = "tel-1"
CHAT = chat_id_for(DEVICE)
KEY = "agent:main:mobile:dm:" + CHAT


class FakeHermes:
    def __init__(self):
        self.handed = []
        self.running = WatchedDict()  # Hermes' runner._running_agents
        self.guards = WatchedDict()  # the adapter's _active_sessions (session guards)
        self.waits_for_user = False
        self.ready = True
        self.registered = WatchedDict()  # tools.approval._gateway_notify_cbs
        self.inbox = None
        self.turns = Turns(lambda: self.inbox and self.inbox.poke())
        for table in (self.running, self.guards, self.registered):
            table.listeners.append(lambda: self.inbox.poke())
        self.stale = set()
        self.hold = Hold(self.turns, lambda chat: KEY if chat == CHAT else None, lambda: self.running,
                         lambda: self.guards, lambda key: self.waits_for_user, lambda: self.ready,
                         lambda key: key in self.registered, lambda key: key in self.stale)

    async def hand_over(self, ev):
        self.turns.handed(chat_id_for(ev["device"]))
        self.handed.append(ev["text"])

    def make_inbox(self, **kw):
        kw.setdefault("settle", 0.01)
        kw.setdefault("turn_wait", 5.0)
        kw.setdefault("register_wait", 5.0)
        self.inbox = Inbox(self.hand_over, self.hold, **kw)
        return self.inbox

    # One turn of Hermes, as the adapter sees it.
    def turn_starts(self):
        self.guards[KEY] = asyncio.Event()
        self.turns.start(CHAT)

    def turn_ends(self, keep_guard=False):
        self.turns.complete(CHAT)
        self.turns.ended(CHAT)
        if not keep_guard:
            del self.guards[KEY]


def msg(text, device=DEVICE):
    return {"t": "message", "device": device, "id": text, "text": text}


async def settle(seconds=0.05):
    await asyncio.sleep(seconds)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_live_messages_keep_their_order_even_when_a_hand_over_is_slow():
    order = []

    async def slow_first(ev):
        if ev["text"] == "photo":
            await asyncio.sleep(0.1)  # a file saved in a thread
        order.append(ev["text"])

    async def main():
        inbox = Inbox(slow_first, Hold(Turns(), lambda c: None, lambda: None, lambda: None, lambda k: False))
        for text in ("photo", "after the photo", "third"):
            inbox.push(msg(text))
        await settle(0.3)
        assert order == ["photo", "after the photo", "third"]

    run(main())


def test_a_redelivered_message_already_taken_is_dropped():
    # L64: after a gateway restart, a message it could not know was handed over comes again
    # with "redelivered": true; one this process took is not answered twice.
    order = []

    async def take(ev):
        order.append(ev["text"])

    async def main():
        inbox = Inbox(take, Hold(Turns(), lambda c: None, lambda: None, lambda: None, lambda k: False))
        inbox.push(msg("one"))
        inbox.push(dict(msg("one"), redelivered=True))
        inbox.push(dict(msg("two"), redelivered=True))  # never taken: this is its first time
        inbox.push(msg("one"))  # not flagged: a new message the gateway let through (I2 passed)
        await settle(0.2)
        assert order == ["one", "two", "one"]

    run(main())


def test_live_messages_are_never_held_behind_a_turn():
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.push(msg("one"))
        await settle()
        h.turn_starts()
        inbox.push(msg("two"))  # the user writes again during the turn: Hermes decides
        await settle()
        assert h.handed == ["one", "two"]

    run(main())


def test_backlog_waits_for_each_turn_to_end():
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.link_up()
        for text in ("alpha", "bravo", "charlie"):
            inbox.push(msg(text))
        await settle()
        assert h.handed == ["alpha"]
        h.turn_starts()
        await settle()
        assert h.handed == ["alpha"], "bravo was handed over during alpha's turn"
        h.turn_ends()
        await settle()
        assert h.handed == ["alpha", "bravo"]
        h.turn_starts()
        h.turn_ends()
        await settle()
        assert h.handed == ["alpha", "bravo", "charlie"]

    run(main())


def test_backlog_waits_for_hermes_to_release_the_session_guard():
    """Hermes keeps its session guard a little past on_processing_complete; a message
    handed over before the guard goes is an interruption ("Interrupting current task")."""
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.link_up()
        inbox.push(msg("alpha"))
        inbox.push(msg("bravo"))
        await settle()
        h.turn_starts()
        h.turn_ends(keep_guard=True)
        await settle()
        assert h.handed == ["alpha"], "bravo was handed over while Hermes still held alpha's session"
        del h.guards[KEY]
        await settle()
        assert h.handed == ["alpha", "bravo"]

    run(main())


def test_a_stale_session_guard_does_not_hold_the_backlog():
    """Hermes heals a guard whose owner task has exited only when the next message comes
    (_session_task_is_stale): holding that message for the guard would wait for ever."""
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.link_up()
        inbox.push(msg("alpha"))
        inbox.push(msg("bravo"))
        await settle()
        h.turn_starts()
        h.turn_ends(keep_guard=True)
        await settle()
        assert h.handed == ["alpha"]
        h.stale.add(KEY)  # its owner task is done: the guard is stale
        inbox.push(msg("charlie", device="tel-2"))  # any news makes the hold look again
        await settle()
        assert h.handed[:2] == ["alpha", "bravo"], h.handed

    run(main())


def test_backlog_waits_for_a_turn_hermes_runs_by_itself():
    """A turn Hermes resumed at start-up runs an agent without on_processing_start."""
    async def main():
        h = FakeHermes()
        h.running[KEY] = object()
        inbox = h.make_inbox()
        inbox.link_up()
        inbox.push(msg("alpha"))
        await settle()
        assert h.handed == []
        h.running.pop(KEY)
        await settle()
        assert h.handed == ["alpha"]

    run(main())


def test_a_message_waits_for_a_stopped_run_to_end():
    """/stop frees the session in Hermes' runner at once, but the stopped run's thread
    goes on for a while; a run started meanwhile lost its approval callback to the old
    run's cleanup (seen under load: the next command never got its card)."""
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.push(msg("please delete first"))
        await settle()
        h.turn_starts()
        h.registered[KEY] = "the run's approval callback"
        inbox.push(msg("/stop"))  # urgent: straight through
        await settle()
        h.turn_ends()  # Hermes' /stop: running state and guard released at once
        inbox.push(msg("please delete second"))
        await settle()
        assert h.handed == ["please delete first", "/stop"], "handed over while the stopped run unwound"
        del h.registered[KEY]  # the stopped run's thread is done
        await settle()
        assert h.handed[-1] == "please delete second"

    run(main())


def test_an_urgent_command_behind_ends_the_hold():
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.link_up()
        inbox.push(msg("alpha"))
        inbox.push(msg("bravo"))
        await settle()
        h.turn_starts()
        await settle()
        assert h.handed == ["alpha"]
        inbox.push(msg("/stop"))
        await settle()
        assert h.handed == ["alpha", "bravo", "/stop"]

    run(main())


def test_a_question_from_hermes_ends_the_hold():
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.link_up()
        inbox.push(msg("delete it"))
        inbox.push(msg("yes"))
        await settle()
        h.turn_starts()
        await settle()
        h.waits_for_user = True
        inbox.poke()  # the adapter pokes when Hermes opens a card
        await settle()
        assert h.handed == ["delete it", "yes"]

    run(main())


def test_the_hold_gives_up_at_its_deadline():
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox(turn_wait=0.2)
        inbox.link_up()
        inbox.push(msg("alpha"))
        inbox.push(msg("bravo"))
        await settle()
        h.turn_starts()
        await settle(0.4)
        assert h.handed == ["alpha", "bravo"]

    run(main())


def test_messages_wait_until_hermes_is_ready():
    async def main():
        h = FakeHermes()
        h.ready = False
        inbox = h.make_inbox()
        inbox.push(msg("early"))
        await settle()
        assert h.handed == []
        h.ready = True
        inbox.poke()
        await settle()
        assert h.handed == ["early"]

    run(main())


def test_devices_do_not_wait_for_each_other():
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.link_up()
        inbox.push(msg("alpha"))
        inbox.push(msg("bravo"))
        await settle()
        h.turn_starts()
        inbox.push(msg("other phone", device="tel-2"))
        await settle()
        assert h.handed == ["alpha", "other phone"]

    run(main())


def test_cancel_counts_what_was_never_handed_over():
    async def main():
        h = FakeHermes()
        inbox = h.make_inbox()
        inbox.link_up()
        for text in ("alpha", "bravo", "charlie"):
            inbox.push(msg(text))
        await settle()
        h.turn_starts()
        await settle()
        assert inbox.cancel() == 2

    run(main())


def test_waiting_does_not_poll():
    """A hold re-checks only when poked (or at its deadline), never on a timer."""
    calls = []

    def pred():
        calls.append(1)
        return False

    async def main():
        signal = Signal()
        assert not await wait_until(signal, pred, 0.3)
        assert len(calls) == 2  # at the start, and once more at the deadline
        calls.clear()
        waiter = asyncio.create_task(wait_until(signal, pred, 1.0))
        await settle(0.3)
        assert len(calls) == 1
        signal.poke()
        await settle()
        assert len(calls) == 2
        waiter.cancel()

    run(main())


def test_urgent_commands():
    assert is_urgent("/stop") and is_urgent("  /deny now") and is_urgent("/approve@bot")
    assert not is_urgent("/home/x/file") and not is_urgent("/new") and not is_urgent("stop")
