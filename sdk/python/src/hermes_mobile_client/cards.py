"""Cards (`prompt` frames with buttons): validating them against the protocol's option
tables (P3, P6), keeping `client.cards` up to date, and closing them on `prompt_done`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from . import _util as u
from .events import Card, CardDone, CardOption
from .hidden_chars import has_hidden_chars

# Closed cards are kept a while (for `answer()` checks and CardDone labels), not for ever.
MAX_CARDS = 200
CARDS_AFTER_TRIM = 150
DEFAULT_TIMEOUT_SECONDS = 300


def validate_card(f: Mapping[str, Any]) -> Card | None:
    """A clean `Card` from a `prompt` frame, or None when it is not a valid card (P3, P6).
    Options outside the table of its kind are dropped; a card without options is invalid."""
    cid, text = f.get("id"), f.get("text")
    if not isinstance(cid, str) or not cid or not isinstance(text, str):
        return None
    kind = u.lowercase(f.get("kind"))
    raw_options = f.get("options")
    if kind not in u.PROMPT_OPTIONS or not isinstance(raw_options, list):
        return None
    options = _allowed_options(kind, raw_options)
    if not options:
        return None
    t = u.as_int(f.get("timeout_seconds"))
    # 0: no time left, a card the journal replays as closed since (its prompt_done follows,
    # L58). The default is only for a frame that says nothing.
    timeout = t if t is not None and t >= 0 else DEFAULT_TIMEOUT_SECONDS
    command, description = u.str_field(f, "command"), u.str_field(f, "description")
    # The gateway says so (issue 23), and an older gateway does not: checked here as well.
    shown = [text, command, description, *(o.label for o in options)]
    return Card(
        id=cid,
        kind=kind,
        text=text,
        options=tuple(options),
        command=command,
        description=description,
        session=u.str_field(f, "session"),
        timeout_seconds=timeout,
        expires_at=time.time() + timeout,
        hidden_chars=f.get("hidden_chars") is True or any(has_hidden_chars(s) for s in shown),
        seq=u.as_seq(f.get("seq")),
    )


def _allowed_options(kind: str, raw_options: list[Any]) -> list[CardOption]:
    """The options of the kind's table (clarify: `c<n>` and `other`), first of each id."""
    allowed = u.PROMPT_OPTIONS[kind]
    seen: set[str] = set()
    options: list[CardOption] = []
    for o in raw_options:
        if not isinstance(o, dict) or not isinstance(o.get("id"), str):
            continue
        oid = o["id"].lower()
        ok = oid in allowed if allowed is not None else u.is_clarify_option(oid)
        if not ok or oid in seen:
            continue
        seen.add(oid)
        style = o.get("style") if o.get("style") in ("primary", "danger") else ""
        label = o.get("label") if isinstance(o.get("label"), str) and o.get("label") else oid
        options.append(CardOption(id=oid, label=str(label), style=str(style)))
    return options


def remember_card(cards: dict[str, Card], card: Card) -> None:
    """Adds or replaces a card in `cards` (the client's `cards`, by id)."""
    old = cards.get(card.id)
    if old is not None and old.state == "open":
        # H5: open cards are sent again after a reconnect; keep the earlier deadline.
        card.expires_at = min(card.expires_at, old.expires_at)
        card.repeat = True
    cards[card.id] = card
    if len(cards) > MAX_CARDS:
        # A card whose time ran out while this client was offline never gets its
        # prompt_done (P5): it is expired all the same.
        now = time.time()
        for c in cards.values():
            if c.state == "open" and c.expires_at < now:
                c.state = "expired"
        for cid in [k for k, c in cards.items() if c.state != "open"][: len(cards) - CARDS_AFTER_TRIM]:
            del cards[cid]


def close_card(cards: dict[str, Card], f: Mapping[str, Any]) -> CardDone | None:
    """Marks the card a `prompt_done` frame names as done or expired; the CardDone event,
    or None for a frame without an id. A card this client never saw still gives one."""
    cid = f.get("id")
    if not isinstance(cid, str):
        return None
    card = cards.get(cid)
    option_id = f["option_id"].lower() if isinstance(f.get("option_id"), str) else None
    expired = f.get("expired") is True
    label = None
    if card is not None:
        opt = card.option(option_id) if option_id else None
        label = opt.label if opt else option_id
        if card.state == "open":
            card.state = "expired" if expired else "done"
            card.answered = option_id
    seq = u.as_seq(f.get("seq"))
    return CardDone(id=cid, option_id=option_id, expired=expired, label=label, card=card, seq=seq)
