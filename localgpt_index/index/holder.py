"""Who holds a writer's lock or lease: the record `pid N on HOST`, and whether that holder is gone.

Both backends write the same record (the local `lock.owner`, the Qdrant lease payload) and read
it the same way: a holder is gone only when it ran on this machine and its process no longer runs;
a record of another machine is taken as alive (its pid means nothing here).
"""

from __future__ import annotations

import os
import socket


def holder_text() -> str:
    """This process's record."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


def parse(record: str) -> tuple[int, str] | None:
    """(pid, host) of a record, None when it is not one."""
    parts = record.split()
    if len(parts) == 4 and parts[0] == "pid" and parts[1].isdigit() and parts[2] == "on":
        return int(parts[1]), parts[3]
    return None


def pid_alive(pid: int) -> bool:
    """Whether a process of this machine runs under `pid`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gone_here(record: str) -> bool:
    """A holder of this machine whose process no longer runs (killed): no need to wait it out."""
    parsed = parse(record)
    return parsed is not None and parsed[1] == socket.gethostname() and not pid_alive(parsed[0])


def may_be_alive(record: str) -> bool:
    """A valid record whose holder may still run (this machine's live pid, or another machine's)."""
    return parse(record) is not None and not gone_here(record)
