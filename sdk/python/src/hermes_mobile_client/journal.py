"""The gateway's journal (issue 24; docs/decisions-local.md L56-L60) as a client sees it.

Resume: every `hello` carries `resume.after`, and the gateway replays what changed after
it, then says `resumed` (a gateway without a journal ignores it, L56). The client keeps two
seqs. The highest seq on a frame it received is what a reconnect resumes after, so it
misses nothing and gets nothing twice. The highest seq of an event the application has
handled is what `seq_file` keeps for the next run: an event counts as handled once the
application asks for the next one, or closes the client without an exception, so an event
lost in a crash comes again on the next run rather than never. A new client (no seq_file,
or a new one) resumes after 0: the device's whole journal comes first.

`history()` and `forget()` are requests (request_frames.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from . import _util as u
from .cards import validate_card
from .events import Card, CardDone, Event, HermesError, History, HistoryItem, Media, Message, UserMessage
from .reassembly import media_meta
from .request_frames import RequestsMixin

log = logging.getLogger("hermes_mobile_client")

HISTORY_DEFAULT_LIMIT = 50
HISTORY_MAX_LIMIT = 200  # L59: the gateway cuts a larger limit to this
# The events whose seq is an entry's that a replay would send again; the seqs of `ready`,
# `resumed` and `received` are not (L58).
_ENTRY_EVENTS = (Message, Media, Card, CardDone)


class JournalMixin(RequestsMixin):
    @property
    def seq(self) -> int:
        """The highest journal seq of an event the application has taken (what `seq_file`
        keeps); 0 before any."""
        return self._seq_handed

    # ---- resume -------------------------------------------------------------------------

    @property
    def has_history(self) -> bool:
        """The gateway keeps history (`ready.capabilities.history`, L56): `history()` works."""
        return isinstance(self.capabilities.get("history"), dict)

    def _journal_ready(self, seq: int | None) -> bool:
        """After `ready` (`seq`: the device's latest, None without a journal): whether this
        connection confirms by `received`. False when it must be dropped: a new journal."""
        self._by_received = seq is not None
        if seq is None or seq >= self._resume_sent:
            return True
        # Seqs never go back (L57): this is not the journal this client resumed from (a new
        # state directory, or a corrupt file moved aside, L62). Nothing in it was seen here:
        # start again from 0, on a new connection, so that all of it is replayed.
        log.warning(
            "the gateway's latest seq %d is below this client's %d: a new journal; resuming from 0",
            seq,
            self._resume_sent,
        )
        self._seq_seen = self._seq_handed = 0
        self._seq_pending = None
        self._save_seq()
        return False

    def _emit(self, ev: Event) -> None:
        """An event for the application. A whole message version, file or card carries the
        seq this client has now received: not the first chunk or part of one, whose seq a
        reconnect must not resume past, or the rest of it is never sent again (L58)."""
        if isinstance(ev, _ENTRY_EVENTS) and ev.seq is not None and ev.seq > self._seq_seen:
            self._seq_seen = ev.seq
        super()._emit(ev)

    def _hand_over(self, ev: Event) -> None:
        """The application takes `ev`: the one before it was handled."""
        self._commit_seq()
        if isinstance(ev, _ENTRY_EVENTS) and ev.seq is not None:
            self._seq_pending = ev.seq

    def _commit_seq(self) -> None:
        n, self._seq_pending = self._seq_pending, None
        if n is not None and n > self._seq_handed:
            self._seq_handed = n
            self._save_seq()

    def _save_seq(self) -> None:
        if self._seq_file is None:
            return
        try:
            self._seq_file.save(self._seq_handed)
        except OSError as e:
            if not self._seq_save_failed:
                log.warning("cannot write the seq file %s: %s", self._seq_file.path, e)
            self._seq_save_failed = True
        else:
            self._seq_save_failed = False

    # ---- history and forget -------------------------------------------------------------

    async def history(
        self, before: int | None = None, limit: int = HISTORY_DEFAULT_LIMIT, *, timeout: float | None = None
    ) -> History:
        """A page of this device's journal (L59): the newest `limit` entries (at most 200)
        with a seq below `before` (the newest of all without it), oldest first. Waits to be
        online. Raises HermesError `unsupported_frame` when the gateway keeps no history
        (`ready.capabilities.history` absent), `bad_frame` for a `before` below 0 or a
        `limit` below 1, or the gateway's code (`internal_error`: the journal could not be
        read), `offline`, `timeout`."""
        if before is not None and (u.as_int(before) is None or before < 0):
            raise HermesError("bad_frame", "before must be a seq: an integer from 0")
        if u.as_int(limit) is None or limit < 1:
            raise HermesError("bad_frame", "limit must be at least 1")
        frame: dict[str, Any] = {"t": "history", "id": u.new_id("h"), "limit": min(limit, HISTORY_MAX_LIMIT)}
        if before is not None:
            frame["before"] = before
        answer = await self._request(frame, "history", timeout, check=self._check_history)
        raw = answer.get("items")
        raw = raw if isinstance(raw, list) else []
        items = [history_item(f) for f in raw]
        seqs = [s for s in (u.as_seq(f.get("seq")) for f in raw if isinstance(f, dict)) if s is not None]
        return History(
            items=tuple(i for i in items if i is not None),
            more=answer.get("more") is True,
            oldest_seq=min(seqs, default=None),
        )

    def _check_history(self) -> None:
        if not self.has_history:
            raise HermesError("unsupported_frame", "this gateway keeps no history")

    async def forget(self, *, timeout: float | None = None) -> None:
        """Deletes this device's journal on the gateway (L60): its entries (open cards
        stay), what is held for it and its push subscriptions; returns once the gateway
        has answered `forgotten` (on disk). Seqs go on from where they were, so `seq` and
        `seq_file` stay as they are. Raises the gateway's code, `offline` or `timeout`."""
        await self._request({"t": "forget", "id": u.new_id("fg")}, "forgotten", timeout)


