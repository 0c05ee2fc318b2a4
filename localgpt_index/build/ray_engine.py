"""`build --ray`: conversion, rendering and encoding spread over a Ray cluster.

The planner and the commit stay on the driver (build/run.py, the same store transaction as a
local build). Here: documents are opened (converted, counted) by Ray tasks, rendered in
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

import logging
import os
import sys
import tempfile
import threading
from collections import deque
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from ..core.cpus import available_cpus
from ..core.errors import DocumentError, EnvironmentMissing, LgptError
from ..ingest.render import RenderSize

CHUNK_PAGES = 8  # pages per render task and per encoder call
OPEN_AHEAD = 8  # documents being opened ahead of the one the driver waits for


def require_ray():
    try:
        import ray
    except ImportError:
        raise EnvironmentMissing("--ray needs Ray, which is not installed.",
                                 hint="pip install 'lgpt-index[ray]' (on the driver and every node of the cluster).") from None
    return ray


PROBE_TIMEOUT_S = 5.0  # a cluster address that does not accept a connection in this long is down
# Ray retries a GCS that accepts but does not answer (not a Ray head) about 35 s a try, 20 tries:
# one try, unless the operator set RAY_gcs_server_port_wait_time_s
GCS_TRIES = "1"


def connect(address: str) -> bool:
    """Join the cluster at `address` (auto, an address, or local: start one here, on loopback only).
    True when this call started Ray (and the build should shut it down)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    options = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    try:
        if address == "local":
            with _loopback_only(ray), _sigterm_kept():
                ray.init(num_cpus=available_cpus(), _node_ip_address="127.0.0.1", **options)
        else:
            probe(address)
            with _environ("RAY_gcs_server_port_wait_time_s", GCS_TRIES), _sigterm_kept():
                _init_interruptibly(ray, address=address, **options)
    except LgptError:
        raise
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
        raise EnvironmentMissing(f"--ray {address}: cannot join the cluster ({' '.join(str(exc).split())[:200]}).",
                                 hint="Start it (ray start --head) or pass --ray local.") from None
    return True


