"""Crash points for fault-injection tests.

`LGPT_FAILPOINT=NAME` (or `NAME:N` for the N-th time it is reached) kills the
process with SIGKILL at that point, as a power cut or `kill -9` would;
`NAME:N:enospc` raises "No space left on device" there instead, as a full disk would.
"""

from __future__ import annotations

import errno
import os
import signal

_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    wanted = os.environ.get("LGPT_FAILPOINT")
    if not wanted:
        return
    target, _, rest = wanted.partition(":")
    if target != name:
        return
    count, _, action = rest.partition(":")
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] < int(count or 1):
        return
    if action == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.kill(os.getpid(), signal.SIGKILL)