def history_item(f: Any) -> HistoryItem | None:
    """One `history` item as an event-like value; None for one this client cannot read
    (no seq or id, or a type it does not know: newer gateways may add some)."""
    if not isinstance(f, dict):
        return None
    seq, mid, t = u.as_seq(f.get("seq")), f.get("id"), u.lowercase(f.get("t"))
    if seq is None or not isinstance(mid, str) or not mid:
        return None
    if f.get("from") == "user":
        return _user_item(f, t, mid, seq)
    if t == "message" and isinstance(f.get("text"), str):
        return Message(id=mid, text=f["text"], final=f.get("final") is not False, key=mid, seq=seq)
    if t == "media":
        url = f.get("url")
        return Media(**media_meta(f, mid), url=url if isinstance(url, str) else None)
    if t == "prompt":
        card = validate_card(f)
        closed = f.get("closed")
        if card is not None and isinstance(closed, dict):
            card.state = "expired" if closed.get("expired") is True else "done"
            option_id = closed.get("option_id")
            card.answered = option_id.lower() if isinstance(option_id, str) else None
            card.timeout_seconds = 0
            card.expires_at = 0.0
        return card
    return None


def _user_item(f: Mapping[str, Any], t: str, mid: str, seq: int) -> UserMessage | None:
    if t not in ("text", "audio", "media"):
        return None
    size = u.as_int(f.get("size"))
    url = f.get("url")
    return UserMessage(
        id=mid,
        type=t,
        seq=seq,
        text=u.str_field(f, "text"),
        format=u.lowercase(f.get("format")),
        kind=u.lowercase(f.get("kind")),
        mime=u.str_field(f, "mime"),
        filename=u.str_field(f, "filename"),
        size=size if size is not None and size >= 0 else 0,
        caption=u.str_field(f, "caption"),
        url=url if isinstance(url, str) else None,
    )
