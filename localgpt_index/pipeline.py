"""Feeding the model: conversion and rendering run ahead of it, through a bounded queue.

Conversions (each a LibreOffice process) run in a small thread pool a few
documents ahead; a producer thread renders pages (each render a pdftoppm
process) in document order into a queue of at most `queue_pages` pages. The
model thread only takes pages off the queue, so it waits for a page only when
conversion and rendering are truly slower than it, and memory is bounded by the
queue, not by the corpus.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from PIL import Image

from .convert import ConverterSet
from .discover import IMAGE, MARKDOWN, OFFICE, SourceFile
from .errors import DocumentError
from .render import image_file_pages, pdf_page_count, render_pdf_pages

RENDER_CHUNK = 8  # pages per pdftoppm call


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
    image: Image.Image | None = None
    document: OpenedDocument | None = None  # with "end"
    error: DocumentError | None = None


def open_document(
    source: SourceFile, converters: ConverterSet, workdir: Path, render_size: tuple[int, int] | None
) -> OpenedDocument:
    """Convert if needed and count pages; images are decoded right away (they are one page, or a few)."""
    if source.size == 0:
        raise DocumentError("discover", "the file is empty (0 bytes)")
    if source.kind == IMAGE:
        images = image_file_pages(source.path, render_size)
        return OpenedDocument(images=images, pages=len(images))
    pdf, converter = source.path, None
    if source.kind in (OFFICE, MARKDOWN):
        chosen = converters.for_suffix(source.suffix)
        pdf, converter = chosen.convert(source.path, workdir), chosen.name
    return OpenedDocument(pdf=pdf, pages=pdf_page_count(pdf), converter=converter)


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
    ) -> None:
        self.sources = sources
        self.converters = converters
        self.staging = staging
        self.render_size = render_size
        self.convert_workers = max(1, convert_workers)
        self.timings = timings
        self._queue: queue.Queue[PageEvent | None] = queue.Queue(maxsize=max(1, queue_pages))
        self._stop = threading.Event()

    def _open(self, number: int) -> OpenedDocument:
        started = time.perf_counter()
        try:
            return open_document(self.sources[number], self.converters, self.staging / f"doc-{number}", self.render_size)
        finally:
            self.timings("convert", time.perf_counter() - started)

    def _put(self, event: PageEvent | None) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(event, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        opening: dict[int, Future] = {}
        window = self.convert_workers + 1
        with ThreadPoolExecutor(self.convert_workers, thread_name_prefix="lgpt-convert") as pool:
            try:
                for number in range(len(self.sources)):
                    for ahead in range(number, min(len(self.sources), number + window)):
                        if ahead not in opening:
                            opening[ahead] = pool.submit(self._open, ahead)
                    try:
                        document = opening.pop(number).result()
                        if not self._send_pages(number, document):
                            return
                    except DocumentError as exc:
                        if not self._put(PageEvent(number, "error", error=exc)):
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
            if not self._put(PageEvent(number, "page", image=image)):
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
