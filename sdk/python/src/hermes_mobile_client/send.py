"""`python -m hermes_mobile_client send`: deliver a message or file to a phone through a
running gateway, as `hermes-mobile send` (and cron) does, with the same options and exit
codes (decisions-local.md L25)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from . import _util as u
from .client import Client
from .events import Delivered, HermesError

EXIT_DELIVERED = 0
EXIT_FAILED = 1  # could not connect, or no answer
EXIT_USAGE = 2
EXIT_OFFLINE = 3  # device_offline: retry later
EXIT_REFUSED = 4  # auth_failed or forbidden
EXIT_REJECTED = 5  # other refusals: bad_frame, too_big, …

DEFAULT_ENV_FILE = "/etc/hermes-mobile/hermes-mobile.env"
SERVICE_STATE_DIR = "/var/lib/hermes-mobile"
DEFAULT_PORT = 8787

EPILOG = """EXIT CODES:
  0 delivered   1 could not connect or no answer   2 bad usage
  3 device_offline (retry later)   4 auth_failed or forbidden   5 refused (bad_frame, too_big, ...)
"""


class _Usage(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hermes_mobile_client send",
        description="Deliver a message to a phone through a running gateway (as `hermes-mobile send`).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--to", default="", help="mobile:<device id> or <device id>; empty: MOBILE_HOME_DEVICE")
    p.add_argument("--text", help="the message text")
    p.add_argument("--file", help="a file to attach (at most 8 MiB)")
    p.add_argument("--kind", help="image, voice, video, document or animation [default: from the file name]")
    p.add_argument("--url", help="the gateway [default: ws://127.0.0.1:$MOBILE_PORT/ws, port 8787]")
    p.add_argument(
        "--token",
        help="[default: the first MOBILE_DELIVER_TOKENS entry, else MOBILE_TOKEN, else the token "
        "in the state directory]",
    )
    p.add_argument("--id", help="the delivery id; repeat it to retry without sending twice [default: new]")
    p.add_argument(
        "--device", help="the device id this sender says hello as [default: hermes-send-<hash of the id>]"
    )
    p.add_argument("--timeout", default="10", help="give up after this many seconds [default: 10]")
    p.add_argument(
        "--env-file",
        help=f"the service's settings [default: {DEFAULT_ENV_FILE} if it exists; "
        "the environment wins; '' reads none]",
    )
    return p


def parse_env_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= subset: KEY=VALUE lines, # and ; comments, quotes."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip()
        if not key or not all(c.isascii() and (c.isalnum() or c == "_") for c in key):
            continue
        value = value.strip()
        for q in ('"', "'"):
            if len(value) >= 2 and value[0] == q and value[-1] == q:
                value = value[1:-1]
                break
        out[key] = value
    return out


def layered_env(env: Mapping[str, str], env_file: str | None) -> dict[str, str]:
    """The environment over the service's settings file, as `hermes-mobile send` reads them."""
    chosen = env_file if env_file is not None else env.get("MOBILE_ENV_FILE")
    if chosen == "":
        return dict(env)
    path = Path(chosen) if chosen is not None else Path(DEFAULT_ENV_FILE)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        if chosen is None:
            return dict(env)  # the default file: only when it exists and can be read
        raise _Usage(f"cannot read the settings file {path}: {e.strerror or e}") from None
    merged = parse_env_file(text)
    merged.setdefault("MOBILE_STATE_DIR", SERVICE_STATE_DIR)
    merged.update(env)
    return merged


def default_state_dir(env: Mapping[str, str]) -> Path:
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]) / "hermes-mobile"
    if env.get("HOME"):
        return Path(env["HOME"]) / ".local/state/hermes-mobile"
    return Path("hermes-mobile-state")


