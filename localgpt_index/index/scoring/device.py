"""Exact MaxSim on a torch device (a GPU), for one generation view.

A segment's float16 vectors are copied to the device once, on the first query that scores it, and
stay there (resident) while they fit in the scorer's memory budget: the device's free memory less a
reserve, or `max_resident` bytes. A segment that does not fit is streamed: its rows go through pinned
host buffers in chunks, each checked before it is copied (the untrusted-index guarantee holds on both
paths: resident rows are checked once, when uploaded). Scores are exact: on CUDA each float32 query
is split into two float16 halves (high and residual) multiplied by the float16 vectors with float32
accumulation (tensor cores, no widening copy of the vectors); elsewhere the vectors are widened to
float32 chunk by chunk. Every score is within 1e-3 of the CPU scorer's float32 reference (tested).

One scorer belongs to one generation view (query.search.Searcher makes it): its resident tensors go
with the view, or earlier with `release()` (serve calls it when it switches to a new generation).
`score` takes a stack of queries: concurrent clients batched by serve share one pass over the pages.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, Sequence

import numpy as np

from .chunks import rows_of, tensor_of

SIM_BYTES = 512 << 20  # similarities (rows x stacked query tokens, float32) of one device chunk, at most
STREAM_ROWS = 1 << 20  # rows (256 MiB of 128-dim float16) copied to the device at a time when streaming
RESERVE_BYTES = 4 << 30  # device memory left free besides the resident vectors (chunks, the model's activations)
RESERVE_FRACTION = 0.10  # ... or this share of the device's memory, whichever is larger
SCORERS = ("auto", "cpu", "device")


class SegmentVectors(Protocol):
    """What the scorer reads of a segment (index.local.segments.SegmentFiles)."""

    vectors: np.ndarray  # (rows, dim) float16, memory-mapped
    offsets: np.ndarray  # (pages + 1,) int64

    def checked_groups(self, pages: np.ndarray) -> Any: ...


@dataclass(frozen=True)
class DeviceScoring:
    """Where exact scoring runs: `scorer` "auto" (on the model's device when it is a CUDA GPU), "cpu"
    (the CPU scorer, index.scoring.maxsim), "device" (the device scorer on the model's device, whatever it is:
    the CPU, where the tests run it, or another torch device); `max_resident`: bytes of vectors kept
    on the device at most (None: what it has free, less a reserve)."""

    scorer: str = "auto"
    max_resident: int | None = None

    def device_for(self, model_device: str) -> str | None:
        """The device the device scorer runs on for a model on `model_device`; None: the CPU scorer."""
        if self.scorer == "device":
            return model_device
        if self.scorer == "auto" and model_device.split(":")[0] == "cuda":  # measured there; MPS is untried
            return model_device
        return None


@dataclass
class ScorerStats:
    """What the scorer holds, and what the last search read (since begin()): bytes of resident vectors
    scored, bytes streamed from the host."""

    device: str
    resident_bytes: int = 0  # all resident segments together
    scored_resident_bytes: int = 0
    streamed_bytes: int = 0
    passes: int = 0  # calls of score() (one per segment and stack of queries)
    last_stack: int = 0  # queries in the last call's stack
    uploads: list[str] = field(default_factory=list)  # segments made resident, in order

    def begin(self) -> None:
        """A new search: the bytes scored and streamed count from zero (passes keep counting)."""
        self.scored_resident_bytes = self.streamed_bytes = 0

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "resident_bytes": self.resident_bytes, "streamed_bytes": self.streamed_bytes,
                "stacked_queries": self.last_stack}


class DeviceScorer:
    """Exact MaxSim of stacked queries against segments, on `device` (see the module docstring)."""

    def __init__(self, device: str, max_resident: int | None = None) -> None:
        import torch

        self.requested, self.device = device, torch.device(device)
        self._max_resident = max_resident
        self._room: int | None = None  # bytes still allowed resident; decided on first use
        self._resident: dict[str, Any] = {}  # segment id -> (rows, dim) float16 tensor on the device
        self._lock = threading.Lock()
        self._released = False
        self._tensor_cores = True  # float16 products into float32 (CUDA); False once refused
        self.stats = ScorerStats(str(self.device))

    def release(self) -> None:
        """Drop the resident vectors (the generation is no longer current); later calls stream.
        A call in flight keeps the tensors it holds until it returns."""
        with self._lock:
            self._released = True
            self._resident.clear()
            self._room = 0
            self.stats.resident_bytes = 0

    def score(self, queries: Sequence[np.ndarray], segment_id: str, files: SegmentVectors, pages: np.ndarray) -> np.ndarray:
        """Scores (n_queries, len(pages)) in float32 of `pages` (row order) of one segment."""
        import torch

        pages = np.asarray(pages, dtype=np.int64)
        resident = self._resident_for(segment_id, files)
        q = self._query_matrix(queries)
        best = torch.empty((len(pages), len(q.full)), dtype=torch.float32, device=self.device)
        lengths = files.offsets[pages + 1] - files.offsets[pages]
        with torch.inference_mode():
            if resident is not None:
                for lo, hi in _spans(lengths, self._chunk_rows(len(q.full))):
                    rows = rows_of(files.offsets[pages[lo:hi]], files.offsets[pages[lo:hi] + 1])
                    block = resident[rows[0] : rows[1]] if isinstance(rows, tuple) else resident[torch.from_numpy(rows).to(self.device)]
                    self._best(q, block, lengths[lo:hi], best[lo:hi])
                self.stats.scored_resident_bytes += int(lengths.sum()) * files.vectors.shape[1] * 2
            else:
                self.stats.streamed_bytes += self._stream(q, files, pages, lengths, best)
            bounds = np.cumsum([0] + [len(q) for q in queries])
            scores = torch.stack([best[:, a:b].sum(dim=1) for a, b in zip(bounds[:-1], bounds[1:])])
        self.stats.passes += 1
        self.stats.last_stack = len(queries)
        return scores.cpu().numpy()

    # residency

    def _resident_for(self, segment_id: str, files: SegmentVectors) -> Any:
        """The segment's vectors on the device: uploaded now if they fit and are not there yet; None: stream."""
        import torch

        with self._lock:
            if segment_id in self._resident or self._released:
                return self._resident.get(segment_id)
            if self._room is None:
                self._room = self._budget()
            size = int(files.vectors.nbytes)
            if size > self._room:
                return None
            try:
                tensor = self._upload(files)
            except torch.OutOfMemoryError:  # the budget was wrong (another process took memory): this and later segments stream
                self._room = 0
                return None
            self._resident[segment_id] = tensor
            self._room -= size
            self.stats.resident_bytes += size
            self.stats.uploads.append(segment_id)
            return tensor

    def _budget(self) -> int:
        """Bytes of vectors the device may hold: `max_resident`, or its free memory less a reserve."""
        if self._max_resident is not None:
            return self._max_resident
        import torch

        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)  # torch's, reusable
            return max(0, free + cached - max(RESERVE_BYTES, int(RESERVE_FRACTION * total)))
        try:  # the CPU (or memory shared with it): half of what is available now
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
        except (ValueError, OSError, AttributeError):
            return 0

    def _upload(self, files: SegmentVectors) -> Any:
        """The whole segment copied to the device, checked block by block as it is read."""
        import torch

        rows, dim = files.vectors.shape
        tensor = torch.empty((rows, dim), dtype=torch.float16, device=self.device)
        every = np.arange(len(files.offsets) - 1)
        staging = self._host_buffer(min(rows, STREAM_ROWS), dim)
        for part in files.checked_groups(every):
            start, end = int(files.offsets[part[0]]), int(files.offsets[part[-1] + 1])
            for at in range(start, end, len(staging)):
                n = min(len(staging), end - at)
                staging.send(files.vectors[at : at + n], tensor[at : at + n])
        staging.wait()
        return tensor

    # streaming

    def _stream(self, q: "_Queries", files: SegmentVectors, pages: np.ndarray, lengths: np.ndarray, best) -> int:
        """Score pages not resident: their rows copied to the device in chunks (checked first); bytes copied."""
        dim = files.vectors.shape[1]
        limit = min(STREAM_ROWS, self._chunk_rows(len(q.full)))
        staging = self._host_buffer(limit + (int(lengths.max()) if len(lengths) else 0), dim)  # a run: up to one page more
        done, copied = 0, 0
        for group in files.checked_groups(pages):  # pages in row order: each group continues where the last ended
            group_lengths = lengths[done : done + len(group)]
            for lo, hi in _spans(group_lengths, limit):
                rows = rows_of(files.offsets[group[lo:hi]], files.offsets[group[lo:hi] + 1])
                host = files.vectors[rows[0] : rows[1]] if isinstance(rows, tuple) else files.vectors[rows]
                block = staging.send(host)
                self._best(q, block, group_lengths[lo:hi], best[done + lo : done + hi])
                copied += host.nbytes
            done += len(group)
        staging.wait()
        return copied

    def _host_buffer(self, rows: int, dim: int) -> "_Staging":
        return _Staging(self.device, rows, dim)

    # the product

    def _chunk_rows(self, tokens: int) -> int:
        return max(1 << 12, SIM_BYTES // (4 * max(1, tokens)))

    def _query_matrix(self, queries: Sequence[np.ndarray]) -> "_Queries":
        """The stacked query tokens on the device: float32, and on CUDA also as float16 high and residual
        halves (high + residual = the float32 token to about 1e-7: products with the float16 vectors
        on tensor cores, accumulated in float32; the residual is None where it is zero, as for queries
        a bfloat16 or float16 model encoded)."""
        import torch

        q = torch.from_numpy(np.concatenate([np.asarray(v, dtype=np.float32) for v in queries])).to(self.device)
        if self.device.type != "cuda" or not self._tensor_cores:
            return _Queries(q, None, None)
        high = q.to(torch.float16)
        low = (q - high.float()).to(torch.float16)
        return _Queries(q, high, low if bool(low.any()) else None)

    def _best(self, q: "_Queries", block, lengths: np.ndarray, out) -> None:
        """Each query token's best similarity in each page of `block` (rows of whole pages) into `out` (pages, tokens)."""
        import torch

        sim = None
        if q.high is not None:
            try:
                sim = torch.mm(block, q.high.T, out_dtype=torch.float32)
                if q.low is not None:
                    sim = torch.addmm(sim, block, q.low.T, out_dtype=torch.float32)
            except (RuntimeError, TypeError):  # no float16 product into float32 here: widen instead, from now on
                self._tensor_cores, sim = False, None
        if sim is None:
            sim = block.float() @ q.full.T
        if np.all(lengths == lengths[0]):
            torch.amax(sim.view(len(lengths), int(lengths[0]), -1), dim=1, out=out)
        else:
            out.copy_(torch.segment_reduce(sim, "max", lengths=torch.from_numpy(lengths).to(sim.device), axis=0))


class _Queries(NamedTuple):
    full: Any  # (tokens, dim) float32 on the device
    high: Any  # float16 halves (CUDA), or None
    low: Any


class _Staging:
    """Host rows on their way to the device: on CUDA through two pinned buffers used in turn (one is
    filled while the other's copy runs); on the CPU the rows are used where they are."""

    def __init__(self, device: Any, rows: int, dim: int) -> None:
        import torch

        self.device, self.rows = device, rows
        self.cuda = device.type == "cuda"
        self._pinned = [torch.empty((rows, dim), dtype=torch.float16, pin_memory=True) for _ in range(2)] if self.cuda else []
        self._landing: list[Any] = [None, None]  # device tensors the streamed rows land in, made on first use
        self._copied: list[Any] = [None, None]  # per pinned buffer: the event recorded after its last copy
        self._turn = 0

    def __len__(self) -> int:
        return self.rows

    def send(self, host: np.ndarray, into: Any = None) -> Any:
        """`host` rows on the device, in `into` when given, else in a landing tensor valid until the
        call after next. On CUDA the copy is queued on the current stream: work queued after it (the
        product) sees the rows, and the next copy into the same landing tensor waits for that work."""
        import torch

        source = tensor_of(np.ascontiguousarray(host))
        if not self.cuda:
            if into is None:
                return source
            into.copy_(source)
            return into
        turn, n = self._turn, len(host)
        self._turn ^= 1
        if self._copied[turn] is not None:
            self._copied[turn].synchronize()  # the pinned buffer's previous copy is done: it may be refilled
        pinned = self._pinned[turn][:n]
        pinned.copy_(source)
        if into is None and self._landing[turn] is None:
            self._landing[turn] = torch.empty((self.rows, pinned.shape[1]), dtype=torch.float16, device=self.device)
        target = into if into is not None else self._landing[turn][:n]
        target.copy_(pinned, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        self._copied[turn] = event
        return target

    def wait(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()


def _spans(lengths: np.ndarray, max_rows: int):
    """Runs of pages of about `max_rows` rows (at most that plus one page; at least one page each): (lo, hi) positions."""
    if not len(lengths):
        return
    run = np.cumsum(lengths) // max(1, max_rows)  # the run each page ends in
    cuts = np.flatnonzero(np.diff(run)) + 1
    bounds = [0, *cuts.tolist(), len(lengths)]
    yield from zip(bounds[:-1], bounds[1:])
