#!/usr/bin/env python3
"""End to end: a Protocol v1 phone <-> the gateway's HTTP backends <-> real Hermes 0.19's
API server (issue 11). No plugin: Hermes runs only its `api_server` platform.

Run with the Python of a venv that has `hermes-agent[sms]==0.19.0` (and so `websockets`):

    $VENV/bin/python tests/e2e/hermes_http_e2e.py [--gateway target/release/hermes-mobile] [--keep]
    $VENV/bin/python tests/e2e/hermes_http_e2e.py --hermes-only   # Hermes' API alone, no gateway

Two gateways are started one after the other against the same Hermes:
`MOBILE_AGENT=openai:http://127.0.0.1:<api>/v1` (with `X-Hermes-Session-Id: mobile-{device}`)
and `MOBILE_AGENT=hermes:http://127.0.0.1:<api>/v1` (the runs API, approvals as cards).
`--hermes-only` instead checks, with plain HTTP and no gateway, every Hermes behaviour
those checks rely on, and prints the events it saw.

Everything is on loopback, in a temporary directory (HOME and HERMES_HOME included); the
model is tests/e2e/model_server.py. Every process is started here and ended by its pid
(Hermes in its own process group, so its tool subprocesses go with it); every wait has a
timeout. Prints each check with its time and ends with "N passed, M failed".
"""

import argparse
import asyncio
import http.client
import json
import os
import re
import shutil
import signal
import sqlite3
import sys
import threading
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the work tree
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import hermes_e2e  # noqa: E402  (Proc, World, free_port, log)
import model_server  # noqa: E402  (the scripted answers, to know the exact texts)
from hermes_e2e import Proc, free_port, log  # noqa: E402
from phone import Phone  # noqa: E402

TOKEN = "e2e-app-token-0123456789abcdef"
API_KEY = "e2e-api-server-key-0123456789abcdef"  # Hermes refuses keys under 16 characters
APPROVAL_TIMEOUT = 15  # Hermes' approvals.timeout = the gateway's MOBILE_AGENT_APPROVAL_TTL
DEVICE = "e2e-http-phone"
SESSION_HEADER = "mobile-{device}"  # MOBILE_AGENT_HEADERS: X-Hermes-Session-Id: mobile-{device}
TURN = 90  # seconds allowed for one agent turn (the first one loads Hermes' tools)
CHECK_LIMIT = 150  # seconds for one check
SLOW = 30  # seconds the `run sleep` command would take: /stop must end the turn well before
STOP_LIMIT = 15  # seconds allowed between /stop and the end of the turn
LONG_PROMPT = "please give me a long answer"


def scripted(user_text):
    """The model server's text answer to a plain user message (no tools)."""
    kind, text, _ = model_server.plan({"messages": [{"role": "user", "content": user_text}], "tools": []})
    assert kind == "text", kind
    return text


def fmt(obj, limit=600):
    s = json.dumps(obj, ensure_ascii=False)
    return s if len(s) <= limit else s[:limit] + "…"


# ---------------------------------------------------------------------------
# plain HTTP to Hermes' API server
# ---------------------------------------------------------------------------


