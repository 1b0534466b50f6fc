"""Issue 26: pairing codes and the Devices panel in Chromium. A `#pair=` link from
`hermes-mobile pair`, opened in a fresh profile, pairs the browser with a token of its own
(the code kept nowhere) and chats; a reload stays paired; an owner page revokes it from the
Devices panel, and the first page shows "no access" at once and does not retry. A wrong or
spent code says so on the pairing screen; a link, or a code pasted alone, pasted into the
form pairs; a link never replaces a token in use unasked."""

import json
import re
import urllib.error
import urllib.request

from playwright.sync_api import expect

from conftest import SCREENSHOTS, TOKEN

WRONG_CODE = "AAAAAAAAAAAAAAAAAAAAAA"  # 22 base64url characters, as a code is
# Chromium logs every refused fetch as a console error; the page shows its own message.
REFUSED_FETCH = r"Failed to load resource: the server responded with a status of 4\d\d"


def pairing_link(gateway):
    """`hermes-mobile pair` against the running gateway: the link it prints, and its code."""
    out = gateway.cli("pair").stdout
    m = re.search(r"(\S+)#pair=([A-Za-z0-9_-]+)", out)
    assert m, f"no #pair= link in the output of `hermes-mobile pair`:\n{out}"
    assert m.group(1).rstrip("/") == gateway.base, (m.group(1), gateway.base)
    assert f"#token={TOKEN}" not in out, "the pairing link still carries the app token"
    return m.group(0), m.group(2)


def storage(page):
    return page.evaluate("() => Object.assign({}, localStorage)")


def hellos(app):
    return [f for f in app.sent if f.get("t") == "hello"]


def test_a_pairing_link_pairs_a_fresh_browser_until_an_owner_revokes_it(make_app, own_server):
    link, code = pairing_link(own_server)

    # (a) A fresh profile opens the link: paired with a token of its own, and chatting.
    phone = make_app(own_server)
    page = phone.page
    page.goto(link)
    phone.expect_online()
    assert page.url == own_server.base + "/", f"the fragment is still in the address bar: {page.url}"
    kept = storage(page)
    assert code not in json.dumps(kept), f"the code was kept: {kept}"
    token, device = kept.get("hermes.token"), kept.get("hermes.deviceId")
    assert token and token != TOKEN, kept
    assert device, kept
    hello = hellos(phone)[-1]
    assert hello["token"] == token and hello["device"]["id"] == device, hello
    assert hello["device"].get("platform") == "web", hello
    assert not [u for u in phone.requests if code in u], "the code went to the server in a URL"
    phone.send("hello")
    phone.agent_text("echo: hello")

    # (b) A reload: still paired, with the same token and device id.
    page.reload()
    phone.expect_online()
    assert storage(page).get("hermes.token") == token
    assert hellos(phone)[-1]["token"] == token and hellos(phone)[-1]["device"]["id"] == device
    phone.send("after the reload")
    phone.agent_text("echo: after the reload")

    # (c) An owner page (the shared token) lists the device and revokes it.
    owner = make_app(own_server)
    owner.pair_by_link()
    button = owner.page.locator("#devices-button")
    expect(button).to_be_visible()
    button.click()
    panel = owner.page.locator("#devices-panel")
    expect(panel).to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "true")
    row = panel.locator(f'li.device[data-device-id="{device}"]')
    expect(row).to_be_visible()
    expect(row.locator(".device-name")).to_contain_text("(web)")  # the page's own name for itself
    expect(row.locator(".device-id")).to_have_text(device)
    expect(row).to_contain_text("web")
    expect(row).to_contain_text("paired")
    expect(row.locator(".device-badge.online")).to_be_visible()
    expect(row.locator(".device-badge.owner")).to_have_count(0)
    expect(row.locator(".device-badge.self")).to_have_count(0)  # the owner page is another device
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    panel.screenshot(path=str(SCREENSHOTS / "devices-panel.png"))

    # Revoke asks first; "Keep it" keeps it.
    dialog = owner.page.locator("#revoke-dialog")
    row.locator(".device-revoke").click()
    expect(dialog).to_be_visible()
    expect(dialog.locator("#revoke-name")).to_contain_text("(web)")
    owner.page.locator("#revoke-cancel").click()
    expect(dialog).to_be_hidden()
    assert not [f for f in owner.sent if f.get("t") == "revoke"], owner.sent
    phone.expect_online()

    sockets = len(phone.sockets)
    row.locator(".device-revoke").click()
    expect(dialog).to_be_visible()
    owner.page.locator("#revoke-confirm").click()
    expect(dialog).to_be_hidden()
    revokes = [f for f in owner.sent if f.get("t") == "revoke"]
    assert len(revokes) == 1 and revokes[0]["device"] == device, revokes

    # The revoked page says "no access" within a few seconds, on the pairing screen.
    expect(page.locator("#status")).to_have_attribute("data-state", "noaccess", timeout=5_000)
    expect(page.locator("#pair")).to_be_visible()
    expect(page.locator("#pair-error")).to_contain_text(re.compile("no access", re.I))
    page.screenshot(path=str(SCREENSHOTS / "no-access.png"))
    # The owner's list no longer has it.
    expect(panel.locator(f'li.device[data-device-id="{device}"]')).to_have_count(0)
    expect(owner.page.locator("#devices-note")).to_contain_text("revoked")
    owner.expect_online()
    # No reconnecting with a token that is refused.
    page.wait_for_timeout(3000)
    assert len(phone.sockets) == sockets, phone.sockets

    # A reload tries the old token once, and is refused again.
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", "noaccess")
    expect(page.locator("#pair-error")).to_contain_text(re.compile("no access", re.I))


