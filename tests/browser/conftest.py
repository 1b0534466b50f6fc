"""Fixtures for the browser tests (issue 10): the real release gateway on an ephemeral port,
one headless Debian Chromium for the run, and a page per test that records its console,
page errors, dialogs and WebSocket traffic.

Environment:
  GATEWAY_BIN  the gateway (default target/release/hermes-mobile)
  CHROMIUM     the browser (default /usr/bin/chromium)
  WEB_DIR      when set, the server reads the web files from this folder (MOBILE_WEB_DIR)
               instead of the copies embedded in the binary (the default, which is what
               users get)
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = Path(os.environ.get("GATEWAY_BIN", ROOT / "target" / "release" / "hermes-mobile"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "target" / "browser-screenshots"
TOKEN = "browser-test-token-0123456789abcdef"

# Playwright's own default is 5 s per expectation; a loaded CI machine with 2 cores
# gets a little more.
expect.set_options(timeout=10_000)


def pytest_addoption(parser):
    parser.addoption(
        "--update-docs",
        action="store_true",
        help="write the screenshots of test_docs_screenshots into docs/img/ "
        "(otherwise they go to target/browser-screenshots/docs/)",
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """The release binary, started and stopped by its pid; restartable on the same port
    and state directory."""

    def __init__(self, port=None, state_dir=None, extra_env=None):
        self.port = port or free_port()
        self.extra_env = dict(extra_env or {})  # more settings, e.g. MOBILE_AGENT
        self._tmp = None
        if state_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="hermes-browser-")
            state_dir = self._tmp
        self.state_dir = Path(state_dir)
        self.log_path = self.state_dir / "server.log"
        self.proc = None
        self.starts = 0

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def pair_url(self):
        return f"{self.base}/#token={TOKEN}"

    def env(self):
        """The gateway's environment: its settings, also for a CLI command run against it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOBILE_")}
        env.update(
            MOBILE_HOST="127.0.0.1",
            MOBILE_PORT=str(self.port),
            MOBILE_TOKEN=TOKEN,
            MOBILE_STATE_DIR=str(self.state_dir),
            MOBILE_ENV_FILE="",
        )
        if os.environ.get("WEB_DIR"):
            env["MOBILE_WEB_DIR"] = os.environ["WEB_DIR"]
        env.update(self.extra_env)
        return env

    def cli(self, *args, timeout=30):
        """`hermes-mobile ARGS… --state-dir <its state dir>` with its settings: the finished
        process (stdout and stderr as text). Raises when it fails."""
        r = subprocess.run(
            [str(GATEWAY), *args, "--state-dir", str(self.state_dir)],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if r.returncode != 0:
            raise RuntimeError(f"hermes-mobile {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def start(self, timeout=15):
        env = self.env()
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"---- start {self.starts}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [str(GATEWAY)], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited ({self.proc.returncode}) before /healthz answered:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"/healthz on port {self.port} did not answer within {timeout} s:\n{self.log_tail()}")

    def stop(self):
        """SIGTERM to our own child, by its pid; SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)

    def healthz(self):
        with urllib.request.urlopen(self.base + "/healthz", timeout=5) as r:
            return json.loads(r.read())

    def log_tail(self, lines=40):
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def cleanup(self):
        self.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _start_gateway(**kwargs):
    if not GATEWAY.is_file() or not os.access(GATEWAY, os.X_OK):
        pytest.exit(f"no gateway binary at {GATEWAY}: build it first with `cargo build --release`", returncode=2)
    g = Gateway(**kwargs)
    g.start()
    return g


@pytest.fixture(scope="session")
def server():
    """One gateway for the tests that do not stop it: each test's page is a new device
    (fresh browser context, so fresh localStorage and device id), so they do not meet."""
    g = _start_gateway()
    yield g
    g.cleanup()


@pytest.fixture
def own_server():
    """A gateway of this test's own, which it may stop and start again."""
    g = _start_gateway()
    yield g
    g.cleanup()


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--use-fake-device-for-media-stream",
                "--use-fake-ui-for-media-stream",
            ],
        )
        yield b
        b.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


