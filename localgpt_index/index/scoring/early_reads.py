"""Reading a first pass's candidates while it still runs.

The first pass scores segment after segment
(CPU); rescoring then reads its candidates' pages (I/O: about 330 MB at 1,000 candidates of 1,030 x
128 float16, several seconds from a cold virtual disk). Once START of the pages are scored, the C-th
best estimate over all of them is guessed from those seen (the (MARGIN * C * seen / all)-th best so
far, per query), and from then on the blocks of every page whose estimate clears it are read into the
page cache in the background (checksums.read_ahead), segment by segment as each is scored. After the
first pass, rescoring reads only the candidates not read yet; what was read for pages that did not
make the final cut is the cost (counted in ReadCounts.wasted). Nothing is checked here: the bytes are
only brought into the page cache, and rescoring checks every block it scores as always."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from ..format.checksums import PREFETCH_LIMIT, BlockGuard, read_ahead

START = 0.15  # the fraction of pages scored before the first guess
MARGIN = 1.1  # how far below the guessed C-th estimate a page is still read early (in ranks, as a factor)

Reads = Callable[[str, np.ndarray], list[tuple[BlockGuard, int, int]]]  # a segment's rows -> the byte ranges they need


@dataclass
class ReadCounts:
    """Bytes of candidates' pages read by a view's first passes, in total (for benchmarks and reports)."""

    early: int = 0  # read while the first pass ran
    late: int = 0  # read after it (candidates the guess missed)
    wasted: int = 0  # read early for pages that were not candidates
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, early: int = 0, late: int = 0, wasted: int = 0) -> None:
        with self._lock:
            self.early, self.late, self.wasted = self.early + early, self.late + late, self.wasted + wasted


class EarlyReads:
    """One first pass's early reads: `scored` after each segment, `rows_left` and `finish` after the pass."""

    def __init__(self, reads: Reads, candidates: int, total_pages: int, start: float = START, margin: float = MARGIN) -> None:
        self.reads, self.candidates, self.total = reads, candidates, max(total_pages, 1)
        self.start, self.margin = start, margin
        self.seen: list[tuple[str, np.ndarray, np.ndarray]] = []  # (segment, its rows, estimates (queries, rows))
        self.submitted = 0  # segments of `seen` whose early reads are started
        self.early: dict[str, np.ndarray] = {}  # segment -> rows read early
        self.pages: dict[tuple[str, int], tuple[list[Future], int]] = {}  # (segment, row) -> its reads and their bytes
        self.bytes = 0  # asked for so far

    def scored(self, segment: str, rows: np.ndarray, estimates: np.ndarray) -> None:
        """A segment's estimates (higher is better): from START on, read the pages likely to be candidates."""
        self.seen.append((segment, rows, estimates))
        scored = sum(len(r) for _, r, _ in self.seen)
        if scored < self.start * self.total or scored >= self.total or self.bytes >= PREFETCH_LIMIT:
            return  # too few seen to guess; or the last segment: the exact choice follows at once, nothing is left to overlap
        rank = math.ceil(self.margin * self.candidates * scored / self.total)
        everything = np.concatenate([e for _, _, e in self.seen], axis=1)
        bar = np.partition(everything, -rank, axis=1)[:, -rank] if rank < everything.shape[1] else np.full(len(everything), -np.inf)
        for sid, seg_rows, seg_estimates in self.seen[self.submitted :]:
            picked = seg_rows[(seg_estimates >= bar[:, None]).any(axis=0)]
            for at in range(len(picked)):  # page by page: a page that is not a candidate in the end is not read if it has not started
                futures, count = read_ahead(self.reads(sid, picked[at : at + 1]))
                self.pages[(sid, int(picked[at]))] = futures, count
                self.bytes += count
            self.early[sid] = picked
        self.submitted = len(self.seen)

    def rows_left(self, segment: str, rows: np.ndarray) -> np.ndarray:
        """Of a segment's candidate rows, those not read early."""
        early = self.early.get(segment)
        return rows if early is None else rows[~np.isin(rows, early)]

    def finish(self, chosen: dict[str, np.ndarray], counts: ReadCounts) -> None:
        """Cancel the early reads of pages that are not candidates and have not started, and wait for the
        others (rescoring is about to use them); count what was read, and of it for non-candidates."""
        wanted = {(sid, int(row)) for sid, rows in chosen.items() for row in rows}
        early = wasted = 0
        for page, (futures, count) in self.pages.items():
            if page not in wanted:
                futures = [f for f in futures if not f.cancel()]
            for future in futures:
                try:
                    future.result()
                except OSError:
                    pass  # only a hint: rescoring reads (and checks) these bytes itself, and reports what fails
            done = count if futures else 0
            early += done
            wasted += 0 if page in wanted else done
        counts.add(early=early, wasted=wasted)
