"""The type checker's proof that both backends fit the protocols (index/protocols.py).

Nothing here runs: `tests/test_index_protocols.py` type-checks this module with mypy, so a store
or a view that drifts from its protocol (a missing method, a changed signature) fails there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .local.store import LocalStore
    from .protocols import Store, View
    from .qdrant.store import QdrantStore
    from .qdrant.view import QdrantView
    from .view import LocalView

    def _stores(local: LocalStore, qdrant: QdrantStore) -> tuple[Store, Store]:
        return local, qdrant

    def _views(local: LocalView, qdrant: QdrantView) -> tuple[View, View]:
        return local, qdrant
