"""The web client (issue 10) in real headless Chromium against the real release gateway and
its demo agent (shared/spec/demo-agent.md). The DOM hooks are the web client's contract:
ids, classes and data attributes, never layout or wording beyond what a test names."""

import base64
import hashlib
import random
import re
import struct
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import RECORDER_JS, ROOT, SCREENSHOTS, TOKEN

MIB = 1024 * 1024


def agent_bubbles(page):
    return page.locator('.msg[data-from="agent"]')


def user_bubbles(page):
    return page.locator('.msg[data-from="user"]')


def make_file(path, size, seed):
    rnd = random.Random(seed)
    data = rnd.randbytes(size)
    path.write_bytes(data)
    return data


# -- pairing ---------------------------------------------------------------------------


def test_pair_by_link(app):
    page = app.page
    page.goto(app.gateway.pair_url)
    app.expect_online()
    expect(page.locator("#pair")).to_be_hidden()
    expect(page.locator("#status")).to_contain_text(re.compile("online", re.I))
    # The fragment is read, then removed from the address bar.
    assert page.evaluate("location.hash") == ""
    assert TOKEN not in page.url and "token" not in page.url
    storage = page.evaluate("JSON.stringify(Object.assign({}, localStorage))")
    assert TOKEN in storage, f"the token is not kept in localStorage: {storage}"
    # hello carries the token and a generated web-<random> device id, kept in localStorage.
    hellos = [f for f in app.sent if f.get("t") == "hello"]
    assert len(hellos) == 1, app.sent
    assert hellos[0].get("token") == TOKEN
    device = (hellos[0].get("device") or {}).get("id", "")
    assert device.startswith("web-") and len(device) > len("web-"), hellos[0]
    assert device in storage, "the device id is not kept in localStorage"
    # The token never went to the server in a URL.
    assert not [u for u in app.requests if TOKEN in u]


def test_pair_by_typing_the_token(app):
    page = app.page
    app.open()
    expect(page.locator("#pair")).to_be_visible()
    # A pasted link with a broken %-escape is refused in the page (no exception).
    page.locator("#token-input").fill(f"{app.gateway.base}/#token=%E0%A4%A")
    page.locator("#pair-button").click()
    expect(page.locator("#pair-error")).to_be_visible()
    expect(page.locator("#pair-error")).to_have_text("That link is not valid")
    expect(page.locator("#pair")).to_be_visible()
    assert app.errors == [] and app.sockets == [], (app.errors, app.sockets)
    page.locator("#token-input").fill(TOKEN)
    page.locator("#pair-button").click()
    app.expect_online()
    expect(page.locator("#pair")).to_be_hidden()
    storage = page.evaluate("JSON.stringify(Object.assign({}, localStorage))")
    assert TOKEN in storage
    # A reload stays paired (the token is remembered).
    page.reload()
    app.expect_online()
    expect(page.locator("#pair")).to_be_hidden()


def test_forget_this_device(app):
    page = app.page
    app.pair_by_link()
    # It asks first; keeping everything changes nothing.
    page.locator("#forget-button").click()
    expect(page.locator("#forget-dialog")).to_be_visible()
    page.locator("#forget-cancel").click()
    expect(page.locator("#forget-dialog")).to_be_hidden()
    expect(page.locator("#pair")).to_be_hidden()
    app.expect_online()
    page.locator("#forget-button").click()
    page.locator("#forget-confirm").click()
    expect(page.locator("#pair")).to_be_visible()
    storage = page.evaluate("JSON.stringify(Object.assign({}, localStorage))")
    assert TOKEN not in storage and "web-" not in storage, storage


# -- chat ------------------------------------------------------------------------------


