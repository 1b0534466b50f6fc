"""The `seq_file` option: where the client keeps the highest journal seq (issue 24) it has
handed to the application, so that the next run resumes after it."""

from __future__ import annotations

import os
from pathlib import Path

from .events import HermesError


class SeqFile:
    """One decimal number in a file of its own. It is replaced whole (a temporary file
    renamed over it), so a crash leaves the old number or the new one, never half of one.
    There is no fsync: a crash of the process keeps the latest number; a power cut may
    leave an older one, and then a few entries come again."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> int | None:
        """The number kept, or None when there is no file yet (a new client). Raises
        HermesError `bad_config` for a file that does not hold one: resuming from a wrong
        number would replay or skip entries without a word."""
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise HermesError("bad_config", f"cannot read the seq file {self.path}: {e}") from None
        if not text.isdigit():
            raise HermesError("bad_config", f"the seq file {self.path} does not hold a seq: {text[:40]!r}")
        return int(text)

    def save(self, seq: int) -> None:
        """Writes `seq`. Raises OSError (the caller logs it and goes on)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(f"{seq}\n")
        os.replace(tmp, self.path)
