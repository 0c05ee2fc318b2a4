"""lgpt-index: index folders of everyday documents for visual retrieval with ColPali-family models.

The library behind the `lgpt-index` command. Heavy dependencies (torch, byaldi)
load only when a model is used.
"""

from __future__ import annotations

__version__ = "0.2.0"

__all__ = ["__version__", "build_index", "BuildOptions", "open_index", "Index", "SearchHit"]


def __getattr__(name: str):
    if name in ("build_index", "BuildOptions"):
        from . import build

        return getattr(build, name)
    if name in ("open_index", "Index", "SearchHit"):
        from . import search

        return getattr(search, name)
    raise AttributeError(name)