def _init_interruptibly(ray, **options) -> None:
    """ray.init(**options) in a daemon thread, the main thread waiting in short joins. Against an
    address that accepts but is not a Ray head, Ray waits about 40 s in its C++ code, where a
    signal (SIGTERM, Ctrl-C) is not handled; here it interrupts the wait at once, and the thread is
    left to end with the process (Ray's own exit handler finds nothing connected yet)."""
    failure: list[BaseException] = []

    def init() -> None:
        try:
            with _unlogged("ray._private.worker", "SIGTERM handler is not set"):  # as intended
                ray.init(**options)
        except BaseException as exc:  # re-raised on the main thread
            failure.append(exc)

    thread = threading.Thread(target=init, name="lgpt-ray-init", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if failure:
        raise failure[0]


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once, naming the address, where nothing accepts a connection at a cluster's address
    (Ray itself would retry for ever). auto is left to Ray (it fails fast without a cluster)."""
    import socket

    if address in ("auto", "local"):
        return
    host, port = _host_port(address)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        where = f"{host}:{port}" if f"{host}:{port}" != address else address
        raise EnvironmentMissing(f"--ray {address}: nothing accepts a connection at {where} "
                                 f"({exc.strerror or exc or 'timed out'}).",
                                 hint="Start the cluster (ray start --head), check the address, or pass --ray local.") from None


def _host_port(address: str) -> tuple[str, int]:
    """Where Ray will connect for `address`: ray://HOST:PORT (Ray Client) as given, HOST:PORT as Ray
    resolves it (localhost becomes this node's address)."""
    from ..core.errors import UsageError

    client = address.startswith("ray://")
    target = address[len("ray://"):] if client else address
    if not client:
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address) or target
        except Exception:  # an address Ray cannot parse: the check below says why
            pass
    host, sep, port = target.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray {address}: not a cluster address (auto, local, HOST:PORT or ray://HOST:PORT).")
    return host, int(port)


@contextmanager
def _sigterm_kept() -> Iterator[None]:
    """The SIGTERM handler put back after ray.init, which replaces it: on the main thread with its
    own (exit with status 15, skipping the CLI's interrupt handling, its message and exit code), and
    in any thread with a C++ one that prints a stack dump before calling it."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if before is not None:  # None: set from C, cannot be put back from Python
            signal.signal(signal.SIGTERM, before)


@contextmanager
def _unlogged(logger_name: str, text: str) -> Iterator[None]:
    """Log records of `logger_name` that contain `text` dropped for the duration."""
    logger = logging.getLogger(logger_name)

    def keep(record: logging.LogRecord) -> bool:
        return text not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` for the duration, unless already set."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


@contextmanager
def _loopback_only(ray) -> Iterator[None]:
    """A local cluster reachable from this machine only: its GCS, raylet, workers and agents listen on
    127.0.0.1 when the node's address is 127.0.0.1. Ray on Linux turns a loopback node address
    into the machine's network address unless clusters are off (its Windows/macOS default), which
    is what this does while the cluster starts (its processes inherit the setting)."""
    try:
        from ray._private import ray_constants
    except ImportError:  # another layout (a Ray this was not written against): its own defaults
        ray_constants = None
    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if before is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        with _environ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0"):
            yield
    finally:
        if before is not None:
            ray_constants.ENABLE_RAY_CLUSTER = before


def disconnect() -> None:
    with quiet_stdout():
        require_ray().shutdown()


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """stdout carries only results (a --json report): what Ray prints meanwhile (a retried task,
    a restarted actor) goes to stderr."""
    with redirect_stdout(sys.stderr):
        yield


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

    def __init__(self, model: dict, options: dict, pool_factor: int = 1) -> None:
        from ..models.encode import EncoderOptions, load_page_encoder
        from ..models.resolve import ModelRef

        self.pool_factor = pool_factor
        self.encoder = load_page_encoder(ModelRef(**model), EncoderOptions(**options))

    def describe(self) -> dict:
        encoder = self.encoder
        return {"precision": encoder.precision.to_dict(), "dim": encoder.dim, "batch_size": encoder.batch_size,
                "render_size": encoder.render_size, "max_visual_tokens": encoder.max_visual_tokens,
                "node": os.uname().nodename, "pid": os.getpid()}

    def encode(self, images) -> list:
        """Vectors per page (float16), or a DocumentError per page that cannot be encoded."""
        from PIL import Image

        from ..core.errors import page_failure
        from ..models.encode import encode_resiliently

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
            from ..models.pooling import pool_some

            results = pool_some(results, self.pool_factor)
        return results

    def stats(self) -> dict:
        return {"forward_calls": self.encoder.forward_calls,
                "dtype_fixes": [fix.to_dict() for fix in getattr(self.encoder, "dtype_fixes", [])]}


@dataclass
class RemoteEncoder:
    """What the build needs to know of the cluster's encoders (they all agree)."""

    model: object
    precision: object
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
        worker_options = {"device": options.device if not gpus else "auto", "dtype": options.dtype,
                          "batch_size": options.batch_size, "compile": options.compile,
                          "max_visual_tokens": options.max_visual_tokens}
        self.actors = [remote.remote(model.to_dict(), worker_options, options.pool_factor) for _ in range(count)]
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

    def feed(self, sources, root: Path, staging: Path, max_chunks: int | None = None) -> Iterator:
        return RayFeed(self, sources, root, staging, max_chunks or 4 * len(self.actors))


class RayFeed:
    """PageEvents for the build, in document order: open, encoded (a chunk's vectors), end, error."""

    def __init__(self, engine: RayEngine, sources, root: Path, staging: Path, max_chunks: int) -> None:
        self.engine, self.ray = engine, engine.ray
        self.sources, self.root, self.staging = sources, root, staging
        self.max_chunks = max_chunks
        self._next_actor = 0

    def __iter__(self):
        from ..ingest.feed import OpenedDocument, PageEvent

        opening: deque = deque()
        pending: deque = deque()  # ("open", n, info, pdf_path) / ("chunk", n, ref) / ("end", n) / ("error", n, err)
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
            kind, number = item[0], item[1]
            if kind == "open":
                yield PageEvent(number, "open", document=OpenedDocument(pdf=item[3], pages=item[2].pages,
                                                                       converter=item[2].converter, notes=item[2].notes))
            elif kind == "chunk":
                in_flight -= 1
                yield PageEvent(number, "encoded", image=self._result(item[2]))
            elif kind == "end":
                yield PageEvent(number, "end")
            else:
                yield PageEvent(number, "error", error=item[2])
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
            pending.append(("error", number, info))
            return 0
        pdf_path, render_ref, kind = None, data_ref, source.kind if source.pdf is None else "pdf"
        if info.converter:
            pdf_path = self.staging / f"converted-{number}.pdf"
            pdf_path.write_bytes(self.ray.get(pdf_ref))
            render_ref, kind = pdf_ref, "converted"
        pending.append(("open", number, info, pdf_path))
        chunks = 0
        size = self.engine.encoder.render_size
        for first in range(source.first_page, info.pages + 1, CHUNK_PAGES):
            last = min(info.pages, first + CHUNK_PAGES - 1)
            images = self.engine._render.remote(str(source.path), kind, render_ref, first, last, size,
                                                self.engine.options.render_timeout_s)
            actor = self.engine.actors[self._next_actor % len(self.engine.actors)]
            self._next_actor += 1
            pending.append(("chunk", number, actor.encode.remote(images)))
            chunks += 1
        pending.append(("end", number))
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

