"""On a CPU, the batch size and the model's threads are chosen by measuring the build itself.

Which is best depends on the model: a model-bound checkpoint (any real model on a CPU) runs
fastest with small batches and every core, a cheap one with batches of 4 to 8 and a core left
to the feeders (pdftoppm, LibreOffice, the render thread). So the first batches of a build try
each candidate batch size on real pages, each for a while after a warm-up batch, and the size
with the best pages/s is kept.
The model starts with every core; if during the trials it waited for pages more than
WAIT_SHARE of the time, the feeders are the bottleneck and it gives one core back. Both are
decided once, from the model's thread (torch's thread count is process-wide: it is set at the
start and at most once more, never from concurrent code).
"""

from __future__ import annotations

import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ..core.cpus import available_cpus
from .families import family_named

# Batch sizes tried; 16 and more never won on the CPU. 1 is tried first: in float32 on a 2-core AVX2
# machine the model-bound cpu checkpoint ran as fast with 1 as with 2 (either won, by the noise), and
# starting there keeps a model-bound build from ever paying for the activations of 4 (about 100 MiB on
# that checkpoint: its peak RSS went from 1.02-1.07 of byaldi's to 0.98-0.99); in bfloat16 on AVX512-BF16,
# 2 was 0.4-8 % faster than 1 a page, and the trials go on from 1 to 2 as they did before.
CANDIDATES = (1, 2, 4, 8)
# Each size's trial: a warm-up batch (a new shape's first call pays one-time costs: kernel
# selection, and on the very first batch the dtype audit), then batches until they have taken
# TRIAL_SECONDS or encoded TRIAL_PAGES (all four trials: 47 pages). One measured batch of a cheap
# model (25 ms) swung from 20 to 47 pages/s between builds and often kept the wrong size.
TRIAL_SECONDS = 0.25
TRIAL_PAGES = 8
WAIT_SHARE = 0.10
# A larger batch is tried while the last doubling paid (a page this much faster) or cost little
# memory (peak RSS up less than this); a model-bound model gains little from batching and each
# doubling costs it a hundred MiB or more of activations (in bfloat16 on a 2-core Zen 4: 1, 2, 4
# gained 7-8 % a doubling, then 8 was slower and raised the build's peak RSS by 18 %). Any size
# this much slower ends the trials.
PAYS = 0.10
CHEAP = 0.05
SLOWER = 0.05
# However much it pays, no size is tried whose forecast peak RSS is this much above the peak the build
# had before the trials: the next doubling is forecast to add twice what the last one added. (float32
# on a 2-core AVX2 machine, the cpu checkpoint: 2 -> 4 added 100-170 MiB, 4 -> 8 225 MiB, 19 %, and
# a noisy trial of 2 once made 4 look 27 % faster.)
MEMORY_CAP = 0.20


@dataclass
class _Trial:
    """One batch size's trial: its batches, and the pages and seconds measured after the warm-up."""

    batches: int = 0
    pages: int = 0
    seconds: float = 0.0

    def add(self, pages: int, seconds: float) -> bool:
        """Count a full batch; whether the trial is over."""
        self.batches += 1
        if self.batches > 1:  # the first is the warm-up
            self.pages += pages
            self.seconds += seconds
        return self.batches > 1 and (self.seconds >= TRIAL_SECONDS or self.pages >= TRIAL_PAGES)


