"""Paired devices (issue 26; docs/security.md) as this client sees them, with no gateway:
`devices()` and `revoke()` against a scripted gateway on loopback (owner connections only;
the refusals a non-owner or an unknown id gets; a device revoked while connected), and
`pair_with_code()` against a small HTTP server answering `POST /pair` as the gateway does.
The frames both ways are checked against the schema (conftest.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest
from websockets.asyncio.server import ServerConnection, serve

from hermes_mobile_client import Client, Device, HermesError, PairError, Status, connect, pair_with_code

T = TypeVar("T")

READY = {
    "t": "ready",
    "v": 1,
    "session": "mobile:owner-1",
    "device": {"id": "owner-1", "name": "owner-1"},
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
        "max_text_chars": 12000,
    },
    "seq": 0,
}
ITEMS = [
    {
        "id": "owner-1",
        "name": "Laptop",
        "platform": "web",
        "paired_at": 1765000000000,
        "last_seen": 1765000100000,
        "online": True,
        "push": False,
        "owner": True,
    },
    {
        "id": "tel-1",
        "name": "Pixel",
        "platform": "android",
        "paired_at": 1765000200000,
        "last_seen": None,
        "online": False,
        "push": True,
        "owner": False,
    },
]

# How the scripted gateway answers a request frame: a list of frames to send back.
Answer = Callable[[dict[str, Any]], list[dict[str, Any]]]
Frames = list[dict[str, Any]]
# Reconnects within milliseconds, so that a retry that should not happen would show at once.
FAST: dict[str, Any] = {"token": "t" * 43, "backoff_min": 0.01, "backoff_max": 0.02}


def run(coro: Awaitable[T], timeout: float = 20) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def scripted(answer: Answer, scenario: Callable[[Client], Awaitable[T]]) -> tuple[T, Frames]:
    """Runs `scenario` with a client online at a scripted gateway that answers each frame
    after `hello` with `answer(frame)`; returns its result and the frames the client sent."""
    sent: list[dict[str, Any]] = []

    async def gateway(ws: ServerConnection) -> None:
        sent.append(json.loads(await ws.recv()))
        await ws.send(json.dumps(READY))
        async for raw in ws:
            f = json.loads(raw)
            sent.append(f)
            for out in answer(f):
                await ws.send(json.dumps(out))

    async with serve(gateway, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}/ws", device_id="owner-1", **FAST) as client:
            await client.wait_online(5)
            result = await scenario(client)
    return result, sent


def owner(f: dict[str, Any]) -> list[dict[str, Any]]:
    """An owner connection's gateway: the list, and revocation of a paired id."""
    if f["t"] == "devices":
        return [{"t": "devices", "id": f["id"], "items": ITEMS}]
    if f["t"] == "revoke":
        if f["device"] in {i["id"] for i in ITEMS}:
            return [{"t": "revoked", "id": f["id"], "device": f["device"]}]
        msg = "no paired device with that id"
        return [{"t": "error", "code": "bad_frame", "message": msg, "id": f["id"], "fatal": False}]
    return []


def not_owner(f: dict[str, Any]) -> list[dict[str, Any]]:
    if f["t"] in ("devices", "revoke"):
        msg = "only an owner device may do that"
        return [{"t": "error", "code": "forbidden", "message": msg, "id": f["id"], "fatal": False}]
    return []


def test_devices_lists_the_paired_devices_as_dataclasses() -> None:
    async def scenario(client: Client) -> list[Device]:
        return await client.devices()

    devices, sent = run(scripted(owner, scenario))
    assert devices == [
        Device("owner-1", "Laptop", "web", 1765000000000, 1765000100000, online=True, push=False, owner=True),
        Device("tel-1", "Pixel", "android", 1765000200000, None, online=False, push=True, owner=False),
    ]
    asked = [f for f in sent if f["t"] == "devices"]
    assert len(asked) == 1
    assert sorted(asked[0]) == ["id", "t"]


def test_revoke_sends_the_id_as_a_string_and_returns_on_revoked() -> None:
    async def scenario(client: Client) -> str:
        await client.revoke("tel-1")
        with pytest.raises(HermesError) as unknown:
            await client.revoke("tel-9")
        with pytest.raises(HermesError) as empty:
            await client.revoke("")
        assert empty.value.code == "bad_frame"
        return f"{unknown.value.code}: {unknown.value.message}"

    unknown, sent = run(scripted(owner, scenario))
    assert unknown == "bad_frame: no paired device with that id"
    revokes = [f for f in sent if f["t"] == "revoke"]
    assert [f["device"] for f in revokes] == ["tel-1", "tel-9"]  # nothing sent for ""


def test_a_connection_that_is_not_an_owners_is_refused_forbidden_and_stays_online() -> None:
    async def scenario(client: Client) -> list[str]:
        codes = []
        for call in (client.devices(), client.revoke("tel-1")):
            with pytest.raises(HermesError) as e:
                await call
            codes.append(e.value.code)
        assert client.online
        return codes

    codes, _ = run(scripted(not_owner, scenario))
    assert codes == ["forbidden", "forbidden"]


