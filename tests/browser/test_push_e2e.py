"""Web Push end to end (issue 18, "Done when"): a phone with the installed app, locked, gets
a notification when Hermes asks for approval, when an answer finishes and when a cron
message comes; tapping it opens the card, and answering it changes what the agent does.

Everything real but the push service and the agent: the release gateway, headless Chromium
with the app's service worker, the page's own "Turn on notifications". The push service is
tests/browser/fake_push.py (TLS with a CA of its own, checks VAPID, decrypts RFC 8291), and
the agent is this test, on the gateway's agent link (docs/agent-protocol.md). What the fake
service decrypted is handed to Chromium with CDP ServiceWorker.deliverPushMessage, as a
real push service hands it to the browser. "Locking the phone" closes the app's tab: the
socket goes, the service worker stays.
"""

import json
import os
import queue
import re
import subprocess
import time

import pytest
from playwright.sync_api import expect

from agent_link import AgentLink
from conftest import GATEWAY, SCREENSHOTS, App, _start_gateway
from fake_push import FakePushService

SERVICE_TOKEN = "e2e-deliver-token-fedcba9876543210"
SUBJECT = "mailto:test@example.org"


# The browser's PushManager, standing in for Chrome's own (which would ask Google): the
# subscription is the fake service's, with the keys of the "browser" it decrypts for. Kept in
# localStorage, as a browser keeps its subscription across restarts of the app.
SUBSCRIPTION_JS = """(sub) => {
  if (typeof PushManager === 'undefined') return;
  const KEY = '__e2eSubscription';
  const bytes = (t) => Uint8Array.from(atob(t.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
  const b64u = (u8) => btoa(String.fromCharCode(...u8)).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '');
  function wrap(serverKey) {
    return {
      endpoint: sub.endpoint, expirationTime: null,
      options: {userVisibleOnly: true, applicationServerKey: bytes(serverKey).buffer},
      getKey: (name) => bytes(sub.keys[name]).buffer,
      toJSON: () => ({endpoint: sub.endpoint, expirationTime: null, keys: {...sub.keys}}),
      unsubscribe: async () => { localStorage.removeItem(KEY); return true; },
    };
  }
  PushManager.prototype.subscribe = async function (options) {
    if (!options || options.userVisibleOnly !== true) throw new DOMException('userVisibleOnly', 'NotAllowedError');
    const serverKey = b64u(new Uint8Array(options.applicationServerKey));
    localStorage.setItem(KEY, serverKey);
    return wrap(serverKey);
  };
  PushManager.prototype.getSubscription = async function () {
    const k = localStorage.getItem(KEY);
    return k ? wrap(k) : null;
  };
}"""

# In the service worker: what it shows now.
SHOWN_JS = """async () => (await self.registration.getNotifications())
  .map((n) => ({title: n.title, body: n.body, tag: n.tag, data: n.data}))"""

# The user's tap on the notification with this tag, as the browser delivers it: a
# notificationclick in the worker. A script-made event cannot waitUntil(), and Chromium lets
# only its own click open a window, so the test stands in for the browser there: it keeps
# the promise, and records the window the worker asks for; when Chromium refuses to open
# it, the test opens it.
TAP_JS = """async (tag) => {
  const [n] = await self.registration.getNotifications({tag});
  if (!n) return {error: 'no notification with the tag ' + tag};
  const waits = [];
  const opened = [];
  const errors = [];
  const onError = (e) => errors.push(String(e.message));
  self.addEventListener('error', onError);
  const openWindow = self.clients.openWindow;
  const refused = [];
  self.clients.openWindow = async (url) => {
    opened.push(url);
    try {
      return await openWindow.call(self.clients, url);
    } catch (e) {
      refused.push(String(e));
      return null;
    }
  };
  NotificationEvent.prototype.waitUntil = function (p) { waits.push(p); };
  try {
    self.dispatchEvent(new NotificationEvent('notificationclick', {notification: n}));
    await Promise.all(waits);
  } catch (e) {
    errors.push(String(e));
  } finally {
    delete NotificationEvent.prototype.waitUntil;
    self.clients.openWindow = openWindow;
    self.removeEventListener('error', onError);
  }
  const left = (await self.registration.getNotifications({tag})).length;
  return {waits: waits.length, opened, refused, left, errors};
}"""