def peak_rss() -> int:
    """This process's peak resident memory so far (KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def torch_on_cpu(encoder) -> bool:
    """Whether `encoder` runs a torch model on the CPU: what the tuner and the thread settings apply to."""
    return encoder.precision.device_type == "cpu" and family_named(encoder.model.family).torch


def tuner_for(encoder, fixed_batch: bool) -> CpuTuner:
    """The tuner of a build that encodes with `encoder`: the one an earlier build with the same encoder left
    on it (an encoder kept across builds: watch, serve --watch), which goes on from what it found (no trials
    once decided), else a new one, left on the encoder for the next build. The same encoder is the same
    model, device and dtype, so what was measured holds; reloading the model to pass the size on would not pay."""
    kept = getattr(encoder, "cpu_tuner", None)
    if isinstance(kept, CpuTuner) and kept.encoder is encoder and kept.fixed_batch == fixed_batch:
        kept.next_build()
        return kept
    tuner = CpuTuner(encoder, fixed_batch)
    encoder.cpu_tuner = tuner
    return tuner


class CpuTuner:
    """Feed it each batch's encoding time and the time the model waited before it; it says the next batch size."""

    def __init__(self, encoder, fixed_batch: bool, clock: Callable[[], float] = time.perf_counter) -> None:
        self.encoder = encoder
        self.fixed_batch = fixed_batch
        self.trial_batches = 0  # batches this build ran as trials (none once decided, by --batch-size or an earlier build)
        self._clock = clock  # when the model goes idle and comes back (a test gives its own)
        self.cores = available_cpus()
        self._trials = [] if fixed_batch else list(CANDIDATES)  # sizes still to try, the current one first
        self._trial = _Trial()
        self._results: dict[int, float] = {}  # batch size -> seconds a page
        self._peak_before: dict[int, int] = {}  # batch size -> peak RSS when its trials began
        self._peak_after: dict[int, int] = {}  # batch size -> peak RSS when its trials ended
        self._waited = self._busy = 0.0
        self._idle_since: float | None = None
        self.decided = fixed_batch and self.cores <= 1
        self.threads = self.cores
        self._share_at_decision: float | None = None
        if self._trials:
            self._start_trials(self._trials[0])

    def next_build(self) -> None:
        """Another build with the same encoder begins: the time since the last one was no wait for pages."""
        self._idle_since = None
        self.trial_batches = 0

    def _start_trials(self, size: int) -> None:
        self.encoder.batch_size = size
        self._trial = _Trial()
        self._peak_before.setdefault(size, peak_rss())

    @property
    def largest_batch(self) -> int:
        """The largest batch this build may use (the page queue is sized for it)."""
        return max([*self._trials, self.encoder.batch_size])

    def waiting(self) -> None:
        """The model has nothing to do from now on, until the next batch is full."""
        self._idle_since = self._clock()

    def batch_done(self, pages: int, seconds: float) -> None:
        """A batch of `pages` took `seconds` to encode."""
        if self._idle_since is not None:
            self._waited += max(0.0, self._clock() - self._idle_since - seconds)
        self._busy += seconds
        if self.decided:
            return
        if self._trials and pages == self.encoder.batch_size:
            self.trial_batches += 1
            if not self._trial.add(pages, seconds):
                return
            size = self._trials.pop(0)
            self._results[size] = self._trial.seconds / self._trial.pages
            self._peak_after[size] = peak_rss()
            if self._trials and self._stop_growing(size):
                self._trials.clear()  # larger batches only cost memory from here: a big model on a small CPU
            if self._trials:
                self._start_trials(self._trials[0])
                return
        if not self._trials:
            self._decide()

    def _stop_growing(self, size: int) -> bool:
        """After the trials of `size`: are larger batches not worth trying?"""
        smaller = [self._results[s] for s in self._results if s < size]
        if not smaller:
            return False
        best, now = min(smaller), self._results[size]
        if now > (1 + SLOWER) * best:
            return True
        grew = self._peak_after[size] / max(self._peak_before[size], 1) - 1
        return (now > (1 - PAYS) * best and grew >= CHEAP) or self._forecast_growth(size) > MEMORY_CAP

    def _forecast_growth(self, size: int) -> float:
        """The next doubling's peak RSS, forecast from `size`'s trials, over the peak before any trial."""
        start = max(min(self._peak_before.values()), 1)
        after = self._peak_after[size]
        return (after + 2 * (after - self._peak_before[size])) / start - 1

    def _decide(self) -> None:
        self.decided = True
        if self._results:
            self.encoder.batch_size = min(self._results, key=lambda size: self._results[size])
        self._share_at_decision = self.waited_share
        if self._share_at_decision > WAIT_SHARE and self.cores > 1:
            self.threads = self.cores - 1
            set_threads(self.threads)

    @property
    def waited_share(self) -> float:
        """The share of the model's time spent waiting for pages."""
        return self._waited / max(self._waited + self._busy, 1e-9)

    def summary(self) -> dict:
        """What was measured and chosen, for the build report."""
        return {"batch_size": self.encoder.batch_size, "threads": self.threads, "decided": self.decided,
                "pages_per_second_by_batch": {size: round(1 / s, 2) for size, s in sorted(self._results.items())},
                "peak_rss_mib_by_batch": {size: round(kib / 1024) for size, kib in sorted(self._peak_after.items())},
                "waited_share": round(self.waited_share if self._share_at_decision is None else self._share_at_decision, 3),
                "trial_batches": self.trial_batches}


def set_threads(count: int) -> None:
    import torch

    torch.set_num_threads(count)


@contextmanager
def cpu_threads(encoder, threads: int | None = None) -> Iterator[None]:
    """Every core for a model on the CPU while a build runs (the tuner may give one back), or `threads`
    (what the tuner kept with a warm encoder chose); the count is restored afterwards."""
    if encoder is None or not torch_on_cpu(encoder):
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads or available_cpus())
    try:
        yield
    finally:
        torch.set_num_threads(before)


# A team of threads encodes serve's queries only where it takes at most this share of one thread's time
# (two threads took 0.8-1.3 of one's time here for the bench checkpoint's query, for twice the CPU; a real
# model's matrix products come near one thread's time divided by the team's size)
TEAM_TIME = 0.7


def query_threads(encoder, texts: list[str], repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> int | None:
    """On the thread that will encode every query (serve's encoder thread): time a forward pass of
    `texts` with torch's thread count and with one thread, and keep one thread unless the team takes
    at most TEAM_TIME of its time. A small model's query (a few ms) is all overhead: a team only adds
    its wake-ups and, a little faster or not, takes that much more CPU from the scorer that runs
    beside it; a real model's is matrix products that want every core.
    None where it does not apply (a device model, or a family not run by torch)."""
    if not torch_on_cpu(encoder):
        return None
    import torch

    counts = sorted({torch.get_num_threads(), 1}, reverse=True)
    taken: dict[int, float] = {}
    for count in counts:
        torch.set_num_threads(count)
        encoder.encode_queries(texts)  # a first pass at this count is not timed
        times = []
        for _ in range(repeats):
            started = clock()
            encoder.encode_queries(texts)
            times.append(clock() - started)
        taken[count] = sorted(times)[len(times) // 2]
    team = counts[0]
    chosen = team if team > 1 and taken[team] <= TEAM_TIME * taken[1] else 1
    torch.set_num_threads(chosen)
    return chosen
