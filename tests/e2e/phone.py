"""A minimal Protocol v1 phone for the end-to-end tests (asyncio + websockets).

It keeps every frame it receives and joins agent messages the way an app would:
`message` frames are grouped by `id`; each version is the join of its chunks; an
`edit:true` frame replaces the message's text; `final:true` on the last chunk closes
it. `media` chunks are joined by `id` into bytes.
"""

import asyncio
import base64
import json
import time

import websockets


class Phone:
    def __init__(self, url, token, device_id="e2e-phone", name="E2E Phone", user=("u-e2e", "Tester")):
        self.url = url
        self.token = token
        self.device_id = device_id
        self.name = name
        self.user = {"id": user[0], "name": user[1]}
        self.ws = None
        self.ready = None
        self.frames = []  # (monotonic time, frame)
        self.messages = {}  # id -> {"text", "versions", "final", "edits", "order"}
        self.media = {}  # id -> {"parts": {}, "meta", "data"(bytes once final)}
        self.prompts = {}  # id -> frame
        self.prompt_done = {}
        self.errors = []
        self._reader = None
        self._event = asyncio.Event()
        self._seq = 0

    async def connect(self, timeout=10):
        self.ws = await asyncio.wait_for(websockets.connect(self.url, max_size=32 * 1024 * 1024), timeout)
        await self.ws.send(json.dumps({
            "t": "hello", "token": self.token,
            "device": {"id": self.device_id, "name": self.name, "platform": "e2e", "app_version": "1.0"},
            "user": self.user,
        }))
        while True:
            frame = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            if frame.get("t") == "ready":
                self.ready = frame
                break
            if frame.get("t") == "error":
                raise RuntimeError(f"hello refused: {frame}")
        self._reader = asyncio.create_task(self._read())
        return self.ready

    async def close(self):
        if self._reader:
            self._reader.cancel()
        if self.ws:
            try:
                await asyncio.wait_for(self.ws.close(), 3)
            except Exception:
                pass

    async def _read(self):
        try:
            async for raw in self.ws:
                frame = json.loads(raw)
                self._handle(frame)
                self._event.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self._event.set()

    @property
    def closed(self):
        return self._reader is None or self._reader.done()

    def _handle(self, f):
        self.frames.append((time.monotonic(), f))
        t = f.get("t")
        if t == "message":
            m = self.messages.setdefault(f["id"], {"chunks": {}, "text": "", "versions": [], "final": False,
                                                   "edits": 0, "order": len(self.messages)})
            if f.get("edit") and f["chunk"]["index"] == 0:
                m["edits"] += 1
                m["chunks"] = {}
            m["chunks"][f["chunk"]["index"]] = f["text"]
            if len(m["chunks"]) == f["chunk"]["total"]:
                m["text"] = "".join(m["chunks"][i] for i in range(f["chunk"]["total"]))
                m["versions"].append(m["text"])
            if f.get("final"):
                m["final"] = True
        elif t == "media":
            md = self.media.setdefault(f["id"], {"parts": {}, "meta": f, "data": None})
            md["parts"][f["part"]] = base64.b64decode(f.get("data") or "")
            if len(md["parts"]) == f["parts"]:
                md["data"] = b"".join(md["parts"][i] for i in range(f["parts"]))
        elif t == "prompt":
            self.prompts[f["id"]] = f
        elif t == "prompt_done":
            self.prompt_done[f["id"]] = f
        elif t == "error":
            self.errors.append(f)

    async def send(self, frame):
        await self.ws.send(json.dumps(frame))

    def next_id(self, prefix="m"):
        self._seq += 1
        return f"{prefix}-{int(time.time() * 1000)}-{self._seq}"

    async def text(self, text):
        mid = self.next_id()
        await self.send({"t": "text", "id": mid, "text": text})
        return mid

    async def upload(self, kind, filename, data, caption="", mime=""):
        mid = self.next_id("up")
        frame = {"t": "media", "id": mid, "kind": kind, "filename": filename,
                 "data": base64.b64encode(data).decode(), "part": 0, "parts": 1}
        if caption:
            frame["caption"] = caption
        if mime:
            frame["mime"] = mime
        await self.send(frame)
        return mid

    async def answer(self, prompt_id, option_id=None, text=None):
        frame = {"t": "prompt", "prompt_id": prompt_id}
        if option_id:
            frame["option_id"] = option_id
        if text:
            frame["text"] = text
        await self.send(frame)

    async def wait_for(self, predicate, timeout, what="condition"):
        """Wait until predicate() is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            self._event.clear()
            try:
                await asyncio.wait_for(self._event.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                pass

    def turn_over(self):
        """True when the agent's last turn ended: the latest `typing` frame is a stop."""
        for _, f in reversed(self.frames):
            if f.get("t") == "typing":
                return bool(f.get("stop"))
        return True

    def mark(self):
        """A position in the frame log; `since(mark)` gives the frames after it."""
        return len(self.frames)

    def since(self, mark, t=None):
        return [f for _, f in self.frames[mark:] if t is None or f.get("t") == t]

    def final_messages_since(self, mark):
        """Texts of agent messages that started after `mark` and are final, in order."""
        ids = []
        for f in self.since(mark, "message"):
            if f["id"] not in ids:
                ids.append(f["id"])
        return [(i, self.messages[i]) for i in ids if self.messages[i]["final"]]

    def prompt_since(self, mark, kind):
        for f in self.since(mark, "prompt"):
            if f.get("kind") == kind:
                return f
        return None
