"""A writer's changes to a Qdrant index: staged points, then commits (see qdrant/store.py's docstring)."""

from __future__ import annotations

import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ...core.errors import IndexProblem
from ...core.failpoints import failpoint
from ...core.types import PageRef
from ..errors import IndexWriteError
from ..manifest import (
    FORMAT,
    Document,
    Failure,
    Manifest,
    ModelInfo,
    Segment,
    Settings,
)
from ..txn import assemble_manifest, kept, live_segments, write_error
from . import commit as steps
from . import recover as setup
from .ids import (
    PENDING,
    LeaseLost,
    _flt,
    _models,
    catalog_of,
)
from .lease import _Lease
from ..txn.staged import StagedWriter
from .writer import point_writer


class QdrantTransaction:
    """A writer's changes to a Qdrant index; see the module's docstring for what each commit does."""

    def __init__(self, store: Any, physical: str | None, base: Manifest | None, rebuild: bool,  # a QdrantStore
                 lease: _Lease | None = None) -> None:
        self.store = store
        self.lease = lease
        self.base = base
        self.current = base
        self.previous: Manifest | None = None  # the generation before `current` (a slow reader may still be on it)
        self.generation = base.generation if base else 0
        self.pdfs = store.pdfs()
        self.needs_upgrade = False
        self.previous_physical = physical
        self.rebuild = rebuild or physical is None or base is None
        self.physical = f"{store.spec.collection}__{uuid.uuid4().hex[:10]}" if self.rebuild or physical is None else physical
        self._created = False
        self._segments: dict[str, Segment] = dict(base.segments) if base else {}
        self._owners: dict[str, list[str]] = {}  # staged segment -> the path of each row
        self._staged: set[str] = set()
        self._writers: list[StagedWriter] = []
        self._committed_owners: dict[tuple[str, int], str] | None = None
        self.token = lease.token if lease else uuid.uuid4().hex
        self._wrote = False  # points upserted since the last commit (some perhaps in no finished segment)

    @property
    def client(self):
        return self.store.client

    @property
    def catalog(self) -> str:
        return catalog_of(self.physical)

    @contextmanager
    def writing(self) -> Iterator[None]:
        try:
            with self.store.talking("writing"):
                try:
                    yield
                except OSError as exc:  # the PDF store, a full disk of the in-process mode (not the network)
                    if isinstance(exc, (ConnectionError, TimeoutError)):
                        raise
                    raise write_error(self.store.location, exc, self.generation) from None
        except LeaseLost:
            raise
        except IndexProblem as exc:
            if isinstance(exc, IndexWriteError):
                raise
            self.fence()  # a takeover (its recovery deleted what we wrote) is said as such
            raise IndexWriteError(f"{exc.message} The index keeps {kept(self.generation)}.",
                                  hint="Fix the cause and run the command again: a build carries on from the last commit.") from None

    def fence(self) -> None:
        """Stop (LeaseLost) unless this writer still holds its lease with time to spare."""
        if self.lease is not None:
            self.lease.check()

    # set-up and recovery

    def recover(self) -> None:
        """Undo what a writer killed before its commit left: points and catalog chunks above HEAD's
        generation, pages it made visible or removed, and physical collections of a rebuild that
        never switched the alias."""

        models = _models()
        g = self.generation
        ours = re.compile(rf"^{re.escape(self.store.spec.collection)}__[0-9a-f]{{10}}(__catalog)?$")
        keep = {self.previous_physical, catalog_of(self.previous_physical)} if self.previous_physical else set()
        if self.pdfs is not None:
            self.pdfs.sweep_temporary()
        with self.writing():
            for name in [c.name for c in self.client.get_collections().collections]:
                if ours.match(name) and name not in keep and self.store.ours_shaped(name):
                    self.client.delete_collection(name)
            if self.previous_physical is None or self.base is None:
                return
            physical = self.previous_physical
            setup.claim_head(self, physical)
            self.client.delete(physical, points_selector=models.FilterSelector(filter=_flt(gen_written=(g + 1, PENDING))))
            self.client.set_payload(physical, {"visible_from": PENDING}, points=_flt(visible_from=(g + 1, PENDING - 1)))
            self.client.delete_payload(physical, keys=["gen_removed"], points=_flt(gen_removed=(g + 1, PENDING)))
            self.client.delete(catalog_of(physical), points_selector=models.FilterSelector(
                filter=_flt(generation=(g + 1, PENDING))))
            if self.store.legacy_paths and not self.rebuild:
                setup.upgrade_paths(self)
            if self.store.head_format != FORMAT and not self.rebuild:
                self.needs_upgrade = True  # an older catalog (migrated on read): the next commit writes the current format
        self._created = not self.rebuild

    # staging

    def segment_writer(self, dim: int) -> StagedWriter:
        setup.ensure_collections(self, dim)
        writer = point_writer(self, dim)
        self._writers.append(writer)
        return writer

    def finish_segment(self, writer: StagedWriter) -> Segment | None:
        self._writers.remove(writer)
        if not writer.pages:
            return None
        segment = writer.seal()
        self._segments[segment.id] = segment
        self._staged.add(segment.id)
        return segment

    def write_segment(self, pages: Sequence[np.ndarray], dim: int, refs: Sequence[PageRef] | None = None) -> Segment:
        if refs is None:
            raise ValueError("a Qdrant store needs to know whose page each vector block is")
        writer = self.segment_writer(dim)
        for page, ref in zip(pages, refs):
            writer.append(page, ref)
        segment = self.finish_segment(writer)
        if segment is None:
            raise ValueError("a segment needs at least one page")
        return segment

    def store_pdf(self, pdf: Path) -> tuple[str, str] | None:
        """A converted PDF into the PDF store, named by its own sha256 (None without a PDF store)."""
        if self.pdfs is None:
            return None
        with self.writing():
            return self.pdfs.put(pdf)

    def pdf_path(self, rel: str) -> Path:
        return self.store.pdf_file(rel)

    # commit

    def commit(self, documents: Sequence[Document], model: ModelInfo, settings: Settings,
               failures: Sequence[Failure] = (), in_progress: Sequence[Document] = ()) -> Manifest:
        """A new generation of exactly these documents: pages of other paths copied, complete
        documents made visible, pages no document names any more removed, the catalog written,
        then HEAD replaced (and for a rebuild, the alias switched)."""
        setup.ensure_collections(self, model.dim or settings.dim or 128)
        following = self.generation + 1
        with self.writing():
            documents = [steps.owned(self, d, following) for d in documents]
            in_progress = [steps.owned(self, d, PENDING) for d in in_progress]
            failpoint("write-vectors")
            failpoint("before-switch")
            self.fence()  # nothing of the commit's switch is written by a writer that lost its lease
            steps.show(self, documents, following)
            steps.remove_unnamed(self, documents, in_progress, following)
            live = live_segments(documents, in_progress)
            segments = {sid: self._segments[sid] for sid in sorted(live)}
            manifest = assemble_manifest(following, model, settings, segments, documents, in_progress, failures)
            self.fence()
            steps.write_catalog(self, manifest)
            failpoint("before-head")
            self.fence()
            steps.write_head(self, manifest)
            failpoint("after-head")
            if self.physical != self.previous_physical:
                self.fence()
                steps.switch_alias(self)
        self.previous, self.current, self.generation, self._committed_owners = self.current, manifest, following, None
        self._staged -= live
        self._wrote = bool(self._staged)
        self._collect(following)
        if self.pdfs is not None:
            self.pdfs.committed(manifest)
            self.pdfs.collect([manifest, self.previous])
        return manifest

    def _collect(self, generation: int) -> None:
        """Pages removed before the previous generation, and catalogs older than it, are deleted."""
        models = _models()
        try:
            self.client.delete(self.physical, points_selector=models.FilterSelector(filter=_flt(gen_removed=(0, generation - 1))))
            self.client.delete(self.catalog, points_selector=models.FilterSelector(filter=_flt(generation=(0, generation - 2))))
        except Exception:
            pass  # best effort: the next commit tries again

    def discard_staged(self) -> None:
        """Staged points that no commit named: deleted now (a killed writer's are, by the next one)."""
        models = _models()
        self._writers.clear()
        if self.pdfs is not None:
            self.pdfs.discard([self.current, self.previous])
        if not self._staged and not self._wrote:
            return
        try:
            if self.physical != self.previous_physical:
                self.client.delete_collection(self.physical)
                self.client.delete_collection(self.catalog)
            else:  # ours only: after a takeover the points above HEAD may be the new writer's
                self.client.delete(self.physical, points_selector=models.FilterSelector(
                    filter=_flt(gen_written=(self.generation + 1, PENDING), writer=self.token)))
        except Exception:
            pass
        self._staged.clear()


QdrantSegmentWriter = StagedWriter  # the name callers imported
