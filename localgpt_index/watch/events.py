"""What a watcher reports, as typed events: the CLI prints them, tests and callers wait on them.

Every event has a `kind` (its name in `--json` lines) and `to_dict()`; a watcher hands each one,
in order, to the callback it was given (`Watcher(on_event=...)`), from the thread that saw it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:
    from ..indexing.options import BuildReport

MAX_LISTED = 20  # paths an event's JSON lists; the count says how many there were


@dataclass(frozen=True)
class WatchEvent:
    kind: ClassVar[str] = "event"
    time: float = field(default_factory=time.time, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.kind, "time": round(self.time, 3)}


@dataclass(frozen=True)
class Watching(WatchEvent):
    """The watcher is listening: by the system's file events, or by polling (`reason` says why)."""

    kind: ClassVar[str] = "watching"
    root: str
    index: str
    polling: bool
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "root": self.root, "index": self.index, "polling": self.polling, "reason": self.reason}


@dataclass(frozen=True)
class ChangesSeen(WatchEvent):
    """A batch of file events: `paths` will be built; `ignored` were dropped (the index's own files,
    hidden and junk files, types that are never documents)."""

    kind: ClassVar[str] = "changes-seen"
    paths: tuple[str, ...]
    ignored: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), **_listed(self.paths), "ignored": self.ignored}


@dataclass(frozen=True)
class BuildStarted(WatchEvent):
    """Build `number` of this watcher starts, for the changes `paths` (none: the catch-up at start)."""

    kind: ClassVar[str] = "build-started"
    number: int
    paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "number": self.number, **_listed(self.paths)}


@dataclass(frozen=True)
class BuildCommitted(WatchEvent):
    """Build `number` committed `generation`: queries see it from now on."""

    kind: ClassVar[str] = "build-committed"
    number: int
    generation: int
    report: BuildReport

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "number": self.number, "generation": self.generation, "report": self.report.to_dict()}


@dataclass(frozen=True)
class BuildUpToDate(WatchEvent):
    """Build `number` found nothing to change (a file touched, not edited): no new generation."""

    kind: ClassVar[str] = "build-up-to-date"
    number: int
    generation: int | None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "number": self.number, "generation": self.generation}


@dataclass(frozen=True)
class BuildFailed(WatchEvent):
    """Build `number` committed nothing. `fatal`: the watcher stops with `exit_code` (another build
    would fail the same way); otherwise its changes are tried again (`retry_in_s`: after that wait,
    for a build that could not write, a full disk)."""

    kind: ClassVar[str] = "build-failed"
    number: int
    message: str
    exit_code: int
    fatal: bool
    hint: str | None = None
    report: BuildReport | None = None  # a --strict build that found failures
    retry_in_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "number": self.number, "message": self.message, "exit_code": self.exit_code,
                "fatal": self.fatal, "hint": self.hint, "report": self.report.to_dict() if self.report else None,
                "retry_in_s": self.retry_in_s}


@dataclass(frozen=True)
class BuildLog(WatchEvent):
    """A line a build said along the way (warnings, notes)."""

    kind: ClassVar[str] = "log"
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "message": self.message}


@dataclass(frozen=True)
class WatchStopped(WatchEvent):
    """The watcher stopped: asked to (`exit_code` 0), or for the reason given."""

    kind: ClassVar[str] = "stopped"
    reason: str
    exit_code: int = 0
    builds: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "reason": self.reason, "exit_code": self.exit_code, "builds": self.builds}


EventSink = Callable[[WatchEvent], None]


def _listed(paths: tuple[str, ...]) -> dict[str, Any]:
    return {"count": len(paths), "paths": list(paths[:MAX_LISTED])}
