"""Feeding the model: conversion and rendering run ahead of it, through a bounded queue.

Conversions run in a small thread pool ahead of the model, office files in
batches (one LibreOffice run for up to CONVERT_BATCH files: its start-up is most
of the cost of a small file). A producer thread renders pages (each render a
pdftoppm process) in document order into a queue of at most `queue_pages`
pages, a document as soon as it is open (not behind a slower one). The model
thread only takes pages off the queue, so it waits only when
conversion and rendering are truly slower than it, and memory is bounded by the
queue, not by the corpus.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from PIL import Image

from .convert import ConverterSet, check_signature
from .discover import IMAGE, MARKDOWN, OFFICE, SourceFile
from .errors import DocumentError
from .render import image_file_pages, pdf_page_count, render_pdf_pages

RENDER_CHUNK = 8  # pages per pdftoppm call
CONVERT_BATCH = 8  # office files per LibreOffice run


@dataclass
class OpenedDocument:
    """A document ready to render: its PDF (converted or not) and page count, or its image pages."""

    pdf: Path | None = None
    pages: int = 0
    images: list[Image.Image] | None = None
    converter: str | None = None


@dataclass
class PageEvent:
    number: int  # the document's position in the work list
    kind: str  # "page", "end" (all its pages were sent), "error"
    image: object = None  # the page, as the encoder's prepare_page left it
    document: OpenedDocument | None = None  # with "end"
    error: DocumentError | None = None


def open_image(source: SourceFile, render_size: tuple[int, int] | None) -> OpenedDocument:
    images = image_file_pages(source.path, render_size)
    return OpenedDocument(images=images, pages=len(images))


def plan_jobs(sources: list[SourceFile], converters: ConverterSet) -> list[list[int]]:
    """Group the documents into opening jobs: office files that can share a conversion run
    go together (up to CONVERT_BATCH), everything else alone. Jobs are ordered by their
    first document."""
    jobs: list[list[int]] = []
    open_batch: dict[tuple[int, str], int] = {}
    for number, source in enumerate(sources):
        key = None
        if source.kind in (OFFICE, MARKDOWN) and source.size > 0:
            try:
                converter = converters.for_suffix(source.suffix)
                batch = converter.batch_key(source.suffix)
                key = (id(converter), batch) if batch else None
            except DocumentError:
                key = None
        if key is not None and key in open_batch and len(jobs[open_batch[key]]) < CONVERT_BATCH:
            jobs[open_batch[key]].append(number)
            continue
        jobs.append([number])
        if key is not None:
            open_batch[key] = len(jobs) - 1
    return jobs


class PageFeed:
    """Iterate PageEvents for `sources` in order, produced ahead of the consumer."""

    def __init__(
        self,
        sources: list[SourceFile],
        converters: ConverterSet,
        staging: Path,
        render_size: tuple[int, int] | None,
        queue_pages: int,
        convert_workers: int = 2,
        timings: Callable[[str, float], None] = lambda stage, seconds: None,
        prepare: Callable = lambda image: image,
    ) -> None:
        self.sources = sources
        self.converters = converters
        self.staging = staging
        self.render_size = render_size
        self.convert_workers = max(1, convert_workers)
        self.timings = timings
        self.prepare = prepare  # per-page preprocessing for the model, done here, off its thread
        self._queue: queue.Queue[PageEvent | None] = queue.Queue(maxsize=max(1, queue_pages))
        self._stop = threading.Event()

    def _open_job(self, numbers: list[int]) -> dict[int, OpenedDocument | DocumentError]:
        """Convert (several office files in one run where possible) and count pages."""
        started = time.perf_counter()
        results: dict[int, OpenedDocument | DocumentError] = {}
        staged: dict[int, Path] = {}
        converter = None
        workdir = self.staging / f"job-{numbers[0]}"
        for number in numbers:
            source = self.sources[number]
            try:
                if source.size == 0:
                    raise DocumentError("discover", "the file is empty (0 bytes)")
                if not source.path.exists():
                    raise DocumentError("discover", "the file disappeared during the build")
                if source.kind == IMAGE:
                    results[number] = open_image(source, self.render_size)
                elif source.kind in (OFFICE, MARKDOWN):
                    check_signature(source.path, source.suffix)
                    converter = self.converters.for_suffix(source.suffix)
                    staged[number] = converter.stage(source.path, workdir, f"doc-{number}")
                else:
                    results[number] = OpenedDocument(pdf=source.path, pages=pdf_page_count(source.path))
            except DocumentError as exc:
                results[number] = exc
        if staged:
            for number, pdf in zip(staged, converter.convert_staged(list(staged.values()))):
                try:
                    if isinstance(pdf, DocumentError):
                        raise pdf
                    results[number] = OpenedDocument(pdf=pdf, pages=pdf_page_count(pdf), converter=converter.name)
                except DocumentError as exc:
                    results[number] = exc
        self.timings("convert", time.perf_counter() - started)
        return results

    def _put(self, event: PageEvent | None) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(event, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        """Send documents as their opening jobs finish: a PDF need not wait behind a slow
        conversion. A document's own pages always go out in order, from this one thread."""
        jobs = plan_jobs(self.sources, self.converters)
        job_of = {number: j for j, job in enumerate(jobs) for number in job}
        opening: dict[int, Future] = {}
        left = {j: len(job) for j, job in enumerate(jobs)}
        pending = list(range(len(self.sources)))
        window = self.convert_workers + 1
        with ThreadPoolExecutor(self.convert_workers, thread_name_prefix="lgpt-convert") as pool:
            try:
                while pending:
                    for j in dict.fromkeys(job_of[n] for n in pending):  # the next jobs, in order
                        if len(opening) >= window:
                            break
                        if j not in opening:
                            opening[j] = pool.submit(self._open_job, jobs[j])
                    ready = next((n for n in pending if job_of[n] in opening and opening[job_of[n]].done()), None)
                    if ready is None:
                        wait(opening.values(), return_when=FIRST_COMPLETED)
                        continue
                    pending.remove(ready)
                    job = job_of[ready]
                    opened = opening[job].result()[ready]
                    left[job] -= 1
                    if not left[job]:
                        del opening[job]
                    try:
                        if isinstance(opened, DocumentError):
                            raise opened
                        if not self._send_pages(ready, opened):
                            return
                    except DocumentError as exc:
                        if not self._put(PageEvent(ready, "error", error=exc)):
                            return
            finally:
                for future in opening.values():
                    future.cancel()
                self._put(None)

    def _send_pages(self, number: int, document: OpenedDocument) -> bool:
        if document.images is not None:
            pages: Iterator[Image.Image] = iter(document.images)
            document.images = None
        else:
            pages = self._render(document)
        for image in pages:
            started = time.perf_counter()
            prepared = self.prepare(image)
            self.timings("prepare", time.perf_counter() - started)
            if not self._put(PageEvent(number, "page", image=prepared)):
                return False
        return self._put(PageEvent(number, "end", document=document))

    def _render(self, document: OpenedDocument) -> Iterator[Image.Image]:
        for first in range(1, document.pages + 1, RENDER_CHUNK):
            started = time.perf_counter()
            chunk = render_pdf_pages(document.pdf, self.render_size, first, min(document.pages, first + RENDER_CHUNK - 1))
            self.timings("render", time.perf_counter() - started)
            yield from chunk

    def __iter__(self) -> Iterator[PageEvent]:
        producer = threading.Thread(target=self._produce_guarded, name="lgpt-render", daemon=True)
        self._failure: BaseException | None = None
        producer.start()
        try:
            while True:
                event = self._queue.get()
                if event is None:
                    break
                yield event
            if self._failure is not None:
                raise self._failure
        finally:
            self._stop.set()
            producer.join()

    def _produce_guarded(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # surfaced in the consumer thread
            self._failure = exc
            self._put(None)
