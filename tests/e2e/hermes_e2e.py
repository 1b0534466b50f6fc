#!/usr/bin/env python3
"""End to end: a Protocol v1 phone <-> the real gateway <-> real Hermes 0.19 + the plugin.

Run with the Python of a venv that has `hermes-agent[sms]==0.19.0` (and so `websockets`):

    $VENV/bin/python tests/e2e/hermes_e2e.py [--gateway target/release/hermes-mobile] [--keep]

Everything is on loopback, in a temporary directory (HOME and HERMES_HOME included); the
model is tests/e2e/model_server.py. Every process is started here and ended by its pid
(Hermes in its own process group, so its tool subprocesses go with it); every step has a
timeout. Prints each check with its time and ends with "N passed, M failed".
"""

import argparse
import asyncio
import base64
import datetime
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
import zlib
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the work tree
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from model_server import TWO_PART_ANSWER  # noqa: E402
from phone import Phone  # noqa: E402

TOKEN = "e2e-app-token-0123456789abcdef"
AGENT_TOKEN = "e2e-agent-token-fedcba9876543210"
DEVICE = "e2e-phone"
TURN = 90  # seconds allowed for one agent turn (the first one loads Hermes' tools)
CHECK_LIMIT = 180  # seconds for one check
RUN_LIMIT = 900  # seconds for the whole run: later checks are not started past it


