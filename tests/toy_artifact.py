"""A toy derived artifact for the artifact plumbing's tests (tests/test_txn_artifacts.py): per
segment, each page's token count (a part, fed beside the vectors); per generation, a total (built
at commit from the live parts). The module is a plugin (its `lgpt_artifacts` hook adds the artifact):
a test registers it with the plugin manager, and a CLI process started with this module in
$LGPT_PLUGINS (and tests/ on PYTHONPATH) writes it too."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from localgpt_index.core.plugins import hookimpl
from localgpt_index.core.types import PageRef
from localgpt_index.index.artifacts import Artifact, BlobSink, BlobSource, CommitContext
from localgpt_index.index.format.manifest import ArtifactRef, PartRef, Segment

NAME = "toy"


class TokenCounts:
    """Part writer: one number per page (its token count); `extra["text"]` kept when given."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.texts: list[str | None] = []

    def add(self, row: int, vectors: np.ndarray, page: PageRef | None, extra: Mapping[str, object]) -> None:
        assert row == len(self.tokens)
        self.tokens.append(int(vectors.shape[0]))
        text = extra.get("text")
        self.texts.append(str(text) if text is not None else None)

    def seal(self, sink: BlobSink) -> PartRef:
        blob = sink.put(json.dumps({"tokens": self.tokens, "texts": self.texts}).encode(), "json")
        return PartRef(version=1, blobs=[blob], meta={"pages": len(self.tokens)})

    def discard(self) -> None:
        self.tokens.clear()


class Toy:
    name = NAME
    version = 1

    def part_writer(self, dim: int) -> TokenCounts:
        return TokenCounts()

    def derive_part(self, segment: Segment, source: BlobSource, sink: BlobSink) -> PartRef | None:
        return None  # segments written before the artifact existed stay without (the total skips them)

    def build(self, ctx: CommitContext, sink: BlobSink) -> ArtifactRef:
        counts = {sid: json.loads(ctx.source.read(part.blobs[0]))["tokens"] for sid, part in ctx.parts(NAME).items()}
        tokens = sum(counts[s.segment][row] for d in ctx.documents for s in d.spans if s.segment in counts
                     for row in range(s.first, s.first + s.pages))
        pages = sum(d.pages for d in ctx.documents)
        total = {"generation": ctx.generation, "pages": pages, "tokens": tokens,
                 "added": sorted(d.path for d in ctx.added), "removed": sorted(d.path for d in ctx.removed)}
        blob = sink.put(json.dumps(total, sort_keys=True).encode(), "json")
        return ArtifactRef(version=1, blobs=[blob], meta={"pages": pages})

    def check(self, ref: PartRef, source: BlobSource, full: bool) -> list[str]:
        data = json.loads(source.read(ref.blobs[0]))
        found = data["pages"] if isinstance(ref, ArtifactRef) else len(data["tokens"])
        return [] if found == ref.meta["pages"] else [f"{found} pages, its entry says {ref.meta['pages']}"]

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> dict:
        total = json.loads(source.read(ref.blobs[0])) if ref is not None else None
        return {"total": total, "parts": {sid: json.loads(source.read(p.blobs[0])) for sid, p in parts.items()}}


TOY = Toy()


@hookimpl
def lgpt_artifacts() -> tuple[Artifact, ...]:
    return (TOY,)