def api(port, method, path, body=None, headers=None, timeout=30):
    """One request; returns (status, headers dict (lower-case names), parsed JSON or text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Authorization": f"Bearer {API_KEY}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        raw = r.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw.decode(errors="replace")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, parsed
    finally:
        conn.close()


class Sse(threading.Thread):
    """Reads one SSE response in a thread. `items` gets (monotonic time, kind, value):
    ("data", parsed JSON or the raw string, event name or None) and ("comment", text)."""

    def __init__(self, port, method, path, body=None, headers=None):
        super().__init__(daemon=True)
        self.port, self.method, self.path, self.body, self.headers = port, method, path, body, headers or {}
        self.items = []
        self.status = None
        self.resp_headers = {}
        self.error = None
        self.finished = False
        self.cond = threading.Condition()
        self.conn = None
        self.start()

    def _add(self, item):
        with self.cond:
            self.items.append((time.monotonic(),) + item)
            self.cond.notify_all()

    def run(self):
        try:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            h = {"Authorization": f"Bearer {API_KEY}", "Accept": "text/event-stream"}
            data = None
            if self.body is not None:
                data = json.dumps(self.body).encode()
                h["Content-Type"] = "application/json"
            h.update(self.headers)
            self.conn.request(self.method, self.path, body=data, headers=h)
            r = self.conn.getresponse()
            self.status = r.status
            self.resp_headers = {k.lower(): v for k, v in r.getheaders()}
            if r.status != 200:
                self._add(("error", r.read().decode(errors="replace"), None))
                return
            name, data_lines = None, []
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode().rstrip("\r\n")
                if line == "":
                    if data_lines:
                        payload = "\n".join(data_lines)
                        try:
                            value = json.loads(payload)
                        except ValueError:
                            value = payload
                        self._add(("data", value, name))
                    name, data_lines = None, []
                elif line.startswith(":"):
                    self._add(("comment", line[1:].strip(), None))
                elif line.startswith("data:"):
                    data_lines.append(line[5:].removeprefix(" "))
                elif line.startswith("event:"):
                    name = line[6:].strip()
        except Exception as exc:  # noqa: BLE001 (reported by the waiter)
            self.error = exc
        finally:
            with self.cond:
                self.finished = True
                self.cond.notify_all()

    def data(self):
        with self.cond:
            return [(t, v, n) for t, k, v, n in self.items if k == "data"]

    def events(self):
        """Runs API: the JSON events, with their arrival times."""
        return [(t, v) for t, v, _ in self.data() if isinstance(v, dict) and "event" in v]

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                v = pred()
                if v:
                    return v
                if self.finished:
                    v = pred()
                    if v:
                        return v
                    raise RuntimeError(f"the stream ended (status {self.status}, {self.error!r}) before {what}; "
                                       f"saw {[fmt(i[2], 200) for i in self.items][-8:]}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
                self.cond.wait(min(remaining, 0.5))

    def event(self, name, after=0.0):
        for t, e in self.events():
            if e.get("event") == name and t >= after:
                return t, e
        return None

    def close(self):
        try:
            if self.conn is not None and self.conn.sock is not None:
                self.conn.sock.shutdown(2)
        except OSError:
            pass
        self.join(5)


# ---------------------------------------------------------------------------
# the world: model server, Hermes with its API server, the gateways
# ---------------------------------------------------------------------------


class World(hermes_e2e.World):
    def __init__(self, args):
        super().__init__(args)
        self.api_port = free_port()
        self.gateways = []  # every gateway started, to end them all
        self.backend = None

    def base_env(self):
        env = super().base_env()
        for k in list(env):
            if k.startswith("API_SERVER_"):
                del env[k]
        return env

    def write_config(self, link=None):
        (self.hermes_home / "config.yaml").write_text(f"""\
model:
  provider: custom
  default: e2e-model
  base_url: http://127.0.0.1:{self.model_port}/v1
  api_key: e2e-key
approvals:
  mode: manual
  timeout: {APPROVAL_TIMEOUT}
security:
  tirith_enabled: false
terminal:
  backend: local
  cwd: {self.work}
platforms:
  api_server:
    enabled: true
    extra:
      host: 127.0.0.1
      port: {self.api_port}
      key: {API_KEY}
""")

    def api_health(self):
        try:
            status, _, body = api(self.api_port, "GET", "/health", timeout=2)
            return body if status == 200 else None
        except OSError:
            return None

    def start_hermes(self):
        super().start_hermes()
        self.wait(self.api_health, 90, "Hermes' API server (GET /health)", proc=self.hermes)

    def start_backend(self, backend):
        """A gateway with MOBILE_AGENT=<backend>:…, on a fresh port and state directory."""
        self.port = free_port()
        state = self.tmp / f"state-{backend}"
        state.mkdir(exist_ok=True)
        env = self.base_env()
        env.update({"MOBILE_TOKEN": TOKEN, "MOBILE_PORT": str(self.port), "MOBILE_HOST": "127.0.0.1",
                    "MOBILE_STATE_DIR": str(state), "MOBILE_ENV_FILE": "", "RUST_LOG": "debug",
                    "MOBILE_AGENT_KEY": API_KEY})
        base = f"http://127.0.0.1:{self.api_port}/v1"
        if backend == "openai":
            env.update({"MOBILE_AGENT": f"openai:{base}", "MOBILE_AGENT_MODEL": "hermes-agent",
                        "MOBILE_AGENT_HEADERS": f"X-Hermes-Session-Id: {SESSION_HEADER}"})
        else:
            env.update({"MOBILE_AGENT": f"hermes:{base}", "MOBILE_AGENT_APPROVAL_TTL": str(APPROVAL_TIMEOUT)})
        self.gateway = Proc(f"gateway-{backend}", [self.args.gateway], env, str(self.tmp), self.logs)
        self.gateways.append(self.gateway)
        self.backend = backend
        self.wait(lambda: self.healthz() is not None, 15, f"the {backend} gateway's /healthz", proc=self.gateway)

    def stop_backend(self):
        if self.gateway is not None:
            self.gateway.stop(signal.SIGTERM, wait=8)
        self.gateway = None
        self.backend = None

    def shutdown(self):
        for p in [self.hermes, *self.gateways, self.model]:
            if p is not None and not p.logfile.closed:
                p.stop(signal.SIGTERM, wait=8)


def hermes_sessions(w):
    """Session ids in Hermes' state.db (read-only)."""
    db = w.hermes_home / "state.db"
    if not db.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            return {r[0] for r in c.execute("SELECT id FROM sessions")}
    except sqlite3.Error:
        return set()


