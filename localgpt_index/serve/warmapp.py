"""The warm service's side of the Unix socket: its routes, its status, its idle time.

`serve` listens on the socket beside its TCP port; `lgpt-index warm` (and `query --keep-warm`) runs
a service on the socket alone. Both answer `POST /warm/query` with exactly the document and the
messages of a local `lgpt-index query` (absolute paths, the `scoring` object where the CLI adds
it), and only to a client that asks for this index with this model and these settings (409
otherwise: the client then answers locally). The routes answer nothing over TCP."""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ..core.errors import LgptError
from ..index.scoring import maxsim as score

from ..interop.reports import query_answer
from ..query.request import QueryRequest
from .schemas import error_response, json_response
from .service import IndexService
from .warm import QUERY_PATH, STATUS_PATH, STOP_PATH, Identity, identity, listen


class Activity:
    """The ASGI app `app`, timed: how long since its last request ended, none in flight."""

    def __init__(self, app) -> None:
        self.app, self.active, self.last = app, 0, time.monotonic()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
            self.last = time.monotonic()

    def idle_s(self) -> float:
        return 0.0 if self.active else time.monotonic() - self.last


def service_identity(service: IndexService) -> Identity | None:
    """What `service` serves, as a warm client asks for it; None for a store that is no local folder."""
    from ..index.local.store import LocalStore

    if not isinstance(service.store, LocalStore):
        return None
    model = service.model
    return identity(service.store.root, model.id, model.device, model.dtype, service.scoring.scorer, service.scoring.max_resident)


def install_warm_routes(app: FastAPI, ident: Identity, socket_path: Path, activity: Activity | None = None,
                        stop: Callable[[], None] | None = None) -> None:
    """POST /warm/query, GET /warm/status and (a service of `lgpt-index warm`: `stop`) POST /warm/stop,
    answered on the Unix socket only (its connections have no client address)."""
    service: IndexService = app.state.service
    batcher = app.state.batcher
    started = time.monotonic()
    count = [0]  # queries answered on the socket (its status says how many)

    @app.post(QUERY_PATH, include_in_schema=False)
    async def warm_query(http_request: Request) -> Response:
        if http_request.scope.get("client") is not None:
            return error_response(404, "Not Found")
        body = await http_request.json()
        if not isinstance(body, dict) or body.get("expect") != ident.to_json():
            return error_response(409, "another index, model or version")
        asked = body.get("request")
        # the Python API's: answered only from its Searcher's generation
        generation = asked.pop("generation", None) if isinstance(asked, dict) else None
        try:
            request = QueryRequest.model_validate(asked)
        except ValidationError as exc:
            return error_response(400, str(exc.errors()[:1]))
        service.require_ready()
        index = service.index()
        if generation is not None and index.manifest.generation != generation:
            return error_response(409, "another generation")
        if index.mode(request) == "text":  # (refused here: text or hybrid of an index without text)
            results = await run_in_threadpool(index.search, request)
        else:  # not batched with serve's clients: scored as the command line scores, alone (one_shot)
            answered = (await asyncio.wrap_future(batcher.run_on_encoder_thread(one_shot, service, request)))[0]
            if isinstance(answered, LgptError):
                raise answered
            index, results = answered.index, answered.results
        count[0] += 1
        return json_response(answer_document(service, index, request, results))

    @app.get(STATUS_PATH, include_in_schema=False)
    def warm_status(http_request: Request) -> Response:
        if http_request.scope.get("client") is not None:
            return error_response(404, "Not Found")
        return json_response(_status(service, ident, socket_path, activity, started, stop is not None) | {"answered": count[0]})

    @app.post(STOP_PATH, include_in_schema=False)
    def warm_stop(http_request: Request) -> Response:
        if http_request.scope.get("client") is not None or stop is None:
            return error_response(404, "Not Found")
        stop()
        return json_response({"stopping": True, "pid": os.getpid()})


def one_shot(service: IndexService, request: QueryRequest) -> list:
    """`request` answered as a one-shot `lgpt-index query` answers it: encoded alone, scored on this thread
    with a fresh process's choice of scorer (maxsim's float32 sums are equal across scorers only within
    rounding; the warm command line's answers are a local query's, bit for bit)."""
    with score.kernel_policy.as_one_shot():
        return service.search([request])


def answer_document(service: IndexService, index, request: QueryRequest, results) -> dict:
    """`lgpt-index query`'s document for `results`, and the messages it prints beside it (the same
    interop.reports.query_answer as cli/query.py's `_ask_index`): `{"document", "notes": [[level, text], ...]}`."""
    document, notes = query_answer(index, request, results, service.encoder if index.mode(request) != "text" else None)
    notes.append(("detail", f"answered by the warm service (pid {os.getpid()})"))
    return {"document": document, "notes": [list(note) for note in notes]}


def _status(service: IndexService, ident: Identity, socket_path: Path, activity: Activity | None, started: float,
            stoppable: bool) -> dict:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    encoder = service.encoder
    return {"pid": os.getpid(), "socket": str(socket_path), "index": ident.root, "identity": ident.to_json(),
            "ready": service.ready and service.warmed, "model": encoder.model.id if encoder is not None else None,
            "generation": service.index().manifest.generation, "rss_bytes": _rss_bytes(),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "uptime_s": round(time.monotonic() - started, 3),
            "idle_s": round(time.monotonic() - activity.last, 3) if activity is not None else None,  # (before this request)
            "kind": "warm" if stoppable else "serve"}


def _rss_bytes() -> int | None:
    """This process's resident memory now (Linux: /proc/self/statm)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def listen_warm(app: FastAPI, service: IndexService, activity: Activity | None = None,
                stop: Callable[[], None] | None = None) -> tuple | None:
    """serve's (and warm's) Unix socket, its routes installed on `app`; None for an index that is not a local
    folder, or whose socket another live service holds."""
    ident = service_identity(service)
    exists = ident is not None and service.store.exists()  # (no folder made for an index that is not there yet)
    listened = listen(Path(ident.root)) if ident is not None and exists else None
    if ident is None or listened is None:
        return None
    install_warm_routes(app, ident, listened[1], activity, stop)
    return listened
