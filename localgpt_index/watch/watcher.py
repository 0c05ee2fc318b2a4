"""A folder that stays indexed: file events in, debounced incremental builds out.

`Watcher` listens to a folder (source.py), gathers the changes that matter until their files are
stable (changes.py), and runs `build_index` on the folder: the same build as `lgpt-index build`,
one writer under the store's lock, crash-safe, the stat cache deciding what is read again, its
failures reported. Changes that arrive during a build are gathered for the next one, so a burst
(an unzip of a thousand files) costs a few builds, not a thousand. The page encoder is loaded by
the first build that embeds a page and kept for the next ones (`KeptEncoder`). Readers never
wait: each build commits a new generation, and queries answer from the previous one meanwhile.

Every step is reported as an event (events.py), in order, to the `on_event` callback. A build that
cannot write (a full disk, an I/O error) is tried again with backoff, never the end of the watcher;
`status()` says what it is doing (serve's /healthz and MCP's index_status show it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..indexing.options import BuildOptions, BuildReport
from ..indexing.run import build_index
from ..core.errors import IndexBusy, LgptError, TransientWriteError, UsageError
from ..ingest.processes import ProcessScope
from ..models.loading import EncoderOptions, load_page_encoder
from ..models.protocols import PageEncoder
from ..models.resolve import ModelRef
from .changes import ChangeFilter, Pending
from .events import (BuildCommitted, BuildFailed, BuildLog, BuildStarted, BuildUpToDate, ChangesSeen, EventSink,
                     WatchStopped, Watching)
from .source import EventSource

DEFAULT_SETTLE_S = 1.0
DEFAULT_MAX_WAIT_S = 60.0
DEFAULT_LOCK_WAIT_S = 600.0  # a manual build beside the watcher: its build waits this long for the lock
DEFAULT_RETRY_S = (1.0, 60.0)  # a full disk: the first retry after 1 s, the wait doubling up to 60 s


def retry_delays() -> tuple[float, float]:
    """The backoff of a build that could not write: $LGPT_WATCH_RETRY_S ("FIRST,MOST" seconds; tests) or the default."""
    first, _, most = os.environ.get("LGPT_WATCH_RETRY_S", "").partition(",")
    try:
        delays = float(first), float(most or DEFAULT_RETRY_S[1])
    except ValueError:  # unset (or not numbers)
        return DEFAULT_RETRY_S
    return delays if 0 < delays[0] <= delays[1] < float("inf") else DEFAULT_RETRY_S  # never a loop without a wait


class KeptEncoder:
    """An encoder factory for builds (build_index's `encoder_factory`) that loads the model once
    and hands the same encoder to every later build of the same model and options."""

    def __init__(self, factory: Callable[[ModelRef, EncoderOptions], PageEncoder] = load_page_encoder) -> None:
        self.factory = factory
        self.loads = 0
        self._key: tuple | None = None
        self._encoder: PageEncoder | None = None
        self._lock = threading.Lock()

    def __call__(self, model: ModelRef, options: EncoderOptions) -> PageEncoder:
        key = (model.path, model.fingerprint, options)
        with self._lock:
            if self._encoder is None or key != self._key:
                self._encoder = None  # the old model goes before the new one loads
                self._encoder = self.factory(model, options)
                self._key = key
                self.loads += 1
            return self._encoder


class Watcher:
    """Keeps the index in `store` up to date with the folder `root` until stopped."""

    def __init__(self, root: Path, store, options: BuildOptions | None = None, on_event: EventSink = lambda event: None, *,
                 settle_s: float = DEFAULT_SETTLE_S, max_wait_s: float = DEFAULT_MAX_WAIT_S, polling: bool = False,
                 encoders: KeptEncoder | None = None) -> None:
        root = Path(os.path.abspath(root))
        if not root.is_dir():
            raise UsageError(f"{root}: not a folder; watch keeps a folder indexed (build indexes a single file).")
        self.root, self.store, self.on_event = root, store, on_event
        self.options = options or BuildOptions(wait_s=DEFAULT_LOCK_WAIT_S)
        self.settle_s, self.max_wait_s = settle_s, max_wait_s
        self.encoders = encoders or KeptEncoder()
        self.filter = ChangeFilter(root, store.local_folders, self.options.include, self.options.exclude)
        self.pending = Pending()
        self.builds = 0
        self.abandoned: int | None = None  # the build an interrupt stopped
        self.exit_code = 0
        self.failure: str | None = None
        self.error: LgptError | None = None  # the error that stopped it, if one did
        self.retry_s = retry_delays()
        self.retrying: LgptError | None = None  # the write error of the last build, tried again after a wait
        self.failed_in_a_row = 0
        self._retry_at: float | None = None  # time.monotonic() of the next try
        self._building = self._stopped = False
        self.source = EventSource(root, self._changes, self._armed, self._failed, polling)
        self._background: threading.Thread | None = None
        self._lifecycle = threading.Lock()  # start_background (often on a thread of its own) against stop
        self._stopped = False
        self.scope: ProcessScope | None = None
        self._ignored_last = False  # the last batch of changes was all ignored (said once)

    # the events of the folder (the source's thread)

    def _armed(self, polling: bool, reason: str | None) -> None:
        self.on_event(Watching(str(self.root), self.store.location, polling, reason))

    def _changes(self, changes: dict[str, bool]) -> None:
        kept = tuple(sorted(path for path, deleted in changes.items() if self.filter(path, deleted)))
        if kept or not self._ignored_last:  # (an ignored batch right after another is not said again: a log the
            self.on_event(ChangesSeen(kept, len(changes) - len(kept)))  # watcher writes into its folder made one an event)
        self._ignored_last = not kept
        if kept:
            self.pending.add(kept)

    def _failed(self, message: str, exit_code: int) -> None:
        self.failure, self.exit_code = message, exit_code
        self.pending.close()

    # the loop

    def run(self, catch_up: bool = True) -> int:
        """Watch until stopped (`stop()`, or SIGINT/SIGTERM in the main thread): first a build that
        catches up with what changed while nobody watched, then one per settled batch of changes.
        Returns the exit code: 0 when stopped, else a build's that cannot succeed by trying again."""
        reason = "stopped"
        try:
            self.source.start()
            if catch_up and self.failure is None and not self._stopped:
                self.build(())
            while self.exit_code == 0:
                if not self._backoff():
                    break
                paths = self.pending.take_settled(self.settle_s, self.max_wait_s)
                if paths is None:
                    break
                self.build(paths)
        except Exception as exc:  # a bug of ours: the CLI reports it; in the background, one line, no traceback
            self.failure, self.exit_code = f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", 1
            if self._background is None:
                raise
        except KeyboardInterrupt:
            reason = "interrupted by SIGINT or SIGTERM"
            if self.abandoned is not None:
                reason += f"; build {self.abandoned}, in progress, was abandoned: the index keeps its last generation"
        finally:
            self.source.stop()
            self._stopped = True
            self.on_event(WatchStopped(self.failure or reason, self.exit_code, self.builds))
        return self.exit_code

    def _backoff(self) -> bool:
        """After a build that could not write, wait until its retry is due; False if stopped meanwhile."""
        return self._retry_at is None or not self.pending.wait_closed(self._retry_at - time.monotonic())

    def build_until_written(self) -> None:
        """The catch-up build in this thread, tried again after the backoff while it cannot write, until it
        ends otherwise or the watcher is stopped (serve --watch's first build of a folder with no index)."""
        self.build(())
        while self.retrying is not None and self.error is None and self._backoff():
            self.build(())

    def build(self, paths) -> BuildReport | None:
        """One build of the whole folder (the stat cache makes it incremental), reported as events."""
        self.builds += 1
        number = self.builds
        self.on_event(BuildStarted(number, tuple(sorted(paths))))
        self._building = True
        try:
            report = build_index(self.root, self.store.reopened(), self.options,
                                 log=lambda message: self.on_event(BuildLog(message)), encoder_factory=self.encoders)
        except TransientWriteError as exc:  # a full disk: the same changes again after a wait, never the end
            self._retry_later(number, exc, paths)
            return None
        except IndexBusy as exc:  # its writer outlasted --wait: this batch is tried again with the next one
            self.retrying, self._retry_at = None, None  # this build could not start: no disk problem seen
            self.on_event(BuildFailed(number, exc.message, int(exc.exit_code), False, exc.hint))
            self.pending.add(paths or {str(self.root)})
            return None
        except LgptError as exc:  # the model, the index, an option: trying again would fail the same way
            self.error, self.failure, self.exit_code = exc, exc.message, int(exc.exit_code)
            self.on_event(BuildFailed(number, exc.message, int(exc.exit_code), True, exc.hint))
            return None
        except KeyboardInterrupt:
            self.abandoned = number
            raise
        finally:
            self._building = False
        self.retrying, self.failed_in_a_row, self._retry_at = None, 0, None
        if report.committed:
            assert report.generation is not None, "a build that committed records the generation it made"
            self.on_event(BuildCommitted(number, report.generation, report))
        elif report.failures:  # --strict
            self.on_event(BuildFailed(number, f"--strict: {len(report.failures)} document(s) failed; nothing was committed",
                                      int(report.exit_code), False, report=report))
        else:
            self.on_event(BuildUpToDate(number, report.generation))
        if report.stopped:  # the device was lost: what was complete is committed; the next build needs a device
            self.failure, self.exit_code = report.stopped, int(report.exit_code)
        return report

    def _retry_later(self, number: int, exc: LgptError, paths) -> None:
        first, most = self.retry_s
        self.failed_in_a_row += 1
        delay = min(first * 2 ** (self.failed_in_a_row - 1), most)
        self.retrying, self._retry_at = exc, time.monotonic() + delay
        hint = (f"Free some space (or fix the disk): the watcher tries again in {delay:g} s, the wait doubling up to "
                f"{most:g} s, and carries on from the last commit.")
        self.on_event(BuildFailed(number, exc.message, int(exc.exit_code), False, hint, retry_in_s=delay))
        self.pending.add(paths or {str(self.root)})

    def status(self) -> dict:
        """What the watcher is doing, for a server's status: `state` (watching, building, retrying: its
        last build could not write; stopped), the builds so far, the `problem` and when the next try is."""
        retry_in = max(0.0, self._retry_at - time.monotonic()) if self._retry_at is not None else None
        if self._stopped:
            state, problem = "stopped", self.failure
        elif self.retrying is not None:
            state, problem = "retrying", self.retrying.message
        else:
            state, problem = ("building" if self._building else "watching"), None
        return {"state": state, "builds": self.builds, "problem": problem, "failed_in_a_row": self.failed_in_a_row,
                "retry_in_s": None if self._stopped or retry_in is None else round(retry_in, 3),
                "exit_code": self.exit_code if self._stopped else None}

    # in the background (serve --watch)

    def start_background(self, catch_up: bool = True) -> None:
        """Run in a thread of its own (its conversions in a process scope of their own); nothing once stopped."""
        scope = ProcessScope()

        def target() -> None:
            scope.enter_thread()
            self.run(catch_up)

        with self._lifecycle:
            if self._stopped:
                return
            self.scope = scope
            self._background = threading.Thread(target=target, name="lgpt-watch", daemon=True)
            self._background.start()

    def stop(self, wait_s: float | None = None) -> bool:
        """Stop watching; with a thread in the background, wait up to `wait_s` for a build in progress
        to end (None: as long as it takes). False if one was still running (its processes are ended)."""
        with self._lifecycle:
            self._stopped = True
            self.pending.close()
            self.source.stop_event.set()
            background = self._background
        if background is None or background is threading.current_thread():
            return True
        background.join(wait_s)
        if background.is_alive():
            if self.scope is not None:
                self.scope.stop()
            return False
        return True
