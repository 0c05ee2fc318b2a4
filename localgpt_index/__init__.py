"""lgpt-index: index folders of everyday documents for visual retrieval with ColPali-family models.

The library behind the `lgpt-index` command, and its public Python API: the names below,
re-exported lazily from the packages that define them (heavy dependencies such as torch
and byaldi load only when a model is used). The root package is the top layer: no module
of the library imports it (the version lives in `_version`).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ._version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "build_index": "localgpt_index.indexing.run",
    "BuildOptions": "localgpt_index.indexing.options",
    "BuildSettings": "localgpt_index.indexing.options",
    "ModelSpec": "localgpt_index.models.resolve",
    "open_index": "localgpt_index.query.search",
    "open_warm_index": "localgpt_index.serve.warmsearch",
    "Searcher": "localgpt_index.query.search",
    "SearchHit": "localgpt_index.core.types",
    "QueryRequest": "localgpt_index.query.request",
    "open_store": "localgpt_index.index.open",
    "LocalStore": "localgpt_index.index.local.store",
    "index_path": "localgpt_index.index.local.paths",
    "load_rules": "localgpt_index.core.metadata",
    "page_image": "localgpt_index.interop.pages",
    "LgptError": "localgpt_index.core.errors",
}

# names 0.3 exported, renamed in 0.4 (CHANGELOG.md): old name -> new name, with a DeprecationWarning
_RENAMED = {"IndexStore": "LocalStore", "Index": "Searcher"}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    if name in _RENAMED:
        import warnings

        warnings.warn(f"localgpt_index.{name} is deprecated: use localgpt_index.{_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return __getattr__(_RENAMED[name])
    raise AttributeError(f"module 'localgpt_index' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
