"""`python -m hermes_mobile_client send` (exit codes as `hermes-mobile send`, L25) and the
terminal chat, driven through a pseudo-terminal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_mobile_client import Message, connect

from conftest import DELIVER_TOKEN, GATEWAY, TOKEN, FrameChecker, Gateway, child_env, free_port


def device(name: str) -> str:
    return f"py-{name}-{secrets.token_hex(4)}"


async def run_send(tmp_path: Path, *args: str, python: bool = True) -> tuple[int, str]:
    """Runs `send` (this package's, or the gateway's own) and returns (exit code, output)."""
    cmd = [sys.executable, "-m", "hermes_mobile_client", "send"] if python else [str(GATEWAY), "send"]
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=child_env(tmp_path, {"MOBILE_ENV_FILE": ""}),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def test_the_schema_check_is_live(frame_checker: FrameChecker) -> None:
    assert frame_checker.validators["ClientFrame"].is_valid({"t": "text", "id": "x", "text": "hi"})
    assert not frame_checker.validators["ClientFrame"].is_valid({"t": "text", "id": "x"})
    assert not frame_checker.validators["ServerFrame"].is_valid({"t": "hello", "token": "x"})


def test_send_exit_codes_match_hermes_mobile_send(gateway: Gateway, tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    note.write_text("attached")
    dead_url = f"ws://127.0.0.1:{free_port()}/ws"

    async def scenario() -> None:
        async with connect(gateway.url, token=TOKEN, device_id=device("sendee")) as phone:
            await phone.wait_online(10)
            base = ["--url", gateway.url, "--timeout", "5"]
            cases: list[tuple[int, list[str]]] = [
                (0, [*base, "--token", DELIVER_TOKEN, "--to", f"mobile:{phone.device_id}", "--text", "hi"]),
                (0, [*base, "--token", DELIVER_TOKEN, "--to", phone.device_id, "--file", str(note)]),
                (1, ["--url", dead_url, "--token", DELIVER_TOKEN, "--to", "x", "--text", "hi"]),
                (2, [*base, "--token", DELIVER_TOKEN, "--to", phone.device_id]),
                (2, [*base, "--token", DELIVER_TOKEN, "--to", "x", "--text", "hi", "--timeout", "0"]),
                (2, [*base, "--token", DELIVER_TOKEN, "--text", "hi", "--bogus"]),
                (2, [*base, "--token", DELIVER_TOKEN, "--to", "x", "--text", "hi", "--id", "i" * 129]),
                (3, [*base, "--token", DELIVER_TOKEN, "--to", "mobile:" + device("away"), "--text", "hi"]),
                (4, [*base, "--token", "not-the-token-0123456789", "--to", phone.device_id, "--text", "hi"]),
                (5, [*base, "--token", DELIVER_TOKEN, "--to", "", "--text", "no home device"]),
            ]
            for want, args in cases:
                code, out = await run_send(tmp_path, *args)
                assert code == want, (args, out)
                rust, rust_out = await run_send(tmp_path, *args, python=False)
                assert rust == want, ("hermes-mobile send", args, rust_out)
            texts: list[str] = []
            while len(texts) < 2:
                texts.append((await phone.wait_for(Message, timeout=10)).text)
            assert texts == ["hi", "hi"]  # one from each implementation

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_send_prints_what_it_delivered(gateway: Gateway, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with connect(gateway.url, token=TOKEN, device_id=device("sendee2")) as phone:
            await phone.wait_online(10)
            args = [
                "--url",
                gateway.url,
                "--token",
                DELIVER_TOKEN,
                "--to",
                phone.device_id,
                "--text",
                "x",
                "--id",
                "a1",
            ]
            code, out = await run_send(tmp_path, *args)
            assert (code, out.strip()) == (0, f"delivered to {phone.device_id}")
            code, out = await run_send(tmp_path, *args)  # a retry with the same id: not sent twice
            assert code == 0
            await phone.wait_for(Message, timeout=10)
            phone.send_text("mark")
            assert (await phone.wait_for(Message, timeout=10)).text == "echo: mark"

    asyncio.run(asyncio.wait_for(scenario(), 30))


class Terminal:
    """A child process on a pseudo-terminal: type lines, wait for output (bounded)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True
        )
        os.close(slave)
        self.fd = master
        self.out = ""
        self.pos = 0  # what expect() has matched so far

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def expect(self, pattern: str, timeout: float = 10, since: int | None = None) -> re.Match[str]:
        """Waits until `pattern` (a regex) appears after the last match (or after `since`);
        returns the match."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.out, self.pos if since is None else since)
            if m:
                self.pos = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no {pattern!r} within {timeout} s; the terminal shows:\n{self.out[-3000:]}"
                )
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the chat ended before {pattern!r}:\n{self.out[-3000:]}")
                self.out += chunk.decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            os.close(self.fd)


def start_chat(gateway: Gateway, tmp_path: Path, dev: str) -> Terminal:
    argv = [sys.executable, "-m", "hermes_mobile_client", "chat", "--url", gateway.url]
    argv += ["--token", TOKEN, "--device", dev]
    # Its seq file goes under XDG_STATE_HOME: here, not in the home of whoever runs the tests.
    return Terminal(argv, child_env(tmp_path, {"XDG_STATE_HOME": str(tmp_path / "state")}), tmp_path)


@pytest.fixture
def chat(gateway: Gateway, tmp_path: Path) -> Iterator[Terminal]:
    term = start_chat(gateway, tmp_path, device("tty"))
    try:
        yield term
    finally:
        term.close()


def test_the_terminal_chat(chat: Terminal, tmp_path: Path) -> None:
    chat.expect(r"\* online as mobile:py-tty-")
    chat.type("hello from a terminal")
    chat.expect(r"agent: echo: hello from a terminal\r?\n")

    chat.type("/stream one two three")
    chat.expect(r"agent: one two three\r?\n")  # grown in place on one line
    assert "agent: one\r" not in chat.out
    assert "agent: one two\r" not in chat.out

    chat.type("/approve ls")
    chat.expect(r"\[card\] Run this command\?")
    chat.expect(r"\$ ls")
    chat.expect(r"\[1\] Once  \[2\] [^[]+  \[3\] Always  \[4\] Deny")
    chat.type("1")
    chat.expect(r"\[card\] answered: ")
    chat.expect(r"agent: approved \(once\): ls")

    note = tmp_path / "note.txt"
    note.write_text("a note from the terminal\n")
    start = chat.pos
    chat.type(f"/file {note}")
    chat.expect(r"sent note\.txt \(25 bytes\)", since=start)  # confirmed: before or after the echo
    chat.expect(r"agent: got document note\.txt \(25 bytes, text/plain\)", since=start)
    m = chat.expect(r"\[file\] note\.txt \(document, text/plain, 25 bytes\) saved to (\S+)", since=start)
    assert (tmp_path / m.group(1)).read_text() == "a note from the terminal\n"
    assert Path(m.group(1)).parts[0] == "received"

    chat.type("/quit")
    assert chat.proc.wait(timeout=10) == 0


def test_the_chat_started_again_shows_only_what_it_missed(gateway: Gateway, tmp_path: Path) -> None:
    dev = device("again")
    first = start_chat(gateway, tmp_path, dev)
    try:
        first.expect(r"\* online as ")
        first.type("said before")
        first.expect(r"agent: echo: said before\r?\n")
        first.type("/quit")
        assert first.proc.wait(timeout=10) == 0
    finally:
        first.close()
    assert (tmp_path / "state" / "hermes-mobile-client" / f"{dev}.seq").is_file()

    async def while_away() -> None:  # a reply the chat was not there for
        async with connect(gateway.url, token=TOKEN, device_id=dev) as other:
            other.send_text("said elsewhere")
            await other.wait_for(Message, lambda m: m.text == "echo: said elsewhere", timeout=10)

    asyncio.run(asyncio.wait_for(while_away(), 20))
    again = start_chat(gateway, tmp_path, dev)
    try:
        again.expect(r"\* online as ")
        again.expect(r"agent: echo: said elsewhere\r?\n")
        again.type("and now")
        again.expect(r"agent: echo: and now\r?\n")
        assert "said before" not in again.out, "what it showed before is not shown again"
    finally:
        again.close()
