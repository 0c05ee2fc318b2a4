"""One transaction for both stores (`Transaction`), and the segment writer callers get from either.

`Transaction`: staging, the commit template, the error guard and the bookkeeping after a commit;
the segment writer callers get from either store (`SegmentWriter`);
begin()'s template (`open_transaction`); the manifest a commit assembles; and the one message a
failed write gives (what the index keeps, and what to do about a full disk).

What differs between a local folder and a Qdrant collection is the backend's (`Backend`: local/txn.py,
qdrant/txn.py): how it recovers, stores rows, publishes a generation, collects and discards; and how
rows are kept (`SegmentSink`: a file on disk, points in Qdrant). Validation, the row count and the
"write-vectors" failpoint live in `SegmentWriter` once.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from ..core.errors import IndexProblem, IndexWriteError, write_failure
from ..core.failpoints import failpoint
from ..core.types import PageRef
from .artifact_registry import registered_artifacts
from .artifacts import (
    Artifact,
    BlobSink,
    BlobSource,
    PartWriter,
    blob_names,
    build_artifacts,
    part_writers,
    seal_parts,
    with_derived_parts,
)
from .format.files import NotDurable
from .format.manifest import (
    REBUILD_HINT,
    ArtifactRef,
    BlobRef,
    Document,
    Failure,
    Manifest,
    ModelInfo,
    PartRef,
    Segment,
    Settings,
)
from .format.pdfstore import PdfStore


T = TypeVar("T")
NO_PAGE = "a Qdrant store needs to know whose page each vector block is"


class SegmentSink(Protocol):
    """The backend half of a segment writer."""

    def write(self, row: int, block: np.ndarray, page: PageRef | None) -> None: ...

    def flush(self) -> None:
        """Make what was written so far reach its storage (called after row 1, before "write-vectors")."""
        ...

    def seal(self, lengths: list[int], dim: int) -> Segment: ...

    def discard(self) -> None:
        """Let go of what was written (local: the temporary files; Qdrant: nothing, discard's filter does it)."""
        ...


class SegmentWriter:
    """Pages of one segment, appended as they are encoded; sealed by `finish_segment`.

    `dtype`: what the backend stores (float16 on disk, float32 for Qdrant's client); `needs_page`:
    the backend records whose page each row is (Qdrant), so `page` may not be None. Registered
    artifacts' part writers (`parts`) are fed every page beside the vectors; `extra` is what else
    the caller knows of the page (a mapping, e.g. {"text": ...}), passed to them as is."""

    def __init__(self, sink: SegmentSink, dim: int, dtype: type = np.float16, needs_page: bool = False,
                 parts: Mapping[str, PartWriter] | None = None) -> None:
        self.sink, self.dim, self.dtype, self.needs_page = sink, dim, dtype, needs_page
        self.lengths: list[int] = []
        self.parts: dict[str, PartWriter] = dict(parts or {})

    @property
    def pages(self) -> int:
        return len(self.lengths)

    def append(self, vectors: np.ndarray, page: PageRef | None = None, extra: Mapping[str, object] | None = None) -> int:
        """One page's (tokens, dim) vectors; returns its row in the segment."""
        if page is None and self.needs_page:
            raise ValueError(NO_PAGE)
        block: np.ndarray = np.ascontiguousarray(vectors, dtype=self.dtype)
        if block.ndim != 2 or block.shape[1] != self.dim or block.shape[0] < 1:
            raise ValueError(f"a page of shape {block.shape}, expected (tokens >= 1, {self.dim})")
        row = len(self.lengths)
        self.sink.write(row, block, page)
        self.lengths.append(int(block.shape[0]))
        for part in self.parts.values():
            part.add(row, block, page, extra or {})
        if row == 1:
            self.sink.flush()
            failpoint("write-vectors")
        return row

    def seal(self) -> Segment:
        return self.sink.seal(self.lengths, self.dim)

    def discard(self) -> None:
        self.sink.discard()
        for part in self.parts.values():
            part.discard()


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
    """The backend half of a transaction (local/txn.py, qdrant/txn.py)."""

    location: str
    dtype: type
    needs_page: bool
    unused_artifacts: frozenset[str]  # artifacts whose parts this store does not write (no reader of it would use them)

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
                 pdfs: PdfStore | None, artifacts: Sequence[Artifact] | None = None, recorded: Manifest | None = None) -> None:
        """`recorded`: a damaged generation's manifest that still reads, where there is no base (a rebuild)."""
        self.backend, self.hold, self.pdfs = backend, hold, pdfs
        self.artifacts = tuple(a for a in (registered_artifacts() if artifacts is None else artifacts)
                               if a.name not in backend.unused_artifacts)
        self.base = base
        self.recorded = base if base is not None else recorded  # the model and settings are taken from it
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

    def replace_part(self, segment_id: str, name: str, make: Callable[[PartRef, BlobSource, BlobSink], PartRef]) -> None:
        """A segment's part of artifact `name` made anew from its current one (`make`: the part, where to read its
        blobs, where to write new ones), its vectors untouched (page text read after they were committed);
        the next commit names it, and the generations before keep the part they name."""
        segment = self.staging.segments[segment_id]
        with self.writing():
            part = make(segment.parts[name], self.backend.base_blobs(), self.blobs)
        self.staging.segments[segment_id] = segment.model_copy(update={"parts": {**segment.parts, name: part}})

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
                                   self.backend.base_blobs(), self.blobs, settings) if self.artifacts else {}
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


