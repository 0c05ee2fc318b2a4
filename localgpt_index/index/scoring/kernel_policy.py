"""When the CPU scorer uses its compiled kernel (kernel.py), and when a process loads it.

Loading the kernel costs a fresh process about half a second: numba's own start (its type registries,
and the scipy.linalg they import), then the machine code from numba's cache. A one-shot query over a
few thousand pages gains less than that from it, so until the kernel is loaded torch's exact path
scores (equal within float32 rounding, tested), and the kernel is loaded only where it pays:

- long-lived processes (serve, mcp) load it at start, on a thread of their own, beside the model
  (`warm_up`); their queries are scored by torch's path until it is loaded, by the kernel after;
- any other process loads it on the calling thread once the work it has scored without the kernel, with
  the pass it is about to score, reaches what the load costs (`choose`, and `expect` before a pass whose
  size is known: a one-shot query over a large index pays the load once and scores all of it by the kernel);
- where numba has started already (the binary first pass's hamming kernel ran, or any numba code), the
  load is a few milliseconds, and a rescoring's few hundred candidates pay for it.

Work is counted as rows x (query tokens + ROW_TOKENS): the kernel's saving grows with the query tokens,
plus a part per row (torch widens every float16 row into memory first). Measured on a loaded 2-core Zen 4
(scripts/bench_kernel_load.py): a load of 0.45-0.75 s from cold, 8-9 ms once numba has started; a saving
of about 1.2 ns a unit of work (40-90 ns a row for 20 query tokens, 130-330 ns for 8 stacked queries of 20).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable

from ...core.failpoints import failpoint

Kernel = Callable[..., Any]

ROW_TOKENS = 30  # a row's share of the saving, in query tokens
PAYS_FROM = 400_000_000  # work from which a cold load pays: 0.5 s at 1.2 ns a unit (20 query tokens: about 8,000 pages of 1,030 rows)
PAYS_FROM_STARTED = 8_000_000  # the same once numba has started: a load of about 10 ms


def numba_started() -> bool:
    """Whether numba's CPU target has been set up in this process (the costly part of a first load): it
    imports numba.np.arraymath when it loads its registries, at the first compiled call of any function."""
    return "numba.np.arraymath" in sys.modules


@dataclass
class _OneShot:
    """A fresh process's decisions, kept for one thread (KernelPolicy.as_one_shot)."""

    scored: int = 0
    due: bool = False  # that process would have loaded the kernel by now


# set by as_one_shot for the passes of one request: contexts copied into the part pool carry it along
_ONE_SHOT: ContextVar[_OneShot | None] = ContextVar("lgpt_one_shot", default=None)


class KernelPolicy:
    """The compiled kernel of one process, loaded at most once by `load` (a callable that returns the
    kernel, or None where it cannot be had), on the thread that finds it pays or on a warm-up thread."""

    def __init__(self, load: Callable[[], Kernel | None]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._started = False  # a load began, here or on the warm-up thread
        self._ready = threading.Event()  # and ended
        self._kernel: Kernel | None = None
        self.scored = 0  # work scored without the kernel

    @classmethod
    def fixed(cls, kernel: Kernel | None) -> KernelPolicy:
        """A policy that always answers `kernel` (tests; None: torch's path always)."""
        policy = cls(lambda: kernel)
        policy.load()
        return policy

    @property
    def started(self) -> bool:
        """Whether a load of the kernel began in this process."""
        return self._started

    @contextmanager
    def as_one_shot(self) -> Iterator[None]:
        """The passes of this context scored as a fresh one-shot process scores them (bit for bit: a warm
        service answers the command line exactly as a local query would): torch's path until the work scored
        from here reaches a cold load's threshold, the kernel after."""
        token = _ONE_SHOT.set(_OneShot())
        try:
            yield
        finally:
            _ONE_SHOT.reset(token)

    def _one_shot(self, rows: int, tokens: int, count: bool) -> _OneShot | None:
        state = _ONE_SHOT.get()
        if state is None:
            return None
        with self._lock:
            if state.scored + rows * (tokens + ROW_TOKENS) >= PAYS_FROM:
                state.due = True
            if count:
                state.scored += rows * (tokens + ROW_TOKENS)
        return state

    def loaded(self) -> Kernel | None:
        """The kernel if it is loaded; None if not (yet), or where it cannot be had."""
        state = self._one_shot(0, 0, count=False)
        if state is not None and not state.due:
            return None
        return self._kernel if self._ready.is_set() else None

    def choose(self, rows: int, tokens: int) -> Kernel | None:
        """The kernel for a call that scores `rows` page rows for `tokens` query tokens: the loaded one;
        None while another thread loads it; else loaded now if this call's work, with the work scored
        without it so far, reaches the threshold; else None (torch's path scores the call)."""
        state = self._one_shot(rows, tokens, count=True)
        if state is not None:
            return self.load() if state.due else None
        if self._ready.is_set():
            return self._kernel
        with self._lock:
            self.scored += rows * (tokens + ROW_TOKENS)
            if self._started or self.scored < threshold():
                return None
            self._started = True
        return self._finish()

    def expect(self, rows: int, tokens: int) -> None:
        """A pass of `rows` page rows for `tokens` query tokens is about to be scored: the kernel is
        loaded now if that, with the work scored so far, pays for the load (choose would find it later,
        after part of the pass had been scored without it)."""
        if self._one_shot(rows, tokens, count=False) is not None or self._ready.is_set():
            return
        with self._lock:
            if self._started or self.scored + rows * (tokens + ROW_TOKENS) < threshold():
                return
            self._started = True
        self._finish()

    def load(self) -> Kernel | None:
        """The kernel, loaded now on this thread if no load began (else the loaded one, or None while a
        warm-up thread is at it)."""
        with self._lock:
            first, self._started = not self._started, True
        return self._finish() if first else self.loaded()

    def warm_up(self) -> None:
        """A long-lived process: the kernel loaded on a thread of its own, once, while the caller does
        something slower (a model's load); queries meanwhile are scored by torch's path."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._finish, name="lgpt-score-warm-up", daemon=True).start()

    def wait(self, timeout: float | None = None) -> Kernel | None:
        """The kernel once a load that began has ended (waiting at most `timeout` seconds); None at once
        if no load began."""
        if self._started:
            self._ready.wait(timeout)
        return self.loaded()

    def _finish(self) -> Kernel | None:
        try:
            failpoint("score.kernel_load")
            self._kernel = self._load()
        finally:
            self._ready.set()
        return self._kernel


def threshold() -> int:
    return PAYS_FROM_STARTED if numba_started() else PAYS_FROM
