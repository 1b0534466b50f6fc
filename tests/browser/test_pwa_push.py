"""Install and notifications (issue 18): the manifest, the service worker's offline start and
its push notifications, the notifications control, and the reconnect when a page comes back
from the background. Real headless Chromium against the real gateway; pushes are delivered
with the DevTools protocol, since no push service is reachable from a test."""

import base64
import json
import os
import re
import struct
import urllib.request

import pytest
from playwright.sync_api import expect

from conftest import CHROMIUM

SHELL = {
    "/", "/app.js", "/app.css", "/protocol.js", "/push.js", "/voice.js", "/markdown.js", "/history.js", "/devices.js",
    "/vendor/markdown-it.min.js", "/icon.svg", "/manifest.webmanifest",
    "/icons/icon-192.png", "/icons/icon-512.png", "/icons/maskable-512.png",
    "/avatar/", "/avatar/avatar.css", "/avatar/avatar.js",
}
B64URL = re.compile(r"^[A-Za-z0-9_-]+$")


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def fetch(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.headers.get("Content-Type", ""), r.read()


def wait_controlled(page):
    """The service worker is installed, active and controls the page."""
    page.wait_for_function("() => navigator.serviceWorker && navigator.serviceWorker.controller !== null", timeout=15_000)


def allow_refused_socket(app):
    # While the gateway is down Chromium itself logs each refused WebSocket; the page
    # cannot prevent that line.
    app.allowed_console.append(rf"WebSocket connection to 'ws://127\.0\.0\.1:{app.gateway.port}/ws' failed")


def record_received(page):
    """Frames the page received on its WebSockets (the fixture records only those sent)."""
    got = []

    def on_ws(ws):
        def received(payload):
            if isinstance(payload, str):
                try:
                    got.append(json.loads(payload))
                except ValueError:
                    pass

        ws.on("framereceived", received)

    page.on("websocket", on_ws)
    return got


# -- (a) the manifest ------------------------------------------------------------------


def test_manifest_is_valid_and_installable(app):
    page = app.page
    base = app.gateway.base
    ctype, body = fetch(base + "/manifest.webmanifest")
    assert ctype.startswith("application/manifest+json"), ctype
    m = json.loads(body)
    assert m["name"] == "Hermes" and m["short_name"], m
    assert (m["start_url"], m["scope"], m["id"], m["display"]) == ("./", "./", "./", "standalone"), m
    assert re.match(r"^#[0-9a-f]{6}$", m["theme_color"]) and re.match(r"^#[0-9a-f]{6}$", m["background_color"]), m
    icons = {(i["sizes"], i["purpose"]): i for i in m["icons"]}
    assert set(icons) == {("192x192", "any"), ("512x512", "any"), ("512x512", "maskable")}, m["icons"]

    app.pair_by_link()
    html = page.content()
    assert re.search(r'<link rel="manifest" href="/manifest.webmanifest">', html)
    assert re.search(r'<link rel="apple-touch-icon" href="/icons/', html)
    assert re.search(r'<meta name="apple-mobile-web-app-capable" content="yes">', html)
    # Every icon is a PNG of the size it claims: the PNG header, and as decoded by the page.
    for (sizes, _), icon in icons.items():
        w, h = map(int, sizes.split("x"))
        ctype, png = fetch(base + "/" + icon["src"])
        assert ctype == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n", icon
        assert struct.unpack(">II", png[16:24]) == (w, h), icon
        decoded = page.evaluate(
            "async (src) => { const b = await createImageBitmap(await (await fetch(src)).blob());"
            " return [b.width, b.height]; }",
            "/" + icon["src"],
        )
        assert decoded == [w, h], (icon, decoded)
    # The maskable icon fills its square edge to edge (no transparent corner).
    corner = page.evaluate(
        """async () => { const b = await createImageBitmap(await (await fetch('/icons/maskable-512.png')).blob());
           const c = new OffscreenCanvas(b.width, b.height); const g = c.getContext('2d'); g.drawImage(b, 0, 0);
           return Array.from(g.getImageData(0, 0, 1, 1).data); }"""
    )
    assert corner[3] == 255, corner

    cdp = page.context.new_cdp_session(page)
    manifest = cdp.send("Page.getAppManifest")
    assert manifest.get("errors") == [], manifest.get("errors")
    assert manifest.get("url", "").endswith("/manifest.webmanifest"), manifest


def test_chromium_finds_the_app_installable(browser, server, tmp_path):
    # Playwright's contexts are incognito ones, where nothing is installable: a profile of
    # its own, on the run's browser type.
    ctx = browser.browser_type.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=CHROMIUM, viewport={"width": 1000, "height": 800}
    )
    try:
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        problems = []
        page.on("console", lambda m: m.type == "error" and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(server.pair_url)
        expect(page.locator("#status")).to_have_attribute("data-state", "online")
        wait_controlled(page)
        cdp = ctx.new_cdp_session(page)
        assert cdp.send("Page.getAppManifest").get("errors") == []
        errors = cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
        assert errors == [], errors
        assert problems == [], problems
    finally:
        ctx.close()


# -- (b) the service worker and the offline start ----------------------------------------


def shell_cache(page):
    return page.evaluate(
        """async () => { const out = {};
           for (const name of await caches.keys()) {
             const c = await caches.open(name);
             out[name] = (await c.keys()).map((r) => new URL(r.url).pathname + new URL(r.url).search);
           }
           return out; }"""
    )


def test_service_worker_caches_the_shell_and_the_app_starts_offline(make_app, own_server):
    gw = own_server
    app = make_app(gw)
    allow_refused_socket(app)
    page = app.page
    app.pair_by_link()
    wait_controlled(page)
    scope = page.evaluate("navigator.serviceWorker.ready.then((r) => r.scope)")
    assert scope == gw.base + "/", scope
    app.send("hello before going offline")
    app.agent_text("echo: hello before going offline")
    page.wait_for_timeout(600)  # history.js writes to IndexedDB 200 ms after a change
    # One cache, named by the build the gateway wrote into sw.js, with the shell only.
    caches = shell_cache(page)
    assert len(caches) == 1, caches
    (name, paths), = caches.items()
    assert re.fullmatch(r"hermes-shell-[0-9a-f]{16}", name), name
    assert set(paths) == SHELL, sorted(set(paths) ^ SHELL)
    _, sw = fetch(gw.base + "/sw.js")
    assert name.removeprefix("hermes-shell-").encode() in sw and b"__HERMES_BUILD__" not in sw

    gw.stop()
    expect(page.locator("#status")).to_have_attribute("data-state", re.compile("offline|connecting"))
    page.reload()
    # The app itself, not an offline page: the chat screen with its composer, still paired.
    expect(page.locator("#composer")).to_be_visible()
    expect(page.locator("#pair")).to_be_hidden()
    expect(page.locator("#status")).to_have_attribute("data-state", re.compile("offline|connecting"))
    # With its history (history.js keeps it in IndexedDB).
    expect(page.locator('.msg[data-from="agent"] .msg-text').filter(has_text="echo: hello before going offline")).to_have_count(1)
    page.locator("#composer").fill("typed with no network")
    expect(page.locator("#send-button")).to_be_enabled()
    assert page.evaluate("getComputedStyle(document.querySelector('.composer-bar')).display") != "none"
    # The avatar frame came from the cache too.
    expect(page.frame_locator("#avatar-frame").locator("html")).to_have_attribute("data-state", re.compile("idle"))
    for path in shell_cache(page)[name]:
        assert not re.match(r"^/(ws|agent|healthz)\b", path), path

    gw.start()
    app.expect_online(timeout=30_000)
    for paths in shell_cache(page).values():
        assert not {"/ws", "/healthz", "/agent"} & set(paths), paths


# -- (c) push notifications --------------------------------------------------------------


def sw_registration_id(page, base):
    cdp = page.context.new_cdp_session(page)
    regs = []
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda e: regs.extend(e["registrations"]))
    cdp.send("ServiceWorker.enable")
    for _ in range(100):
        found = [r for r in regs if r["scopeURL"] == base + "/" and not r.get("isDeleted")]
        if found:
            return cdp, found[-1]["registrationId"]
        page.wait_for_timeout(50)
    raise AssertionError(f"no service worker registration for {base}/: {regs}")


