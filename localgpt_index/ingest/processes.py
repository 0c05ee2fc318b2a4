"""External processes (LibreOffice, pdftoppm, pdfinfo), all of a run's ended when that run is interrupted.

Each runs in its own process group, with a timeout. Not in a session of its own: where the kernel groups
CPU time by session (autogroup, on by default in most distributions), a new session is a new group that
gets as much CPU as the whole build, whatever its niceness (two OCR processes took two thirds of 2 cores
from the encoder at nice 10); in the build's session a lower niceness is a lower share of the build's.

A `ProcessScope` is owned by a run (the CLI's command, a page feed): `Tracked` is a Popen that
starts a new process group and registers itself in a scope; `scope.stop()` kills every process of
the scope and of its children and makes later starts in them fail, so an interrupted build
neither leaves a LibreOffice behind nor retries anything. A stopped scope stops nothing else:
the next run has a scope of its own.

Which scope a process joins: the one given, else the current one (a context variable: a scope
is current in a `with scope.entered():` block, and in a thread that called `scope.enter_thread()`
first, such as a pool's initializer). A process started outside any scope still runs in its
own process group, with its timeout, but no interrupt ends it.
"""

from __future__ import annotations

import contextvars
import os
import signal
import subprocess
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Iterator

_current: contextvars.ContextVar["ProcessScope | None"] = contextvars.ContextVar("lgpt_process_scope", default=None)
# Every tracked process still running, in any scope: a diagnostic (running_count), never a decision.
_alive: "weakref.WeakSet[Tracked]" = weakref.WeakSet()
_alive_lock = threading.Lock()


class Stopped(RuntimeError):
    """The run is being interrupted: no new process starts."""


class ProcessScope:
    """The external processes of one run: stopped together, and only together with its parent."""

    def __init__(self, parent: "ProcessScope | None" = None) -> None:
        self.parent = parent
        self._lock = threading.Lock()
        self._running: set[Tracked] = set()
        self._children: "weakref.WeakSet[ProcessScope]" = weakref.WeakSet()
        self._stopped = threading.Event()
        self.niceness: int | None = None  # how much lower than the run its processes start (None: as its parent's say)
        if parent is not None:
            with parent._lock:
                parent._children.add(self)

    @classmethod
    def under_current(cls) -> "ProcessScope":
        """A new scope, a child of the current one (stopped when it is)."""
        return cls(_current.get())

    @property
    def stopped(self) -> bool:
        scope: ProcessScope | None = self
        while scope is not None:
            if scope._stopped.is_set():
                return True
            scope = scope.parent
        return False

    def lowered(self) -> int | None:
        """How much lower than the run this scope's processes start: its own niceness, else its parent's."""
        scope: ProcessScope | None = self
        while scope is not None:
            if scope.niceness is not None:
                return scope.niceness
            scope = scope.parent
        return None

    def check(self) -> None:
        """Raise Stopped if this scope (or one above it) was stopped."""
        if self.stopped:
            raise Stopped("interrupted")

    def start(self, args: Any, **kwargs: Any) -> "Tracked":
        return Tracked(args, scope=self, **kwargs)

    def stop(self) -> None:
        """Kill every running process of this scope and its children; refuse new ones (an interrupt)."""
        self._stopped.set()
        with self._lock:
            running, children = list(self._running), list(self._children)
        for proc in running:
            kill_group(proc)
            try:
                subprocess.Popen.wait(proc, timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self._forget(proc)
        for child in children:
            child.stop()

    def running_count(self) -> int:
        with self._lock:
            return len(self._running) + sum(child.running_count() for child in list(self._children))

    @contextmanager
    def entered(self) -> Iterator["ProcessScope"]:
        """Make this scope the current one in this block (in this thread, and in contexts copied from it)."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def enter_thread(self) -> None:
        """Make this scope the current one for the rest of this thread (a thread's target, a pool's initializer)."""
        _current.set(self)

    def _add(self, proc: "Tracked") -> None:
        with self._lock:
            self._running.add(proc)

    def _forget(self, proc: "Tracked") -> None:
        with self._lock:
            self._running.discard(proc)


def current() -> ProcessScope | None:
    """The scope processes started here join (None: outside any run's scope)."""
    return _current.get()


class Tracked(subprocess.Popen):
    """A Popen in its own process group (so the whole group can be killed, and a terminal's Ctrl-C is the build's
    to handle), in the build's session, in a ProcessScope."""

    def __init__(self, args: Any, scope: ProcessScope | None = None, **kwargs: Any) -> None:
        self.scope = scope if scope is not None else _current.get()
        if self.scope is not None:
            self.scope.check()
        kwargs["process_group"] = 0
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        super().__init__(args, **kwargs)
        with _alive_lock:
            _alive.add(self)
        if self.scope is not None:
            self.scope._add(self)
            if self.scope.stopped:  # stopped while starting
                kill_group(self)

    @property
    def interrupted(self) -> bool:
        """Its scope was stopped: it ended (or will) because of an interrupt, not on its own."""
        return self.scope is not None and self.scope.stopped

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        with _alive_lock:
            _alive.discard(self)
        if self.scope is not None:
            self.scope._forget(self)
        return code

    def kill(self) -> None:
        """Kill the whole process group."""
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


def running_count() -> int:
    """Tracked processes still running in this process, in any scope (a diagnostic for tests)."""
    with _alive_lock:
        return sum(1 for proc in _alive if subprocess.Popen.poll(proc) is None)


def terminate_as_interrupt() -> None:
    """SIGTERM ends the program as Ctrl-C does: the same clean-up runs (the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