def log(msg):
    print(msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_png(path, w=32, h=24):
    raw = b"".join(b"\x00" + b"".join(bytes([(x * 8) % 256, (y * 10) % 256, 200]) for x in range(w))
                   for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    Path(path).write_bytes(data)
    return data


class Proc:
    """A child process we started, logged to a file, ended by its pid (or its group)."""

    def __init__(self, name, argv, env, cwd, logdir, group=False):
        self.name = name
        self.logpath = Path(logdir) / f"{name}.log"
        self.logfile = open(self.logpath, "ab")
        self.group = group
        self.p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self.logfile, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=group)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def _signal(self, sig):
        try:
            if self.group:
                os.killpg(self.p.pid, sig)
            else:
                self.p.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, sig=signal.SIGTERM, wait=10):
        if self.alive():
            self._signal(sig)
            try:
                self.p.wait(wait)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.p.wait(5)
        elif self.group:
            self._signal(signal.SIGKILL)  # leftovers of the group
        self.logfile.close()
        return self.p.returncode

    def tail(self, n=40):
        try:
            return "\n".join(self.logpath.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class World:
    def __init__(self, args):
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="hermes-e2e-"))
        self.home = self.tmp / "home"
        self.hermes_home = self.home / ".hermes"
        self.state = self.tmp / "state"
        self.work = self.tmp / "work"
        self.logs = self.tmp / "logs"
        self.tmpdir = self.tmp / "tmp"  # Hermes' terminal tool keeps shell snapshots in TMPDIR
        for d in (self.hermes_home, self.state, self.work, self.logs, self.tmpdir):
            d.mkdir(parents=True)
        self.port = free_port()
        self.gateway = None
        self.hermes = None
        self.model = None
        self.model_port = None
        self.phone = None
        self.venv_bin = Path(args.hermes).parent

    # -- environment -------------------------------------------------------

    def base_env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("MOBILE_", "HERMES_", "OPENAI_", "XDG_", "TMP"))}
        env.update({"HOME": str(self.home), "HERMES_HOME": str(self.hermes_home), "TMPDIR": str(self.tmpdir),
                    "PATH": f"{self.venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
                    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                    "PYTHONUNBUFFERED": "1"})
        return env

    def start_model(self):
        portfile = self.tmp / "model.port"
        self.model = Proc("model", [sys.executable, str(HERE / "model_server.py"), "--port-file", str(portfile)],
                          self.base_env(), str(self.tmp), self.logs)
        deadline = time.time() + 10
        while not portfile.exists():
            if time.time() > deadline or not self.model.alive():
                raise RuntimeError("the model server did not start:\n" + self.model.tail())
            time.sleep(0.05)
        self.model_port = int(portfile.read_text())

    def model_log(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.model_port}/_log", timeout=5) as r:
            return json.load(r)

    def install_plugin(self):
        gw_help = subprocess.run([self.args.gateway, "--help"], capture_output=True, text=True, timeout=10).stdout
        target = self.hermes_home / "plugins" / "mobile"
        if "hermes install" in gw_help and not self.args.copy_plugin:
            out = subprocess.run([self.args.gateway, "hermes", "install", "--hermes-home", str(self.hermes_home)],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode != 0:
                raise RuntimeError(f"hermes-mobile hermes install failed: {out.stdout}{out.stderr}")
            for f in (REPO / "integrations" / "hermes" / "mobile").iterdir():
                if f.is_file() and f.suffix in (".py", ".yaml"):
                    if (target / f.name).read_bytes() != f.read_bytes():
                        raise RuntimeError(f"the binary's embedded {f.name} differs from the repository's: "
                                           "rebuild it (cargo build --release), or pass --copy-plugin")
            self.install_how = "hermes-mobile hermes install"
        else:
            shutil.copytree(REPO / "integrations" / "hermes" / "mobile", target,
                            ignore=shutil.ignore_patterns("__pycache__"))
            self.install_how = "copied integrations/hermes/mobile"

    def write_config(self, link=None):
        link = link or f"socket: {self.state / 'agent.sock'}"
        (self.hermes_home / "config.yaml").write_text(f"""\
model:
  provider: custom
  default: e2e-model
  base_url: http://127.0.0.1:{self.model_port}/v1
  api_key: e2e-key
approvals:
  mode: manual
  timeout: 120
security:
  tirith_enabled: false
terminal:
  backend: local
  cwd: {self.work}
plugins:
  enabled: [mobile]
platforms:
  mobile:
    enabled: true
    extra:
      {link}
platform_toolsets:
  mobile: [hermes-telegram]
streaming:
  enabled: true
  transport: edit
  edit_interval: 0.3
""")

    def start_gateway(self):
        env = self.base_env()
        env.update({"MOBILE_AGENT": "link", "MOBILE_STATE_DIR": str(self.state), "MOBILE_PORT": str(self.port),
                    "MOBILE_HOST": "127.0.0.1", "MOBILE_TOKEN": TOKEN, "MOBILE_ENV_FILE": "", "RUST_LOG": "info",
                    "MOBILE_AGENT_TOKEN": AGENT_TOKEN})
        self.gateway = Proc("gateway", [self.args.gateway], env, str(self.tmp), self.logs)
        self.wait(lambda: self.healthz() is not None, 15, "the gateway's /healthz",
                  proc=self.gateway)

    def start_hermes(self):
        self.hermes = Proc("hermes", [self.args.hermes, "gateway", "run"], self.base_env(), str(self.work),
                           self.logs, group=True)

    def healthz(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return json.load(r)
        except Exception:
            return None

    def agent_state(self):
        h = self.healthz()
        return h.get("agent") if h else None

    def wait(self, pred, timeout, what, proc=None):
        deadline = time.time() + timeout
        while True:
            v = pred()
            if v:
                return v
            if proc is not None and not proc.alive():
                raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
            if time.time() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.2)

    async def until(self, pred, timeout, what, proc=None):
        """`wait` off the event loop, so the phone keeps reading (and answering pings)."""
        return await asyncio.to_thread(self.wait, pred, timeout, what, proc)

    def hermes_cli(self, *argv, timeout=120):
        return subprocess.run([self.args.hermes, *argv], env=self.base_env(), cwd=str(self.work),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    async def new_phone(self):
        phone = Phone(f"ws://127.0.0.1:{self.port}/ws", TOKEN, device_id=DEVICE)
        await phone.connect()
        self.phone = phone
        return phone

    def shutdown(self):
        for p in (self.hermes, self.gateway, self.model):
            if p is not None:
                p.stop(signal.SIGTERM, wait=8)


# ---------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------


async def turn(phone, text, what, timeout=TURN, predicate=None):
    """Send a text; wait for a final agent message (matching predicate); return (id, msg)."""
    mark = phone.mark()
    await phone.text(text)

    def done():
        for mid, m in phone.final_messages_since(mark):
            if predicate is None or predicate(m["text"]):
                return mid, m
        return None

    return await phone.wait_for(done, timeout, what), mark


async def model_saw(w, needle, what, timeout=TURN):
    deadline = time.time() + timeout
    while needle not in json.dumps(await asyncio.to_thread(w.model_log)):
        if time.time() > deadline:
            raise TimeoutError(f"the model never received {what}")
        await asyncio.sleep(0.3)


async def check_text_stream(w, phone):
    (mid, m), mark = await turn(phone, "please give me a long answer", "the long answer",
                                predicate=lambda t: "The end." in t)
    assert "word59" in m["text"], m["text"][-200:]
    assert len(m["versions"]) >= 2 and m["edits"] >= 1, f"not streamed as edits: {len(m['versions'])} versions"
    assert all(m["text"].startswith(v.rstrip(" ▉").rstrip()[:20]) for v in m["versions"]), "versions of another text"
    await phone.wait_for(lambda: any(f.get("stop") for f in phone.since(mark, "typing")), 15, "typing{stop:true}")
    texts = [m2["text"] for _, m2 in phone.final_messages_since(0)]
    assert not any("home channel" in t.lower() for t in texts), "Hermes' home-channel notice reached the phone"
    return f"{len(m['versions'])} versions of one message, {len(m['text'])} chars"


async def check_long_answer_one_message(w, phone):
    """An answer over Hermes' default 4,096 characters and under the gateway's 12,000
    reaches the phone as one message (the gateway chunks it, M1), line breaks kept."""
    (mid, m), mark = await turn(phone, "please give me a two-part answer", "the two-part answer",
                                predicate=lambda t: "The very end." in t)
    parts = [(i, len(m2["text"])) for i, m2 in phone.final_messages_since(mark) if "part" in m2["text"]]
    assert len(parts) == 1, f"the answer reached the phone as {len(parts)} messages: {parts}"
    assert m["text"] == TWO_PART_ANSWER, \
        f"{len(m['text'])} of {len(TWO_PART_ANSWER)} chars; around the break: {m['text'][3950:4000]!r}"
    return f"one message of {len(m['text'])} chars"


async def exec_card(w, phone, target, answer):
    mark = phone.mark()
    await phone.text(f"please delete {target}")
    card = await phone.wait_for(lambda: phone.prompt_since(mark, "exec_approval"), TURN, "an exec_approval card")
    assert str(target) in card.get("command", ""), card
    opts = [o["id"] for o in card["options"]]
    assert "deny" in opts and "once" in opts, opts
    if "always" in opts:
        assert "category" in (card.get("description") or "").lower(), "no warning that always allow-lists a category"
    await phone.answer(card["id"], answer)
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "Tool result" in m["text"]), None),
        TURN, "the agent's answer after the card")
    return card, msg