def notifications(page):
    return page.evaluate(
        """async () => (await (await navigator.serviceWorker.ready).getNotifications())
             .map((n) => ({title: n.title, body: n.body, tag: n.tag, data: n.data}))"""
    )


def close_notifications(page):
    page.evaluate("async () => (await (await navigator.serviceWorker.ready).getNotifications()).forEach((n) => n.close())")


def push_and_read(page, cdp, reg_id, base, data):
    close_notifications(page)
    cdp.send("ServiceWorker.deliverPushMessage", {"origin": base, "registrationId": reg_id, "data": data})
    for _ in range(100):
        shown = notifications(page)
        if shown:
            return shown
        page.wait_for_timeout(50)
    raise AssertionError(f"no notification for the push {data!r}")


def paired_with_worker(make_app, gateway):
    app = make_app(gateway)
    app.page.context.grant_permissions(["notifications"], origin=gateway.base)
    app.pair_by_link()
    wait_controlled(app.page)
    return app


def test_push_shows_a_notification(make_app, server):
    app = paired_with_worker(make_app, server)
    page, base = app.page, server.base
    cdp, reg_id = sw_registration_id(page, base)

    declarative = {
        "web_push": 8030,
        "notification": {"title": "Approve command", "body": "ls -la", "navigate": base + "/#card=p-1", "tag": "card-p-1"},
        "hermes": {"kind": "card", "id": "p-1"},
    }
    shown = push_and_read(page, cdp, reg_id, base, json.dumps(declarative))
    assert len(shown) == 1, shown
    n = shown[0]
    assert (n["title"], n["body"], n["tag"]) == ("Approve command", "ls -la", "card-p-1"), n
    assert n["data"] == {"kind": "card", "id": "p-1", "navigate": base + "/#card=p-1", "tag": "card-p-1", "title": "Approve command", "answer": None}, n

    # The same tag replaces the notification instead of adding one.
    cdp.send("ServiceWorker.deliverPushMessage", {"origin": base, "registrationId": reg_id, "data": json.dumps(declarative)})
    page.wait_for_timeout(300)
    assert len(notifications(page)) == 1

    shown = push_and_read(page, cdp, reg_id, base, json.dumps({"title": "Plain", "body": "a top-level payload"}))
    assert [(n["title"], n["body"]) for n in shown] == [("Plain", "a top-level payload")], shown

    # Another sender's declarative push says what it is about only in `navigate`: a tap
    # brings that card into view all the same.
    only_navigate = {"web_push": 8030, "notification": {"title": "T", "body": "B", "navigate": base + "/#card=p%202"}}
    shown = push_and_read(page, cdp, reg_id, base, json.dumps(only_navigate))
    assert shown[0]["data"] == {"kind": "card", "id": "p 2", "navigate": base + "/#card=p%202", "tag": "", "title": "T", "answer": None}, shown

    # Plain text is shown as it is.
    shown = push_and_read(page, cdp, reg_id, base, "the build finished")
    assert [(n["title"], n["body"]) for n in shown] == [("Hermes", "the build finished")], shown

    # Unreadable: still a notification (Safari revokes a subscription whose pushes show nothing).
    shown = push_and_read(page, cdp, reg_id, base, "\x00not json{")
    assert len(shown) == 1 and shown[0]["title"] == "Hermes" and shown[0]["body"], shown


