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
import shutil
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from PIL import Image

from . import processes
from .convert import ConverterSet, check_signature
from .discover import IMAGE, MARKDOWN, OFFICE
from ..core.errors import page_failure
from ..core.errors import DocumentError
from .render import (
    DEFAULT_RENDER_TIMEOUT_S,
    PagePoints,
    PixelBudget,
    RenderSize,
    image_file_pages,
    image_frame_count,
    read_pdf_pages,
    render_pdf_pages,
)

RENDER_CHUNK = 8  # pages per pdftoppm call
# While the model loads, pages are rendered this far ahead, using a core that would otherwise wait.
# They wait as files in the staging folder (1.8 MB a ColQwen2.5 page, 0.6 MB a ColPali one), not in
# memory: the build's peak RSS is often the model's load, and must not grow with this.
AHEAD_BYTES = 512 << 20
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


@dataclass
class OpenedDocument:
    """A document ready to render: its PDF (converted or not) or image file, and its page count."""

    pdf: Path | None = None
    image: Path | None = None
    pages: int = 0
    converter: str | None = None
    notes: tuple[str, ...] = ()  # what conversion changed (references dropped to stay inside the folder)
    points: tuple[PagePoints, ...] = ()  # every page's size, where the render size depends on it


@dataclass
class PageEvent:
    number: int  # the document's position in the work list
    kind: str  # "open" (its page count is known), "page", "end" (all its pages were sent), "error"
    image: object = None  # the page, as the encoder's prepare_page left it
    document: OpenedDocument | None = None  # with "open" and "end"
    error: DocumentError | None = None


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


