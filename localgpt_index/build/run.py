"""The build: discover -> plan -> convert -> render -> encode -> commit, in one store transaction.

`build_index` lists the folder (stat only), lets the planner decide what to hash, hashes
that, plans (plan.py), and runs `_Build`, which feeds the planned documents through the
pipeline and streams every page's vectors into a segment on disk. A plain build commits
every --commit-every pages (a long document commits inside itself, as "in progress");
a --rebuild or --strict build commits once at the end, holding only a batch in memory.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..ingest import processes
from ..ingest.convert import ConverterSet, MissingConverter
from ..ingest.discover import Discovery, discover, hash_files
from ..models.batching import encode_resiliently
from ..models.failures import DeviceLost
from ..models.families import check_visual_tokens_supported
from ..models.loading import EncoderOptions, load_page_encoder
from ..models.protocols import PageEncoder
from ..models.render_size import expected_render_size
from ..core.errors import DocumentError, EnvironmentMissing, ExitCode, IndexProblem, LgptError
from ..core.failpoints import failpoint
from ..index.manifest import Document, Failure, Manifest, ModelInfo, Settings, Span
from ..core.metadata import Rules
from ..models.resolve import DEFAULT_MODEL, FINGERPRINT_SCHEME, ModelRef, fingerprint_in, resolve_model, resolve_recorded, same_model
from ..ingest.feed import FeedSource, OpenedDocument, PageFeed
from .plan import BuildPlan, Embed, files_to_hash, plan_build, trusted_stat
from ..ingest.render import DEFAULT_RENDER_TIMEOUT_S, size_setting
from ..index.store import IndexStore, PageRef, SegmentWriter, Transaction
from ..models.families import family_named
from ..models.pooling import pool_some
from ..models.tuning import CANDIDATES, CpuTuner, cpu_threads
from ..core.terminal import ProgressSink

DEFAULT_COMMIT_PAGES = 1000
COMMIT_SHARE = 20  # by default, commits take at most about 1/20 of a build's time (a huge catalog commits less often)


@dataclass
class BuildOptions:
    model: str | None = None  # None: the model the index was built with, else the default
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int | None = None
    rebuild: bool = False
    rehash: bool = False  # read every file, not only those whose stat changed
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    convert_timeout_s: float = 120.0
    render_timeout_s: float = DEFAULT_RENDER_TIMEOUT_S
    convert_workers: int = 2  # conversions running side by side, ahead of the model
    compile: bool = False  # torch.compile the model: faster on a GPU after a one-time compilation
    strict: bool = False  # any failed document: commit nothing
    pool_factor: int = 1  # >1: hierarchical token pooling, about 1/pool_factor of the vectors (lossy)
    metadata_rules: Rules | None = None  # from --metadata; None keeps what the index has
    commit_every_pages: int | None = None  # None: 1000, spaced out when commits get slow (huge catalogs)
    commit_every_s: float = 600.0
    wait_s: float = 0.0
    ray: str | None = None  # a Ray cluster (auto, an address, or local) for conversion, rendering and encoding
    ray_actors: int | None = None  # encoder actors (default: one per GPU, or half the CPUs)
    ray_gpus_per_actor: float = 1.0
    max_visual_tokens: int | None = None  # dynamic-resolution families: image tokens a page at most (None: the index's, else the model's)

    def encoder_options(self) -> EncoderOptions:
        """What the model layer needs of these options to load the page encoder."""
        return EncoderOptions(self.device, self.dtype, self.batch_size, self.compile, self.max_visual_tokens)


@dataclass
class BuildReport:
    index: str
    source: str
    generation: int | None = None
    documents_seen: int = 0
    indexed: int = 0
    unchanged: int = 0
    retagged: int = 0  # unchanged, but given other metadata (--metadata): counted in unchanged too
    reused: int = 0  # renamed or duplicate content: vectors reused, nothing embedded
    removed: int = 0
    kept: int = 0  # documents of other folders, of folders that could not be listed, or outside the globs
    failed: int = 0
    skipped: int = 0
    hashed: int = 0  # files read because their stat changed (all of them with --rehash)
    pages_embedded: int = 0
    pages_total: int = 0
    model_calls: int = 0
    committed: bool = False
    strict: bool = False
    stopped: str | None = None  # why the build stopped before the end (a lost device)
    model: dict | None = None
    precision: dict | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    dtype_fixes: list[dict] = field(default_factory=list)  # what the precision guard aligned
    cpu_tuning: dict | None = None  # on a CPU: the batch size and threads measured and chosen
    failures: list[Failure] = field(default_factory=list)
    skipped_files: list[dict] = field(default_factory=list)
    unreadable: list[dict] = field(default_factory=list)  # folders and files that could not be read: their documents stay
    notes: list[dict] = field(default_factory=list)  # per document: what conversion changed

    @property
    def exit_code(self) -> ExitCode:
        if self.strict and self.failures:
            return ExitCode.FAILURE
        if self.stopped or any(f.environment for f in self.failures):
            return ExitCode.ENVIRONMENT
        return ExitCode.PARTIAL if self.failures else ExitCode.OK

    def to_dict(self) -> dict:
        data = asdict(self)
        data["failures"] = [f.model_dump() for f in self.failures]
        data["exit_code"] = int(self.exit_code)
        return data


Log = Callable[[str], None]
EncoderFactory = Callable[[ModelRef, EncoderOptions], PageEncoder]


class _Timer:
    """Seconds spent per stage. Stages that run in parallel threads add up their busy time."""

    def __init__(self, report: BuildReport) -> None:
        self.report = report
        self._lock = threading.Lock()

    def add(self, stage: str, start: float) -> None:
        self.add_seconds(stage, time.perf_counter() - start)

    def add_seconds(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.report.stage_seconds[stage] = round(self.report.stage_seconds.get(stage, 0.0) + seconds, 3)


def build_index(
    docs: Path,
    store: IndexStore,
    options: BuildOptions | None = None,
    progress: ProgressSink | None = None,
    log: Log = lambda message: None,
    encoder_factory: EncoderFactory = load_page_encoder,
) -> BuildReport:
    """Bring the index in `store` up to date with the folder `docs`."""
    options = options or BuildOptions()
    processes.reset()
    report = BuildReport(index=store.location, source=os.path.abspath(docs), strict=options.strict)
    timer = _Timer(report)
    scan_started = time.time_ns()
    started = time.perf_counter()
    found = discover(docs, options.include, options.exclude, skip_dirs=store.local_folders)
    timer.add("discover", started)
    report.documents_seen = len(found.files)
    report.skipped = len(found.skipped)
    report.skipped_files = [{"path": p, "reason": why} for p, why in found.skipped]
    report.skipped_files += [{"path": p, "reason": "the index folder"} for p in found.excluded]

    with store.begin(options.wait_s, rebuild=options.rebuild) as txn:
        base = txn.base
        model = _choose_model(base, options)
        report.model = model.to_dict()
        _check_model(base, model, options, store)
        options = _with_recorded_visual_tokens(base, options)
        check_visual_tokens_supported(model, options.max_visual_tokens)
        started = time.perf_counter()
        hashes, unreadable = hash_files(files_to_hash(found, base, options.rehash or options.rebuild))
        timer.add("hash", started)
        failpoint("hashed")
        found.unreadable += unreadable
        report.hashed = len(hashes)
        report.unreadable = [{"path": p, "reason": why} for p, why in found.unreadable]
        plan = plan_build(found, hashes, base, options.metadata_rules, options.include, options.exclude,
                          options.rebuild, scan_started)
        _check_rebuild_keeps(plan, base, model, options, found)
        report.unchanged, report.reused, report.removed = plan.unchanged, len(plan.reused), len(plan.removed)
        report.retagged = plan.retagged
        report.kept = plan.kept_elsewhere + plan.kept_unlisted + plan.kept_filtered
        for path, why in found.unreadable:
            log(f"warning: {path}: {why}; its documents stay in the index")
        if not plan.changes_catalog and not txn.needs_upgrade:
            report.pages_total = base.page_count if base else 0
            report.generation = base.generation if base else None
            log("Index is up to date: no document changed, no model work done.")
            return report
        _Build(txn, plan, model, options, report, timer, progress, log, scan_started).run(encoder_factory)
    return report


def _choose_model(base: Manifest | None, options: BuildOptions) -> ModelRef:
    """The model given, else the index's own (at the revision it recorded), else the default."""
    if base is not None and options.model in (None, base.model.id):
        return resolve_recorded(base.model.id, base.model.path, base.model.revision)
    return resolve_model(options.model or DEFAULT_MODEL)


