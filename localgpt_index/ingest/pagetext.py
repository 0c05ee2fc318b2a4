"""Page text beside the encoder: each page's text handed over with its vectors, or pending (pixels first).

`PageTexts.attach` sits between an engine (local or Ray) and the commit policy. When a document
opens, its text layer is read (one pdftotext process for the document, on a thread of its own) and
the pages that need OCR (--ocr: auto, those with a text layer under OCR_MIN_CHARS visible characters;
always; never) go to a pool of OCR worker threads: each page its own pdftoppm, several PDF pages
one Tesseract process (ocrbatch.py), an image file's frame a Tesseract of its own (ocr.py). All
this runs while the engine renders and encodes the same pages. Pixels first: a batch of encoded
pages (PagesEncoded) goes on at once with `texts`, waiting only for its documents' text layers (one
cheap pdftotext each), never for OCR: a page whose OCR is not read yet goes as `PendingText` (its text
layer so far, source "pending"), committed with its vectors; `resolve` waits for its text, which the
build commits in a later generation (indexing/run.py). With `later` (--ocr later) no OCR runs in the
build at all: such pages stay pending for `read_later` (build --text-only, the next build, a watcher).
The local engine's feed tells `open` of each document as it opens it (on its opening threads), the
model's load included, so OCR overlaps the load as well.

A page whose OCR fails or times out keeps its vectors and its text layer, if any, and is reported
(`tally.warnings`); a document whose text layer cannot be read is reported once and its pages are
treated as having none. A missing Tesseract is said once per build, not once per page.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.cpus import available_cpus
from ..core.errors import DocumentError, EnvironmentMissing, UsageError
from . import processes
from .discover import IMAGE, PDF
from .events import DocumentFailed, DocumentOpened, EngineEvent, OpenedDocument, PagesEncoded
from .ocr import DEFAULT_OCR_LANG, DEFAULT_OCR_TIMEOUT_S, INSTALL_HINT, OCR_MEMORY_MIB, OcrFailed, Tesseract, pages_with_images
from .ocrbatch import OcrQueue, QueuedPage
from .opening import FeedSource
from .render import DEFAULT_RENDER_TIMEOUT_S, PagePoints
from .text import NO_TEXT, OCR_MIN_CHARS, PageText, has_text_layer, pdf_page_texts, visible_chars

if TYPE_CHECKING:
    from ..core.words import PageWords

OCR_MODES = ("auto", "always", "never")
TEXT_MODES = ("auto", "never")
Log = Callable[[str], None]
Timings = Callable[[str, float], None]


def ocr_mode(asked: str | None) -> str:
    """The --ocr mode: the one asked for, else $LGPT_OCR (a machine's or a test suite's default), else auto."""
    mode = asked or os.environ.get("LGPT_OCR") or "auto"
    if mode not in OCR_MODES:
        raise UsageError(f"{'--ocr' if asked else 'LGPT_OCR'}={mode}: expected one of {', '.join(OCR_MODES)}")
    return mode


def text_mode(asked: str | None, ocr: str | None) -> str:
    """The --text mode: auto (each page's text layer, and OCR as --ocr says) or never (pixels only: no
    text layer read, no OCR, no text stored). --text never with an explicit --ocr auto/always is a
    usage error: the two contradict each other (--ocr never goes with it; $LGPT_OCR is not asked for)."""
    mode = asked or "auto"
    if mode not in TEXT_MODES:
        raise UsageError(f"--text={mode}: expected one of {', '.join(TEXT_MODES)}")
    if mode == "never" and ocr not in (None, "never"):
        raise UsageError(f"--text never --ocr {ocr}: OCR reads page text, which --text never does not keep",
                         hint="drop --ocr (or give --ocr never) to index pixels only, or drop --text never")
    return mode


def default_ocr_workers() -> int:
    """OCR threads by default: every CPU this process may use. With the encoder's OpenMP spin short
    (indexing/run.py), OCR takes the cores the encoder leaves and every core once it is done: on 2 CPUs two
    workers built scanned pages faster than one in 10 of 13 rounds (docs/performance.md, "OCR's CPU a page")."""
    return max(1, available_cpus())


@dataclass(frozen=True)
class TextSettings:
    """How a build reads its pages' text."""

    ocr: str = "auto"
    lang: str = DEFAULT_OCR_LANG
    ocr_timeout_s: float = DEFAULT_OCR_TIMEOUT_S
    ocr_workers: int = 1
    min_chars: int = OCR_MIN_CHARS
    memory_mib: int = OCR_MEMORY_MIB
    layer_timeout_s: float = DEFAULT_RENDER_TIMEOUT_S
    tesseract: Tesseract | None = None  # None: no OCR (--ocr never, or none installed)
    later: bool = False  # --ocr later: pages that need OCR are committed pending, and not read in the build


