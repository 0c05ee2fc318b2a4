"""A recording file system for power-loss and fault tests, in the spirit of SQLite's crash VFS and LazyFS.

`RecordingDisk` stands in for index/format/disk.py's `OsDisk` (`recording`), as SQLite's test6.c
does for its files.

It passes every operation on to the real file system, so the command under test runs as usual,
and keeps a model (testing/diskmodel.py) of what a machine that lost power at that moment would find
on its disk: data is durable once its file was fsync'ed, a folder's entries once the folder was.

Every operation is numbered. With `crash_at=N` the N-th one never happens: the machine loses
power just before it (`PowerLost` is raised there and at every later operation, so nothing more
reaches the disk, whatever the command does next). With `fault=Fault(N, kind)` the N-th operation
fails as a disk does: "enospc" (that one and every later one but deletions: the disk stays full),
"eio" (that one only), "short" (a write that puts half its bytes down, then "No space left").

The disk also records every HEAD a rename put in place and every commit the command claimed
(`claim`: the "after-head" failpoint, or the command's return), so a test can say which generations
the rebooted index may hold.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from ..core import failpoints
from ..index.format.disk import Disk, OsDisk, WriteHandle, using
from .diskmodel import LOSS_PATTERNS, DiskModel, FileNode, FolderNode, Image, capture, materialize

__all__ = ["FAULT_KINDS", "LOSS_PATTERNS", "Fault", "Op", "PowerLost", "RecordingDisk", "capture", "materialize", "recording"]

FAULT_KINDS = ("enospc", "eio", "short")


class PowerLost(BaseException):
    """The simulated machine lost power: no later operation reaches the disk."""


class Fault(NamedTuple):
    at: int  # the operation's number, from 1
    kind: str  # one of FAULT_KINDS


class Op(NamedTuple):
    number: int
    kind: str
    path: str  # relative to the root


class UnsyncedDisk(OsDisk):
    """The operating system's file operations without fsync: under a RecordingDisk the model says what is
    durable, so the real disk need not be asked (a third of a small build's time)."""

    def sync(self, handle: WriteHandle) -> None:
        handle.flush()

    def sync_dir(self, path: Path) -> None:
        os.stat(path)  # it must exist: a real fsync would fail on a missing folder


class RecordingDisk:
    """The disk operations of a folder (`root`), recorded; see the module's docstring."""

    def __init__(self, root: Path, *, crash_at: int | None = None, fault: Fault | None = None,
                 inner: Disk | None = None, head: str | None = None, model: DiskModel | None = None) -> None:
        """`model`: go on from what another recording left (its process killed: the folder holds its "kill"
        image), else the folder as it is, all of it durable."""
        self.root = Path(os.path.abspath(root))
        self.crash_at, self.fault = crash_at, fault
        self.inner = inner or UnsyncedDisk()
        self.head = head  # the index's HEAD, relative to root: renames onto it are recorded
        self.model = model.killed() if model is not None else DiskModel(self.root)
        self.ops: list[Op] = []
        self.heads: list[tuple[int, bytes]] = []  # (operation, the HEAD it put in place)
        self.claims: list[int] = []  # operations after which the command said a commit was done
        self.dead = False
        self.faulted: Op | None = None

    def _rel(self, path: Path) -> str | None:
        rel = os.path.relpath(os.path.abspath(path), self.root)
        return None if rel == ".." or rel.startswith(".." + os.sep) else rel

    def _step(self, kind: str, path: Path) -> str | None:
        """Count an operation on `path` (None: outside the root, not counted): the power loss or fault due there."""
        rel = self._rel(path)
        if rel is None:
            return None
        if self.dead:
            raise PowerLost(f"{kind} {rel}: after the power loss")
        op = Op(len(self.ops) + 1, kind, rel)
        self.ops.append(op)
        if op.number == self.crash_at:
            self.dead = True
            raise PowerLost(f"{kind} {rel}: the power was lost here (operation {op.number})")
        fault = self.fault
        if fault is not None and fault.kind != "short":
            persistent = fault.kind == "enospc" and op.number > fault.at and kind != "unlink"
            if op.number == fault.at or persistent:
                self.faulted = self.faulted or op
                code = errno.ENOSPC if fault.kind == "enospc" else errno.EIO
                raise OSError(code, os.strerror(code), str(path))
        return rel

    # the operations (index.format.disk.Disk)

    def create(self, path: Path) -> WriteHandle:
        rel = self._step("create", path)
        real = self.inner.create(path)
        if rel is None:
            return real
        parent, name = self.model.parent(rel)
        node = parent.entries.get(name)
        if node is not None and isinstance(self.model.nodes[node], FileNode):
            del self.model.file_node(node).data[:]  # truncated in place: the same file
        else:
            node = self.model.add(FileNode())
            self.model.change(parent, len(self.ops), name, node)
        return _Handle(self, real, self.model.file_node(node), Path(path))

    def _write(self, handle: _Handle, data: bytes) -> int:
        rel = self._step("write", handle.path)
        fault = self.fault
        if rel is not None and fault is not None and fault.kind == "short" and len(self.ops) == fault.at:
            self.faulted = self.ops[-1]
            half = bytes(data[: len(data) // 2])
            handle.real.write(half)
            handle.put(half)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(handle.path))
        written = handle.real.write(data)
        handle.put(bytes(data))
        return written

    def sync(self, handle: WriteHandle) -> None:
        if not isinstance(handle, _Handle):
            self.inner.sync(handle)
            return
        self._step("fsync", handle.path)
        self.inner.sync(handle.real)
        handle.file.synced = bytes(handle.file.data)

    def sync_dir(self, path: Path) -> None:
        rel = self._step("fsync-dir", path)
        self.inner.sync_dir(path)
        if rel is not None:
            folder = self.model.folder(rel)
            folder.durable = dict(folder.entries)
            folder.pending.clear()

    def replace(self, source: Path, target: Path) -> None:
        rel = self._step("rename", target)
        src = self._rel(source)
        self.inner.replace(source, target)
        if rel is None or src is None:
            return
        number = len(self.ops)
        src_folder, src_name = self.model.parent(src)
        node = src_folder.entries.get(src_name)
        if node is None:
            raise AssertionError(f"{src}: renamed, but the disk layer never saw it made")
        self.model.change(src_folder, number, src_name, None)  # both halves of the rename: one change
        dst_folder, dst_name = self.model.parent(rel)
        self.model.change(dst_folder, number, dst_name, node)
        if rel == self.head:
            self.heads.append((number, bytes(self.model.file_node(node).data)))

    def unlink(self, path: Path) -> None:
        rel = self._rel(path)
        if rel is not None:
            parent, name = self.model.parent(rel)
            if name not in parent.entries:
                self.inner.unlink(path)  # nothing to delete: not an operation of the disk's
                return
        rel = self._step("unlink", path)
        self.inner.unlink(path)
        if rel is not None:
            parent, name = self.model.parent(rel)
            self.model.change(parent, len(self.ops), name, None)

    def mkdir(self, path: Path) -> None:
        rel = self._step("mkdir", path)
        existed = os.path.isdir(path)
        self.inner.mkdir(path)
        if rel is not None and not existed:
            parent, name = self.model.parent(rel)
            self.model.change(parent, len(self.ops), name, self.model.add(FolderNode()))

    # what the command said, and what the disk holds

    def claim(self) -> None:
        """The command says the commit it made is durable (after HEAD, or when it returns)."""
        if not self.dead:
            self.claims.append(len(self.ops))

    def untracked(self) -> list[str]:
        return self.model.untracked()

    def image(self, pattern: str, rng: random.Random) -> Image:
        return self.model.image(pattern, rng)


class _Handle:
    """A file being written through a RecordingDisk: the real file, and the model's."""

    def __init__(self, disk: RecordingDisk, real: WriteHandle, file: FileNode, path: Path) -> None:
        self.disk, self.real, self.file, self.path = disk, real, file, path
        self.position = 0
        file.open_handles += 1

    def write(self, data: bytes, /) -> int:
        return self.disk._write(self, data)

    def put(self, data: bytes) -> None:
        end = self.position + len(data)
        if len(self.file.data) < self.position:
            self.file.data.extend(bytes(self.position - len(self.file.data)))
        self.file.data[self.position:end] = data
        self.position = end

    def seek(self, offset: int, whence: int = 0, /) -> int:
        self.position = self.real.seek(offset, whence)
        return self.position

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        self.real.flush()

    def close(self) -> None:
        if not self.real.closed:
            self.file.open_handles -= 1
        self.real.close()

    @property
    def closed(self) -> bool:
        return self.real.closed


@contextmanager
def recording(disk: RecordingDisk) -> Iterator[RecordingDisk]:
    """`disk` takes the index's file operations, and the "after-head" failpoint claims a commit."""

    def hook(name: str) -> None:
        if name == "after-head":
            disk.claim()

    failpoints.set_hook(hook)
    try:
        with using(disk):
            yield disk
    finally:
        failpoints.set_hook(None)
