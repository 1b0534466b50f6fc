"""A card answered from its notification (issue 25): a locked phone's notification of an
approval has a Deny button; pressing it answers the card without opening the app, the
notification then says how it went, and the app, opened later, shows the card closed.

Set up as test_push_e2e.py (whose fixture and phone this test borrows): the release gateway,
headless Chromium with the app's service worker, tests/browser/fake_push.py as the push
service (it decrypts what the gateway pushed, so the button's token is the gateway's own),
and this test as the agent. A press of a button is a notificationclick with its `action`,
dispatched in the worker as test_push_e2e.py's tap is (the test keeps its waitUntil
promise); presses with data the gateway would never send (another origin, a forged token,
a spent one) call the handler's answerFromNotification(data, action) directly. Either way
fetch and openWindow are watched.
"""

import json
import re

from playwright.sync_api import expect

from conftest import SCREENSHOTS, without_journal
from test_push_e2e import SUBSCRIPTION_JS, Phone, check_push, push_setup  # noqa: F401 (a fixture)

# In the service worker: button `action` of the notification with this tag is pressed (a
# notificationclick), or, given `data`, answerFromNotification(data, action) is called.
# Records every fetch and every window asked for (refused, as Chromium refuses one outside
# a real click), and returns what is shown afterwards with the tag.
ANSWER_JS = """async ({tag, action, data}) => {
  const fetched = [];
  const opened = [];
  const realFetch = self.fetch;
  const realOpen = self.clients.openWindow;
  self.fetch = async (input, init) => {
    const res = await realFetch.call(self, input, init);
    fetched.push({url: String(input), method: init.method, credentials: init.credentials,
                  body: JSON.parse(init.body), status: res.status, answer: await res.clone().json()});
    return res;
  };
  self.clients.openWindow = async (u) => { opened.push(u); return null; };
  const waits = [];
  NotificationEvent.prototype.waitUntil = function (p) { waits.push(p); };
  let error = null;
  try {
    if (data) {
      await answerFromNotification(data, action);
    } else {
      const [n] = await self.registration.getNotifications({tag});
      if (!n) throw new Error('no notification with the tag ' + tag);
      self.dispatchEvent(new NotificationEvent('notificationclick', {notification: n, action}));
      await Promise.all(waits);
    }
  } catch (e) {
    error = String(e);
  } finally {
    delete NotificationEvent.prototype.waitUntil;
    self.fetch = realFetch;
    self.clients.openWindow = realOpen;
  }
  const shown = (await self.registration.getNotifications({tag})).map((m) => ({
    title: m.title, body: m.body, tag: m.tag, silent: m.silent,
    actions: m.actions.map((a) => [a.action, a.title]), answer: m.data && m.data.answer}));
  return {fetched, opened, error, shown, waits: waits.length};
}"""

# The buttons of the notification with this tag, and what it keeps for them.
BUTTONS_JS = """async (tag) => (await self.registration.getNotifications({tag})).map((n) => ({
  actions: n.actions.map((a) => [a.action, a.title]), silent: n.silent, data: n.data}))"""


def press(phone, tag, action, data=None):
    pages = len(phone.ctx.pages)
    got = phone.in_worker(ANSWER_JS, {"tag": tag, "action": action, "data": data})
    assert got.get("error") is None and got["waits"] == (0 if data else 1), got
    assert len(phone.ctx.pages) == pages, f"a page opened: {[p.url for p in phone.ctx.pages]}"
    return got


def notified_card(phone, agent, svc, device, reg_id, prompt, command, pushes):
    """The agent asks while the phone is locked; the push is delivered; its notification."""
    agent.command(prompt, t="open_prompt", device=device, prompt=prompt, kind="exec_approval",
                  command=command, description="a test command", options=["once", "deny"])
    push = svc.wait_for_pushes(pushes)[pushes - 1]
    payload = check_push(push, svc, svc.expect_vapid_key)
    assert payload["hermes"]["id"] == prompt, payload
    # Safe buttons (the default): Deny only, with a token for it alone.
    assert [a["action"] for a in payload["notification"]["actions"]] == ["deny"], payload
    answer = payload["hermes"]["answer"]
    assert answer["url"] == phone.gw.base + "/card-answer" and list(answer["tokens"]) == ["deny"], answer
    shown = phone.deliver(push.plaintext, reg_id)
    assert [(n["title"], n["body"], n["tag"]) for n in shown] == [
        ("Hermes asks to run a command", command, f"card-{prompt}")], shown
    [n] = phone.in_worker(BUTTONS_JS, f"card-{prompt}")
    assert n["actions"] == [["deny", "Deny"]] and n["silent"] is False, n
    assert n["data"]["answer"]["tokens"] == answer["tokens"], n
    assert n["data"]["answer"]["done"] == {"deny": f"Denied: {command}"}, n
    assert n["data"]["tag"] == f"card-{prompt}" and n["data"]["answer"]["expires"] == answer["expires"], n
    return n["data"]


