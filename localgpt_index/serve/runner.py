"""Running `serve` until SIGTERM or SIGINT: the exposure rule, the socket, uvicorn with the guarded protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.errors import EnvironmentMissing, LgptError, UsageError
from .app import create_app
from .httpconn import guarded_protocol
from .httpguard import ConnectionLimits, PathPolicy, default_max_connections
from .middleware import RequestLog
from .service import IndexService

if TYPE_CHECKING:
    import uvicorn


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
               limits: ConnectionLimits | None = None, policy: PathPolicy | None = None,
               on_listening: Callable[[], None] = lambda: None) -> LgptError | None:
    """Serve until SIGTERM or SIGINT (requests in flight are answered first); the model loads
    in the background meanwhile. Returns why the server stopped early, if it did. `on_listening`
    runs once the address is announced (serve --watch starts its watcher there)."""
    limits = limits or ConnectionLimits(max_connections=default_max_connections())

    sock = bind(host, port)
    failures: list[LgptError] = []
    server: uvicorn.Server | None = None

    def fail(exc: LgptError) -> None:
        failures.append(exc)
        assert server is not None, "the model loads once the server runs"
        server.should_exit = True

    app = create_app(service, token, log, on_failure=fail, policy=policy)
    server = uvicorn_server(app, limits)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    manifest = service.index().manifest
    log.message(f"lgpt-index serve: http://{shown}:{bound_port} ({service.store.location}, generation {manifest.generation}, "
                f"{manifest.page_count} pages); loading {manifest.model.id}", "notice")
    on_listening()
    run_until_stopped(server, sock)
    log.message("lgpt-index serve: stopped")
    return failures[0] if failures else None


def uvicorn_server(app, limits: ConnectionLimits) -> uvicorn.Server:
    """uvicorn for `app` with the guarded connection protocol of `limits` (serve, and the MCP server's HTTP mode)."""
    import uvicorn

    # backlog: also how many connections asyncio accepts at once before any is refused past the cap
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", http=guarded_protocol(limits),
                                         backlog=max(16, min(2048, limits.max_connections)),
                                         timeout_graceful_shutdown=60, server_header=False))


def run_until_stopped(server, sock) -> None:
    """Serve on `sock` until SIGTERM or SIGINT, the requests in flight answered first."""
    # uvicorn answers SIGTERM and SIGINT with a graceful shutdown, then raises the signal again
    # for the handler it found: with that one ignoring it, a graceful stop is a normal exit 0
    import signal

    from ..ingest.processes import current

    scope, handle_exit = current(), server.handle_exit

    def stop_processes_then_exit(sig, frame) -> None:
        # a page render (pdftoppm) in flight is ended at once, not waited for: its request answers "stopping"
        if scope is not None:
            scope.stop()
        handle_exit(sig, frame)

    server.handle_exit = stop_processes_then_exit
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