def user_texts(req, role="user"):
    return [model_server._text_of(m.get("content")) for m in req.get("messages") or [] if m.get("role") == role]


def find_requests(w, last_user_has):
    """The model server's logged requests whose last user message contains the text, newest first."""
    out = []
    for req in reversed(w.model_log()):
        users = user_texts(req)
        if users and last_user_has in users[-1]:
            out.append(req)
    return out


def find_request(w, last_user_has):
    found = find_requests(w, last_user_has)
    return found[0] if found else None


def roles_of(req):
    return [(m.get("role"), model_server._text_of(m.get("content"))[:60]) for m in (req or {}).get("messages") or []]


def request_with_history(w, text, first_user, first_answer, timeout=15):
    """Wait for a request for `text` that carries the earlier exchange (Hermes may also make
    auxiliary calls with the same last user text, e.g. for a title)."""
    deadline = time.time() + timeout
    while True:
        found = find_requests(w, text)
        for req in found:
            if history_shown(req, first_user, first_answer):
                return req
        if time.time() > deadline:
            raise AssertionError(f"no request for {text!r} carried the first exchange; "
                                 f"{len(found)} request(s), the latest: {roles_of(found[0] if found else None)}")
        time.sleep(0.3)


def history_shown(req, first_user, first_answer):
    """Whether the request carries the earlier exchange: its user text before the last user
    message, and the assistant's answer."""
    users = user_texts(req)
    answers = user_texts(req, "assistant")
    return any(first_user in u for u in users[:-1]) and any(first_answer.strip() in a for a in answers)


# ---------------------------------------------------------------------------
# --hermes-only: Hermes' API server alone, with plain HTTP
# ---------------------------------------------------------------------------

REPORT = []  # exact shapes seen, printed at the end of --hermes-only


def seen(label, obj):
    REPORT.append((label, obj))


def chat_stream(w, session, text, timeout=TURN):
    s = Sse(w.api_port, "POST", "/v1/chat/completions",
            body={"model": "hermes-agent", "stream": True, "messages": [{"role": "user", "content": text}]},
            headers={"X-Hermes-Session-Id": session})
    s.wait(lambda: any(v == "[DONE]" for _, v, _ in s.data()), timeout, "data: [DONE]")
    s.join(10)
    deltas = []
    for _, v, name in s.data():
        if isinstance(v, dict) and name is None:
            for c in v.get("choices") or []:
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    deltas.append(piece)
    return s, deltas


def direct_chat_stream(w):
    session = "mobile-direct-chat"
    s, deltas = chat_stream(w, session, LONG_PROMPT)
    assert s.status == 200, s.status
    assert s.resp_headers.get("x-hermes-session-id") == session, s.resp_headers
    text = "".join(deltas)
    want = scripted(LONG_PROMPT)
    assert text == want, f"streamed text differs:\n got {text!r}\nwant {want!r}"
    chunks = [v for _, v, n in s.data() if isinstance(v, dict) and n is None]
    named = [(n, v) for _, v, n in s.data() if n is not None]
    seen("chat.completions: first chunk", chunks[0])
    seen("chat.completions: last chunks", chunks[-2:])
    if named:
        seen("chat.completions: named events", named[:3])
    seen("chat.completions: response headers", {k: v for k, v in s.resp_headers.items()
                                                 if k in ("content-type", "x-hermes-session-id",
                                                          "transfer-encoding", "cache-control")})
    assert find_request(w, LONG_PROMPT), "the model server never saw the request"
    return f"{len(deltas)} deltas, text exact ({len(text)} chars), X-Hermes-Session-Id echoed, [DONE]"


def direct_chat_session(w):
    session = "mobile-direct-session"
    first, second = "the first direct question", "the second direct question"
    _, d1 = chat_stream(w, session, first)
    assert "".join(d1) == scripted(first), "".join(d1)
    _, d2 = chat_stream(w, session, second)
    assert "".join(d2) == scripted(second), "".join(d2)
    req = request_with_history(w, second, first, scripted(first))
    roles = [m.get("role") for m in req["messages"]]
    seen("chat.completions + X-Hermes-Session-Id: roles of the 2nd call at the model", roles)
    # Control: another session id starts empty.
    _, d3 = chat_stream(w, "mobile-direct-other", "a third direct question")
    assert not any(history_shown(r, first, scripted(first)) for r in find_requests(w, "a third direct question")), \
        "another session id saw this session's history"
    return f"2nd call reached the model with the 1st exchange (roles {roles}); another id did not"