def test_a_device_revoked_while_connected_stops_with_no_access() -> None:
    hellos = 0

    async def main() -> Status | None:
        nonlocal hellos

        async def gateway(ws: ServerConnection) -> None:
            nonlocal hellos
            await ws.recv()
            hellos += 1
            if hellos > 1:
                await ws.close()  # the next hello would be refused too
                return
            await ws.send(json.dumps(READY))
            await asyncio.sleep(0.05)
            why = "this device was revoked"
            await ws.send(json.dumps({"t": "error", "code": "auth_failed", "message": why, "fatal": True}))
            await ws.close(1008, "auth_failed")

        async with serve(gateway, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}/ws", device_id="tel-1", **FAST) as client:
                await client.wait_online(5)
                await client.wait_for(Status, lambda s: s.state == "noaccess", timeout=5)
                await asyncio.sleep(0.2)  # well past the backoff: no retry
                return client.final_status

    status = run(main())
    assert status is not None
    assert (status.state, status.code) == ("noaccess", "auth_failed")
    assert hellos == 1


# ---- pair_with_code against a local POST /pair ---------------------------------------------

CODE = "AAAAAAAAAAAAAAAAAAAAAA"
TOKEN = "b" * 43


@contextmanager
def pair_server(
    answer: Callable[[Any], tuple[int, Any, dict[str, str]]],
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server answering `POST /pair` with `answer(body)`: (status, JSON, headers).
    Yields its base URL and the requests it got."""
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw)
            requests.append({"path": self.path, "type": self.headers.get("Content-Type"), "body": body})
            status, data, headers = answer(body)
            out = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(out)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def gateway_pair(body: Any) -> tuple[int, Any, dict[str, str]]:
    if body.get("code") != CODE:
        return 403, {"error": "forbidden"}, {}
    return 200, {"token": TOKEN, "device": {"id": body["device"].get("id") or "dev-0123456789abcdef"}}, {}


def test_pair_with_code_trades_the_code_for_a_token_bound_to_the_device_id() -> None:
    with pair_server(gateway_pair) as (base, requests):
        assert pair_with_code(base, CODE, "tel-1", name="Pixel", platform="android") == (TOKEN, "tel-1")
        # No id: the gateway makes one, and that is the id to connect with.
        assert pair_with_code(base + "/", CODE) == (TOKEN, "dev-0123456789abcdef")
        # The WebSocket address works too.
        ws_url = base.replace("http://", "ws://") + "/ws"
        assert pair_with_code(ws_url, CODE, "tel-2") == (TOKEN, "tel-2")
    assert requests[0] == {
        "path": "/pair",
        "type": "application/json",
        "body": {"code": CODE, "device": {"id": "tel-1", "name": "Pixel", "platform": "android"}},
    }
    assert requests[1]["body"] == {"code": CODE, "device": {}}
    assert requests[2]["path"] == "/pair"


@pytest.mark.parametrize(
    ("status", "answer", "headers", "code", "retry_after"),
    [
        (403, {"error": "forbidden"}, {}, "forbidden", None),
        (429, {"error": "too_many_attempts"}, {"Retry-After": "37"}, "too_many_attempts", 37),
        (429, {"error": "too_many_attempts"}, {}, "too_many_attempts", 60),
        (400, {"error": "bad_request", "message": "a hidden character in the id"}, {}, "bad_request", None),
        (409, {"error": "full"}, {}, "full", None),
        (503, {"error": "unavailable"}, {}, "unavailable", None),
        (500, {"error": "not_kept"}, {}, "not_kept", None),
        (404, "<html>not found</html>", {}, "unavailable", None),  # a gateway older than pairing codes
    ],
)
def test_pair_with_code_refusals_carry_the_gateways_code(
    status: int, answer: Any, headers: dict[str, str], code: str, retry_after: int | None
) -> None:
    with pair_server(lambda _: (status, answer, headers)) as (base, _), pytest.raises(PairError) as e:
        pair_with_code(base, CODE)
    assert isinstance(e.value, HermesError)
    assert (e.value.code, e.value.retry_after) == (code, retry_after)
    if isinstance(answer, dict) and "message" in answer:
        assert e.value.message == answer["message"]


def test_pair_with_code_says_network_when_nothing_answers_and_refuses_a_bad_address() -> None:
    with pair_server(gateway_pair) as (base, _):
        pass  # closed again: nothing listens there now
    with pytest.raises(PairError) as e:
        pair_with_code(base, CODE, timeout=5)
    assert e.value.code == "network"
    with pytest.raises(PairError) as bad:
        pair_with_code("ftp://example.org", CODE)
    assert bad.value.code == "bad_config"
    with pytest.raises(PairError) as empty:
        pair_with_code(base, "  ")
    assert empty.value.code == "bad_request"
