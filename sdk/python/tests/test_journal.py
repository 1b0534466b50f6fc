"""The gateway's journal as this client uses it (issue 24, docs/decisions-local.md L56-L60):
`received` as the confirmation of a send, resume (within a run, and across runs through
`seq_file`), `history()` pages and `forget()`, against the real release gateway."""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import tempfile
from collections.abc import Awaitable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hermes_mobile_client import (
    Card,
    CardDone,
    Confirmed,
    Event,
    HermesError,
    History,
    HistoryItem,
    Media,
    Message,
    Resumed,
    UserMessage,
    connect,
    validate_card,
)

from conftest import TOKEN, Gateway, start_gateway, stop_gateway

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 30) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def device(name: str) -> str:
    return f"py-{name}-{secrets.token_hex(4)}"


class Frames:
    """A frame hook that keeps what one client sent and received."""

    def __init__(self) -> None:
        self.out: list[Mapping[str, Any]] = []
        self.inn: list[Mapping[str, Any]] = []

    def __call__(self, direction: str, frame: Mapping[str, Any]) -> None:
        (self.out if direction == "out" else self.inn).append(frame)

    def sent(self, t: str) -> list[Mapping[str, Any]]:
        return [f for f in self.out if f.get("t") == t]

    def got(self, t: str) -> list[Mapping[str, Any]]:
        return [f for f in self.inn if f.get("t") == t]


async def until(c: Any, done: Any, timeout: float = 10) -> list[Event]:
    """Events until `done(events so far)` holds."""
    events: list[Event] = []
    while not done(events):
        events.append(await c.next_event(timeout))
    return events


def texts(events: list[Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, Message) and e.final]


@pytest.fixture(scope="module")
def history_off() -> Iterator[Gateway]:
    state_dir = Path(tempfile.mkdtemp(prefix="hermes-sdk-python-nohistory-"))
    g = start_gateway(state_dir, settings={"MOBILE_HISTORY": "off"})
    try:
        yield g
    finally:
        stop_gateway(g)
        shutil.rmtree(state_dir, ignore_errors=True)


def test_ready_gives_the_seq_and_how_much_history_is_kept(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway.url, token=TOKEN, device_id=device("ready")) as c:
            ready = await c.wait_online(10)
            assert ready.seq == 0, "a device with no entries (L56)"
            assert ready.capabilities["history"] == {"items": 5000, "days": 30}

    run(scenario())


def test_a_send_is_confirmed_by_received_once_it_is_on_disk(gateway: Gateway, tmp_path: Path) -> None:
    frames = Frames()

    async def scenario() -> None:
        async with connect(
            gateway.url, token=TOKEN, device_id=device("recv"), seq_file=tmp_path / "seq", frame_hook=frames
        ) as c:
            await c.wait_online(10)
            mid = c.send_text("keep this", id="m-keep-1")
            ok = await c.wait_for(Confirmed, timeout=10)
            assert (ok.id, ok.type) == (mid, "text")
            assert ok.seq is not None
            assert ok.seq >= 1
            assert await mid == mid
            await c.wait_for(Message, lambda m: m.text == "echo: keep this", timeout=10)
            # The same id again (a re-send, I1): dropped, and received again with its seq.
            again = c.send_text("keep this", id="m-keep-1")
            ok2 = await c.wait_for(Confirmed, timeout=10)
            assert (ok2.id, ok2.seq) == (again, ok.seq)
            c.send_text("next")
            rest = await until(c, lambda ev: "echo: next" in texts(ev))
            assert texts(rest) == ["echo: next"], "the re-sent message reached the agent once"

    run(scenario())
    assert frames.sent("hello")[0]["resume"] == {"after": 0}, "a new client resumes after 0 (L56)"
    assert [f["id"] for f in frames.got("received")] == [
        "m-keep-1",
        "m-keep-1",
        frames.sent("text")[-1]["id"],
    ]
    assert frames.sent("ping") == [], "no confirming ping after a message that received confirms"


def test_a_reconnect_resumes_after_the_highest_seq_received(gateway: Gateway) -> None:
    frames = Frames()
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight"]

    async def scenario() -> None:
        async with connect(
            gateway.url, token=TOKEN, device_id=device("mem"), frame_hook=frames, backoff_min=0.05
        ) as c:
            c.send_text("/stream " + " ".join(words))
            v1 = await c.wait_for(Message, timeout=10)
            assert v1.text == "one"
            assert v1.seq is not None
            c.reconnect()  # mid-stream
            events = await until(
                c, lambda ev: any(isinstance(e, Resumed) for e in ev) and " ".join(words) in texts(ev)
            )
            versions = [e for e in events if isinstance(e, Message)]
            assert all(" ".join(words).startswith(m.text) for m in versions)
            assert texts(events) == [" ".join(words)], "the final version once, nothing twice"
            assert {m.id for m in versions} == {v1.id}

    run(scenario())
    hellos = frames.sent("hello")
    assert len(hellos) == 2
    assert hellos[0]["resume"] == {"after": 0}, "no seq_file: a new client (L56)"
    assert hellos[1]["resume"]["after"] >= 1