def test_text_turn_and_avatar_states(app):
    page = app.page
    app.pair_by_link()
    expect(page.locator("#avatar-state")).to_have_attribute("data-state", "idle")
    page.evaluate(RECORDER_JS)
    app.send("hi")
    expect(user_bubbles(page).filter(has_text="hi")).to_have_count(1)
    app.agent_text("echo: hi")
    t_reply = page.evaluate("performance.now()")
    expect(page.locator("#avatar-state")).to_have_attribute("data-state", "idle", timeout=8_000)
    t_idle = page.evaluate("performance.now()")
    states = [s for s, _ in page.evaluate("window.__rec.avatar")]
    # idle (start) → thinking → speaking → idle, in this order.
    assert states[:1] == ["idle"] and "thinking" in states and "speaking" in states, states
    i_thinking = states.index("thinking")
    i_speaking = states.index("speaking", i_thinking)
    assert "idle" in states[i_speaking:], states
    # The gateway sends idle about 3 s after the turn.
    assert 1.5 <= (t_idle - t_reply) / 1000 <= 6, f"idle came {(t_idle - t_reply) / 1000:.1f} s after the reply"
    expect(page.locator("#typing")).to_be_hidden()


def test_stream_grows_one_bubble_in_place(app):
    page = app.page
    app.pair_by_link()
    page.evaluate(RECORDER_JS)
    app.send("/stream a b c d")
    app.agent_text("a b c d")
    expect(agent_bubbles(page)).to_have_count(1)
    versions = page.evaluate("window.__rec.versions")
    ids = [k for k, v in versions.items() if v]
    assert len(ids) == 1, f"more than one agent bubble id: {versions}"
    texts = [t for t, _ in versions[ids[0]]]
    assert len(texts) >= 2, f"the bubble never grew, only {texts}"
    assert texts[-1] == "a b c d"
    for earlier in texts[:-1]:
        assert "a b c d".startswith(earlier.strip()), texts
    assert page.locator('.msg[data-from="agent"]').get_attribute("data-id") == ids[0]


