"""Which file events matter, and gathering them until the files they name are stable.

`ChangeFilter` drops what a build would never index or must never react to: the index's own
folders (the index, stored PDFs, a `qdrant+path` store) when they lie inside the watched folder,
hidden and junk names (discovery's rules), paths the `.lgptignore` files ignore (read again as they
change; a change of one of them passes: it changes what is indexed), files that --include/--exclude
leave out, and files of types that are never documents (unless deleted: a folder of any name,
`scans/` or `scans.pdf/`, may have held documents, whatever is at its path now).
`Pending` gathers the paths of the changes that pass, from the watching thread, until the builder
takes them: once no event came and no pending file changed size or mtime over one settle interval
(a file still being written or copied waits), or after `max_wait_s` of continual change.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from ..core.failpoints import failpoint
from ..ingest.discover import KIND_BY_SUFFIX, is_junk, selected
from ..ingest.ignore import IGNORE_FILE, IgnoreRules


def _forms(path: Path) -> set[str]:
    """A folder as given and resolved (a symlinked parent is seen either way)."""
    return {os.path.abspath(path), os.path.realpath(path)}


class ChangeFilter:
    """Whether a changed path under `root` can change the index."""

    def __init__(self, root: Path, own_folders: Iterable[Path], include: tuple[str, ...] = (),
                 exclude: tuple[str, ...] = ()) -> None:
        self.roots = _forms(root)
        self.own = {form for folder in own_folders for form in _forms(folder)}
        self.include, self.exclude = include, exclude
        self.ignore = {form: IgnoreRules(form, fresh=True) for form in self.roots}

    def own_path(self, path: str) -> bool:
        """Inside (or one of) the index's own folders, or a folder above one that is still there (the
        index folder created by the first build: gone or renamed, it may have held documents too)."""
        if any(path == own or path.startswith(own + os.sep) for own in self.own):
            return True
        return any(own.startswith(path + os.sep) for own in self.own) and os.path.isdir(path)

    def __call__(self, path: str, deleted: bool = False) -> bool:
        """`deleted`: the batch deleted (or renamed away) what was at `path`."""
        path = os.path.abspath(path)
        if self.own_path(path):
            return False
        root = next((r for r in self.roots if path.startswith(r + os.sep)), None)
        if root is None:
            return path in self.roots  # the folder itself (deleted or replaced), nothing outside it
        parts = path[len(root) + 1:].split(os.sep)
        if any(is_junk(part) for part in parts[:-1]):
            return False
        if parts[-1] == IGNORE_FILE:
            return True
        is_file = not deleted and os.path.isfile(path)
        rel = "/".join(parts)
        if is_junk(parts[-1]) or self.ignore[root].ignored(rel, not deleted and not is_file):
            return False
        if is_file and not selected(rel, self.include, self.exclude):
            return False
        # a folder (renamed, deleted) or a deleted file of any name may take documents with it
        return os.path.splitext(path)[1].lower() in KIND_BY_SUFFIX or not is_file


def _stats(paths: Iterable[str]) -> dict[str, tuple[int, int] | None]:
    found: dict[str, tuple[int, int] | None] = {}
    for path in paths:
        try:
            info = os.stat(path)
            found[path] = (info.st_size, info.st_mtime_ns)
        except OSError:
            found[path] = None
    return found


class Pending:
    """The changed paths not built yet, shared by the watching thread and the builder."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._paths: set[str] = set()
        self._version = 0  # counts additions: a settle interval with no new one is quiet
        self._closed = False

    def add(self, paths: Iterable[str]) -> None:
        with self._cond:
            self._paths.update(paths)
            self._version += 1
            self._cond.notify_all()

    def close(self) -> None:
        """Wake the builder to stop."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_closed(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds (a retry's backoff); True if closed meanwhile."""
        with self._cond:
            return self._cond.wait_for(lambda: self._closed, timeout=max(0.0, timeout))

    def take_settled(self, settle_s: float, max_wait_s: float) -> set[str] | None:
        """The pending paths once they are stable (see the module's docstring); None once closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._paths or self._closed)
            first = time.monotonic()
            while not self._closed:
                version, paths = self._version, set(self._paths)
                before = _stats(paths)
                self._cond.wait_for(lambda: self._version != version or self._closed, timeout=settle_s)
                if self._closed:
                    break
                failpoint("watch.settle-check")  # tests: a file grows between the two looks
                if self._version == version and _stats(paths) == before:
                    break  # quiet, and every file of the batch kept its size and mtime
                if time.monotonic() - first >= max_wait_s:
                    break  # changing all the time: build what there is; what changes during the build is built next
            if self._closed:
                return None
            taken, self._paths = self._paths, set()
            return taken
