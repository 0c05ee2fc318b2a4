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
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import cast
from pathlib import Path

from PIL import Image

from ..core.errors import DocumentError, page_failure
from ..core.failpoints import failpoint
from . import processes
from .convert import ConverterSet
from .events import DocumentDone, DocumentFailed, DocumentOpened, FeedEnded, FeedEvent, OpenedDocument, PageReady
from .opening import CONVERT_BATCH, DocumentOpener, FeedSource, OnOpen, plan_jobs
from .render import DEFAULT_RENDER_TIMEOUT_S, RenderSize, image_file_pages, render_pdf_pages

__all__ = ["AHEAD_BYTES", "CONVERT_BATCH", "RENDER_CHUNK", "FeedSource", "OpenedDocument", "PageFeed", "plan_jobs"]

RENDER_CHUNK = 8  # pages per pdftoppm call
# While the model loads, pages are rendered this far ahead, using a core that would otherwise wait.
# They wait as files in the staging folder (1.8 MB a ColQwen2.5 page, 0.6 MB a ColPali one), not in
# memory: the build's peak RSS is often the model's load, and must not grow with this.
AHEAD_BYTES = 512 << 20

Queued = FeedEvent | FeedEnded


class _SetAside:
    """Events rendered before the encoder was known, their pages in files (the producer's own)."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.events: deque[Queued] = deque()
        self.bytes = 0
        self.folder: Path | None = None

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Queued]:
        return iter(self.events)

    def add(self, event: Queued) -> bool:
        """Keep `event`; True while there is room for more."""
        if isinstance(event, PageReady):  # set aside while the model loads: a rendered page, not yet prepared
            event = replace(event, image=self._page_file(cast(Image.Image, event.image)))
        self.events.append(event)
        return not isinstance(event, FeedEnded) and self.bytes < AHEAD_BYTES

    def _page_file(self, image: Image.Image) -> Path | Image.Image:
        """A page written to the staging folder (kept in memory, and nothing more rendered, if it cannot be)."""
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="ahead-", dir=self.staging))
        path = self.folder / f"{len(self.events)}-{time.monotonic_ns()}.ppm"
        try:
            image.save(path, "PPM")
        except OSError:
            self.bytes = AHEAD_BYTES
            return image
        self.bytes += path.stat().st_size
        return path

    def drain(self, deliver: Callable[[Queued], bool]) -> bool:
        """Pass every event kept on (False, and the rest kept, once `deliver` refuses one)."""
        while self.events:
            if not deliver(self.events.popleft()):
                return False
        self.bytes = 0
        return True

    def clear(self) -> None:
        self.events.clear()  # their files go with the staging folder

    def remove_files(self) -> None:
        if self.folder is not None:  # pages set aside and never read (a feed given up)
            shutil.rmtree(self.folder, ignore_errors=True)


class PageFeed:
    """Iterate the events of `sources` (ingest/events.py), produced ahead of the consumer.

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
        root: Path | None = None, on_open: OnOpen | None = None,  # told of each document as it opens (opening.py)
    ) -> None:
        self.sources, self.converters, self.render_size, self.timings = sources, converters, render_size, timings
        self.convert_workers = max(1, convert_workers)
        self.opener = DocumentOpener(sources, converters, staging, render_size, render_timeout_s, root, timings, on_open)
        # per-page preprocessing for the model, done here, off its thread. None: not known yet (the
        # model is loading); events then wait, their pages in files, up to AHEAD_BYTES (set_prepare)
        self.prepare, self.render_timeout_s = prepare, render_timeout_s
        self._queue: queue.Queue[Queued] = queue.Queue(maxsize=max(1, queue_pages))
        self._stop = threading.Event()
        self.processes = processes.ProcessScope.under_current()  # its conversions and renders: close() stops them
        self._failure: BaseException | None = None
        self._producer: threading.Thread | None = None
        self._ahead = _SetAside(staging)
        self._refused: set[int] = set()  # documents a page of which the encoder's processor refused
        self._prepare_known = threading.Event()
        if prepare is not None:
            self._prepare_known.set()

    def set_prepare(self, prepare: Callable) -> None:
        """The encoder is ready: pages rendered while it loaded are prepared and go out first."""
        self.prepare = prepare
        self._prepare_known.set()

    def start(self) -> PageFeed:
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
        self._ahead.remove_files()

    def _put(self, event: Queued) -> bool:
        """Pass an event on (False once the feed is stopping). While the model loads, events wait
        here, their pages in files, until AHEAD_BYTES of pages have been rendered, then for the encoder."""
        if self._prepare_known.is_set():
            return self._drain_ahead() and self._deliver(event)
        if self._ahead.add(event):
            return True
        failpoint("ahead-full")  # tests: the producer now waits for the encoder, nothing more is rendered
        while not self._prepare_known.wait(timeout=0.2):
            if self._stop.is_set():
                return False
        return self._drain_ahead()

    def _drain_ahead(self) -> bool:
        """Prepare and pass on the events that waited for the encoder (the producer's thread only)."""
        return self._ahead.drain(self._deliver)

    def _deliver(self, event: Queued) -> bool:
        if not isinstance(event, FeedEnded) and event.number in self._refused:
            return True  # a page of the document was refused: the consumer has its error
        if isinstance(event, PageReady):
            assert self.prepare is not None, "set-aside pages are delivered once the encoder is known"
            event = _prepared(event, self.prepare, self.timings)
            if isinstance(event, DocumentFailed):
                self._refused.add(event.number)
        while not self._stop.is_set():
            try:
                self._queue.put(event, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        jobs = plan_jobs(self.sources, self.converters)
        window = self.convert_workers + 1
        opening: dict[Future, int] = {}
        next_job = 0
        with ThreadPoolExecutor(self.convert_workers, "lgpt-convert", self.processes.enter_thread) as pool:
            try:
                while (next_job < len(jobs) or opening) and not self._stop.is_set():
                    while next_job < len(jobs) and len(opening) < window:
                        opening[pool.submit(self.opener.open_job, jobs[next_job])] = next_job
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
                    self._put(FeedEnded())

    def _fail_feed(self, exc: BaseException) -> None:
        """End the feed with `exc`, recorded before the end is signalled: a consumer that saw the
        end first would take a feed that lost documents for a complete one."""
        if self._failure is not None or isinstance(exc, processes.Stopped):
            return
        self._failure = exc
        self._ahead.clear()
        self._deliver(FeedEnded())

    def _send_job(self, opened: dict[int, OpenedDocument | DocumentError]) -> bool:
        for number, document in opened.items():
            try:
                if isinstance(document, DocumentError):
                    raise document
                if not self._send_pages(number, document):
                    return False
            except DocumentError as exc:
                if not self._put(DocumentFailed(number, exc)):
                    return False
        return True

    def _send_pages(self, number: int, document: OpenedDocument) -> bool:
        if not self._put(DocumentOpened(number, document)):
            return False
        sent = 0
        for image in self._pages(document, self.sources[number].first_page):
            if not self._put(PageReady(number, image)):
                return False
            sent += 1
        return self._put(DocumentDone(number, sent))

    def _pages(self, document: OpenedDocument, first_page: int) -> Iterator[Image.Image]:
        if document.image is not None:
            yield from image_file_pages(document.image, self.render_size, first_page)
            return
        assert document.pdf is not None, "a document without a PDF is an image"
        for first in range(first_page, document.pages + 1, RENDER_CHUNK):
            started = time.perf_counter()
            last = min(document.pages, first + RENDER_CHUNK - 1)
            points = document.points[first - 1 : last] if document.points else None
            chunk = render_pdf_pages(document.pdf, self.render_size, first, last, self.render_timeout_s, points)
            self.timings("render", time.perf_counter() - started)
            yield from chunk

    def __iter__(self) -> Iterator[FeedEvent]:
        self.start()
        finished = False
        try:
            while True:
                event = self._queue.get()
                if isinstance(event, FeedEnded):
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


def _prepared(event: PageReady, prepare: Callable, timings: Callable[[str, float], None]) -> PageReady | DocumentFailed:
    """The page prepared for the model, or the document's error where its processor refuses the
    page (a bug of ours is no page's fault: it propagates)."""
    image = event.image
    if isinstance(image, Path):
        image = _read_set_aside(image)
    started = time.perf_counter()
    prepared: PageReady | DocumentFailed
    try:
        prepared = replace(event, image=prepare(image))
    except Exception as exc:
        failure = page_failure("encode", exc)
        if failure is None:
            raise
        prepared = DocumentFailed(event.number, failure)
    timings("prepare", time.perf_counter() - started)
    return prepared


def _read_set_aside(path: Path) -> Image.Image:
    with Image.open(path) as image:
        image.load()
    path.unlink()
    return image
