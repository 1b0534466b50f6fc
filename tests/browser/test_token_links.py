"""Issue 23, finding 6: a link in an agent's reply cannot replace the page's stored token.
Markdown links to the page's own #token= / #pair= fragment are text, not links; a #token=
reached from inside the chat (hashchange), or a fresh page opened with one while another
token is stored, asks first; a browser with no token stored still pairs from the link."""

import re

from playwright.sync_api import expect

from conftest import TOKEN

ATTACKER = "attacker-token-0123456789"
OTHER = "other-token-0123456789abcdef"


def stored_token(page):
    return page.evaluate("() => localStorage.getItem('hermes.token')")


def hellos(app):
    return [f.get("token") for f in app.sent if f.get("t") == "hello"]


def test_markdown_links_to_the_pages_token_fragment_are_text(app):
    page = app.page
    app.pair_by_link()
    base = app.gateway.base
    links = [
        f"[plain](/#token={ATTACKER})",
        f"[bare](#token={ATTACKER})",
        f"[dot](./#token={ATTACKER})",
        f"[full]({base}/#a=1&ToKeN={ATTACKER})",
        f"[pair](/#pair={ATTACKER})",
        f"[query](/?x=1#token={ATTACKER})",
        f"[encoded](/#%74oken={ATTACKER})",
        f"![img](/#token={ATTACKER})",
        f"<{base}/#token={ATTACKER}>",
        f"[elsewhere](https://example.org/#token={ATTACKER})",  # another site: a link as ever
        "[card](/#card=p-1)",  # this page without a token: a link as ever
    ]
    app.send("see " + " ".join(links))
    bubble = page.locator('.msg[data-from="agent"][data-final="true"] .msg-text').filter(has_text="echo: see")
    expect(bubble).to_have_count(1)
    for word in ("plain", "bare", "dot", "full", "pair", "query", "encoded", "img", "elsewhere", "card"):
        expect(bubble).to_contain_text(word)
    hrefs = bubble.locator("a").evaluate_all("as => as.map((a) => a.href)")
    assert hrefs == [f"https://example.org/#token={ATTACKER}", f"{base}/#card=p-1"], hrefs
    expect(bubble).to_contain_text(f"{base}/#token={ATTACKER}")  # the autolink, as text
    assert stored_token(page) == TOKEN


def test_a_token_fragment_from_inside_the_chat_asks_first(app):
    page = app.page
    app.pair_by_link()
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_hidden()

    # A link followed in this tab: the dialog asks, "Keep" keeps the owner's token.
    page.evaluate(f"() => {{ location.hash = '#token={OTHER}'; }}")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Replace this browser's token?")
    assert "token" not in page.url  # out of the address bar at once, whatever the answer
    page.locator("#token-keep").click()
    expect(dialog).to_be_hidden()
    assert stored_token(page) == TOKEN
    app.expect_online()

    # Esc is "keep" too.
    page.evaluate(f"() => {{ location.hash = '#a=1&token={OTHER}'; }}")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert stored_token(page) == TOKEN

    # The same token as the stored one: nothing to ask.
    page.evaluate(f"() => {{ location.hash = '#token={TOKEN}'; }}")
    page.wait_for_timeout(300)
    expect(dialog).to_be_hidden()

    # A fresh page opened with another token (a link from a reply opens a new tab) asks too,
    # while the chat goes on with the owner's token.
    page.goto("about:blank")
    page.goto(f"{app.gateway.base}/#token={OTHER}")
    expect(dialog).to_be_visible()
    app.expect_online()
    page.locator("#token-keep").click()
    assert stored_token(page) == TOKEN
    assert OTHER not in hellos(app), hellos(app)

    # Only "Use the new token" replaces it.
    page.evaluate(f"() => {{ location.hash = '#token={OTHER}'; }}")
    expect(dialog).to_be_visible()
    page.locator("#token-replace").click()
    expect(dialog).to_be_hidden()
    assert stored_token(page) == OTHER
    expect(page.locator("#status")).to_have_attribute("data-state", "noaccess")  # the gateway knows it not
    assert hellos(app)[-1] == OTHER


def test_with_no_token_stored_a_link_pairs_at_once(make_app, server):
    # The pairing link of `hermes-mobile pair`, opened fresh.
    app = make_app(server)
    app.pair_by_link()
    expect(app.page.locator("#token-dialog")).to_be_hidden()
    assert stored_token(app.page) == TOKEN

    # A link reached on the pairing screen (nothing stored yet) pairs as well.
    other = make_app(server)
    page = other.page
    other.open()
    expect(page.locator("#pair")).to_be_visible()
    page.evaluate(f"() => {{ location.hash = '#token={TOKEN}'; }}")
    other.expect_online()
    expect(page.locator("#token-dialog")).to_be_hidden()
    assert stored_token(page) == TOKEN
    assert re.fullmatch(re.escape(server.base) + "/?", page.url), page.url
