"""Several PDF pages' OCR in one Tesseract process: a list file of their renders.

Tesseract loads its model once a process (about 0.13-0.17 s of CPU, 15 % of a scanned page's OCR);
reading several pages in one process pays it once. Each page stays bounded alone:

- its render is its own pdftoppm (two where its print is small: ocr.prepare_pdf_page), under the
  page's --ocr-timeout, which also covers its OCR; a page that shows no line of print is not listed;
- Tesseract says on stderr when it starts a page of a list ("Page N : FILE") and writes each page's
  text when it finishes it (the pages separated by form feeds), so the page it is on is known; when
  that page runs past its deadline, or Tesseract fails or crashes on it, the pages it finished keep
  their text, that page fails alone, and the pages after it go on in a new process;
- a Tesseract that does not say which page it is on (none of its stderr lines name one) and fails
  leaves the pages it did not surely finish to be read one process a page, as single pages are
  (their renders are not made again).
"""

from __future__ import annotations

import os
import selectors
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import processes
from .ocr import NO_OCR_TEXT, OcrFailed, Tesseract, bounded_command, failure, prepare_pdf_page
from .text import PageText

OCR_BATCH = 8  # PDF pages one Tesseract process reads at most
Done = Callable[[int, "PageText | OcrFailed"], None]  # a page's index in the batch, and its text (cleaned) or why it has none


@dataclass(frozen=True)
class QueuedPage:
    """A PDF page waiting for OCR; `future` gets `settle` of its text, or of why it has none."""

    pdf: Path
    page: int
    future: Future
    settle: Callable[[PageText | OcrFailed], Any]