def start_run(w, body):
    status, headers, resp = api(w.api_port, "POST", "/v1/runs", body=body)
    assert status == 202, (status, resp)
    run_id = resp["run_id"]
    s = Sse(w.api_port, "GET", f"/v1/runs/{run_id}/events")
    return run_id, resp, s


def run_approval(w, target, session):
    target.mkdir(parents=True)
    run_id, started, s = start_run(w, {"input": f"please delete {target}", "session_id": session})
    t_req, req = s.wait(lambda: s.event("approval.request"), TURN, "approval.request")
    assert str(target) in req.get("command", ""), req
    assert "deny" in req["choices"] and "once" in req["choices"], req["choices"]
    status, _, run = api(w.api_port, "GET", f"/v1/runs/{run_id}")
    assert status == 200 and run.get("status") == "waiting_for_approval", (status, run)
    return run_id, started, s, t_req, req, run


def end_event(s, timeout=TURN):
    return s.wait(lambda: next(((t, e) for t, e in s.events()
                                if e["event"] in ("run.completed", "run.failed", "run.cancelled")), None),
                  timeout, "the end of the run")


def direct_runs_deny(w):
    target = w.work / "direct-deny" / "target"
    run_id, started, s, _, req, run = run_approval(w, target, "direct-deny")
    seen("POST /v1/runs → 202", started)
    seen("approval.request", req)
    seen("GET /v1/runs/{id} while waiting", run)
    status, _, resp = api(w.api_port, "POST", f"/v1/runs/{run_id}/approval", body={"choice": "deny"})
    assert status == 200 and resp.get("resolved") == 1, (status, resp)
    seen("POST approval deny → 200", resp)
    _, end = end_event(s)
    assert end["event"] == "run.completed", end
    s.wait(lambda: s.finished, 10, "the end of the event stream")
    seen("events of the denied run, in order", [e["event"] for _, e in s.events()])
    seen("approval.responded", next(e for _, e in s.events() if e["event"] == "approval.responded"))
    seen("tool.started / tool.completed", [e for _, e in s.events() if e["event"].startswith("tool.")])
    seen("run.completed (deny)", end)
    seen("stream comments", [v for _, k, v, _ in s.items if k == "comment"])
    assert target.exists(), "the denied command ran"
    assert "denied" in end["output"].lower() or "blocked" in end["output"].lower(), end["output"][:200]
    status, _, again = api(w.api_port, "POST", f"/v1/runs/{run_id}/approval", body={"choice": "deny"})
    seen(f"POST approval after the run ended → {status}", again)
    assert status == 409, (status, again)
    return "approval.request, deny → 200 resolved 1, run.completed, target survives; late answer → 409"


def direct_runs_once(w):
    target = w.work / "direct-once" / "target"
    run_id, _, s, _, req, _ = run_approval(w, target, "direct-once")
    status, _, bad = api(w.api_port, "POST", f"/v1/runs/{run_id}/approval", body={"choice": "maybe"})
    seen(f"POST approval with a bad choice → {status}", bad)
    assert status == 400, (status, bad)
    status, _, resp = api(w.api_port, "POST", f"/v1/runs/{run_id}/approval", body={"choice": "once"})
    assert status == 200 and resp.get("resolved") == 1, (status, resp)
    _, end = end_event(s)
    assert end["event"] == "run.completed", end
    seen("run.completed (once)", end)
    time.sleep(0.2)
    assert not target.exists(), "the approved command did not run"
    return "once → the target is gone"


def direct_runs_expire(w):
    target = w.work / "direct-expire" / "target"
    run_id, _, s, t_req, req, _ = run_approval(w, target, "direct-expire")
    # What the gateway does at its card's expiry (same TTL): answer deny. Who wins the race
    # with Hermes' own timeout decides 200 or 409; both must leave the file alone.
    time.sleep(max(0.0, t_req + APPROVAL_TIMEOUT + 0.5 - time.monotonic()))
    status, _, resp = api(w.api_port, "POST", f"/v1/runs/{run_id}/approval", body={"choice": "deny"})
    t_answer = time.monotonic() - t_req
    seen(f"POST approval deny {t_answer:.1f} s after approval.request (timeout {APPROVAL_TIMEOUT}) → {status}",
         resp)
    t_end, end = end_event(s, APPROVAL_TIMEOUT + TURN)
    after = [e for t, e in s.events() if t > t_req]
    seen("events after approval.request (expiry)", [
        {k: v for k, v in e.items() if k not in ("run_id", "timestamp")} for e in after])
    seen("run.completed (expired)", end)
    first_after = next((t for t, e in s.events() if t > t_req), None)
    assert end["event"] == "run.completed", end
    assert target.exists(), "the command ran although nobody approved it"
    assert not any("approval" in e["event"] and e["event"] != "approval.responded" for e in after), after
    took = t_end - t_req
    assert took >= APPROVAL_TIMEOUT - 1, f"the run ended {took:.1f} s after the request, before the timeout"
    return (f"first event after approval.request at {first_after - t_req:.1f} s, run.completed at {took:.1f} s "
            f"(timeout {APPROVAL_TIMEOUT} s); deny at {t_answer:.1f} s → {status}; target survives")


