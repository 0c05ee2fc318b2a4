"""Which store an index lives in: `local` (a folder), or Qdrant (a server, a cluster, or in-process)."""

from __future__ import annotations

import os
from pathlib import Path

from .store import IndexStore, index_path


def open_store(url: str | None = None, index_dir: str | os.PathLike | None = None, name: str | None = None,
               api_key: str | None = None, pdf_store: str | os.PathLike | None = None):
    """`url`: local (default: <index-dir>/<name>), qdrant://HOST:PORT/COLLECTION, qdrants://... (https)
    or qdrant+path://DIR/COLLECTION (Qdrant's in-process mode); also from $LGPT_STORE."""
    url = url or os.environ.get("LGPT_STORE") or "local"
    if url == "local":
        return IndexStore(index_path(index_dir, name))
    from .qdrant_store import QdrantStore, parse_store_url

    spec = parse_store_url(url, api_key or os.environ.get("QDRANT_API_KEY"))
    return QdrantStore(spec, Path(pdf_store) if pdf_store else None)