def find_ocr(mode: str, lang: str) -> Tesseract | None:
    """Before any work: the Tesseract OCR will use (None: --ocr never, or none installed), or
    EnvironmentMissing (exit 4) for a language it lacks, or --ocr always without it."""
    if mode == "never":
        return None
    tesseract = Tesseract.find()
    if tesseract is None:
        if mode == "always":
            raise EnvironmentMissing("--ocr always: Tesseract is not installed", hint=f"{INSTALL_HINT}, or --ocr auto")
        return None
    tesseract.check_language(lang)
    return tesseract


@dataclass
class TextTally:
    """The build's pages by the source of their text, and what went wrong reading them."""

    layer: int = 0
    ocr: int = 0
    none: int = 0
    unread: int = 0  # pages that needed OCR and had none (no Tesseract, or it failed): counted in `none` or `layer` too
    pending: int = 0  # pages committed before their OCR, not read in this build (--ocr later): not in to_dict
    warnings: list[dict] = field(default_factory=list)  # {"path", "page" (None: the document), "stage", "reason"}

    def count(self, text: PageText) -> None:
        setattr(self, text.source, getattr(self, text.source) + 1)

    def to_dict(self) -> dict:
        return {"layer": self.layer, "ocr": self.ocr, "none": self.none, "unread": self.unread}


@dataclass(frozen=True)
class PendingText(PageText):
    """A page committed before its OCR was read: its text layer so far, source "pending"; `claim`
    (None: not read in this build, --ocr later) is what `PageTexts.resolve` waits on."""

    claim: object = None


@dataclass(frozen=True)
class _Outcome:
    """One page's text, and why it is not what was wanted (OCR failed, or there is no Tesseract)."""

    text: PageText
    warning: str | None = None
    no_ocr: bool = False


@dataclass(frozen=True)
class _Layer:
    pages: list[Future[_Outcome]]
    found: list[PageText]  # each page's text layer (what it keeps should its OCR fail)
    warning: str | None = None


@dataclass
class _Document:
    path: str
    first: int
    last: int
    layer: Future[_Layer]
    next: int = 0  # the next page number to hand over
    dropped: bool = False  # the document failed: its pages' text is not wanted

    def __post_init__(self) -> None:
        self.next = self.first


@dataclass(frozen=True)
class _Claim:
    """A page of an encoded batch, waiting for its text."""

    document: _Document
    page: int


def _cancel_pages(layer: Future[_Layer]) -> None:
    """A dropped document's pages not read yet are not read."""
    if not layer.cancelled() and layer.exception() is None:
        for future in layer.result().pages:
            future.cancel()


def _settled(found: PageText) -> Callable[[PageText | OcrFailed], _Outcome]:
    """A page's outcome from its OCR's: its text, or why not (it keeps what it `found`)."""
    def outcome(result: PageText | OcrFailed) -> _Outcome:
        if isinstance(result, OcrFailed):
            return _Outcome(found, f"OCR failed: {result.reason}")
        return _Outcome(result) if visible_chars(result.text) else _Outcome(found)
    return outcome


def _pictured(settings: TextSettings, pdf: Path | None, wanted: list[int], timings: Timings) -> set[int] | None:
    """--ocr auto: which of the PDF pages that want OCR draw an image (None: any may). A page with thin
    text and no image has nothing to read (an office page's title, a blank page): OCR, about a second
    of CPU a page, is not run for it. --ocr always reads every page."""
    if settings.ocr != "auto" or pdf is None or not wanted:
        return None
    started = time.perf_counter()
    try:
        return pages_with_images(pdf, min(wanted), max(wanted), settings.layer_timeout_s)
    finally:
        timings("text", time.perf_counter() - started)