class StoreParts(Protocol):
    """What a store gives begin()'s template (`open_transaction`)."""

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

    def recorded_base(self) -> Manifest | None:
        """A damaged generation's manifest where it still reads (its vectors damaged, say), for what a rebuild keeps
        of it: the model and the settings it records; None where it does not read either."""
        ...

    def backend(self, base: Manifest | None, rebuild: bool, hold: Hold) -> Backend: ...

    def pdf_store(self) -> PdfStore | None: ...


@contextmanager
def open_transaction(parts: StoreParts, wait_s: float, rebuild: bool) -> Iterator[Transaction]:
    """begin() of both stores: refusals before any work, the writer's hold, the base generation (a
    damaged one stops unless rebuilding), recovery, and whatever happens, what was staged and not
    committed discarded at the end."""
    parts.before_write()
    with parts.hold(wait_s) as hold:
        found = base_or_rebuild(parts.read_base, rebuild)
        base, generation = found if found is not None else (None, parts.damaged_base())
        transaction = Transaction(parts.backend(base, rebuild, hold), hold, base, generation, parts.pdf_store(),
                                  recorded=parts.recorded_base() if found is None else None)
        transaction.recover()
        with discarding(transaction):
            yield transaction


def _by_path(doc: Document) -> bytes:
    return doc.path.encode("utf-8", "surrogateescape")


def live_segments(documents: Sequence[Document], in_progress: Sequence[Document]) -> set[str]:
    """The segments a generation of these documents names."""
    return {span.segment for doc in [*documents, *in_progress] for span in doc.spans}


def assemble_manifest(generation: int, model: ModelInfo, settings: Settings, segments: dict[str, Segment],
                      documents: Sequence[Document], in_progress: Sequence[Document],
                      failures: Sequence[Failure], artifacts: dict[str, ArtifactRef] | None = None) -> Manifest:
    """The manifest of a new generation: documents ordered by their path's bytes, references checked."""
    manifest = Manifest.model_construct(
        generation=generation,
        created=time.time(),
        model=model,
        settings=settings,
        segments=segments,
        documents=sorted(documents, key=_by_path),
        in_progress=sorted(in_progress, key=_by_path),
        failures=list(failures),
        artifacts=dict(artifacts or {}),
    )
    manifest.check_references()
    return manifest


def kept(generation: int) -> str:
    """What an index whose HEAD names `generation` keeps, for people."""
    return f"generation {generation}" if generation else "no generation (it is still empty)"


def write_error(location: str, exc: OSError, generation: int) -> IndexWriteError:
    """An OSError while writing, said once: where, why, what the index keeps, and what to do. A full
    disk or quota and an I/O error are transient (TransientWriteError): a watcher tries again."""
    reason = exc.strerror or str(exc)
    kind = write_failure(exc, IndexWriteError)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "Free some space and run the command again: a build carries on from the last commit."
    else:
        hint = "Fix the cause (permissions, the disk) and run the command again."
    return kind(f"could not write to {location}: {reason}; the index keeps {kept(generation)}.", hint=hint)


def not_durable(location: str, exc: OSError, generation: int) -> IndexWriteError:
    """HEAD was renamed into place (readers see `generation`), but the fsync of its folder failed."""
    reason = exc.strerror or str(exc)
    return write_failure(exc, IndexWriteError)(
        f"could not make generation {generation} of {location} durable: {reason}; it answers queries now, but a power "
        "loss may take the index back to the generation before it.",
        hint="Fix the disk, then run the command again (`lgpt-index verify` checks the index).")


def base_or_rebuild(read: Callable[[], T], rebuild: bool) -> T | None:
    """begin()'s first step in both backends: the generation a writer starts from. A damaged index
    stops here, nothing changed, pointing to --rebuild; with `rebuild` it is None (start afresh)."""
    try:
        return read()
    except IndexProblem as exc:
        if not rebuild:
            raise IndexProblem(f"{exc.message} Nothing was changed.", hint=REBUILD_HINT) from None
        return None


@contextmanager
def discarding(transaction: Transaction) -> Iterator[Transaction]:
    """begin()'s last step in both backends: whatever happens, what was staged and not committed goes."""
    try:
        yield transaction
    finally:
        transaction.discard_staged()
