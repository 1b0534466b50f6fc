"""Issue 23, finding 4: what a person approves is what runs. An agent (this test, on the
gateway's agent link) opens cards whose command, text, description or option labels hold
bidi controls and invisible characters (Trojan Source, CVE-2021-42574). The page shows each
of them as a ⟨U+XXXX⟩ marker with a warning line, and the answer is the option id as it was.
The page finds the characters itself: the test does not rely on the gateway's hidden_chars
flag (a gateway before it sends none)."""

import re

import pytest
from playwright.sync_api import expect

from agent_link import AgentLink
from conftest import SCREENSHOTS, _start_gateway

TROJAN = "rm -rf /home/user/\u202e tmp.log \u202c"  # displays as "rm -rf /home/user/gol.pmt"
REVEALED = "rm -rf /home/user/⟨U+202E⟩ tmp.log ⟨U+202C⟩"
# Anything of the class left in what the page shows (protocol.js's class).
HIDDEN_IN_TEXT = r"e => /[\p{Cf}\p{Zl}\p{Zp}\u0000-\u0008\u000B-\u001F\u007F-\u009F]/u.test(e.textContent)"


@pytest.fixture
def linked(tmp_path_factory):
    sock = tmp_path_factory.mktemp("agent") / "agent.sock"
    gw = _start_gateway(extra_env={"MOBILE_AGENT": f"link:{sock}"})
    agent = AgentLink(str(sock))
    agent.send(t="hello", v=1, agent="hidden-chars-test")
    agent.wait_for("welcome")
    yield gw, agent
    agent.close()
    gw.cleanup()


def test_hidden_characters_on_cards_are_shown_and_answers_unchanged(make_app, linked):
    gw, agent = linked
    app = make_app(gw, viewport={"width": 390, "height": 844})
    page = app.page
    app.pair_by_link()
    device = agent.wait_for("device_online")["device"]

    # A plain card first: no markers, no warning.
    agent.command("p0", t="open_prompt", device=device, prompt="ap-plain", kind="exec_approval",
                  command="ls -la", description="list the files", options=["once", "deny"])
    plain = page.locator('.card[data-prompt-id="ap-plain"]')
    expect(plain.locator(".card-command")).to_have_text("ls -la")
    expect(plain.locator(".card-warning")).to_have_count(0)
    expect(plain.locator(".hidden-char")).to_have_count(0)
    plain.locator('button.card-option[data-option-id="deny"]').click()
    agent.wait_for("prompt_answered", device=device, prompt="ap-plain", option="deny")

    # The Trojan Source command, and a description with a zero-width space in it.
    agent.command("p1", t="open_prompt", device=device, prompt="ap-hidden", kind="exec_approval",
                  command=TROJAN, description="tidy\u200b up the logs")
    card = page.locator('.card[data-prompt-id="ap-hidden"]')
    expect(card).to_have_attribute("data-state", "open")
    command = card.locator(".card-command")
    expect(command).to_have_text(REVEALED)
    markers = command.locator(".hidden-char")
    expect(markers).to_have_count(2)
    assert markers.all_text_contents() == ["⟨U+202E⟩", "⟨U+202C⟩"]
    expect(card.locator(".card-description")).to_have_text("tidy⟨U+200B⟩ up the logs")
    warning = card.locator(".card-warning")
    expect(warning).to_be_visible()
    expect(warning).to_have_text(re.compile(r"hidden characters, shown as ⟨U\+…⟩\. Check the command before you approve"))
    # Nothing of the class reaches the screen, and the markers stand out from the command.
    assert not card.evaluate(HIDDEN_IN_TEXT), card.text_content()
    style = markers.first.evaluate("e => { const s = getComputedStyle(e); return [s.backgroundColor, s.color]; }")
    assert style[0] not in ("rgba(0, 0, 0, 0)", "transparent") and style[0] != style[1], style
    # Right-to-left letters in a command cannot reorder it either: shown in the order it runs.
    assert command.evaluate("e => getComputedStyle(e).unicodeBidi") == "bidi-override"

    card.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "hidden-chars-card.png"))

    # Deny: the option id goes back exactly as the card had it, and the agent gets it.
    card.locator('button.card-option[data-option-id="deny"]').click()
    expect(card).to_have_attribute("data-state", "done")
    answer = agent.wait_for("prompt_answered", device=device, prompt="ap-hidden")
    assert answer["option"] == "deny", answer
    sent = [f for f in app.sent if f.get("t") == "prompt" and f.get("prompt_id") == "ap-hidden"]
    assert [f.get("option_id") for f in sent] == ["deny"], sent

    # A question with bidi isolates in its text and a zero-width joiner in a choice's label.
    agent.command("p2", t="open_prompt", device=device, prompt="q-hidden", kind="clarify",
                  question="Delete \u2066which\u2069 folder?", choices=["logs\u200d", "cache"])
    question = page.locator('.card[data-prompt-id="q-hidden"]')
    expect(question.locator(".card-text")).to_have_text("Delete ⟨U+2066⟩which⟨U+2069⟩ folder?")
    expect(question.locator(".card-warning")).to_have_text(re.compile("hidden characters"))
    first = question.locator('button.card-option[data-option-id="c0"]')
    expect(first).to_have_text("logs⟨U+200D⟩")
    expect(question.locator('button.card-option[data-option-id="c1"]')).to_have_text("cache")
    first.click()
    answer = agent.wait_for("prompt_answered", device=device, prompt="q-hidden")
    assert answer["option"] == "c0", answer
    # The result line shows the label as the buttons did.
    expect(question.locator(".card-result")).to_have_text("logs⟨U+200D⟩")

    # Approve, on a confirmation whose text hides a right-to-left mark: "once" goes back.
    agent.command("p3", t="open_prompt", device=device, prompt="sc-hidden", kind="slash_confirm",
                  text="/reset\u200f all")
    confirm = page.locator('.card[data-prompt-id="sc-hidden"]')
    expect(confirm.locator(".card-text")).to_have_text("/reset⟨U+200F⟩ all")
    expect(confirm.locator(".card-warning")).to_be_visible()
    confirm.locator('button.card-option[data-option-id="once"]').click()
    answer = agent.wait_for("prompt_answered", device=device, prompt="sc-hidden")
    assert answer["option"] == "once", answer
