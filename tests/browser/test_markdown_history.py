"""Issue 18, sections 5 and 6: agent text rendered as Markdown (markdown.js, vendored
markdown-it) with raw HTML kept inert, and the chat's history on the device (history.js,
IndexedDB): restored before the socket is back, never shown twice, cleared by Forget, and a
page that keeps at most 300 items while older ones load on scroll."""

import mimetypes
import os
import re
import urllib.request
from pathlib import Path

from playwright.sync_api import expect

from conftest import ROOT, without_journal

WEB = Path(os.environ.get("WEB_DIR") or ROOT / "web").resolve()  # WEB_DIR=web is relative
ITEMS = "#messages > .msg, #messages > .card"
# History writes are batched (history.js flushes 200 ms after the last one): a reload
# sooner than this could lose the last item, which is not what these tests are about.
FLUSH_WAIT_MS = 600

# Counts the bubbles and cards in the page at the moment #status first says online, from a
# script that runs before the page's own (Playwright's init scripts ignore the CSP).
SEEN_AT_READY_JS = """
window.__atReady = null;
new MutationObserver(() => {
  const s = document.getElementById('status');
  if (window.__atReady === null && s && s.dataset.state === 'online')
    window.__atReady = document.querySelectorAll('#messages > .msg, #messages > .card').length;
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def final_agent(page, text):
    loc = page.locator('.msg[data-from="agent"][data-final="true"]').filter(has_text=text)
    expect(loc).to_have_count(1)
    return loc


def texts(page, who):
    return page.eval_on_selector_all(
        f'#messages > .msg[data-from="{who}"] .msg-text', "els => els.map(e => e.textContent)"
    )


def send_and_wait(app, text, reply):
    app.send(text)
    app.agent_text(reply)
    expect(app.page.locator('.msg[data-from="user"]').filter(has_text=text).last).to_have_attribute("data-final", "true")


def reconnect_now(page):
    """Presses "Retry now" whenever it shows, until the page is online (instead of waiting
    out the backoff, which may be up to 15 s)."""
    page.wait_for_function(
        """() => { const b = document.getElementById('retry-button'); if (b && !b.hidden) b.click();
        return document.getElementById('status').dataset.state === 'online'; }""",
        polling=250,
        timeout=30_000,
    )


# -- Markdown --------------------------------------------------------------------------

MARKDOWN = """**bold** _it_ `code`

# Title

- one
- two

1. first
2. second

> quoted

```py
print("hi")
```

| a | b |
|---|--:|
| 1 | 2 |

