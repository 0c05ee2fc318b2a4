"""The local engine: the page feed in this process, the model here, pages encoded in batches.

It yields the events the commit policy takes (ingest/events.py), as the Ray engine does:
a feed's pages are batched, encoded (and pooled) here, and go out as PagesEncoded.
The model loads while the first pages are converted and rendered, at the size its processor
settings say (seconds of a second core that would otherwise wait); `on_open` is told of each
document as the feed opens it, during the load too, so that its text and OCR start then.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.failpoints import failpoint
from ..ingest.convert import ConverterSet
from ..ingest.events import EngineEvent, PageReady, PagesEncoded
from ..ingest.feed import FeedSource, PageFeed
from ..ingest.opening import OnOpen
from ..models.encoding import encode_resiliently, pool_some
from ..models.loading import EncoderOptions
from ..models.protocols import PageEncoder
from ..models.render_size import expected_render_size
from ..models.resolve import ModelRef
from ..models.tuning import CANDIDATES, CpuTuner, cpu_threads, torch_on_cpu, tuner_for
from .options import BuildOptions, BuildReport, Log, StageTimer

EncoderFactory = Callable[[ModelRef, EncoderOptions], PageEncoder]


def load_encoder(factory: EncoderFactory, model: ModelRef, options: BuildOptions, timer: StageTimer) -> PageEncoder:
    """The page encoder, its load timed."""
    failpoint("model-load")  # tests: what was rendered before the model began to load
    started = time.perf_counter()
    encoder = factory(model, options.encoder_options())
    timer.add("load_model", started)
    return encoder


def pooled(vectors: list, factor: int | None, timer: StageTimer | None = None) -> list:
    """Hierarchical token pooling of a batch's vectors (factor > 1), timed as the "pool" stage."""
    if factor is None or factor <= 1:
        return vectors
    started = time.perf_counter()
    vectors = pool_some(vectors, factor)
    if timer is not None:
        timer.add("pool", started)
    return vectors


class LocalEngine:
    """A feed of this process's pages, encoded here in batches."""

    encoder: PageEncoder  # once loaded

    def __init__(self, model: ModelRef, options: BuildOptions, sources: list[FeedSource], root: Path,
                 converters: ConverterSet, staging: Path, timer: StageTimer, log: Log, on_open: OnOpen | None = None) -> None:
        self.model, self.options, self.sources, self.root, self.on_open = model, options, sources, root, on_open
        self.converters, self.staging, self.timer, self.log = converters, staging, timer, log
        self.tuner: CpuTuner | None = None
        self.buffer: list[tuple[int, object]] = []  # (document number, prepared page)
        self.gone: set[int] = set()
        self._early: PageFeed | None = None
        self._calls_before = 0  # an encoder kept warm across builds (watch, serve) has counted earlier builds' calls

    def load(self, factory: EncoderFactory) -> None:
        """Load the model while the first pages are converted and rendered."""
        expected = expected_render_size(self.model, self.options.settings.max_visual_tokens)
        if expected is not None:
            self._early = self._feed(expected, 2 * max(CANDIDATES)).start()
        try:
            self.encoder = load_encoder(factory, self.model, self.options, self.timer)
            self._calls_before = self.encoder.forward_calls
        except BaseException:
            self.close()
            raise
        if torch_on_cpu(self.encoder):
            self.tuner = tuner_for(self.encoder, fixed_batch=self.options.batch_size is not None)

    def close(self) -> None:
        """End a feed started during the load that was never read."""
        if self._early is not None:
            self._early.close()
            self._early = None

    def _feed(self, render_size, queue_pages: int) -> PageFeed:
        return PageFeed(
            self.sources, self.converters, self.staging, render_size, queue_pages=queue_pages,
            convert_workers=self.options.convert_workers, timings=self.timer.add_seconds,
            render_timeout_s=self.options.render_timeout_s, root=self.root, prepare=None, on_open=self.on_open,
        )

    def _feed_for_encoder(self) -> PageFeed:
        """The feed started during the load, now preparing pages for the encoder; a new one if the
        encoder renders at another size than its settings said (what was rendered is thrown away)."""
        encoder, early, self._early = self.encoder, self._early, None
        if early is not None and early.render_size != encoder.render_size:
            self.log(f"note: the model's processor wants pages at {encoder.render_size}, not {early.render_size} "
                     "as its saved settings say: rendering again")
            early.close()
            early = None
        queue_pages = self._queue_pages()
        feed = early or self._feed(encoder.render_size, queue_pages)
        feed.set_queue_pages(queue_pages)
        feed.set_prepare(encoder.prepare_page)
        return feed

    def describe(self) -> str | None:
        return None

    def events(self) -> Generator[EngineEvent, None, None]:
        """The feed's events, its pages encoded in batches (PagesEncoded)."""
        feed = self._feed_for_encoder()
        for event in feed:
            if event.number in self.gone:
                continue
            if not isinstance(event, PageReady):
                yield event
                continue
            self.buffer.append((event.number, event.image))
            if len(self.buffer) >= self.encoder.batch_size:
                yield self._flush()
                self._size_queue(feed)
        if self.buffer:
            yield self._flush()

    def discard(self, number: int) -> None:
        """The build gave the document up: its pages not yet encoded are dropped."""
        self.gone.add(number)
        self.buffer = [item for item in self.buffer if item[0] != number]

    def _flush(self) -> PagesEncoded:
        """Encode the buffered pages."""
        batch, self.buffer = self.buffer, []
        started = time.perf_counter()
        vectors = encode_resiliently(self.encoder, [page for _, page in batch], self.log)
        self.timer.add("encode", started)
        if self.tuner is not None:
            self.tuner.batch_done(len(batch), time.perf_counter() - started)
        vectors = pooled(vectors, self.options.settings.pool_factor, self.timer)
        if self.tuner is not None:
            self.tuner.waiting()
        return PagesEncoded(tuple((number, result) for (number, _), result in zip(batch, vectors)))

    def _queue_pages(self) -> int:
        """Two batches of the largest size still to run: once the trials are over, of the size kept
        (a processed ColQwen2.5 page is 7 MB in float32; the queue is sized for 8 while they run)."""
        return 2 * (self.tuner.largest_batch if self.tuner else self.encoder.batch_size)

    def _size_queue(self, feed: PageFeed) -> None:
        pages = self._queue_pages()
        if feed.queue_pages != pages:
            feed.set_queue_pages(pages)

    def tally(self, report: BuildReport) -> None:
        """The model's calls, the dtype fixes and the CPU tuning, into the report."""
        report.model_calls = self.encoder.forward_calls - self._calls_before
        report.dtype_fixes = [fix.to_dict() for fix in getattr(self.encoder, "dtype_fixes", [])]
        report.cpu_tuning = self.tuner.summary() if self.tuner else None


@contextmanager
def local_engine(model: ModelRef, options: BuildOptions, sources: list[FeedSource], root: Path,
                 timer: StageTimer, log: Log, factory: EncoderFactory, on_open: OnOpen | None = None) -> Iterator[LocalEngine]:
    """A loaded local engine, its converters and staging folder for the duration."""
    with tempfile.TemporaryDirectory(prefix="lgpt-stage-") as staging:
        converters = ConverterSet.detect(options.convert_timeout_s)
        try:
            engine = LocalEngine(model, options, sources, root, converters, Path(staging), timer, log, on_open)
            engine.load(factory)
            try:
                with cpu_threads(engine.encoder, engine.tuner.threads if engine.tuner else None):
                    yield engine
            finally:
                engine.close()
        finally:
            converters.close()
