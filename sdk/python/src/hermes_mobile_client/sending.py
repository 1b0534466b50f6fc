"""The message-sending methods: `send_text`, `send_file`, `send_audio` and `answer` check
what they are given and queue it in the outbox; `typing` and `ack` are one-off frames."""

from __future__ import annotations

import contextlib
import os
import time
from typing import IO, Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from . import _util as u
from ._input import read_file
from .events import Card, CardOption, HermesError
from .outbox import MessageId, OutboxEntry, OutboxMixin
from .upload import ProgressCallback


class SendingMixin(OutboxMixin):
    def send_text(self, text: str, *, id: str | None = None) -> MessageId:
        """Sends a text message (queued while offline; re-sent with the same id after a
        reconnect). Returns its id; `await` it to wait for the gateway's confirmation.
        Raises HermesError `bad_frame` (blank) or `too_big` (over 12,000 characters, G1)."""
        if u.is_blank(text):
            raise HermesError("bad_frame", "text is empty")
        if u.char_count(text) > self.max_text_chars:
            raise HermesError("too_big", f"text is over {self.max_text_chars} characters")
        mid = id or u.new_id("m")
        return self._queue(OutboxEntry(id=mid, type="text", frame={"t": "text", "id": mid, "text": text}))

    def send_file(
        self,
        file: str | os.PathLike[str] | bytes | IO[bytes],
        *,
        filename: str | None = None,
        kind: str | None = None,
        mime: str | None = None,
        caption: str | None = None,
        id: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> MessageId:
        """Sends a file as `media`, in chunks of 512 KiB with one id (U1). `file` is a path,
        bytes or a binary file object. `kind` (image, video, document, audio) comes from the
        MIME type, which comes from the file name, unless given. `on_progress` gets an
        UploadProgress after each chunk and at 100 % once confirmed. Raises `too_big` over
        8 MiB before anything is sent. Returns the id; `await` it for the confirmation."""
        data, name = read_file(file, self.max_media_bytes)
        filename = u.cut_filename(filename if filename is not None else (name or "file"))
        mime = mime if mime is not None else u.guess_mime(filename)
        kind = (kind or u.upload_kind(mime)).lower()
        if kind not in u.UPLOAD_KINDS:
            raise HermesError("unsupported_frame", "kind must be image, video, document or audio")
        cap = caption if caption is not None and not u.is_blank(caption) else ""
        if cap and u.char_count(cap) > self.max_text_chars:
            raise HermesError("too_big", "caption is too long")
        mid = id or u.new_id("f")
        e = OutboxEntry(
            id=mid,
            type="media",
            data=data,
            kind=kind,
            mime=mime,
            filename=filename,
            caption=cap,
            on_progress=on_progress,
        )
        return self._queue(e)

    def send_audio(
        self,
        audio: str | os.PathLike[str] | bytes | IO[bytes],
        *,
        format: str = "wav",
        text: str | None = None,
        id: str | None = None,
    ) -> MessageId:
        """Sends a voice recording (`audio`, `wav` or `ogg`, at most 8 MiB); `text` is a
        transcript of your own. Returns the id; `await` it for the confirmation."""
        data, _ = read_file(audio, u.MAX_AUDIO_BYTES)
        if not data:
            raise HermesError("bad_frame", "recording is empty")
        fmt = format.lower()
        if fmt not in u.AUDIO_FORMATS:
            raise HermesError("unsupported_frame", "format must be wav or ogg")
        transcript = "" if u.is_blank(text) else str(text)
        if u.char_count(transcript) > self.max_text_chars:
            raise HermesError("too_big", "text is too long")
        mid = id or u.new_id("a")
        return self._queue(OutboxEntry(id=mid, type="audio", data=data, format=fmt, text=transcript))

    def answer(self, card: Card | str, option: CardOption | str | None, text: str | None = None) -> MessageId:
        """Answers a card with one of its options (or, for clarify's `other`, a `text`, P3).
        Raises HermesError `prompt_closed` for a closed card, `bad_frame` for an option not
        on the card. The applied option comes back as a CardDone event."""
        prompt_id = card.id if isinstance(card, Card) else str(card)
        option_id = option.id if isinstance(option, CardOption) else (option or "").lower()
        self._check_answer(prompt_id, option_id, text)
        rid = u.new_id("r")
        frame: dict[str, Any] = {"t": "prompt", "id": rid, "prompt_id": prompt_id}
        if option_id:
            frame["option_id"] = option_id
        if text is not None and not u.is_blank(text):
            frame["text"] = text
        return self._queue(OutboxEntry(id=rid, type="prompt", frame=frame, prompt_id=prompt_id))

    def _check_answer(self, prompt_id: str, option_id: str, text: str | None) -> None:
        # A card this client has seen is checked here; an unknown one is left to the gateway.
        known = self.cards.get(prompt_id)
        if known is not None:
            if known.state != "open" or known.timeout_seconds == 0:
                # timeout_seconds 0: replayed as closed since, its prompt_done on the way (L58)
                raise HermesError("prompt_closed", "the card is closed")
            if option_id and known.option(option_id) is None:
                raise HermesError("bad_frame", "not an option of this card")
            if known.kind == "clarify" and option_id == "other" and u.is_blank(text):
                raise HermesError("bad_frame", "clarify needs text")
        if not option_id and u.is_blank(text):
            raise HermesError("bad_frame", "an option or a text is needed")
        if text is not None and u.char_count(text) > self.max_text_chars:
            raise HermesError("too_big", "text is too long")

    def typing(self) -> bool:
        """Tells the agent the user is typing; sent at most every `typing_interval` s, and
        only online. Returns whether a frame went."""
        now = time.monotonic()
        ws = self._ws
        if not self._is_ready or ws is None or now - self._last_typing < self.typing_interval:
            return False
        self._last_typing = now
        self._spawn(self._send_quietly(ws, {"t": "typing", "id": u.new_id("t")}))
        return True

    def ack(self, message_id: str) -> None:
        """Tells the gateway a message was shown (`ack`; the gateway ignores it)."""
        ws = self._ws
        if self._is_ready and ws is not None:
            self._spawn(self._send_quietly(ws, {"t": "ack", "id": message_id}))

    async def _send_quietly(self, ws: ClientConnection, frame: dict[str, Any]) -> None:
        # Not queued, nothing to confirm: a frame lost with its connection does not matter.
        with contextlib.suppress(ConnectionClosed):
            await self._send_frame(ws, frame)
