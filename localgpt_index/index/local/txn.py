"""The local transaction: segments staged on disk, PDFs in the PDF store, commits that switch HEAD."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..checksums import block_checksums
from ..files import TMP_PREFIX as _TMP_PREFIX
from ..files import plain_files, sweep_temporary
from ..files import write_atomic as _write_atomic
from ..manifest import (
    Checksum,
    Document,
    Failure,
    Head,
    Manifest,
    ModelInfo,
    Segment,
    Settings,
)
from ..pdfstore import PdfStore
from ..txn import assemble_manifest, live_segments, write_error
from ..txn.staged import StagedWriter
from .segments import FileSegmentSink


class Transaction:
    """One writer's changes to an index: staged files, then commits that switch HEAD.

    Commit as often as wanted (a plain build commits every batch); each commit is one new
    generation. Files staged but never committed are deleted when the transaction ends.
    """

    def __init__(self, store: Any, base: Manifest | None, generation: int) -> None:  # an IndexStore (a cycle to import)
        self.store = store
        self.base = base
        self.generation = generation  # the generation HEAD points to now
        self.current = base  # the last manifest committed (or the base)
        self._segments: dict[str, Segment] = dict(base.segments) if base else {}
        self._staged_segments: set[str] = set()
        self.pdfs = PdfStore(store.root)
        self.previous: Manifest | None = None  # the generation before `current` (a slow reader may still be on it)
        self._writers: list[StagedWriter] = []
        self.needs_upgrade = False  # the index is in an older format: the next commit writes the current one

    @property
    def root(self) -> Path:
        return self.store.root

    def pdf_path(self, rel: str) -> Path:
        return self.store.root / rel

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Turn any OSError into one message that says what the index keeps."""
        try:
            yield
        except OSError as exc:
            raise write_error(str(self.root), exc, self.generation) from None

    def segment_writer(self, dim: int) -> StagedWriter:
        with self.writing():
            self.store.segments_dir.mkdir(parents=True, exist_ok=True)
            writer = StagedWriter(FileSegmentSink(self.store.segments_dir, dim), dim)
        self._writers.append(writer)
        return writer

    def finish_segment(self, writer: StagedWriter) -> Segment | None:
        """Seal a writer's segment (None when it received no page) and stage it for the next commit."""
        self._writers.remove(writer)
        if not writer.pages:
            writer.discard()
            return None
        with self.writing():
            try:
                segment = writer.seal()
            except BaseException:
                writer.discard()
                raise
        self._segments[segment.id] = segment
        self._staged_segments.add(segment.id)
        return segment

    def write_segment(self, pages: Sequence[np.ndarray], dim: int, refs: Sequence[PageRef] | None = None) -> Segment:
        """A whole segment at once (imports, tests)."""
        writer = self.segment_writer(dim)
        with self.writing():
            for number, page in enumerate(pages):
                writer.append(page, refs[number] if refs else None)
        segment = self.finish_segment(writer)
        if segment is None:
            raise ValueError("a segment needs at least one page")
        return segment

    def store_pdf(self, pdf: Path) -> tuple[str, str]:
        """Keep a converted PDF, named by the sha256 of its own bytes; returns its name and sha256."""
        with self.writing():
            return self.pdfs.put(pdf)

    def commit(
        self,
        documents: Sequence[Document],
        model: ModelInfo,
        settings: Settings,
        failures: Sequence[Failure] = (),
        in_progress: Sequence[Document] = (),
    ) -> Manifest:
        """Make a new generation of exactly these documents; returns its manifest."""
        live = live_segments(documents, in_progress)
        missing = live - set(self._segments)
        if missing:
            raise ValueError(f"documents name segments this transaction does not know: {sorted(missing)[:3]}")
        with self.writing():
            segments = {sid: self._upgraded(self._segments[sid]) for sid in sorted(live)}
            manifest = assemble_manifest(self.generation + 1, model, settings, segments, documents, in_progress, failures)
            raw = manifest.to_json()
            name = f"gen-{manifest.generation:08d}.json"
            _write_atomic(self.root / name, raw)
            failpoint("before-head")
            head = Head(format=manifest.format, generation=manifest.generation, manifest=name, sha256=hashlib.sha256(raw).hexdigest())
            _write_atomic(self.root / "HEAD", head.model_dump_json().encode())
            failpoint("after-head")
        self.previous, self.current, self.generation = self.current, manifest, manifest.generation
        self._staged_segments -= live
        self.pdfs.committed(manifest)
        self._collect([m for m in (manifest, self.previous) if m is not None])
        return manifest

    def _upgraded(self, segment: Segment) -> Segment:
        """Format 1's word sums (already checked when the index was opened) replaced by XXH3."""
        if segment.checksum is None or segment.checksum.algorithm == "xxh3_64":  # None: no files to check
            return segment
        path = self.store.segments_dir / f"{segment.id}.vectors.npy"
        upgraded = segment.model_copy(update={"checksum": Checksum(algorithm="xxh3_64", blocks=block_checksums(path))})
        self._segments[segment.id] = upgraded
        return upgraded

    def _collect(self, keep: list[Manifest]) -> None:
        """Delete files that neither the new nor the previous generation names (a reader that
        has just read the old HEAD can still open it), nor this transaction has staged."""
        live_manifests = {f"gen-{m.generation:08d}.json" for m in keep}
        live_segments = {s for m in keep for s in m.segments} | self._staged_segments
        try:
            for path in self.root.iterdir():
                if path.name.startswith("gen-") and path.name.endswith(".json") and path.name not in live_manifests:
                    path.unlink(missing_ok=True)
            for path in plain_files(self.store.segments_dir):
                if not path.name.startswith(_TMP_PREFIX) and path.name.split(".")[0] not in live_segments:
                    path.unlink(missing_ok=True)
        except OSError:
            pass  # collection is best effort; the next commit tries again
        self.pdfs.collect(keep)

    def collect_temporary(self) -> None:
        """Temporary files of writers that were killed (only the lock holder writes, so none is live)."""
        sweep_temporary([self.root, self.store.segments_dir])
        self.pdfs.sweep_temporary()

    def discard_staged(self) -> None:
        """At the end: close segment writers still open, and delete what was staged but never committed."""
        for writer in list(self._writers):
            writer.discard()
        self._writers.clear()
        live = self.current
        live_segments = set(live.segments) if live else set()
        try:
            for sid in self._staged_segments - live_segments:
                for suffix in (".vectors.npy", ".offsets.npy"):
                    (self.store.segments_dir / f"{sid}{suffix}").unlink(missing_ok=True)
        except OSError:
            pass  # the next writer's commit collects them
        self._staged_segments.clear()
        self.pdfs.discard([self.current, self.previous])
