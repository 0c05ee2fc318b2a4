"""Opening documents for the page feed: converting them (office files in shared runs), counting pages."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.errors import DocumentError
from .convert import ConverterSet, check_signature
from .discover import IMAGE, MARKDOWN, OFFICE
from .events import OpenedDocument
from .render import RenderSize, image_frame_count, read_pdf_pages

OnOpen = Callable[[int, OpenedDocument], None]  # told of a document (its number in the sources) once it is opened

CONVERT_BATCH = 8  # office files per LibreOffice run


@dataclass(frozen=True)
class FeedSource:
    """A document to turn into pages."""

    path: Path
    kind: str
    size: int
    first_page: int = 1  # carry on from this page (a long document whose first pages are committed)
    pdf: Path | None = None  # render this PDF (the one stored for a resumed document) instead of converting

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()


def plan_jobs(sources: list[FeedSource], converters: ConverterSet) -> list[list[int]]:
    """Group the documents into opening jobs: office files that can share a conversion run
    go together (up to CONVERT_BATCH), everything else alone. Jobs are ordered by their
    first document."""
    jobs: list[list[int]] = []
    open_batch: dict[tuple[int, str], int] = {}
    for number, source in enumerate(sources):
        key = None
        if source.kind in (OFFICE, MARKDOWN) and source.size > 0 and source.pdf is None:
            try:
                converter = converters.for_suffix(source.suffix)
                batch = converter.batch_key(source.suffix)
                key = (id(converter), batch) if batch else None
            except DocumentError:
                key = None
        if key is not None and key in open_batch and len(jobs[open_batch[key]]) < CONVERT_BATCH:
            jobs[open_batch[key]].append(number)
            continue
        if key is not None:
            open_batch[key] = len(jobs)
        jobs.append([number])
    return jobs


class DocumentOpener:
    """Opens the feed's documents, a job (several office files in one conversion run) at a time."""

    def __init__(self, sources: list[FeedSource], converters: ConverterSet, staging: Path, render_size: RenderSize,
                 render_timeout_s: float, root: Path | None, timings: Callable[[str, float], None],
                 on_open: OnOpen | None = None) -> None:
        self.sources, self.converters, self.staging = sources, converters, staging
        self.on_open = on_open  # told of each document opened, on the converter's thread: its text is read from then on
        self.render_size, self.render_timeout_s = render_size, render_timeout_s
        self.root = root  # the indexed folder: converted HTML may only reference files inside it
        self.timings = timings

    def open_job(self, numbers: list[int]) -> dict[int, OpenedDocument | DocumentError]:
        """Convert (several office files in one run where possible) and count pages."""
        started = time.perf_counter()
        results: dict[int, OpenedDocument | DocumentError] = {}
        staged: dict[int, Path] = {}
        notes: dict[int, list[str]] = {}
        converter = None
        workdir = self.staging / f"job-{numbers[0]}"
        for number in numbers:
            source = self.sources[number]
            try:
                results[number] = self._open_one(source)
            except _NeedsConversion:
                try:
                    check_signature(source.path, source.suffix)
                    converter = self.converters.for_suffix(source.suffix)
                    staged[number], notes[number] = converter.stage(source.path, workdir, f"doc-{number}", self.root)
                except DocumentError as exc:
                    results[number] = exc
            except DocumentError as exc:
                results[number] = exc
        if staged:
            assert converter is not None, "only a converter stages documents"
            for number, pdf in zip(staged, converter.convert_staged(list(staged.values()))):
                try:
                    if isinstance(pdf, DocumentError):
                        raise pdf
                    results[number] = replace(self._open_pdf(pdf), converter=converter.name, notes=tuple(notes[number]))
                except DocumentError as exc:
                    results[number] = exc
        self.timings("convert", time.perf_counter() - started)
        opened = dict(sorted(results.items()))
        for number, document in opened.items():
            if self.on_open is not None and isinstance(document, OpenedDocument):
                self.on_open(number, document)
        return opened

    def _open_one(self, source: FeedSource) -> OpenedDocument:
        if source.size == 0:
            raise DocumentError("discover", "the file is empty (0 bytes)")
        if not source.path.exists():
            raise DocumentError("discover", "the file disappeared during the build")
        if source.pdf is not None:
            return self._open_pdf(source.pdf)
        if source.kind == IMAGE:
            return OpenedDocument(image=source.path, pages=image_frame_count(source.path))
        if source.kind in (OFFICE, MARKDOWN):
            raise _NeedsConversion()
        return self._open_pdf(source.path)

    def _open_pdf(self, pdf: Path) -> OpenedDocument:
        """A PDF's page count and its pages' sizes (the render size and the text layer's turned pages read them):
        one pdfinfo, a few microseconds more a page than the count alone."""
        info = read_pdf_pages(pdf, self.render_timeout_s, points=True)
        return OpenedDocument(pdf=pdf, pages=info.count, points=info.points)


class _NeedsConversion(Exception):
    """An office or Markdown file: opened by a converter, in a batch."""
