"""Remove documents from an index: a new generation without them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..index.local.store import LocalStore
from .existing import changing_existing


@dataclass
class RemoveReport:
    index: str
    generation: int | None = None
    removed: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    pages_removed: int = 0


def remove_documents(store: LocalStore, paths: list[str | os.PathLike], wait_s: float = 0.0) -> RemoveReport:
    """Drop the documents at `paths` (a folder drops everything under it)."""
    report = RemoveReport(index=store.location)
    with changing_existing(store, wait_s) as (txn, manifest):
        drop: set[str] = set()
        for raw in paths:
            target = os.path.abspath(raw)
            prefix = target.rstrip(os.sep) + os.sep
            hits = [d.path for d in [*manifest.documents, *manifest.in_progress] if d.path == target or d.path.startswith(prefix)]
            if hits:
                drop.update(hits)
            else:
                report.not_found.append(os.fspath(raw))
        if not drop:
            return report
        report.removed = sorted(drop)
        report.pages_removed = sum(d.pages for d in manifest.documents if d.path in drop)
        new = txn.commit(
            [d for d in manifest.documents if d.path not in drop],
            manifest.model,
            manifest.settings,
            [f for f in manifest.failures if f.path not in drop],
            [d for d in manifest.in_progress if d.path not in drop],
        )
        report.generation = new.generation
    return report
