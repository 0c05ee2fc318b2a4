"""Reading a Qdrant index's catalog: HEAD, the manifest from its chunks, the point count a reader checks.

The manifest is migrated from an older format on read."""

from __future__ import annotations

import hashlib
from typing import Any

from ...core.errors import IndexProblem
from ..format.manifest import (
    REBUILD_HINT,
    Manifest,
)
from .ids import (
    HEAD_ID,
    chunk_id,
    visible_filter,
)


def read_head(store: Any, physical: str) -> dict | None:
    with store.talking("reading HEAD"):
        if not store.client.collection_exists(store.catalog_of(physical)):
            return None
        found = store.client.retrieve(store.catalog_of(physical), [HEAD_ID], with_payload=True)
    head = dict(found[0].payload) if found else None
    return head if head and head.get("kind") == "head" else None


def read_catalog(store: Any, physical: str, head: dict) -> Manifest:
    where = f"{store.location} (generation {head.get('generation')})"
    try:
        generation, chunks, digest = int(head["generation"]), int(head["chunks"]), str(head["sha256"])
    except (KeyError, TypeError, ValueError):
        raise IndexProblem(f"{where}: the HEAD point is malformed.", hint=REBUILD_HINT) from None
    ids = [chunk_id(generation, i, head.get("chunk_key")) for i in range(chunks)]
    with store.talking("reading the catalog"):
        found = {r.id: r.payload for r in store.client.retrieve(store.catalog_of(physical), ids, with_payload=True)}
    if len(found) != chunks:
        raise IndexProblem(f"{where}: {chunks - len(found)} of {chunks} catalog chunks are missing.", hint=REBUILD_HINT)
    text = "".join(str(found[i].get("data", "")) for i in ids)
    raw = text.encode("utf-8", "surrogatepass")
    if hashlib.sha256(raw).hexdigest() != digest:
        raise IndexProblem(f"{where}: checksum mismatch; the catalog is damaged.", hint=REBUILD_HINT)
    manifest = Manifest.from_json(raw, where)
    if manifest.generation != generation:
        raise IndexProblem(f"{where}: the catalog says generation {manifest.generation}.", hint=REBUILD_HINT)
    return manifest


def check_count(store: Any, physical: str, manifest: Manifest) -> None:
    """The points a reader sees against the catalog's pages: one count, so that points deleted
    behind the index's back (another client) are damage reported now, not empty answers."""
    with store.talking("counting the points"):
        visible = store.client.count(physical, count_filter=visible_filter(manifest.generation), exact=True).count
    expected = sum(d.pages for d in manifest.documents)
    if visible != expected:
        raise IndexProblem(f"{store.location} is damaged: the catalog names {expected} pages, the collection {physical} "
                           f"holds {visible} of them (points were deleted or added by another client).",
                           hint=f"`lgpt-index verify` lists the documents concerned; {REBUILD_HINT}")
