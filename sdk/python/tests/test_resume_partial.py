"""A reconnect in the middle of an entry (issue 24, L58): the first chunk of a split message
or the first part of a file carries the entry's seq, but the entry is not received until its
last piece is. Resuming after that seq would make the gateway skip the rest for good, so the
client resumes after it only once the whole entry is in. A scripted gateway on loopback
drops the link between the pieces, which the real one cannot be made to do on cue."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from hermes_mobile_client import History, connect

READY = {
    "t": "ready",
    "v": 1,
    "session": "mobile:d",
    "device": {"id": "d", "name": "d"},
    "avatar_url": "",
    "capabilities": {
        "text": True,
        "voice": False,
        "typing": True,
        "avatar_states": ["idle"],
        "media_in": ["document"],
        "media_out": ["document"],
        "prompts": ["exec_approval"],
        "edit": True,
        "max_media_bytes": 1000000,
        "max_text_chars": 4096,
        "history": {"items": 5000, "days": 30},
    },
    "seq": 6,
}


async def resumes_after(first_piece: dict[str, Any], rest: dict[str, Any]) -> list[int]:
    """The `resume.after` of each hello: the first connection gets `first_piece` and is
    dropped; the second gets `rest`, and the client then reconnects once more."""
    hellos: list[dict[str, Any]] = []
    third = asyncio.Event()

    async def gateway(ws: ServerConnection) -> None:
        hellos.append(json.loads(await ws.recv()))
        await ws.send(json.dumps(READY))
        await ws.send(json.dumps({"t": "resumed", "seq": 6}))
        if len(hellos) == 1:
            await ws.send(json.dumps(first_piece))
        elif len(hellos) == 2:
            await ws.send(json.dumps(first_piece))
            await ws.send(json.dumps(rest))
        else:
            third.set()
            await ws.wait_closed()
            return
        await asyncio.sleep(0.05)
        await ws.close()  # the link drops

    async with serve(gateway, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(
            f"ws://127.0.0.1:{port}/ws", token="t" * 20, device_id="d", backoff_min=0.01, backoff_max=0.02
        ):
            await asyncio.wait_for(third.wait(), 10)
    return [h["resume"]["after"] for h in hellos]


def test_a_reconnect_between_a_messages_chunks_resumes_before_it() -> None:
    first = {
        "t": "message",
        "id": "m1",
        "text": "first half ",
        "final": True,
        "seq": 6,
        "chunk": {"index": 0, "total": 2},
    }
    rest = dict(first, text="second half", chunk={"index": 1, "total": 2})
    assert asyncio.run(resumes_after(first, rest)) == [0, 0, 6]


def test_a_reconnect_between_a_files_parts_resumes_before_it() -> None:
    first = {
        "t": "media",
        "id": "f1",
        "kind": "document",
        "mime": "text/plain",
        "filename": "a.txt",
        "data": "YWJj",
        "part": 0,
        "parts": 2,
        "final": True,
        "size": 6,
        "seq": 6,
    }
    rest = dict(first, data="ZGVm", part=1)
    assert asyncio.run(resumes_after(first, rest)) == [0, 0, 6]


def test_history_paging_goes_on_past_a_page_with_nothing_this_client_can_show() -> None:
    # A newer gateway's entries are left out of `items`; the next page still starts below
    # them, rather than from the newest page again (`before=None`).
    unreadable = History(items=(), more=True, oldest_seq=5)
    assert unreadable.next_before == 5
    assert History(items=(), more=False).next_before is None
