"""The endpoints of `serve` and how errors become answers.

Each endpoint answers with the CLI's own document (interop.reports), published as the path policy says."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from ..core.errors import IndexProblem, LgptError, UsageError
from ..core.types import SearchHit
from ..interop.reports import documents_document, query_document, status_document, text_misses
from ..interop.results import QueryDocument
from .httpguard import PathPolicy
from ..interop.highlight import highlighted_png
from ..interop.pages import CANNOT_RENDER
from ..query.request import MAX_QUERY_CHARS, problems
from .images import PageImages, highlight_regions
from .schemas import ErrorDocument, QueryBody, error_response, json_response
from .batcher import QueryBatcher
from .service import BatchAnswer, IndexService, NotReady


def _status_of(exc: LgptError) -> int:
    if isinstance(exc, NotReady):
        return 503
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, IndexProblem):
        return 503
    return 500


def install_handlers(app: FastAPI, policy: PathPolicy) -> None:
    @app.exception_handler(LgptError)
    async def lgpt_error(request: Request, exc: LgptError):
        return error_response(_status_of(exc), policy.message(exc.message))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return error_response(400, problems(exc.errors(), whole="body"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = str(exc.detail)
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):  # (FastAPI: "error parsing the body")
            detail = "body: not UTF-8; a JSON body is UTF-8 text"
        return error_response(exc.status_code, policy.message(detail), exc.headers)


def install_routes(app: FastAPI, service: IndexService, batcher: QueryBatcher, policy: PathPolicy) -> None:
    """POST /query, GET /status, /documents, /healthz and /pages/SHA256/PAGE.png."""
    images = PageImages()
    _query_route(app, service, batcher, policy, images)
    _index_routes(app, service, batcher, policy)
    _page_route(app, service, batcher, images)


def _query_route(app: FastAPI, service: IndexService, batcher: QueryBatcher, policy: PathPolicy, images: PageImages) -> None:
    async def answer(body: QueryBody, http_request: Request) -> Response:
        index = service.index()
        if index.mode(body) == "text":  # no model: answered at once, while the model loads too
            found = BatchAnswer(index, await run_in_threadpool(index.finish, body, None), 1)
        else:  # text or hybrid of an index without text is refused by mode(), before the batch
            service.require_ready()
            found = await batcher.submit(body)
        mode = found.index.mode(body)
        empty = mode == "text" and not all(found.results)  # (a found page needs no hint: no thread hop for it)
        hints = await run_in_threadpool(text_misses, found.index, mode, body.queries, found.results) if empty else ()
        document = query_document(found.index.view, body.queries, found.results, body.k, mode=mode, fusion=body.fusion, hints=hints)
        rendered = 0
        if body.with_images:
            rendered = await images.fill(document, found, body.dpi, http_request, policy)
        return json_response(policy.publish(document, found.index), {
            "X-Lgpt-Images-Rendered": str(rendered),  # the others came from the cache, or failed
            "X-Lgpt-Batch-Queries": str(found.batch_queries),  # queries that shared the forward pass
            "X-Lgpt-Scored-With": str(found.scored_with),  # the most queries scored together with its own
            "X-Lgpt-Generation": str(found.index.manifest.generation)})

    # the response model is the OpenAPI's description; the route answers with its own Response
    # (the document as the path policy publishes it), which FastAPI passes on unconverted
    @app.post("/query", response_model=QueryDocument)
    async def query(body: QueryBody, http_request: Request):
        """The pages that best answer each query: exactly `lgpt-index query --json`."""
        return await answer(body, http_request)

    documented = app.router.routes[-1]
    assert isinstance(documented, APIRoute)
    app.router.routes.insert(app.router.routes.index(documented), Route("/query", WellFormedQueries(documented, answer), methods=["POST"]))


class WellFormedQueries:
    """POST /query in front of its FastAPI route, without FastAPI's work per request (dependency
    solving, body handling: most of the event loop's time per query that was not the answer itself).

    A JSON body that QueryBody validates in one pass of pydantic's JSON parser is answered here.
    Anything else (another content type, JSON that does not parse or validate, an empty body) goes
    to the FastAPI route, which answers as it always has, with its own errors. Where pydantic's
    parser accepts a body, Python's json (FastAPI's) reads the same values; where they differ (a lone
    surrogate escape, a byte-order mark) pydantic's refuses, and FastAPI's route decides."""

    def __init__(self, documented: APIRoute, answer: Callable[[QueryBody, Request], Awaitable[Response]]) -> None:
        self.documented, self.answer = documented, answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        parsed = _well_formed(request.headers.get("content-type"), body)
        if parsed is None:
            scope.update(self.documented.matches(scope)[1])  # as the router would have, had it chosen that route
            await self.documented.handle(scope, _replayed(body, receive), send)
            return
        response = await self.answer(parsed, request)
        await response(scope, receive, send)


def _well_formed(content_type: str | None, body: bytes) -> QueryBody | None:
    if not body or content_type is None or content_type.partition(";")[0].strip().lower() != "application/json":
        return None
    try:
        return QueryBody.model_validate_json(body)
    except ValidationError:
        return None


def _replayed(body: bytes, receive: Receive) -> Receive:
    """`receive` with the body already read handed out first."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _index_routes(app: FastAPI, service: IndexService, batcher: QueryBatcher, policy: PathPolicy) -> None:
    @app.get("/status")
    def status():
        """What the index holds: exactly `lgpt-index status --json`."""
        index = service.index()
        return json_response(policy.publish(status_document(index.view), index))

    @app.get("/documents")
    def documents(prefix: str = Query("", max_length=4096), failed: bool = False):
        """The documents (or with failed=true, the failures) under a path prefix: `lgpt-index ls --json`."""
        index = service.index()
        document = policy.publish(documents_document(index.view, policy.prefix(prefix, index), failed), index)
        return json_response({**document, "prefix": prefix})

    @app.get("/healthz")
    def healthz():
        """200 once the model is loaded and warmed up, and matches the current generation (503 while it
        loads, when it could not be, or when the index was rebuilt with another model). Under --watch,
        `watch` says what the watcher does (a build that could not write: `retrying`) and why."""
        body, code = _health(service, batcher)
        if service.watch_status is not None:
            state = service.watch_status()
            body["watch"] = {**state, "problem": policy.message(state["problem"]) if state["problem"] else None}
        return JSONResponse(body, status_code=code)