[site](https://example.org/) and https://example.com/x"""


def test_agent_markdown_renders(make_app, server):
    app = make_app(server, permissions=["clipboard-read", "clipboard-write"])
    page = app.page
    app.pair_by_link()
    app.send(MARKDOWN)
    bubble = final_agent(page, "echo:")
    body = bubble.locator(".msg-text")
    expect(body.locator("p").first).to_have_text("echo: bold it code")
    expect(body.locator("strong")).to_have_text("bold")
    expect(body.locator("em")).to_have_text("it")
    expect(body.locator("p code")).to_have_text("code")
    expect(body.locator("h1")).to_have_text("Title")
    expect(body.locator("ul > li")).to_have_text(["one", "two"])
    expect(body.locator("ol > li")).to_have_text(["first", "second"])
    expect(body.locator("blockquote")).to_have_text("quoted")
    expect(body.locator(".code-block pre code")).to_have_text('print("hi")')
    expect(body.locator("th")).to_have_text(["a", "b"])
    expect(body.locator("td")).to_have_text(["1", "2"])
    expect(body.locator("td").nth(1)).to_have_class(re.compile(r"\balign-right\b"))
    for href in ("https://example.org/", "https://example.com/x"):
        a = body.locator(f'a[href="{href}"]')
        expect(a).to_have_count(1)
        expect(a).to_have_attribute("target", "_blank")
        rel = a.get_attribute("rel").split()
        assert "noopener" in rel and "noreferrer" in rel, rel
    # The copy button has a name and copies the code as it is.
    copy = bubble.get_by_role("button", name="Copy code")
    expect(copy).to_have_count(1)
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == 'print("hi")'
    # The user's own text stays plain: the same characters, no Markdown elements.
    mine = page.locator('.msg[data-from="user"] .msg-text')
    assert mine.evaluate("e => e.textContent") == MARKDOWN
    expect(mine.locator("strong, em, code, h1, table, a")).to_have_count(0)


def test_streamed_markdown_rerenders_the_bubble(app):
    page = app.page
    app.pair_by_link()
    app.send("/stream **a** b `c` d")
    bubble = page.locator('.msg[data-from="agent"]')
    expect(page.locator('.msg[data-from="agent"][data-final="true"]')).to_have_count(1, timeout=15_000)
    expect(bubble).to_have_count(1)
    expect(bubble.locator("strong")).to_have_text("a")
    expect(bubble.locator(".msg-text code")).to_have_text("c")
    expect(bubble.locator(".msg-text")).to_have_text("a b c d")


XSS = [
    "<img src=x onerror=\"window.__xss='img'\">",
    "<script>window.__xss='script'</script>",
    "[x](javascript:window.__xss='md-link')",
    "[y](JaVaScRiPt:alert(1)) [z](vbscript:alert(1)) [d](data:text/html,<b>x</b>)",
    "<a href=\"javascript:window.__xss='a'\">click</a>",
    "<svg onload=\"window.__xss='svg'\"><circle r=9></circle></svg>",
    "`<img src=x onerror=\"window.__xss='code'\">`",
    "![pic](x onerror=alert(1)) <javascript:alert(1)> <iframe src=\"/\"></iframe>",
]


def test_raw_html_in_agent_text_stays_inert(app):
    page = app.page
    app.pair_by_link()
    for i, payload in enumerate(XSS):
        app.send(payload)
        expect(page.locator('.msg[data-from="agent"][data-final="true"]')).to_have_count(i + 1)
    box = page.locator("#messages")
    # Nothing from raw HTML became an element; the payloads are there as text.
    expect(box.locator("img, script, svg:not(.icon), iframe, object, embed, circle, b")).to_have_count(0)
    shown = " ".join(texts(page, "agent"))
    assert "<script>window.__xss='script'</script>" in shown, shown
    assert "onerror" in shown and "<svg" in shown
    # The onerror inside a code span is code, shown as such.
    expect(box.locator('.msg[data-from="agent"] code').filter(has_text="onerror")).to_have_count(1)
    # No link points anywhere but http(s)/mailto; the javascript: ones are plain text.
    hrefs = page.eval_on_selector_all("#messages a", "els => els.map(a => a.getAttribute('href'))")
    assert all(re.match(r"^(https?|mailto):", h or "") for h in hrefs), hrefs
    assert "[x](javascript:window.__xss='md-link')" in shown
    page.wait_for_timeout(300)
    assert page.evaluate("window.__xss") is None
    assert app.dialogs == []
    assert not [u for u in app.requests if u.endswith("/x")], "the page tried to load an <img>"


# -- history ---------------------------------------------------------------------------


def test_history_survives_a_reload_without_doubles(app):
    page = app.page
    page.add_init_script(SEEN_AT_READY_JS)
    app.pair_by_link()
    send_and_wait(app, "first", "echo: first")
    send_and_wait(app, "**second**", "echo: second")
    app.send("/image")
    expect(page.locator("img.media-image")).to_have_count(1)
    page.wait_for_timeout(FLUSH_WAIT_MS)
    before = page.locator(ITEMS).count()
    assert before == 6, texts(page, "agent")  # three user bubbles, two echoes, the image

    page.reload()
    # Everything was on the page before `ready`, Markdown and image included.
    app.expect_online()
    assert page.evaluate("window.__atReady") == before
    page.wait_for_timeout(1500)  # a second copy from the gateway would have come by now
    expect(page.locator(ITEMS)).to_have_count(before)
    assert texts(page, "user") == ["first", "**second**", "/image"]
    assert texts(page, "agent")[:2] == ["echo: first", "echo: second"]
    expect(page.locator('.msg[data-from="agent"] strong')).to_have_text("second")
    page.wait_for_function(
        "() => { const i = document.querySelector('img.media-image'); return i && i.complete && i.naturalWidth > 0; }"
    )
    assert (page.locator("img.media-image").get_attribute("src") or "").startswith("blob:")

    # New messages after the reload go on after the restored ones.
    send_and_wait(app, "third", "echo: third")
    assert texts(page, "user") == ["first", "**second**", "/image", "third"]


def test_reply_streamed_across_a_reload_is_one_bubble(app):
    page = app.page
    app.pair_by_link()
    words = " ".join(f"w{i}" for i in range(12))
    app.send("/stream " + words)
    expect(page.locator('.msg[data-from="agent"][data-final="false"]')).to_have_count(1)
    page.reload()
    app.expect_online()
    app.agent_text(words, timeout=15_000)
    page.wait_for_timeout(FLUSH_WAIT_MS)
    page.reload()
    app.expect_online()
    page.wait_for_timeout(1000)
    assert texts(page, "agent") == [words]


def serve_from_files(context, headers):
    """While the gateway is down, the page's files come from the checkout, as a service
    worker or the HTTP cache would give them; the WebSocket still finds nobody."""

    def handle(route):
        path = urllib.request.urlparse(route.request.url).path
        rel = "index.html" if path == "/" else path.lstrip("/") + ("index.html" if path.endswith("/") else "")
        f = WEB / rel
        if not f.is_file() or WEB not in f.resolve().parents:
            return route.fulfill(status=404, body="")
        kind = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
        kind = {"application/manifest+json": kind}.get(kind, kind)
        if f.suffix == ".js":
            kind = "text/javascript"
        route.fulfill(status=200, body=f.read_bytes(), headers={**headers, "Content-Type": kind})

    context.route("http://127.0.0.1:*/**", handle)


def test_offline_start_shows_history(make_app, own_server):
    gw = own_server
    app = make_app(gw)
    page = app.page
    app.allowed_console.append(rf"WebSocket connection to 'ws://127\.0\.0\.1:{gw.port}/ws' failed")
    app.pair_by_link()
    send_and_wait(app, "said before the outage", "echo: said before the outage")
    page.wait_for_timeout(FLUSH_WAIT_MS)
    with urllib.request.urlopen(gw.base + "/") as r:
        csp = {"Content-Security-Policy": r.headers["Content-Security-Policy"]}

    gw.stop()
    serve_from_files(page.context, csp)
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", re.compile("offline|connecting"))
    app.agent_text("echo: said before the outage")
    assert texts(page, "user") == ["said before the outage"]
    expect(page.locator("#pair")).to_be_hidden()
    expect(page.locator("#status")).not_to_have_attribute("data-state", "online")

    page.context.unroute_all()
    gw.start()
    reconnect_now(page)
    send_and_wait(app, "back again", "echo: back again")
    assert texts(page, "agent") == ["echo: said before the outage", "echo: back again"]


def test_cards_from_history_are_closed_until_sent_open(app):
    """Without a journal (L56): the gateway sends open cards again after `ready` (H5), so the
    page cannot tell one still open from one that closed while it was away."""
    page = app.page
    gate = {"open": True}
    without_journal(page, gate)
    app.pair_by_link()
    app.send("/approve rm answered")
    answered = page.locator('.card:has(.card-command:text-is("rm answered"))')
    answered.locator('button[data-option-id="deny"]').click()
    app.agent_text("denied: rm answered")
    app.send("/approve rm waiting")
    waiting = page.locator('.card:has(.card-command:text-is("rm waiting"))')
    expect(waiting).to_have_attribute("data-state", "open")
    page.wait_for_timeout(FLUSH_WAIT_MS)

    # The socket reaches nobody for now: what shows is history alone.
    gate["open"] = False
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", re.compile("offline|connecting"))
    expect(answered).to_have_attribute("data-state", "done")
    expect(answered.locator(".card-result")).to_contain_text("Deny")
    expect(waiting).to_have_attribute("data-state", "closed")
    expect(waiting.locator(".card-result")).to_have_text("closed")
    for card in (answered, waiting):
        buttons = card.locator("button.card-option")
        expect(buttons).to_have_count(4)
        for i in range(4):
            expect(buttons.nth(i)).to_be_disabled()

    # After `ready` the gateway sends the open card again: it takes the closed one's place.
    gate["open"] = True
    reconnect_now(page)
    expect(waiting).to_have_attribute("data-state", "open")
    expect(page.locator(".card")).to_have_count(2)
    assert page.locator("#messages > *").last.get_attribute("data-prompt-id") == waiting.get_attribute("data-prompt-id")
    waiting.locator('button[data-option-id="once"]').click()
    app.agent_text("approved (once): rm waiting")


def test_forget_clears_the_history(app):
    page = app.page
    app.pair_by_link()
    send_and_wait(app, "a secret", "echo: a secret")
    page.wait_for_timeout(FLUSH_WAIT_MS)
    names = page.evaluate("indexedDB.databases().then(ds => ds.map(d => d.name))")
    assert [n for n in names if n.startswith("hermes-history-")], names
    page.locator("#forget-button").click()
    page.locator("#forget-confirm").click()
    expect(page.locator("#pair")).to_be_visible()
    expect(page.locator(ITEMS)).to_have_count(0)
    page.wait_for_function(
        "() => indexedDB.databases().then(ds => !ds.some(d => d.name.startsWith('hermes-history-')))"
    )
    app.pair_by_link()
    page.reload()
    app.expect_online()
    page.wait_for_timeout(500)
    expect(page.locator(ITEMS)).to_have_count(0)


def test_page_keeps_300_items_and_loads_older_on_scroll(app):
    page = app.page
    app.pair_by_link()
    page.evaluate(
        """() => { window.__max = 0; const m = document.getElementById('messages');
        new MutationObserver(() => { window.__max = Math.max(window.__max, m.childElementCount); })
        .observe(m, {childList: true}); }"""
    )
    n = 170  # 340 bubbles: user texts and their echoes
    for i in range(n):
        app.send(f"m{i:03}")
    app.agent_text(f"echo: m{n - 1:03}", timeout=30_000)
    expect(page.locator(ITEMS)).to_have_count(300)
    assert texts(page, "user")[0] != "m000"

    # Scrolled to the top, the oldest come back from IndexedDB, a page at a time.
    page.wait_for_function(
        """() => { const m = document.getElementById('messages'); m.scrollTop = 0;
        return [...m.querySelectorAll('.msg[data-from="user"] .msg-text')].some(e => e.textContent === 'm000'); }""",
        polling=150,
        timeout=20_000,
    )
    assert page.evaluate("window.__max") <= 300
    assert page.locator(ITEMS).count() <= 300
    # And scrolled back down, the newest again; nothing was shown twice on the way.
    page.wait_for_function(
        f"""() => {{ const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight;
        return [...m.querySelectorAll('.msg[data-from="agent"] .msg-text')].some(e => e.textContent === 'echo: m{n - 1:03}'); }}""",
        polling=150,
        timeout=20_000,
    )
    assert page.evaluate("window.__max") <= 300
    mine = texts(page, "user")
    assert len(mine) == len(set(mine)) and mine == sorted(mine), mine[:5]
    assert mine[-1] == f"m{n - 1:03}"


def test_chat_works_when_indexeddb_fails(app):
    page = app.page
    # As in a private mode that refuses storage: every open fails.
    page.add_init_script(
        """Object.defineProperty(window, 'indexedDB', { configurable: true,
        get: () => ({ open() { throw new DOMException('storage refused', 'InvalidStateError'); },
                      deleteDatabase() { throw new DOMException('storage refused', 'InvalidStateError'); } }) });"""
    )
    app.pair_by_link()
    send_and_wait(app, "still **here**", "echo: still here")
    expect(page.locator('.msg[data-from="agent"] strong')).to_have_text("here")
    warnings = [c for c in app.console if c[0] == "warning" and "history" in c[1].lower()]
    assert len(warnings) == 1, app.console
    # Nothing on the device: the gateway's journal fills the view (issue 24).
    page.reload()
    app.expect_online()
    app.agent_text("echo: still here")
    assert texts(page, "user") == ["still **here**"]
    page.locator("#forget-button").click()
    page.locator("#forget-confirm").click()
    expect(page.locator("#pair")).to_be_visible()