async def check_exec_deny(w, phone):
    target = w.work / "deny" / "target"
    target.mkdir(parents=True)
    card, msg = await exec_card(w, phone, target, "deny")
    assert target.exists(), "the command ran although it was denied"
    assert "denied" in msg["text"].lower() or "blocked" in msg["text"].lower(), msg["text"][:200]
    return f"options {[o['id'] for o in card['options']]}; target still there"


async def check_exec_once(w, phone):
    target = w.work / "once" / "target"
    target.mkdir(parents=True)
    _, msg = await exec_card(w, phone, target, "once")
    await asyncio.sleep(0.2)
    assert not target.exists(), "the approved command did not run"
    return "target deleted"


async def clarify_card(phone, text):
    mark = phone.mark()
    await phone.text(text)
    card = await phone.wait_for(lambda: phone.prompt_since(mark, "clarify"), TURN, "a clarify card")
    return mark, card


async def check_clarify_choice(w, phone):
    mark, card = await clarify_card(phone, "please clarify which colour")
    labels = {o["id"]: o["label"] for o in card["options"]}
    assert labels.get("c1") == "green" and "other" in labels, labels
    await phone.answer(card["id"], "c1")
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "You chose" in m["text"]), None),
        TURN, "the answer to the clarify")
    assert "You chose: green" in msg["text"], msg["text"]
    return "chose c1 = green"


async def check_clarify_text(w, phone):
    mark, card = await clarify_card(phone, "please clarify the colour once more")
    await phone.answer(card["id"], "other", text="purple with dots")
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "You chose" in m["text"]), None),
        TURN, "the answer to the clarify")
    assert "purple with dots" in msg["text"], msg["text"]
    return "own text reached the model"


async def check_clarify_open(w, phone):
    mark = phone.mark()
    await phone.text("ask me an open question")
    await phone.wait_for(
        lambda: any("What name should I use" in m["text"] for _, m in phone.final_messages_since(mark)),
        TURN, "the open question as a message")
    assert not phone.prompt_since(mark, "clarify"), "an open question became a card without choices"
    await phone.text("Call me Ada")
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "You chose" in m["text"]), None),
        TURN, "the answer to the open question")
    assert "Call me Ada" in msg["text"], msg["text"]
    return "asked as a message; the next message answered it"


async def check_slash_cancel(w, phone):
    mark = phone.mark()
    await phone.text("/new")
    card = await phone.wait_for(lambda: phone.prompt_since(mark, "slash_confirm"), TURN, "a slash_confirm card")
    # The /new turn itself ends (typing stops) before the card is answered.
    await phone.wait_for(lambda: any(f.get("stop") for f in phone.since(mark, "typing")), 15, "the /new turn to end")
    after = phone.mark()
    await phone.answer(card["id"], "cancel")
    msg = await phone.wait_for(lambda: next((m for _, m in phone.final_messages_since(after)), None), 30,
                               "Hermes' answer to the cancelled /new")
    assert "cancel" in msg["text"].lower(), msg["text"]
    await asyncio.sleep(6)
    late = [f for f in phone.since(after, "typing") if not f.get("stop")]
    assert not late, f"{len(late)} typing frames after /new was cancelled (Hermes' typing loop leaked)"
    return f"answered: {msg['text'][:50]!r}; no typing afterwards"


