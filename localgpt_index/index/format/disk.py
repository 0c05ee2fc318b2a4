"""Every file operation a writer of the index makes, through one layer: `Disk`.

Creating, writing, syncing, renaming and deleting the files of an index (and making its folders)
go through the process's `disk()`, the operating system's (`OsDisk`) unless a test has put another
in its place (`using`). Tests replace it with a recording file system that keeps what was not made
durable in memory and simulates a power loss at any operation, or injects a full disk, an I/O error
or a short write there (testing/powerloss.py). Reads do not go through it: they see what the
writes did, as they would on a real disk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol


class WriteHandle(Protocol):
    """A file open for writing (a binary file object; `np.save` writes to one)."""

    def write(self, data: bytes, /) -> int: ...

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class Disk(Protocol):
    """The file operations of an index's writers."""

    def create(self, path: Path) -> WriteHandle:
        """A new file at `path`, open for writing (an existing one is truncated)."""
        ...

    def sync(self, handle: WriteHandle) -> None:
        """What was written to `handle` is on the device (flush, fsync)."""
        ...

    def sync_dir(self, path: Path) -> None:
        """The entries of folder `path` (files created, renamed or deleted in it) are on the device."""
        ...

    def replace(self, source: Path, target: Path) -> None:
        """Rename `source` to `target`, atomically replacing it."""
        ...

    def unlink(self, path: Path) -> None:
        """Delete a file (nothing when it is already gone)."""
        ...

    def mkdir(self, path: Path) -> None:
        """Make one folder whose parent exists (nothing when it exists)."""
        ...


class OsDisk:
    """The operating system's file operations."""

    def create(self, path: Path) -> WriteHandle:
        return open(path, "wb")

    def sync(self, handle: WriteHandle) -> None:
        handle.flush()
        os.fsync(_fileno(handle))

    def sync_dir(self, path: Path) -> None:
        if os.name == "nt":
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace(self, source: Path, target: Path) -> None:
        os.replace(source, target)

    def unlink(self, path: Path) -> None:
        Path(path).unlink(missing_ok=True)

    def mkdir(self, path: Path) -> None:
        Path(path).mkdir(exist_ok=True)


def _fileno(handle: WriteHandle) -> int:
    return handle.fileno()  # type: ignore[attr-defined]  # OsDisk's handles are real files


_current: Disk = OsDisk()


def disk() -> Disk:
    """The file operations writers use now."""
    return _current


@contextmanager
def using(replacement: Disk) -> Iterator[Disk]:
    """Tests: `replacement` takes every writer's file operations until the block ends."""
    global _current
    previous, _current = _current, replacement
    try:
        yield replacement
    finally:
        _current = previous


def copy_into(source: Path, handle: WriteHandle, chunk: int = 1 << 20) -> None:
    """The bytes of `source` (a file outside the index) written to `handle`."""
    with open(source, "rb") as reader:
        while block := reader.read(chunk):
            handle.write(block)
