"""The ten-line Python example of docs/sdk.md and of this package's README, run as written
(only the address, the token and the device id replaced): it prints the reply, and with a
wrong token it fails loudly instead of ending without a word."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TOKEN, Gateway, child_env

EXAMPLES = [ROOT / "docs" / "sdk.md", ROOT / "sdk" / "python" / "README.md"]


def example(doc: Path) -> str:
    """The first ```python block that connects and prints a reply."""
    for block in re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
        if "connect(" in block and "asyncio.run(main())" in block:
            return str(block)
    raise AssertionError(f"no ten-line example in {doc}")


def run_example(doc: Path, gateway: Gateway, token: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = example(doc)
    for placeholder in ('"ws://127.0.0.1:8787/ws"', '"YOUR-APP-TOKEN"', '"py-bot-1"'):
        assert placeholder in code, (doc, placeholder)
    code = code.replace('"ws://127.0.0.1:8787/ws"', repr(gateway.url))
    code = code.replace('"YOUR-APP-TOKEN"', repr(token))
    code = code.replace('"py-bot-1"', repr(f"py-example-{secrets.token_hex(4)}"))
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        env=child_env(tmp_path),
        cwd=tmp_path,  # its seq_file
        check=False,
    )


@pytest.mark.parametrize("doc", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_example_prints_the_reply(doc: Path, gateway: Gateway, tmp_path: Path) -> None:
    done = run_example(doc, gateway, TOKEN, tmp_path)
    assert (done.returncode, done.stdout) == (0, "echo: hello\n"), done.stderr


@pytest.mark.parametrize("doc", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_example_fails_loudly_on_a_wrong_token(doc: Path, gateway: Gateway, tmp_path: Path) -> None:
    done = run_example(doc, gateway, "not-the-token-0123456789", tmp_path)
    assert done.returncode != 0
    assert "HermesError: auth_failed" in done.stderr, done.stderr
