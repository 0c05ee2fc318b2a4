"""Files of an untrusted folder, read and written safely.

Names are resolved inside it, regular files only (never a link out, a FIFO or a device), of bounded
sizes; atomic writes (fsync of the file before the rename and of the folder after), and the sweep of
a killed writer's temporary files."""

from __future__ import annotations

import mmap
import os
import stat
import uuid
from pathlib import Path

from ...core.errors import IndexProblem, MissingIndexFile
from .disk import disk
from .manifest import REBUILD_HINT

TMP_PREFIX = ".tmp-"


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, links resolved, is inside `root`."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real.startswith(real_root.rstrip(os.sep) + os.sep)


def _open_member(root: Path, rel: str) -> tuple[Path, int]:
    """`rel` inside `root` opened read-only (never following a link, never blocking on a FIFO)."""
    path = root / rel
    if not inside(root, path):
        raise IndexProblem(f"{path}: the manifest names a file outside the index.", hint=REBUILD_HINT)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        return path, os.open(path, flags)
    except FileNotFoundError:
        raise MissingIndexFile(f"{path} is missing.", hint=REBUILD_HINT) from None
    except OSError as exc:
        raise IndexProblem(f"{path}: cannot be read ({exc.strerror or exc}).", hint=REBUILD_HINT) from None


def map_member(root: Path, rel: str, size: int) -> mmap.mmap:
    """`rel` inside `root`, a regular file of exactly `size` bytes (> 0), mapped read-only: its bytes stay
    in the page cache (file-backed memory), not in this process's heap."""
    path, fd = _open_member(root, rel)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != size or not size:
            raise IndexProblem(f"{path}: not a regular file of {size} bytes; the index is damaged.", hint=REBUILD_HINT)
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise IndexProblem(f"{path}: cannot be read ({exc.strerror or exc}).", hint=REBUILD_HINT) from None
    finally:
        os.close(fd)


def read_member(root: Path, rel: str, limit: int) -> bytes:
    """The bytes of `rel` inside `root`: a regular file inside the folder, at most `limit` bytes."""
    path, fd = _open_member(root, rel)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IndexProblem(f"{path}: not a regular file; the index is damaged.", hint=REBUILD_HINT)
        if info.st_size > limit:
            raise IndexProblem(f"{path}: {info.st_size} bytes, more than the {limit} allowed; the index is damaged.", hint=REBUILD_HINT)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise IndexProblem(f"{path}: cannot be read ({exc.strerror or exc}).", hint=REBUILD_HINT) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise IndexProblem(f"{path}: more than {limit} bytes; the index is damaged.", hint=REBUILD_HINT)
    return data


def regular_size(root: Path, rel: str) -> int:
    """The size of a regular file inside `root` (never following a link out, never opening a FIFO)."""
    path = root / rel
    if not inside(root, path):
        raise IndexProblem(f"{path}: the manifest names a file outside the index.", hint=REBUILD_HINT)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise MissingIndexFile(f"{path} is missing.", hint=REBUILD_HINT) from None
    except OSError as exc:
        raise IndexProblem(f"{path}: cannot be read ({exc.strerror or exc}).", hint=REBUILD_HINT) from None
    if not stat.S_ISREG(info.st_mode):
        raise IndexProblem(f"{path}: not a regular file; the index is damaged.", hint=REBUILD_HINT)
    return info.st_size


class NotDurable(OSError):
    """A file was renamed into place (readers see it), but the fsync of its folder failed: it may not
    survive a power loss."""


def write_atomic(path: Path, data: bytes) -> None:
    """`data` as `path`, all or nothing: a temporary file, fsync, rename, fsync of the folder (NotDurable
    when only that last step failed)."""
    tmp = path.with_name(f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}-{path.name}")
    ops = disk()
    handle = ops.create(tmp)
    try:
        handle.write(data)
        ops.sync(handle)
    finally:
        handle.close()
    ops.replace(tmp, path)
    try:
        ops.sync_dir(path.parent)
    except OSError as exc:
        raise NotDurable(exc.errno, exc.strerror, str(path.parent)) from exc


def make_folders(path: Path) -> None:
    """`path` and the folders above it that are missing, each made durable in its parent (so that a
    power loss after a commit cannot take a new index's folder, and the commit with it)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    ops = disk()
    for folder in reversed(missing):
        ops.mkdir(folder)
        ops.sync_dir(folder.parent)


def plain_files(folder: Path) -> list[Path]:
    """The files and links of a real folder (none when it is missing or a link)."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        return []
    return [p for p in folder.iterdir() if p.is_file() or p.is_symlink()]


def sweep_temporary(folders: list[Path]) -> None:
    """Delete the temporary files of writers that were killed (only the holder writes, so none is live)."""
    try:
        for folder in folders:
            if folder.is_dir() and not folder.is_symlink():
                for path in folder.iterdir():
                    if path.name.startswith(TMP_PREFIX) or (path.name.startswith(".") and path.name.endswith(".tmp")):
                        disk().unlink(path)
    except OSError:
        pass


def same_regular_file(target: Path, size: int) -> bool:
    """`target` is a regular file (not a link, a FIFO, a folder) of `size` bytes: a copy already in place."""
    try:
        info = target.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == size
