"""Status output on stderr: rich when stderr is a terminal, plain lines otherwise.

stdout carries only results (tables or JSON); everything said along the way
goes through a `Terminal`.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID


def results_console(**options: Any) -> Console:
    """A rich Console on stdout for a command's results (tables). A closed pipe (`| head -1`) raises
    BrokenPipeError, which the command line ends quietly with status 141 (cli/app.py), where rich's own
    handler would exit 1."""
    from rich.console import Console

    class ResultsConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "stdout: the reader went away")

    return ResultsConsole(file=sys.stdout, **options)


class ProgressSink(Protocol):
    """What the pipeline reports progress to. A task is a counter (`documents`, `pages`, `OCR runs`) or a
    stage (`scanning`, `loading the model`, `committing`: total None until `advance(name, 1, total=1)`
    ends it); adding a task again starts it over, advancing one never added adds it. Tasks may be
    advanced from several threads."""

    def add_task(self, name: str, total: int | None) -> None: ...
    def advance(self, name: str, amount: int = 1, total: int | None = None) -> None: ...


def stage(sink: ProgressSink | None, name: str, ended: bool = False) -> None:
    """Tell `sink` (if any) that the stage `name` began, or `ended`. A stage left open ends with the sink."""
    if sink is None:
        return
    if ended:
        sink.advance(name, 1, total=1)
    else:
        sink.add_task(name, None)


class Terminal:
    """Messages and progress bars on stderr, quiet when asked or not a TTY."""

    def __init__(self, verbosity: int = 0, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.verbosity = verbosity  # -1 quiet, 0 normal, 1 verbose
        self.is_tty = self.stream.isatty()
        self._no_color = bool(os.environ.get("NO_COLOR"))

    @functools.cached_property
    def console(self) -> Console:
        """rich's Console on the stream, made when something is said (a quiet warm query imports no rich)."""
        from rich.console import Console

        return Console(file=self.stream, force_terminal=self.is_tty, no_color=self._no_color or not self.is_tty, highlight=False,
                       soft_wrap=True)

    def info(self, message: str) -> None:
        if self.verbosity >= 0:
            self.console.print(message, markup=False)

    def detail(self, message: str) -> None:
        if self.verbosity >= 1:
            self.console.print(message, markup=False)

    def warn(self, message: str) -> None:
        if self.verbosity >= 0:
            self.console.print(f"warning: {message}", style="yellow", markup=False)

    def error(self, message: str) -> None:
        self.console.print(f"error: {message}", style="bold red", markup=False)

    def say(self, notes) -> None:
        """Messages given as (level, text) pairs, each at its level (warn, info or detail; else detail)."""
        for level, text in notes:
            {"warn": self.warn, "info": self.info}.get(level, self.detail)(text)

    @contextmanager
    def progress(self) -> Iterator[ProgressSink]:
        if self.is_tty and self.verbosity >= 0:
            with _RichProgress(self.console) as bars:
                yield bars
        elif self.verbosity >= 0:
            with _LineProgress(self) as lines:
                yield lines
        else:
            yield _LineProgress(None)


class _RichProgress:
    def __init__(self, console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description:>10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._lock = threading.RLock()

    def __enter__(self) -> "_RichProgress":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for task in self._progress.tasks:  # still open at the end: a counter shown as done, a stage gone (up to date)
            if task.total is None and task.completed:
                self._progress.update(task.id, total=task.completed)
            elif task.total is None:
                self._progress.remove_task(task.id)
        self._progress.__exit__(*exc)

    def add_task(self, name: str, total: int | None) -> None:
        with self._lock:
            if name in self._tasks:
                self._progress.reset(self._tasks[name], total=total)
            else:
                self._tasks[name] = self._progress.add_task(name, total=total)

    def advance(self, name: str, amount: int = 1, total: int | None = None) -> None:
        with self._lock:
            if name not in self._tasks:
                self.add_task(name, None)
            task = self._tasks[name]
            if total is not None:
                self._progress.update(task, total=total)
            self._progress.advance(task, amount)


class _LineProgress:
    """Without a terminal (logs, CI, a pipe): a line naming what the build is doing as soon as a stage
    begins, and then every few seconds, from a thread of its own (a model that takes 20 s to load is
    said to be loading meanwhile). `terminal` None: silent."""

    interval_s = 3.0

    def __init__(self, terminal: Terminal | None) -> None:
        self._terminal = terminal
        self._tasks: dict[str, list] = {}  # name -> [done, total, started (monotonic)]
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "_LineProgress":
        self._thread = threading.Thread(target=self._run, name="lgpt-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def add_task(self, name: str, total: int | None) -> None:
        with self._lock:
            self._tasks[name] = [0, total, time.monotonic()]
        self._wake.set()  # a new stage is said at once

    def advance(self, name: str, amount: int = 1, total: int | None = None) -> None:
        with self._lock:
            added = name not in self._tasks
            task = self._tasks.setdefault(name, [0, None, time.monotonic()])
            task[0] += amount
            if total is not None:
                task[1] = total
        if added:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            line = self.line()
            if line and self._terminal is not None:
                self._terminal.info(line)

    def line(self) -> str:
        """What is going on now: the stages under way (with their seconds) and the counters."""
        now = time.monotonic()
        parts = []
        with self._lock:
            for name, (done, total, started) in self._tasks.items():
                if total is None and name != "pages":
                    parts.append(f"{name}: {done}" if done else f"{name} ({now - started:.0f} s)")
                elif name == "pages":
                    rate = f", {done / (now - started):.1f} pages/s" if done else ""
                    parts.append(f"encoding: {done} pages{rate}")
                elif done < total or name == "documents":
                    parts.append(f"{name} {done}/{total}")
        return f"progress ({now - self._started:.0f} s): " + ", ".join(parts) if parts else ""
