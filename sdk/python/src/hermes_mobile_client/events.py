"""The events a client yields (`async for event in client`), as typed dataclasses, and the
error type its methods raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias


class HermesError(Exception):
    """An error with a protocol-style `code`: the gateway's (`auth_failed`, `forbidden`,
    `device_offline`, `bad_frame`, `too_big`, …) or the client's own (`offline`, `timeout`,
    `closed`, `replaced`, `unsent`, `prompt_closed`, `bad_config`)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message or code


@dataclass(frozen=True)
class Status:
    """The connection changed state.

    `state` is one of:
      - `connecting` (`attempt` counts the tries since the last `online`),
      - `online` (after `ready`),
      - `offline` (dropped; `retry_in` seconds until the next try, `None` when the client
        does not reconnect by itself; `reason` says why),
      - `noaccess` (`code` is `auth_failed` or `forbidden`: the token or the device binding
        is wrong; the client stops and never retries),
      - `replaced` (another connection took this device id over, H5; the client stops; only
        `reconnect()` takes the device back),
      - `closed` (`close()` was called).
    """

    state: str
    reason: str = ""
    code: str = ""
    attempt: int = 0
    retry_in: float | None = None


@dataclass(frozen=True)
class Ready:
    """The handshake is done: the gateway's `ready` frame."""

    v: int
    session: str
    device_id: str
    device_name: str
    avatar_url: str
    capabilities: dict[str, Any]
    seq: int | None = None
    """The device's latest journal seq (0: none yet); None from a gateway without a
    journal (L56). `capabilities["history"]` is there when it keeps history."""


@dataclass(frozen=True)
class Message:
    """An agent message, whole: the chunks of a version joined (M1) and the latest version
    of a streamed message (M2). One event per complete version; `final` on the last one.
    `key` is `id`, or `id#n` when an id comes again after its message was final. `seq` is
    its journal seq (issue 24), None from a gateway without a journal."""

    id: str
    text: str
    final: bool
    edit: bool = False
    version: int = 1
    key: str = ""
    seq: int | None = None


@dataclass(frozen=True)
class MediaProgress:
    """A chunk of an incoming file arrived (`got` of `parts`, `received` bytes of `size`)."""

    id: str
    filename: str
    received: int
    size: int
    part: int
    parts: int
    got: int


@dataclass(frozen=True)
class Media:
    """An incoming file, reassembled from its chunks. `data` holds its bytes, unless the
    client was given a `media_dir`: then it is saved there and `path` names the file (and
    `data` is None). A file sent as a link has `url` and neither. A file replayed after a
    resume, or from `history()`, whose bytes the gateway no longer keeps has none of the
    three (L58); from history it may have `url`, fetched with the token (L59)."""

    id: str
    kind: str
    mime: str
    filename: str
    size: int
    caption: str = ""
    reply_to: str | None = None
    data: bytes | None = field(default=None, repr=False)
    path: Path | None = None
    url: str | None = None
    seq: int | None = None

    def read(self) -> bytes:
        """The file's bytes, from `data` or from the saved `path`."""
        if self.data is not None:
            return self.data
        if self.path is not None:
            return self.path.read_bytes()
        if self.url is not None:
            raise HermesError("no_data", "this media is a link; fetch its url")
        raise HermesError("no_data", "the gateway no longer keeps this file's bytes")


@dataclass(frozen=True)
class CardOption:
    id: str
    label: str
    style: str = ""  # "primary", "danger" or ""


@dataclass
class Card:
    """A card with buttons (`prompt`): answer it with `client.answer(card, option)`.

    `kind` is `exec_approval`, `slash_confirm` or `clarify`; `command` and `description`
    are set for `exec_approval`. `expires_at` is a `time.time()` value. `state` is `open`,
    `done` or `expired`, kept up to date by the client. `repeat` is true when an open card
    is sent again after a reconnect (H5). `hidden_chars` is true when `text`, `command`,
    `description` or a label holds a hidden character (the gateway's flag, or this client's
    own check): show the card through `reveal_hidden_chars` with a warning (issue 23).
    `seq` is its journal seq (its opening's; in `history()`, its latest change's), and
    `answered` the option it closed with, once known (a CardDone, or a history item).
    `timeout_seconds` is 0 for a card a resume replays as closed since: its CardDone
    follows, and `answer()` refuses it (`prompt_closed`)."""

    id: str
    kind: str
    text: str
    options: tuple[CardOption, ...]
    command: str = ""
    description: str = ""
    session: str = ""
    timeout_seconds: int = 300
    expires_at: float = 0.0
    state: str = "open"
    repeat: bool = False
    hidden_chars: bool = False
    seq: int | None = None
    answered: str | None = None

    def option(self, option_id: str) -> CardOption | None:
        return next((o for o in self.options if o.id == option_id.lower()), None)


