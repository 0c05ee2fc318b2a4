"""The build pipeline: discover -> convert -> render -> encode -> commit."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .convert import ConverterSet, MissingConverter
from .device import choose_precision, default_batch_size, detect_capabilities
from .discover import SourceFile, discover
from .encode import ByaldiEncoder, PageEncoder
from .errors import DocumentError, ExitCode, IndexProblem
from .failpoints import failpoint
from .metadata import metadata_for
from .models import DEFAULT_MODEL, ModelRef, resolve_model
from .pipeline import PageFeed
from .store import DocumentEntry, IndexStore, Manifest
from .terminal import ProgressSink


@dataclass
class BuildOptions:
    model: str | None = None  # None: the model the index was built with, else the default
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int | None = None
    rebuild: bool = False
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    convert_timeout_s: float = 120.0
    convert_workers: int = 2  # conversions running side by side, ahead of the model
    compile: bool = False  # torch.compile the model: faster on a GPU after a one-time compilation
    strict: bool = False  # any failed document: commit nothing
    pool_factor: int = 1  # >1: hierarchical token pooling, about 1/pool_factor of the vectors (lossy)
    metadata_rules: list | None = None  # from --metadata; None keeps what the index has
    commit_every_pages: int = 1000
    commit_every_s: float = 600.0
    wait_s: float = 0.0


@dataclass
class Failure:
    path: str
    stage: str  # discover, convert, render, encode
    reason: str
    environment: bool = False  # a missing converter or tool, not the document's fault


@dataclass
class BuildReport:
    index: str
    source: str
    generation: int | None = None
    documents_seen: int = 0
    indexed: int = 0
    unchanged: int = 0
    reused: int = 0  # renamed or duplicate content: vectors reused, nothing embedded
    removed: int = 0
    failed: int = 0
    skipped: int = 0
    pages_embedded: int = 0
    pages_total: int = 0
    model_calls: int = 0
    committed: bool = False
    strict: bool = False
    model: dict | None = None
    precision: dict | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    dtype_fixes: list[dict] = field(default_factory=list)  # what the precision guard aligned
    failures: list[Failure] = field(default_factory=list)
    skipped_files: list[dict] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        if self.strict and self.failures:
            return ExitCode.FAILURE
        if any(f.environment for f in self.failures):
            return ExitCode.ENVIRONMENT
        return ExitCode.PARTIAL if self.failures else ExitCode.OK

    def to_dict(self) -> dict:
        data = asdict(self)
        data["exit_code"] = int(self.exit_code)
        return data


Log = Callable[[str], None]


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


def _make_encoder(model: ModelRef, options: BuildOptions) -> PageEncoder:
    caps = detect_capabilities()
    precision = choose_precision(caps, options.device, options.dtype)
    batch = options.batch_size or default_batch_size(precision, caps)
    return ByaldiEncoder(model, precision, batch, compile=options.compile)


def build_index(
    docs: Path,
    store: IndexStore,
    options: BuildOptions | None = None,
    progress: ProgressSink | None = None,
    log: Log = lambda message: None,
    encoder_factory: Callable[[ModelRef, BuildOptions], PageEncoder] = _make_encoder,
) -> BuildReport:
    """Bring the index in `store` up to date with the folder `docs`."""
    options = options or BuildOptions()
    report = BuildReport(index=str(store.root), source=str(Path(docs).resolve()), strict=options.strict)
    timer = _Timer(report)

    started = time.perf_counter()
    found = discover(Path(docs), options.include, options.exclude)
    timer.add("discover", started)
    report.documents_seen = len(found.files)
    report.skipped = len(found.skipped)
    report.skipped_files = [{"path": str(p), "reason": why} for p, why in found.skipped]

    with store.lock(options.wait_s):
        old = store.read_manifest()
        model_name = options.model or (old.model["id"] if old else DEFAULT_MODEL)
        model = resolve_model(model_name)
        report.model = model.to_dict()
        if old and not options.rebuild and old.model["fingerprint"] != model.fingerprint:
            raise IndexProblem(
                f"{store.root} was built with {old.model['id']} ({old.model['fingerprint']}); "
                f"{model.id} is a different model.",
                hint="Use --rebuild to embed everything again with the new model, or another --name.",
            )
        old_pool = old.settings.get("pool_factor", 1) if old else 1
        if old and not options.rebuild and old.documents and old_pool != options.pool_factor:
            raise IndexProblem(
                f"{store.root} was built with --pool-factor {old_pool}, not {options.pool_factor}; "
                "pages pooled differently would not score alike.",
                hint=f"Use --pool-factor {old_pool}, or --rebuild to change it.",
            )
        base = None if (old is None or options.rebuild) else old
        plan = _plan(found.files, found.root, base, options.metadata_rules)
        report.unchanged, report.reused, report.removed = len(plan.unchanged), len(plan.reused), len(plan.removed)

        if not plan.to_embed and not plan.changes_catalog:
            report.pages_total = base.page_count if base else 0
            report.generation = base.generation if base else None
            log("Index is up to date: no document changed, no model work done.")
            return report

        pipeline = _Pipeline(store, options, report, timer, progress, log)
        pipeline.run(model, old, base, plan, encoder_factory)
    return report


@dataclass
class _Plan:
    unchanged: list[DocumentEntry]
    reused: list[DocumentEntry]  # same bytes already embedded under another path
    to_embed: list[SourceFile]
    removed: list[DocumentEntry]
    kept_outside: list[DocumentEntry]  # documents from other folders, untouched
    metadata: dict[str, dict] = field(default_factory=dict)  # for the documents to embed
    retagged: int = 0  # unchanged documents whose metadata changed

    @property
    def changes_catalog(self) -> bool:
        return bool(self.reused or self.removed or self.retagged)


def _plan(files: list[SourceFile], root: Path, base: Manifest | None, rules: list | None = None) -> _Plan:
    old_docs = base.documents if base else []

    def tagged(entry: DocumentEntry, source: SourceFile) -> DocumentEntry:
        if rules is None:
            return entry
        new = metadata_for(source.path, root, rules)
        if new != entry.metadata:
            plan.retagged += 1
            return replace(entry, metadata=new)
        return entry

    by_path = {d.path: d for d in old_docs}
    by_sha = {}
    for doc in old_docs:
        by_sha.setdefault(doc.sha256, doc)
    prefix = str(root).rstrip("/") + "/"
    seen = {str(f.path) for f in files}
    plan = _Plan([], [], [], [], [])
    for doc in old_docs:
        if not doc.path.startswith(prefix):
            plan.kept_outside.append(doc)
        elif doc.path not in seen:
            plan.removed.append(doc)
    for source in files:
        old = by_path.get(str(source.path))
        if old and old.sha256 == source.sha256:
            plan.unchanged.append(tagged(old, source))
        elif source.sha256 in by_sha:
            twin = replace(by_sha[source.sha256], path=str(source.path), size=source.size, mtime=source.mtime, metadata={})
            plan.reused.append(tagged(twin, source))
        else:
            plan.to_embed.append(source)
            plan.metadata[str(source.path)] = metadata_for(source.path, root, rules) if rules else {}
            if old:
                plan.removed.append(old)
    return plan


class _Pipeline:
    """Converts, renders and embeds the planned documents, committing in batches."""

    def __init__(self, store, options, report, timer, progress, log) -> None:
        self.store: IndexStore = store
        self.options: BuildOptions = options
        self.report: BuildReport = report
        self.timer: _Timer = timer
        self.progress = progress
        self.log: Log = log

    def run(self, model: ModelRef, old: Manifest | None, base: Manifest | None, plan: _Plan, encoder_factory) -> None:
        generation = (old.generation if old else 0) + 1
        documents = plan.kept_outside + plan.unchanged + plan.reused
        segments = dict(base.segments) if base else {}
        settings = dict(base.settings) if base else {}
        encoder: PageEncoder | None = None
        if plan.to_embed:
            started = time.perf_counter()
            encoder = encoder_factory(model, self.options)
            self.timer.add("load_model", started)
            self.report.precision = encoder.precision.to_dict()
            for warning in encoder.precision.warnings:
                self.log(f"warning: {warning}")
            settings = {
                "device": encoder.precision.device,
                "dtype": encoder.precision.dtype,
                "autocast": encoder.precision.autocast,
                "batch_size": getattr(encoder, "batch_size", None),
                "render_size": list(encoder.render_size) if encoder.render_size else None,
                "dim": encoder.dim,
                "vector_dtype": "float16",
                "pool_factor": self.options.pool_factor,
            }
        model_info = {**model.to_dict(), "dim": settings.get("dim")}

        def commit(done: list[_DocState]) -> None:
            try:
                write(done)
            except OSError as exc:
                last = f"generation {self.report.generation}" if self.report.generation else "its previous state"
                raise IndexProblem(
                    f"could not write to {self.store.root}: {exc.strerror or exc}; the index keeps {last}.",
                    hint="Free some space (or fix the permissions) and run build again: it carries on from there.",
                ) from exc

        def write(done: list[_DocState]) -> None:
            nonlocal generation
            started = time.perf_counter()
            if done:
                segment = self.store.write_segment([v for state in done for v in state.vectors])
                segments[segment.id] = segment
                first = 0
                for state in done:
                    source = state.source
                    documents.append(
                        DocumentEntry(
                            path=str(source.path), sha256=source.sha256, size=source.size, mtime=source.mtime,
                            kind=source.kind, pages=len(state.vectors), segment=segment.id, first_page=first,
                            converter=state.converter, pdf=state.pdf_rel, pdf_sha256=state.pdf_sha256,
                            metadata=plan.metadata.get(str(source.path), {}),
                        )
                    )
                    first += len(state.vectors)
            live = {d.segment for d in documents}
            manifest = Manifest(
                generation=generation,
                model=model_info,
                settings=settings,
                documents=sorted(documents, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
                segments={k: v for k, v in segments.items() if k in live},
                failures=[asdict(f) for f in self.report.failures],
            )
            self.store.commit(manifest)
            self.report.generation = generation
            self.report.committed = True
            self.report.pages_total = manifest.page_count
            generation += 1
            self.timer.add("commit", started)

        if encoder is None:
            commit([])
            return
        with tempfile.TemporaryDirectory(prefix="lgpt-stage-") as staging, _cpu_threads_for(encoder):
            converters = ConverterSet.detect(self.options.convert_timeout_s)
            try:
                self._embed_all(plan.to_embed, encoder, converters, Path(staging), commit)
            finally:
                converters.close()
        self.report.model_calls = encoder.forward_calls
        self.report.dtype_fixes = [fix.to_dict() for fix in getattr(encoder, "dtype_fixes", [])]

    def _embed_all(self, sources, encoder: PageEncoder, converters: ConverterSet, staging: Path, commit) -> None:
        """Pages from consecutive documents share forward passes; documents commit once all their pages are in."""
        progress = self.progress
        if progress:
            progress.add_task("documents", len(sources))
            progress.add_task("pages", None)
        batch_size = max(1, int(getattr(encoder, "batch_size", 4) or 4))
        states: dict[int, _DocState] = {}
        buffer: list[tuple[int, object]] = []  # (document number, page image)
        done: list = []
        pending_pages = 0
        last_commit = time.monotonic()

        gone: set[int] = set()  # failed documents: their remaining events are ignored

        def fail(number: int, exc: DocumentError) -> None:
            state = states.pop(number)
            gone.add(number)
            buffer[:] = [item for item in buffer if item[0] != number]
            self.report.failed += 1
            self.report.failures.append(
                Failure(str(state.source.path), exc.stage, exc.reason, isinstance(exc, MissingConverter))
            )
            if progress:
                progress.advance("documents")

        def flush() -> None:
            if not buffer:
                return
            owners = [number for number, _ in buffer]
            started = time.perf_counter()
            try:
                vectors = encoder.encode_pages([image for _, image in buffer])
            except RuntimeError as exc:
                buffer.clear()
                error = DocumentError("encode", " ".join(str(exc).split())[:300])
                for number in dict.fromkeys(owners):
                    fail(number, error)
                return
            self.timer.add("encode", started)
            buffer.clear()
            if self.options.pool_factor > 1:
                started = time.perf_counter()
                vectors = pool_tokens(vectors, self.options.pool_factor)
                self.timer.add("pool", started)
            for number, vector in zip(owners, vectors):
                states[number].vectors.append(vector)
            failpoint("encode")
            if progress:
                progress.advance("pages", len(owners))

        def finish_ready() -> None:
            nonlocal pending_pages, done, last_commit
            for number in [n for n, st in states.items() if st.complete]:
                changed = _changed_since_discovery(states[number].source)
                if changed:
                    fail(number, DocumentError("discover", changed))
                    continue
                state = states.pop(number)
                if state.converter:
                    state.pdf_rel, state.pdf_sha256 = self.store.store_pdf(state.source.sha256, state.pdf)
                done.append(state)
                pending_pages += len(state.vectors)
                self.report.indexed += 1
                self.report.pages_embedded += len(state.vectors)
                if progress:
                    progress.advance("documents")
            # A rebuild (or a strict build) commits once, at the end: the old generation answers until then.
            due = not (self.options.rebuild or self.options.strict) and (
                pending_pages >= self.options.commit_every_pages
                or (done and time.monotonic() - last_commit >= self.options.commit_every_s)
            )
            if due:
                commit(done)
                done, pending_pages, last_commit = [], 0, time.monotonic()

        feed = PageFeed(
            sources, converters, staging, encoder.render_size, queue_pages=2 * batch_size,
            convert_workers=self.options.convert_workers, timings=self.timer.add_seconds,
            prepare=encoder.prepare_page,
        )
        for event in feed:
            number = event.number
            if number in gone:
                continue
            state = states.setdefault(number, _DocState(sources[number]))
            if event.kind == "error":
                fail(number, event.error)
            elif event.kind == "page":
                state.expected += 1
                buffer.append((number, event.image))
                if len(buffer) >= batch_size:
                    flush()
            else:  # "end": every page of the document is in the buffer or encoded
                state.rendered = True
                state.converter = event.document.converter
                state.pdf = event.document.pdf
                finish_ready()
        flush()
        finish_ready()
        if self.options.strict and self.report.failures:
            self.log(f"--strict: {len(self.report.failures)} document(s) failed, nothing committed.")
            return
        commit(done)


def pool_tokens(vectors: list[np.ndarray], factor: int) -> list[np.ndarray]:
    """colpali-engine's HierarchicalTokenPooler: each page keeps about 1/factor of its vectors,
    each the normalised mean of a cluster of similar ones. Its authors report about 98 % of
    retrieval quality kept at factor 3."""
    import torch
    from colpali_engine.compression.token_pooling import HierarchicalTokenPooler

    pooled = HierarchicalTokenPooler().pool_embeddings(
        [torch.from_numpy(v.astype(np.float32)) for v in vectors], pool_factor=factor, num_workers=os.cpu_count() or 1
    )
    return [p.numpy().astype(np.float16) for p in pooled]


def _changed_since_discovery(source: SourceFile) -> str | None:
    """Why the file's vectors cannot be trusted to match its recorded sha256, if they cannot."""
    try:
        stat = source.path.stat()
    except OSError:
        return "the file disappeared during the build"
    if stat.st_size != source.size or stat.st_mtime != source.mtime:
        return "the file changed during the build; the next build indexes its new content"
    return None


@contextmanager
def _cpu_threads_for(encoder: PageEncoder) -> Iterator[None]:
    """On the CPU, leave one core to conversion and rendering: a model that takes every core
    fights the pdftoppm and LibreOffice processes feeding it (measured: 20 % slower on 2 cores)."""
    if encoder.precision.device_type != "cpu":
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(before, (os.cpu_count() or 1) - 1)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class _DocState:
    source: SourceFile
    vectors: list = field(default_factory=list)
    expected: int = 0
    rendered: bool = False
    converter: str | None = None
    pdf: Path | None = None
    pdf_rel: str | None = None
    pdf_sha256: str | None = None

    @property
    def complete(self) -> bool:
        return self.rendered and len(self.vectors) == self.expected
