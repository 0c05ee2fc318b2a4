"""The build: discover -> plan -> convert -> render -> encode -> commit, in one store transaction.

`build_index` lists the folder (stat only), lets the planner decide what to hash, hashes
that, plans (plan.py), and runs `_Build`: an engine (local_engine.py, or ray_engine.py for
--ray) turns the planned documents into events (ingest/events.py), and one loop hands them to
the commit policy (commit.py), which streams every page's vectors into a segment on disk and
commits. A plain build commits every --commit-every pages (a long document commits inside
itself, as "in progress"); a --rebuild or --strict build commits once at the end, holding only
a batch in memory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator
from dataclasses import replace
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..core.cpus import short_openmp_spin
from ..core.failpoints import failpoint
from ..core.terminal import ProgressSink, stage
from ..index.format.manifest import Manifest, ModelInfo, Settings
from ..index.protocols import Store
from ..index.transaction import Transaction
from ..index.text.artifact import TEXT
from ..ingest.discover import MARKDOWN, OFFICE, Discovery, discover, hash_files
from ..ingest.events import EngineEvent, OpenedDocument
from ..ingest.feed import FeedSource
from ..ingest.ocr import DEFAULT_OCR_LANG, Tesseract
from ..ingest.pagetext import PageTexts, TextSettings, find_ocr, ocr_mode
from ..ingest.render import size_setting
from ..models.failures import DeviceLost
from ..models.families import check_visual_tokens_supported
from ..models.loading import load_page_encoder
from ..models.resolve import ModelRef
from .commit import COMMIT_SHARE, DEFAULT_COMMIT_PAGES, CommitPolicy
from .local_engine import EncoderFactory, local_engine
from .model_checks import check_model, check_rebuild_keeps, choose_model, upgraded
from .options import BuildOptions, BuildReport, BuildSettings, Log, StageTimer
from .plan import BuildPlan, files_to_hash, plan_build
from .textfollow import follow_build, pending_pages, read_pending

CONVERTED = (OFFICE, MARKDOWN)  # the kinds a converter turns into PDF ("converting n/N")

__all__ = ["COMMIT_SHARE", "DEFAULT_COMMIT_PAGES", "BuildOptions", "BuildReport", "EncoderFactory", "build_index"]

OCR_NICE_BESIDE_ENCODER = 10  # the build's OCR this much lower while the encoder runs ($LGPT_OCR_NICE wins): it takes the cores left


def build_index(
    docs: Path,
    store: Store,
    options: BuildOptions | None = None,
    progress: ProgressSink | None = None,
    log: Log = lambda message: None,
    encoder_factory: EncoderFactory = load_page_encoder,
) -> BuildReport:
    """Bring the index in `store` up to date with the folder `docs`."""
    options = options or BuildOptions()
    asked = options.settings
    if asked.text or asked.ocr or asked.ocr_lang:  # a contradiction, a missing Tesseract or language: refused before any work
        _text_reader(asked.settled(None))
    report = BuildReport(index=store.location, source=os.path.abspath(docs), strict=options.strict)
    timer = StageTimer(report)
    if options.text_only:
        return _text_only(store, options, report, timer, log)
    stage(progress, "scanning")  # until the model's load (or the end, when nothing changed)
    scan_started, started = time.time_ns(), time.perf_counter()
    found = discover(docs, options.include, options.exclude, skip_dirs=store.local_folders)
    timer.add("discover", started)
    _discovered(report, found)

    with store.begin(options.wait_s, rebuild=options.rebuild) as txn:
        base = txn.base
        _as_it_stands(report, base)  # until a commit
        model = choose_model(txn.recorded, options)  # (a rebuild of a damaged index keeps its model and settings)
        report.model = model.to_dict()
        check_model(base, model, options, store)
        options = replace(options, settings=options.settings.settled(txn.recorded, options.rebuild, store.location))
        check_visual_tokens_supported(model, options.settings.max_visual_tokens)
        tesseract = _text_reader(options.settings)  # a language Tesseract lacks: exit 4 before any work
        started = time.perf_counter()
        hashes, unreadable = hash_files(files_to_hash(found, base, options.rehash or options.rebuild))
        timer.add("hash", started)
        failpoint("hashed")
        found.unreadable += unreadable
        report.hashed = len(hashes)
        report.unreadable = [{"path": p, "reason": why} for p, why in found.unreadable]
        plan = plan_build(found, hashes, base, options.metadata_rules, options.include, options.exclude,
                          options.rebuild, scan_started)
        check_rebuild_keeps(plan, base, model, options, found)
        report.unchanged, report.reused, report.removed, report.retagged = (plan.unchanged, len(plan.reused), len(plan.removed),
                                                                             plan.retagged)
        report.kept = plan.kept_elsewhere + plan.kept_unlisted + plan.kept_filtered
        for path, why in found.unreadable:
            log(f"warning: {path}: {why}; its documents stay in the index")
        if not plan.changes_catalog and not txn.needs_upgrade:
            _up_to_date(txn, options, report, log)
            _text_after(txn, options, tesseract, report, timer, log)
            return report
        build = _Build(txn, plan, model, options, report, timer, progress, log, scan_started)
        if options.reads_text:
            build.text = options.text_settings(tesseract)
        else:  # pixels only: no text read, and no "text" part beside the vectors (as in an index from before page text)
            build.text, build.policy.without_parts = None, (TEXT,)
        build.run(encoder_factory)
        if build.finished:
            _text_after(txn, options, tesseract, report, timer, log)
    return report


def _as_it_stands(report: BuildReport, base: Manifest | None) -> None:
    """The report names the index as it is (its generation, its pages): a build that commits nothing leaves it so."""
    report.generation, report.pages_total = (base.generation, base.page_count) if base is not None else (None, 0)


def _discovered(report: BuildReport, found: Discovery) -> None:
    report.documents_seen = len(found.files)
    report.skipped = len(found.skipped)
    report.skipped_files = [{"path": p, "reason": why} for p, why in found.skipped]
    report.skipped_files += [{"path": p, "reason": "the index folder"} for p in found.excluded]


def _text_only(store: Store, options: BuildOptions, report: BuildReport, timer: StageTimer, log: Log) -> BuildReport:
    """`build --text-only`: the pending text of the index read (OCR, as its settings say) and committed; no model."""
    with store.begin(options.wait_s) as txn:
        base = txn.base
        _as_it_stands(report, base)
        if base is not None:
            options = replace(options, settings=options.settings.settled(base, False, store.location))
            _text_after(txn, options, _text_reader(options.settings), report, timer, log)
    return report


def _up_to_date(txn: Transaction, options: BuildOptions, report: BuildReport, log: Log) -> None:
    """No document changed: nothing encoded. With another --language than the index records, the text index
    built again from the stored page text (the commit's lexical artifact), the vectors as they are."""
    base = txn.base
    if base is None:  # (a first build that found nothing: no generation to commit, so no index)
        skipped = f" ({report.skipped} file{'s' if report.skipped > 1 else ''} skipped)" if report.skipped else ""
        log(f"No document to index in {report.source}{skipped}: no index was created.")
        return
    log("Index is up to date: no document changed, no model work done.")
    language = options.settings.recorded()["language"]
    if not base.documents or base.settings.language == language:
        return
    manifest = txn.commit(base.documents, base.model, base.settings.model_copy(update={"language": language}),
                          base.failures, base.in_progress)
    report.generation, report.committed = manifest.generation, True
    log(f"The text index built again, its words stemmed in {language or 'the language detected per document'}.")


def _text_after(txn: Transaction, options: BuildOptions, tesseract: Tesseract | None, report: BuildReport,
                timer: StageTimer, log: Log) -> None:
    """The pending text the index still holds (an earlier --ocr later, a build killed before its text commit),
    read and committed unless --ocr later; the pages left pending, said and reported."""
    if tesseract is not None and options.reads_text and not options.ocr_later:
        read, manifest = read_pending(txn, options.text_settings(tesseract), log, timer.add_seconds)
        if manifest is not None:
            report.generation, report.pages_total, report.committed = manifest.generation, manifest.page_count, True
            report.text_commit_s = timer.since_start()
            log(f"Read the pending text of {read} page(s) (generation {manifest.generation}).")
    report.pages_text_pending = len(pending_pages(txn.current, txn.backend.base_blobs()))
    if report.pages_text_pending:
        report.text_commit_s = None
        log(f"{report.pages_text_pending} page(s) are searchable by their pixels, their text pending: "
            "`lgpt-index build --text-only` (or the next build, or a watcher) reads it.")


@contextmanager
def ocr_below_encoder(texts: PageTexts | None) -> Iterator[None]:
    """While the encoder runs, the build's OCR starts its processes OCR_NICE_BESIDE_ENCODER lower in priority (its
    text readers' process scope says so; $LGPT_OCR_NICE, where set, wins): it takes the cores the encoder leaves
    and never slows it (pixels first: nothing waits for OCR)."""
    if texts is None or texts.settings.tesseract is None:
        yield
        return
    texts.scope.niceness = OCR_NICE_BESIDE_ENCODER
    try:
        yield
    finally:
        texts.scope.niceness = None


def _text_reader(settings: BuildSettings) -> Tesseract | None:
    """The Tesseract the build's OCR uses, for settled settings (None: --text never, --ocr never, or none installed),
    or EnvironmentMissing (exit 4) for a language it lacks, or --ocr always without it."""
    if settings.text == "never":  # pixels only: no OCR, nothing asked of Tesseract
        return None
    tesseract = find_ocr(ocr_mode(settings.ocr), settings.ocr_lang or DEFAULT_OCR_LANG)
    if tesseract is not None:
        short_openmp_spin()  # the model's idle threads would spin on the cores Tesseract wants
    return tesseract


class Engine(Protocol):
    """What the build needs of an engine (local_engine.LocalEngine, ray_engine.RayBuildEngine)."""

    @property
    def encoder(self) -> Any:
        """The facts of its encoder: precision, dim, batch_size, render_size, max_visual_tokens."""

    def describe(self) -> str | None: ...

    def events(self) -> Generator[EngineEvent, None, None]: ...

    def discard(self, number: int) -> None: ...

    def tally(self, report: BuildReport) -> None: ...


class _Build:
    """Feeds the planned documents through an engine, and its events into the commit policy."""

    def __init__(self, txn: Transaction, plan: BuildPlan, model: ModelRef, options: BuildOptions, report: BuildReport,
                 timer: StageTimer, progress: ProgressSink | None, log: Log, scan_started_ns: int) -> None:
        self.txn, self.plan, self.model, self.options = txn, plan, model, options
        self.finished = False  # its last commit made (not stopped, nor --strict with failures)
        self.report, self.timer, self.progress, self.log = report, timer, progress, log
        self.policy = CommitPolicy(txn, plan, options, report, timer, progress, log, scan_started_ns)
        self.text: TextSettings | None = TextSettings(ocr="never")  # None: --text never, no page text read
        base = txn.base
        if base is not None:
            language = options.settings.recorded()["language"]  # another --language: no page encoded, the text index built again
            self.policy.model_info = upgraded(base.model, model)
            self.policy.settings = base.settings.model_copy(update={"language": language})

    def run(self, encoder_factory: EncoderFactory) -> None:
        # made before the engine: the local one tells it of the documents it opens while the model loads
        texts = PageTexts(self.text, self._sources(), self.log, self._timed) if self.text and self.plan.embed else None
        try:
            if self.plan.embed:
                converted = sum(e.file.kind in CONVERTED for e in self.plan.embed) if not self.options.ray else 0
                stage(self.progress, "scanning", ended=True)
                stage(self.progress, "loading the model")
                if self.progress and converted:
                    self.progress.add_task("converting", converted)
                with ocr_below_encoder(texts), self._engine(encoder_factory, texts) as engine:
                    stage(self.progress, "loading the model", ended=True)
                    self._adopt(engine.encoder)
                    if (description := engine.describe()) is not None:
                        self.log(description)
                    self._embed(engine, texts)
            self.policy.finish()
            report = self.report
            self.finished = not report.stopped and not (self.options.strict and report.failures)
            if self.finished:
                report.visual_commit_s = report.text_commit_s = self.timer.since_start()
            if texts is not None and self.finished:
                self._follow(texts)
        finally:
            if texts is not None:
                texts.close()  # a model that failed to load: the reading started beside it ends too

    def _follow(self, texts: PageTexts) -> None:
        """Text follows: the OCR of the pages committed pending, waited for and committed in a later generation."""
        stage(self.progress, "reading the pending text (OCR)")
        manifest = follow_build(self.txn, self.policy.followups, texts)
        stage(self.progress, "reading the pending text (OCR)", ended=True)
        if manifest is not None:
            self.report.generation, self.report.pages_total = manifest.generation, manifest.page_count
            self.report.text_commit_s = self.timer.since_start()
        self.report.text, self.report.page_warnings = texts.tally.to_dict(), texts.tally.warnings

    def _timed(self, name: str, seconds: float) -> None:
        """The stage clock of page text; each Tesseract run told to the progress as it ends."""
        self.timer.add_seconds(name, seconds)
        if name == "ocr" and self.progress:
            self.progress.advance("OCR runs")

    def _engine(self, encoder_factory: EncoderFactory, texts: PageTexts | None) -> AbstractContextManager[Engine]:
        root = Path(self.report.source)
        if self.options.ray:
            from .ray_engine import ray_engine

            return ray_engine(self.model, self.options, self._sources(), root, self.timer, self.log)
        def opened(number: int, document: OpenedDocument) -> None:
            if self.progress and self.plan.embed[number].file.kind in CONVERTED:
                self.progress.advance("converting")
            if texts is not None:
                texts.open(number, document)

        return local_engine(self.model, self.options, self._sources(), root, self.timer, self.log, encoder_factory, opened)

    def _embed(self, engine: Engine, texts: PageTexts | None) -> None:
        """The one loop: every engine event into the commit policy (with its pages' text, unless --text never)."""
        if self.progress:
            self.progress.add_task("documents", len(self.plan.embed))
            self.progress.add_task("pages", None)

        def discard(number: int) -> None:
            engine.discard(number)
            if texts is not None:
                texts.drop(number)

        self.policy.discard = discard
        if texts is not None:
            self.policy.read_yet = texts.read_yet
        events = texts.attach(engine.events()) if texts is not None else engine.events()
        try:
            for event in events:
                self.policy.handle(event)
        except DeviceLost as exc:  # commit what is complete (a plain build), exit 4
            self.policy.stop(exc.message)
        finally:
            events.close()  # the feed's and the text readers' threads and processes end now, not when collected
            engine.tally(self.report)
            if texts is not None:
                self.report.text, self.report.page_warnings = texts.tally.to_dict(), texts.tally.warnings

    def _adopt(self, encoder) -> None:
        """The encoder's facts become the index's settings."""
        self.report.precision = encoder.precision.to_dict()
        p = encoder.precision
        self.log(f"model {self.model.id} on {p.device} in {p.dtype} (autocast {'on' if p.autocast else 'off'}), "
                 f"batch size {encoder.batch_size}")
        for warning in encoder.precision.warnings:
            self.log(f"warning: {warning}")
        recorded = replace(self.options.settings, max_visual_tokens=encoder.max_visual_tokens).recorded()
        self.policy.settings = Settings(
            device=encoder.precision.device, dtype=encoder.precision.dtype, autocast=encoder.precision.autocast,
            batch_size=encoder.batch_size, render_size=size_setting(encoder.render_size), dim=encoder.dim, **recorded,
        )
        self.policy.model_info = ModelInfo(**self.model.to_dict(), dim=encoder.dim)

    def _sources(self) -> list[FeedSource]:
        sources = []
        for embed in self.plan.embed:
            resume = embed.resume
            first = resume.pages + 1 if resume else 1
            pdf = self.txn.pdf_path(resume.pdf) if resume and resume.pdf else None
            sources.append(FeedSource(Path(embed.file.path), embed.file.kind, embed.file.size, first, pdf))
        return sources