def direct_runs_stop(w, how):
    text = f"please run sleep {SLOW}" if how == "sleep" else "please give me a slow answer"
    run_id, _, s = start_run(w, {"input": text, "session_id": f"direct-stop-{how}"})
    if how == "sleep":
        s.wait(lambda: s.event("tool.started"), TURN, "tool.started")
        time.sleep(1.0)  # the command is running
    else:
        s.wait(lambda: len([e for _, e in s.events() if e["event"] == "message.delta"]) >= 3, TURN,
               "three message.delta")
    if how == "slow":
        status, _, resp = api(w.api_port, "POST", f"/v1/runs/{run_id}/approval", body={"choice": "deny"})
        seen(f"POST approval while the run streams, nothing pending → {status}", resp)
        assert status == 409 and resp["error"]["code"] == "approval_not_pending", (status, resp)
    t0 = time.monotonic()
    status, _, resp = api(w.api_port, "POST", f"/v1/runs/{run_id}/stop", body={})
    assert status == 200, (status, resp)
    seen(f"POST /v1/runs/{{id}}/stop ({how}) → {status}", resp)
    status2, _, mid = api(w.api_port, "GET", f"/v1/runs/{run_id}")
    seen(f"GET /v1/runs/{{id}} just after stop ({how})", mid)
    t_end, end = end_event(s, SLOW + 30)
    took = t_end - t0
    s.wait(lambda: s.finished, 10, "the end of the event stream")
    status3, _, run = api(w.api_port, "GET", f"/v1/runs/{run_id}")
    seen(f"events of the stopped run ({how})", [e["event"] for _, e in s.events()])
    seen(f"end event after stop ({how}), {took:.1f} s", end)
    seen(f"GET /v1/runs/{{id}} after the end ({how})", run)
    if how == "sleep":
        seen("`sleep` processes left in Hermes' process group after the stop", leftover_sleeps(w))
    assert end["event"] == "run.cancelled", end
    assert took < STOP_LIMIT, f"run.cancelled {took:.1f} s after stop"
    assert run.get("status") == "cancelled", run
    return f"run.cancelled {took:.1f} s after POST stop; status {run.get('status')}"


def leftover_sleeps(w):
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            if os.getpgid(int(d.name)) == w.hermes.pid and cmd and cmd[0].endswith(b"sleep"):
                found.append(b" ".join(cmd).decode(errors="replace").strip())
        except (OSError, ProcessLookupError):
            pass
    return found


def direct_runs_history(w):
    first, second = "the first run question", "the second run question"
    history = [{"role": "user", "content": first}, {"role": "assistant", "content": scripted(first)}]
    run_id, _, s = start_run(w, {"input": second, "session_id": "direct-history",
                                 "conversation_history": history})
    _, end = end_event(s)
    assert end["event"] == "run.completed" and end["output"] == scripted(second), end
    deltas = "".join(e["delta"] for _, e in s.events() if e["event"] == "message.delta")
    seen("message.delta joined vs run.completed.output", {"deltas": deltas, "output": end["output"]})
    req = request_with_history(w, second, first, scripted(first))
    # The reference says session_id alone loads nothing: a run in the same session without history.
    run2, _, s2 = start_run(w, {"input": "a third run question", "session_id": "direct-history"})
    end_event(s2)
    loaded = any(history_shown(r, second, scripted(second)) for r in find_requests(w, "a third run question"))
    seen("runs: same session_id, no conversation_history → history loaded by Hermes?", loaded)
    assert not loaded, "session_id loaded the history (contradicts the reference)"
    return f"conversation_history reached the model (roles {[m.get('role') for m in req['messages']]})"


DIRECT = [
    ("direct: chat.completions streams the scripted text", direct_chat_stream),
    ("direct: X-Hermes-Session-Id loads the history", direct_chat_session),
    ("direct: runs approval deny", direct_runs_deny),
    ("direct: runs approval once", direct_runs_once),
    ("direct: runs approval left to expire", direct_runs_expire),
    ("direct: runs stop during a terminal sleep", lambda w: direct_runs_stop(w, "sleep")),
    ("direct: runs stop during a slow stream", lambda w: direct_runs_stop(w, "slow")),
    ("direct: runs conversation_history", direct_runs_history),
]


