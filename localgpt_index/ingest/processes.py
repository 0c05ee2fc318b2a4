"""External processes (LibreOffice, pdftoppm, pdfinfo): each in its own process group,
with a timeout, and all of them ended when the build is interrupted.

`Tracked` is a Popen that starts a new session and registers itself; `stop_all()`
kills every registered group and makes later starts fail, so an interrupted build
neither leaves a LibreOffice behind nor retries anything. pdf2image starts poppler
with `subprocess.Popen` from its own module; `use_in_pdf2image()` gives it `Tracked`
instead, so that its processes obey the same rules.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

_lock = threading.Lock()
_running: set["Tracked"] = set()
_stopping = threading.Event()


class Stopped(RuntimeError):
    """The build is being interrupted: no new process starts."""


class Tracked(subprocess.Popen):
    """A Popen in its own session (so its whole group can be killed), known to `stop_all`."""

    def __init__(self, args: Any, **kwargs: Any) -> None:
        if _stopping.is_set():
            raise Stopped("interrupted")
        kwargs["start_new_session"] = True
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        super().__init__(args, **kwargs)
        with _lock:
            _running.add(self)
        if _stopping.is_set():  # interrupted while starting
            kill_group(self)

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        with _lock:
            _running.discard(self)
        return code

    def kill(self) -> None:
        """Kill the whole process group (pdf2image calls this on its timeouts)."""
        kill_group(self)

    def __hash__(self) -> int:
        return id(self)


def kill_group(proc: subprocess.Popen) -> None:
    if proc.returncode is not None or subprocess.Popen.poll(proc) is not None:
        return  # already gone: its group id may belong to someone else by now
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all() -> None:
    """Kill every running external process and refuse new ones (an interrupt)."""
    _stopping.set()
    with _lock:
        running = list(_running)
    for proc in running:
        kill_group(proc)
        try:
            subprocess.Popen.wait(proc, timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with _lock:
            _running.discard(proc)


def stopping() -> bool:
    return _stopping.is_set()


def reset() -> None:
    """Allow processes again (the next build in a long-lived process, such as a test run)."""
    _stopping.clear()


def running_count() -> int:
    with _lock:
        return len(_running)


def use_in_pdf2image() -> None:
    import pdf2image.pdf2image as module

    module.Popen = Tracked


def terminate_as_interrupt() -> None:
    """SIGTERM ends the program as Ctrl-C does: the same clean-up runs (the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
