"""Per-generation derived artifacts: data an index keeps beside its vectors (a full-text index, binary codes).

They are written by the same transaction, named by the same manifest, checked by the same verify.

Two granularities, both driven by the transaction core (txn/core.py), for both stores:
- a *part* per segment, fed page by page beside the vectors (`PartWriter.add`, through
  `SegmentWriter.append(vectors, page, extra)`), sealed with the segment into `Segment.parts[name]`;
- a per-generation *artifact*, built at commit (`Artifact.build(ctx, sink)`), recorded in
  `Manifest.artifacts[name]` before the catalog and HEAD are written, so HEAD names vectors and
  artifacts of one generation at once.
Bytes go to blobs named by their sha256 (`BlobSink.put`; local: `artifacts/<sha>.<ext>`; Qdrant:
catalog chunks keyed by the blob's name), read back checked (`BlobSource.read`: size and sha256);
blobs no kept generation names are collected with the segments. Readers open an artifact lazily
(`View.artifact(name)`, None when absent) and never write.

Artifacts come from the plugin manager's `lgpt_artifacts` hook (core/plugins.py), built-ins (the
page text and full-text index, the binary codes) and plugins alike, listed by index/artifact_registry.py;
see docs/dev/transaction-core.md, "How to add an artifact".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..core.types import PageRef
from .format.manifest import ArtifactRef, BlobRef, Document, Manifest, PartRef, Segment, Settings

__all__ = ["Artifact", "ArtifactRef", "BlobRef", "BlobSink", "BlobSource", "CommitContext", "PartRef", "PartWriter"]


class BlobSink(Protocol):
    """Where a writer stores an artifact's bytes: content-named, durable before a commit names them."""

    def put(self, data: bytes, ext: str) -> BlobRef: ...


class BlobSource(Protocol):
    """Where a reader (or a writer, for the base generation's) reads them back."""

    def read(self, ref: BlobRef) -> bytes:
        """The blob's bytes, checked against `ref` (size, sha256): IndexProblem/MissingIndexFile if not."""
        ...


class PartWriter(Protocol):
    """A segment's part of an artifact: fed every page beside the vectors, sealed with the segment."""

    def add(self, row: int, vectors: np.ndarray, page: PageRef | None, extra: Mapping[str, object]) -> None: ...

    def seal(self, sink: BlobSink) -> PartRef: ...

    def discard(self) -> None: ...


@dataclass(frozen=True)
class CommitContext:
    """What a commit gives `Artifact.build`: the generation it follows (its manifest and this
    artifact's ref in it), the documents added, removed and kept since, the live segments (with
    their parts), the base's blobs, so an incremental artifact touches only changed rows, and the
    settings the new generation records."""

    generation: int
    base: Manifest | None
    base_ref: ArtifactRef | None
    documents: list[Document]
    in_progress: list[Document]
    added: list[Document]
    removed: list[Document]
    kept: list[Document]
    segments: dict[str, Segment]
    source: BlobSource
    settings: Settings | None = None

    def parts(self, name: str) -> dict[str, PartRef]:
        """The parts of artifact `name` of the live segments that have one."""
        return {sid: seg.parts[name] for sid, seg in self.segments.items() if name in seg.parts}


class Artifact(Protocol):
    """One kind of derived data. Every method may return None / do nothing where it does not apply."""

    name: str  # a lowercase word: the key in Manifest.artifacts and Segment.parts
    version: int

    def part_writer(self, dim: int) -> PartWriter | None: ...

    def derive_part(self, segment: Segment, source: BlobSource, sink: BlobSink) -> PartRef | None:
        """A part for a live segment written without one (before the artifact existed), at commit."""
        ...

    def build(self, ctx: CommitContext, sink: BlobSink) -> ArtifactRef | None: ...

    def check(self, ref: PartRef, source: BlobSource, full: bool) -> list[str]:
        """Problems beyond the blobs' sizes and hashes (which the caller checks first)."""
        ...

    def open(self, ref: ArtifactRef | None, parts: Mapping[str, PartRef], source: BlobSource) -> object: ...


def blob_names(manifests: Iterable[Manifest | None]) -> set[str]:
    """The blobs these generations name (their artifacts and their segments' parts)."""
    names: set[str] = set()
    for manifest in manifests:
        if manifest is None:
            continue
        refs: list[PartRef] = [*manifest.artifacts.values()]
        refs += [part for seg in manifest.segments.values() for part in seg.parts.values()]
        names.update(blob.name for ref in refs for blob in ref.blobs)
    return names


def part_writers(artifacts: Iterable[Artifact], dim: int) -> dict[str, PartWriter]:
    return {a.name: writer for a in artifacts if (writer := a.part_writer(dim)) is not None}


def seal_parts(segment: Segment, writers: Mapping[str, PartWriter], sink: BlobSink) -> Segment:
    """The segment with its parts (their blobs written); unchanged when no artifact writes parts."""
    if not writers:
        return segment
    parts = {name: writer.seal(sink) for name, writer in writers.items()}
    return segment.model_copy(update={"parts": {**segment.parts, **parts}})


def changes(base: Manifest | None, documents: list[Document]) -> tuple[list[Document], list[Document], list[Document]]:
    """(added, removed, kept) documents between `base` and a new generation: a changed document is
    removed (its old entry) and added (its new one)."""
    old = {d.path: d for d in (base.documents if base else [])}
    new = {d.path: d for d in documents}
    kept = [d for d in documents if old.get(d.path) == d]
    added = [d for d in documents if old.get(d.path) != d]
    removed = [d for path, d in old.items() if new.get(path) != d]
    return added, removed, kept


def with_derived_parts(artifacts: Iterable[Artifact], segments: dict[str, Segment], source: BlobSource,
                       sink: BlobSink) -> dict[str, Segment]:
    """Live segments lacking an artifact's part get one where the artifact can derive it."""
    result = dict(segments)
    for artifact in artifacts:
        for sid, segment in result.items():
            if artifact.name not in segment.parts:
                part = artifact.derive_part(segment, source, sink)
                if part is not None:
                    result[sid] = segment.model_copy(update={"parts": {**segment.parts, artifact.name: part}})
    return result


def build_artifacts(artifacts: Iterable[Artifact], generation: int, base: Manifest | None, documents: list[Document],
                    in_progress: list[Document], segments: dict[str, Segment], source: BlobSource,
                    sink: BlobSink, settings: Settings | None = None) -> dict[str, ArtifactRef]:
    """Each artifact's per-generation build, given what changed since `base` (the generation the commit follows)."""
    added, removed, kept = changes(base, documents)
    refs: dict[str, ArtifactRef] = {}
    for artifact in artifacts:
        base_ref = base.artifacts.get(artifact.name) if base else None
        ctx = CommitContext(generation, base, base_ref, documents, in_progress, added, removed, kept, segments, source,
                            settings)
        ref = artifact.build(ctx, sink)
        if ref is not None:
            refs[artifact.name] = ref
    return refs
