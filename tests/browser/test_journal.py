"""Issue 24, section 5: the page with a gateway that keeps a journal. IndexedDB is a cache of
the journal: a reload even right after a reply keeps the conversation (the gateway replays
what the cache lost, after the journal seq stored with it), a new browser profile with the
same device id shows the conversation from `history`, scrolling up goes on through
`history` pages past the cache, `received` confirms a message, and "Forget this device"
asks first and has the gateway forget too."""

import re

from playwright.sync_api import expect

from agent_link import AgentLink
from conftest import SCREENSHOTS, TOKEN, _start_gateway

ITEMS = "#messages > .msg, #messages > .card"


def texts(page, who):
    return page.eval_on_selector_all(
        f'#messages > .msg[data-from="{who}"] .msg-text', "els => els.map(e => e.textContent)"
    )


def send_and_wait(app, text, reply):
    app.send(text)
    app.agent_text(reply)
    expect(app.page.locator('.msg[data-from="user"]').filter(has_text=text).last).to_have_attribute("data-final", "true")


def same_device(make_app, gateway, device_id, **context_args):
    """A page in a new browser profile (empty localStorage and IndexedDB) that is paired
    with the token and uses `device_id`: another browser, or this one after its data was
    cleared, told the same device id."""
    app = make_app(gateway, **context_args)
    app.page.add_init_script(
        f"""if (!localStorage.getItem('hermes.deviceId')) {{
          localStorage.setItem('hermes.token', {TOKEN!r});
          localStorage.setItem('hermes.deviceId', {device_id!r});
        }}"""
    )
    return app


def device_id(page):
    return page.evaluate("localStorage.getItem('hermes.deviceId')")


# Reloads the page from inside it the moment the agent's bubble with this text is final: well
# within the 200 ms the cache waits before it writes (history.js FLUSH_MS).
RELOAD_ON_REPLY_JS = """
(() => {
  if (sessionStorage.getItem('reloaded')) return;
  new MutationObserver(() => {
    for (const t of document.querySelectorAll('.msg[data-from="agent"][data-final="true"] .msg-text')) {
      if (t.textContent === 'echo: the last words' && !sessionStorage.getItem('reloaded')) {
        sessionStorage.setItem('reloaded', String(performance.now()));
        location.reload();
      }
    }
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
})();
"""


def test_a_reload_right_after_a_reply_keeps_the_conversation(app):
    page = app.page
    app.pair_by_link()
    send_and_wait(app, "kept before", "echo: kept before")
    page.wait_for_timeout(600)  # this turn is in the cache
    page.add_init_script(RELOAD_ON_REPLY_JS)
    page.evaluate(RELOAD_ON_REPLY_JS)
    hellos = len([f for f in app.sent if f.get("t") == "hello"])
    app.send("the last words")
    # A function with interval polling: a bare expression is eval'd in the page, which its
    # Content-Security-Policy (script-src 'self') refuses whenever the first check fails.
    page.wait_for_function("() => sessionStorage.getItem('reloaded') !== null", polling=100, timeout=15_000)
    app.expect_online()
    app.agent_text("echo: the last words")
    page.wait_for_timeout(1500)  # a second copy from the replay or history would be here by now
    assert texts(page, "user") == ["kept before", "the last words"]
    assert texts(page, "agent") == ["echo: kept before", "echo: the last words"]
    expect(page.locator(ITEMS)).to_have_count(4)
    # The reloaded page resumed from the journal seq in its cache, and said so in its hello.
    resumed = [f for f in app.sent if f.get("t") == "hello"][hellos:]
    assert resumed and isinstance(resumed[-1].get("resume", {}).get("after"), int), resumed
    # A message it sends now is confirmed by `received` (no ping after it) and goes on after.
    before = len(app.sent)
    send_and_wait(app, "and on", "echo: and on")
    assert not [f for f in app.sent[before:] if f.get("t") == "ping"], app.sent[before:]
    assert texts(page, "user") == ["kept before", "the last words", "and on"]


