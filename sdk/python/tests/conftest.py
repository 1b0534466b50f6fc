"""Fixtures for the Python SDK's tests: the real release gateway (its built-in demo agent,
docs/demo-agent.md) on a free port, started once for the session and stopped with
SIGTERM; and, in one place, the check that every frame a client of this package sends or
receives validates against docs/protocol-v1.schema.json.

Environment:
  GATEWAY_BIN  the gateway [default: <repo>/target/release/hermes-mobile]
  SCHEMA       the protocol's JSON Schema [default: <repo>/docs/protocol-v1.schema.json]
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import hermes_mobile_client as hm
from hermes_mobile_client.frame_hooks import FRAME_LOG_ENV

ROOT = Path(__file__).resolve().parents[3]
GATEWAY = Path(os.environ.get("GATEWAY_BIN") or ROOT / "target" / "release" / "hermes-mobile")
SCHEMA_PATH = Path(os.environ.get("SCHEMA") or ROOT / "docs" / "protocol-v1.schema.json")
TOKEN = "sdk-python-test-token-0123456789"
DELIVER_TOKEN = "sdk-python-deliver-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Gateway:
    port: int
    state_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def start_gateway(
    state_dir: Path, port: int | None = None, settings: Mapping[str, str] | None = None
) -> Gateway:
    """Starts the release gateway and waits until /healthz answers; stop it with stop_gateway.
    `settings`: more MOBILE_* variables (MOBILE_HISTORY=off…)."""
    if not GATEWAY.is_file() or not os.access(GATEWAY, os.X_OK):
        pytest.exit(f"no gateway binary at {GATEWAY}: build it with `cargo build --release`", returncode=2)
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOBILE_")}
    env.update(
        MOBILE_HOST="127.0.0.1",
        MOBILE_PORT=str(port),
        MOBILE_TOKEN=TOKEN,
        MOBILE_DELIVER_TOKENS=DELIVER_TOKEN,
        MOBILE_STATE_DIR=str(state_dir),
        MOBILE_ENV_FILE="",
        MOBILE_DEMO_STEP="0.05",
    )
    env.update(settings or {})
    log_path = state_dir / "server.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(GATEWAY)], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    g = Gateway(port=port, state_dir=state_dir, proc=proc, log_path=log_path)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited ({proc.returncode}):\n{g.log_tail()}")
        try:
            with urllib.request.urlopen(g.base + "/healthz", timeout=2) as r:
                if r.status == 200:
                    return g
        except OSError:
            pass
        time.sleep(0.05)  # polling /healthz: there is no event to wait for
    stop_gateway(g)
    raise RuntimeError(f"/healthz on port {port} did not answer within 15 s:\n{g.log_tail()}")


def stop_gateway(g: Gateway) -> None:
    if g.proc.poll() is not None:
        return
    os.kill(g.proc.pid, signal.SIGTERM)
    try:
        g.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(g.proc.pid, signal.SIGKILL)
        g.proc.wait(timeout=5)


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    state_dir = Path(tempfile.mkdtemp(prefix="hermes-sdk-python-"))
    g = start_gateway(state_dir)
    try:
        yield g
    finally:
        stop_gateway(g)
        shutil.rmtree(state_dir, ignore_errors=True)


# ---- every frame against the schema ----------------------------------------------------


@dataclass
class FrameChecker:
    """Validates frames: root for any frame, `$defs/ClientFrame` for what a client sends and
    `$defs/ServerFrame` for what it receives. Failures are collected, and each test that
    used a client fails at its end if any frame did not validate."""

    validators: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, direction: str, frame: Mapping[str, Any]) -> None:
        which = "ClientFrame" if direction == "out" else "ServerFrame"
        problems = []
        for name in ("root", which):
            errors = sorted(self.validators[name].iter_errors(frame), key=lambda e: list(e.path))
            if errors:
                best = min(errors, key=lambda e: len(list(e.absolute_path)))
                problems.append(f"{name}: {best.message[:300]}")
        with self.lock:
            self.count += 1
            if problems:
                shown = {k: (v if len(json.dumps(v)) < 200 else "…") for k, v in frame.items()}
                self.failures.append(f"{direction} {shown}: {'; '.join(problems)}")

    def check_log(self, path: Path) -> None:
        """Frames a client in another process (the chat, `send`) wrote to its frame log."""
        if not path.exists():
            return
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            self.check(entry["dir"], entry["frame"])


def _load_checker() -> FrameChecker:
    checker = FrameChecker()
    if not SCHEMA_PATH.is_file():
        pytest.exit(f"no protocol schema at {SCHEMA_PATH} (set SCHEMA)", returncode=2)
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    checker.validators["root"] = cls(schema)
    for name in ("ClientFrame", "ServerFrame"):
        sub = {"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]}
        checker.validators[name] = cls(sub)
    return checker


_CHECKER = _load_checker()


@pytest.fixture(scope="session")
def frame_checker() -> FrameChecker:
    return _CHECKER


@pytest.fixture(autouse=True)
def _validate_frames(frame_checker: FrameChecker, tmp_path: Path) -> Iterator[None]:
    """Every frame of every client in this test, in this process (a frame hook) or in a
    child process (its frame log, see child_env), is validated against the schema."""
    before = len(frame_checker.failures)
    hm.add_frame_hook(frame_checker.check)
    try:
        yield
    finally:
        hm.remove_frame_hook(frame_checker.check)
    frame_checker.check_log(tmp_path / FRAME_LOG)
    new = frame_checker.failures[before:]
    assert not new, "frames that do not validate against the schema:\n" + "\n".join(new[:10])


FRAME_LOG = "frames.jsonl"


def child_env(tmp_path: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process running this package: it logs its frames where
    the schema check of this test (tmp_path) reads them."""
    env = dict(os.environ)
    env[FRAME_LOG_ENV] = str(tmp_path / FRAME_LOG)
    env.update(extra or {})
    return env


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    reporter.write_line(f"schema: {_CHECKER.count} frames validated against {SCHEMA_PATH}")
