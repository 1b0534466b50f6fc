"""`python -m hermes_mobile_client chat`: a terminal chat with the agent.

- Streamed replies grow in place: each new version's added text is appended to the line
  (a version that changes earlier text is printed again, whole).
- Cards are shown with numbered options: type the number (and Enter) to answer. Hidden
  characters on a card (bidi controls, zero-width characters) are shown as ⟨U+202E⟩, with a
  warning, so the command shown is the command that runs (issue 23).
- `/file PATH [caption]` sends a file, with its progress; received files are saved to a
  folder (./received by default).
- `/quit` (or end of input, Ctrl-D) leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import hashlib
import os
import re
import shlex
import shutil
import socket
import sys
import threading
from pathlib import Path
from typing import TextIO

from . import _util as u
from .client import Client
from .events import (
    Card,
    CardDone,
    Error,
    Event,
    HermesError,
    Invalid,
    Media,
    MediaProgress,
    Message,
    Ready,
    Rejected,
    Status,
    Unsent,
    UploadProgress,
)
from .hidden_chars import reveal_hidden_chars

# Control characters (all but newline and tab): text from the agent must not move the
# cursor, recolour or retitle the terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    return _CONTROL.sub("", text)


HIDDEN_WARNING = "    ! this card contains hidden characters, shown as ⟨U+…⟩: check it before you answer"


HELP = """Type a message and press Enter. Local commands:
  /file PATH [CAPTION]   send a file
  /quit                  leave (or Ctrl-D)
A card shows numbered options: type the number to answer it. Everything else (the agent's
own /commands too) goes to the agent."""


def default_device_id() -> str:
    """One device id per user and machine, stable across runs (H4)."""
    try:
        who = getpass.getuser()
    except Exception:
        who = "user"
    digest = hashlib.sha256(f"{socket.gethostname()}:{who}".encode()).hexdigest()
    return f"term-{digest[:16]}"


def default_seq_file(device_id: str) -> Path:
    """Where the chat keeps its journal seq (issue 24), so that a new start shows only what
    it missed: $XDG_STATE_HOME/hermes-mobile-client/<device>.seq (~/.local/state/…)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "hermes-mobile-client" / f"{u.sanitize_filename(device_id)}.seq"


