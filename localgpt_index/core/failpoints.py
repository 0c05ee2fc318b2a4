"""Crash points for fault-injection tests.

`LGPT_FAILPOINT=NAME` (or `NAME:N` for the N-th time it is reached) kills the
process with SIGKILL at that point, as a power cut or `kill -9` would;
`NAME:N:enospc` raises "No space left on device" there instead, as a full disk would, at
the N-th time and every later one; `NAME:N:enospc:until` only until the file
`$LGPT_FAILPOINT_HOLD` exists (a test frees the space), and passes from then on;
`NAME:N:hold` creates `$LGPT_FAILPOINT_HOLD.reached` and waits there until the file
`$LGPT_FAILPOINT_HOLD` exists, so a test can act while the process is mid-way.
In-process tests can also install a hook (`set_hook`) that every failpoint reached calls, in
whichever thread reaches it, to interleave two writers of one process step by step.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path
from typing import Callable

_hits: dict[str, int] = {}
_hook: Callable[[str], None] | None = None


def set_hook(hook: Callable[[str], None] | None) -> None:
    """Tests: `hook(name)` runs at every failpoint reached (None removes it)."""
    global _hook
    _hook = hook


def failpoint(name: str) -> None:
    if _hook is not None:
        _hook(name)
    wanted = os.environ.get("LGPT_FAILPOINT")
    if not wanted:
        return
    target, _, rest = wanted.partition(":")
    if target != name:
        return
    count, _, action = rest.partition(":")
    action, _, until = action.partition(":")
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] < int(count or 1):
        return
    if action == "enospc":
        if until == "until" and Path(os.environ["LGPT_FAILPOINT_HOLD"]).exists():
            return  # the space is back
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if action == "hold":
        _hold(Path(os.environ["LGPT_FAILPOINT_HOLD"]))
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _hold(release: Path, limit_s: float = 300.0) -> None:
    Path(f"{release}.reached").touch()
    deadline = time.monotonic() + limit_s
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