def _ocr_frame(settings: TextSettings, image: Path, frame: int, found: PageText, timings: Timings) -> _Outcome:
    """An image file's frame (a PDF's pages go through the OCR queue instead, several a process)."""
    started = time.perf_counter()
    assert settings.tesseract is not None
    try:
        result: PageText | OcrFailed = settings.tesseract.read_image_frame(image, frame, settings.lang, settings.ocr_timeout_s,
                                                                      settings.memory_mib)
    except OcrFailed as exc:
        result = exc
    except OSError as exc:  # the scratch folder: a full disk
        result = OcrFailed(exc.strerror or str(exc))
    finally:
        timings("ocr", time.perf_counter() - started)
    return _settled(found)(result)


@dataclass(frozen=True)
class LaterPage:
    """A page committed with pending text, to read now: its PDF (or image file), its page (frame), its text layer."""

    path: Path
    image: bool
    page: int
    layer: str = ""


def read_later(settings: TextSettings, pages: Sequence[LaterPage], timings: Timings = lambda stage, seconds: None
               ) -> list[tuple[PageText, str | None]]:
    """The OCR of pages committed pending (build --text-only, the next build, a watcher), no model: PDF pages
    several a Tesseract process, image frames one each, `settings.ocr_workers` side by side. Each page's text
    and, where its OCR failed, why (it keeps its text layer)."""
    assert settings.tesseract is not None, "read_later needs a Tesseract"
    scope = processes.ProcessScope.under_current()
    pool = ThreadPoolExecutor(max(1, settings.ocr_workers), "lgpt-ocr", scope.enter_thread)
    queue = OcrQueue(pool, settings.tesseract, settings.lang, settings.ocr_timeout_s, settings.memory_mib,
                     settings.ocr_workers, timings)
    try:
        futures: list[Future[_Outcome]] = []
        queued: list[QueuedPage] = []
        for page in pages:
            found = PageText(page.layer, "layer") if page.layer else NO_TEXT
            if page.image:
                futures.append(pool.submit(_ocr_frame, settings, page.path, page.page, found, timings))
            else:
                queued.append(QueuedPage(page.path, page.page, Future(), _settled(found)))
                futures.append(queued[-1].future)
        queue.add(queued)
        outcomes = [future.result() for future in futures]
    finally:
        scope.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        queue.cancel()
    return [(outcome.text, outcome.warning) for outcome in outcomes]


def _done(outcome: _Outcome) -> Future[_Outcome]:
    future: Future[_Outcome] = Future()
    future.set_result(outcome)
    return future