@pytest.fixture
def push_setup(tmp_path_factory):
    svc = FakePushService()
    sock = tmp_path_factory.mktemp("agent") / "agent.sock"
    gw = _start_gateway(extra_env={
        "MOBILE_AGENT": f"link:{sock}",
        "MOBILE_PUSH_HOSTS": f"127.0.0.1:{svc.port}",
        "MOBILE_PUSH_CA_FILE": svc.ca_file,
        "MOBILE_PUSH_SUBJECT": SUBJECT,
        "MOBILE_DELIVER_TOKENS": SERVICE_TOKEN,
    })
    agent = AgentLink(str(sock))
    agent.send(t="hello", v=1, agent="e2e")
    agent.wait_for("welcome")
    yield svc, gw, agent
    agent.close()
    gw.cleanup()
    svc.close()


class Phone:
    """The browser context (the phone), its service worker, and the app's tabs as they come
    and go."""

    def __init__(self, app, svc):
        self.first = app
        self.ctx = app.page.context
        self.gw = app.gateway
        self.svc = svc
        self.apps = [app]
        self.received = []  # frames the app's pages received
        self._hook(app.page)
        # The "home screen": a tab that is not the app, so the CDP session outlives the app's.
        self.home = self.ctx.new_page()
        self.home.goto("about:blank")
        self.cdp = self.ctx.new_cdp_session(self.home)
        self.registrations = []
        self.cdp.on("ServiceWorker.workerRegistrationUpdated", lambda e: self.registrations.extend(e["registrations"]))

    def _hook(self, page):
        def on_ws(ws):
            def received(payload):
                if isinstance(payload, str):
                    try:
                        self.received.append(json.loads(payload))
                    except ValueError:
                        pass

            ws.on("framereceived", received)

        page.on("websocket", on_ws)

    def wait_frame(self, page, t, timeout=10_000, **fields):
        deadline = time.monotonic() + timeout / 1000
        while time.monotonic() < deadline:
            for f in self.received:
                if f.get("t") == t and all(f.get(k) == v for k, v in fields.items()):
                    return f
            page.wait_for_timeout(50)
        raise AssertionError(f"the page received no {t} {fields}: {[f.get('t') for f in self.received]}")

    def registration_id(self):
        self.cdp.send("ServiceWorker.enable")
        base = self.gw.base + "/"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = [r for r in self.registrations if r["scopeURL"] == base and not r.get("isDeleted")]
            if found:
                return found[-1]["registrationId"]
            self.home.wait_for_timeout(50)
        raise AssertionError(f"no service worker registration for {base}: {self.registrations}")

    def worker(self):
        """The running service worker (a push starts it again after Chromium stopped it)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            live = [w for w in self.ctx.service_workers if w.url.startswith(self.gw.base + "/sw.js")]
            if live:
                return live[-1]
            self.home.wait_for_timeout(50)
        raise AssertionError("no running service worker")

    def in_worker(self, js, arg=None):
        for attempt in range(3):
            try:
                return self.worker().evaluate(js, arg)
            except Exception as e:  # the worker stopped under us: it is started again below
                if attempt == 2 or "closed" not in str(e).lower():
                    raise
                self.home.wait_for_timeout(100)

    def deliver(self, plaintext, reg_id):
        """What the push service does next: hands the payload to the browser."""
        self.in_worker("async () => (await self.registration.getNotifications()).forEach((n) => n.close())")
        self.cdp.send("ServiceWorker.deliverPushMessage",
                      {"origin": self.gw.base, "registrationId": reg_id, "data": plaintext.decode()})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            shown = self.in_worker(SHOWN_JS)
            if shown:
                return shown
            self.home.wait_for_timeout(50)
        raise AssertionError(f"no notification shown for {plaintext!r}")

    def lock(self, agent, device):
        """The phone locks: the app's tab goes (a frozen page's socket is dropped)."""
        for app in self.apps:
            if not app.page.is_closed():
                app.page.close()
        agent.wait_for("device_offline", device=device)

    def tap(self, tag):
        """Taps the notification; returns the app's page it leads to."""
        before = set(self.ctx.pages)
        tapped = self.in_worker(TAP_JS, tag)
        assert tapped.get("errors") == [] and tapped.get("waits") == 1 and tapped.get("left") == 0, tapped
        # No app window is open (the phone was locked): the worker opens one.
        assert len(tapped["opened"]) == 1, tapped
        url = tapped["opened"][0]
        assert url.startswith(self.gw.base + "/"), url
        new = [p for p in self.ctx.pages if p not in before]
        if tapped["refused"]:
            assert not new, f"a window opened besides the one the worker asked for: {[p.url for p in new]}"
            return self.open(url), url
        assert len(new) == 1, [p.url for p in new]
        return self.adopt(new[0]), url

    def open(self, url):
        page = self.ctx.new_page()
        app = self.adopt(page)
        page.goto(url)
        app.expect_online()
        return app

    def adopt(self, page):
        app = App(page, self.gw)
        self.apps.append(app)
        self._hook(page)
        return app

    def problems(self):
        out = []
        for app in self.apps[1:]:  # the first is checked by the make_app fixture
            out += [f"console {t}: {text} ({url})" for t, text, url in app.bad_console()]
            out += [f"page error: {e}" for e in app.errors]
            out += [f"dialog {t}: {m}" for t, m in app.dialogs]
        return out


