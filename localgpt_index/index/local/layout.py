"""Where a local index lives and how its files are named.

Layout of one index (`<index-dir>/<name>/`):

    HEAD                        {"format", "generation", "manifest": "gen-0000000N.json", "sha256"}
    gen-0000000N.json           the manifest (index/format/manifest.py): model, settings, documents, segments
    segments/<id>.vectors.npy   float16 (rows, dim): page vectors, back to back
    segments/<id>.offsets.npy   int64 (pages + 1): page p owns rows offsets[p]:offsets[p+1]
    pdf/<sha256>.pdf            a PDF a converted document was rendered from, named by its own sha256
    lock, lock.owner            the writers' lock, and who holds it
    checked.json                which vectors files a writer checked whole, and their state then (checked.py)
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from ...core.errors import UsageError

DEFAULT_INDEX_DIR = ".lgpt-index"
DEFAULT_INDEX_NAME = "default"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
HEAD_LIMIT = 4096
MANIFEST_LIMIT = 1 << 30
NPY_HEADER = 128  # bytes: numpy's format 1.0 header, padded to a fixed size so it can be written last


def index_path(index_dir: str | os.PathLike | None, name: str | None) -> Path:
    """Where an index lives: option, else $LGPT_INDEX_DIR, else ./.lgpt-index; then the name."""
    base = Path(index_dir or os.environ.get("LGPT_INDEX_DIR") or DEFAULT_INDEX_DIR)
    name = name or os.environ.get("LGPT_INDEX_NAME") or DEFAULT_INDEX_NAME
    if not NAME_PATTERN.match(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise UsageError(f"index name {shown!r}: use up to 100 letters, digits, '-' and '_', starting with a letter or digit.")
    return base / name


def _npy_header(rows: int, dim: int) -> bytes:
    """numpy's format 1.0 header for a (rows, dim) float16 array, padded to NPY_HEADER bytes."""
    text = "{'descr': '<f2', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
    text = text.ljust(NPY_HEADER - 11) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")
