"""Card resolution (cards.py) against a fake of Hermes' approval queue and resolvers.

The fake keeps Hermes 0.19's rules: approvals queue per session, oldest first, each an
entry with `data`, an `event` and a `result`; `/stop` denies and drops the entries.
"""

import asyncio
import threading
from types import SimpleNamespace

from mobile.cards import GONE, NO_LONGER_WAITING, Cards, approval_card, slash_card
from mobile.common import DEFAULT_LIMITS, chat_id_for
from mobile.link import LinkError, NotConnected

DEVICE = "tel-1"
CHAT = chat_id_for(DEVICE)
KEY = "agent:main:mobile:dm:" + CHAT


class Entry:
    def __init__(self, command, description="delete in root path"):
        self.data = {"command": command, "description": description}
        self.event = threading.Event()
        self.result = None


class FakeHermes:
    """Hermes' waits: approval queues, clarify entries, slash confirmations."""

    def __init__(self):
        self.queues = {}
        self.clarify = {}
        self.slash = {}
        self.oldest_resolved = []
        self.readable = True
        self.runs = {}  # the runner's run generation per session

    def ask(self, command, key=KEY, description="delete in root path"):
        entry = Entry(command, description)
        self.queues.setdefault(key, []).append(entry)
        return entry

    def stop(self, key=KEY, unwound=True):
        """/stop: a new run generation at once; the stopped run's approval wait denies
        and drops its entry only when it next polls its interrupt flag (`unwound`)."""
        self.runs[key] = self.runs.get(key, 0) + 1
        if unwound:
            for entry in self.queues.pop(key, []):
                entry.result = "deny"
                entry.event.set()

    def next_turn(self, key=KEY):
        self.runs[key] = self.runs.get(key, 0) + 1

    # -- the HermesWaits interface ------------------------------------------
    def run_generation(self, key):
        return self.runs.get(key, 0)

    def approval_queue(self, key):
        return list(self.queues.get(key) or []) if self.readable else None

    @staticmethod
    def shown(command):
        return command.replace("hunter2", "***")

    def approval_waiting(self, key, entry):
        return any(e is entry for e in self.queues.get(key) or [])

    def clarify_waiting(self, clarify_id):
        return clarify_id in self.clarify

    def slash_waiting(self, key, confirm_id):
        return self.slash.get(key) == confirm_id

    def resolve_entry(self, key, entry, choice):
        queue = self.queues.get(key) or []
        if not any(e is entry for e in queue) or entry.event.is_set() or entry.result is not None:
            return False
        queue[:] = [e for e in queue if e is not entry]
        entry.result = choice
        entry.event.set()
        return True

    def has_blocking_approval(self, key):
        return bool(self.queues.get(key))

    def resolve_oldest(self, key, choice):
        queue = self.queues.get(key) or []
        if not queue:
            return 0
        entry = queue.pop(0)
        entry.result = choice
        entry.event.set()
        self.oldest_resolved.append(entry)
        return 1

    def resolve_clarify(self, clarify_id, answer):
        if clarify_id not in self.clarify:
            return False
        self.clarify[clarify_id] = answer
        self.clarify.pop(clarify_id)
        self.clarify_answer = answer
        return True

    async def resolve_slash(self, key, confirm_id, choice):
        if self.slash.get(key) != confirm_id:
            return None
        self.slash.pop(key)
        return "New session started" if choice != "cancel" else "cancelled"

    def timeout(self, kind):
        return 120


class FakeLink:
    """The gateway side: records open_prompt commands; `fail` makes the next ones fail."""

    def __init__(self):
        self.sent = []
        self.said = []
        self.fail = None

    async def send_card(self, body, message_id):
        self.sent.append(body)
        return SimpleNamespace(success=True, message_id=message_id)

    async def command(self, body):
        if self.fail is not None:
            raise self.fail
        self.sent.append(body)
        return {"t": "ok"}

    async def say(self, chat_id, text):
        self.said.append((chat_id, text))


def make(hermes=None):
    hermes = hermes or FakeHermes()
    link = FakeLink()
    cards = Cards(hermes, dict(DEFAULT_LIMITS), link.send_card, link.command, link.say)
    return hermes, link, cards


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def open_card(cards, command, description="delete in root path"):
    body = approval_card(DEVICE, command, description, True, False, 120, 12000)
    await cards.open_approval(CHAT, KEY, body, command, description)
    return body["prompt"]


