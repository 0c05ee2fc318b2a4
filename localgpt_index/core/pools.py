"""Thread pools a process starts once, on first use, and keeps."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable


class SharedPool:
    """A pool made by `start` the first time it is asked for (callers race safely), then the same one."""

    def __init__(self, start: Callable[[], ThreadPoolExecutor]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def __call__(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = self._start()
            return self._pool
