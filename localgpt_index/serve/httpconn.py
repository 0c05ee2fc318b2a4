"""The connection layer of `serve`: uvicorn's httptools protocol with read deadlines and a connection cap.

guarded_protocol makes it with the limits of one server; the limits themselves are httpguard's."""

from __future__ import annotations

import asyncio
from collections import deque

from ..core.errors import EnvironmentMissing

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError as exc:  # an install without lgpt-index's dependencies (httptools)
    raise EnvironmentMissing(f"serve's HTTP parser does not load: {exc}.",
                             hint="pip install 'httptools>=0.6.3' (a dependency of lgpt-index: reinstall it)") from None

from .warm import expected_uid, peer_uid
from .httpguard import (MAX_HEADER_BYTES, ConnectionLimits, headers_too_large_response, is_loopback, over_capacity_response,
                        raw_error_response)

SPARE_CONNECTIONS = 8  # past the cap: loopback connections given the chance to ask for /healthz


class HeadersTooLarge(Exception):
    """Raised from a parser callback to stop the parser (httptools then raises HttpParserCallbackError)."""


class GuardedProtocol(HttpToolsProtocol):
    """One connection: a deadline for its headers, then one for its body, none while it is answered;
    a request's line and headers of at most MAX_HEADER_BYTES; past the cap only a loopback GET /healthz
    is answered (then the connection closes).

    The parser's callbacks say which part of a request the connection is reading (`_reading`:
    "headers" from the connection's opening or the first byte after a request, "body" after its
    headers, "idle" once it is read); `_follow` keeps one deadline for that part, started when the
    part starts (bytes trickling in do not move it). Nothing is timed while a request is answered
    (nor the headers of the next, if it was begun meanwhile), nor while a pipelined request waits
    its turn (uvicorn stops reading then): its deadline starts when the answer before it is sent."""

    limits: ConnectionLimits = ConnectionLimits()
    waiting: deque  # connections past the cap that may yet ask for /healthz (one deque per server)

    def connection_made(self, transport) -> None:
        self._deadline: asyncio.TimerHandle | None = None
        self._armed: tuple[str, int] | None = None  # the part (and which request's) the deadline times
        self._reading, self._number = "headers", 1
        self._header_bytes = 0  # received since the request began, while its headers are not complete
        self._parsed_bytes = 0  # of its request line and headers, as the parser gave them (_parsed)
        self._over_cap = len(self.connections) >= self.limits.max_connections
        self._pending = b""
        self._one_request = False
        super().connection_made(transport)
        if not _same_user(transport):
            transport.abort()  # a Unix socket's peer of another user: not one request (the socket is 0600 too)
            return
        if self._over_cap:
            if not is_loopback((self.client or ("",))[0]):
                self._refuse()  # only a loopback /healthz may pass the cap
                return
            if len(self.waiting) >= SPARE_CONNECTIONS:
                self.waiting.popleft()._refuse()  # the oldest gives way: a prober asks as soon as it connects
            self.waiting.append(self)
        self._follow()

    def connection_lost(self, exc) -> None:
        self._disarm()
        self._stop_waiting()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._over_cap:
            self._pending += data
            line, found, _ = self._pending.partition(b"\n")
            if not found and len(self._pending) < 2048:
                return
            self._stop_waiting()
            target = line.split(b" ")[1:2]
            if not target or target[0].partition(b"?")[0] != b"/healthz" or not line.startswith(b"GET "):
                self._refuse()
                return
            self._over_cap, data, self._pending = False, self._pending, b""
            self._one_request = True
        if data:
            self._begin()  # any byte after a request starts the next one's header deadline (blank lines too)
        if self._reading == "headers":
            self._header_bytes += len(data)  # may run past the headers' end: reset there, and only checked below if it did not come
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._reading == "headers" and self._header_bytes > MAX_HEADER_BYTES:
            self._refuse(headers_too_large_response())  # the parser keeps what it has read of them: bounded here
            return
        self._follow()

    def send_400_response(self, msg: str) -> None:
        """What the parser refuses (a malformed request line, a bad Content-Length, headers past the limit in
        one packet), as the error document, not uvicorn's plain text."""
        self._refuse(headers_too_large_response() if self._parsed_bytes > MAX_HEADER_BYTES
                     else raw_error_response(400, "not an HTTP/1.1 request this server can read (its request line, "
                                                  "a header or the body's framing); see the API's documentation"))

    # the parser's callbacks (httptools calls them from inside data_received)

    def on_message_begin(self) -> None:
        self._begin()  # a pipelined request that begins in the same packet as the end of the one before
        self._parsed_bytes = 16  # its method and HTTP version, roughly
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._parsed(len(url))  # (called once a packet the target spans)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parsed(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _parsed(self, size: int) -> None:
        """The request line's and headers' bytes, as the parser hands them over: past MAX_HEADER_BYTES the
        parser is stopped (the error ends feed_data; send_400_response answers 431), however the bytes were
        cut into packets (data_received's count cannot see headers that begin and end in one packet)."""
        self._parsed_bytes += size
        if self._parsed_bytes > MAX_HEADER_BYTES:
            raise HeadersTooLarge

    def on_headers_complete(self) -> None:
        self._reading, self._header_bytes = "body", 0
        super().on_headers_complete()
        if self._one_request and self.cycle is not None:  # past the cap: this answer, then the connection closes
            self.cycle.keep_alive = False
            self._one_request = False

    def on_message_complete(self) -> None:
        self._reading = "idle"
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._follow()

    def _begin(self) -> None:
        if self._reading == "idle":
            self._reading, self._number, self._header_bytes = "headers", self._number + 1, 0

    def _follow(self) -> None:
        """The deadline of the part being read, if the server is waiting on the client for it."""
        answering = self.cycle is not None and not self.cycle.response_complete
        if self._reading == "body" and not self.pipeline:  # (a queued request's body is not read yet)
            wanted: tuple[str, int] | None = ("body", self._number)
        elif self._reading == "headers" and not answering and not self.pipeline:
            wanted = ("headers", self._number)
        else:
            wanted = None
        if wanted == self._armed:
            return
        self._disarm()
        if wanted is not None:
            seconds = self.limits.body_timeout if wanted[0] == "body" else self.limits.header_timeout
            self._deadline, self._armed = self.loop.call_later(seconds, self._expired), wanted

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._armed = None, None

    def _expired(self) -> None:
        self._deadline, self._armed = None, None
        if not self.transport.is_closing():
            self.transport.close()  # a silent or trickling client: its request is not waited for

    def _stop_waiting(self) -> None:
        if self._over_cap and self in self.waiting:
            self.waiting.remove(self)

    def _refuse(self, answer: bytes | None = None) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(answer or over_capacity_response())
            self.transport.close()


def _same_user(transport) -> bool:
    """Whether the peer of a Unix socket's connection runs as this user (SO_PEERCRED); TCP's peers pass."""
    import socket

    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return True
    try:
        return peer_uid(sock) == expected_uid()
    except OSError:
        return False


def guarded_protocol(limits: ConnectionLimits) -> type:
    """uvicorn's httptools protocol with the deadlines and the cap of `limits` (uvicorn has neither a
    header nor a body read timeout: only keep-alive between requests)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits, "waiting": deque()})
