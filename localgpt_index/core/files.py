"""Files as the build and the stores read them: content digests, fresh timestamps, bounded reads.

How fresh a timestamp may be to trust it, and the text files users hand us read whole but bounded."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from .errors import UsageError

RACY_NS = 2_000_000_000  # a file modified this close to its stat may change again within the timestamp's granularity


def user_cache_folder() -> Path:
    """lgpt-index's folder of the user's cache: beside Hugging Face's (~/.cache), under XDG_CACHE_HOME when set."""
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")) / "lgpt-index"


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_user_text(path: str | Path, *, limit: int, label: str) -> str:
    """A user's UTF-8 text file ("-": standard input), whole, or a UsageError that starts with `label`.

    At most `limit` bytes are read: a larger file is refused, never cut short. A byte-order mark
    (Excel writes one) is dropped; NUL bytes mean a binary file.
    """
    try:
        if str(path) == "-":
            raw = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                raw = handle.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"{label}: {exc.strerror or exc}.") from None
    if len(raw) > limit:
        raise UsageError(f"{label}: larger than {limit >> 20} MiB.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{label}: not UTF-8 text (byte {exc.start}; a binary file?).") from None
    if "\x00" in text:
        raise UsageError(f"{label}: holds NUL bytes; not a text file.")
    return text