def test_the_next_run_resumes_after_the_seq_in_seq_file_and_gets_nothing_twice(
    gateway: Gateway, tmp_path: Path
) -> None:
    dev, seq_file = device("runs"), tmp_path / "hermes.seq"

    async def first_run() -> int:
        async with connect(gateway.url, token=TOKEN, device_id=dev, seq_file=seq_file) as c:
            c.send_text("one")
            one = await c.wait_for(Message, lambda m: m.text == "echo: one", timeout=10)
            await c.send_text("two")  # on disk; its reply is not taken before the end
            assert one.seq is not None
            return one.seq

    async def next_run() -> tuple[list[Event], int]:
        async with connect(gateway.url, token=TOKEN, device_id=dev, seq_file=seq_file) as c:
            events = await until(
                c, lambda ev: any(isinstance(e, Resumed) for e in ev) and "echo: two" in texts(ev)
            )
        return events, c.seq  # the last event taken counts once the client is closed

    async def last_run() -> list[Event]:
        async with connect(gateway.url, token=TOKEN, device_id=dev, seq_file=seq_file) as c:
            events = await until(c, lambda ev: any(isinstance(e, Resumed) for e in ev))
            c.send_text("three")
            events += await until(c, lambda ev: "echo: three" in texts(ev))
            return events

    one_seq = run(first_run())
    assert int(seq_file.read_text()) == one_seq, "the last event taken is kept"
    events, kept = run(next_run())
    assert texts(events) == ["echo: two"], "what the last run did not take, once; not what it took"
    assert kept > one_seq
    assert int(seq_file.read_text()) == kept
    events = run(last_run())
    assert texts(events) == ["echo: three"], "nothing again"


def test_an_event_the_application_failed_on_comes_again_on_the_next_run(
    gateway: Gateway, tmp_path: Path
) -> None:
    dev, seq_file = device("crash"), tmp_path / "seq"

    async def failing_run() -> None:
        async with connect(gateway.url, token=TOKEN, device_id=dev, seq_file=seq_file) as c:
            c.send_text("handle me")
            await c.wait_for(Message, lambda m: m.text == "echo: handle me", timeout=10)
            raise RuntimeError("the application failed on it")

    async def next_run() -> list[Event]:
        async with connect(gateway.url, token=TOKEN, device_id=dev, seq_file=seq_file) as c:
            return await until(c, lambda ev: any(isinstance(e, Resumed) for e in ev))

    with pytest.raises(RuntimeError):
        run(failing_run())
    assert not seq_file.exists(), "nothing was handled"
    assert texts(run(next_run())) == ["echo: handle me"]


