"""Names, limits and small helpers every part of the `mobile` plugin shares.

Nothing here imports Hermes, so the plugin's pure logic (the inbox, card resolution)
can be imported and tested without it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from typing import Any, Dict

logger = logging.getLogger(__name__)

PLATFORM_NAME = "mobile"
PROTOCOL_VERSION = 1
# `chat_id` of the platform's default home channel: "the gateway's MOBILE_HOME_DEVICE".
# A `deliver` without a target goes there (see ensure_home_channel).
HOME_CHAT_ID = "~home"
HOME_ENV = "MOBILE_HOME_CHANNEL"
# What the gateway announces in `welcome.limits`, until it has.
DEFAULT_LIMITS = {
    "line_bytes": 16 * 1024 * 1024,
    "media_bytes": 8 * 1024 * 1024,
    "text_chars": 12000,
    "prompt_ttl_secs": 300,
    "max_prompt_ttl_secs": 86400,
}


def printable(value: Any, limit: int = 80) -> str:
    """A string a peer chose, escaped for a log line (no newlines, no control codes)."""
    return str(value)[:limit].encode("unicode_escape").decode("ascii")


def dumps(obj: Dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def safe_name(name: str) -> str:
    """A file name safe to show and to store: no path, no control characters, and at
    most 150 UTF-8 bytes (file systems count bytes, 255 at most, and a prefix is added
    when saving), keeping the extension."""
    name = os.path.basename(str(name or "")).replace("\x00", "")
    name = re.sub(r"[\x00-\x1f/\\]", "_", name).strip(". ") or "file"
    if len(name.encode("utf-8")) > 150:
        stem, ext = os.path.splitext(name)
        ext = ext if len(ext.encode("utf-8")) <= 16 else ""
        budget = 150 - len(ext.encode("utf-8"))
        name = stem.encode("utf-8")[:budget].decode("utf-8", "ignore") + ext
    return name


def clip(text: Any, limit: int) -> str:
    """Text for the gateway: at most `limit` characters, without the blank lines Hermes
    puts at the start of text that follows a tool call."""
    text = text if isinstance(text, str) else str(text or "")
    text = text.lstrip("\r\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clamp_ttl(seconds: Any, limits: Dict[str, Any]) -> int:
    try:
        ttl = int(seconds)
    except (TypeError, ValueError):
        ttl = int(limits.get("prompt_ttl_secs") or 300)
    top = int(limits.get("max_prompt_ttl_secs") or 86400)
    return max(1, min(ttl, top))


def prompt_id(prefix: str) -> str:
    # Card ids must be unique per device for a while (duplicate_prompt); Hermes' own
    # ids restart after a restart, so never reuse them as card ids.
    return f"{prefix}-{secrets.token_hex(6)}"


def chat_id_for(device: str) -> str:
    """The Hermes chat id of a device: its id as digits ("77" + 3 digits per UTF-8 byte).

    Hermes 0.19 takes a `platform:chat` target (`hermes send --to`, the send_message
    tool) as an explicit chat only when it is made of digits; any other id is looked
    up by name in its channel directory and then dropped, because the id found is
    parsed again by the same rule. Device ids are free-form strings (`tel-1`), so
    Hermes sees each device under this reversible numeric id, and the device id is
    registered as that chat's name (channel_aliases.json), so `mobile:tel-1` and
    `mobile:<digits>` both reach the phone.
    """
    return "77" + "".join(f"{b:03d}" for b in device.encode("utf-8"))


def device_for(chat_id: Any) -> str:
    """The device id behind a Hermes chat id (a chat id that does not decode is a device id)."""
    s = str(chat_id or "").strip()
    if len(s) > 2 and s.startswith("77") and s.isdigit() and (len(s) - 2) % 3 == 0:
        try:
            raw = bytes(int(s[i:i + 3]) for i in range(2, len(s), 3))
            text = raw.decode("utf-8")
            if text and text.isprintable():
                return text
        except (ValueError, UnicodeDecodeError):
            pass
    if s.startswith(PLATFORM_NAME + ":"):
        s = s[len(PLATFORM_NAME) + 1:]
    return s


def name_chat(device: str) -> None:
    """Name the device's numeric chat id after the device (see chat_id_for).

    Hermes' channel directory is rebuilt from session history only every few
    minutes, but its alias file (channel_aliases.json) is applied on every lookup, so
    `hermes send --to mobile:<device id>` works as soon as the device has been seen.
    Only entries of this platform keyed by our numeric ids are written.
    """
    try:
        from gateway.channel_directory import CHANNEL_ALIASES_PATH
        from utils import atomic_json_write

        data: Dict[str, Any] = {}
        if CHANNEL_ALIASES_PATH.exists():
            with open(CHANNEL_ALIASES_PATH, encoding="utf-8") as f:
                loaded = json.load(f)
            if isinstance(loaded, dict):
                data = loaded
        ours = data.get(PLATFORM_NAME)
        if not isinstance(ours, dict):
            ours = {}
        key = chat_id_for(device)
        if ours.get(key) == device:
            return
        ours[key] = device
        data[PLATFORM_NAME] = ours
        atomic_json_write(CHANNEL_ALIASES_PATH, data)
    except Exception:
        logger.debug("[mobile] could not name %s in channel_aliases.json", printable(device), exc_info=True)


def ensure_home_channel(config: Any, platform: Any) -> None:
    """Give the platform a home channel unless the owner chose one.

    Without one, Hermes answers a device's first message with a "No home channel
    is set" notice. Our default home is HOME_CHAT_ID: a `deliver` without a target,
    which the gateway sends to MOBILE_HOME_DEVICE. `/sethome` or MOBILE_HOME_CHANNEL
    still choose a device.
    """
    try:
        from gateway.config import HomeChannel

        chosen = os.environ.get(HOME_ENV) not in (None, "", HOME_CHAT_ID)
        if getattr(config, "home_channel", None) is None and not chosen:
            config.home_channel = HomeChannel(
                platform=platform, chat_id=HOME_CHAT_ID, name="the gateway's home device"
            )
            # Cron in this process reads the home channel from the environment.
            os.environ[HOME_ENV] = HOME_CHAT_ID
    except Exception:
        logger.debug("[mobile] could not set the default home channel", exc_info=True)