def test_long_reply_joined_into_one_bubble(app):
    page = app.page
    app.pair_by_link()
    app.send("/long 20000")
    bubble = page.locator('.msg[data-from="agent"][data-final="true"]')
    expect(bubble).to_have_count(1, timeout=15_000)
    expect(agent_bubbles(page)).to_have_count(1)
    text = bubble.locator(".msg-text").evaluate("e => e.textContent")
    expected = ("0123456789\n" * (20000 // 11 + 1))[:20000]
    assert len(text) == 20000, f"{len(text)} characters"
    assert text == expected


def test_composer_keys_and_length_limit(app):
    page = app.page
    app.pair_by_link()
    composer, send = page.locator("#composer"), page.locator("#send-button")
    expect(send).to_be_disabled()
    composer.fill("line one")
    expect(send).to_be_enabled()
    composer.press("Shift+Enter")
    composer.press_sequentially("line two")
    expect(composer).to_have_value("line one\nline two")
    expect(user_bubbles(page)).to_have_count(0)
    # G1: 12000 characters counted as Unicode scalar values (an emoji is 2 UTF-16 units).
    composer.fill("\U0001F600" * 12000)
    expect(send).to_be_enabled()
    composer.fill("\U0001F600" * 12001)
    expect(send).to_be_disabled()
    composer.fill("line one\nline two")
    composer.press("Enter")
    app.agent_text("echo: line one\nline two")


def test_agent_html_is_shown_as_text(app):
    page = app.page
    app.pair_by_link()
    evil = "<img src=x onerror=alert(1)>"
    app.send(evil)
    bubble = app.agent_text("echo: " + evil)
    expect(bubble).to_have_text("echo: " + evil)
    assert page.locator("#messages img").count() == 0
    assert page.locator('.msg[data-from="agent"] img, .msg[data-from="user"] img').count() == 0
    page.wait_for_timeout(300)
    assert app.dialogs == []
    assert not [u for u in app.requests if u.endswith("/x")], "the page tried to load the <img>"


# -- cards -----------------------------------------------------------------------------


def test_exec_approval_denied(app):
    page = app.page
    app.pair_by_link()
    app.send("/approve rm -rf /tmp/x")
    card = page.locator('.card[data-kind="exec_approval"]')
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-state", "open")
    expect(card.locator(".card-command")).to_have_text("rm -rf /tmp/x")
    assert card.locator(".card-command").evaluate("e => e.tagName") == "PRE"
    expect(card.locator(".card-description")).to_have_text("demo approval")
    options = card.locator("button.card-option")
    expect(options).to_have_count(4)
    assert [options.nth(i).get_attribute("data-option-id") for i in range(4)] == ["once", "session", "always", "deny"]
    deny = card.locator('button.card-option[data-option-id="deny"]')
    expect(deny).to_have_class(re.compile(r"\bdanger\b"))
    expect(card.locator('button.card-option[data-option-id="once"]')).to_have_class(re.compile(r"\bprimary\b"))
    expect(card.locator(".card-countdown")).to_have_text(re.compile(r"\d"))
    deny.click()
    expect(card).to_have_attribute("data-state", "done")
    expect(card.locator(".card-result")).to_contain_text("Deny")
    for i in range(4):
        expect(options.nth(i)).to_be_disabled()
    app.agent_text("denied: rm -rf /tmp/x")
    prompts = [f for f in app.sent if f.get("t") == "prompt"]
    assert len(prompts) == 1 and prompts[0].get("option_id") == "deny", prompts


def test_clarify_other_with_typed_text(app):
    page = app.page
    app.pair_by_link()
    app.send("/ask Colour? | red | blue")
    card = page.locator('.card[data-kind="clarify"]')
    expect(card).to_have_count(1)
    expect(card.locator(".card-text")).to_have_text("Colour?")
    options = card.locator("button.card-option")
    expect(options).to_have_count(3)
    expect(card.locator('button.card-option[data-option-id="c0"]')).to_have_text("red")
    expect(card.locator('button.card-option[data-option-id="c1"]')).to_have_text("blue")
    card.locator('button.card-option[data-option-id="other"]').click()
    other = card.locator(".card-other-input")
    expect(other).to_be_visible()
    other.fill("teal, please")
    card.locator(".card-other-send").click()
    app.agent_text("you said: teal, please")
    expect(card).to_have_attribute("data-state", "done")
    for i in range(3):
        expect(options.nth(i)).to_be_disabled()


def test_card_expires_in_the_page(app):
    page = app.page
    app.pair_by_link()
    app.send("/ttl 2 /confirm x")
    card = page.locator(".card")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-state", "open")
    expect(card.locator(".card-command")).to_have_text("/confirm x")
    expect(card.locator(".card-countdown")).to_have_text(re.compile(r"\b[0-2]\b"))
    expect(card).to_have_attribute("data-state", "expired", timeout=8_000)
    expect(card.locator(".card-result")).to_contain_text(re.compile("expired", re.I))
    options = card.locator("button.card-option")
    assert options.count() == 4
    for i in range(options.count()):
        expect(options.nth(i)).to_be_disabled()
    app.agent_text("expired: /confirm x")


# -- files -----------------------------------------------------------------------------


def test_upload_5mib_and_download_it_back(app, tmp_path):
    page = app.page
    app.pair_by_link()
    path = tmp_path / "five.bin"
    data = make_file(path, 5 * MIB, seed=5)
    # Record every progress value the page shows.
    page.evaluate(
        """() => { window.__progress = [];
        new MutationObserver(() => { for (const p of document.querySelectorAll('.upload progress'))
          window.__progress.push(p.value); })
        .observe(document.body, {subtree: true, childList: true, attributes: true}); }"""
    )
    page.locator("#file-input").set_input_files(str(path))
    upload = page.locator('.upload[data-name="five.bin"]')
    expect(upload).to_have_count(1)
    expect(upload).to_have_attribute("data-state", "done", timeout=30_000)
    assert upload.locator("progress").evaluate("p => p.value") == 100
    assert upload.locator("progress").get_attribute("max") == "100"
    # The bar moved through the upload (512 KiB parts: many steps) and never went back.
    progress = page.evaluate("window.__progress")
    assert [v for v in progress if 0 < v < 100], f"no value between 0 and 100: {progress}"
    assert all(a <= b for a, b in zip(progress, progress[1:])), f"the progress went back: {progress}"
    app.agent_text(f"got document five.bin ({5 * MIB} bytes, application/octet-stream)", timeout=30_000)
    link = page.locator('.msg[data-from="agent"] a.media-download')
    expect(link).to_have_count(1, timeout=30_000)
    assert link.get_attribute("download") == "five.bin"
    assert (link.get_attribute("href") or "").startswith("blob:")
    expect(link).to_contain_text("five.bin")
    # The bytes that come back are the bytes that went up. Saved as the user would (a fetch
    # of the blob: URL from the page would be blocked by connect-src and log a CSP error).
    with page.expect_download() as dl:
        link.click()
    got = Path(dl.value.path()).read_bytes()
    assert len(got) == len(data)
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
    media = [f for f in app.sent if f.get("t") == "media"]
    assert media and all(f.get("kind") == "document" for f in media)
    # Sent in 512 KiB parts (one WebSocket frame each), all under one id.
    assert len(media) == 10 and {f.get("parts") for f in media} == {10}, [(f.get("part"), f.get("parts")) for f in media]
    assert sorted(f.get("part") for f in media) == list(range(10))
    assert len({f.get("id") for f in media}) == 1
    assert all(len(base64.b64decode(f["data"])) <= 512 * 1024 for f in media)


def test_image_shown_inline(app):
    page = app.page
    app.pair_by_link()
    app.send("/image")
    img = page.locator('.msg[data-from="agent"] img.media-image')
    expect(img).to_have_count(1)
    assert (img.get_attribute("src") or "").startswith("blob:")
    page.wait_for_function(
        "() => { const i = document.querySelector('img.media-image'); return i && i.complete && i.naturalWidth > 0; }",
        timeout=10_000,
    )


def test_file_over_8mib_refused_in_the_page(app, tmp_path):
    page = app.page
    app.pair_by_link()
    path = tmp_path / "nine.bin"
    make_file(path, 9 * MIB, seed=9)
    before = app.gateway.healthz()
    page.locator("#file-input").set_input_files(str(path))
    notice = page.locator("#notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text(re.compile(r"8\s*MiB|too (big|large)", re.I))
    page.wait_for_timeout(1000)
    assert [f for f in app.sent if f.get("t") == "media"] == [], "a media frame was sent"
    expect(user_bubbles(page)).to_have_count(0)
    expect(page.locator('.upload[data-state="sending"], .upload[data-state="done"]')).to_have_count(0)
    after = app.gateway.healthz()
    assert after["upload_bytes"] == before["upload_bytes"] == 0


# -- voice -----------------------------------------------------------------------------


def test_voice_with_the_fake_microphone(app):
    page = app.page
    app.pair_by_link()
    mic = page.locator("#mic-button")
    mic.click()
    expect(mic).to_have_attribute("aria-pressed", "true")
    page.wait_for_timeout(1500)
    mic.click()
    expect(mic).not_to_have_attribute("aria-pressed", "true")
    reply = page.locator('.msg[data-from="agent"][data-final="true"] .msg-text').filter(
        has_text=re.compile(r"^heard \d+ bytes of wav$")
    )
    expect(reply).to_have_count(1)
    n = int(re.search(r"\d+", reply.text_content()).group())
    audio = [f for f in app.sent if f.get("t") == "audio"]
    assert len(audio) == 1 and audio[0].get("format") == "wav", [f.get("t") for f in app.sent]
    wav = base64.b64decode(audio[0]["data"])
    assert len(wav) == n
    # 16 kHz mono 16-bit PCM, about 1.5 s of it.
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE", wav[:16]
    fmt = wav.find(b"fmt ")
    assert fmt >= 0
    audio_format, channels, rate, _, _, bits = struct.unpack("<HHIIHH", wav[fmt + 8 : fmt + 24])
    assert (audio_format, channels, rate, bits) == (1, 1, 16000, 16)
    seconds = (n - 44) / (16000 * 2)
    assert 0.8 <= seconds <= 5, f"{seconds:.2f} s of audio"


# -- connection ------------------------------------------------------------------------


def test_server_restart_mid_conversation(make_app, own_server):
    gw = own_server
    app = make_app(gw)
    page = app.page
    # While the gateway is down Chromium itself logs each refused reconnect; the page
    # cannot prevent that line, so it alone is allowed here.
    app.allowed_console.append(rf"WebSocket connection to 'ws://127\.0\.0\.1:{gw.port}/ws' failed")
    app.pair_by_link()
    app.send("before the restart")
    app.agent_text("echo: before the restart")
    # Confirmed (the pong after it came) before the gateway stops: no re-send race.
    confirmed = user_bubbles(page).filter(has_text="before the restart")
    expect(confirmed).to_have_attribute("data-final", "true")

    gw.stop()
    expect(page.locator("#status")).to_have_attribute("data-state", re.compile("offline|connecting"))
    app.send("typed while down")
    expect(user_bubbles(page).filter(has_text="typed while down")).to_have_count(1)
    page.wait_for_timeout(1000)
    gw.start()

    app.expect_online(timeout=30_000)
    app.agent_text("echo: typed while down", timeout=15_000)
    page.wait_for_timeout(2000)  # a second delivery would have come by now
    texts = app.bubble_texts("agent")
    assert texts.count("echo: typed while down") == 1, texts
    sent = [f.get("id") for f in app.sent if f.get("t") == "text" and f.get("text") == "typed while down"]
    assert len(set(sent)) == 1, f"re-sent under different ids: {sent}"
    # Nor does the message the gateway had already taken before it stopped come again.
    assert texts.count("echo: before the restart") == 1, texts


def test_wrong_token_shows_no_access_without_retry_loop(app):
    page = app.page
    page.goto(f"{app.gateway.base}/#token=wrong-token-0000000000000000")
    expect(page.locator("#status")).to_have_attribute("data-state", "noaccess")
    page.wait_for_timeout(5000)
    assert len(app.sockets) <= 2, f"{len(app.sockets)} WebSocket connections in 5 s: {app.sockets}"
    expect(page.locator("#status")).to_have_attribute("data-state", "noaccess")
    expect(page.locator("#status")).to_contain_text(re.compile("no access", re.I))


# -- HTTP ------------------------------------------------------------------------------


def test_csp_and_headers(server):
    with urllib.request.urlopen(server.base + "/") as r:
        csp = r.headers.get("Content-Security-Policy", "")
        assert r.headers.get("Content-Type", "").startswith("text/html")
        assert r.headers.get("X-Content-Type-Options") == "nosniff"
        body = r.read().decode()
    assert "default-src 'self'" in csp, csp
    assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp, csp
    assert re.search(r"script-src 'self'(;|$)", csp), csp
    assert f"ws://127.0.0.1:{server.port}" in csp, csp
    assert re.search(r'<link[^>]*rel="icon"[^>]*href="/icon.svg"', body), "no <link rel=icon href=/icon.svg>"
    assert not re.search(r"<script(?![^>]*\bsrc=)", body), "inline <script> in index.html"
    for path in ("/app.js", "/protocol.js", "/app.css", "/avatar/"):
        with urllib.request.urlopen(server.base + path) as r:
            assert r.headers.get("X-Content-Type-Options") == "nosniff", path


AVATAR_LABELS = {"idle": "Hermes is idle", "thinking": "Hermes is thinking", "speaking": "Hermes is speaking"}


def expect_avatar(doc, state):
    """`doc` (a Page or FrameLocator) shows the avatar in `state`: attribute and label."""
    expect(doc.locator("html")).to_have_attribute("data-state", state)
    expect(doc.locator("#avatar-label")).to_have_text(AVATAR_LABELS[state])


def test_avatar_page(make_app, server):
    app = make_app(server)
    page = app.page
    page.goto(server.base + "/avatar/")
    page.wait_for_function("() => window.hermesAvatar && typeof window.hermesAvatar.set === 'function'")
    expect_avatar(page, "idle")
    for state in ("thinking", "speaking", "idle", "speaking"):
        assert page.evaluate("s => window.hermesAvatar.set(s)", state) == state
        expect_avatar(page, state)
        assert page.evaluate("window.hermesAvatar.get()") == state
    # An unknown state is shown as idle (M3).
    assert page.evaluate("() => window.hermesAvatar.set('dancing')") == "idle"
    expect_avatar(page, "idle")
    # postMessage, as an object and as a JSON string (React Native's WebView).
    page.evaluate("() => window.postMessage({avatar: 'thinking'}, '*')")
    expect_avatar(page, "thinking")
    page.evaluate("""() => window.postMessage('{"avatar": "speaking"}', '*')""")
    expect_avatar(page, "speaking")
    page.evaluate("() => window.postMessage({avatar: 'bogus'}, '*')")
    expect_avatar(page, "idle")
    page.goto(server.base + "/avatar/?state=thinking")
    expect_avatar(page, "thinking")

    # In the chat page the embedded avatar (#avatar-frame) follows #avatar-state in a turn.
    chat = make_app(server)
    page = chat.page
    chat.pair_by_link()
    frame_el = page.locator("#avatar-frame")
    frame = frame_el.element_handle().content_frame()
    frame.wait_for_function("() => window.hermesAvatar && typeof window.hermesAvatar.set === 'function'")
    shown = page.frame_locator("#avatar-frame")
    expect_avatar(shown, "idle")
    frame.evaluate(
        """() => { window.__states = [window.hermesAvatar.get()];
        window.hermesAvatar.onChange((s) => window.__states.push(s)); }"""
    )
    page.evaluate(RECORDER_JS)
    chat.send("hi")
    chat.agent_text("echo: hi")
    expect(page.locator("#avatar-state")).to_have_attribute("data-state", "idle", timeout=8_000)
    expect_avatar(shown, "idle")
    in_page = [s for s, _ in page.evaluate("window.__rec.avatar")]
    in_frame = frame.evaluate("window.__states")
    assert in_frame == in_page, f"the frame showed {in_frame}, #avatar-state {in_page}"
    i = in_frame.index("thinking")
    j = in_frame.index("speaking", i)
    assert "idle" in in_frame[j:], in_frame


# -- the docs' screenshots -------------------------------------------------------------


@pytest.mark.parametrize(
    "name,viewport",
    [("web-phone", {"width": 390, "height": 844}), ("web-desktop", {"width": 1280, "height": 800})],
)
def test_docs_screenshots(make_app, server, request, name, viewport):
    """The chat with an open card and a received image. Written into docs/img/ with
    `--update-docs`, otherwise under target/browser-screenshots/docs/."""
    app = make_app(server, viewport=viewport, device_scale_factor=1)
    page = app.page
    app.pair_by_link()
    app.send("/approve rm -rf /tmp/x")
    expect(page.locator('.card[data-state="open"]')).to_have_count(1)
    app.send("/image")
    page.wait_for_function(
        "() => { const i = document.querySelector('img.media-image'); return i && i.complete && i.naturalWidth > 0; }"
    )
    expect(page.locator("#avatar-state")).to_have_attribute("data-state", "idle", timeout=8_000)
    page.locator("#composer").fill("Looks good, thanks!")
    page.wait_for_timeout(300)
    out_dir = ROOT / "docs" / "img" if request.config.getoption("--update-docs") else SCREENSHOTS / "docs"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{name}.png"
    page.screenshot(path=str(out))
    assert out.stat().st_size < 200 * 1024, f"{out} is {out.stat().st_size} bytes"
