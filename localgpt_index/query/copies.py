"""Copies collapsed: the pages of byte-identical documents (one content hash) answer as one hit naming every path.

A folder often holds a file twice (a report and its copy). Their pages score alike and would fill the
ranks with one page; here the first-ranked copy of a page stands for all of them, the others named in
its `copies`. Every front end asks through the query core, so all of them answer alike; a request with
`all_copies` lists them apart. The candidate lists are made deeper by `extra` so that k distinct pages
still come back."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.metadata import matches
from ..core.types import SearchHit
from ..index.format.manifest import Document


class Copies:
    """The documents of one generation that share their content with another, by content hash."""

    def __init__(self, documents: Sequence[Document]) -> None:
        groups: dict[str, list[Document]] = {}
        for doc in documents:
            groups.setdefault(doc.sha256, []).append(doc)
        self._groups = {sha256: sorted(docs, key=lambda doc: doc.path) for sha256, docs in groups.items() if len(docs) > 1}
        self._largest = max((len(docs) for docs in self._groups.values()), default=1)
        self._duplicate_pages = sum((len(docs) - 1) * max(doc.pages for doc in docs) for docs in self._groups.values())

    def extra(self, depth: int) -> int:
        """How many candidates beyond `depth` a list needs to hold `depth` distinct pages: each distinct page
        takes at most `largest` places, and there are no more repeated places than the copies' pages."""
        return min(depth * (self._largest - 1), self._duplicate_pages)

    def collapse(self, hits: Sequence[SearchHit], k: int, filters: dict[str, str] | None = None) -> list[SearchHit]:
        """The first `k` distinct pages of `hits` (ranked), ranked again from 1, each naming its copies
        (those the filters keep, in path order) in `copies`."""
        if not self._groups:
            return [hit if hit.rank == rank else hit.changed(rank=rank) for rank, hit in enumerate(hits[:k], 1)]
        kept: list[SearchHit] = []
        seen: set[tuple[str, int]] = set()
        for hit in hits:
            if len(kept) == k:
                break
            if (hit.sha256, hit.page) in seen:
                continue
            seen.add((hit.sha256, hit.page))
            others = tuple(doc.path for doc in self._groups.get(hit.sha256, ())
                           if doc.path != hit.path and hit.page <= doc.pages and (not filters or matches(doc.metadata, filters)))
            kept.append(hit.changed(rank=len(kept) + 1, copies=others))
        return kept
