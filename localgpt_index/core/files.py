"""Files as the build and the stores read them: content digests, and how fresh a timestamp may be to trust."""

from __future__ import annotations

import hashlib
from pathlib import Path

RACY_NS = 2_000_000_000  # a file modified this close to its stat may change again within the timestamp's granularity


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