# -- (d) a tapped notification opens the card ----------------------------------------------


# A click as the browser would deliver it. A script-made event cannot waitUntil(), so the
# test stands in for the browser there: it keeps the promise and waits for it.
CLICK_JS = """async ({id, kind}) => {
  const errors = [];
  self.addEventListener('error', (e) => errors.push(String(e.message)));
  const waits = [];
  NotificationEvent.prototype.waitUntil = function (p) { waits.push(p); };
  await self.registration.showNotification('Approve command', {tag: 'click-test', data: {kind, id, navigate: ''}});
  const [n] = await self.registration.getNotifications({tag: 'click-test'});
  self.dispatchEvent(new NotificationEvent('notificationclick', {notification: n}));
  await Promise.all(waits);
  delete NotificationEvent.prototype.waitUntil;
  const left = (await self.registration.getNotifications({tag: 'click-test'})).length;
  return {waits: waits.length, left, errors};
}"""


def test_notification_click_opens_the_card(make_app, server):
    app = paired_with_worker(make_app, server)
    page = app.page
    app.send("/approve ls -la")
    card = page.locator('.card[data-kind="exec_approval"]')
    expect(card).to_have_count(1)
    prompt_id = card.get_attribute("data-prompt-id")
    # Push the card out of view.
    app.send("/long 6000")
    expect(page.locator('.msg[data-from="agent"][data-final="true"]')).to_have_count(1, timeout=15_000)
    page.locator("#messages").evaluate("m => { m.scrollTop = m.scrollHeight; }")
    expect(card).not_to_be_in_viewport()

    worker = page.context.service_workers[0]
    click = worker.evaluate(CLICK_JS, {"id": prompt_id, "kind": "card"})
    assert click == {"waits": 1, "left": 0, "errors": []}, click  # closed, and no error
    expect(card).to_have_class(re.compile(r"\bhighlight\b"))
    expect(card).to_be_in_viewport()
    card.locator('button.card-option[data-option-id="once"]').click()
    reply = app.agent_text("approved (once): ls -la").locator("xpath=..")

    # A reply's notification opens its message the same way.
    page.locator("#messages").evaluate("m => { m.scrollTop = 0; }")
    expect(reply).not_to_be_in_viewport()
    click = worker.evaluate(CLICK_JS, {"id": reply.get_attribute("data-id"), "kind": "reply"})
    assert click["errors"] == [], click
    expect(reply).to_have_class(re.compile(r"\bhighlight\b"))
    expect(reply).to_be_in_viewport()


