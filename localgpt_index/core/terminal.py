"""Status output on stderr: rich when stderr is a terminal, plain lines otherwise.

stdout carries only results (tables or JSON); everything said along the way
goes through a `Terminal`.
"""

from __future__ import annotations

import errno
import os
import sys
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
    """What the pipeline reports progress to."""

    def add_task(self, name: str, total: int | None) -> None: ...
    def advance(self, name: str, amount: int = 1, total: int | None = None) -> None: ...


class Terminal:
    """Messages and progress bars on stderr, quiet when asked or not a TTY."""

    def __init__(self, verbosity: int = 0, stream=None) -> None:
        from rich.console import Console

        self.stream = stream or sys.stderr
        self.verbosity = verbosity  # -1 quiet, 0 normal, 1 verbose
        self.is_tty = self.stream.isatty()
        no_color = bool(os.environ.get("NO_COLOR"))
        self.console = Console(
            file=self.stream,
            force_terminal=self.is_tty,
            no_color=no_color or not self.is_tty,
            highlight=False,
            soft_wrap=True,
        )

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

    @contextmanager
    def progress(self) -> Iterator[ProgressSink]:
        if self.is_tty and self.verbosity >= 0:
            with _RichProgress(self.console) as bars:
                yield bars
        else:
            yield _LineProgress(self if self.verbosity >= 0 else None)


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

    def __enter__(self) -> "_RichProgress":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def add_task(self, name: str, total: int | None) -> None:
        self._tasks[name] = self._progress.add_task(name, total=total)

    def advance(self, name: str, amount: int = 1, total: int | None = None) -> None:
        task = self._tasks[name]
        if total is not None:
            self._progress.update(task, total=total)
        self._progress.advance(task, amount)


class _LineProgress:
    """One plain line every few seconds, for logs and CI."""

    interval_s = 5.0

    def __init__(self, terminal: Terminal | None) -> None:
        self._terminal = terminal
        self._done: dict[str, int] = {}
        self._totals: dict[str, int | None] = {}
        self._last = time.monotonic()

    def add_task(self, name: str, total: int | None) -> None:
        self._done[name] = 0
        self._totals[name] = total

    def advance(self, name: str, amount: int = 1, total: int | None = None) -> None:
        self._done[name] += amount
        if total is not None:
            self._totals[name] = total
        now = time.monotonic()
        if self._terminal and now - self._last >= self.interval_s:
            self._last = now
            parts = [
                f"{n} {d}/{self._totals[n]}" if self._totals[n] is not None else f"{n} {d}"
                for n, d in self._done.items()
            ]
            self._terminal.info("progress: " + ", ".join(parts))
