"""The type checker's proof that both backends fit the protocols (index/protocols.py).

Nothing here runs: `tests/test_index_protocols.py` type-checks this module with mypy, so a store
or a transaction that drifts from its protocol (a missing method, a changed signature) fails there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .txn.staged import StagedWriter as LocalSegmentWriter
    from .local.store import IndexStore
    from .local.txn import Transaction as LocalTransaction
    from .protocols import IndexView, SegmentWriter, Store, Transaction
    from .qdrant.store import (
        QdrantSegmentWriter,
        QdrantStore,
        QdrantTransaction,
        QdrantView,
    )
    from .view import LocalView

    def _stores(local: IndexStore, qdrant: QdrantStore) -> tuple[Store, Store]:
        return local, qdrant

    def _transactions(local: LocalTransaction, qdrant: QdrantTransaction) -> tuple[Transaction[Any], Transaction[Any]]:
        return local, qdrant

    def _writers(local: LocalSegmentWriter, qdrant: QdrantSegmentWriter) -> tuple[SegmentWriter, SegmentWriter]:
        return local, qdrant

    def _views(local: LocalView, qdrant: QdrantView) -> tuple[IndexView, IndexView]:
        return local, qdrant
