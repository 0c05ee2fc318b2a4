"""The file events of a folder, from watchfiles: the system's where it can, polling where it cannot.

The system's are inotify, FSEvents or ReadDirectoryChangesW.

`EventSource` runs watchfiles in a thread of its own and hands every batch of changes to a callback,
as {path: deleted}: whether the batch deleted (or renamed away) what was at the path.
Where the system's events are unavailable or their limit is reached (fs.inotify.max_user_watches,
some network file systems), watchfiles raises OSError or its internal RuntimeError: the source says
so and polls instead, and asks for one full build, since changes made meanwhile may be missed.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

from ..core.errors import ExitCode
from ..core.failpoints import failpoint

POLL_DELAY_MS = 500  # polling: how often the folder is listed again
STEP_MS = 50  # watchfiles yields once no new event came for this long...
DEBOUNCE_MS = 1600  # ...or once this long passed since the first one (a steady stream)
ARMED_TIMEOUT_MS = 300  # an empty batch after this long says the watch is in place

LIMIT_HINT = ("raise the limit (sysctl fs.inotify.max_user_watches=524288, and max_user_instances), "
              "or pass --poll on a network file system")


class EventSource:
    """watchfiles over `root` in a thread: `on_changes({path: deleted})` per batch, `on_armed(polling, reason)`
    once listening (again after a switch to polling), `on_failed(message, exit_code)` if it cannot go on."""

    def __init__(self, root: Path, on_changes: Callable[[dict[str, bool]], None], on_armed: Callable[[bool, str | None], None],
                 on_failed: Callable[[str, int], None], polling: bool = False) -> None:
        self.root = Path(os.path.abspath(root))
        self.on_changes, self.on_armed, self.on_failed = on_changes, on_armed, on_failed
        self.polling = polling or forced_by_environment()
        self.stop_event = threading.Event()
        self.armed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lgpt-watch-events", daemon=True)

    def start(self) -> None:
        """Start listening (once); returns once events are being received (or the source failed)."""
        if self._thread.ident is None:
            self._thread.start()
        while not self.armed.wait(0.1) and self._thread.is_alive():
            pass

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        reason = "asked for (--poll or $WATCHFILES_FORCE_POLLING)" if self.polling else None
        while not self.stop_event.is_set():
            try:
                self._watch(reason)
                return  # stopped
            except (OSError, RuntimeError) as exc:  # watchfiles: OSError subclasses, WatchfilesRustInternalError
                if not self.root.is_dir():
                    self.on_failed(f"{self.root}: the watched folder is gone", int(ExitCode.USAGE))  # as a build of a missing DOCS
                    break
                if self.polling:
                    self.on_failed(f"{self.root}: cannot watch, even by polling: {_why(exc)}", int(ExitCode.ENVIRONMENT))
                    break
                self.polling = True
                reason = f"file system events unavailable ({_why(exc)}): polling every {POLL_DELAY_MS} ms; {_advice(exc)}"
                self.on_changes({str(self.root): False})  # what changed meanwhile: a full build finds it
        self.armed.set()

    def _watch(self, reason: str | None) -> None:
        import watchfiles

        if not self.polling:
            failpoint("watch.native")  # tests: enospc here plays a watch limit reached
        changes = watchfiles.watch(self.root, watch_filter=None, step=STEP_MS, debounce=DEBOUNCE_MS,
                                   stop_event=self.stop_event, rust_timeout=ARMED_TIMEOUT_MS, yield_on_timeout=True,
                                   raise_interrupt=False, force_polling=self.polling, poll_delay_ms=POLL_DELAY_MS,
                                   ignore_permission_denied=True)
        armed = False
        for batch in changes:
            if not armed:
                armed = True
                self.on_armed(self.polling, reason)
                self.armed.set()
            if batch:
                deleted = {path for change, path in batch if change == watchfiles.Change.deleted}
                self.on_changes({path: path in deleted for _, path in batch})


def forced_by_environment() -> bool:
    """$WATCHFILES_FORCE_POLLING, as watchfiles reads it (set, and not false/disable/disabled)."""
    value = os.environ.get("WATCHFILES_FORCE_POLLING", "")
    return bool(value) and value.lower() not in {"false", "disable", "disabled"}


def _advice(exc: BaseException) -> str:
    """What to do about events being unavailable: a limit reached (inotify's watches or instances, open files) is
    raised; any other cause (a name the events' decoder cannot read) is no limit's."""
    limit = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EMFILE, errno.ENFILE)
    if limit or any(word in str(exc).lower() for word in ("max_user", "too many open files", "no space left")):
        return LIMIT_HINT
    return "pass --poll to start by polling"


def _why(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
