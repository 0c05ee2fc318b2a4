"""The client of a Qdrant store: a server (version checked) or the in-process mode's folder.

The folder is created only for a writer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ...core.errors import IndexBusy, IndexProblem, UsageError
from .ids import (
    _models,
)
from .lease import _Serialized

FOLDER_WAIT_S = 2.0  # how long an in-process folder's lock is waited for


def connect_qdrant(store: Any):
    _models()
    from qdrant_client import QdrantClient

    if store.spec.path is not None:
        check_folder(store)
    try:
        if store.spec.path is not None:
            return _Serialized(_open_folder(store.spec.path))
        # check_compatibility would print a raw warning when the server is down; our own message says it
        return QdrantClient(url=store.spec.url, api_key=store.spec.api_key, timeout=60, check_compatibility=False)
    except RuntimeError as exc:  # in-process mode: one process at a time
        if "already accessed" in str(exc):
            raise IndexBusy(f"{store.location} is open in another process: Qdrant's in-process mode allows one at a time.",
                            hint="Stop the other process (a build, a serve), or use a Qdrant server for readers beside writers.") from None
        raise IndexProblem(f"{store.location}: {' '.join(str(exc).split())[:200]}") from None


def _open_folder(path: Path, wait_s: float = FOLDER_WAIT_S):
    """The in-process client of `path`. Its folder lock is a flock: a process that was just killed
    can leave it held for a moment by a child it was starting (forked, not yet exec'd), so a lock
    held by someone else is tried again for `wait_s` before it is reported."""
    from qdrant_client import QdrantClient

    deadline = time.monotonic() + wait_s
    while True:
        try:
            # one lock around every call (_Serialized): the in-process mode is not thread-safe, and the
            # lease's timer thread calls it
            return QdrantClient(path=str(path), force_disable_check_same_thread=True)
        except RuntimeError as exc:
            if "already accessed" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def check_folder(store: Any) -> None:
    """An in-process folder is opened only where Qdrant's data is; a writer may start an empty or new one."""
    folder = store.spec.path
    if (folder / "meta.json").is_file():
        return
    if not folder.exists():
        if store._may_create:
            return
        raise IndexProblem(f"no index at {store.location}: {folder} does not exist (nothing was created).",
                           hint="Check the path, or build one first: lgpt-index build DOCS --store URL.")
    if not folder.is_dir() or any(folder.iterdir()):
        raise UsageError(f"--store {store.location}: {folder} is not a Qdrant in-process folder (no meta.json); refused, "
                         "nothing was written there.", hint="Name a new or empty folder, or the one a build used.")
    if not store._may_create:
        raise IndexProblem(f"no index at {store.location}: {folder} is empty.",
                           hint="Build one first: lgpt-index build DOCS --store URL.")
