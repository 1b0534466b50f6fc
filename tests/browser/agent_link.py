"""The agent side of the gateway's agent link (docs/agent-protocol.md) for the browser tests:
one Unix socket connection speaking JSON lines, read on a thread of its own."""

import json
import socket
import threading
import time


class AgentLink:
    """The agent: one Unix socket connection speaking the agent protocol's JSON lines."""

    def __init__(self, path, timeout=15):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.events = []  # every line the gateway sent, parsed
        self._cond = threading.Condition()
        self._seen = 0
        threading.Thread(target=self._read, name="agent-link", daemon=True).start()

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self.events.append({"t": "__closed"})
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    with self._cond:
                        self.events.append(json.loads(line))
                        self._cond.notify_all()

    def send(self, **obj):
        self.sock.sendall((json.dumps(obj) + "\n").encode())

    def wait_for(self, t, timeout=15, **fields):
        """The next event (after the last one waited for) of type `t` with these fields."""

        def match():
            for i in range(self._seen, len(self.events)):
                e = self.events[i]
                if e.get("t") == t and all(e.get(k) == v for k, v in fields.items()):
                    return i
            return None

        with self._cond:
            if not self._cond.wait_for(lambda: match() is not None, timeout=timeout):
                raise AssertionError(f"no {t} {fields} from the gateway within {timeout} s; got {self.events[self._seen:]}")
            i = match()
            self._seen = i + 1
            return self.events[i]

    def command(self, ref, **obj):
        """A command with a ref; waits for its ok."""
        self.send(ref=ref, **obj)
        with self._cond:
            ok = self._cond.wait_for(
                lambda: any(e.get("ref") == ref for e in self.events), timeout=15)
            got = [e for e in self.events if e.get("ref") == ref]
        assert ok and got[0]["t"] == "ok", f"{obj['t']} {ref}: {got or 'no answer'}"
        return got[0]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