def test_opened_with_a_card_hash_waits_for_the_card(make_app, server):
    """A notification tapped with no window open opens /#card=ID: the card comes from the
    gateway after ready (H5 sends open cards again), and is then brought into view."""
    app = paired_with_worker(make_app, server)
    page = app.page
    app.send("/approve uname -a")
    card = page.locator('.card[data-kind="exec_approval"]')
    expect(card).to_have_count(1)
    prompt_id = card.get_attribute("data-prompt-id")
    page.goto(server.base + "/#card=" + prompt_id)
    app.expect_online()
    expect(card).to_have_count(1)
    expect(card).to_have_class(re.compile(r"\bhighlight\b"))
    expect(card).to_be_in_viewport()
    assert page.evaluate("location.hash") == ""
    card.locator('button.card-option[data-option-id="once"]').click()
    app.agent_text("approved (once): uname -a")


# -- (e) turning notifications on ----------------------------------------------------------

# PushManager cannot reach a push service here: a fake subscription with a real P-256 point.
# PushManager cannot reach a push service here: a fake subscription with a real P-256 point,
# kept in localStorage as a browser keeps its subscription across reloads.
FAKE_PUSH_JS = """(() => {
  if (typeof PushManager === 'undefined') return;
  const b64u = (u8) => btoa(String.fromCharCode(...u8)).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '');
  const KEY = '__fakePushSubscription';
  window.__subscribeCalls = [];
  function wrap(s) {
    const bytes = (t) => Uint8Array.from(atob(t.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0));
    return {
      endpoint: s.endpoint, expirationTime: null,
      options: {userVisibleOnly: true, applicationServerKey: bytes(s.serverKey).buffer},
      getKey: (name) => bytes(s.keys[name]).buffer,
      toJSON: () => ({endpoint: s.endpoint, expirationTime: null, keys: {...s.keys}}),
      unsubscribe: async () => {
        localStorage.removeItem(KEY);
        window.__unsubscribed = (window.__unsubscribed || 0) + 1;
        return true;
      },
    };
  }
  PushManager.prototype.subscribe = async function (options) {
    const serverKey = b64u(new Uint8Array(options.applicationServerKey));
    window.__subscribeCalls.push({userVisibleOnly: options.userVisibleOnly, key: serverKey});
    const kp = await crypto.subtle.generateKey({name: 'ECDH', namedCurve: 'P-256'}, true, ['deriveBits']);
    const p256dh = b64u(new Uint8Array(await crypto.subtle.exportKey('raw', kp.publicKey)));
    const auth = b64u(crypto.getRandomValues(new Uint8Array(16)));
    const s = {endpoint: 'https://fcm.googleapis.com/fcm/send/test', serverKey, keys: {p256dh, auth}};
    localStorage.setItem(KEY, JSON.stringify(s));
    return wrap(s);
  };
  PushManager.prototype.getSubscription = async function () {
    const s = localStorage.getItem(KEY);
    return s ? wrap(JSON.parse(s)) : null;
  };
})();"""

