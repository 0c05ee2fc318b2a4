"""`lgpt-index serve`: the warm index service over HTTP (FastAPI on uvicorn).

Endpoints answer with the same JSON documents as the CLI (reports.py), paths as the path
policy says (httpguard.PathPolicy: relative to the indexed folder unless --absolute-paths). Every
error is a JSON document `{"error": {"status", "message"}}` with a 4xx or 5xx status, never a
traceback, a secret, or a path outside the index. Every endpoint but /healthz wants the bearer
token when one is set; without one only loopback Host names are answered. Request bodies, query
counts and lengths, k, dpi and the images of an answer are bounded; connections have header and
body deadlines and a cap (httpconn.py).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
import threading
import time
import traceback
from collections import OrderedDict
from contextlib import asynccontextmanager
from typing import Any, Callable

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .._version import __version__
from ..models.encode import MAX_QUERY_CHARS
from ..core.errors import EnvironmentMissing, IndexProblem, LgptError, UsageError
from ..core.failpoints import failpoint
from .httpguard import (ConnectionLimits, PathPolicy, check_query_texts, default_max_connections, host_refusal, printable,
                        redact, token_matches)
from ..core.metadata import parse_filters
from ..interop.reports import documents_document, query_document, status_document
from .httpconn import guarded_protocol
from .service import IndexService, NotReady, QueryBatcher, SearchRequest

MAX_BODY_BYTES = 1 << 20
MAX_QUERIES = 64
MAX_K = 1000
MAX_IMAGE_BUDGET = 32  # with_images: page images per answer, counted at 150 dpi (one at 300 dpi counts 4)
RENDER_SLOTS = 2  # pages rendered at once, all requests together
IMAGE_CACHE_BYTES = 64 << 20  # PNGs kept for reuse


class QueryBody(BaseModel):
    """`POST /query`: the queries of one request are encoded together, and with those of
    requests that arrive within a few milliseconds."""

    model_config = ConfigDict(extra="forbid")
    queries: list[str] = Field(min_length=1, max_length=MAX_QUERIES, description=f"at most {MAX_QUERIES}, each at most {MAX_QUERY_CHARS} characters")
    k: int = Field(5, ge=1, le=MAX_K, description="pages per query")
    filters: dict[str, str] | list[str] = Field(default_factory=dict, description='{"team": "finance"} or ["team=finance"]: all must match')
    first_pass: int | None = Field(None, ge=1, le=1_000_000, description="lossy: score sign codes first, then only the best N pages exactly")
    with_images: bool = Field(False, description="each result carries its page as base64 PNG")
    dpi: int = Field(150, ge=20, le=600, description="resolution of those images")


class Hit(BaseModel):
    rank: int
    score: float
    path: str
    page: int
    sha256: str
    kind: str
    metadata: dict[str, str]
    image_base64: str | None = None
    image_error: str | None = None


class QueryAnswer(BaseModel):
    query: str
    results: list[Hit]


class QueryDocument(BaseModel):
    """The `query --json` document (localgpt_index/schemas/query.schema.json)."""

    version: int
    index: str
    model: str
    k: int
    queries: list[QueryAnswer]
    query: str | None = None
    results: list[Hit] | None = None


class ErrorDocument(BaseModel):
    error: dict[str, Any] = Field(description='{"status": 400, "message": "..."}')


def error_response(status: int, message: str) -> Response:
    """The one error shape: {"error": {"status", "message"}}, the message never with a secret in it."""
    body = json.dumps({"error": {"status": status, "message": redact(message)}}, ensure_ascii=True)  # a lone surrogate too
    return Response(body, status_code=status, media_type="application/json")


def json_response(document: dict) -> Response:
    # ensure_ascii: file names that are not UTF-8 travel as \udcXX escapes, as in the CLI's JSON
    return Response(json.dumps(document, ensure_ascii=True), media_type="application/json")


class RequestLog:
    """One line per request on stderr: method, path, status, milliseconds (or JSON lines)."""

    def __init__(self, quiet: bool = False, as_json: bool = False, stream=None) -> None:
        self.quiet, self.as_json = quiet, as_json
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()

    def request(self, method: str, path: str, status: int, ms: float) -> None:
        if self.quiet:
            return
        if self.as_json:
            line = json.dumps({"time": time.time(), "method": method, "path": path, "status": status, "ms": round(ms, 2)})
        else:
            line = f"{method} {path} {status} {ms:.1f} ms"
        self.write(line)

    def message(self, text: str, level: str = "info") -> None:
        """info: quiet with -q; notice (the address) and error: always."""
        if self.quiet and level == "info":
            return
        text = redact(text)
        self.write(json.dumps({"time": time.time(), "level": level, "message": text}) if self.as_json else printable(text))

    def write(self, line: str) -> None:
        with self._lock:
            print(line, file=self.stream, flush=True)


class _Guard:
    """ASGI middleware: the request log, the bearer token and the body limit, in that order."""

    def __init__(self, app, token: str | None, log: RequestLog) -> None:
        self.app, self.token, self.log = app, token, log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state = {"status": 500, "started": False}

        async def tracked_send(message) -> None:
            if message["type"] == "http.response.start":
                state["status"], state["started"] = message["status"], True
            await send(message)

        try:
            await self._guarded(scope, receive, tracked_send)
        except ClientDisconnect:  # the client left, or was dropped at its body deadline: no one to answer
            state["status"] = 408 if not state["started"] else state["status"]
        except Exception as exc:  # the client gets JSON, the log one line: no traceback for either
            self.log.message("error: " + printable(redact("".join(traceback.format_exception_only(type(exc), exc)).strip())), "error")
            if not state["started"]:
                await error_response(500, "internal error; the server log says more")(scope, receive, tracked_send)
        finally:
            self.log.request(scope["method"], printable(scope["path"]), state["status"], 1000 * (time.perf_counter() - started))

    async def _guarded(self, scope, receive, send) -> None:
        raw = {k.lower(): v for k, v in scope.get("headers", [])}
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw.items()}
        refusal = host_refusal(headers.get("host"), headers.get("origin"), self.token)
        if refusal:
            await error_response(403, refusal)(scope, receive, send)
            return
        if self.token and scope["path"] != "/healthz" and not token_matches(raw.get(b"authorization", b""), self.token):
            response = error_response(401, "missing or wrong bearer token (Authorization: Bearer TOKEN)")
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await error_response(413, f"request body larger than {MAX_BODY_BYTES} bytes")(scope, receive, send)
            return
        await self.app(scope, _limited(receive), send)


def _limited(receive):
    """A receive that stops a body without Content-Length once it passes the limit."""
    seen = {"bytes": 0}

    async def wrapped():
        message = await receive()
        if message["type"] == "http.request":
            seen["bytes"] += len(message.get("body", b""))
            if seen["bytes"] > MAX_BODY_BYTES:
                raise _TooLarge()
        return message

    return wrapped


class _TooLarge(HTTPException):
    """A body without Content-Length that grew past the limit (an HTTPException, so that FastAPI's
    body parsing passes it on instead of calling it a parse error)."""

    def __init__(self) -> None:
        super().__init__(413, f"request body larger than {MAX_BODY_BYTES} bytes")


def _status_of(exc: LgptError) -> int:
    if isinstance(exc, NotReady):
        return 503
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, IndexProblem):
        return 503
    return 500


def create_app(service: IndexService, token: str | None = None, log: RequestLog | None = None,
               on_failure: Callable[[LgptError], None] = lambda exc: None, policy: PathPolicy | None = None) -> FastAPI:
    """The HTTP application around `service`; its model loads in the background once it starts."""
    log = log or RequestLog()
    policy = policy or PathPolicy()
    batcher = QueryBatcher(service)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        if service.encoder is None:
            loader = threading.Thread(target=_load, args=(service, batcher, log, on_failure), name="lgpt-load", daemon=True)
            loader.start()
        yield
        await batcher.stop()

    # no /docs or /redoc: FastAPI's pages load Swagger UI from a CDN, blank on an offline machine
    app = FastAPI(title="lgpt-index", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="A warm lgpt-index: the pages that answer a question, for LocalGPT-style answerers.",
                  responses={400: {"model": ErrorDocument}, 401: {"model": ErrorDocument}, 503: {"model": ErrorDocument}})
    app.state.service, app.state.batcher = service, batcher
    _install_handlers(app, log, policy)
    _install_routes(app, service, batcher, policy)
    app.add_middleware(_Guard, token=token, log=log)
    return app


def _load(service: IndexService, batcher: QueryBatcher, log: RequestLog, on_failure: Callable[[LgptError], None]) -> None:
    """Load the model, then warm it up on the model thread (where queries run, one batch at a time)."""
    started = time.perf_counter()
    try:
        service.load()
        if service.failure is None:
            batcher.run_on_model_thread(service.warm_up).result()
    except Exception as exc:  # noqa: BLE001 - whatever it is, serve stops with the reason instead of loading for ever
        service.failure = service.failure or EnvironmentMissing(f"{type(exc).__name__} while loading the model: {' '.join(str(exc).split())[:300]}")
    if service.failure is not None:
        log.message(f"error: the model could not be loaded: {service.failure.message}", "error")
        on_failure(service.failure)
        return
    log.message(f"ready: {service.encoder.model.id} loaded in {time.perf_counter() - started:.1f} s "
                f"on {service.encoder.precision.device}")


def _install_handlers(app: FastAPI, log: RequestLog, policy: PathPolicy) -> None:
    @app.exception_handler(LgptError)
    async def lgpt_error(request: Request, exc: LgptError):
        return error_response(_status_of(exc), policy.message(exc.message))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        problems = []
        for error in exc.errors()[:3]:
            where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
            problems.append(f"{where}: {error.get('msg', 'invalid')}")
        return error_response(400, "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, policy.message(str(exc.detail)))



def _install_routes(app: FastAPI, service: IndexService, batcher: QueryBatcher, policy: PathPolicy) -> None:
    images = PageImages()

    @app.post("/query", responses={200: {"model": QueryDocument}})
    async def query(body: QueryBody, http_request: Request):
        """The pages that best answer each query: exactly `lgpt-index query --json`."""
        texts = check_query_texts(body.queries)
        filters = body.filters if isinstance(body.filters, dict) else parse_filters(body.filters)
        if any(not key for key in filters):
            raise UsageError("filters: a key may not be empty")
        service.require_ready()
        request = SearchRequest(tuple(texts), body.k, tuple(sorted(filters.items())), body.first_pass)
        answer = await batcher.submit(request)
        document = query_document(answer.index, texts, answer.results, body.k)
        rendered = 0
        if body.with_images:
            rendered = await images.fill(document, answer, body.dpi, http_request, policy)
        response = json_response(policy.publish(document, answer.index))
        response.headers["X-Lgpt-Images-Rendered"] = str(rendered)  # the others came from the cache, or failed
        response.headers["X-Lgpt-Batch-Queries"] = str(answer.batch_queries)  # queries that shared the forward pass
        response.headers["X-Lgpt-Generation"] = str(answer.index.manifest.generation)
        return response

    @app.get("/status")
    def status():
        """What the index holds: exactly `lgpt-index status --json`."""
        index = service.index()
        return json_response(policy.publish(status_document(index), index))

    @app.get("/documents")
    def documents(prefix: str = Query("", max_length=4096), failed: bool = False):
        """The documents (or with failed=true, the failures) under a path prefix: `lgpt-index ls --json`."""
        index = service.index()
        document = policy.publish(documents_document(index, policy.prefix(prefix, index), failed), index)
        return json_response({**document, "prefix": prefix})

    @app.get("/healthz")
    def healthz():
        """200 once the model is loaded and warmed up, and matches the current generation (503 while it
        loads, when it could not be, or when the index was rebuilt with another model)."""
        if service.failure is not None:
            return JSONResponse({"status": "failed"}, status_code=503)
        if not (service.ready and service.warmed):
            return JSONResponse({"status": "loading"}, status_code=503)
        index = service.index()  # follows HEAD here, not only when another endpoint did
        if service.stale:
            return JSONResponse({"status": "stale"}, status_code=503)
        return {"status": "ready", "generation": index.manifest.generation, "queued": batcher.queued}

    @app.get("/pages/{sha256}/{page}.png", response_class=Response,
             responses={200: {"content": {"image/png": {}}}, 404: {"model": ErrorDocument}})
    async def page_png(sha256: str, page: int, dpi: int = Query(150, ge=20, le=600)):
        """A page as PNG, rendered as `--export-pages` does, by the sha256 of its document."""
        return Response(await _page_png(service.index(), images, sha256, page, dpi), media_type="image/png")


async def _page_png(index, images: "PageImages", sha256: str, page: int, dpi: int) -> bytes:
    from ..query.search import SearchHit

    doc = next((d for d in index.documents if d.sha256 == sha256), None)  # never a path: only what the index holds
    if doc is None:
        raise StarletteHTTPException(404, f"no document with sha256 {sha256[:64]} in the index")
    if not 1 <= page <= doc.pages:
        raise StarletteHTTPException(404, f"page {page} out of range: that document has {doc.pages} page(s)")
    try:
        return await images.render(index, SearchHit(0, 0.0, doc.path, page, doc.sha256, doc.kind), dpi)
    except LgptError:
        raise StarletteHTTPException(409, CANNOT_RENDER) from None


CANNOT_RENDER = ("the page cannot be rendered: its source changed or disappeared since it was indexed (run build), "
                 "or the stored PDF is damaged")


class PageImages:
    """Rendered pages for /pages and with_images: a bounded number per answer, a few renders at once,
    the PNGs last asked for kept (by document sha256, page and dpi: the same bytes for the same page)."""

    def __init__(self, budget: int = MAX_IMAGE_BUDGET, slots: int = RENDER_SLOTS, cache_bytes: int = IMAGE_CACHE_BYTES) -> None:
        self.budget, self.cache_bytes = budget, cache_bytes
        self._slots = threading.BoundedSemaphore(slots)
        self._cache: OrderedDict[tuple, bytes] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @staticmethod
    def cost(dpi: int) -> float:
        """A page at `dpi` in pages at 150 dpi (pixels grow with the square of the dpi)."""
        return max(1.0, (dpi / 150) ** 2)

    def png(self, index, hit, dpi: int) -> tuple[bytes, bool]:
        """The page as PNG bytes, and whether it was rendered now (else it came from the cache)."""
        from ..interop.pages import _check_unchanged, page_image

        key = (hit.sha256, hit.page, dpi)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        doc = index.document(hit.path)
        if cached is not None and doc is not None:
            if not doc.pdf:
                _check_unchanged(doc)  # a source that changed since it was indexed is refused, as when rendering
            return cached, False
        with self._slots:
            failpoint("serve.render")
            image = page_image(index, hit, dpi)
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
        data = buffer.getvalue()
        with self._lock:
            self._cache[key] = data
            self._held += len(data)
            while self._held > self.cache_bytes and self._cache:
                self._held -= len(self._cache.popitem(last=False)[1])
        return data, True

    async def render(self, index, hit, dpi: int) -> bytes:
        return (await asyncio.get_running_loop().run_in_executor(None, self.png, index, hit, dpi))[0]

    async def fill(self, document: dict, answer, dpi: int, request: Request, policy: PathPolicy) -> int:
        """Give each hit of `document` its image: a page that cannot be rendered gets an error of its
        own, pages past the budget say so, and rendering stops when the client is gone.
        Returns the pages rendered now (the others came from the cache)."""
        policy.learn(answer.index)
        done: dict[tuple, tuple[str | None, str | None, int]] = {}
        spent = 0.0
        for entries, hits in zip([q["results"] for q in document["queries"]], answer.results):
            for entry, hit in zip(entries, hits):
                key = (hit.sha256, hit.page)
                if key not in done:
                    if spent + self.cost(dpi) > self.budget:
                        done[key] = (None, self._over_budget(hit, dpi), 0)
                    elif await request.is_disconnected():
                        return sum(d[2] for d in done.values())  # no one to answer: the rest is not rendered
                    else:
                        spent += self.cost(dpi)
                        done[key] = await self._one(answer.index, hit, dpi, policy)
                entry["image_base64"], error, _ = done[key]
                if error:
                    entry["image_error"] = error
        return sum(d[2] for d in done.values())

    def _over_budget(self, hit, dpi: int) -> str:
        return (f"not rendered: at most {self.budget} pages at 150 dpi per answer ({int(self.budget / self.cost(dpi))} "
                f"at {dpi} dpi); fetch it from /pages/{hit.sha256}/{hit.page}.png?dpi={dpi}")

    async def _one(self, index, hit, dpi: int, policy: PathPolicy) -> tuple[str | None, str | None, int]:
        try:
            data, new = await asyncio.get_running_loop().run_in_executor(None, self.png, index, hit, dpi)
        except LgptError as exc:
            return None, policy.message(exc.message), 0
        return base64.b64encode(data).decode("ascii"), None, int(new)


def check_exposure(host: str, token: str | None) -> None:
    """Loopback by default; any other address only with a token."""
    import ipaddress

    if token is not None and not token.strip():
        raise UsageError("--token: empty.")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not token:
        raise UsageError(f"--host {host}: listening beyond this machine needs a bearer token.",
                         hint="Pass --token TOKEN (or set $LGPT_SERVE_TOKEN); clients send it as Authorization: Bearer TOKEN.")


def bind(host: str, port: int):
    """The listening socket, bound before anything loads: a taken port is a clear exit 4."""
    import errno
    import os
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not socket.create_server's 0: asyncio sets TCP_NODELAY only on connections
    # whose socket says TCP, and without it every response on a kept-alive connection after the
    # first few waited about 40 ms for the client's delayed ACK (Nagle's algorithm).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if os.name != "nt":  # what socket.create_server does: on Windows it would share the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(512)
        return sock
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EnvironmentMissing(f"port {port} on {host} is taken (another lgpt-index serve?).",
                                     hint="Stop it, or pass another --port.") from None
        raise EnvironmentMissing(f"cannot listen on {host}:{port}: {exc.strerror or exc}.") from None


def run_server(service: IndexService, host: str, port: int, token: str | None, log: RequestLog,
               limits: ConnectionLimits | None = None, policy: PathPolicy | None = None) -> LgptError | None:
    """Serve until SIGTERM or SIGINT (requests in flight are answered first); the model loads
    in the background meanwhile. Returns why the server stopped early, if it did."""
    import uvicorn

    limits = limits or ConnectionLimits(max_connections=default_max_connections())

    sock = bind(host, port)
    failures: list[LgptError] = []
    server: uvicorn.Server | None = None

    def fail(exc: LgptError) -> None:
        failures.append(exc)
        server.should_exit = True

    app = create_app(service, token, log, on_failure=fail, policy=policy)
    # backlog: also how many connections asyncio accepts at once before any is refused past the cap
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", http=guarded_protocol(limits),
                                           backlog=max(16, min(2048, limits.max_connections)),
                                           timeout_graceful_shutdown=60, server_header=False))
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    manifest = service.index().manifest
    log.message(f"lgpt-index serve: http://{shown}:{bound_port} ({service.store.location}, generation {manifest.generation}, "
                f"{manifest.page_count} pages); loading {manifest.model.id}", "notice")
    # uvicorn answers SIGTERM and SIGINT with a graceful shutdown, then raises the signal again
    # for the handler it found: with that one ignoring it, a graceful stop is a normal exit 0
    import signal

    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    log.message("lgpt-index serve: stopped")
    return failures[0] if failures else None