class App:
    """A page of the web client plus everything it said: console messages, page errors,
    dialogs, WebSockets it opened and the frames it sent on them."""

    def __init__(self, page, gateway):
        self.page = page
        self.gateway = gateway
        self.console = []  # (type, text, url)
        self.errors = []  # uncaught exceptions in the page
        self.dialogs = []
        self.sockets = []
        self.sent = []  # parsed JSON frames the page sent
        self.requests = []
        # Console errors a test expects and that the page cannot prevent (regexes).
        self.allowed_console = []
        page.on("console", lambda m: self.console.append((m.type, m.text, (m.location or {}).get("url", ""))))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", self._dialog)
        page.on("websocket", self._websocket)
        page.on("request", lambda r: self.requests.append(r.url))

    def _dialog(self, d):
        self.dialogs.append((d.type, d.message))
        d.dismiss()

    def _websocket(self, ws):
        self.sockets.append(ws.url)

        def sent(payload):
            if isinstance(payload, str):
                try:
                    self.sent.append(json.loads(payload))
                except ValueError:
                    self.sent.append({"unparsed": payload[:200]})

        ws.on("framesent", sent)

    # -- helpers the tests share

    def open(self, url=None):
        self.page.goto(url or self.gateway.base + "/")

    def pair_by_link(self):
        self.page.goto(self.gateway.pair_url)
        self.expect_online()

    def expect_online(self, timeout=10_000):
        expect(self.page.locator("#status")).to_have_attribute("data-state", "online", timeout=timeout)

    def send(self, text):
        composer = self.page.locator("#composer")
        composer.fill(text)
        composer.press("Enter")

    def agent_text(self, text, timeout=10_000):
        """The final agent bubble whose text is exactly `text` (waits for it)."""
        loc = self.page.locator('.msg[data-from="agent"][data-final="true"] .msg-text').filter(
            has_text=re.compile("^" + re.escape(text) + "$")
        )
        expect(loc).to_have_count(1, timeout=timeout)
        return loc

    def bubble_texts(self, who="agent"):
        return self.page.eval_on_selector_all(
            f'.msg[data-from="{who}"]',
            "els => els.map(e => (e.querySelector('.msg-text') || e).textContent)",
        )

    def bad_console(self):
        bad = [c for c in self.console if c[0] in ("error", "assert")]
        return [c for c in bad if not any(re.search(p, c[1]) for p in self.allowed_console)]


# Records, from inside the page, every version of the avatar state and of each agent
# bubble's text, with times; Playwright's evaluate is not subject to the page's CSP.
RECORDER_JS = """() => {
  const rec = window.__rec = {avatar: [], versions: {}};
  const t0 = performance.now();
  const snap = () => {
    const a = document.querySelector('#avatar-state');
    const s = a && a.getAttribute('data-state');
    if (s && (rec.avatar.length === 0 || rec.avatar[rec.avatar.length - 1][0] !== s))
      rec.avatar.push([s, performance.now() - t0]);
    for (const m of document.querySelectorAll('.msg[data-from="agent"]')) {
      const id = m.getAttribute('data-id') || '';
      const el = m.querySelector('.msg-text');
      const text = el ? el.textContent : '';
      const v = rec.versions[id] || (rec.versions[id] = []);
      if (v.length === 0 || v[v.length - 1][0] !== text) v.push([text, performance.now() - t0]);
    }
  };
  snap();
  new MutationObserver(snap).observe(document.body,
    {subtree: true, childList: true, attributes: true, characterData: true});
  return true;
}"""


@pytest.fixture
def make_app(browser, request):
    """Makes pages (a fresh context each: a new device) against a gateway; checks at the
    end of the test that none of them logged a console error, threw, or opened a dialog,
    and saves a screenshot of each under target/browser-screenshots/ when the test failed."""
    made = []

    def make(gateway, **context_args):
        context_args.setdefault("viewport", {"width": 1000, "height": 800})
        ctx = browser.new_context(**context_args)
        page = ctx.new_page()
        app = App(page, gateway)
        made.append((ctx, app))
        return app

    yield make

    rep = getattr(request.node, "rep_call", None)
    failed = test_failed = rep is None or rep.failed
    problems = []
    for i, (ctx, app) in enumerate(made):
        bad = app.bad_console()
        if bad or app.errors or app.dialogs:
            failed = True
        if failed:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name) + (f"-{i}" if i else "")
            try:
                app.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
            except Exception as e:  # a crashed page still lets the others be saved
                print(f"screenshot of {name} failed: {e}")
        problems += [f"console {t}: {text} ({url})" for t, text, url in bad]
        problems += [f"page error: {e}" for e in app.errors]
        problems += [f"dialog {t}: {m}" for t, m in app.dialogs]
        ctx.close()
    if failed and made:
        print("server log tail:\n" + made[0][1].gateway.log_tail())
    if test_failed:
        # Reported with the failure (pytest shows this output), not as a second error.
        if problems:
            print("the page was not clean either:\n" + "\n".join(problems))
        return
    assert not problems, "the page was not clean:\n" + "\n".join(problems)


def without_journal(page, gate=None):
    """Routes the page's WebSocket so that the gateway looks like one without a journal (an
    older gateway, or one whose journal could not be opened, L56): `resume` leaves the hello,
    `seq` and `capabilities.history` leave every frame, and `received`/`resumed` are dropped.
    `gate`, when given, is a dict whose "open" False refuses the socket (offline)."""

    def route(ws):
        if gate is not None and not gate["open"]:
            ws.close(code=1001, reason="test: offline")
            return
        server = ws.connect_to_server()

        def to_server(message):
            if isinstance(message, str):
                f = json.loads(message)
                if f.get("t") == "hello":
                    f.pop("resume", None)
                message = json.dumps(f)
            server.send(message)

        def to_page(message):
            if isinstance(message, str):
                f = json.loads(message)
                if f.get("t") in ("received", "resumed"):
                    return
                f.pop("seq", None)
                (f.get("capabilities") or {}).pop("history", None)
                message = json.dumps(f)
            ws.send(message)

        ws.on_message(to_server)
        server.on_message(to_page)

    page.route_web_socket(re.compile(r"/ws$"), route)


@pytest.fixture
def app(make_app, server):
    """A page on the shared gateway, not yet paired."""
    return make_app(server)
