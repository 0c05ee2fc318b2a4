"""lgpt-index: index folders of everyday documents for visual retrieval with ColPali-family models.

The library behind the `lgpt-index` command. Heavy dependencies (torch, byaldi)
load only when a model is used.
"""

from __future__ import annotations

__version__ = "0.2.0"

__all__ = ["__version__", "build_index", "BuildOptions", "open_index", "Index", "SearchHit",
           "open_store", "IndexStore", "index_path", "load_rules", "page_image", "LgptError"]

# public name -> the module that defines it (the other five are above)
_EXPORTS = {
    "open_store": "stores",
    "IndexStore": "store",
    "index_path": "store",
    "load_rules": "metadata",
    "page_image": "pages",
    "LgptError": "errors",
}


def __getattr__(name: str):
    if name in ("build_index", "BuildOptions"):
        from . import build

        return getattr(build, name)
    if name in ("open_index", "Index", "SearchHit"):
        from . import search

        return getattr(search, name)
    if name in _EXPORTS:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(name)