async def check_slash_new(w, phone):
    mark = phone.mark()
    await phone.text("/new")
    card = await phone.wait_for(lambda: phone.prompt_since(mark, "slash_confirm"), TURN, "a slash_confirm card")
    opts = [o["id"] for o in card["options"]]
    assert set(opts) >= {"once", "cancel"}, opts
    assert "Text fallback" not in card["text"], card["text"]
    await phone.wait_for(lambda: any(f.get("stop") for f in phone.since(mark, "typing")), 15, "the /new turn to end")
    after = phone.mark()
    await phone.answer(card["id"], "once")
    msg = await phone.wait_for(lambda: next((m for _, m in phone.final_messages_since(after)), None), 30,
                               "Hermes' answer to the confirmed /new")
    # Hermes 0.19 appends a random tip to this answer, and a tip may itself say "cancel"
    # ("cancel recording → cancel prompts…"): judge by the first line only.
    first = msg["text"].splitlines()[0] if msg["text"] else ""
    assert "cancelled" not in first.lower(), msg["text"]
    assert "Session reset" in first or "New session" in first, msg["text"]
    # Typing must not keep coming after the command (Hermes' typing loop can outlive it).
    await asyncio.sleep(5)
    late = [f for f in phone.since(after, "typing") if not f.get("stop")]
    assert not late, f"{len(late)} typing frames after /new was confirmed"
    return f"answered: {msg['text'][:60]!r}"


async def check_new_answers(w, phone):
    """What Hermes 0.19 answers to /new, as docs/hermes.md section 5 says: a
    slash_confirm card; "🟡 /new cancelled. Conversation unchanged." on cancel;
    "✨ Session reset! Starting fresh." (or "✨ New session started!" when there was no
    conversation yet) and the model's details on once."""
    answers = {}
    for option in ("cancel", "once"):
        mark = phone.mark()
        await phone.text("/new")
        card = await phone.wait_for(lambda: phone.prompt_since(mark, "slash_confirm"), TURN, "a slash_confirm card")
        assert card["text"].startswith("⚠️ **Confirm /new**"), card["text"]
        await phone.wait_for(lambda: any(f.get("stop") for f in phone.since(mark, "typing")), 15,
                             "the /new turn to end")
        after = phone.mark()
        await phone.answer(card["id"], option)
        msg = await phone.wait_for(lambda: next((m for _, m in phone.final_messages_since(after)), None), 30,
                                   f"Hermes' answer to /new answered {option}")
        answers[option] = msg["text"]
        await phone.wait_for(phone.turn_over, 30, "the answer's turn to end")
    assert answers["cancel"] == "🟡 /new cancelled. Conversation unchanged.", answers["cancel"]
    assert answers["once"].startswith(("✨ Session reset! Starting fresh.", "✨ New session started!")) \
        and "◆ Model:" in answers["once"], answers["once"]
    return f"card {card['text'][:60]!r}…; once: {answers['once'].splitlines()[0]!r}"


async def check_image_out(w, phone):
    pic = w.work / "chart.png"
    data = make_png(pic)
    mark = phone.mark()
    await phone.text(f"send me the picture {pic}")
    media = await phone.wait_for(
        lambda: next((phone.media[f["id"]] for f in phone.since(mark, "media")
                      if phone.media[f["id"]]["data"] is not None), None), TURN, "a media frame")
    assert media["meta"]["kind"] == "image", media["meta"]
    assert media["data"] == data, "the phone got different bytes"
    return f"{len(data)} bytes, {media['meta'].get('mime')}"


async def check_big_file_out(w, phone):
    big = w.work / "huge.png"
    big.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(9 * 1024 * 1024))
    mark = phone.mark()
    await phone.text(f"send me the picture {big}")
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "huge.png" in m["text"]), None),
        TURN, "a note naming the file that is too big")
    assert "too large" in msg["text"], msg["text"]
    assert not phone.since(mark, "media"), "a file over 8 MiB was sent as media"
    return f"note: {msg['text'][:70]!r}"


async def check_upload(w, phone):
    data = make_png(w.tmp / "upload.png", 16, 16)
    mark = phone.mark()
    await phone.upload("image", "cat photo.png", data, caption="what is this?")
    media_dir = w.state / "media"
    # Files the agent sent are kept there too (L63): look for this upload's name.
    saved = await phone.wait_for(
        lambda: media_dir.exists() and [p for p in media_dir.iterdir() if p.name.endswith("-cat_photo.png")
                                        or p.name.endswith("-cat photo.png")], 20,
        "the gateway to save the upload")
    await model_saw(w, str(saved[0]), f"the saved path {saved[0]}")
    await phone.wait_for(lambda: phone.final_messages_since(mark), TURN, "the answer to the upload")
    return f"the model saw {saved[0]}"


