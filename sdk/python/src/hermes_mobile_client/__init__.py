"""hermes_mobile_client: an asyncio client for hermes-mobile's Protocol v1.

    from hermes_mobile_client import connect, Message

    async with connect("ws://127.0.0.1:8787/ws", token=TOKEN, device_id="py-1") as client:
        await client.wait_online(10)  # raises HermesError (auth_failed, timeout…)
        client.send_text("hello")
        async for event in client:
            if isinstance(event, Message) and event.final:
                print(event.text)
                break

See the README for the events, the methods and the reconnect and id rules.
"""

from ._util import (
    MAX_AUDIO_BYTES,
    MAX_FRAME_BYTES,
    MAX_MEDIA_BYTES,
    MAX_MEDIA_PARTS,
    MAX_TEXT_CHARS,
    MEDIA_CHUNK_BYTES,
    PROTOCOL_VERSION,
    UPLOAD_PART_BYTES,
    guess_mime,
    new_device_id,
    new_id,
    sanitize_filename,
)
from ._version import __version__
from .cards import validate_card
from .client import Client, connect
from .devices import Device, PairError, pair_with_code
from .events import (
    Avatar,
    Card,
    CardDone,
    CardOption,
    Confirmed,
    Delivered,
    Error,
    Event,
    HermesError,
    History,
    HistoryItem,
    Invalid,
    Media,
    MediaProgress,
    Message,
    Ready,
    Rejected,
    Resumed,
    Status,
    Typing,
    Unsent,
    UploadProgress,
    UserMessage,
)
from .frame_hooks import FrameHook, add_frame_hook, remove_frame_hook
from .hidden_chars import has_hidden_chars, reveal_hidden_chars
from .outbox import MessageId
from .upload import ProgressCallback

__all__ = [
    "MAX_AUDIO_BYTES",
    "MAX_FRAME_BYTES",
    "MAX_MEDIA_BYTES",
    "MAX_MEDIA_PARTS",
    "MAX_TEXT_CHARS",
    "MEDIA_CHUNK_BYTES",
    "PROTOCOL_VERSION",
    "UPLOAD_PART_BYTES",
    "Avatar",
    "Card",
    "CardDone",
    "CardOption",
    "Client",
    "Confirmed",
    "Delivered",
    "Device",
    "Error",
    "Event",
    "FrameHook",
    "HermesError",
    "History",
    "HistoryItem",
    "Invalid",
    "Media",
    "MediaProgress",
    "Message",
    "MessageId",
    "PairError",
    "ProgressCallback",
    "Ready",
    "Rejected",
    "Resumed",
    "Status",
    "Typing",
    "Unsent",
    "UploadProgress",
    "UserMessage",
    "__version__",
    "add_frame_hook",
    "connect",
    "guess_mime",
    "has_hidden_chars",
    "new_device_id",
    "new_id",
    "pair_with_code",
    "remove_frame_hook",
    "reveal_hidden_chars",
    "sanitize_filename",
    "validate_card",
]