def _check_model(base: Manifest | None, model: ModelRef, options: BuildOptions, store: IndexStore) -> None:
    if base is None or options.rebuild or not base.documents:
        return
    if not same_model(model, base.model.fingerprint, base.model.fingerprint_scheme):
        theirs = fingerprint_in(model, base.model.fingerprint_scheme)
        raise IndexProblem(
            f"{store.location} was built with {base.model.id} ({base.model.fingerprint}); {model.id} ({theirs}) is a different model.",
            hint="Use --rebuild to embed everything again with the new model, or another --name.",
        )
    if base.settings.pool_factor != options.pool_factor:
        raise IndexProblem(
            f"{store.location} was built with --pool-factor {base.settings.pool_factor}, not {options.pool_factor}; "
            "pages pooled differently would not score alike.",
            hint=f"Use --pool-factor {base.settings.pool_factor}, or --rebuild to change it.",
        )


def _upgraded(recorded: ModelInfo, model: ModelRef) -> ModelInfo:
    """The index's model record, with the current fingerprint scheme where it is the same model
    recorded under an older one (the next commit writes it: writers upgrade, readers never do)."""
    if recorded.fingerprint_scheme == FINGERPRINT_SCHEME or not same_model(model, recorded.fingerprint, recorded.fingerprint_scheme):
        return recorded
    return ModelInfo(**{**recorded.model_dump(), "fingerprint": model.fingerprint, "fingerprint_scheme": FINGERPRINT_SCHEME})