async def check_document_and_voice(w, phone):
    media_dir = w.state / "media"
    before = set(media_dir.iterdir()) if media_dir.exists() else set()
    mark = phone.mark()
    await phone.upload("document", "notes.txt", b"line one\nline two\n", caption="read my notes")
    saved = await phone.wait_for(
        lambda: media_dir.exists() and [p for p in media_dir.iterdir() if p not in before and "notes" in p.name],
        20, "the gateway to save the document")
    await model_saw(w, str(saved[0]), f"the document's saved path {saved[0]}")
    await phone.wait_for(lambda: phone.final_messages_since(mark), TURN, "the answer to the document")
    await phone.wait_for(phone.turn_over, 60, "the document's turn to end")
    # A voice note with the app's recognized text: Hermes gets the text (and the file).
    mark = phone.mark()
    await phone.send({"t": "audio", "id": phone.next_id("v"), "format": "ogg",
                      "data": base64.b64encode(b"OggS" + bytes(200)).decode(), "text": "voice words here"})
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "voice words here" in m["text"]), None),
        TURN, "an answer to the voice note's text")
    voice = [p for p in media_dir.iterdir() if p.suffix == ".ogg"]
    assert voice, "the gateway saved no voice note"
    await model_saw(w, str(voice[0]), f"the voice note's saved path {voice[0]}")
    return f"document and voice paths reached the model; voice text answered ({msg['text'][:40]!r})"


async def check_text_document_inlined(w, phone):
    """A small text file from the phone reaches the model with its content, under its own
    name (not the gateway's stored name), as Hermes' own adapters give documents."""
    media_dir = w.state / "media"
    before = set(media_dir.iterdir()) if media_dir.exists() else set()
    mark = phone.mark()
    await phone.upload("document", "shopping.txt", b"eggs\nthe walrus-42 flour\n", caption="what is on my list?")
    saved = await phone.wait_for(
        lambda: [p for p in media_dir.iterdir() if p not in before and "shopping" in p.name], 20,
        "the gateway to save the document")
    await model_saw(w, "walrus-42", "the document's content")
    await phone.wait_for(lambda: phone.final_messages_since(mark), TURN, "the answer to the document")
    await phone.wait_for(phone.turn_over, 60, "the document's turn to end")
    log = json.dumps(await asyncio.to_thread(w.model_log))
    assert "shopping.txt" in log and f"'{saved[0].name}'" not in log, \
        f"the model was not told the file's own name (stored as {saved[0].name})"
    return f"content and the name shopping.txt reached the model (stored as {saved[0].name})"


async def check_hermes_send(w, phone):
    mark = phone.mark()
    out = await asyncio.to_thread(w.hermes_cli, "send", "--to", f"mobile:{DEVICE}", "hello from hermes send")
    assert out.returncode == 0, f"hermes send failed ({out.returncode}): {out.stdout}{out.stderr}"
    await phone.wait_for(
        lambda: any("hello from hermes send" in m["text"] for _, m in phone.final_messages_since(mark)),
        20, "the hermes send message")
    # A phone Hermes has seen, now offline: addressed by its device id.
    other = Phone(f"ws://127.0.0.1:{w.port}/ws", TOKEN, device_id="e2e-other")
    await other.connect()
    await asyncio.sleep(1.0)  # the plugin names the device (device_online)
    await other.close()
    await asyncio.sleep(0.5)
    off = await asyncio.to_thread(w.hermes_cli, "send", "--to", "mobile:e2e-other", "nobody home")
    assert off.returncode != 0 and "device_offline" in (off.stdout + off.stderr), \
        f"an offline phone did not fail with device_offline: {off.returncode} {off.stdout}{off.stderr}"
    # A device Hermes never saw: its numeric chat id (see chat_id_for in the plugin).
    nobody = "77" + "".join(f"{b:03d}" for b in b"no-such-phone")
    off = await asyncio.to_thread(w.hermes_cli, "send", "--to", f"mobile:{nobody}", "nobody home")
    assert off.returncode != 0 and "device_offline" in (off.stdout + off.stderr), \
        f"an unknown phone did not fail with device_offline: {off.returncode} {off.stdout}{off.stderr}"
    return "delivered; offline phones fail with device_offline"


async def check_cron(w, phone):
    created = await asyncio.to_thread(w.hermes_cli, "cron", "create", "every 1h", "cron: write the backup report",
                                      "--name", "e2e-backup", "--deliver", f"mobile:{DEVICE}")
    assert created.returncode == 0, f"cron create failed: {created.stdout}{created.stderr}"
    job_id = next((line.split(":", 1)[1].strip() for line in created.stdout.splitlines()
                   if line.strip().startswith("Created job:")), None)
    assert job_id, created.stdout
    mark = phone.mark()
    ran = await asyncio.to_thread(w.hermes_cli, "cron", "run", job_id, timeout=180)
    assert ran.returncode == 0, f"cron run failed: {ran.stdout}{ran.stderr}"
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "Cron report" in m["text"]), None),
        60, "the cron delivery")
    return f"job {job_id} delivered ({len(msg['text'])} chars)"


