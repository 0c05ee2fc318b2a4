"""Running `serve` until SIGTERM or SIGINT: the exposure rule, the socket, uvicorn with the guarded protocol."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import EnvironmentMissing, LgptError, UsageError
from .app import create_app
from .httpconn import guarded_protocol
from .httpguard import ConnectionLimits, PathPolicy, default_max_connections
from .middleware import RequestLog
from .service import IndexService
from .warm import release
from .warmapp import Activity, listen_warm

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
    warm = listen_warm(app, service)  # the Unix socket `query` finds by itself (serve/warm.py)
    on_listening()
    try:
        run_until_stopped(server, sock, *([warm[0]] if warm else []))
    finally:
        if warm:
            release(warm[1], warm[0])
    log.message("lgpt-index serve: stopped")
    return failures[0] if failures else None


def uvicorn_server(app, limits: ConnectionLimits) -> uvicorn.Server:
    """uvicorn for `app` with the guarded connection protocol of `limits` (serve, and the MCP server's HTTP mode)."""
    import uvicorn

    # backlog: also how many connections asyncio accepts at once before any is refused past the cap
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", http=guarded_protocol(limits),
                                         backlog=max(16, min(2048, limits.max_connections)),
                                         timeout_graceful_shutdown=60, server_header=False))


def run_until_stopped(server, *sockets) -> None:
    """Serve on `sockets` until SIGTERM or SIGINT, the requests in flight answered first."""
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
        server.run(sockets=list(sockets))
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def run_warm(service: IndexService, idle_s: float, log: RequestLog) -> LgptError | None:
    """`lgpt-index warm --foreground`: serve the Unix socket until `idle_s` pass without a request, a stop
    request, SIGTERM or SIGINT, or the socket's file is removed (its index with it). Returns why it
    stopped early, if it did."""
    failures: list[LgptError] = []
    holder: dict = {}

    def stop() -> None:
        holder["server"].should_exit = True

    def fail(exc: LgptError) -> None:
        failures.append(exc)
        stop()

    app = create_app(service, None, log, on_failure=fail, policy=PathPolicy(absolute=True))
    activity = Activity(app)
    listened = listen_warm(app, service, activity, stop)
    if listened is None:
        raise EnvironmentMissing(f"a warm service of {service.store.location} runs already (or no folder can hold its socket).",
                                 hint="lgpt-index warm --status shows it; --stop ends it.")
    sock, path = listened
    server = holder["server"] = uvicorn_server(activity, ConnectionLimits())
    done = threading.Event()
    threading.Thread(target=_exit_when_idle, args=(service, activity, idle_s, path, stop, done), name="lgpt-idle", daemon=True).start()
    log.message(f"lgpt-index warm: {path} ({service.store.location}); exits after {idle_s:g} s without a request", "notice")
    try:
        run_until_stopped(server, sock)
    finally:
        done.set()
        release(path, sock)
    return failures[0] if failures else None


def _exit_when_idle(service: IndexService, activity: Activity, idle_s: float, path: Path, stop: Callable[[], None],
                    done: threading.Event) -> None:
    """The idle time is counted from the end of the model's load (or of the last request, if later)."""
    loaded = False
    while not done.wait(min(1.0, max(0.05, idle_s / 4))):
        if not loaded and service.failure is None and not (service.ready and service.warmed):
            continue
        if not loaded:
            loaded, activity.last = True, max(activity.last, time.monotonic())
        if activity.idle_s() >= idle_s or not os.path.lexists(path):
            stop()
            return