# ---------------------------------------------------------------------------
# through the gateway
# ---------------------------------------------------------------------------


def messages_since(phone, mark):
    """[(id, [frames])] of the agent's message frames after mark, in order of first frame."""
    out = {}
    for f in phone.since(mark, "message"):
        out.setdefault(f["id"], []).append(f)
    return list(out.items())


async def turn(phone, text, what, predicate, timeout=TURN):
    """Send a text; wait for a final agent message matching predicate and for the turn to
    end (typing{stop:true} after it). Returns (mark, id, message)."""
    mark = phone.mark()
    await phone.text(text)

    def done():
        for mid, m in phone.final_messages_since(mark):
            if predicate(m["text"]):
                return mid, m
        return None

    mid, m = await phone.wait_for(done, timeout, what)
    await phone.wait_for(lambda: stopped_after(phone, mid), 15, f"typing{{stop:true}} after {what}")
    return mark, mid, m


def stopped_after(phone, mid):
    """The turn ended after message mid: a typing{stop:true} follows its final frame, and
    no typing{} came after that stop."""
    last = max((i for i, (_, f) in enumerate(phone.frames) if f.get("t") == "message" and f.get("id") == mid
                and f.get("final")), default=None)
    if last is None:
        return False
    typing = [f for _, f in phone.frames[last + 1:] if f.get("t") == "typing"]
    return bool(typing) and bool(typing[-1].get("stop"))


async def model_saw(w, pred, what, timeout=TURN):
    return await w.until(pred, timeout, what)


def one_message(phone, mark, mid):
    """The turn's output is exactly one message, its last frame final."""
    msgs = messages_since(phone, mark)
    ids = [i for i, _ in msgs]
    assert ids == [mid], f"expected one message {mid}, got {[(i, [f['text'][:40] for f in fs]) for i, fs in msgs]}"
    frames = msgs[0][1]
    assert frames[-1].get("final") is True, frames[-1]
    return frames


async def check_openai_stream(w, phone):
    want = scripted(LONG_PROMPT)
    mark, mid, m = await turn(phone, LONG_PROMPT, "the long answer", lambda t: "The end." in t)
    frames = one_message(phone, mark, mid)
    assert m["text"] == want, f"final text differs:\n got {m['text']!r}\nwant {want!r}"
    req = find_request(w, LONG_PROMPT)
    assert req, "the model server never saw the request"
    started = phone.since(mark, "avatar")
    return (f"{len(frames)} message frames, {len(m['versions'])} versions, text exact; "
            f"avatar {[f.get('state') for f in started]}")


async def check_openai_session(w, phone):
    first, second = "remember the word pelican", "which word did I ask you to remember?"
    _, _, m1 = await turn(phone, first, "the first answer", lambda t: first in t)
    assert m1["text"] == scripted(first), m1["text"]
    mark, mid, m = await turn(phone, second, "the second answer", lambda t: second in t)
    assert m["text"] == scripted(second), m["text"]
    one_message(phone, mark, mid)
    req = await asyncio.to_thread(request_with_history, w, second, first, scripted(first))
    session = SESSION_HEADER.replace("{device}", DEVICE)
    await w.until(lambda: session in hermes_sessions(w), 10,
                  f"Hermes to hold session {session} (X-Hermes-Session-Id with {{device}} replaced)")
    return (f"the model got the first exchange (roles {[x.get('role') for x in req['messages']]}); "
            f"Hermes' session {session}")


async def exec_card(w, phone, target):
    target.mkdir(parents=True)
    mark = phone.mark()
    await phone.text(f"please delete {target}")
    card = await phone.wait_for(lambda: phone.prompt_since(mark, "exec_approval"), TURN, "an exec_approval card")
    assert str(target) in card.get("command", ""), card
    opts = [o["id"] for o in card["options"]]
    assert "deny" in opts and "once" in opts, opts
    assert 1 <= int(card.get("timeout_seconds", 0)) <= APPROVAL_TIMEOUT, \
        f"card TTL {card.get('timeout_seconds')} s, Hermes times out after {APPROVAL_TIMEOUT} s"
    return phone.mark(), card, time.monotonic()  # the mark is just after the card


async def end_of_turn(phone, mark, what, predicate=lambda t: True, timeout=TURN):
    mid, msg = await phone.wait_for(
        lambda: next(((i, m) for i, m in phone.final_messages_since(mark) if predicate(m["text"])), None),
        timeout, what)
    await phone.wait_for(lambda: stopped_after(phone, mid), 15, f"typing{{stop:true}} after {what}")
    return msg


