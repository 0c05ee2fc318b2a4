"""One transaction for both stores (`Transaction`): staging, the commit template, the error
guard and the bookkeeping after a commit. What differs between a local folder and a Qdrant
collection is the backend's (`Backend`): how it recovers, stores rows, publishes a generation,
collects and discards."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..artifacts import (
    Artifact,
    BlobSink,
    BlobSource,
    blob_names,
    build_artifacts,
    part_writers,
    seal_parts,
    with_derived_parts,
)
from ..artifact_registry import registered_artifacts
from ..format.manifest import BlobRef, Document, Failure, Manifest, ModelInfo, Segment, Settings
from ..format.files import NotDurable
from ..format.pdfstore import PdfStore
from . import assemble_manifest, live_segments, not_durable, write_error
from .staged import NO_PAGE, SegmentSink, SegmentWriter


@dataclass
class Staging:
    """What a transaction knows of: every segment (the base's and its own), those it staged and no
    commit named yet, its open writers, and whether it wrote anything since the last commit."""

    segments: dict[str, Segment] = field(default_factory=dict)
    staged: set[str] = field(default_factory=set)
    writers: list[SegmentWriter] = field(default_factory=list)
    wrote: bool = False
    blobs: set[str] = field(default_factory=set)  # artifact blobs written and not yet named by a commit


class _StagingSink:
    """The backend's blob sink, with what it writes staged (discarded unless a commit names it)."""

    def __init__(self, inner: BlobSink, staging: Staging) -> None:
        self.inner, self.staging = inner, staging

    def put(self, data: bytes, ext: str) -> BlobRef:
        ref = self.inner.put(data, ext)
        self.staging.blobs.add(ref.name)
        return ref


class Hold(Protocol):
    """What the writer's hold (the local lock, the Qdrant lease) gives the core."""

    token: str

    def fence(self) -> None:
        """Stop (LeaseLost) unless this writer still holds the index (local: always does)."""
        ...


class Backend(Protocol):
    """The backend half of a transaction (local/backend.py, qdrant/backend.py)."""

    location: str
    dtype: type
    needs_page: bool

    def attach(self, txn: Transaction) -> None: ...

    def translate(self) -> AbstractContextManager[None]:
        """Errors of the backend's own kind into IndexProblem/IndexWriteError (local: nothing to do)."""
        ...

    def recover(self) -> bool:
        """Under the hold, before any write: undo what a killed writer left; True: an older format."""
        ...

    def sink(self, dim: int) -> SegmentSink: ...

    def blob_sink(self) -> BlobSink:
        """Where this transaction's artifact blobs go."""
        ...

    def base_blobs(self) -> BlobSource:
        """Where the generation it follows keeps its blobs (an incremental artifact reads them)."""
        ...

    def pdf_path(self, rel: str) -> Path: ...

    def prepare(self, documents: list[Document], in_progress: list[Document], generation: int,
                dim: int) -> tuple[list[Document], list[Document]]:
        """Before the manifest (Qdrant: pages copied, shown and removed; local: nothing)."""
        ...

    def segment_record(self, segment: Segment) -> Segment: ...

    def write_catalog(self, manifest: Manifest) -> object: ...

    def publish(self, manifest: Manifest, receipt: object) -> None: ...

    def after_publish(self) -> None: ...

    def collect(self, keep: list[Manifest]) -> None: ...

    def discard(self, keep: list[Manifest]) -> None: ...


class Transaction:
    """One writer's changes to an index: staged segments and PDFs, then commits that each publish a
    generation. Commit as often as wanted (a plain build commits every batch); what was staged and
    never committed is discarded when the transaction ends (`discard_staged`)."""

    def __init__(self, backend: Backend, hold: Hold, base: Manifest | None, generation: int,
                 pdfs: PdfStore | None, artifacts: Sequence[Artifact] | None = None) -> None:
        self.backend, self.hold, self.pdfs = backend, hold, pdfs
        self.artifacts = tuple(registered_artifacts() if artifacts is None else artifacts)
        self.base = base
        self.current = base  # the last manifest committed (or the base)
        self.previous: Manifest | None = None  # the generation before `current` (a slow reader may still be on it)
        self.generation = generation  # the generation HEAD points to now
        self.needs_upgrade = False  # the index is in an older format: the next commit writes the current one
        self.staging = Staging(segments=dict(base.segments) if base else {})
        backend.attach(self)
        self._blobs: BlobSink | None = None

    @property
    def blobs(self) -> BlobSink:
        """The artifact blob sink (staged), opened on first use."""
        if self._blobs is None:
            self._blobs = _StagingSink(self.backend.blob_sink(), self.staging)
        return self._blobs

    @property
    def token(self) -> str:
        return self.hold.token

    def fence(self) -> None:
        self.hold.fence()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """The one error guard: an OSError says what the index keeps and what to do; the backend
        translates its own errors (Qdrant: client errors, a lost lease passes untouched)."""
        with self.backend.translate():
            try:
                yield
            except OSError as exc:
                if isinstance(exc, (ConnectionError, TimeoutError)):  # a server's, not a disk's: the backend says it
                    raise
                raise write_error(self.backend.location, exc, self.generation) from None

    def recover(self) -> None:
        """Under the hold, before any write: what killed writers left is undone or swept."""
        with self.writing():
            if self.pdfs is not None:
                self.pdfs.recover()
            self.needs_upgrade = self.backend.recover() or self.needs_upgrade

    # staging

    def segment_writer(self, dim: int, without: Collection[str] = ()) -> SegmentWriter:
        artifacts = [a for a in self.artifacts if a.name not in without]
        with self.writing():
            writer = SegmentWriter(self.backend.sink(dim), dim, self.backend.dtype, self.backend.needs_page,
                                  part_writers(artifacts, dim))
        self.staging.writers.append(writer)
        return writer

    def finish_segment(self, writer: SegmentWriter) -> Segment | None:
        """Seal a writer's segment (None when it received no page) and stage it for the next commit."""
        self.staging.writers.remove(writer)
        if not writer.pages:
            writer.discard()
            return None
        with self.writing():
            try:
                segment = seal_parts(writer.seal(), writer.parts, self.blobs)
            except BaseException:
                writer.discard()
                raise
        self.stage(segment)
        return segment

    def stage(self, segment: Segment) -> None:
        self.staging.segments[segment.id] = segment
        self.staging.staged.add(segment.id)

    def write_segment(self, pages: Sequence[np.ndarray], dim: int, refs: Sequence[PageRef] | None = None) -> Segment:
        """A whole segment at once (imports, tests)."""
        if refs is None and self.backend.needs_page:
            raise ValueError(NO_PAGE)
        writer = self.segment_writer(dim)
        with self.writing():
            for number, page in enumerate(pages):
                writer.append(page, refs[number] if refs else None)
        segment = self.finish_segment(writer)
        if segment is None:
            raise ValueError("a segment needs at least one page")
        return segment

    def store_pdf(self, pdf: Path) -> tuple[str, str] | None:
        """Keep a converted PDF, named by the sha256 of its own bytes: (its name, its sha256);
        None: this store keeps no PDFs."""
        if self.pdfs is None:
            return None
        with self.writing():
            return self.pdfs.put(pdf)

    def pdf_path(self, rel: str) -> Path:
        """A stored PDF, checked (inside the store, a regular file)."""
        return self.backend.pdf_path(rel)

    # commit

    def commit(self, documents: Sequence[Document], model: ModelInfo, settings: Settings,
               failures: Sequence[Failure] = (), in_progress: Sequence[Document] = ()) -> Manifest:
        """Make a new generation of exactly these documents; returns its manifest."""
        missing = live_segments(documents, in_progress) - set(self.staging.segments)
        if missing:
            raise ValueError(f"documents name segments this transaction does not know: {sorted(missing)[:3]}")
        following = self.generation + 1
        with self.writing():
            documents, in_progress = self.backend.prepare(list(documents), list(in_progress), following,
                                                          model.dim or settings.dim or 128)
            live = live_segments(documents, in_progress)
            segments = self._live(live)
            refs = build_artifacts(self.artifacts, following, self.current, documents, in_progress, segments,
                                   self.backend.base_blobs(), self.blobs) if self.artifacts else {}
            manifest = assemble_manifest(following, model, settings, segments, documents, in_progress, failures, refs)
            self.fence()
            receipt = self.backend.write_catalog(manifest)
            failpoint("before-head")
            self.fence()
            try:
                self.backend.publish(manifest, receipt)
            except NotDurable as exc:
                self._committed(manifest, live)  # readers see it: what it names is kept, and the error says so
                raise not_durable(self.backend.location, exc, manifest.generation) from None
            failpoint("after-head")
            self.backend.after_publish()
        self._committed(manifest, live)
        return manifest

    def _live(self, live: set[str]) -> dict[str, Segment]:
        """The live segments as the manifest records them (the backend's upgrade, parts derived where missing)."""
        segments = {sid: self.backend.segment_record(self.staging.segments[sid]) for sid in sorted(live)}
        if self.artifacts:
            segments = with_derived_parts(self.artifacts, segments, self.backend.base_blobs(), self.blobs)
        self.staging.segments.update(segments)
        return segments

    def _committed(self, manifest: Manifest, live: set[str]) -> None:
        """After HEAD: the new generation is current; what it names is no longer staged; what no kept
        generation (the new one, and the previous one a slow reader may still be on) names is collected."""
        self.previous, self.current, self.generation = self.current, manifest, manifest.generation
        self.staging.staged -= live
        self.staging.blobs -= blob_names([manifest])
        self.staging.wrote = bool(self.staging.staged)
        keep = self._keep()
        self.backend.collect(keep)
        if self.pdfs is not None:
            self.pdfs.committed(manifest)
            self.pdfs.collect(keep)

    def _keep(self) -> list[Manifest]:
        return [m for m in (self.current, self.previous) if m is not None]

    def discard_staged(self) -> None:
        """At the end: open writers closed, and what was staged but never committed deleted (best effort)."""
        for writer in self.staging.writers:
            writer.discard()
        self.staging.writers.clear()
        if self.pdfs is not None:
            self.pdfs.discard([self.current, self.previous])
        self.backend.discard(self._keep())
        self.staging.staged.clear()
        self.staging.blobs.clear()
        self.staging.wrote = False