def default_token(env: Mapping[str, str]) -> str:
    for t in env.get("MOBILE_DELIVER_TOKENS", "").split(","):
        if t.strip():
            return t.strip()
    if env.get("MOBILE_TOKEN", "").strip():
        return env["MOBILE_TOKEN"].strip()
    folder = Path(env["MOBILE_STATE_DIR"]) if env.get("MOBILE_STATE_DIR") else default_state_dir(env)
    try:
        return (folder / "token").read_text(encoding="utf-8").strip()
    except OSError:
        raise _Usage(
            f"no token: pass --token, or set MOBILE_DELIVER_TOKENS or MOBILE_TOKEN (none in {folder})"
        ) from None


def exit_code_for(code: str) -> int:
    """The exit code for an error code (L25)."""
    if code == "device_offline":
        return EXIT_OFFLINE
    if code in ("auth_failed", "forbidden"):
        return EXIT_REFUSED
    if code in ("offline", "timeout", "closed", "replaced"):
        return EXIT_FAILED
    if code == "read_failed":
        return EXIT_USAGE
    return EXIT_REJECTED


async def deliver_once(
    url: str,
    token: str,
    *,
    device: str,
    to: str,
    text: str | None,
    file: str | None,
    kind: str | None,
    delivery_id: str,
    timeout: float,
) -> Delivered:
    """Connects once (no reconnects), says hello, sends one `deliver` and returns the
    answer; raises HermesError."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    client = Client(
        url,
        token=token,
        device_id=device,
        device_name="hermes_mobile_client send",
        reconnect=False,
        open_timeout=timeout,
        ready_timeout=timeout,
    )
    async with client:
        await client.wait_online(max(0.0, deadline - loop.time()))
        return await client.deliver(
            text,
            to=to,
            file=file,
            kind=kind,
            id=delivery_id,
            timeout=max(0.01, deadline - loop.time()),
        )


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    try:
        args = _parser().parse_args(args_in)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    environ = dict(os.environ if env is None else env)
    try:
        try:
            timeout = float(args.timeout)
        except ValueError:
            raise _Usage(f"--timeout must be seconds, got {args.timeout!r}") from None
        if not (timeout > 0 and timeout < float("inf")):
            raise _Usage("--timeout must be positive")
        if args.text is None and args.file is None:
            raise _Usage("nothing to send: give --text and/or --file")
        layered = layered_env(environ, args.env_file)
        token = args.token if args.token is not None else default_token(layered)
        port = layered.get("MOBILE_PORT") or str(DEFAULT_PORT)
        if args.id is not None and not 1 <= len(args.id) <= 128:
            # The gateway would cut it (G8) and answer with the cut id: as hermes-mobile send.
            raise _Usage("--id must be 1 to 128 characters")
        url = args.url or f"ws://127.0.0.1:{port}/ws"
        if not url.startswith(("ws://", "wss://")):
            raise _Usage(f"{url}: the url must start with ws:// or wss://")
        if args.file is not None:
            path = Path(args.file)
            if not path.is_file():
                raise _Usage(f"cannot read {path}: not a file")
            if path.stat().st_size > u.MAX_MEDIA_BYTES:
                print(f"hermes_mobile_client send: {path} is over 8 MiB", file=sys.stderr)
                return EXIT_REJECTED
    except _Usage as e:
        print(f"hermes_mobile_client send: {e}", file=sys.stderr)
        return EXIT_USAGE
    delivery_id = args.id or f"send-{int(time.time() * 1000)}-{os.getpid()}"
    device = args.device or u.sender_device(delivery_id)
    try:
        d = asyncio.run(
            deliver_once(
                url,
                token,
                device=device,
                to=args.to,
                text=args.text,
                file=args.file,
                kind=args.kind,
                delivery_id=delivery_id,
                timeout=timeout,
            )
        )
    except HermesError as e:
        print(f"hermes_mobile_client send: {e.code}: {e.message}", file=sys.stderr)
        return exit_code_for(e.code)
    except OSError as e:
        print(f"hermes_mobile_client send: {e}", file=sys.stderr)
        return EXIT_FAILED
    held = " (held: the phone is offline and was notified)" if d.held else ""
    print(f"delivered to {d.device}{held}")
    return EXIT_DELIVERED