async def check_hermes_deny(w, phone):
    target = w.work / "deny" / "target"
    mark, card, _ = await exec_card(w, phone, target)
    await phone.answer(card["id"], "deny")
    msg = await end_of_turn(phone, mark, "the answer after deny", lambda t: "Tool result" in t)
    assert target.exists(), "the command ran although it was denied"
    assert "denied" in msg["text"].lower() or "blocked" in msg["text"].lower(), msg["text"][:200]
    return f"options {[o['id'] for o in card['options']]}, TTL {card['timeout_seconds']} s; target still there"


async def check_hermes_once(w, phone):
    target = w.work / "once" / "target"
    mark, card, _ = await exec_card(w, phone, target)
    await phone.answer(card["id"], "once")
    await end_of_turn(phone, mark, "the answer after once", lambda t: "Tool result" in t)
    await asyncio.sleep(0.2)
    assert not target.exists(), "the approved command did not run"
    return "target deleted"


async def check_hermes_expire(w, phone):
    target = w.work / "expire" / "target"
    mark, card, t0 = await exec_card(w, phone, target)
    await phone.wait_for(lambda: (phone.prompt_done.get(card["id"]) or {}).get("expired"),
                         APPROVAL_TIMEOUT + 10, "prompt_done{expired:true} for the card")
    took = time.monotonic() - t0
    assert took >= card["timeout_seconds"] - 2, f"the card expired after {took:.1f} s"
    msg = await end_of_turn(phone, mark, "the turn to end after the expiry", timeout=TURN + APPROVAL_TIMEOUT)
    assert target.exists(), "the command ran although nobody approved it"
    return f"expired after {took:.1f} s; turn ended with {msg['text'][:60]!r}; target survives"


def runs_in_gateway_log(w):
    try:
        text = w.gateway.logpath.read_text(errors="replace")
    except OSError:
        return []
    ids = []
    for rid in re.findall(r"run_[0-9a-f]{32}", text):
        if rid not in ids:
            ids.append(rid)
    return ids


async def check_hermes_stop(w, phone):
    text = f"please run sleep {SLOW}"
    mark = phone.mark()
    await phone.text(text)
    await model_saw(w, lambda: find_request(w, f"run sleep {SLOW}"), "the slow request at the model")
    await asyncio.sleep(2.0)  # the command is running
    t0 = time.monotonic()
    await phone.text("/stop")
    msg = await end_of_turn(phone, mark, "a message that the run stopped", lambda t: "stopped" in t.lower(),
                            timeout=STOP_LIMIT)
    took = time.monotonic() - t0
    detail = f"turn ended {took:.1f} s after /stop with {msg['text'][:60]!r}"
    assert took < STOP_LIMIT, f"the turn ended {took:.1f} s after /stop"
    runs = runs_in_gateway_log(w)
    if runs:
        def cancelled():
            status, _, run = api(w.api_port, "GET", f"/v1/runs/{runs[-1]}")
            return run if status == 200 and run.get("status") == "cancelled" else None
        try:
            run = await w.until(cancelled, 10, f"Hermes to report {runs[-1]} cancelled")
        except TimeoutError:
            raise AssertionError(f"Hermes: {api(w.api_port, 'GET', f'/v1/runs/{runs[-1]}')}") from None
        detail += f"; Hermes: {runs[-1]} {run['status']}"
    else:
        detail += "; no run id in the gateway's log, Hermes' side not checked"
    return detail


async def check_hermes_history(w, phone):
    first, second = "remember the word walrus", "which word did I ask you to remember now?"
    _, _, m1 = await turn(phone, first, "the first answer", lambda t: first in t)
    assert m1["text"] == scripted(first), m1["text"]
    mark, mid, m = await turn(phone, second, "the second answer", lambda t: second in t)
    assert m["text"] == scripted(second), m["text"]
    req = await asyncio.to_thread(request_with_history, w, second, first, scripted(first))
    return f"the model got the first exchange (roles {[x.get('role') for x in req['messages']]})"


CHECKS = [
    ("openai", "openai_stream: a streamed answer, exact", check_openai_stream),
    ("openai", "openai_session: X-Hermes-Session-Id continuity", check_openai_session),
    ("hermes", "hermes_deny: exec_approval card answered deny", check_hermes_deny),
    ("hermes", "hermes_once: exec_approval card answered once", check_hermes_once),
    ("hermes", "hermes_expire: an unanswered card expires, deny", check_hermes_expire),
    ("hermes", "hermes_stop: /stop mid-run", check_hermes_stop),
    ("hermes", "hermes_history: conversation_history", check_hermes_history),
]