async def check_cron_ticker(w, phone):
    """A job due while Hermes is down fires on its gateway's first tick, over the live link."""
    created = await asyncio.to_thread(w.hermes_cli, "cron", "create", "every 1h", "cron: the ticker's report",
                                      "--name", "e2e-ticker", "--deliver", f"mobile:{DEVICE}")
    assert created.returncode == 0, f"cron create failed: {created.stdout}{created.stderr}"
    job_id = next(line.split(":", 1)[1].strip() for line in created.stdout.splitlines()
                  if line.strip().startswith("Created job:"))
    await asyncio.to_thread(w.hermes.stop, signal.SIGTERM, 15)
    await w.until(lambda: w.agent_state() == "disconnected", 15, "the gateway to see Hermes go")
    jobs_file = w.hermes_home / "cron" / "jobs.json"
    jobs = json.loads(jobs_file.read_text())
    for job in jobs["jobs"]:
        if job["id"] == job_id:
            due = datetime.datetime.fromisoformat(job["next_run_at"]) - datetime.timedelta(hours=1, seconds=30)
            job["next_run_at"] = due.isoformat()
    jobs_file.write_text(json.dumps(jobs, indent=2))
    mark = phone.mark()
    w.start_hermes()
    await w.until(lambda: w.agent_state() == "connected", 60, "Hermes to come back", proc=w.hermes)
    msg = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(mark) if "e2e-ticker" in m["text"]), None),
        TURN, "the ticker's cron delivery")
    assert "Cron report" in msg["text"], msg["text"]
    return f"job {job_id} fired at Hermes' start and reached the phone"


async def check_hermes_restart(w, phone):
    await asyncio.to_thread(w.hermes.stop, signal.SIGKILL, 5)
    await w.until(lambda: w.agent_state() == "disconnected", 15, "the gateway to see the agent gone")
    w.start_hermes()
    await w.until(lambda: w.agent_state() == "connected", 60, "Hermes to reconnect", proc=w.hermes)
    assert not phone.closed, "the phone was disconnected"
    (_, m), _ = await turn(phone, "are you back?", "a turn after the restart",
                           predicate=lambda t: "are you back" in t)
    return "reconnected; next turn answered"


async def check_gateway_restart(w, phone):
    t0 = time.time()
    await asyncio.to_thread(w.gateway.stop, signal.SIGTERM, 10)
    await phone.wait_for(lambda: phone.closed, 10, "the phone to see the gateway go")
    await phone.close()
    await asyncio.to_thread(w.start_gateway)
    await w.until(lambda: w.agent_state() == "connected", 60, "Hermes to reconnect by itself", proc=w.hermes)
    took = time.time() - t0
    phone2 = await w.new_phone()
    (_, m), _ = await turn(phone2, "still there after the gateway restart?", "a turn after the gateway restart",
                           predicate=lambda t: "still there" in t)
    return f"Hermes back {took:.1f} s after the stop"


async def check_websocket_link(w, phone):
    await asyncio.to_thread(w.hermes.stop, signal.SIGTERM, 10)
    await w.until(lambda: w.agent_state() == "disconnected", 15, "the gateway to see the agent gone")
    w.write_config(link=f"url: ws://127.0.0.1:{w.port}/agent\n      token: {AGENT_TOKEN}")
    w.start_hermes()
    await w.until(lambda: w.agent_state() == "connected", 60, "Hermes to attach over /agent", proc=w.hermes)
    (_, m), _ = await turn(phone, "hello over the websocket", "a turn over /agent",
                           predicate=lambda t: "hello over the websocket" in t)
    # Like a person, wait for the turn to end: a photo sent into a session Hermes still
    # holds busy is queued behind a busy notice, and its turn may come much later.
    await phone.wait_for(phone.turn_over, 60, "the turn over /agent to end")
    # Files travel inline both ways over /agent.
    data = make_png(w.tmp / "inline.png", 8, 8)
    mark = phone.mark()
    await phone.upload("image", "inline.png", data, caption="and this one?")
    cache = str(w.hermes_home / "cache" / "mobile")
    await model_saw(w, cache, "the inline upload under " + cache)
    await phone.wait_for(lambda: phone.final_messages_since(mark), TURN, "the answer to the inline upload")
    await phone.wait_for(phone.turn_over, 60, "the inline upload's turn to end")
    pic = w.work / "inline-out.png"
    out = make_png(pic, 12, 12)
    mark = phone.mark()
    await phone.text(f"send me the picture {pic}")
    media = await phone.wait_for(
        lambda: next((phone.media[f["id"]] for f in phone.since(mark, "media")
                      if phone.media[f["id"]]["data"] is not None), None), TURN, "a media frame over /agent")
    assert media["data"] == out, "different bytes over /agent"
    return "text, inline upload and inline image over /agent"