def test_a_new_profile_with_the_same_device_id_shows_the_conversation(make_app, server):
    first = make_app(server)
    page = first.page
    first.pair_by_link()
    send_and_wait(first, "hello **there**", "echo: hello there")
    first.send("/approve rm -rf /tmp/cache")
    card = page.locator('.card:has(.card-command:text-is("rm -rf /tmp/cache"))')
    card.locator('button[data-option-id="deny"]').click()
    first.agent_text("denied: rm -rf /tmp/cache")
    first.send("/image")
    expect(page.locator("img.media-image")).to_have_count(1)
    first.send("/approve ls /srv")
    expect(page.locator('.card:has(.card-command:text-is("ls /srv"))')).to_have_attribute("data-state", "open")
    send_and_wait(first, "last one", "echo: last one")
    device = device_id(page)
    page.context.close()

    for size, name in (({"width": 1000, "height": 800}, "desktop"), ({"width": 390, "height": 844}, "phone")):
        fresh = same_device(make_app, server, device, viewport=size)
        p = fresh.page
        fresh.open()
        fresh.expect_online()
        fresh.agent_text("echo: last one")
        assert texts(p, "user") == ["hello **there**", "/approve rm -rf /tmp/cache", "/image", "/approve ls /srv", "last one"]
        shown = texts(p, "agent")
        assert shown[0] == "echo: hello there" and shown[-1] == "echo: last one", shown
        assert "denied: rm -rf /tmp/cache" in shown
        expect(p.locator('.msg[data-from="agent"] strong')).to_have_text("there")  # Markdown, as live
        closed = p.locator('.card:has(.card-command:text-is("rm -rf /tmp/cache"))')
        expect(closed).to_have_attribute("data-state", "done")
        expect(closed.locator(".card-result")).to_have_text("Deny")
        waiting = p.locator('.card:has(.card-command:text-is("ls /srv"))')
        expect(waiting).to_have_attribute("data-state", "open")
        expect(p.locator(".card")).to_have_count(2)
        # The image's bytes are not in `history`, its url is: fetched with the token (L63).
        expect(p.locator(".msg.has-media img.media-image")).to_have_count(1)
        p.wait_for_function("() => document.querySelector('.msg.has-media img.media-image')?.naturalWidth > 0")
        expect(p.locator(".msg.has-media .media-gone")).to_have_count(0)
        # Nothing twice, in the journal's order, and the user's own messages confirmed.
        p.wait_for_timeout(1000)
        expect(p.locator(ITEMS)).to_have_count(11)
        expect(p.locator('.msg[data-from="user"][data-final="false"]')).to_have_count(0)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        p.screenshot(path=str(SCREENSHOTS / f"journal-history-{name}.png"))
        p.evaluate("document.getElementById('messages').scrollTop = 0")
        p.screenshot(path=str(SCREENSHOTS / f"journal-history-{name}-top.png"))
        if name == "phone":
            # The card from history answers like any other.
            waiting.locator('button[data-option-id="once"]').click()
            fresh.agent_text("approved (once): ls /srv")
        p.context.close()


def test_scrolling_up_goes_on_through_the_journal(make_app, server):
    first = make_app(server)
    first.pair_by_link()
    n = 70  # 140 entries: more than the first page of 100
    for i in range(n):
        first.send(f"m{i:03}")
    first.agent_text(f"echo: m{n - 1:03}", timeout=30_000)
    device = device_id(first.page)
    first.page.context.close()

    fresh = same_device(make_app, server, device)
    page = fresh.page
    fresh.open()
    fresh.expect_online()
    fresh.agent_text(f"echo: m{n - 1:03}")
    expect(page.locator(ITEMS)).to_have_count(100)
    assert "m000" not in texts(page, "user")
    page.wait_for_function(
        """() => { const m = document.getElementById('messages'); m.scrollTop = 0;
        return [...m.querySelectorAll('.msg[data-from="user"] .msg-text')].some(e => e.textContent === 'm000'); }""",
        polling=200,
        timeout=20_000,
    )
    mine = texts(page, "user")
    assert mine == [f"m{i:03}" for i in range(n)], mine[:5]
    assert texts(page, "agent") == [f"echo: m{i:03}" for i in range(n)]
    history = [f for f in fresh.sent if f.get("t") == "history"]
    assert len(history) >= 2 and "before" in history[-1], history