def _with_recorded_visual_tokens(base: Manifest | None, options: BuildOptions) -> BuildOptions:
    """--max-visual-tokens: by default the index's own; another value needs --rebuild, since pages
    seen through another number of tokens would not score alike."""
    from dataclasses import replace

    recorded = base.settings.max_visual_tokens if base is not None else None
    if recorded is None or options.rebuild:
        return options
    if options.max_visual_tokens is None:
        return replace(options, max_visual_tokens=recorded)
    if options.max_visual_tokens != recorded and base.documents:
        raise IndexProblem(
            f"the index was built with --max-visual-tokens {recorded}, not {options.max_visual_tokens}; "
            "pages seen through another number of image tokens would not score alike.",
            hint=f"Use --max-visual-tokens {recorded}, or --rebuild to change it.",
        )
    return options


def _check_rebuild_keeps(plan: BuildPlan, base: Manifest | None, model: ModelRef, options: BuildOptions, found: Discovery) -> None:
    """A rebuild with another model (or pool factor) cannot keep documents it does not embed again."""
    if not options.rebuild or base is None or not plan.keep:
        return
    if same_model(model, base.model.fingerprint, base.model.fingerprint_scheme) and base.settings.pool_factor == options.pool_factor:
        return
    folders = sorted({os.path.dirname(d.path) for d in plan.keep})
    shown = ", ".join(folders[:3]) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
    raise IndexProblem(
        f"a rebuild of {found.root} with another model or pool factor would leave {len(plan.keep)} document(s) it does not "
        f"embed again with vectors that no longer compare ({shown}).",
        hint="Remove them first (lgpt-index remove FOLDER), or build into another --name.",
    )


@dataclass
class _DocState:
    """One planned document on its way through the pipeline."""

    embed: Embed
    first_page: int = 1  # the first page this build renders (later than 1 for a resumed document)
    done_spans: list[Span] = field(default_factory=list)  # committed before (a resumed or long document)
    total: int | None = None  # pages of the whole document, once opened
    seg_first: int | None = None  # its first page in the segment being written
    seg_pages: int = 0
    queued: int = 0  # pages waiting in the batch buffer
    rendered: bool = False
    converter: str | None = None
    pdf: tuple[str, str] | None = None  # (name in the index, sha256) of its stored PDF

    @property
    def path(self) -> str:
        return self.embed.file.path

    @property
    def pages(self) -> int:
        return sum(s.pages for s in self.done_spans) + self.seg_pages

    @property
    def complete(self) -> bool:
        return self.rendered and self.queued == 0

    def document(self, segment_id: str | None, scan_started_ns: int, file=None, metadata=None) -> Document:
        spans = list(self.done_spans)
        if self.seg_pages:
            spans.append(Span(segment=segment_id, first=self.seg_first, pages=self.seg_pages))
        file = file or self.embed.file
        return Document(
            path=file.path, sha256=self.embed.sha256, size=file.size, stat=trusted_stat(file.stat, scan_started_ns),
            kind=file.kind, pages=sum(s.pages for s in spans), spans=spans, converter=self.converter,
            pdf=self.pdf[0] if self.pdf else None, pdf_sha256=self.pdf[1] if self.pdf else None,
            metadata=self.embed.metadata if metadata is None else metadata,
        )


