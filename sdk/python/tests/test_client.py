"""The asyncio client against the real release gateway and its demo agent
(docs/demo-agent.md): the same scenarios as the TypeScript SDK's tests, and the rules
shared with web/protocol.js (reconnects, ids, the outbox, keep-alive)."""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hermes_mobile_client import (
    Avatar,
    Card,
    CardDone,
    Client,
    Error,
    HermesError,
    Media,
    MediaProgress,
    Message,
    Ready,
    Status,
    Typing,
    UploadProgress,
    connect,
)

from conftest import DELIVER_TOKEN, TOKEN, Gateway, free_port, start_gateway, stop_gateway

T = TypeVar("T")

# A valid P-256 point: the curve's generator G, uncompressed (0x04 || x || y), base64url.
P256_G = bytes.fromhex(
    "04"
    "6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296"
    "4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5"
)
AUTH_SECRET = bytes(range(16))


def run(coro: Awaitable[T], timeout: float = 30) -> T:
    """Runs a scenario with a bound on the whole of it."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def device(name: str) -> str:
    return f"py-{name}-{secrets.token_hex(4)}"


def client(gw: Gateway, name: str, **options: Any) -> Client:
    return connect(gw.url, token=TOKEN, device_id=device(name), **options)


def test_a_turn(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway, "turn") as c:
            mid = c.send_text("hello there")  # queued: sent once online
            ready = await c.wait_online(10)
            assert isinstance(ready, Ready)
            assert ready.session == f"mobile:{c.device_id}"
            assert await mid == mid  # confirmed by the gateway
            seen: list[Any] = []
            while True:
                ev = await c.next_event(10)
                seen.append(ev)
                if isinstance(ev, Message):
                    break
            assert ev == Message(
                id=ev.id, text="echo: hello there", final=True, edit=False, version=1, key=ev.id, seq=ev.seq
            )
            assert Avatar("thinking") in seen
            assert Typing(True) in seen
            c.ack(ev.id)
            assert c.typing()
            assert not c.typing(), "at most one typing frame every 2 s"
            await c.wait_for(Typing, lambda t: not t.active, timeout=10)  # typing{stop}

    run(scenario())


def test_a_streamed_reply_is_one_message_growing_to_its_final_version(gateway: Gateway) -> None:
    words = ["the", "quick", "brown", "fox", "jumps"]

    async def scenario() -> None:
        async with client(gateway, "stream") as c:
            c.send_text("/stream " + " ".join(words))
            versions: list[Message] = []
            while not versions or not versions[-1].final:
                versions.append(await c.wait_for(Message, timeout=10))
            assert [m.text for m in versions] == [" ".join(words[: i + 1]) for i in range(len(words))]
            assert len({m.id for m in versions}) == 1
            assert [m.final for m in versions] == [False] * (len(words) - 1) + [True]
            assert [m.edit for m in versions] == [False] + [True] * (len(words) - 1)  # M2
            assert [m.version for m in versions] == list(range(1, len(words) + 1))

    run(scenario())


def test_a_long_reply_split_by_the_gateway_is_one_message(gateway: Gateway) -> None:
    async def scenario() -> None:
        chunks = 0

        def count(direction: str, frame: Mapping[str, Any]) -> None:
            nonlocal chunks
            if direction == "in" and frame.get("t") == "message":
                chunks += 1

        async with client(gateway, "long", frame_hook=count) as c:
            c.send_text("/long 30000")
            m = await c.wait_for(Message, timeout=15)
            assert m.final
            assert len(m.text) == 30000
            assert m.text.startswith("0123456789\n0123456789")
            assert chunks >= 9, "30000 characters come in chunks of at most 3500 (M1)"
            c.send_text("next")
            nxt = await c.wait_for(Message, timeout=10)
            assert nxt.text == "echo: next", "no other Message for the parts of the long one"

    run(scenario())


def test_an_approval_card_answered(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway, "card") as c:
            c.send_text("/approve ls")
            card = await c.wait_for(Card, timeout=10)
            assert card.kind == "exec_approval"
            assert card.command == "ls"
            assert card.description == "demo approval"
            assert [o.id for o in card.options] == ["once", "session", "always", "deny"]
            assert card.state == "open"
            assert card.timeout_seconds > 0
            await c.answer(card, "once")
            done = await c.wait_for(CardDone, timeout=10)
            assert (done.id, done.option_id, done.expired) == (card.id, "once", False)
            assert card.state == "done"
            reply = await c.wait_for(Message, timeout=10)
            assert reply.text == "approved (once): ls"
            with pytest.raises(HermesError) as e:
                c.answer(card, "deny")
            assert e.value.code == "prompt_closed"

    run(scenario())


def test_a_clarify_card_answered_with_text(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway, "clarify") as c:
            c.send_text("/ask Which colour? | red | blue")
            card = await c.wait_for(Card, timeout=10)
            assert card.kind == "clarify"
            assert [o.id for o in card.options] == ["c0", "c1", "other"]
            with pytest.raises(HermesError):
                c.answer(card, "other")  # P3: other needs text
            c.answer(card, "other", "green")
            reply = await c.wait_for(Message, timeout=10)
            assert reply.text == "you said: green"

    run(scenario())


def test_an_upload_with_progress_is_echoed_back_byte_equal(gateway: Gateway) -> None:
    data = os.urandom(1_300_000)  # three parts of 512 KiB
    progress: list[UploadProgress] = []

    async def scenario() -> None:
        async with client(gateway, "upload") as c:
            mid = c.send_file(data, filename="blob.bin", caption="the blob", on_progress=progress.append)
            await mid
            got = await c.wait_for(Message, timeout=15)
            assert got.text == "got document blob.bin (1300000 bytes, application/octet-stream)"
            back = await c.wait_for(Media, timeout=15)
            assert back.reply_to == mid
            assert (back.kind, back.filename, back.size) == ("document", "blob.bin", len(data))
            assert back.data == data

    run(scenario())
    percents = [p.percent for p in progress]
    assert percents == sorted(percents), percents
    assert percents[-1] == 100
    assert percents.count(100) == 1, "100 % only once confirmed"
    assert len([p for p in percents if 0 < p < 100]) >= 2, percents
    assert progress[-1].loaded == progress[-1].total == len(data)


def test_a_file_name_over_200_characters_is_cut_with_its_extension(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway, "longname") as c:
            mid = c.send_file(b"abc", filename="n" * 300 + ".bin")  # G8; the frame stays in the schema
            back = await c.wait_for(Media, where=lambda m: m.reply_to == mid, timeout=15)
            assert back.filename == "n" * 196 + ".bin"

    run(scenario())


def test_a_download_in_chunks_is_reassembled_and_saved(gateway: Gateway, tmp_path: Path) -> None:
    size = 4_000_000  # over 3 MiB: two chunks (U1)

    async def scenario() -> Media:
        async with client(gateway, "download", media_dir=tmp_path / "in") as c:
            c.send_text(f"/file {size}")
            parts: list[MediaProgress] = []
            while True:
                ev = await c.next_event(15)
                if isinstance(ev, MediaProgress):
                    parts.append(ev)
                if isinstance(ev, Media):
                    break
            assert [(p.part, p.parts) for p in parts] == [(0, 2), (1, 2)]
            return ev

    media = run(scenario())
    assert media.data is None
    assert media.path is not None
    assert media.path.parent == tmp_path / "in"
    assert media.path.name == f"demo-{size}.bin"
    assert media.read() == bytes(i % 251 for i in range(size))


def test_audio(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway, "audio") as c:
            c.send_audio(b"RIFF" + bytes(100), format="wav", text="hi")
            m = await c.wait_for(Message, timeout=10)
            assert m.text == "heard 104 bytes of wav: hi"

    run(scenario())


def test_an_unconfirmed_message_is_resent_after_a_reconnect_and_answered_once(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent_ids: list[str] = []

    def record(direction: str, frame: Mapping[str, Any]) -> None:
        if direction == "out" and frame.get("t") == "text":
            sent_ids.append(str(frame["id"]))

    async def scenario() -> None:
        async with client(gateway, "resend", frame_hook=record, backoff_min=0.05) as c:
            await c.wait_online(10)
            # Without the pong or the `received` that confirms it, it stays unconfirmed.
            monkeypatch.setattr(c, "_on_pong", lambda ts, conn: None)
            monkeypatch.setattr(c, "_on_received", lambda f, conn: None)
            mid = c.send_text("only once please")
            await c.wait_for(Message, lambda m: m.text == "echo: only once please", timeout=10)
            assert c.pending == [mid]
            monkeypatch.undo()
            c.reconnect()  # the connection drops before the confirmation
            await c.wait_for(Status, lambda s: s.state == "online", timeout=10)
            await mid  # re-sent with the same id, and confirmed on the new connection
            assert c.pending == []
            c.send_text("and then this")
            texts: list[str] = []
            while not texts or texts[-1] != "echo: and then this":
                texts.append((await c.wait_for(Message, timeout=10)).text)
            assert texts == ["echo: and then this"], "the re-sent message was deduplicated (I1)"

    run(scenario())
    assert sent_ids.count(sent_ids[0]) == 2, sent_ids


def test_offline_queue_and_reconnect_with_backoff(tmp_path: Path) -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}/ws"

    async def scenario() -> list[Status]:
        statuses: list[Status] = []
        async with connect(
            url, token=TOKEN, device_id=device("queue"), backoff_min=0.05, backoff_max=0.4
        ) as c:
            mid = c.send_text("kept while offline")
            while len([s for s in statuses if s.state == "offline"]) < 4:
                statuses.append(await c.wait_for(Status, timeout=10))
            assert c.pending == [mid]
            gw = await asyncio.get_running_loop().run_in_executor(None, start_gateway, tmp_path, port)
            try:
                m = await c.wait_for(Message, timeout=10)
                assert m.text == "echo: kept while offline"
                await mid
            finally:
                stop_gateway(gw)
            st = await c.wait_for(Status, lambda s: s.state == "offline", timeout=10)
            assert st.retry_in is not None, "a gateway going away is retried"
        return statuses

    statuses = run(scenario())
    offline = [s for s in statuses if s.state == "offline"]
    assert [s.attempt for s in offline] == [1, 2, 3, 4]
    for s in offline:
        assert s.retry_in is not None
        base = min(0.4, 0.05 * 2 ** (s.attempt - 1))
        assert base * 0.5 <= s.retry_in <= base, (s.attempt, s.retry_in)  # backoff with jitter


def test_auth_failed_stops_without_a_retry(gateway: Gateway) -> None:
    async def scenario() -> list[Any]:
        c = connect(
            gateway.url, token="not-the-token-0123456789", device_id=device("noaccess"), backoff_min=0.01
        )
        async with c:
            events = [ev async for ev in c]  # ends: the client stopped for good
            with pytest.raises(HermesError) as e:
                await c.wait_online(1)
            assert e.value.code == "auth_failed"
            assert c.state == "noaccess"
            with pytest.raises(HermesError) as e:
                await c.send_text("never goes")  # no hang: the id cannot be confirmed now
            assert e.value.code == "auth_failed"
        return events

    events = run(scenario())
    statuses = [(e.state, e.code) for e in events if isinstance(e, Status)]
    assert statuses == [("connecting", ""), ("noaccess", "auth_failed")]
    errors = [e for e in events if isinstance(e, Error)]
    assert [(e.code, e.fatal) for e in errors] == [("auth_failed", True)]


def test_replaced_stops_without_fighting_back(gateway: Gateway) -> None:
    dev = device("twice")

    async def scenario() -> None:
        async with connect(gateway.url, token=TOKEN, device_id=dev, backoff_min=0.01) as first:
            await first.wait_online(10)
            async with connect(gateway.url, token=TOKEN, device_id=dev) as second:
                await second.wait_online(10)
                st = await first.wait_for(
                    Status, lambda s: s.state not in ("connecting", "online"), timeout=10
                )
                assert st.state == "replaced"
                rest = [ev async for ev in first]
                assert not any(isinstance(e, Status) and e.state == "connecting" for e in rest)
                second.send_text("still mine")
                assert (await second.wait_for(Message, timeout=10)).text == "echo: still mine"

    run(scenario())


def test_push_subscribe_answered_and_a_refused_host_is_forbidden(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway, "push") as c:
            answer = await c.push_subscribe(
                {
                    "endpoint": "https://fcm.googleapis.com/fcm/send/x",
                    "keys": {"p256dh": P256_G, "auth": AUTH_SECRET},
                },
                app_url="https://chat.example.org/",
            )
            assert answer["t"] == "push_subscribed"
            with pytest.raises(HermesError) as e:
                await c.push_subscribe(
                    endpoint="https://push.evil.example/x", p256dh=P256_G, auth=AUTH_SECRET
                )
            assert e.value.code == "forbidden"
            assert c.online, "a refused request is not fatal"
            refused = await c.wait_for(Error, timeout=5)
            assert (refused.code, refused.request) == ("forbidden", "push_subscribe")
            with pytest.raises(HermesError) as e:
                await c.push_subscribe(
                    endpoint="https://fcm.googleapis.com/x", p256dh=b"\x04" * 65, auth=AUTH_SECRET
                )
            assert e.value.code == "bad_frame", "not a P-256 point"
            assert (await c.push_unsubscribe())["t"] == "push_unsubscribed"

    run(scenario())


def test_deliver_to_an_online_and_an_offline_device(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with (
            client(gateway, "phone") as phone,
            connect(gateway.url, token=DELIVER_TOKEN, device_id=device("cron")) as service,
        ):
            await phone.wait_online(10)
            d = await service.deliver("from cron", to=f"mobile:{phone.device_id}", id="job-1")
            assert (d.id, d.device, d.held) == ("job-1", phone.device_id, False)
            assert (await phone.wait_for(Message, timeout=10)).text == "from cron"
            again = await service.deliver("from cron", to=phone.device_id, id="job-1")
            assert again.device == phone.device_id  # S4: confirmed again, not re-sent
            f = await service.deliver(to=phone.device_id, file=b"report body", filename="report.txt")
            assert f.device == phone.device_id
            m = await phone.wait_for(Media, timeout=10)
            assert (m.filename, m.kind, m.mime, m.data) == (
                "report.txt",
                "document",
                "text/plain",
                b"report body",
            )
            with pytest.raises(HermesError) as e:
                await service.deliver("anyone?", to="mobile:" + device("nobody"))
            assert e.value.code == "device_offline"
            assert service.online

    run(scenario())


def test_keepalive_pings(gateway: Gateway) -> None:
    pongs = 0
    two = asyncio.Event()

    def count(direction: str, frame: Mapping[str, Any]) -> None:
        nonlocal pongs
        if direction == "in" and frame.get("t") == "pong":
            pongs += 1
            if pongs >= 2:
                two.set()

    async def scenario() -> None:
        async with client(gateway, "ping", ping_interval=0.1, frame_hook=count) as c:
            await c.wait_online(10)
            await asyncio.wait_for(two.wait(), 10)  # nothing sent but pings: the timer's
            assert c.online

    run(scenario())


def test_local_refusals_before_anything_is_sent(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway, "limits") as c:
            for bad, code in (("   ", "bad_frame"), ("x" * 12001, "too_big")):
                with pytest.raises(HermesError) as e:
                    c.send_text(bad)
                assert e.value.code == code
            with pytest.raises(HermesError) as e:
                c.send_file(bytes(8 * 1024 * 1024 + 1), filename="big.bin")
            assert e.value.code == "too_big"
            with pytest.raises(HermesError) as e:
                c.send_text("hi", id="x" * 129)  # G8
            assert e.value.code == "bad_frame"
            assert c.pending == []
            c.send_text("\U0001f600" * 12000)  # G1: code points, not bytes
            m = await c.wait_for(Message, timeout=10)
            assert m.text == "echo: " + "\U0001f600" * 12000

    run(scenario())