class Chat:
    """The chat's screen and input handling; `run()` until /quit, end of input or a stop."""

    def __init__(self, client: Client, out: TextIO, save_dir: Path) -> None:
        self.client = client
        self.out = out
        self.save_dir = save_dir
        self.tty = out.isatty()
        self.live_key: str | None = None  # the message being streamed on the current line
        self.live_text = ""
        self.transient = False  # a progress line that the next output replaces
        self.open_cards: list[Card] = []
        self.clarify: Card | None = None  # waiting for the text of clarify's "other"
        self.uploads: dict[str, str] = {}  # upload id → file name
        self.exit_code = 0

    # ---- output -------------------------------------------------------------------------

    def _write(self, s: str) -> None:
        self.out.write(s)
        self.out.flush()

    def _clear_transient(self) -> None:
        if self.transient:
            self._write("\r\x1b[K" if self.tty else "\n")
            self.transient = False

    def _end_live(self) -> None:
        if self.live_key is not None:
            self._write("\n")
            self.live_key = None
            self.live_text = ""

    def line(self, text: str) -> None:
        """Prints a whole line, after ending a streamed line or a progress line."""
        self._clear_transient()
        self._end_live()
        self._write(printable(text) + "\n")

    def progress(self, text: str) -> None:
        """A line that the next output replaces (on a terminal; elsewhere, only 0 and 100 %)."""
        if not self.tty:
            return
        self._end_live()
        self._write("\r\x1b[K" + printable(text))
        self.transient = True

    def show_message(self, m: Message) -> None:
        self._clear_transient()
        text = printable(m.text)
        end = "\n" if m.final else ""
        label = "agent (edited)" if m.edit else "agent"
        if self.live_key == m.key and text.startswith(self.live_text):
            self._write(text[len(self.live_text) :] + end)  # the stream grows in place
        elif self.live_key == m.key and self.tty and self._fits(self.live_text) and self._fits(text):
            self._write(f"\r\x1b[K{label}: {text}{end}")  # an edit of a one-line message: redrawn
        else:
            self._end_live()
            self._write(f"{label}: {text}{end}")
        if m.final:
            self.live_key, self.live_text = None, ""
        else:
            self.live_key, self.live_text = m.key, text

    def _fits(self, text: str) -> bool:
        width = shutil.get_terminal_size((80, 24)).columns
        return "\n" not in text and len(text) + len("agent (edited): ") < width

    def show_card(self, card: Card) -> None:
        self.open_cards = [c for c in self.open_cards if c.id != card.id] + [card]
        again = " (again)" if card.repeat else ""
        # Revealed before line()'s printable(), which would drop a control character unseen.
        show = reveal_hidden_chars
        self.line(f"[card{again}] {show(card.text)}")
        if card.hidden_chars:
            self.line(HIDDEN_WARNING)
        if card.command:
            self.line(f"    $ {show(card.command)}")
        if card.description:
            self.line(f"    {show(card.description)}")
        options = "  ".join(f"[{i}] {show(o.label)}" for i, o in enumerate(card.options, 1))
        self.line(f"    {options}")
        self.line("    answer with the number of an option")

    def on_event(self, ev: Event) -> None:
        if isinstance(ev, Message):
            self.show_message(ev)
        elif isinstance(ev, Card):
            self.show_card(ev)
        elif isinstance(ev, CardDone):
            self.open_cards = [c for c in self.open_cards if c.id != ev.id]
            if self.clarify is not None and self.clarify.id == ev.id:
                self.clarify = None
            if ev.expired:
                self.line("[card] expired" + (f" ({reveal_hidden_chars(ev.label)})" if ev.label else ""))
            else:
                self.line(f"[card] answered: {reveal_hidden_chars(ev.label or ev.option_id or 'text')}")
        elif isinstance(ev, Media):
            what = f"{ev.filename or ev.id} ({ev.kind}, {ev.mime or 'unknown type'}, {ev.size} bytes)"
            if ev.url:
                self.line(f"[file] {what}: {ev.url}")
            elif ev.path is not None:
                self.line(f"[file] {what} saved to {ev.path}")
            else:  # replayed after a resume, its bytes no longer kept (L58)
                self.line(f"[file] {what}: no longer kept by the gateway")
            if ev.caption:
                self.line(f"       {ev.caption}")
        elif isinstance(ev, MediaProgress):
            if ev.parts > 1 and ev.got < ev.parts:
                self.progress(f"  receiving {ev.filename}: {ev.got}/{ev.parts} parts")
        elif isinstance(ev, UploadProgress):
            name = self.uploads.get(ev.id, ev.id)
            if ev.percent >= 100:
                self.uploads.pop(ev.id, None)
                self.line(f"  sent {name} ({ev.total} bytes)")
            else:
                self.progress(f"  sending {name}: {ev.percent}%")
        elif isinstance(ev, Status):
            self.on_status(ev)
        elif isinstance(ev, Ready):
            self.line(f"* online as {ev.session}")
        elif isinstance(ev, Error):
            self.line(f"! {ev.code}: {ev.message}")
        elif isinstance(ev, Rejected):
            self.uploads.pop(ev.id, None)
            self.line(f"! not sent ({ev.code}): {ev.message}")
        elif isinstance(ev, Unsent):
            self.line(f"! not sent (the connection was lost): {ev.id}")
        elif isinstance(ev, Invalid):
            self.line(f"! ignored a frame from the gateway: {ev.reason}")

    def on_status(self, st: Status) -> None:
        if st.state == "connecting" and st.attempt == 0:
            self.line(f"* connecting to {self.client.url}")
        elif st.state == "offline":
            retry = f"; retrying in {st.retry_in:.1f} s" if st.retry_in is not None else ""
            self.line(f"* offline ({st.reason}){retry}")
            if st.retry_in is None:
                self.exit_code = 1
        elif st.state == "noaccess":
            self.line(f"* no access ({st.code}): check the token and the device id")
            self.exit_code = 4
        elif st.state == "replaced":
            self.line("* another connection took this device id over (replaced); use --device")
            self.exit_code = 1

    # ---- input --------------------------------------------------------------------------

    def on_input(self, raw: str) -> bool:
        """Handles one typed line; False to quit."""
        text = raw.rstrip("\r\n")
        stripped = text.strip()
        if not stripped:
            return True
        if stripped in ("/quit", "/exit"):
            return False
        if stripped in ("/?", "/keys"):
            self.line(HELP)
            return True
        try:
            if self.clarify is not None:
                card, self.clarify = self.clarify, None
                self.client.answer(card, "other", text)
            elif stripped == "/file" or stripped.startswith("/file "):
                self.send_file(stripped[len("/file") :].strip())
            elif stripped.isdigit() and self.open_cards:
                self.answer_card(int(stripped))
            else:
                self.client.send_text(text)
        except HermesError as e:
            self.line(f"! {e.code}: {e.message}")
        return True

    def answer_card(self, n: int) -> None:
        card = self.open_cards[-1]
        if not 1 <= n <= len(card.options):
            self.line(f"! choose 1 to {len(card.options)}")
            return
        option = card.options[n - 1]
        if card.kind == "clarify" and option.id == "other":
            self.clarify = card
            self.line("    type your answer:")
            return
        self.client.answer(card, option)

    def send_file(self, rest: str) -> None:
        if not rest:
            self.line("! usage: /file PATH [CAPTION]")
            return
        try:
            words = shlex.split(rest)
        except ValueError:
            words = [rest]
        path = Path(os.path.expanduser(words[0]))
        if not path.is_file() and len(words) > 1 and Path(os.path.expanduser(rest)).is_file():
            path, words = Path(os.path.expanduser(rest)), [rest]  # a name with spaces, unquoted
        caption = " ".join(words[1:]) or None
        mid = self.client.send_file(path, caption=caption)
        self.uploads[mid] = path.name
        self.line(f"  sending {path.name} ({path.stat().st_size} bytes)")

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()

        def read_stdin() -> None:
            try:
                for raw in sys.stdin:
                    loop.call_soon_threadsafe(lines.put_nowait, raw)
            except (OSError, ValueError):
                pass
            with contextlib.suppress(RuntimeError):  # the loop has ended
                loop.call_soon_threadsafe(lines.put_nowait, None)

        threading.Thread(target=read_stdin, name="chat-stdin", daemon=True).start()

        async def events() -> None:
            async for ev in self.client:
                self.on_event(ev)

        async def inputs() -> None:
            while True:
                raw = await lines.get()
                if raw is None or not self.on_input(raw):
                    return

        ev_task = loop.create_task(events())
        in_task = loop.create_task(inputs())
        done, _ = await asyncio.wait({ev_task, in_task}, return_when=asyncio.FIRST_COMPLETED)
        for t in (ev_task, in_task):
            if t not in done:
                t.cancel()
        for t in done:
            t.result()
        self._clear_transient()
        self._end_live()
        return self.exit_code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hermes_mobile_client chat",
        description="A terminal chat with the agent behind a hermes-mobile gateway.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--url", default="ws://127.0.0.1:8787/ws", help="the gateway's WebSocket [default: %(default)s]"
    )
    p.add_argument("--token", help="the app token [default: $MOBILE_TOKEN]")
    p.add_argument(
        "--device",
        help="this device's id; keep it the same (H4) [default: term-<hash of this host and user>]",
    )
    p.add_argument(
        "--name", default="Terminal", help="the device name the gateway shows [default: %(default)s]"
    )
    p.add_argument(
        "--save-dir", default="received", help="where received files are saved [default: ./%(default)s]"
    )
    p.add_argument(
        "--seq-file",
        help="where the journal seq is kept, so a new start shows only what it missed; '' for none"
        " (every start then shows the whole journal) [default: ~/.local/state/hermes-mobile-client/"
        "<device>.seq]",
    )
    return p


async def run_chat(args: argparse.Namespace, token: str) -> int:
    device_id = args.device or default_device_id()
    seq_file = Path(args.seq_file) if args.seq_file else None
    if args.seq_file is None:
        seq_file = default_seq_file(device_id)
        seq_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    client = Client(
        args.url,
        token=token,
        device_id=device_id,
        device_name=args.name,
        platform="terminal",
        media_dir=args.save_dir,
        seq_file=seq_file,
    )
    async with client:
        return await Chat(client, sys.stdout, Path(args.save_dir)).run()


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return int(e.code) if isinstance(e.code, int) else 2
    token = args.token or os.environ.get("MOBILE_TOKEN", "")
    if not token:
        print("hermes_mobile_client chat: no token: pass --token or set MOBILE_TOKEN", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run_chat(args, token))
    except HermesError as e:
        print(f"hermes_mobile_client chat: {e.code}: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
