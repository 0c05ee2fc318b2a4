"""Remove documents from an index: a new generation without them."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

from .errors import IndexProblem
from .store import IndexStore


@dataclass
class RemoveReport:
    index: str
    generation: int | None = None
    removed: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    pages_removed: int = 0


def remove_documents(store: IndexStore, paths: list[str | os.PathLike], wait_s: float = 0.0) -> RemoveReport:
    """Drop the documents at `paths` (a folder drops everything under it)."""
    report = RemoveReport(index=str(store.root))
    with store.lock(wait_s):
        manifest = store.read_manifest()
        if manifest is None:
            raise IndexProblem(f"no index at {store.root}.")
        drop: set[str] = set()
        for raw in paths:
            target = os.path.abspath(raw)
            prefix = target.rstrip(os.sep) + os.sep
            hits = [d.path for d in manifest.documents if d.path == target or d.path.startswith(prefix)]
            if hits:
                drop.update(hits)
            else:
                report.not_found.append(str(raw))
        if not drop:
            return report
        kept = [d for d in manifest.documents if d.path not in drop]
        report.removed = sorted(drop)
        report.pages_removed = sum(d.pages for d in manifest.documents if d.path in drop)
        live = {d.segment for d in kept}
        new = replace(
            manifest,
            generation=manifest.generation + 1,
            documents=kept,
            segments={k: v for k, v in manifest.segments.items() if k in live},
            created=time.time(),
        )
        store.commit(new)
        report.generation = new.generation
    return report