def test_forget_asks_then_the_gateway_forgets_the_device(make_app, server):
    app = make_app(server)
    page = app.page
    app.pair_by_link()
    send_and_wait(app, "forget me", "echo: forget me")
    device = device_id(page)
    page.locator("#forget-button").click()
    dialog = page.locator("#forget-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Forget this device?")
    page.locator("#forget-cancel").click()
    expect(dialog).to_be_hidden()
    expect(page.locator(ITEMS)).to_have_count(2)
    page.locator("#forget-button").click()
    page.locator("#forget-confirm").click()
    expect(page.locator("#pair")).to_be_visible()
    expect(page.locator(ITEMS)).to_have_count(0)
    assert [f for f in app.sent if f.get("t") == "forget"], "forget was sent"
    expect(page.locator("#notice")).to_have_text("")
    page.context.close()

    # The gateway kept nothing for that device id: a page using it starts empty.
    fresh = same_device(make_app, server, device)
    fresh.open()
    fresh.expect_online()
    fresh.page.wait_for_timeout(1000)
    expect(fresh.page.locator(ITEMS)).to_have_count(0)
    assert [f for f in fresh.sent if f.get("t") == "history"], "it asked"


def test_a_reply_the_agent_is_still_writing_survives_a_reload(make_app, tmp_path_factory):
    """The page keeps the seq of every whole version of a reply, so it must keep the version
    too: the gateway sends the reply again only once it changes (L58). An agent on the link
    leaves a reply unfinished (a long tool call); the page is reloaded meanwhile."""
    sock = tmp_path_factory.mktemp("agent") / "agent.sock"
    gw = _start_gateway(extra_env={"MOBILE_AGENT": f"link:{sock}"})
    agent = AgentLink(str(sock))
    try:
        agent.send(t="hello", v=1, agent="journal-test")
        agent.wait_for("welcome")
        app = make_app(gw)
        page = app.page
        app.pair_by_link()
        device = agent.wait_for("device_online")["device"]
        agent.command("r1", t="reply", device=device, id="a-1", text="Let me check the logs", done=False)
        bubble = page.locator('#messages > .msg[data-from="agent"]')
        expect(bubble.locator(".msg-text")).to_have_text("Let me check the logs")
        page.wait_for_timeout(600)  # past the cache's 200 ms flush (history.js FLUSH_MS)
        page.reload()
        app.expect_online()
        expect(bubble).to_have_count(1)
        expect(bubble.locator(".msg-text")).to_have_text("Let me check the logs")
        expect(bubble).to_have_attribute("data-final", "false")
        # The final version replaces it in place.
        agent.command("r2", t="reply", device=device, id="a-1", text="Let me check the logs: all clear.", done=True)
        expect(bubble.locator(".msg-text")).to_have_text("Let me check the logs: all clear.")
        expect(bubble).to_have_count(1)
        expect(bubble).to_have_attribute("data-final", "true")
    finally:
        agent.close()
        gw.cleanup()


def test_an_open_card_older_than_the_first_window_is_shown_after_a_reload(make_app, tmp_path_factory):
    """A gateway with a journal does not send an open card again that the page has seen
    (L58): after a reload, a card older than the 100 newest cached items must still be there
    to answer, or the agent waits for nothing."""
    sock = tmp_path_factory.mktemp("agent") / "agent.sock"
    gw = _start_gateway(extra_env={"MOBILE_AGENT": f"link:{sock}"})
    agent = AgentLink(str(sock))
    try:
        agent.send(t="hello", v=1, agent="journal-test")
        agent.wait_for("welcome")
        app = make_app(gw)
        page = app.page
        app.pair_by_link()
        device = agent.wait_for("device_online")["device"]
        agent.command("p", t="open_prompt", device=device, prompt="old-card", kind="exec_approval",
                      command="make deploy", options=["once", "deny"], timeout_seconds=3600)
        card = page.locator('.card[data-prompt-id="old-card"]')
        expect(card).to_have_attribute("data-state", "open")
        for n in range(110):
            agent.command(f"r{n}", t="reply", device=device, id=f"a-{n}", text=f"note {n}", done=True)
        expect(page.locator('#messages > .msg[data-from="agent"] .msg-text').last).to_have_text("note 109")
        page.wait_for_timeout(600)  # past the cache's 200 ms flush (history.js FLUSH_MS)
        page.reload()
        app.expect_online()
        expect(page.locator('#messages > .msg[data-from="agent"] .msg-text').last).to_have_text("note 109")
        expect(card).to_have_count(1)
        expect(card).to_have_attribute("data-state", "open")
        card.locator('button.card-option[data-option-id="deny"]').click()
        agent.wait_for("prompt_answered", device=device, prompt="old-card", option="deny")
    finally:
        agent.close()
        gw.cleanup()