class PageTexts:
    """Reads the text of the pages an engine encodes, beside it (see the module's docstring)."""

    def __init__(self, settings: TextSettings, sources: Sequence[FeedSource], log: Log = lambda message: None,
                 timings: Timings = lambda stage, seconds: None) -> None:
        self.settings, self.sources, self.log, self.timings = settings, sources, log, timings
        self.tally = TextTally()
        self.scope = processes.ProcessScope.under_current()  # its pdftotext and OCR processes: close() ends them
        self._layer_pool = ThreadPoolExecutor(1, "lgpt-text", self.scope.enter_thread)
        self._ocr_pool = (ThreadPoolExecutor(max(1, settings.ocr_workers), "lgpt-ocr", self.scope.enter_thread)
                          if settings.tesseract is not None and settings.ocr != "never" and not settings.later else None)
        self._documents: dict[int, _Document] = {}
        self._opened: set[int] = set()  # documents whose reading started (told by the feed or by attach)
        self._lock = threading.Lock()  # open() may be called from the feed's opening threads
        self._closed = False
        self._said: set[str] = set()  # warnings given once a build
        self._ocr_queue = (OcrQueue(self._ocr_pool, settings.tesseract, settings.lang, settings.ocr_timeout_s, settings.memory_mib,
                                    settings.ocr_workers, timings) if self._ocr_pool is not None and settings.tesseract else None)

    def attach(self, events: Iterator[EngineEvent]) -> Generator[EngineEvent, None, None]:
        """The engine's events in their order, each PagesEncoded with its pages' texts: read, or PendingText
        where OCR has not read them yet (the encoder never waits for OCR). Ended before the engine's events
        are (an error, a close), the reading ends too; run to their end, OCR goes on for `resolve`."""
        finished = False
        try:
            for event in events:
                if isinstance(event, DocumentOpened):
                    self.open(event.number, event.document)
                elif isinstance(event, DocumentFailed):
                    self.drop(event.number)
                elif isinstance(event, PagesEncoded):
                    claims = [self.claim(number) if not isinstance(result, DocumentError) else None
                              for number, result in event.pages]
                    started = time.perf_counter()
                    event = replace(event, texts=tuple(self._now(claim) if claim is not None else None for claim in claims))
                    self.timings("text_wait", time.perf_counter() - started)
                yield event
            finished = True
        finally:
            if hasattr(events, "close"):
                events.close()  # the engine's threads and processes end now, not when collected
            if not finished:
                self.close()

    def _now(self, claim: _Claim) -> PageText | None:
        """A claimed page's text once its document's text layer is read (one pdftotext), or PendingText
        where its OCR is not done (None: its document was given up)."""
        document = claim.document
        if document.dropped:
            return None
        try:
            layer = document.layer.result()
        except CancelledError:  # given up meanwhile
            return None
        index = claim.page - document.first
        if layer.pages[index].done():
            return self.take(claim)
        return PendingText(layer.found[index].text, "pending", layer.found[index].words, claim=claim)

    def read_yet(self, text: PendingText) -> PageText | None:
        """A pending page's text if its OCR is done (None: not yet, or its document was given up): no wait."""
        claim = text.claim
        if not isinstance(claim, _Claim) or claim.document.dropped or not claim.document.layer.done():
            return None
        layer = claim.document.layer.result()
        return self.resolve(text) if layer.pages[claim.page - claim.document.first].done() else None

    def resolve(self, text: PageText) -> PageText | None:
        """A page's text: a pending one's once its OCR is read (waiting for it; None: its document was given
        up, or the reading closed); any other as it is (read, or left pending: --ocr later)."""
        if not isinstance(text, PendingText) or not isinstance(text.claim, _Claim):
            return text
        try:
            return self.take(text.claim)
        except CancelledError:
            return None

    def open(self, number: int, document: OpenedDocument) -> None:
        """Start reading a document's text (its pages from the source's first page on), once: from the
        feed's opening thread as it opens the document, or when its DocumentOpened comes by."""
        source = self.sources[number]
        pdf = document.pdf or source.pdf or (source.path if source.kind == PDF else None)
        image = document.image or (source.path if source.kind == IMAGE and pdf is None else None)
        first, last = source.first_page, document.pages
        with self._lock:
            if self._closed or number in self._opened:
                return
            self._opened.add(number)
            layer = self._layer_pool.submit(self._read_layer, pdf, image, first, last, document.points)
            self._documents[number] = _Document(str(source.path), first, last, layer)

    def claim(self, number: int) -> _Claim | None:
        """The next page of document `number` (None: a document given up, or not opened)."""
        with self._lock:
            document = self._documents.get(number)
            if document is None:
                return None
            page = document.next
            document.next += 1
            if document.next > document.last:
                del self._documents[number]
        return _Claim(document, page)

    def take(self, claim: _Claim) -> PageText | None:
        """A claimed page's text, waiting for it if it is not read yet (None: its document was given up)."""
        document, page = claim.document, claim.page
        if document.dropped:
            return None
        layer = document.layer.result()
        outcome = layer.pages[page - document.first].result()
        if page == document.first and layer.warning:
            self._warn(document.path, None, "text", layer.warning)
        self.tally.count(outcome.text)
        if outcome.no_ocr:
            self.tally.unread += 1
            self._say_once("tesseract", "warning: Tesseract is not installed: pages without a text layer are indexed "
                           f"without text (visual only). To read them: {INSTALL_HINT} (`lgpt-index doctor` checks it)")
        if outcome.warning:
            self.tally.unread += 1
            self._warn(document.path, page, "ocr", outcome.warning)
        return outcome.text

    def drop(self, number: int) -> None:
        """The document failed: what of its text is not read yet is not read."""
        with self._lock:
            self._opened.add(number)  # not read if the feed opens it later
            document = self._documents.pop(number, None)
        if document is None:
            return
        document.dropped = True
        if not document.layer.cancel():
            document.layer.add_done_callback(_cancel_pages)  # now, or once its text layer is read

    def close(self) -> None:
        """End the reading: processes still running are ended, what is queued is not started."""
        with self._lock:
            self._closed = True
        self.scope.stop()
        for pool in (self._layer_pool, self._ocr_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        if self._ocr_queue is not None:
            self._ocr_queue.cancel()
        with self._lock:
            self._documents.clear()

    # on the text thread and the OCR pool

    def _read_layer(self, pdf: Path | None, image: Path | None, first: int, last: int, points: Sequence[PagePoints]) -> _Layer:
        layers: list[tuple[str, PageWords | None]] = [("", None)] * (last - first + 1)
        warning = None
        later = self.settings.later and self.settings.tesseract is not None
        if pdf is not None:
            started = time.perf_counter()
            try:
                layers = list(pdf_page_texts(pdf, first, last, self.settings.layer_timeout_s, points))
            except DocumentError as exc:
                warning = f"its text layer could not be read ({exc.reason}); its pages are indexed without it"
            self.timings("text", time.perf_counter() - started)
        texts = [text for text, _ in layers]
        wanted = [page for page, text in zip(range(first, last + 1), texts) if self._wants_ocr(text)]
        pictured = _pictured(self.settings, pdf, wanted, self.timings) if self._ocr_queue is not None or later else None
        pages: list[Future[_Outcome]] = []
        queued: list[QueuedPage] = []
        founds = [PageText(text, "layer", words) if text else NO_TEXT for text, words in layers]
        for page, text, found in zip(range(first, last + 1), texts, founds):
            if not self._wants_ocr(text) or (pictured is not None and page not in pictured):
                pages.append(_done(_Outcome(found)))
            elif later:  # read after the build (build --text-only, the next build, a watcher)
                pages.append(_done(_Outcome(PendingText(found.text, "pending", found.words))))
            elif self._ocr_pool is None or self.settings.tesseract is None:
                pages.append(_done(_Outcome(found, no_ocr=self.settings.ocr != "never")))
            elif pdf is not None:  # several pages a Tesseract process (ocrbatch.py)
                queued.append(QueuedPage(pdf, page, Future(), _settled(found)))
                pages.append(queued[-1].future)
            else:
                pages.append(self._ocr_pool.submit(self._ocr_image, image, page, found) if image else _done(_Outcome(found)))
        if queued and self._ocr_queue is not None:
            self._ocr_queue.add(queued)
        return _Layer(pages, founds, warning)

    def _wants_ocr(self, text: str) -> bool:
        if self.settings.ocr == "always":
            return True
        return self.settings.ocr == "auto" and not has_text_layer(text, self.settings.min_chars)

    def _ocr_image(self, image: Path, frame: int, found: PageText) -> _Outcome:
        return _ocr_frame(self.settings, image, frame, found, self.timings)

    # warnings, on the consumer's thread

    def _warn(self, path: str, page: int | None, stage: str, reason: str) -> None:
        if stage == "text" and "is not installed" in reason:  # poppler's pdftotext: said once, not per document
            self.tally.warnings.append({"path": path, "page": None, "stage": stage, "reason": reason[:2000]})
            self._say_once("pdftotext", f"warning: {reason}")
            return
        self.tally.warnings.append({"path": path, "page": page, "stage": stage, "reason": reason[:2000]})
        where = f"{path} page {page}" if page is not None else path
        kept = "; the page is indexed, without OCR text" if stage == "ocr" else ""
        self.log(f"warning: {where}: {reason}{kept}")

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.log(message)