async def check_exec_stale_card(w, phone):
    """A card whose command was stopped must not approve the next command (Hermes
    resolves approvals oldest first; the plugin answers exactly the card's own)."""
    first = w.work / "stale" / "first"
    second = w.work / "stale" / "second"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    mark = phone.mark()
    await phone.text(f"please delete {first}")
    old = await phone.wait_for(lambda: phone.prompt_since(mark, "exec_approval"), TURN, "the first card")
    await phone.text("/stop")
    await phone.wait_for(phone.turn_over, 60, "the stopped turn to end")
    mark = phone.mark()
    await phone.text(f"please delete {second}")
    new = await phone.wait_for(lambda: phone.prompt_since(mark, "exec_approval"), TURN, "the second card")
    assert str(second) in new["command"] and new["id"] != old["id"], (old, new)
    after = phone.mark()
    await phone.answer(old["id"], "once")
    note = await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(after) if "no longer" in m["text"]), None),
        30, "a note that the old card is no longer pending")
    await asyncio.sleep(1.0)
    assert second.exists(), "answering the stopped command's card approved the next command"
    assert first.exists(), "the stopped command ran"
    await phone.answer(new["id"], "deny")
    await phone.wait_for(
        lambda: next((m for _, m in phone.final_messages_since(after) if "Tool result" in m["text"]), None),
        TURN, "the answer after denying the second card")
    assert second.exists(), "a denied command ran"
    return f"old card: {note['text'][:60]!r}; the second command waited for its own card"


async def check_queued_in_order(w, phone):
    """Messages sent while Hermes is down reach it once each, in order, and the phone
    hears once that the agent is away."""
    await asyncio.to_thread(w.hermes.stop, signal.SIGTERM, 15)
    await w.until(lambda: w.agent_state() == "disconnected", 15, "the gateway to see Hermes go")
    mark = phone.mark()
    words = ["queued-alpha", "queued-bravo", "queued-charlie"]
    for word in words:
        await phone.text(f"{word} please")
    await phone.wait_for(lambda: any("not connected" in m["text"] for _, m in phone.final_messages_since(mark)),
                         10, "the away notice")
    w.start_hermes()
    await w.until(lambda: w.agent_state() == "connected", 60, "Hermes to come back", proc=w.hermes)

    def seen():
        log = w.model_log()
        for req in reversed(log):
            users = [json.dumps(m.get("content")) for m in req.get("messages") or [] if m.get("role") == "user"]
            text = "\n".join(users)
            if all(word in text for word in words):
                return text
        return None

    text = await w.until(seen, TURN, "a model request with all three queued messages")
    users = text.split("\n")
    for word in words:
        own = [u for u in users if word in u]
        assert len(own) == 1 and not any(other in own[0] for other in words if other != word), \
            f"{word} is not in a user message of its own: {own}"
    where = [text.index(word) for word in words]
    assert where == sorted(where), (f"queued messages reached the model out of order: {where}\n{text[-1500:]}\n"
                                    f"phone: {[m['text'][:80] for _, m in phone.final_messages_since(mark)]}")
    answers = await phone.wait_for(
        lambda: (lambda a: a if len(a) >= 3 else None)(
            [m["text"] for _, m in phone.final_messages_since(mark) if "Echo: queued-" in m["text"]]),
        TURN, "three answers")
    await phone.wait_for(phone.turn_over, TURN, "the queued turns to end")
    texts = [m["text"] for _, m in phone.final_messages_since(mark)]
    assert not any("Interrupting" in t for t in texts), f"Hermes took the backlog as interruptions: {texts}"
    assert [a.split("Echo: ")[1].split(" ")[0] for a in answers] == words, f"answers out of order: {answers}"
    away = [t for t in texts if "not connected" in t]
    assert len(away) == 1, f"{len(away)} away notices"
    return "three messages, three answers, in order, no interruption; one away notice"


async def check_card_survives_gateway_restart(w, phone):
    """A card open while the gateway restarts comes back, and answering it still works."""
    target = w.work / "restart" / "target"
    target.mkdir(parents=True)
    mark = phone.mark()
    await phone.text(f"please delete {target}")
    card = await phone.wait_for(lambda: phone.prompt_since(mark, "exec_approval"), TURN, "a card")
    await asyncio.to_thread(w.gateway.stop, signal.SIGTERM, 10)
    await phone.wait_for(lambda: phone.closed, 10, "the phone to see the gateway go")
    await phone.close()
    await asyncio.to_thread(w.start_gateway)
    await w.until(lambda: w.agent_state() == "connected", 60, "Hermes to reconnect", proc=w.hermes)
    phone2 = await w.new_phone()
    again = await phone2.wait_for(lambda: phone2.prompts.get(card["id"]), 20, "the card after the restart")
    mark = phone2.mark()
    await phone2.answer(again["id"], "once")
    await phone2.wait_for(
        lambda: next((m for _, m in phone2.final_messages_since(mark) if "Tool result" in m["text"]), None),
        TURN, "the answer after the card")
    await asyncio.sleep(0.2)
    assert not target.exists(), "the approved command did not run"
    return f"card {card['id']} came back and was answered"


