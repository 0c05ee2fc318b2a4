"""Where a local index lives (`<index-dir>/<name>`), without loading the store: the warm lookup's path too."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...core.errors import UsageError

DEFAULT_INDEX_DIR = ".lgpt-index"
DEFAULT_INDEX_NAME = "default"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


def index_path(index_dir: str | os.PathLike | None, name: str | None) -> Path:
    """Where an index lives: option, else $LGPT_INDEX_DIR, else ./.lgpt-index; then the name."""
    base = Path(index_dir or os.environ.get("LGPT_INDEX_DIR") or DEFAULT_INDEX_DIR)
    if name is None:  # (given empty, --name "" is refused below, not taken for the default)
        name = os.environ.get("LGPT_INDEX_NAME") or DEFAULT_INDEX_NAME
    if not NAME_PATTERN.match(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise UsageError(f"index name {shown!r}: use up to 100 letters, digits, '-' and '_', starting with a letter or digit.")
    return base / name