FAKE_VAPID = base64.urlsafe_b64encode(b"\x04" + bytes(range(1, 65))).decode().rstrip("=")


def route_push_gateway(page, recorded, vapid=FAKE_VAPID, refuse=None):
    """Stands in for a gateway with push until the real one has it: the real gateway's
    frames, with capabilities.push in `ready` and the push_* frames answered here."""

    def handler(ws):
        server = ws.connect_to_server()

        def from_page(msg):
            f = json.loads(msg) if isinstance(msg, str) else {}
            recorded.append(f)
            answers = {"push_subscribe": "push_subscribed", "push_unsubscribe": "push_unsubscribed", "push_test": "push_sent"}
            t = f.get("t")
            if t in answers:
                if refuse and t == refuse[0]:
                    ws.send(json.dumps({"t": "error", "id": f["id"], "code": refuse[1], "message": refuse[2]}))
                else:
                    ws.send(json.dumps({"t": answers[t], "id": f["id"]}))
                return
            server.send(msg)

        def from_server(msg):
            if isinstance(msg, str):
                f = json.loads(msg)
                if f.get("t") == "ready":
                    caps = f.setdefault("capabilities", {})
                    if vapid:
                        caps["push"] = {"webpush": {"vapid_public_key": vapid}}
                    else:
                        caps.pop("push", None)
                    msg = json.dumps(f)
            ws.send(msg)

        ws.on_message(from_page)
        server.on_message(from_server)

    page.route_web_socket(re.compile(r"/ws$"), handler)


def push_app(make_app, gateway):
    app = make_app(gateway)
    app.page.context.grant_permissions(["notifications"], origin=gateway.base)
    app.page.add_init_script(FAKE_PUSH_JS)
    return app


def check_subscribe_frame(f, base):
    assert f["id"] and f["subscription"]["endpoint"] == "https://fcm.googleapis.com/fcm/send/test", f
    keys = f["subscription"]["keys"]
    assert B64URL.match(keys["p256dh"]) and B64URL.match(keys["auth"]), keys  # no padding
    p256dh, auth = b64url_decode(keys["p256dh"]), b64url_decode(keys["auth"])
    assert len(p256dh) == 65 and p256dh[0] == 4 and len(auth) == 16, keys
    assert f["app_url"] == base + "/", f


def turn_on(page):
    # Off, the control is on the chat screen by itself; the bell is for later.
    expect(page.locator("#push-panel")).to_be_visible()
    expect(page.locator("#push-button")).to_be_hidden()
    page.get_by_role("button", name="Turn on notifications").click()
    expect(page.locator("#push-button")).to_have_attribute("data-state", "on")
    expect(page.locator("#push-state")).to_have_text("Notifications are on for this browser.")