def _health(service: IndexService, batcher: QueryBatcher) -> tuple[dict, int]:
    index = service.index()  # follows HEAD here, not only when another endpoint did
    ready = {"ready_modes": service.ready_modes(index)}
    if service.failure is not None:
        return {"status": "failed", **ready}, 503
    if not (service.ready and service.warmed):
        return {"status": "loading", **ready}, 503
    if service.stale:
        return {"status": "stale", **ready}, 503
    return {"status": "ready", "generation": index.manifest.generation, "queued": batcher.queued, **ready}, 200


def _page_route(app: FastAPI, service: IndexService, batcher: QueryBatcher, images: PageImages) -> None:
    @app.get("/pages/{sha256}/{page}.png", response_class=Response,
             responses={200: {"content": {"image/png": {}}}, 404: {"model": ErrorDocument}})
    async def page_png(sha256: str, page: int, dpi: int = Query(150, ge=20, le=600),
                       highlight: str | None = Query(None, min_length=1, max_length=MAX_QUERY_CHARS,
                                                     description="a query: the page with its regions drawn (text matches "
                                                                 "outlined, the model's as a heat map)")):
        """A page as PNG, rendered as `--export-pages` does, by the sha256 of its document; with `highlight`,
        as `--export-pages --highlight` draws it (X-Lgpt-Regions: the regions drawn)."""
        index = service.index()
        hit = _page_hit(index, sha256, page)
        png = await _page_png(index, images, hit, dpi)
        if highlight is None:
            return Response(png, media_type="image/png")
        regions = await highlight_regions(service, batcher, index, highlight, hit.path, hit.page)
        drawn = await run_in_threadpool(highlighted_png, png, regions)
        return Response(drawn, media_type="image/png", headers={"X-Lgpt-Regions": str(len(regions))})


def _page_hit(index, sha256: str, page: int) -> SearchHit:
    doc = next((d for d in index.documents if d.sha256 == sha256), None)  # never a path: only what the index holds
    if doc is None:
        raise StarletteHTTPException(404, f"no document with sha256 {sha256[:64]} in the index")
    if not 1 <= page <= doc.pages:
        raise StarletteHTTPException(404, f"page {page} out of range: that document has {doc.pages} page(s)")
    return SearchHit(0, 0.0, doc.path, page, doc.sha256, doc.kind)


async def _page_png(index, images: PageImages, hit: SearchHit, dpi: int) -> bytes:
    try:
        return await images.render(index, hit, dpi)
    except LgptError:
        raise StarletteHTTPException(409, CANNOT_RENDER) from None