@dataclass(frozen=True)
class CardDone:
    """A card closed: answered (`option_id`, the option the gateway applied, and its
    `label`) or `expired`. `seq` is the journal seq of its closing."""

    id: str
    option_id: str | None
    expired: bool
    label: str | None = None
    card: Card | None = None
    seq: int | None = None


@dataclass(frozen=True)
class Avatar:
    state: str  # idle, thinking or speaking


@dataclass(frozen=True)
class Typing:
    active: bool  # False on typing{stop} and when the connection ends


@dataclass(frozen=True)
class Error:
    """An `error` frame from the gateway. `id` is the offending frame's (G9); `prompt_id`
    when it answered a card; `request` (e.g. `deliver`, `push_subscribe`) when it answered
    a request, whose call also raises it. `fatal`: the connection closes after it."""

    code: str
    message: str
    fatal: bool
    id: str | None = None
    prompt_id: str | None = None
    request: str | None = None


@dataclass(frozen=True)
class UploadProgress:
    """Progress of a file being sent; `percent` reaches 100 only once the gateway has
    confirmed the file."""

    id: str
    loaded: int
    total: int
    percent: int


@dataclass(frozen=True)
class Confirmed:
    """The gateway has the message (text, audio, file, card answer). With a journal, on a
    resumed connection, a text, voice note or file is confirmed by the gateway's `received`:
    it is on disk, at journal seq `seq` (L58). Otherwise (card answers; gateways without a
    journal) by the `pong` to a ping sent after it: the gateway has read it; `seq` is None."""

    id: str
    type: str
    seq: int | None = None


@dataclass(frozen=True)
class Rejected:
    """The gateway refused a message with a non-fatal error naming it; it is not re-sent."""

    id: str
    type: str
    code: str
    message: str


@dataclass(frozen=True)
class Unsent:
    """A message sent on a connection that died, unconfirmed and older than the re-send
    window: given up."""

    id: str
    type: str


@dataclass(frozen=True)
class Resumed:
    """The replay that a resume asked for is over (`resumed`, L58): every journal entry
    changed after the client's seq has come; live frames follow. `seq` is the device's
    latest."""

    seq: int


@dataclass(frozen=True)
class UserMessage:
    """A history item the person sent from this device (`from: user`, L59): `type` is
    `text` (with `text`), `audio` (`format`, `size`, maybe `text`: a transcript) or `media`
    (`kind`, `mime`, `filename`, `size`, maybe `caption` and `url`). No bytes."""

    id: str
    type: str
    seq: int
    text: str = ""
    format: str = ""
    kind: str = ""
    mime: str = ""
    filename: str = ""
    size: int = 0
    caption: str = ""
    url: str | None = None


HistoryItem: TypeAlias = Message | Media | Card | UserMessage
"""One journal entry in a `History` page: the agent's message (whole, its latest version),
a file from the agent (metadata; `url` while the gateway keeps the bytes), a card (open,
or closed with `state` and `answered`), or the person's own `UserMessage`."""


@dataclass(frozen=True)
class History:
    """A page of the device's journal from `history()`: `items` oldest first, each with its
    `seq`; `more` when older entries remain. Ask for them with
    `history(before=page.next_before)`."""

    items: tuple[HistoryItem, ...]
    more: bool
    # The lowest seq of the gateway's answer, items this client cannot show included.
    oldest_seq: int | None = None

    @property
    def next_before(self) -> int | None:
        """The `before` of the next (older) page: the page's lowest seq, also when no item of
        it could be shown (a newer gateway's entry), so paging never starts over or stalls."""
        if self.oldest_seq is not None:
            return self.oldest_seq
        return self.items[0].seq if self.items else None


@dataclass(frozen=True)
class Invalid:
    """A frame that is not JSON, not an object, or a message/media/card that does not
    validate. It is otherwise ignored."""

    reason: str
    frame: dict[str, Any] | None = None


@dataclass(frozen=True)
class Delivered:
    """The answer to `deliver()`: the device it reached; `held` when the device was
    offline and is notified by push instead (L45)."""

    id: str
    device: str
    held: bool = False


Event: TypeAlias = (
    Status
    | Ready
    | Message
    | MediaProgress
    | Media
    | Card
    | CardDone
    | Avatar
    | Typing
    | Error
    | UploadProgress
    | Confirmed
    | Rejected
    | Unsent
    | Resumed
    | Invalid
)
