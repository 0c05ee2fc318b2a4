"""One writer per collection: the lease point, and the in-process client serialised.

The lease point is taken by compare-and-swap and renewed by a timer.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...core.errors import IndexBusy
from ...core.failpoints import failpoint
from ..holder import gone_here, holder_text
from .ids import (
    LEASE_ID,
    LEASE_MARGIN_S,
    LEASE_TTL_S,
    NO_TOKEN,
    LeaseLost,
    _models,
    check_server_version,
)


class _Lease:
    """A writer's hold on a collection: the lease point's owner token and expiry, changed only by
    conditional upserts (compare-and-swap on the token and a version), renewed by a timer thread."""

    def __init__(self, store: Any) -> None:  # a QdrantStore (qdrant/store.py imports this module)
        self.store = store
        self.token = uuid.uuid4().hex
        self.holder = holder_text()
        self.expires = 0.0  # as last confirmed
        self.version = 0
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def client(self):
        return self.store.client

    def read(self) -> dict | None:
        found = self.client.retrieve(self.store.lease_collection, [LEASE_ID], with_payload=True)
        return dict(found[0].payload) if found else None

    def _write(self, expected_token: str, expected_version: int | None) -> dict | None:
        """Upsert our lease where the point holds `expected_token` (and version), or where there is none;
        returns the point as read back."""
        models = _models()
        must = [models.FieldCondition(key="token", match=models.MatchValue(value=expected_token))]
        if expected_version is not None:
            must.append(models.FieldCondition(key="version", match=models.MatchValue(value=expected_version)))
        self.version += 1
        payload = {"holder": self.holder, "token": self.token, "version": self.version,
                   "expires": self.store.clock() + LEASE_TTL_S}
        self.client.upsert(self.store.lease_collection, [models.PointStruct(id=LEASE_ID, vector={}, payload=payload)],
                           update_filter=models.Filter(must=must), wait=True)
        return self.read()

    def take(self) -> bool:
        """One attempt: the lease is ours if there was none, it had expired, or its holder was killed here."""
        current = self.read()
        if current is not None and float(current.get("expires", 0)) >= self.store.clock() and not _holder_gone(current):
            return False
        failpoint("lease-take")
        if current is None:
            after = self._write(NO_TOKEN, None)
        else:
            self.version = int(current.get("version", 0) or 0)
            after = self._write(str(current.get("token")), self.version if "version" in current else None)
        if after is None or after.get("token") != self.token:
            return False
        self.expires = float(after["expires"])
        return True

    def renew(self) -> None:
        """Extend the lease if it is still ours; otherwise it is lost, and the writer stops."""
        if self.lost:
            return
        failpoint("lease-renew")
        after = self._write(self.token, None)
        if after is None or after.get("token") != self.token:
            holder = (after or {}).get("holder", "another writer")
            self.lost = f"its lease was taken over by {holder}"
        else:
            self.expires = float(after["expires"])
            failpoint("lease-renewed")

    def _run(self) -> None:
        while not self._stop.wait(self.store.renew_every_s) and not self.lost:
            try:
                self.renew()
            except Exception:  # a transient error: the next tick tries again; check() fences on the expiry
                pass

    def start(self) -> None:
        name = f"{threading.current_thread().name}-lease"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raise LeaseLost unless the lease is ours with time to spare (the fence before every write)."""
        if not self.lost and self.store.clock() >= self.expires - LEASE_MARGIN_S:
            self.lost = "its lease could not be renewed in time"
        if self.lost:
            raise LeaseLost(f"{self.store.location}: this writer stopped, {self.lost}; nothing more of it was written, "
                            "and no other writer's work was touched.",
                            hint="Run the command again: a build carries on from the last commit.")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.lost:
            return
        models = _models()
        try:
            self.client.delete(self.store.lease_collection, points_selector=models.FilterSelector(filter=models.Filter(must=[
                models.HasIdCondition(has_id=[LEASE_ID]),
                models.FieldCondition(key="token", match=models.MatchValue(value=self.token))])))
        except Exception:
            pass  # it expires


class _Serialized:
    """A client whose calls take one lock (the in-process mode is not thread-safe)."""

    def __init__(self, client: Any) -> None:
        self._inner = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attribute(*args, **kwargs)

        return call


def _holder_gone(lease: dict) -> bool:
    """A lease taken by a process of this machine that no longer runs (killed): no need to wait it out."""
    return gone_here(str(lease.get("holder", "")))


@contextmanager
def hold_lease(store: Any, wait_s: float) -> Iterator["_Lease"]:
    """One writer per collection: the lease point, taken by compare-and-swap, renewed by a timer."""
    lease = _Lease(store)
    deadline = time.monotonic() + wait_s
    with store.talking("taking the lease"):
        check_server_version(store.client.info().version, store.location)
        if not store.client.collection_exists(store.lease_collection):
            store.client.create_collection(store.lease_collection, vectors_config={})
        while not lease.take():
            if time.monotonic() >= deadline:
                current = lease.read() or {}
                until = time.strftime("%H:%M:%S", time.localtime(float(current.get("expires", 0))))
                raise IndexBusy(f"{store.location} is being written by {current.get('holder', 'another writer')} "
                                f"(its lease runs until {until} unless renewed).",
                                hint="Wait for it to finish, or pass --wait SECONDS; a crashed writer's lease expires by itself.")
            time.sleep(0.5)
    store.lease = lease
    lease.start()
    try:
        yield lease
    finally:
        lease.release()
        store.lease = None
