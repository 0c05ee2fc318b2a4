"""`begin()`'s template for both stores (`open_transaction`): refusals before any work, the writer's
hold, the base generation (a damaged one stops unless rebuilding), recovery, and whatever happens,
what was staged and not committed discarded at the end. Each store supplies its `StoreParts`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from ..format.manifest import Manifest
from ..format.pdfstore import PdfStore
from . import base_or_rebuild, discarding
from .core import Backend, Hold, Transaction


class StoreParts(Protocol):
    """What a store gives the template."""

    def before_write(self) -> None:
        """Refusals before anything is created (Qdrant: another tool's collection); local: nothing."""
        ...

    def hold(self, wait_s: float) -> AbstractContextManager[Hold]: ...

    def read_base(self) -> tuple[Manifest | None, int]:
        """The current generation, checked (IndexProblem when damaged), and its number."""
        ...

    def damaged_base(self) -> int:
        """The generation a rebuild of a damaged index numbers after."""
        ...

    def backend(self, base: Manifest | None, rebuild: bool, hold: Hold) -> Backend: ...

    def pdf_store(self) -> PdfStore | None: ...


@contextmanager
def open_transaction(parts: StoreParts, wait_s: float, rebuild: bool) -> Iterator[Transaction]:
    parts.before_write()
    with parts.hold(wait_s) as hold:
        found = base_or_rebuild(parts.read_base, rebuild)
        base, generation = found if found is not None else (None, parts.damaged_base())
        transaction = Transaction(parts.backend(base, rebuild, hold), hold, base, generation, parts.pdf_store())
        transaction.recover()
        with discarding(transaction):
            yield transaction
