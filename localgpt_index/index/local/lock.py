"""The local single-writer lock: an OS lock on `lock`, and the holder's record in `lock.owner`."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...core.errors import IndexBusy, IndexProblem, UsageError, write_failure
from ...core.failpoints import failpoint
from ..format.files import make_folders, read_member, write_atomic
from ..holder import holder_text, may_be_alive

POLL_S = 0.2  # how often a writer given --wait tries the lock again


@contextmanager
def writer_lock(root: Path, wait_s: float = 0.0) -> Iterator[None]:
    """The single-writer lock: an OS lock (filelock: flock on Unix), so a killed writer never
    leaves it behind. The holder then records who it is in `lock.owner` for contenders."""
    import filelock

    if not math.isfinite(wait_s) or wait_s < 0:
        raise UsageError(f"--wait {wait_s}: expected a number of seconds, 0 or more.")
    try:
        make_folders(root)
        lock = filelock.FileLock(root / "lock", thread_local=False)
        if not _acquire(lock, wait_s):
            raise IndexBusy(
                f"{root} is being written by {lock_holder(root)}.",
                hint="Wait for it to finish, or pass --wait SECONDS.",
            )
    except OSError as exc:
        raise write_failure(exc, IndexProblem)(  # a full disk may pass: a watcher tries again
            f"{root / 'lock'}: cannot take the writers' lock ({exc.strerror or exc}).",
            hint="The index folder must be writable, and its 'lock' a plain file (delete it if it is a folder).",
        ) from None
    try:
        try:
            write_atomic(root / "lock.owner", holder_text().encode())
        except OSError:
            pass  # only informative
        yield
    finally:
        lock.release()


def _acquire(lock, wait_s: float) -> bool:
    """Take the lock, trying again every POLL_S for up to `wait_s` seconds (filelock's own loop, with a
    failpoint where a writer waits: tests act on the holder then); False when another writer kept it."""
    import filelock

    deadline = time.monotonic() + wait_s
    while True:
        try:
            lock.acquire(blocking=False)
            return True
        except filelock.Timeout:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
        failpoint("lock-wait")  # tests: this writer found the lock taken and waits for it
        time.sleep(min(POLL_S, left))


def lock_holder(root: Path) -> str:
    """Who holds the lock, from its record; a record of a process that is gone is a previous
    holder's, so read again while the new holder writes its own."""
    record = ""
    for _ in range(20):
        try:
            record = read_member(root, "lock.owner", 256).decode(errors="replace").strip()
        except IndexProblem:
            record = ""
        if may_be_alive(record):
            return record
        time.sleep(0.05)
    return record or "another process"
