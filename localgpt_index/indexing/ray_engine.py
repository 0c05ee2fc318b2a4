"""`build --ray`: conversion, rendering and encoding spread over a Ray cluster.

The planner and the commit stay on the driver (indexing/run.py, the same store transaction and
commit policy as a local build; joining the cluster: indexing/ray_cluster.py). Here: documents are opened
(converted, counted) by Ray tasks, rendered in
chunks of pages by Ray tasks, and encoded by a pool of actors, one model each (one per GPU,
or CPU actors on a cluster without GPUs). The driver receives each document's pages in
order, a bounded number of chunks ahead, whatever the corpus size. Sources travel through
Ray's object store, so workers need no shared file system (HTML that refers to pictures
beside it does: without it they are dropped, as any reference outside the folder is).

Actors are restarted when they die (killed, out of memory, node lost) and the call they were
running is retried, on the restarted actor; tasks are retried too. Each chunk's result is
taken exactly once, in order, so a retry never loses or duplicates a page.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import deque
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import DocumentError, EnvironmentMissing, LgptError
from ..ingest.events import DocumentDone, DocumentFailed, DocumentOpened, EngineEvent, OpenedDocument, PagesEncoded
from ..ingest.feed import FeedSource
from ..ingest.render import RenderSize
from .options import BuildOptions, BuildReport, Log, StageTimer
from .ray_cluster import connect_ray, disconnect_ray, quiet_stdout, require_ray

if TYPE_CHECKING:
    from ..models.device import Precision
    from ..models.loading import EncoderOptions

__all__ = ["RayEngine", "ray_engine"]

CHUNK_PAGES = 8  # pages per render task and per encoder call
OPEN_AHEAD = 8  # documents being opened ahead of the one the driver waits for


@dataclass
class OpenInfo:
    pages: int
    converter: str | None = None
    notes: tuple[str, ...] = ()


def _scratch(name: str, data: bytes, folder: Path) -> Path:
    path = folder / f"document{Path(name).suffix.lower()}"
    path.write_bytes(data)
    return path


def open_document(path: str, kind: str, data: bytes, root: str, convert_timeout_s: float, render_timeout_s: float):
    """(OpenInfo or DocumentError, the converted PDF's bytes or None): on a worker."""
    from ..ingest.convert import ConverterSet, check_signature
    from ..ingest.discover import IMAGE, MARKDOWN, OFFICE
    from ..ingest.render import image_frame_count, pdf_page_count

    with tempfile.TemporaryDirectory(prefix="lgpt-ray-") as tmp:
        try:
            if not data:
                raise DocumentError("discover", "the file is empty (0 bytes)")
            scratch = _scratch(path, data, Path(tmp))  # the bytes the driver read and planned with
            if kind == IMAGE:
                return OpenInfo(image_frame_count(scratch)), None
            if kind not in (OFFICE, MARKDOWN):
                return OpenInfo(pdf_page_count(scratch, render_timeout_s)), None
            check_signature(scratch, scratch.suffix)
            # HTML refers to files beside it: where the original is visible (one machine, a shared
            # file system) it is converted from there, confined to the folder as in a local build
            original = Path(path) if os.path.isfile(path) else scratch
            converters = ConverterSet.detect(convert_timeout_s)
            try:
                converter = converters.for_suffix(scratch.suffix)
                staged, notes = converter.stage(original, Path(tmp) / "work", "doc", Path(root) if os.path.exists(root) else None)
                [pdf] = converter.convert_staged([staged])
                if isinstance(pdf, DocumentError):
                    raise pdf
                return OpenInfo(pdf_page_count(pdf, render_timeout_s), converter.name, tuple(notes)), pdf.read_bytes()
            finally:
                converters.close()
        except DocumentError as exc:
            return exc, None


def render_chunk(path: str, kind: str, data: bytes, first: int, last: int, size, render_timeout_s: float):
    """Pages first..last of a document as uint8 RGB arrays at the model's size, or a DocumentError."""
    from ..ingest.discover import IMAGE
    from ..ingest.render import image_file_pages, render_pdf_pages

    with tempfile.TemporaryDirectory(prefix="lgpt-ray-") as tmp:
        source = _scratch(path if kind != "converted" else "converted.pdf", data, Path(tmp))
        try:
            if kind == IMAGE:
                frames = image_file_pages(source, size, first)
                images = [next(frames) for _ in range(last - first + 1)]
            else:
                images = render_pdf_pages(source, size, first, last, render_timeout_s)
        except (DocumentError, StopIteration) as exc:
            return exc if isinstance(exc, DocumentError) else DocumentError("render", "fewer frames than counted")
        return [np.asarray(image.convert("RGB"), dtype=np.uint8) for image in images]


class EncoderWorker:
    """A model on one device of the cluster (a Ray actor)."""

    def __init__(self, model: dict, options: EncoderOptions, pool_factor: int | None = 1) -> None:
        from ..models.loading import load_page_encoder
        from ..models.resolve import ModelRef

        self.pool_factor = pool_factor or 1
        self.encoder = load_page_encoder(ModelRef(**model), options)

    def describe(self) -> dict:
        encoder = self.encoder
        return {"precision": encoder.precision.to_dict(), "dim": encoder.dim, "batch_size": encoder.batch_size,
                "render_size": encoder.render_size, "max_visual_tokens": encoder.max_visual_tokens,
                "node": os.uname().nodename, "pid": os.getpid()}

    def encode(self, images) -> list | DocumentError:
        """Vectors per page (float16), or a DocumentError per page that cannot be encoded."""
        from PIL import Image

        from ..core.errors import page_failure
        from ..models.encoding import encode_resiliently

        if isinstance(images, DocumentError):
            return images
        try:
            prepared = [self.encoder.prepare_page(Image.fromarray(array)) for array in images]
        except Exception as exc:  # the processor refused a page: its document fails; a bug propagates
            failure = page_failure("encode", exc)
            if failure is None:
                raise
            return failure
        results = encode_resiliently(self.encoder, prepared)
        if self.pool_factor > 1:
            from ..models.encoding import pool_some

            results = pool_some(results, self.pool_factor)
        return results

    def stats(self) -> dict:
        return {"forward_calls": self.encoder.forward_calls,
                "dtype_fixes": [fix.to_dict() for fix in getattr(self.encoder, "dtype_fixes", [])]}


@dataclass
class RemoteEncoder:
    """What the build needs to know of the cluster's encoders (they all agree)."""

    model: object
    precision: Precision
    dim: int
    batch_size: int
    render_size: RenderSize
    max_visual_tokens: int | None = None
    forward_calls: int = 0
    dtype_fixes: list | None = None


class RayEngine:
    """The actor pool, and a feed of encoded pages for the build."""

    def __init__(self, model, options) -> None:
        ray = require_ray()
        self.ray = ray
        self.model, self.options = model, options
        gpus = float(ray.cluster_resources().get("GPU", 0))
        per_actor = options.ray_gpus_per_actor if gpus else 0
        cpus = float(ray.cluster_resources().get("CPU", 1))
        count = options.ray_actors or (max(1, int(gpus // per_actor)) if gpus else max(1, int(cpus // 2)))
        remote = ray.remote(num_gpus=per_actor, num_cpus=0 if gpus else 1, max_restarts=-1, max_task_retries=-1)(EncoderWorker)
        worker_options = options.encoder_options()
        if gpus:  # each actor on the GPU Ray gives it
            worker_options = replace(worker_options, spec=replace(worker_options.spec, device="auto"))
        self.actors = [remote.remote(model.to_dict(), worker_options, options.settings.pool_factor) for _ in range(count)]
        self._open = ray.remote(num_cpus=0.5, max_retries=3)(open_document).options(num_returns=2)
        self._render = ray.remote(num_cpus=0.5, max_retries=3)(render_chunk)
        self.encoder = self._describe()

    def _describe(self) -> RemoteEncoder:
        """Every actor's precision probe must agree: the index records one dtype."""
        from ..models.device import Precision

        try:
            described = self.ray.get([actor.describe.remote() for actor in self.actors])
        except self.ray.exceptions.RayTaskError as exc:
            raise _cause(exc) from None
        dtypes = {d["precision"]["dtype"] for d in described}
        if len(dtypes) > 1:
            where = ", ".join(f"{d['node']}: {d['precision']['device']} {d['precision']['dtype']}" for d in described)
            raise EnvironmentMissing(f"the cluster's devices would store vectors of different dtypes ({where}).",
                                     hint="Pass --dtype, or give the build one kind of GPU (or of CPU: some run "
                                          "bfloat16 natively, some do not).")
        first = described[0]
        p = first["precision"]
        precision = Precision(p["device"], p["dtype"], p["autocast"], f"{p['reason']} ({len(described)} Ray actor(s))",
                              tuple(p.get("warnings", ())))
        size = first["render_size"]
        return RemoteEncoder(self.model, precision, first["dim"], first["batch_size"], size, first["max_visual_tokens"])

    def finish(self) -> None:
        """Tally the actors' model calls and dtype fixes into the encoder, and let them go."""
        try:
            stats = self.ray.get([actor.stats.remote() for actor in self.actors])
            self.encoder.forward_calls = sum(s["forward_calls"] for s in stats)
            self.encoder.dtype_fixes = [fix for s in stats for fix in s["dtype_fixes"]]
        except Exception:
            pass
        for actor in self.actors:
            self.ray.kill(actor)

    def feed(self, sources, root: Path, staging: Path, max_chunks: int | None = None) -> Generator[EngineEvent, None, None]:
        return iter(RayFeed(self, sources, root, staging, max_chunks or 4 * len(self.actors)))


@dataclass(frozen=True)
class _Chunk:
    """Pages of a document being rendered and encoded on the cluster."""

    number: int
    ref: object


class RayFeed:
    """The engine events of the build, in document order; a chunk's vectors go out as PagesEncoded."""

    def __init__(self, engine: RayEngine, sources, root: Path, staging: Path, max_chunks: int) -> None:
        self.engine, self.ray = engine, engine.ray
        self.sources, self.root, self.staging = sources, root, staging
        self.max_chunks = max_chunks
        self._next_actor = 0

    def __iter__(self) -> Generator[EngineEvent, None, None]:
        opening: deque = deque()
        pending: deque = deque()  # engine events, and _Chunks whose results are to be taken in turn
        next_source, in_flight = 0, 0
        while True:
            while next_source < len(self.sources) and len(opening) < OPEN_AHEAD:
                opening.append((next_source, *self._open(next_source)))
                next_source += 1
            while opening and in_flight < self.max_chunks:
                number, info_ref, pdf_ref, data_ref = opening.popleft()
                in_flight += self._schedule(number, info_ref, pdf_ref, data_ref, pending)
                if next_source < len(self.sources):
                    opening.append((next_source, *self._open(next_source)))
                    next_source += 1
            if not pending:
                return
            item = pending.popleft()
            if isinstance(item, _Chunk):
                in_flight -= 1
                results = self._result(item.ref)
                item = DocumentFailed(item.number, results) if isinstance(results, DocumentError) else \
                    PagesEncoded(tuple((item.number, result) for result in results))
            yield item
            del item

    def _open(self, number: int):
        source = self.sources[number]
        data_ref = self.ray.put(source.path.read_bytes() if source.pdf is None else source.pdf.read_bytes())
        kind = source.kind if source.pdf is None else "pdf"
        info_ref, pdf_ref = self.engine._open.remote(str(source.path), kind, data_ref, str(self.root),
                                                     self.engine.options.convert_timeout_s, self.engine.options.render_timeout_s)
        return info_ref, pdf_ref, data_ref

    def _schedule(self, number: int, info_ref, pdf_ref, data_ref, pending: deque) -> int:
        """Queue a document's open event and its chunks (render, then encode); returns the chunks queued."""
        source = self.sources[number]
        try:
            info = self.ray.get(info_ref)
        except self.ray.exceptions.RayError as exc:
            info = DocumentError("convert", f"the worker opening it failed: {' '.join(str(exc).split())[:200]}")
        if isinstance(info, DocumentError):
            pending.append(DocumentFailed(number, info))
            return 0
        pdf_path, render_ref, kind = None, data_ref, source.kind if source.pdf is None else "pdf"
        if info.converter:
            pdf_path = self.staging / f"converted-{number}.pdf"
            pdf_path.write_bytes(self.ray.get(pdf_ref))
            render_ref, kind = pdf_ref, "converted"
        opened = OpenedDocument(pdf=pdf_path, pages=info.pages, converter=info.converter, notes=info.notes)
        pending.append(DocumentOpened(number, opened))
        chunks = 0
        size = self.engine.encoder.render_size
        for first in range(source.first_page, info.pages + 1, CHUNK_PAGES):
            last = min(info.pages, first + CHUNK_PAGES - 1)
            images = self.engine._render.remote(str(source.path), kind, render_ref, first, last, size,
                                                self.engine.options.render_timeout_s)
            actor = self.engine.actors[self._next_actor % len(self.engine.actors)]
            self._next_actor += 1
            pending.append(_Chunk(number, actor.encode.remote(images)))
            chunks += 1
        pending.append(DocumentDone(number, max(0, info.pages - source.first_page + 1)))
        return chunks

    def _result(self, ref) -> list | DocumentError:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            from ..core.errors import page_failure

            cause = _cause(exc)
            failure = None if isinstance(cause, LgptError) else page_failure("encode", cause)
            if failure is None:  # a lost device, or a bug of ours: not one document's fault
                raise cause from None
            return failure


def _cause(exc) -> BaseException:
    """The error a Ray task raised, as the task raised it."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


class RayBuildEngine:
    """The build's view of the cluster: the same events as the local engine (ready once connected)."""

    def __init__(self, engine: RayEngine, sources: list[FeedSource], root: Path, staging: Path) -> None:
        self.engine, self.sources, self.root, self.staging = engine, sources, root, staging
        self.encoder = engine.encoder

    def describe(self) -> str:
        return (f"ray: {len(self.engine.actors)} encoder actor(s) on {self.encoder.precision.device}, "
                f"{self.encoder.precision.dtype}")

    def events(self) -> Generator[EngineEvent, None, None]:
        return self.engine.feed(self.sources, self.root, self.staging)

    def discard(self, number: int) -> None:
        """Nothing to drop: a failed document's chunks still in flight are skipped as they come."""

    def tally(self, report: BuildReport) -> None:
        """Let the actors go, their model calls and dtype fixes into the report."""
        self.engine.finish()
        report.model_calls = self.encoder.forward_calls
        report.dtype_fixes = list(self.encoder.dtype_fixes or [])


@contextmanager
def ray_engine(model, options: BuildOptions, sources: list[FeedSource], root: Path, timer: StageTimer,
               log: Log) -> Iterator[RayBuildEngine]:
    """Joined to the cluster (started, for --ray local), its actors loaded, for the duration."""
    assert options.ray is not None, "a build runs on Ray only when --ray names the cluster (_Build._engine)"
    started_ray = connect_ray(options.ray)
    try:
        with quiet_stdout():
            started = time.perf_counter()
            engine = RayEngine(model, options)
            timer.add("load_model", started)
            with tempfile.TemporaryDirectory(prefix="lgpt-stage-") as staging:
                yield RayBuildEngine(engine, sources, root, Path(staging))
    finally:
        if started_ray:
            disconnect_ray()