def test_turn_on_notifications_sends_push_subscribe(make_app, server):
    app = push_app(make_app, server)
    page = app.page
    recorded = []
    route_push_gateway(page, recorded)
    app.pair_by_link()
    wait_controlled(page)
    expect(page.locator("#push-button")).to_have_attribute("data-state", "off")
    turn_on(page)
    calls = page.evaluate("window.__subscribeCalls")
    assert calls == [{"userVisibleOnly": True, "key": FAKE_VAPID}], calls
    subs = [f for f in recorded if f.get("t") == "push_subscribe"]
    assert len(subs) == 1, recorded
    check_subscribe_frame(subs[0], server.base)

    page.get_by_role("button", name="Send a test notification").click()
    expect(page.locator("#notice")).to_contain_text("test notification")
    assert [f["t"] for f in recorded if f.get("t", "").startswith("push_")] == ["push_subscribe", "push_test"]

    # A reload keeps the state (the browser's subscription and the endpoint registered).
    page.reload()
    app.expect_online()
    expect(page.locator("#push-button")).to_have_attribute("data-state", "on")
    page.locator("#push-button").click()
    page.get_by_role("button", name="Turn off notifications").click()
    expect(page.locator("#push-button")).to_have_attribute("data-state", "off")
    assert [f for f in recorded if f.get("t") == "push_unsubscribe"], recorded
    assert page.evaluate("window.__unsubscribed") == 1


def test_gateway_refusals_are_shown(make_app, server):
    app = push_app(make_app, server)
    page = app.page
    recorded = []
    route_push_gateway(page, recorded, refuse=("push_subscribe", "forbidden", "push service host not allowed"))
    app.pair_by_link()
    wait_controlled(page)
    page.get_by_role("button", name="Turn on notifications").click()
    expect(page.locator("#notice")).to_have_text("Notifications: forbidden: push service host not allowed")
    expect(page.locator("#push-button")).to_have_attribute("data-state", "off")


def test_forget_this_device_also_unsubscribes(make_app, server):
    app = push_app(make_app, server)
    page = app.page
    recorded = []
    route_push_gateway(page, recorded)
    app.pair_by_link()
    wait_controlled(page)
    turn_on(page)
    page.locator("#forget-button").click()
    page.locator("#forget-confirm").click()
    expect(page.locator("#pair")).to_be_visible()
    expect(page.locator("#push-button")).to_be_hidden()
    assert [f for f in recorded if f.get("t") == "push_unsubscribe"], recorded
    page.wait_for_function("window.__unsubscribed === 1")


def gateway_push_key(app):
    """The real gateway's VAPID key from its ready frame, or skip until it has one."""
    got = record_received(app.page)
    app.pair_by_link()
    ready = next(f for f in got if f.get("t") == "ready")
    key = ((ready.get("capabilities") or {}).get("push") or {}).get("webpush", {}).get("vapid_public_key")
    if not key:
        pytest.skip(f"the gateway at {os.path.basename(str(app.gateway.proc.args[0]))} has no push yet "
                    "(ready.capabilities.push.webpush.vapid_public_key is missing); the lead's new build has it")
    return key


def test_real_gateway_push_subscribe_and_unsubscribe(make_app, server):
    app = push_app(make_app, server)
    page = app.page
    key = gateway_push_key(app)
    assert len(b64url_decode(key)) == 65, key
    wait_controlled(page)
    turn_on(page)
    assert page.evaluate("window.__subscribeCalls")[0]["key"] == key
    subs = [f for f in app.sent if f.get("t") == "push_subscribe"]
    assert len(subs) == 1, app.sent
    check_subscribe_frame(subs[0], server.base)
    page.get_by_role("button", name="Turn off notifications").click()
    expect(page.locator("#push-button")).to_have_attribute("data-state", "off")
    assert [f for f in app.sent if f.get("t") == "push_unsubscribe"], app.sent
    assert not app.page.locator("#notice").text_content(), app.page.locator("#notice").text_content()


# -- (f) why notifications cannot work here -------------------------------------------------

IPHONE_UA = ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_4 like Mac OS X) AppleWebKit/605.1.15 "
             "(KHTML, like Gecko) Version/18.4 Mobile/15E148 Safari/604.1")