class _Build:
    """Feeds the planned documents through the pipeline into the transaction."""

    def __init__(self, txn: Transaction, plan: BuildPlan, model: ModelRef, options: BuildOptions, report: BuildReport,
                 timer: _Timer, progress: ProgressSink | None, log: Log, scan_started_ns: int) -> None:
        self.txn, self.plan, self.model, self.options = txn, plan, model, options
        self.report, self.timer, self.progress, self.log = report, timer, progress, log
        self.scan_started_ns = scan_started_ns
        self.once = options.rebuild or options.strict  # one commit, at the end
        base = txn.base
        self.model_info = _upgraded(base.model, model) if base is not None else None
        self.settings = base.settings if base is not None else Settings()
        self.documents: dict[str, Document] = {d.path: d for d in plan.documents}
        if not options.rebuild:  # a changed file's old entry answers until its new one is committed
            for embed in plan.embed:
                for path, old in [(embed.file.path, embed.replaces), *[(f.path, o) for f, _, o in embed.twins]]:
                    if old is not None:
                        self.documents[path] = old
        self.in_progress: dict[str, Document] = {e.file.path: e.resume for e in plan.embed if e.resume and not self.once}
        self.failures: list[Failure] = []
        self.encoder: PageEncoder | None = None
        self.writer: SegmentWriter | None = None
        self.states: dict[int, _DocState] = {}
        self.pending: list[_DocState] = []  # complete, waiting for the next commit
        self.buffer: list[tuple[int, object]] = []  # (document number, prepared page)
        self.gone: set[int] = set()
        self.pending_pages = 0
        self.last_commit = time.monotonic()
        self.commit_seconds = 0.0
        self.tuner: CpuTuner | None = None

    # the run

    def run(self, encoder_factory: EncoderFactory) -> None:
        if self.plan.embed and self.options.ray:
            self._embed_with_ray()
        elif self.plan.embed:
            with tempfile.TemporaryDirectory(prefix="lgpt-stage-") as staging:
                converters = ConverterSet.detect(self.options.convert_timeout_s)
                try:
                    self._load_and_embed(encoder_factory, converters, Path(staging))
                finally:
                    converters.close()
        if self.report.stopped:
            return
        if self.options.strict and self.failures:
            self.log(f"--strict: {len(self.failures)} document(s) failed, nothing committed.")
            return
        self._commit()

    def _load_and_embed(self, encoder_factory: EncoderFactory, converters: ConverterSet, staging: Path) -> None:
        """Load the model while the first pages are converted and rendered (at the size its processor
        settings say: seconds of a second core that would otherwise wait), then embed every page."""
        expected = expected_render_size(self.model, self.options.max_visual_tokens)
        early = None if expected is None else self._feed(converters, staging, expected, 2 * max(CANDIDATES)).start()
        try:
            self._load(encoder_factory)
        except BaseException:
            if early is not None:
                early.close()
            raise
        try:
            with cpu_threads(self.encoder):
                self._embed_all(self._feed_for_encoder(early, converters, staging))
        except DeviceLost as exc:
            self._stop(exc)
        finally:
            self.report.model_calls = self.encoder.forward_calls
            self.report.dtype_fixes = [fix.to_dict() for fix in getattr(self.encoder, "dtype_fixes", [])]
            self.report.cpu_tuning = self.tuner.summary() if self.tuner else None

    def _feed(self, converters: ConverterSet, staging: Path, render_size, queue_pages: int) -> PageFeed:
        return PageFeed(
            self._sources(), converters, staging, render_size, queue_pages=queue_pages,
            convert_workers=self.options.convert_workers, timings=self.timer.add_seconds,
            render_timeout_s=self.options.render_timeout_s, root=Path(self.report.source), prepare=None,
        )

    def _feed_for_encoder(self, early: PageFeed | None, converters: ConverterSet, staging: Path) -> PageFeed:
        """The feed started during the load, now preparing pages for the encoder; a new one if the
        encoder renders at another size than its settings said (what was rendered is thrown away)."""
        encoder = self.encoder
        if early is not None and early.render_size != encoder.render_size:
            self.log(f"note: the model's processor wants pages at {encoder.render_size}, not {early.render_size} "
                     "as its saved settings say: rendering again")
            early.close()
            processes.reset()
            early = None
        queue_pages = self._queue_pages()
        feed = early or self._feed(converters, staging, encoder.render_size, queue_pages)
        feed.set_queue_pages(queue_pages)
        feed.set_prepare(encoder.prepare_page)
        return feed

    def _load(self, encoder_factory: EncoderFactory) -> None:
        failpoint("model-load")  # tests: what was rendered before the model began to load
        started = time.perf_counter()
        self._adopt(encoder_factory(self.model, self.options.encoder_options()))
        self.timer.add("load_model", started)
        encoder = self.encoder
        if encoder.precision.device_type == "cpu" and family_named(encoder.model.family).torch:
            self.tuner = CpuTuner(encoder, fixed_batch=self.options.batch_size is not None)

    def _adopt(self, encoder) -> None:
        """The encoder's facts become the index's settings."""
        self.encoder = encoder
        self.report.precision = encoder.precision.to_dict()
        for warning in encoder.precision.warnings:
            self.log(f"warning: {warning}")
        self.settings = Settings(
            device=encoder.precision.device, dtype=encoder.precision.dtype, autocast=encoder.precision.autocast,
            batch_size=encoder.batch_size, render_size=size_setting(encoder.render_size),
            dim=encoder.dim, pool_factor=self.options.pool_factor, max_visual_tokens=encoder.max_visual_tokens,
        )
        self.model_info = ModelInfo(**self.model.to_dict(), dim=encoder.dim)

    def _embed_with_ray(self) -> None:
        """Conversion, rendering and encoding on a Ray cluster; commits here, as in a local build."""
        from .ray_engine import connect, disconnect

        started_ray = connect(self.options.ray)
        try:
            self._run_ray_engine()
        finally:
            if started_ray:
                disconnect()

    def _run_ray_engine(self) -> None:
        from .ray_engine import RayEngine, quiet_stdout

        with quiet_stdout():
            started = time.perf_counter()
            engine = RayEngine(self.model, self.options)
            self.timer.add("load_model", started)
            self._adopt(engine.encoder)
            self.log(f"ray: {len(engine.actors)} encoder actor(s) on {engine.encoder.precision.device}, "
                     f"{engine.encoder.precision.dtype}")
            try:
                with tempfile.TemporaryDirectory(prefix="lgpt-stage-") as staging:
                    self._consume_encoded(engine.feed(self._sources(), Path(self.report.source), Path(staging)))
            except DeviceLost as exc:
                self._stop(exc)
            finally:
                engine.finish()
                self.report.model_calls = engine.encoder.forward_calls
                self.report.dtype_fixes = list(engine.encoder.dtype_fixes or [])

    def _consume_encoded(self, feed) -> None:
        """Events whose pages are already encoded (open, encoded, end, error), in document order."""
        if self.progress:
            self.progress.add_task("documents", len(self.plan.embed))
            self.progress.add_task("pages", None)
        for event in feed:
            number = event.number
            if number in self.gone:
                continue
            if event.kind == "error":
                self._fail(number, event.error)
            elif event.kind == "open":
                self._open(number, event.document)
            elif event.kind == "encoded":
                self._take_encoded(number, event.image)
            else:  # "end": every page of the document has come
                self.states[number].rendered = True
                self._finish_ready([number])
            self._commit_if_due()

    def _take_encoded(self, number: int, results) -> None:
        if isinstance(results, DocumentError):
            self._fail(number, results)
            return
        state = self.states[number]
        for result in results:
            if isinstance(result, DocumentError):
                self._fail(number, result)
                return
            self._append(state, result)
        failpoint("encode")
        if self.progress:
            self.progress.advance("pages", len(results))

    def _stop(self, exc: DeviceLost) -> None:
        """The device is gone: commit what is complete (a plain build) and report exit 4."""
        self.report.stopped = exc.message
        self.log(f"error: {exc.message}")
        self.buffer.clear()
        if not self.once:
            self._commit()

    def _sources(self) -> list[FeedSource]:
        sources = []
        for embed in self.plan.embed:
            resume = embed.resume
            first = resume.pages + 1 if resume else 1
            pdf = self.txn.pdf_path(resume.pdf) if resume and resume.pdf else None
            sources.append(FeedSource(Path(embed.file.path), embed.file.kind, embed.file.size, first, pdf))
        return sources

    def _embed_all(self, feed: PageFeed) -> None:
        if self.progress:
            self.progress.add_task("documents", len(self.plan.embed))
            self.progress.add_task("pages", None)
        encoder = self.encoder
        for event in feed:
            if event.number in self.gone:
                continue
            if event.kind == "error":
                self._fail(event.number, self._why_failed(event.number, event.error))
            elif event.kind == "open":
                self._open(event.number, event.document)
            elif event.kind == "page":
                self.states[event.number].queued += 1
                self.buffer.append((event.number, event.image))
                if len(self.buffer) >= encoder.batch_size:
                    self._flush()
                    self._size_queue(feed)
            else:  # "end": every page of the document is in the buffer or encoded
                self.states[event.number].rendered = True
                self._finish_ready([event.number])
            self._commit_if_due()
        self._flush()

    def _queue_pages(self) -> int:
        """Two batches of the largest size still to run: once the trials are over, of the size kept
        (a processed ColQwen2.5 page is 7 MB in float32; the queue is sized for 8 while they run)."""
        return 2 * (self.tuner.largest_batch if self.tuner else self.encoder.batch_size)

    def _size_queue(self, feed: PageFeed) -> None:
        pages = self._queue_pages()
        if feed.queue_pages != pages:
            feed.set_queue_pages(pages)

    def _why_failed(self, number: int, error: DocumentError) -> DocumentError:
        """A document that could not be converted or rendered because it was deleted or edited
        meanwhile says so, not what poppler or LibreOffice made of the missing or half-written file."""
        changed = _changed_since_discovery(self.plan.embed[number].file)
        return DocumentError("discover", changed) if changed else error

    def _open(self, number: int, document: OpenedDocument) -> None:
        embed = self.plan.embed[number]
        resume = embed.resume
        state = _DocState(embed, total=document.pages, rendered=False)
        if resume is not None:
            state.first_page = resume.pages + 1
            state.done_spans = list(resume.spans)
            state.converter = resume.converter
            state.pdf = (resume.pdf, resume.pdf_sha256) if resume.pdf else None
        elif document.converter:
            state.converter = document.converter
            state.pdf = self.txn.store_pdf(document.pdf)
        for note in document.notes:
            self.report.notes.append({"path": embed.file.path, "note": note})
            self.log(f"note: {embed.file.path}: {note}")
        self.states[number] = state

    def _flush(self) -> None:
        """Encode the buffered pages and stream their vectors into the segment being written."""
        if not self.buffer:
            return
        batch, self.buffer = self.buffer, []
        started = time.perf_counter()
        vectors = self._encode([page for _, page in batch])
        self.timer.add("encode", started)
        if self.tuner is not None:
            self.tuner.batch_done(len(batch), time.perf_counter() - started)
        if self.options.pool_factor > 1:
            started = time.perf_counter()
            vectors = pool_some(vectors, self.options.pool_factor)
            self.timer.add("pool", started)
        ended: list[int] = []
        for (number, _), result in zip(batch, vectors):
            state = self.states.get(number)
            if state is None or number in self.gone:
                continue
            state.queued -= 1
            if isinstance(result, DocumentError):
                self._fail(number, result)
                continue
            self._append(state, result)
            ended.append(number)
        failpoint("encode")
        if self.progress:
            self.progress.advance("pages", len(batch))
        self._finish_ready(ended)
        if self.tuner is not None:
            self.tuner.waiting()

    def _append(self, state: _DocState, vectors: np.ndarray) -> None:
        if self.writer is None:
            self.writer = self.txn.segment_writer(self.encoder.dim)
        file = state.embed.file
        ref = PageRef(file.path, state.pages + 1, state.embed.sha256, file.kind, state.embed.metadata)
        with self.txn.writing():
            index = self.writer.append(vectors, ref)
        if state.seg_first is None:
            state.seg_first = index
        state.seg_pages += 1
        self.pending_pages += 1
        self.report.pages_embedded += 1

    def _encode(self, pages: list) -> list[np.ndarray | DocumentError]:
        return encode_resiliently(self.encoder, pages, self.log)

    def _finish_ready(self, numbers: list[int]) -> None:
        for number in dict.fromkeys(numbers):
            state = self.states.get(number)
            if state is None or not state.complete or number in self.gone:
                continue
            changed = _changed_since_discovery(state.embed.file) or next(
                (why for twin, _, _ in state.embed.twins if (why := _changed_since_discovery(twin))), None
            )
            if changed:
                self._fail(number, DocumentError("discover", changed))
                continue
            del self.states[number]
            self.pending.append(state)
            self.report.indexed += 1
            self.report.reused += len(state.embed.twins)
            if self.progress:
                self.progress.advance("documents")

    def _fail(self, number: int, exc: DocumentError) -> None:
        embed = self.plan.embed[number]
        self.states.pop(number, None)
        self.gone.add(number)
        self.buffer = [item for item in self.buffer if item[0] != number]
        self.report.failed += 1
        failure = Failure(path=embed.file.path, stage=exc.stage, reason=exc.reason[:2000], environment=isinstance(exc, MissingConverter))
        self.failures.append(failure)
        self.report.failures.append(failure)
        for path in [embed.file.path, *[twin.path for twin, _, _ in embed.twins]]:
            self.in_progress.pop(path, None)
            if path in self.documents and self.documents[path].sha256 != embed.sha256:
                del self.documents[path]  # the old content of a file whose new content failed
        if self.progress:
            self.progress.advance("documents")

    # commits

    def _commit_if_due(self) -> None:
        if not (self.pending or self.pending_pages):
            return
        now = time.monotonic()
        every = self.options.commit_every_pages or DEFAULT_COMMIT_PAGES
        due = self.pending_pages >= every or now - self.last_commit >= self.options.commit_every_s
        if not due:
            return
        if self.once:
            self._seal()  # segments of bounded size, staged for the one commit at the end
            self.last_commit = now
        elif self.options.commit_every_pages or now - self.last_commit >= COMMIT_SHARE * self.commit_seconds:
            self._commit()

    def _seal(self) -> None:
        """Seal the segment being written; the documents complete so far take their places in the
        catalog, and those still in flight keep the pages they have as spans of it."""
        segment = self.txn.finish_segment(self.writer) if self.writer is not None else None
        self.writer = None
        segment_id = segment.id if segment else None
        for state in self.pending:
            doc = state.document(segment_id, self.scan_started_ns)
            self.documents[doc.path] = doc
            self.in_progress.pop(doc.path, None)
            for twin, metadata, _ in state.embed.twins:
                self.documents[twin.path] = state.document(segment_id, self.scan_started_ns, twin, metadata)
        self.pending = []
        for state in self.states.values():
            if state.seg_pages or state.done_spans:
                doc = state.document(segment_id, self.scan_started_ns)
                state.done_spans, state.seg_first, state.seg_pages = list(doc.spans), None, 0
                if not self.once:  # a resumed build carries on from here
                    self.in_progress[doc.path] = doc
        self.pending_pages = 0

    def _commit(self) -> None:
        """Seal, then commit a generation with everything complete so far."""
        started = time.perf_counter()
        self._seal()
        manifest = self.txn.commit(list(self.documents.values()), self.model_info, self.settings,
                                   self.failures, list(self.in_progress.values()))
        self.report.generation = manifest.generation
        self.report.committed = True
        self.report.pages_total = manifest.page_count
        self.last_commit = time.monotonic()
        self.commit_seconds = time.perf_counter() - started
        self.timer.add("commit", started)


def _changed_since_discovery(file) -> str | None:
    """Why the file's vectors cannot be trusted to match its recorded sha256, if they cannot."""
    try:
        stat = os.stat(file.path)
    except OSError:
        return "the file disappeared during the build"
    # ctime too: a rewrite in place that restores size and mtime (cp -p, rsync --inplace -t) still moves it
    now = (stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns)
    if now != (file.stat.size, file.stat.mtime_ns, file.stat.ino, file.stat.ctime_ns):
        return "the file changed during the build; the next build indexes its new content"
    return None