def test_a_seq_above_the_gateways_means_a_new_journal_replayed_from_0(
    gateway: Gateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dev, seq_file, frames = device("reset"), tmp_path / "seq", Frames()

    async def earlier_run() -> None:
        async with connect(gateway.url, token=TOKEN, device_id=dev) as c:
            c.send_text("in the new journal")
            await c.wait_for(Message, timeout=10)

    async def scenario() -> list[Event]:
        seq_file.write_text("1000000\n")  # from a journal this gateway no longer has
        async with connect(
            gateway.url, token=TOKEN, device_id=dev, seq_file=seq_file, frame_hook=frames
        ) as c:
            return await until(c, lambda ev: any(isinstance(e, Resumed) for e in ev))

    run(earlier_run())
    with caplog.at_level(logging.WARNING, logger="hermes_mobile_client"):
        events = run(scenario())
    assert "a new journal" in caplog.text
    assert [h["resume"] for h in frames.sent("hello")] == [{"after": 1000000}, {"after": 0}]
    assert texts(events) == ["echo: in the new journal"], "all of the new journal, once"
    assert int(seq_file.read_text()) < 1000000


def test_a_card_replayed_as_closed_since_has_no_time_left() -> None:
    async def scenario() -> None:
        c = connect("ws://127.0.0.1:9/ws", token=TOKEN)
        card = validate_card(
            {"t": "prompt", "id": "p1", "kind": "slash_confirm", "text": "Deploy?", "session": "mobile:x",
             "options": [{"id": "once", "label": "Yes"}], "timeout_seconds": 0, "seq": 6}
        )  # fmt: skip
        assert card is not None
        assert (card.timeout_seconds, card.seq) == (0, 6)
        c.cards[card.id] = card
        with pytest.raises(HermesError) as e:
            c.answer(card, "once")  # its prompt_done (L58) is on the way
        assert e.value.code == "prompt_closed"

    run(scenario())


def test_a_seq_file_that_holds_no_seq_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "seq"
    bad.write_text("twelve")
    with pytest.raises(HermesError) as e:
        connect("ws://127.0.0.1:9/ws", token=TOKEN, seq_file=bad)
    assert e.value.code == "bad_config"


def summary(item: HistoryItem) -> tuple[Any, ...]:
    if isinstance(item, UserMessage):
        return ("user", item.type, item.text or item.filename)
    if isinstance(item, Message):
        return ("message", item.text, item.final)
    if isinstance(item, Media):
        return ("media", item.kind, item.filename, item.size, item.data)
    assert isinstance(item, Card)
    return ("card", item.kind, item.command, item.state, item.answered, item.timeout_seconds)


def test_history_pages_back_through_the_conversation(gateway: Gateway) -> None:
    async def scenario() -> tuple[list[History], History]:
        async with connect(gateway.url, token=TOKEN, device_id=device("hist")) as c:
            c.send_text("first")
            await c.wait_for(Message, lambda m: m.text == "echo: first", timeout=10)
            c.send_text("/stream a b c")
            await c.wait_for(Message, lambda m: m.final and m.text == "a b c", timeout=10)
            c.send_file(b"abc", filename="a.txt")
            await c.wait_for(Media, timeout=10)
            c.send_text("/approve ls")
            card = await c.wait_for(Card, timeout=10)
            c.answer(card, "once")
            await c.wait_for(CardDone, timeout=10)
            await c.wait_for(Message, lambda m: m.text == "approved (once): ls", timeout=10)
            c.send_audio(b"RIFF" + bytes(100), text="hi")
            await c.wait_for(Message, lambda m: m.text.startswith("heard"), timeout=10)
            pages = [await c.history(limit=3)]
            while pages[-1].more:
                pages.append(await c.history(before=pages[-1].next_before, limit=3))
            whole = await c.history(limit=500)  # cut to 200
            return pages, whole

    pages, whole = run(scenario())
    assert not whole.more
    assert [summary(i) for i in whole.items] == [
        ("user", "text", "first"),
        ("message", "echo: first", True),
        ("user", "text", "/stream a b c"),
        ("message", "a b c", True),  # one item, its latest version
        ("user", "media", "a.txt"),
        ("message", "got document a.txt (3 bytes, text/plain)", True),
        ("media", "document", "a.txt", 3, None),  # no bytes in history
        ("user", "text", "/approve ls"),
        ("card", "exec_approval", "ls", "done", "once", 0),
        ("message", "approved (once): ls", True),
        ("user", "audio", "hi"),
        ("message", "heard 104 bytes of wav: hi", True),
    ]
    seqs = [i.seq for i in whole.items if i.seq is not None]
    assert len(seqs) == len(whole.items)
    assert seqs == sorted(set(seqs)), "oldest first, one item per entry"
    assert all(len(p.items) <= 3 for p in pages)
    paged = [i for p in reversed(pages) for i in p.items]
    assert [i.seq for i in paged] == seqs, "the pages together are the whole, each entry once"
    audio = whole.items[10]
    assert isinstance(audio, UserMessage)
    assert (audio.format, audio.size) == ("wav", 104)


def test_forget_keeps_only_open_cards_and_seqs_go_on(gateway: Gateway, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with connect(
            gateway.url, token=TOKEN, device_id=device("forget"), seq_file=tmp_path / "s"
        ) as c:
            c.send_text("forget me")
            reply = await c.wait_for(Message, lambda m: m.text == "echo: forget me", timeout=10)
            c.send_text("/approve rm -r build")
            card = await c.wait_for(Card, timeout=10)
            before = await c.history()
            kept = before.items[-1]
            assert isinstance(kept, Card)
            assert 0 < kept.timeout_seconds <= card.timeout_seconds, "the seconds it has left"
            assert [summary(i) for i in before.items] == [
                ("user", "text", "forget me"),
                ("message", "echo: forget me", True),
                ("user", "text", "/approve rm -r build"),
                ("card", "exec_approval", "rm -r build", "open", None, kept.timeout_seconds),
            ]
            await c.forget()
            page = await c.history()
            assert [summary(i) for i in page.items] == [summary(kept)], "L60: open cards stay"
            assert not page.more
            mid = c.send_text("still here")
            ok = await c.wait_for(Confirmed, lambda x: x.id == mid, timeout=10)
            assert reply.seq is not None
            assert ok.seq is not None
            assert ok.seq > reply.seq, "L60: seqs never go back"
            c.answer(card, "deny")
            await c.wait_for(Message, lambda m: m.text == "denied: rm -r build", timeout=10)

    run(scenario())


def test_with_history_off_received_and_resume_work_and_history_is_refused(
    history_off: Gateway, tmp_path: Path
) -> None:
    frames = Frames()

    async def scenario() -> None:
        async with connect(
            history_off.url, token=TOKEN, device_id=device("off"), seq_file=tmp_path / "s", frame_hook=frames
        ) as c:
            ready = await c.wait_online(10)
            assert ready.seq == 0
            assert "history" not in ready.capabilities
            await c.wait_for(Resumed, timeout=10)
            mid = c.send_text("hello")
            ok = await c.wait_for(Confirmed, lambda x: x.id == mid, timeout=10)
            assert ok.seq is not None
            with pytest.raises(HermesError) as e:
                await c.history()
            assert e.value.code == "unsupported_frame"

    run(scenario())
    assert frames.sent("history") == [], "refused by the client from ready, not sent"
