"""Which store an index lives in: `local` (a folder), or Qdrant (a server, a cluster, or in-process).

Stores are opened by URL scheme: the schemes come from the plugin manager's `lgpt_store_schemes`
hook (core/plugins.py), the built-in ones from this module's, a plugin's from its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..core.plugins import collected, hookimpl, plugin_manager
from .protocols import Store
from .local.store import LocalStore
from .local.paths import index_path


@dataclass(frozen=True)
class StoreRequest:
    """What open_store was asked for, as a scheme's opener reads it."""

    url: str
    index_dir: str | os.PathLike | None
    name: str | None
    api_key: str | None
    pdf_store: Path | None


StoreOpener = Callable[[StoreRequest], Store]


@dataclass(frozen=True)
class StoreScheme:
    """A kind of store `--store URL` opens: the URLs `scheme://...` (or the bare word `local`), opened
    by `open`; `form` shows the URL in messages."""

    scheme: str
    open: StoreOpener
    form: str


def _local(request: StoreRequest) -> LocalStore:
    return LocalStore(index_path(request.index_dir, request.name))


def _qdrant(request: StoreRequest) -> Store:
    from .qdrant.store import QdrantStore
    from .qdrant.ids import parse_store_url

    return QdrantStore(parse_store_url(request.url, request.api_key), request.pdf_store)


@hookimpl(trylast=True)
def lgpt_store_schemes() -> tuple[StoreScheme, ...]:
    return (StoreScheme("local", _local, "local"), StoreScheme("qdrant", _qdrant, "qdrant://HOST:PORT/COLLECTION"),
            StoreScheme("qdrants", _qdrant, "qdrants://..."),
            StoreScheme("qdrant+path", _qdrant, "qdrant+path://DIR/COLLECTION"))


def registered_schemes() -> dict[str, StoreScheme]:
    """Every scheme by name: the built-ins, then the plugins' in the order they registered (a later
    one replaces an earlier one of its name)."""
    return {scheme.scheme: scheme
            for scheme in collected(plugin_manager(sys.modules[__name__]).hook.lgpt_store_schemes())}


def open_store(url: str | None = None, index_dir: str | os.PathLike | None = None, name: str | None = None,
               api_key: str | None = None, pdf_store: str | os.PathLike | None = None) -> Store:
    """`url`: local (default: <index-dir>/<name>), qdrant://HOST:PORT/COLLECTION, qdrants://... (https)
    or qdrant+path://DIR/COLLECTION (Qdrant's in-process mode), or a plugin's scheme; also from $LGPT_STORE."""
    url = url or os.environ.get("LGPT_STORE") or "local"
    scheme = url if url == "local" else (url.partition("://")[0] if "://" in url else "")
    schemes = registered_schemes()
    if scheme not in schemes:
        forms = [known.form for known in schemes.values()]
        raise UsageError(f"--store {url}: expected {', '.join(forms[:-1])} or {forms[-1]}.")
    request = StoreRequest(url, index_dir, name, api_key or os.environ.get("QDRANT_API_KEY"),
                           Path(pdf_store) if pdf_store else None)
    return schemes[scheme].open(request)