@pytest.mark.parametrize(
    "case,init,context,sentence",
    [
        ("http-lan", "Object.defineProperty(window, 'isSecureContext', {get: () => false, configurable: true});",
         {}, "Notifications need a secure page"),
        ("ios-browser", "", {"user_agent": IPHONE_UA}, "On iPhone and iPad, notifications work only in the app on the Home Screen"),
        ("denied", "Object.defineProperty(Notification, 'permission', {get: () => 'denied', configurable: true});",
         {}, "Notifications are blocked for this site"),
        ("no-push", "delete window.PushManager;", {}, "This browser cannot receive push notifications."),
        ("gateway-without-push", "", {}, "Push is not available from this gateway"),
    ],
)
def test_why_notifications_are_not_available(make_app, server, case, init, context, sentence):
    app = make_app(server, **context)
    page = app.page
    if init:
        page.add_init_script(init)
    route_push_gateway(page, [], vapid=None if case == "gateway-without-push" else FAKE_VAPID)
    app.pair_by_link()
    expect(page.locator("#push-button")).to_have_attribute("data-state", "unavailable")
    # Said on the chat screen, without opening anything.
    state = page.locator("#push-state")
    expect(state).to_be_visible()
    expect(state).to_contain_text(sentence)
    text = state.text_content()
    assert text.count(". ") == 0 and text.endswith("."), f"not one sentence: {text!r}"
    expect(page.get_by_role("button", name="Turn on notifications")).to_be_hidden()
    # Put away, it stays away (the bell brings it back), also after a reload.
    page.get_by_role("button", name="Not now").click()
    expect(state).to_be_hidden()
    bell = page.get_by_role("button", name=re.compile("Notifications: not available"))
    expect(bell).to_be_visible()
    page.reload()
    app.expect_online()
    expect(bell).to_be_visible()
    expect(state).to_be_hidden()
    bell.click()
    expect(state).to_contain_text(sentence)
    expect(bell).to_be_hidden()


# -- (g) back from the background ------------------------------------------------------------


def wait_backoff_at_least(page, seconds):
    expect(page.locator("#status")).to_have_text(re.compile(rf"retrying in ([{seconds}-9]|1\d) s"), timeout=40_000)


@pytest.mark.parametrize(
    "event",
    [
        "document.dispatchEvent(new Event('visibilitychange'))",
        "window.dispatchEvent(new PageTransitionEvent('pageshow', {persisted: true}))",
        "window.dispatchEvent(new Event('online'))",
    ],
    ids=["visibilitychange", "pageshow", "online"],
)
def test_coming_back_reconnects_at_once(make_app, own_server, event):
    gw = own_server
    app = make_app(gw)
    allow_refused_socket(app)
    page = app.page
    app.pair_by_link()
    gw.stop()
    wait_backoff_at_least(page, 4)
    gw.start()
    t0 = page.evaluate("performance.now()")
    page.evaluate(event)
    app.expect_online(timeout=3_000)
    took = page.evaluate("performance.now()") - t0
    assert took < 2500, f"online {took:.0f} ms after the event: the backoff was not skipped"


def test_no_reconnects_while_hidden(make_app, own_server):
    gw = own_server
    app = make_app(gw)
    allow_refused_socket(app)
    page = app.page
    app.pair_by_link()
    page.evaluate(
        """() => { window.__vis = 'hidden';
             Object.defineProperty(document, 'visibilityState', {get: () => window.__vis, configurable: true});
             Object.defineProperty(document, 'hidden', {get: () => window.__vis === 'hidden', configurable: true});
             document.dispatchEvent(new Event('visibilitychange')); }"""
    )
    gw.stop()
    expect(page.locator("#status")).to_have_attribute("data-state", "offline")
    sockets = len(app.sockets)
    page.wait_for_timeout(3000)
    assert len(app.sockets) == sockets, f"{len(app.sockets) - sockets} reconnects while hidden"
    gw.start()
    page.wait_for_timeout(1000)
    assert len(app.sockets) == sockets, "reconnected while hidden"
    page.evaluate("() => { window.__vis = 'visible'; document.dispatchEvent(new Event('visibilitychange')); }")
    app.expect_online(timeout=3_000)