class PageFeed:
    """Iterate PageEvents for `sources`, produced ahead of the consumer.

    Documents go out as their opening jobs finish (a PDF never waits behind a slow
    conversion); a document's own events always go out in order, from one thread.
    Each event costs O(1): no list of pending documents is scanned.
    """

    def __init__(
        self,
        sources: list[FeedSource],
        converters: ConverterSet,
        staging: Path,
        render_size: RenderSize,
        queue_pages: int,
        convert_workers: int = 2,
        timings: Callable[[str, float], None] = lambda stage, seconds: None,
        prepare: Callable | None = lambda image: image,
        render_timeout_s: float = DEFAULT_RENDER_TIMEOUT_S,
        root: Path | None = None,
    ) -> None:
        self.sources = sources
        self.root = root  # the indexed folder: converted HTML may only reference files inside it
        self.converters = converters
        self.staging = staging
        self.render_size = render_size
        self.convert_workers = max(1, convert_workers)
        self.timings = timings
        # per-page preprocessing for the model, done here, off its thread. None: not known yet (the
        # model is loading); events then wait, their pages in files, up to AHEAD_BYTES (set_prepare)
        self.prepare = prepare
        self.render_timeout_s = render_timeout_s
        self._queue: queue.Queue[PageEvent | None] = queue.Queue(maxsize=max(1, queue_pages))
        self._stop = threading.Event()
        self.processes = processes.ProcessScope.under_current()  # its conversions and renders: close() stops them
        self._failure: BaseException | None = None
        self._producer: threading.Thread | None = None
        self._ahead: deque[PageEvent | None] = deque()  # rendered before prepare was known; the producer's own
        self._ahead_bytes = 0
        self._ahead_folder: Path | None = None
        self._refused: set[int] = set()  # documents a page of which the encoder's processor refused
        self._prepare_known = threading.Event()
        if prepare is not None:
            self._prepare_known.set()

    def set_prepare(self, prepare: Callable) -> None:
        """The encoder is ready: pages rendered while it loaded are prepared and go out first."""
        self.prepare = prepare
        self._prepare_known.set()

    def start(self) -> "PageFeed":
        """Start converting and rendering now, before the pages are asked for (once)."""
        if self._producer is None:
            self._producer = threading.Thread(target=self._produce_guarded, name="lgpt-render", daemon=True)
            self._producer.start()
        return self

    @property
    def queue_pages(self) -> int:
        """Pages this feed holds ahead of the consumer, at most."""
        return self._queue.maxsize

    def set_queue_pages(self, pages: int) -> None:
        """Hold up to `pages` pages ahead of the consumer from now on (the batch is known once the model is)."""
        with self._queue.mutex:
            self._queue.maxsize = max(1, pages)
            self._queue.not_full.notify_all()

    def close(self) -> None:
        """Give up a started feed that will not be read: its external processes are ended now."""
        if self._producer is not None:
            self._end(finished=False)

    def _end(self, finished: bool) -> None:
        self._stop.set()
        if not finished:  # interrupted, or the consumer gave up: end the external processes now
            self.processes.stop()
        if self._producer is not None:
            self._producer.join()
        if self._ahead_folder is not None:  # pages set aside and never read (a feed given up)
            shutil.rmtree(self._ahead_folder, ignore_errors=True)

    def _open_job(self, numbers: list[int]) -> dict[int, OpenedDocument | DocumentError]:
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
            for number, pdf in zip(staged, converter.convert_staged(list(staged.values()))):
                try:
                    if isinstance(pdf, DocumentError):
                        raise pdf
                    results[number] = replace(self._open_pdf(pdf), converter=converter.name, notes=tuple(notes[number]))
                except DocumentError as exc:
                    results[number] = exc
        self.timings("convert", time.perf_counter() - started)
        return dict(sorted(results.items()))

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
        """A PDF's page count, and its pages' sizes where they decide the render size: one pdfinfo."""
        info = read_pdf_pages(pdf, self.render_timeout_s, points=isinstance(self.render_size, PixelBudget))
        return OpenedDocument(pdf=pdf, pages=info.count, points=info.points)

    def _put(self, event: PageEvent | None) -> bool:
        """Pass an event on (False once the feed is stopping). While the model loads, events wait
        here, their pages in files, until AHEAD_BYTES of pages have been rendered, then for the encoder."""
        if self._prepare_known.is_set():
            return self._drain_ahead() and self._deliver(event)
        if isinstance(event, PageEvent) and event.kind == "page":
            event = replace(event, image=self._set_aside(event.image))
        self._ahead.append(event)
        if event is not None and self._ahead_bytes < AHEAD_BYTES:
            return True
        while not self._prepare_known.wait(timeout=0.2):
            if self._stop.is_set():
                return False
        return self._drain_ahead()

    def _set_aside(self, image: Image.Image) -> Path | Image.Image:
        """A page that waits for the encoder, written to the staging folder (kept in memory, and
        nothing more rendered, if it cannot be)."""
        if self._ahead_folder is None:
            self._ahead_folder = Path(tempfile.mkdtemp(prefix="ahead-", dir=self.staging))
        path = self._ahead_folder / f"{len(self._ahead)}-{time.monotonic_ns()}.ppm"
        try:
            image.save(path, "PPM")
        except OSError:
            self._ahead_bytes = AHEAD_BYTES
            return image
        self._ahead_bytes += path.stat().st_size
        return path

    def _drain_ahead(self) -> bool:
        """Prepare and pass on the events that waited for the encoder (the producer's thread only)."""
        while self._ahead:
            if not self._deliver(self._ahead.popleft()):
                return False
        self._ahead_bytes = 0
        return True

    def _deliver(self, event: PageEvent | None) -> bool:
        if event is not None and event.number in self._refused:
            return True  # a page of the document was refused: the consumer has its error
        if event is not None and event.kind == "page":
            event = self._prepared(event)
        while not self._stop.is_set():
            try:
                self._queue.put(event, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _prepared(self, event: PageEvent) -> PageEvent:
        """The page prepared for the model, or the document's error where its processor refuses the
        page (a bug of ours is no page's fault: it propagates)."""
        image = event.image
        if isinstance(image, Path):
            image = _read_set_aside(image)
        started = time.perf_counter()
        try:
            event = replace(event, image=self.prepare(image))
        except Exception as exc:
            failure = page_failure("encode", exc)
            if failure is None:
                raise
            self._refused.add(event.number)
            event = PageEvent(event.number, "error", error=failure)
        self.timings("prepare", time.perf_counter() - started)
        return event

    def _produce(self) -> None:
        jobs = plan_jobs(self.sources, self.converters)
        window = self.convert_workers + 1
        opening: dict[Future, int] = {}
        next_job = 0
        with ThreadPoolExecutor(self.convert_workers, "lgpt-convert", self.processes.enter_thread) as pool:
            try:
                while (next_job < len(jobs) or opening) and not self._stop.is_set():
                    while next_job < len(jobs) and len(opening) < window:
                        opening[pool.submit(self._open_job, jobs[next_job])] = next_job
                        next_job += 1
                    # pages rendered while the model loaded go out as soon as it is ready, not after a slow conversion
                    if self._prepare_known.is_set() and not self._drain_ahead():
                        return
                    done, _ = wait(list(opening), timeout=0.1 if self._ahead else 0.5, return_when=FIRST_COMPLETED)
                    for future in sorted(done, key=opening.__getitem__):
                        del opening[future]
                        if not self._send_job(future.result()):
                            return
            except BaseException as exc:
                self._fail_feed(exc)
                raise
            finally:
                for future in opening:
                    future.cancel()
                if self._failure is None:
                    self._put(None)

    def _fail_feed(self, exc: BaseException) -> None:
        """End the feed with `exc`, recorded before the end is signalled: a consumer that saw the
        end first would take a feed that lost documents for a complete one."""
        if self._failure is not None or isinstance(exc, processes.Stopped):
            return
        self._failure = exc
        self._ahead.clear()  # their set-aside files go with the staging folder
        self._deliver(None)

    def _send_job(self, opened: dict[int, OpenedDocument | DocumentError]) -> bool:
        for number, document in opened.items():
            try:
                if isinstance(document, DocumentError):
                    raise document
                if not self._send_pages(number, document):
                    return False
            except DocumentError as exc:
                if not self._put(PageEvent(number, "error", error=exc)):
                    return False
        return True

    def _send_pages(self, number: int, document: OpenedDocument) -> bool:
        if not self._put(PageEvent(number, "open", document=document)):
            return False
        first = self.sources[number].first_page
        if document.image is not None:
            pages: Iterator[Image.Image] = image_file_pages(document.image, self.render_size, first)
        else:
            pages = self._render(document, first)
        for image in pages:
            if not self._put(PageEvent(number, "page", image=image)):
                return False
        return self._put(PageEvent(number, "end", document=document))

    def _render(self, document: OpenedDocument, first_page: int) -> Iterator[Image.Image]:
        for first in range(first_page, document.pages + 1, RENDER_CHUNK):
            started = time.perf_counter()
            last = min(document.pages, first + RENDER_CHUNK - 1)
            points = document.points[first - 1 : last] if document.points else None
            chunk = render_pdf_pages(document.pdf, self.render_size, first, last, self.render_timeout_s, points)
            self.timings("render", time.perf_counter() - started)
            yield from chunk

    def __iter__(self) -> Iterator[PageEvent]:
        self.start()
        finished = False
        try:
            while True:
                event = self._queue.get()
                if event is None:
                    break
                yield event
            if self._failure is not None:
                raise self._failure
            finished = True
        finally:
            self._end(finished)

    def _produce_guarded(self) -> None:
        self.processes.enter_thread()
        try:
            self._produce()
        except processes.Stopped:
            pass
        except BaseException as exc:  # surfaced in the consumer thread
            self._fail_feed(exc)


def _read_set_aside(path: Path) -> Image.Image:
    with Image.open(path) as image:
        image.load()
    path.unlink()
    return image


class _NeedsConversion(Exception):
    """An office or Markdown file: opened by a converter, in a batch."""