def expect_denied(page, prompt):
    card = page.locator(f'.card[data-prompt-id="{prompt}"]')
    expect(card).to_have_attribute("data-state", "done")
    expect(card.locator(".card-result")).to_have_text("Deny")
    expect(card.locator('button.card-option[data-option-id="deny"]')).to_have_attribute("aria-pressed", "true")
    expect(card.locator("button.card-option").first).to_be_disabled()


def test_deny_from_the_notification(make_app, push_setup):  # noqa: F811 (the fixture)
    svc, gw, agent = push_setup
    app = make_app(gw)
    ctx = app.page.context
    ctx.grant_permissions(["notifications"], origin=gw.base)
    ctx.add_init_script(
        f"({SUBSCRIPTION_JS})({json.dumps({'endpoint': svc.endpoint('/push/e2e'), 'keys': {'p256dh': svc.p256dh, 'auth': svc.auth}})})"
    )
    phone = Phone(app, svc)
    page = app.page
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    app.pair_by_link()
    page.wait_for_function("() => navigator.serviceWorker && navigator.serviceWorker.controller !== null", timeout=15_000)
    device = agent.wait_for("device_online")["device"]
    ready = phone.wait_frame(page, "ready")
    push_caps = (ready.get("capabilities") or {}).get("push") or {}
    assert push_caps.get("actions") == "safe", push_caps
    svc.expect_vapid_key = push_caps["webpush"]["vapid_public_key"]
    reg_id = phone.registration_id()

    # The panel says which buttons notifications will have, before they are turned on.
    note = page.locator("#push-note")
    expect(note).to_have_text("Notifications can deny a command or cancel a confirmation; approving needs the app.")
    page.locator("#push-panel").screenshot(path=str(SCREENSHOTS / "notif-panel.png"))
    for mode, text in [("all", "anyone holding your phone can press them"), ("off", "tap one to open the card"), ("", "")]:
        got = page.evaluate("async (m) => (await import('/push.js')).explainActions(m)", mode)
        assert (text in got) if text else got == "", (mode, got)
    page.get_by_role("button", name="Turn on notifications").click()
    expect(page.locator("#push-button")).to_have_attribute("data-state", "on")
    phone.wait_frame(page, "push_subscribed")

    # (1) A card while the phone is locked: a notification with a Deny button.
    phone.lock(agent, device)
    data1 = notified_card(phone, agent, svc, device, reg_id, "na-1", "ls", 1)

    # The app is opened from the home screen (not from the notification, which stays) and
    # shows the card open; then the phone is locked again.
    app2 = phone.open(gw.base + "/")
    card1 = app2.page.locator('.card[data-prompt-id="na-1"]')
    expect(card1).to_have_attribute("data-state", "open")
    app2.page.wait_for_timeout(500)  # its history is written (FLUSH_MS) before the tab goes
    phone.lock(agent, device)

    # Deny is pressed: one POST to this origin's /card-answer with the token, 200; the
    # notification says so in one quiet line without buttons; no window opens.
    got = press(phone, "card-na-1", "deny")
    assert got["opened"] == [], got
    [f] = got["fetched"]
    assert f["url"] == gw.base + "/card-answer" and f["method"] == "POST" and f["credentials"] == "omit", f
    assert f["body"]["prompt_id"] == "na-1" and f["body"]["option_id"] == "deny", f
    assert re.fullmatch(r"[A-Za-z0-9_-]{54}", f["body"]["token"]), f
    assert (f["status"], f["answer"]) == (200, {"option_id": "deny"}), f
    assert got["shown"] == [{"title": "Denied: ls", "body": "", "tag": "card-na-1", "silent": True, "actions": [], "answer": None}], got
    answered = agent.wait_for("prompt_answered", device=device, prompt="na-1")
    assert answered["option"] == "deny" and answered["kind"] == "exec_approval", answered
    # The gateway also pushes the outcome (L66), which would replace it with the same line.
    closed = check_push(svc.wait_for_pushes(2)[1], svc, svc.expect_vapid_key)
    assert closed["hermes"] == {"kind": "card", "id": "na-1", "closed": {"option_id": "deny", "expired": False}}, closed
    assert closed["notification"]["title"] == "Denied: ls" and closed["notification"]["silent"] is True, closed

    # Pressed again (a second press that got through, or a copy of the notification on
    # another browser: the card is closed, the token spent): 409, and the line stays.
    again = press(phone, "card-na-1", "deny", data1)
    assert [x["status"] for x in again["fetched"]] == [409] and again["opened"] == [], again
    assert [n["title"] for n in again["shown"]] == ["Denied: ls"], again
    # With no newer notification of the card, a 409 says so itself, after its expiry too.
    clear = "async () => (await self.registration.getNotifications()).forEach((n) => n.close())"
    phone.in_worker(clear)
    late = press(phone, "card-na-1", "deny", data1)
    assert [x["status"] for x in late["fetched"]] == [409] and late["opened"] == [], late
    assert [(n["title"], n["silent"], n["actions"]) for n in late["shown"]] == [("Already answered", True, [])], late
    phone.in_worker(clear)
    expired = press(phone, "card-na-1", "deny", {**data1, "answer": {**data1["answer"], "expires": 1}})
    assert [n["title"] for n in expired["shown"]] == ["Expired"], expired

    # A payload naming another origin never makes the worker POST there: it opens the card.
    off_origin = {**data1, "answer": {**data1["answer"], "url": "https://elsewhere.example/card-answer"}}
    elsewhere = press(phone, "card-na-1", "deny", off_origin)
    assert elsewhere["fetched"] == [] and elsewhere["opened"] == [gw.base + "/#card=na-1"], elsewhere

    # (2) A card the page never saw, denied from its notification the same way.
    data2 = notified_card(phone, agent, svc, device, reg_id, "na-2", "make clean", 3)
    # A token that is not the gateway's: 403, and the card is opened in the app instead.
    forged = {**data2, "answer": {**data2["answer"], "tokens": {"deny": "A" * 54}}}
    refused = press(phone, "card-na-2", "deny", forged)
    assert [x["status"] for x in refused["fetched"]] == [403], refused
    assert refused["opened"] == [gw.base + "/#card=na-2"], refused
    # The press closed the notification; it comes back without buttons, so the card is not
    # lost if the app cannot be opened from here.
    assert [n["body"] for n in refused["shown"]] == ["Not sent: tap to open the card."], refused
    assert [n["actions"] for n in refused["shown"]] == [[]], "its buttons never worked here"
    # The notification as it came, pressed again with the gateway's own token.
    got = press(phone, "card-na-2", "deny", data2)
    assert [x["status"] for x in got["fetched"]] == [200] and got["opened"] == [], got
    assert [n["title"] for n in got["shown"]] == ["Denied: make clean"], got
    answered = agent.wait_for("prompt_answered", device=device, prompt="na-2")
    assert answered["option"] == "deny", answered

    # The app opened again: both cards closed, with the answer given. The one it showed
    # before comes from its history, closed by the journal's `prompt_done` alone; the other
    # is replayed as opened and closed (L58).
    start = len(phone.received)
    app3 = phone.open(gw.base + "/")
    for prompt in ("na-1", "na-2"):
        expect_denied(app3.page, prompt)
    frames = [(f.get("t"), f.get("id")) for f in phone.received[start:] if f.get("t") in ("prompt", "prompt_done")]
    assert frames == [("prompt_done", "na-1"), ("prompt", "na-2"), ("prompt_done", "na-2")], frames
    app3.page.wait_for_timeout(300)  # the pop-in of the cards just placed
    app3.page.screenshot(path=str(SCREENSHOTS / "notif-cards-closed.png"))

    # (3) The same with a gateway without a journal: the page shows the card from its
    # history, closed ("closed") as it cannot know better, then `prompt_done` comes after
    # `ready` (L65) and gives the answer.
    phone.lock(agent, device)
    notified_card(phone, agent, svc, device, reg_id, "na-3", "du -sh", 5)
    app4 = phone.open(gw.base + "/")
    expect(app4.page.locator('.card[data-prompt-id="na-3"]')).to_have_attribute("data-state", "open")
    app4.page.wait_for_timeout(500)
    phone.lock(agent, device)
    assert [x["status"] for x in press(phone, "card-na-3", "deny")["fetched"]] == [200]
    agent.wait_for("prompt_answered", device=device, prompt="na-3")
    page5 = phone.ctx.new_page()
    without_journal(page5)
    app5 = phone.adopt(page5)
    start = len(phone.received)
    page5.goto(gw.base + "/")
    app5.expect_online()
    expect_denied(page5, "na-3")
    frames = [(f.get("t"), f.get("id")) for f in phone.received[start:] if f.get("t") in ("prompt", "prompt_done")]
    assert frames == [("prompt_done", "na-3")], frames

    assert svc.tls_errors == [], svc.tls_errors
    problems = phone.problems()
    assert not problems, "the app's pages were not clean:\n" + "\n".join(problems)
