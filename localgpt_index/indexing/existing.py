"""A change to an index that must exist already (remove, upgrade): its transaction and base generation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.errors import IndexProblem
from ..index.format.manifest import Manifest
from ..index.local.store import LocalStore


@contextmanager
def changing_existing(store: LocalStore, wait_s: float = 0.0) -> Iterator[tuple[Any, Manifest]]:
    """The writer's transaction and the generation it starts from; IndexProblem where there is no index
    (checked before the lock is taken, and again under it: another writer may have just removed it)."""
    if not store.exists():
        raise IndexProblem(f"no index at {store.location}.")
    with store.begin(wait_s) as txn:
        if txn.base is None:
            raise IndexProblem(f"no index at {store.location}.")
        yield txn, txn.base