async def run_gateway_checks(w, only, deadline):
    results = []
    phone = None
    for backend in ("openai", "hermes"):
        chosen = [(n, fn) for b, n, fn in CHECKS if b == backend and (not only or any(o in n for o in only))]
        if not chosen:
            continue
        t0 = time.time()
        try:
            await asyncio.to_thread(w.start_backend, backend)
            phone = Phone(f"ws://127.0.0.1:{w.port}/ws", TOKEN, device_id=DEVICE)
            await phone.connect()
        except Exception as exc:
            log(f"FAIL {backend} gateway start ({time.time() - t0:.1f} s): {type(exc).__name__}: {exc}")
            results += [(n, False) for n, _ in chosen]
            await asyncio.to_thread(w.stop_backend)
            continue
        log(f"-- {backend} gateway up ({time.time() - t0:.1f} s, port {w.port})")
        for name, fn in chosen:
            t0 = time.time()
            if t0 > deadline:
                results.append((name, False))
                log(f"FAIL {name}: not run, past the run's time limit")
                continue
            try:
                await phone.wait_for(phone.turn_over, 60, "the previous turn to end")
                detail = await asyncio.wait_for(fn(w, phone), CHECK_LIMIT)
                results.append((name, True))
                log(f"PASS {name} ({time.time() - t0:.1f} s): {detail}")
            except Exception as exc:
                results.append((name, False))
                log(f"FAIL {name} ({time.time() - t0:.1f} s): {type(exc).__name__}: {exc}")
                if w.args.verbose:
                    traceback.print_exc()
        await phone.close()
        await asyncio.to_thread(w.stop_backend)
    return results


def run_direct(w, only, deadline):
    results = []
    for name, fn in DIRECT:
        if only and not any(o in name for o in only):
            continue
        t0 = time.time()
        if t0 > deadline:
            results.append((name, False))
            log(f"FAIL {name}: not run, past the run's time limit")
            continue
        try:
            detail = fn(w)
            results.append((name, True))
            log(f"PASS {name} ({time.time() - t0:.1f} s): {detail}")
        except Exception as exc:
            results.append((name, False))
            log(f"FAIL {name} ({time.time() - t0:.1f} s): {type(exc).__name__}: {exc}")
            if w.args.verbose:
                traceback.print_exc()
    if REPORT:
        log("--- what Hermes sent (run_id and timestamp fields as they came) ---")
        for label, obj in REPORT:
            log(f"{label}: {fmt(obj, 1500)}")
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway", default=os.environ.get("GATEWAY_BIN", str(REPO / "target/release/hermes-mobile")))
    ap.add_argument("--hermes", default=os.environ.get("HERMES_BIN", str(Path(sys.executable).parent / "hermes")))
    ap.add_argument("--hermes-only", action="store_true",
                    help="check Hermes' API server directly (no gateway) and print the events seen")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    ap.add_argument("--limit", type=int, default=300, help="seconds for the whole run (default 300)")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("only", nargs="*", help="run only the checks whose names contain these words")
    args = ap.parse_args()
    args.gateway = str(Path(args.gateway).resolve())
    needed = [(args.hermes, "hermes")] + ([] if args.hermes_only else [(args.gateway, "gateway binary")])
    for path, what in needed:
        if not os.access(path, os.X_OK):
            sys.exit(f"no {what} at {path}")

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    w = World(args)
    t0 = time.time()
    results = []
    try:
        w.start_model()
        w.write_config()
        w.start_hermes()
        log(f"setup: {time.time() - t0:.1f} s (Hermes API on 127.0.0.1:{w.api_port}; tmp {w.tmp})")
        deadline = t0 + args.limit
        if args.hermes_only:
            results = run_direct(w, args.only, deadline)
        else:
            results = asyncio.run(run_gateway_checks(w, args.only, deadline))
    except KeyboardInterrupt as exc:
        log(f"FAIL interrupted ({exc}); stopping every process")
        results.append(("interrupted", False))
    except Exception as exc:
        log(f"FAIL setup: {type(exc).__name__}: {exc}")
        results.append(("setup", False))
        if args.verbose:
            traceback.print_exc()
    finally:
        w.shutdown()
    failed = [n for n, ok in results if not ok]
    if failed or args.verbose:
        for p in (*w.gateways, w.hermes, w.model):
            if p is not None:
                log(f"--- last lines of {p.name}.log ---\n{p.tail(30)}")
    log(f"total: {time.time() - t0:.1f} s")
    if args.keep or failed:
        log(f"kept {w.tmp}")
    else:
        shutil.rmtree(w.tmp, ignore_errors=True)
    log(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed or not results else 0)


if __name__ == "__main__":
    main()