def test_a_wrong_or_spent_code_says_so_on_the_pairing_screen(make_app, own_server):
    app = make_app(own_server)
    app.allowed_console.append(REFUSED_FETCH)
    page = app.page
    page.goto(f"{own_server.base}/#pair={WRONG_CODE}")
    error = page.locator("#pair-error")
    expect(error).to_contain_text("This pairing code is wrong, used or expired")
    expect(page.locator("#pair")).to_be_visible()
    assert page.url == own_server.base + "/", page.url
    assert "hermes.token" not in storage(page)
    assert WRONG_CODE not in json.dumps(storage(page))
    assert app.sockets == [], app.sockets

    # A code spent by another device is refused the same way.
    link, code = pairing_link(own_server)
    body = json.dumps({"code": code, "device": {"name": "curl"}}).encode()
    req = urllib.request.Request(own_server.base + "/pair", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200
    page.goto("about:blank")
    page.goto(link)
    expect(error).to_contain_text("This pairing code is wrong, used or expired")
    assert "hermes.token" not in storage(page)

    # A pairing link pasted into the form pairs too.
    link, _ = pairing_link(own_server)
    page.locator("#token-input").fill(link)
    page.locator("#pair-button").click()
    app.expect_online()
    expect(error).to_be_hidden()
    assert storage(page).get("hermes.token") not in (None, TOKEN)

    # So does a code pasted alone (what `pair` prints when the gateway serves no page): it
    # is traded for a token, never kept or sent as one.
    _, code = pairing_link(own_server)
    bare = make_app(own_server)
    bare.page.goto(own_server.base + "/")
    bare.page.locator("#token-input").fill(code)
    bare.page.locator("#pair-button").click()
    bare.expect_online()
    kept = storage(bare.page)
    assert kept.get("hermes.token") not in (None, TOKEN, code), kept
    assert code not in json.dumps(kept), kept
    assert hellos(bare) and all(h["token"] != code for h in hellos(bare)), hellos(bare)


def test_a_pairing_link_asks_before_replacing_the_token_in_use(make_app, own_server):
    app = make_app(own_server)
    page = app.page
    app.pair_by_link()  # the owner, with the shared token
    link, code = pairing_link(own_server)
    page.evaluate(f"() => {{ location.hash = '#pair={code}'; }}")
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#token-dialog-code")).to_be_visible()
    assert "pair=" not in page.url
    page.locator("#token-keep").click()
    expect(dialog).to_be_hidden()
    assert storage(page).get("hermes.token") == TOKEN
    app.expect_online()
    assert code not in json.dumps(storage(page))

    # The code was not spent: it still pairs another browser.
    other = make_app(own_server)
    other.page.goto(link)
    other.expect_online()
    assert other.page.evaluate("() => localStorage.getItem('hermes.token')") not in (None, TOKEN)


def test_pair_refuses_a_wrong_code_over_http(own_server):
    # The exchange as the page makes it, without a browser: 403 and no-store.
    body = json.dumps({"code": WRONG_CODE, "device": {"id": "web-0000000000000000"}}).encode()
    req = urllib.request.Request(own_server.base + "/pair", data=body, headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=5)
        raise AssertionError("a wrong code was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 403, e.code
        assert json.loads(e.read()) == {"error": "forbidden"}
        assert "no-store" in (e.headers.get("Cache-Control") or "")
