"""Which store an index lives in: `local` (a folder), or Qdrant (a server, a cluster, or in-process).

Stores are opened through a registry of URL schemes: the built-in ones register below, and a
plugin (a module named in $LGPT_PLUGINS, say) may add its own with `register_scheme`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from .protocols import Store
from .local.store import LocalStore
from .local.store import index_path


@dataclass(frozen=True)
class StoreRequest:
    """What open_store was asked for, as a scheme's opener reads it."""

    url: str
    index_dir: str | os.PathLike | None
    name: str | None
    api_key: str | None
    pdf_store: Path | None


StoreOpener = Callable[[StoreRequest], Store]
_SCHEMES: dict[str, tuple[StoreOpener, str]] = {}  # scheme -> (opener, the URL's form, for messages)


def register_scheme(scheme: str, opener: StoreOpener, form: str) -> None:
    """Open the URLs `scheme://...` (or the bare word `local`) with `opener`; `form` shows the URL in messages."""
    _SCHEMES[scheme] = (opener, form)


def _local(request: StoreRequest) -> LocalStore:
    return LocalStore(index_path(request.index_dir, request.name))


def _qdrant(request: StoreRequest) -> Store:
    from .qdrant.store import QdrantStore
    from .qdrant.ids import parse_store_url

    return QdrantStore(parse_store_url(request.url, request.api_key), request.pdf_store)


register_scheme("local", _local, "local")
register_scheme("qdrant", _qdrant, "qdrant://HOST:PORT/COLLECTION")
register_scheme("qdrants", _qdrant, "qdrants://...")
register_scheme("qdrant+path", _qdrant, "qdrant+path://DIR/COLLECTION")


def open_store(url: str | None = None, index_dir: str | os.PathLike | None = None, name: str | None = None,
               api_key: str | None = None, pdf_store: str | os.PathLike | None = None) -> Store:
    """`url`: local (default: <index-dir>/<name>), qdrant://HOST:PORT/COLLECTION, qdrants://... (https)
    or qdrant+path://DIR/COLLECTION (Qdrant's in-process mode); also from $LGPT_STORE."""
    url = url or os.environ.get("LGPT_STORE") or "local"
    scheme = url if url == "local" else (url.partition("://")[0] if "://" in url else "")
    if scheme not in _SCHEMES:
        forms = [form for _, form in _SCHEMES.values()]
        raise UsageError(f"--store {url}: expected {', '.join(forms[:-1])} or {forms[-1]}.")
    request = StoreRequest(url, index_dir, name, api_key or os.environ.get("QDRANT_API_KEY"),
                           Path(pdf_store) if pdf_store else None)
    return _SCHEMES[scheme][0](request)