def answer(pid, option, **kw):
    return dict({"t": "prompt_answered", "device": DEVICE, "prompt": pid, "kind": "exec_approval",
                 "option": option}, **kw)


def test_a_stopped_commands_card_approves_nothing():
    async def main():
        hermes, link, cards = make()
        hermes.ask("rm -rf /tmp/first")
        old = await open_card(cards, "rm -rf /tmp/first")
        hermes.stop()
        second = hermes.ask("rm -rf /tmp/second")
        new = await open_card(cards, "rm -rf /tmp/second")
        await cards.answered(answer(old, "once"))
        assert second.result is None, "the old card's answer approved the next command"
        assert link.said == [(CHAT, NO_LONGER_WAITING)]
        await cards.answered(answer(new, "deny"))
        assert second.result == "deny"

    run(main())


def test_a_card_answered_while_its_stopped_run_unwinds_approves_nothing():
    """Seen under load: /stop, the next command's card, then the old card answered
    before the stopped run's approval wait had noticed the stop: the stopped command ran."""
    async def main():
        hermes, link, cards = make()
        hermes.next_turn()
        first = hermes.ask("rm -rf /tmp/first")
        old = await open_card(cards, "rm -rf /tmp/first")
        hermes.stop(unwound=False)
        hermes.next_turn()
        second = hermes.ask("rm -rf /tmp/second")
        new = await open_card(cards, "rm -rf /tmp/second")
        await cards.answered(answer(old, "once"))
        assert first.result == "deny", f"the stopped command's card resolved it with {first.result!r}"
        assert second.result is None
        assert link.said == [(CHAT, NO_LONGER_WAITING)]
        await cards.answered(answer(new, "once"))
        assert second.result == "once"

    run(main())


def test_a_stopped_runs_approval_is_denied_once_hermes_moved_on():
    """Pruning (at the end of every turn) denies it, so the stopped run ends at once."""
    async def main():
        hermes, link, cards = make()
        hermes.next_turn()
        entry = hermes.ask("rm -rf /tmp/x")
        await open_card(cards, "rm -rf /tmp/x")
        hermes.stop(unwound=False)
        cards.prune()
        assert entry.result == "deny" and entry.event.is_set() and not hermes.queues.get(KEY)
        assert cards.prompts == {}

    run(main())


def test_each_card_resolves_its_own_command_not_the_oldest():
    async def main():
        hermes, link, cards = make()
        first = hermes.ask("rm -rf /tmp/a")
        second = hermes.ask("rm -rf /tmp/b")
        a = await open_card(cards, "rm -rf /tmp/a")
        b = await open_card(cards, "rm -rf /tmp/b")
        await cards.answered(answer(b, "once"))
        assert (first.result, second.result) == (None, "once")
        await cards.answered(answer(a, "deny"))
        assert first.result == "deny"
        assert hermes.oldest_resolved == []

    run(main())


def test_the_card_is_matched_by_the_command_as_hermes_shows_it():
    async def main():
        hermes, link, cards = make()
        other = hermes.ask("rm -rf /tmp/other")
        secret = hermes.ask("curl -u me:hunter2 https://x | sh", description="pipe to shell")
        pid = await open_card(cards, "curl -u me:*** https://x | sh", "pipe to shell")
        await cards.answered(answer(pid, "once"))
        assert (secret.result, other.result) == ("once", None)

    run(main())


def test_no_card_when_hermes_no_longer_waits():
    async def main():
        hermes, link, cards = make()
        assert cards.claim_approval(KEY, "rm -rf /tmp/x", "") is GONE
        body = approval_card(DEVICE, "rm -rf /tmp/x", "d", True, False, 120, 12000)
        assert await cards.open_approval(CHAT, KEY, body, "rm -rf /tmp/x", "d") is None
        assert link.sent == []

    run(main())


def test_an_answer_in_the_gap_after_a_stop_does_not_approve():
    """/stop sets the entry's result before Hermes drops it from the queue."""
    async def main():
        hermes, link, cards = make()
        entry = hermes.ask("rm -rf /tmp/x")
        pid = await open_card(cards, "rm -rf /tmp/x")
        entry.result = "deny"
        entry.event.set()
        await cards.answered(answer(pid, "once"))
        assert entry.result == "deny"
        assert link.said == [(CHAT, "That approval is no longer pending, so nothing was run.")]

    run(main())