class OcrQueue:
    """PDF pages waiting for OCR. Each page added puts a job on the pool; a job takes up to OCR_BATCH
    pages, and no more than its worker's share of the queue (so that every worker has pages while
    there are some), and reads them in one Tesseract process. A page's future is cancelled to have it
    not read (a dropped document's), and `cancel` cancels every page not taken yet."""

    def __init__(self, pool: ThreadPoolExecutor, tesseract: Tesseract, lang: str, timeout_s: float, memory_mib: int,
                 workers: int, timings: Callable[[str, float], None]) -> None:
        self.pool, self.tesseract, self.lang, self.timeout_s, self.memory_mib = pool, tesseract, lang, timeout_s, memory_mib
        self.workers, self.timings = max(1, workers), timings
        self._queued: deque[QueuedPage] = deque()
        self._lock = threading.Lock()

    def add(self, pages: list[QueuedPage]) -> None:
        """Queue pages (a document's, all at once: a free worker takes them together)."""
        with self._lock:
            self._queued.extend(pages)
        for _ in pages:
            self.pool.submit(self._read_some)

    def cancel(self) -> None:
        with self._lock:
            for queued in self._queued:
                queued.future.cancel()
            self._queued.clear()

    def _read_some(self) -> None:
        with self._lock:
            share = -(-len(self._queued) // self.workers)
            taken = [self._queued.popleft() for _ in range(min(OCR_BATCH, share))]
        batch = [queued for queued in taken if not queued.future.cancelled()]  # a dropped document's page stays unread
        if not batch:
            return
        started = time.perf_counter()
        try:
            ocr_pdf_pages(self.tesseract, [(queued.pdf, queued.page) for queued in batch], self.lang, self.timeout_s,
                           self.memory_mib, lambda index, result: _settle(batch[index], result),
                           lambda index: not batch[index].future.cancelled())
        except (OcrFailed, OSError) as exc:  # no shell to run Tesseract; the scratch folder: a full disk
            failed = exc if isinstance(exc, OcrFailed) else OcrFailed(exc.strerror or str(exc))
            for queued in batch:
                _settle(queued, failed)
        except BaseException as exc:  # interrupted: the pages not read say so to whoever waits for them
            for queued in batch:
                with suppress(InvalidStateError):
                    queued.future.set_exception(exc)
            raise
        finally:
            self.timings("ocr", time.perf_counter() - started)


def _settle(queued: QueuedPage, result: PageText | OcrFailed) -> None:
    """A page's future gets its outcome, unless it has one or was cancelled (its document failed meanwhile)."""
    with suppress(InvalidStateError):
        queued.future.set_result(queued.settle(result))


def ocr_pdf_pages(tesseract: Tesseract, pages: Sequence[tuple[Path, int]], lang: str, timeout_s: float, memory_mib: int,
                  done: Done, wanted: Callable[[int], bool] = lambda index: True, fixed_dpi: int | None = None) -> None:
    """OCR pages (pdf, page number) in one Tesseract process where they can be, telling `done` of each
    page as soon as it is read or has failed (see the module's docstring). A page no longer `wanted`
    when its turn comes (its document failed) is skipped; one in a Tesseract list already is read.
    `fixed_dpi` reads every page at that resolution, none skipped (the baseline of scripts/bench_ocr.py)."""
    if len(pages) == 1:
        if wanted(0):
            _single(tesseract, 0, pages[0], lang, timeout_s, memory_mib, done, fixed_dpi)
        return
    with tempfile.TemporaryDirectory(prefix="lgpt-ocr-") as folder:
        ready: list[tuple[int, str, float]] = []  # index, picture, seconds left of the page's timeout
        for index, (pdf, page) in enumerate(pages):
            if not wanted(index):
                continue
            started = time.monotonic()
            try:
                picture = prepare_pdf_page(pdf, page, os.path.join(folder, f"page-{index}"), started + timeout_s, timeout_s,
                                           memory_mib, fixed_dpi)
            except OcrFailed as exc:
                done(index, exc)
                continue
            if picture is None:  # no line of print: nothing to read
                done(index, NO_OCR_TEXT)
                continue
            ready.append((index, picture, timeout_s - (time.monotonic() - started)))
        while ready:
            settled, told = _run_list(tesseract, ready, folder, lang, timeout_s, memory_mib, done)
            if not told and settled < len(ready):  # no page named: which one failed is not known
                for index, picture, budget in ready[settled:]:
                    if wanted(index):
                        _picture(tesseract, index, picture, budget, lang, timeout_s, memory_mib, done)
                return
            ready = [entry for entry in ready[settled:] if wanted(entry[0])]


def _single(tesseract: Tesseract, index: int, page: tuple[Path, int], lang: str, timeout_s: float, memory_mib: int,
            done: Done, fixed_dpi: int | None) -> None:
    try:
        text = tesseract.read_pdf_page(page[0], page[1], lang, timeout_s, memory_mib, fixed_dpi)
    except OcrFailed as exc:
        done(index, exc)
        return
    done(index, text)


def _picture(tesseract: Tesseract, index: int, picture: str, budget: float, lang: str, timeout_s: float, memory_mib: int,
             done: Done) -> None:
    """A rendered page alone, in a Tesseract process of its own, within what is left of its timeout."""
    try:
        text = tesseract.read_picture(picture, lang, time.monotonic() + budget, timeout_s, memory_mib)
    except OcrFailed as exc:
        done(index, exc)
        return
    done(index, text)


def _run_list(tesseract: Tesseract, ready: list[tuple[int, str, float]], folder: str, lang: str, timeout_s: float,
              memory_mib: int, done: Done) -> tuple[int, bool]:
    """One Tesseract over the pictures of `ready`: how many of them are settled (read, or failed), and
    whether Tesseract named the pages it started (the rest go on in another process)."""
    listing = os.path.join(folder, "pages.txt")
    Path(listing).write_text("".join(picture + "\n" for _, picture, _ in ready), encoding="utf-8")
    args = tesseract.command(listing, lang, listing=True)  # each picture records its own resolution
    try:
        proc = processes.Tracked(bounded_command(args, memory_mib), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={**os.environ, "OMP_THREAD_LIMIT": "1"})
    except FileNotFoundError:
        raise OcrFailed("/bin/sh is missing: cannot run Tesseract") from None
    stream = _Stream(proc, [budget for _, _, budget in ready], lambda number, text: done(ready[number][0], tesseract.clean(text)),
                     lambda out: tesseract.pages(args, out))
    timed_out = stream.follow()
    code = proc.returncode
    if proc.interrupted:
        raise processes.Stopped("interrupted")
    clean = code == 0 and not timed_out and len(stream.texts()) == len(ready)
    settled = len(ready) if clean else stream.finished()
    stream.deliver(settled)
    if clean or not stream.told:
        return settled, stream.told
    if timed_out:
        reason = f"Tesseract did not finish within the page's {timeout_s:g} s and was stopped (see --ocr-timeout)"
    else:
        reason = failure("tesseract", code, stream.said(), memory_mib)
    done(ready[settled][0], OcrFailed(reason))
    return settled + 1, True


class _Stream:
    """A list-reading Tesseract's stdout (the pages' texts) and stderr (the pages it starts), followed
    up to the deadline of the page it is on; each page's text handed to `read` once surely whole."""

    def __init__(self, proc: processes.Tracked, budgets: list[float], read: Callable[[int, str], None],
                 pages: Callable[[str], list[str]]) -> None:
        self.proc, self.budgets, self.read, self.pages = proc, budgets, read, pages
        self.out, self.err = bytearray(), bytearray()
        self.started = 0  # pages Tesseract said it started
        self.delivered = 0  # pages handed to `read`
        self.told = False

    def finished(self) -> int:
        """Pages surely finished: each page's text, its form feed first (but the first's), is written
        when the page is done; a page Tesseract started means the one before it is done."""
        feeds = self.out.count(b"\f")
        written = feeds + 1 if feeds or self.out else 0
        return min(len(self.budgets), max(written, self.started - 1))

    def texts(self) -> list[str]:
        return self.pages(bytes(self.out).decode("utf-8", "replace"))

    def deliver(self, upto: int) -> None:
        """Hand on the texts of pages up to `upto` not handed on yet."""
        if upto <= self.delivered:
            return
        texts = self.texts()
        for number in range(self.delivered, min(upto, len(texts))):
            self.read(number, texts[number])
        self.delivered = max(self.delivered, min(upto, len(texts)))

    def said(self) -> bytes:
        return b"\n".join(line for line in bytes(self.err).splitlines() if not line.startswith(b"Page "))

    def follow(self) -> bool:
        """Read both pipes to their end, handing on each page's text once the next one's form feed shows
        it whole; True if the page Tesseract was on ran past its deadline (it is then stopped)."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ, self.out)
            selector.register(self.proc.stderr, selectors.EVENT_READ, self.err)
            current, deadline = 0, time.monotonic() + self.budgets[0]  # the first page's: the model's load included
            while selector.get_map():
                now = time.monotonic()
                if now >= deadline:
                    processes.kill_group(self.proc)
                    self._rest()
                    return True
                for key, _ in selector.select(deadline - now):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    key.data.extend(chunk)
                self.started = sum(1 for line in bytes(self.err).splitlines() if line.startswith(b"Page "))
                self.told = self.told or self.started > 0
                self.deliver(self.out.count(b"\f"))
                on = self.finished()
                if on != current and on < len(self.budgets):  # the next page started: its own deadline
                    current, deadline = on, time.monotonic() + self.budgets[on]
        self._rest()
        return False

    def _rest(self) -> None:
        """What is left in the pipes (nothing, once both ended), and the process waited for."""
        out, err = self.proc.communicate()
        self.out.extend(out or b"")
        self.err.extend(err or b"")
