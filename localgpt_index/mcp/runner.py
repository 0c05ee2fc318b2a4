"""Running the MCP server: over stdio (what desktop agents launch), or streamable HTTP.

Streamable HTTP runs on the hardened HTTP layer of `serve` (its socket, connection limits,
Host/Origin rule and token).

Over stdio, stdout carries protocol messages only. The SDK's stdio transport moves file
descriptor 1 to stderr at the OS level while it serves, and writes the protocol through a private
duplicate of it; the model loads, and companions start, only once it does (the server's lifespan),
so nothing that torch, transformers or a converter prints can reach the protocol stream."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager

from ..serve.httpguard import ConnectionLimits, default_max_connections
from ..serve.middleware import RequestLog
from .backend import IndexTools
from .server import create_server

MCP_PATH = "/mcp"

# A companion runs beside the server for as long as it serves, in a thread of its own, started once
# stdout is safe. This is the seam for `mcp --watch DOCS` (localgpt_index.watch): a watcher that
# commits new generations, which the tools then follow (IndexTools.current reopens on a new HEAD).
Companion = Callable[[], None]


def _lifespan(tools: IndexTools, companions: Sequence[Companion]):
    @asynccontextmanager
    async def lifespan(server):
        tools.start_loading()
        for companion in (*companions, _warm_socket(tools)):
            threading.Thread(target=companion, name=f"lgpt-{getattr(companion, '__name__', 'companion')}", daemon=True).start()
        yield {}

    return lifespan


def _warm_socket(tools: IndexTools) -> Companion:
    """The companion that answers `query` on the index's Unix socket (serve/warm.py), as `serve` does, with
    the MCP server's model and encoder thread."""

    def warm_socket() -> None:
        import atexit

        from fastapi import FastAPI

        from ..serve.runner import uvicorn_server
        from ..serve.warm import release
        from ..serve.warmapp import listen_warm

        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
        app.state.service, app.state.batcher = tools.service, tools.batcher
        listened = listen_warm(app, tools.service)
        if listened is None:
            return  # another service of the index answers there, or no folder holds a socket
        atexit.register(release, listened[1], listened[0])
        uvicorn_server(app, ConnectionLimits(max_connections=16)).run(sockets=[listened[0]])

    return warm_socket


def run_stdio(tools: IndexTools, companions: Sequence[Companion] = ()) -> None:
    """Serve one client over stdin/stdout until it closes stdin (a line it sends that cannot be read is
    answered with a JSON-RPC error: mcp/stdio.py)."""
    import anyio

    from .stdio import serve_stdio

    server = create_server(tools, lifespan=_lifespan(tools, companions))
    anyio.run(serve_stdio, server)


def run_http(tools: IndexTools, host: str, port: int, token: str | None, log: RequestLog,
             limits: ConnectionLimits | None = None, companions: Sequence[Companion] = ()) -> None:
    """Serve streamable HTTP at http://HOST:PORT/mcp until SIGTERM or SIGINT, behind serve's guards:
    loopback without a token, a loopback Host and no foreign Origin (DNS rebinding), the bearer
    token otherwise, body and connection limits, header and body deadlines."""
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.exceptions import HTTPException

    from ..serve.middleware import RequestGuard
    from ..serve.schemas import error_response
    from ..serve.runner import bind, run_until_stopped, uvicorn_server

    limits = limits or ConnectionLimits(max_connections=default_max_connections())
    sock = bind(host, port)
    server = create_server(tools, lifespan=_lifespan(tools, companions))
    # the SDK's own Host/Origin lists are off: RequestGuard applies serve's rule (httpguard.host_refusal),
    # the one that also knows the token, to every request before the MCP app sees it
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, json_response=True, host=host,
                                     transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    # serve's one error shape for the HTTP errors the app raises (a chunked body past the limit: RequestGuard's 413)
    app.add_exception_handler(HTTPException, lambda request, exc: error_response(exc.status_code, str(exc.detail), exc.headers))
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    log.message(f"lgpt-index mcp: http://{shown}:{bound_port}{MCP_PATH} ({tools.policy.index_name(tools.service.store.location)})",
                "notice")
    run_until_stopped(uvicorn_server(RequestGuard(app, token=token, log=log), limits), sock)
    log.message("lgpt-index mcp: stopped")
