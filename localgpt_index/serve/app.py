"""The `serve` application: FastAPI with the routes, the middleware, and the model loading.

The model loads in the background once it starts (then warmed up on the encoder thread, where
queries are encoded)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from .._version import __version__
from ..core.errors import EnvironmentMissing, LgptError
from .httpguard import PathPolicy
from .middleware import RequestGuard, RequestLog
from .routes import install_handlers, install_routes
from .schemas import ErrorDocument
from .batcher import QueryBatcher
from .service import IndexService


def create_app(service: IndexService, token: str | None = None, log: RequestLog | None = None,
               on_failure: Callable[[LgptError], None] = lambda exc: None, policy: PathPolicy | None = None) -> FastAPI:
    """The HTTP application around `service`; its model loads in the background once it starts."""
    log = log or RequestLog()
    policy = policy or PathPolicy()
    policy.learn(service.index())  # errors leave out the folders of every generation, this one and those to come
    service.on_switch = policy.learn
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
    install_handlers(app, policy)
    install_routes(app, service, batcher, policy)
    app.add_middleware(RequestGuard, token=token, log=log)
    return app


def _load(service: IndexService, batcher: QueryBatcher, log: RequestLog, on_failure: Callable[[LgptError], None]) -> None:
    """Load the model, then warm it up on the encoder thread (where queries are encoded, one forward pass at a time)."""
    started = time.perf_counter()
    try:
        service.load()
        if service.failure is None:
            batcher.run_on_encoder_thread(service.warm_up).result()
    except Exception as exc:  # noqa: BLE001 - whatever it is, serve stops with the reason instead of loading for ever
        reason = " ".join(str(exc).split())[:300]
        service.failure = service.failure or EnvironmentMissing(f"{type(exc).__name__} while loading the model: {reason}")
    if service.failure is not None:
        log.message(f"error: the model could not be loaded: {service.failure.message}", "error")
        on_failure(service.failure)
        return
    encoder = service.encoder
    assert encoder is not None, "a load that did not fail left its encoder"
    threads = f" (queries encoded with {service.query_threads} torch threads)" if service.query_threads else ""
    log.message(f"ready: {encoder.model.id} loaded in {time.perf_counter() - started:.1f} s "
                f"on {encoder.precision.device}{threads}")