def check_push(push, svc, vapid_key):
    assert push.problems == [], push.problems
    assert push.path == "/push/e2e", push.path
    assert push.vapid_key == vapid_key
    assert push.claims["aud"] == svc.origin and push.claims["sub"] == SUBJECT, push.claims
    assert int(push.headers["ttl"]) > 0, push.headers
    assert push.payload["web_push"] == 8030, push.payload
    return push.payload


def hermes_send(gw, device, text):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOBILE_")}
    return subprocess.run(
        [str(GATEWAY), "send", "--url", f"ws://127.0.0.1:{gw.port}/ws", "--token", SERVICE_TOKEN,
         "--to", f"mobile:{device}", "--text", text, "--env-file", ""],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )


def test_locked_phone_is_notified_and_the_tap_answers_the_card(make_app, push_setup):
    svc, gw, agent = push_setup
    app = make_app(gw)
    ctx = app.page.context
    ctx.grant_permissions(["notifications"], origin=gw.base)
    ctx.add_init_script(
        f"({SUBSCRIPTION_JS})({json.dumps({'endpoint': svc.endpoint('/push/e2e'), 'keys': {'p256dh': svc.p256dh, 'auth': svc.auth}})})"
    )
    phone = Phone(app, svc)
    page = app.page

    # Installed and paired; the agent sees the phone.
    app.pair_by_link()
    page.wait_for_function("() => navigator.serviceWorker && navigator.serviceWorker.controller !== null", timeout=15_000)
    device = agent.wait_for("device_online")["device"]
    ready = phone.wait_frame(page, "ready")
    vapid_key = ((ready.get("capabilities") or {}).get("push") or {}).get("webpush", {}).get("vapid_public_key")
    assert vapid_key, f"the gateway announces no push: {ready.get('capabilities')}"
    svc.expect_vapid_key = vapid_key
    reg_id = phone.registration_id()

    # The user turns notifications on, with the page's own control.
    page.get_by_role("button", name="Turn on notifications").click()
    expect(page.locator("#push-button")).to_have_attribute("data-state", "on")
    sub = next(f for f in app.sent if f.get("t") == "push_subscribe")
    assert sub["subscription"]["endpoint"] == svc.endpoint("/push/e2e"), sub
    assert sub["subscription"]["keys"] == {"p256dh": svc.p256dh, "auth": svc.auth}, sub
    phone.wait_frame(page, "push_subscribed", id=sub["id"])
    assert svc.pushes == [], "subscribing sent a push"

    # The user asks; the agent needs an approval, and meanwhile the phone is locked.
    app.send("please list the files")
    agent.wait_for("message", device=device, text="please list the files")
    agent.send(t="typing", device=device)
    phone.lock(agent, device)

    # (a) A card for a locked phone: one push, shown as a notification.
    agent.command("p1", t="open_prompt", device=device, prompt="ap-e2e-1", kind="exec_approval",
                  command="ls", description="list the files", options=["once", "deny"])
    push = svc.wait_for_pushes(1)[0]
    payload = check_push(push, svc, vapid_key)
    assert (payload["hermes"]["kind"], payload["hermes"]["id"]) == ("card", "ap-e2e-1"), payload
    # Its Deny button (issue 25; test_notification_answer.py presses one): a token for it.
    assert list(payload["hermes"]["answer"]["tokens"]) == ["deny"], payload
    assert push.headers.get("urgency") == "high" and push.headers.get("topic"), push.headers
    shown = phone.deliver(push.plaintext, reg_id)
    assert [(n["title"], n["body"]) for n in shown] == [("Hermes asks to run a command", "ls")], shown

    # The tap opens the app at the card; answering it reaches the agent.
    app2, url = phone.tap(shown[0]["tag"])
    assert url == gw.base + "/#card=ap-e2e-1", url
    card = app2.page.locator('.card[data-prompt-id="ap-e2e-1"]')
    expect(card).to_have_count(1)
    expect(card).to_be_in_viewport()
    expect(card.locator(".card-command")).to_have_text("ls")
    expect(card).to_have_class(re.compile(r"\bhighlight\b"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    app2.page.screenshot(path=str(SCREENSHOTS / "push-e2e-card.png"))
    once = card.locator('button.card-option[data-option-id="once"]')
    expect(once).to_be_visible()
    once.click()
    answer = agent.wait_for("prompt_answered", device=device, prompt="ap-e2e-1")
    assert answer["option"] == "once" and answer["kind"] == "exec_approval", answer
    agent.command("r1", t="reply", device=device, id="a-1", text="approved: ls", done=True)
    agent.send(t="end_turn", device=device)
    app2.agent_text("approved: ls")
    # The card's notification is replaced by how it closed (L66), connected or not; nothing
    # else is pushed to a phone that is online.
    closed = check_push(svc.wait_for_pushes(2)[1], svc, vapid_key)
    assert closed["hermes"]["closed"] == {"option_id": "once", "expired": False}, closed
    assert len(svc.pushes) == 2, "a push for a phone that was online"

    # (b) The answer finishes while the phone is locked: "Hermes replied".
    app2.send("and the sizes?")
    agent.wait_for("message", device=device, text="and the sizes?")
    phone.lock(agent, device)
    agent.command("r2", t="reply", device=device, id="a-2", text="done: 3 files, 12 KiB", done=True)
    agent.send(t="end_turn", device=device)
    push = svc.wait_for_pushes(3)[2]
    payload = check_push(push, svc, vapid_key)
    assert payload["hermes"]["kind"] == "reply", payload
    shown = phone.deliver(push.plaintext, reg_id)
    assert [(n["title"], n["body"]) for n in shown] == [("Hermes replied", "done: 3 files, 12 KiB")], shown
    app3, url = phone.tap(shown[0]["tag"])
    assert url.startswith(gw.base + "/#message="), url
    reply = app3.agent_text("done: 3 files, 12 KiB").locator("xpath=..")
    expect(reply).to_be_in_viewport()

    # (c) A cron message for the locked phone, through `hermes-mobile send`: held, and a push.
    phone.lock(agent, device)
    sent = hermes_send(gw, device, "cron says hi")
    assert sent.returncode == 0, (sent.returncode, sent.stdout, sent.stderr)
    push = svc.wait_for_pushes(4)[3]
    payload = check_push(push, svc, vapid_key)
    assert payload["hermes"]["kind"] == "deliver", payload
    shown = phone.deliver(push.plaintext, reg_id)
    assert [(n["title"], n["body"]) for n in shown] == [("New message from Hermes", "cron says hi")], shown
    app4, url = phone.tap(shown[0]["tag"])
    assert url.startswith(gw.base + "/"), url
    expect(app4.page.locator("#messages .msg").filter(has_text="cron says hi")).to_have_count(1)
    # Everything the phone was told is in the chat.
    expect(app4.page.locator("#messages .msg").filter(has_text="approved: ls")).to_have_count(1)
    expect(app4.page.locator("#messages .msg").filter(has_text="done: 3 files, 12 KiB")).to_have_count(1)

    assert len(svc.pushes) == 4, [p.payload for p in svc.pushes]
    assert svc.tls_errors == [], svc.tls_errors
    problems = phone.problems()
    assert not problems, "the app's pages were not clean:\n" + "\n".join(problems)