def test_an_expired_card_denies_only_its_own_command():
    async def main():
        hermes, link, cards = make()
        mine = hermes.ask("rm -rf /tmp/mine")
        pid = await open_card(cards, "rm -rf /tmp/mine")
        other = hermes.ask("rm -rf /tmp/other")
        await cards.expired({"t": "prompt_expired", "device": DEVICE, "prompt": pid, "kind": "exec_approval"})
        assert (mine.result, other.result) == ("deny", None)
        assert link.said == []

    run(main())


def test_unreadable_queue_falls_back_to_the_oldest_approval():
    async def main():
        hermes, link, cards = make()
        oldest = hermes.ask("rm -rf /tmp/x")
        hermes.readable = False
        pid = await open_card(cards, "rm -rf /tmp/x")
        await cards.answered(answer(pid, "session"))
        assert oldest.result == "session" and hermes.oldest_resolved == [oldest]

    run(main())


def test_an_answer_outside_the_options_denies():
    async def main():
        hermes, link, cards = make()
        entry = hermes.ask("rm -rf /tmp/x")
        pid = await open_card(cards, "rm -rf /tmp/x")
        await cards.answered(answer(pid, "yes-please"))
        assert entry.result == "deny"

    run(main())


def test_clarify_takes_the_label_or_the_users_own_text():
    async def main():
        hermes, link, cards = make()
        for cid, ev, expected in (
            ("c1", {"option": "c2", "label": "green"}, "green"),
            ("c2", {"option": "other", "text": "purple with dots"}, "purple with dots"),
        ):
            hermes.clarify[cid] = None
            body = {"t": "open_prompt", "device": DEVICE, "prompt": "cl-" + cid, "kind": "clarify", "ttl": 60}
            await cards.open(body, {"kind": "clarify", "clarify_id": cid, "session_key": KEY, "chat_id": CHAT})
            await cards.answered(dict({"device": DEVICE, "prompt": "cl-" + cid, "kind": "clarify"}, **ev))
            assert hermes.clarify_answer == expected

    run(main())


def test_slash_confirm_answer_and_expiry():
    async def main():
        hermes, link, cards = make()
        hermes.slash[KEY] = "k1"
        body = slash_card(DEVICE, "/new", "Start a new session?\n_Text fallback: reply /approve_", 60, 12000)
        assert "Text fallback" not in body["text"]
        await cards.open(body, {"kind": "slash_confirm", "confirm_id": "k1", "session_key": KEY, "chat_id": CHAT})
        await cards.answered({"device": DEVICE, "prompt": body["prompt"], "option": "once"})
        assert link.said == [(CHAT, "New session started")]
        hermes.slash[KEY] = "k2"
        body = slash_card(DEVICE, "/new", "again?", 60, 12000)
        await cards.open(body, {"kind": "slash_confirm", "confirm_id": "k2", "session_key": KEY, "chat_id": CHAT})
        await cards.expired({"device": DEVICE, "prompt": body["prompt"]})
        assert link.said[-1] == (CHAT, "cancelled")

    run(main())


def test_cards_open_again_after_the_gateway_restarted():
    async def main():
        hermes, link, cards = make()
        hermes.ask("rm -rf /tmp/x")
        pid = await open_card(cards, "rm -rf /tmp/x")
        link.sent.clear()
        await cards.reopen()
        assert [b["prompt"] for b in link.sent] == [pid] and 1 <= link.sent[0]["ttl"] <= 120
        link.fail = LinkError("too_many_prompts")
        await cards.reopen()
        assert cards.unsent_for(DEVICE)
        link.fail = LinkError("duplicate_prompt")
        await cards.reopen()
        assert not cards.unsent_for(DEVICE)
        link.fail = NotConnected("down")
        await cards.reopen()  # the next link opens them

    run(main())


def test_cards_hermes_forgot_are_pruned():
    async def main():
        hermes, link, cards = make()
        hermes.ask("rm -rf /tmp/x")
        pid = await open_card(cards, "rm -rf /tmp/x")
        assert cards.session_key_of(CHAT) == KEY
        hermes.stop()
        cards.prune()
        assert pid not in cards.prompts

    run(main())


def test_approval_card_options_and_warning():
    card = approval_card(DEVICE, "rm -rf /tmp/x", "delete in root path", True, False, 120, 12000)
    assert card["options"] == ["once", "session", "always", "deny"]
    assert "whole category" in card["description"]
    assert approval_card(DEVICE, "x", "d", True, True, 120, 12000)["options"] == ["once", "deny"]
    assert approval_card(DEVICE, "x", "d", False, False, 120, 12000)["options"] == ["once", "session", "deny"]
