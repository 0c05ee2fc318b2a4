"""The connection layer of `serve`: uvicorn's h11 protocol with read deadlines and a connection cap
(guarded_protocol makes it with the limits of one server; the limits themselves are httpguard's)."""

from __future__ import annotations

from collections import deque

import h11
from uvicorn.protocols.http.flow_control import CLOSE_HEADER
from uvicorn.protocols.http.h11_impl import H11Protocol

from .httpguard import ConnectionLimits, is_loopback, over_capacity_response

SPARE_CONNECTIONS = 8  # past the cap: loopback connections given the chance to ask for /healthz


class GuardedH11Protocol(H11Protocol):
    """One connection: a deadline for its headers, then one for its body, none while it is answered;
    past the cap only a loopback GET /healthz is answered (then the connection closes)."""

    limits: ConnectionLimits = ConnectionLimits()
    waiting: deque  # connections past the cap that may yet ask for /healthz (one deque per server)

    def connection_made(self, transport) -> None:  # type: ignore[override]  # uvicorn annotates the base with its own transport type
        self._deadline = None
        self._phase = "headers"
        self._over_cap = len(self.connections) >= self.limits.max_connections
        self._pending = b""
        self._one_request = False
        super().connection_made(transport)
        if self._over_cap:
            if not is_loopback((self.client or ("",))[0]):
                self._refuse()  # only a loopback /healthz may pass the cap
                return
            if len(self.waiting) >= SPARE_CONNECTIONS:
                self.waiting.popleft()._refuse()  # the oldest gives way: a prober asks as soon as it connects
            self.waiting.append(self)
        self._arm(self.limits.header_timeout, "headers")

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
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            self._arm(self.limits.header_timeout, "headers")  # a next request on a kept-alive connection
        super().data_received(data)
        if self._one_request and self.cycle is not None:  # past the cap: this answer, then the connection closes
            self.cycle.keep_alive = False
            self.scope["headers"].append(CLOSE_HEADER)
            self._one_request = False
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def _follow(self) -> None:
        """Move the deadline along with the request: headers, then body, then none while it is answered."""
        state = self.conn.their_state
        if state is h11.SEND_BODY and self._phase == "headers":
            self._arm(self.limits.body_timeout, "body")
        elif state is not h11.IDLE and state is not h11.SEND_BODY:
            self._disarm()

    def _arm(self, seconds: float, phase: str) -> None:
        self._disarm()
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = "headers"

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()  # a silent or trickling client: its request is not waited for

    def _stop_waiting(self) -> None:
        if self._over_cap and self in self.waiting:
            self.waiting.remove(self)

    def _refuse(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(over_capacity_response())
            self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type:
    """uvicorn's h11 protocol with the deadlines and the cap of `limits` (uvicorn has neither a
    header nor a body read timeout: only keep-alive between requests)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits, "waiting": deque()})
