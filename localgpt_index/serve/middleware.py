"""The ASGI middleware of `serve`: a log line per request, httpguard's policies, no traceback for anyone.

One log line per request, then the Host/Origin rule, the bearer token and the body limit."""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback

from fastapi import HTTPException
from starlette.requests import ClientDisconnect

from .httpguard import host_refusal, printable, redact, token_matches
from .schemas import MAX_BODY_BYTES, error_response


class RequestLog:
    """One line per request on stderr: method, path, status, milliseconds (or JSON lines)."""

    def __init__(self, quiet: bool = False, as_json: bool = False, stream=None) -> None:
        self.quiet, self.as_json = quiet, as_json
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()

    def request(self, method: str, path: str, status: int, ms: float) -> None:
        if self.quiet:
            return
        path = printable(path)
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


_GUARDED = frozenset((b"host", b"origin", b"authorization", b"content-length"))  # the headers the guard reads


class RequestGuard:
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
        except Exception as exc:  # noqa: BLE001 - the client gets JSON, the log one line: no traceback for either
            self.log.message("error: " + printable(redact("".join(traceback.format_exception_only(type(exc), exc)).strip())), "error")
            if not state["started"]:
                await error_response(500, "internal error; the server log says more")(scope, receive, tracked_send)
        finally:
            self.log.request(scope["method"], scope["path"], state["status"], 1000 * (time.perf_counter() - started))

    async def _guarded(self, scope, receive, send) -> None:
        raw = {key: value for key, value in ((k.lower(), v) for k, v in scope.get("headers", [])) if key in _GUARDED}
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