CHECKS = [
    ("text turn, streamed edits in place", check_text_stream),
    ("a long answer (6,479 chars) arrives as one message", check_long_answer_one_message),
    ("exec_approval: deny", check_exec_deny),
    ("exec_approval: once", check_exec_once),
    ("exec_approval: a stopped command's card approves nothing", check_exec_stale_card),
    ("clarify: a choice", check_clarify_choice),
    ("clarify: own text", check_clarify_text),
    ("clarify without choices (a plain question)", check_clarify_open),
    ("/new cancelled through a slash_confirm card", check_slash_cancel),
    ("/new through a slash_confirm card", check_slash_new),
    ("what Hermes answers to /new", check_new_answers),
    ("image from the agent as media", check_image_out),
    ("a file over 8 MiB from the agent becomes a note", check_big_file_out),
    ("phone upload reaches the model as a saved path", check_upload),
    ("a document and a voice note", check_document_and_voice),
    ("a text document's content reaches the model under its own name", check_text_document_inlined),
    ("hermes send --to mobile:<id>", check_hermes_send),
    ("cron job with deliver: mobile:<id>", check_cron),
    ("cron job fired by the Hermes gateway's ticker", check_cron_ticker),
    ("messages sent while Hermes is down arrive in order", check_queued_in_order),
    ("Hermes killed and restarted", check_hermes_restart),
    ("gateway restarted, Hermes reconnects", check_gateway_restart),
    ("a card open across a gateway restart", check_card_survives_gateway_restart),
    ("Hermes over the /agent WebSocket", check_websocket_link),
]


async def run(w, only):
    results = []
    t_setup = time.time()
    w.start_model()
    w.install_plugin()
    w.write_config()
    w.start_gateway()
    w.start_hermes()
    await w.until(lambda: w.agent_state() == "connected", 90, "Hermes to attach to the gateway", proc=w.hermes)
    phone = await w.new_phone()
    log(f"setup: {time.time() - t_setup:.1f} s (plugin: {w.install_how}; tmp {w.tmp})")
    run_deadline = t_setup + RUN_LIMIT
    for name, fn in CHECKS:
        if only and not any(o in name for o in only):
            continue
        t0 = time.time()
        if t0 > run_deadline:
            results.append((name, False))
            log(f"FAIL {name}: not run, the run took over {RUN_LIMIT} s")
            continue
        try:
            # Like a person, wait for the previous turn to end (Hermes runs a command
            # sent into a busy session differently: /new then skips its confirmation).
            current = w.phone or phone
            await current.wait_for(current.turn_over, 60, "the previous turn to end")
            detail = await asyncio.wait_for(fn(w, current), CHECK_LIMIT)
            results.append((name, True))
            log(f"PASS {name} ({time.time() - t0:.1f} s): {detail}")
        except Exception as exc:
            results.append((name, False))
            log(f"FAIL {name} ({time.time() - t0:.1f} s): {type(exc).__name__}: {exc}")
            # What the phone saw last is usually the quickest clue to a failed check.
            shown = w.phone or phone
            for _, f in shown.frames[-10:]:
                log("  phone got: " + json.dumps(f, ensure_ascii=False)[:200])
            if w.args.verbose:
                traceback.print_exc()
    if w.phone:
        await w.phone.close()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway", default=os.environ.get("GATEWAY_BIN", str(REPO / "target/release/hermes-mobile")))
    ap.add_argument("--hermes", default=os.environ.get("HERMES_BIN", str(Path(sys.executable).parent / "hermes")))
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    ap.add_argument("--copy-plugin", action="store_true",
                    help="copy integrations/hermes/mobile instead of `hermes-mobile hermes install`")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("only", nargs="*", help="run only the checks whose names contain these words")
    args = ap.parse_args()
    args.gateway = str(Path(args.gateway).resolve())
    for path, what in ((args.gateway, "gateway binary"), (args.hermes, "hermes")):
        if not os.access(path, os.X_OK):
            sys.exit(f"no {what} at {path}")
    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    w = World(args)
    t0 = time.time()
    results = []
    try:
        results = asyncio.run(run(w, args.only))
    except KeyboardInterrupt as exc:
        log(f"FAIL interrupted ({exc}); stopping every process")
        results.append(("interrupted", False))
    except Exception as exc:
        log(f"FAIL setup: {type(exc).__name__}: {exc}")
        results.append(("setup", False))
    finally:
        w.shutdown()
    failed = [n for n, ok in results if not ok]
    if failed or args.verbose:
        for p in (w.gateway, w.hermes, w.model):
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
