"""What a disk holds, and what a power loss leaves of it: the model behind testing/powerloss.py.

`DiskModel` keeps a folder's files and folders as a running system sees them and as the device has
them: a file's data reaches the device with its fsync, a folder's entries (files created, renamed,
deleted, folders made) with the folder's fsync. `image(pattern)` is what a machine that lost power
now would find, for one loss pattern (LOSS_PATTERNS); `materialize` puts an image in place of the
real folder, as that machine finds it when it boots again.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 4096
LOSS_PATTERNS = ("kill", "lost", "metadata", "ordered", "torn")
# kill:     everything the process did is kept (kill -9: the kernel has it all)
# lost:     only what was fsync'ed: file data as of its last fsync, folder entries as of the folder's
# metadata: every folder change kept, file data as of its last fsync (renamed files may be empty)
# ordered:  folder changes kept up to a random point in their order (a journal), data as fsync'ed
# torn:     a random half of the folder changes kept, unsynced data torn at a random block boundary
UNTRACKED = frozenset({"lock", ".lock"})  # lock files the lock library creates itself: they carry no data

Image = dict[str, "bytes | None"]  # relative path -> a file's bytes, or None for a folder


@dataclass
class FileNode:
    data: bytearray = field(default_factory=bytearray)
    synced: bytes | None = None  # None: never fsync'ed since it was created (empty after a power loss)
    open_handles: int = 0


@dataclass
class FolderNode:
    entries: dict[str, int] = field(default_factory=dict)  # as the running system sees them
    durable: dict[str, int] = field(default_factory=dict)  # as of the last fsync of the folder
    pending: list[tuple[int, str, int | None]] = field(default_factory=list)  # (change, name, node or None)


class DiskModel:
    """The files and folders under one root, as running and as durable; the root itself is durable, and so
    is what is there at the start."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes: dict[int, FileNode | FolderNode] = {0: FolderNode()}
        self._snapshot(root, 0)

    def _snapshot(self, folder: Path, node: int) -> None:
        """What is there at the start, taken as durable."""
        model = self.folder_node(node)
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                child = self.add(FolderNode())
                self._snapshot(Path(entry.path), child)
            else:
                data = Path(entry.path).read_bytes()
                child = self.add(FileNode(bytearray(data), data))
            model.entries[entry.name] = model.durable[entry.name] = child

    def killed(self) -> DiskModel:
        """This disk after its process was killed: what it wrote stays as it is (durable or not), its files closed."""
        for node in self.nodes.values():
            if isinstance(node, FileNode):
                node.open_handles = 0
        return self

    def add(self, node: FileNode | FolderNode) -> int:
        number = len(self.nodes)
        self.nodes[number] = node
        return number

    def folder_node(self, node: int) -> FolderNode:
        folder = self.nodes[node]
        assert isinstance(folder, FolderNode)
        return folder

    def file_node(self, node: int) -> FileNode:
        file = self.nodes[node]
        assert isinstance(file, FileNode)
        return file

    def parent(self, rel: str) -> tuple[FolderNode, str]:
        """The folder holding `rel`, and its name there."""
        parts = Path(rel).parts
        folder = self.folder_node(0)
        for part in parts[:-1]:
            child = folder.entries.get(part)
            if child is None or not isinstance(self.nodes[child], FolderNode):
                raise AssertionError(f"{rel}: its folder was made outside the disk layer")
            folder = self.folder_node(child)
        return folder, parts[-1]

    def folder(self, rel: str) -> FolderNode:
        if rel == ".":
            return self.folder_node(0)
        parent, name = self.parent(rel)
        node = parent.entries.get(name)
        if node is None:
            raise AssertionError(f"{rel}: a folder the disk layer never saw")
        return self.folder_node(node)

    @staticmethod
    def change(folder: FolderNode, number: int, name: str, node: int | None) -> None:
        """Entry `name` of `folder` now names `node` (None: deleted), by operation `number`, not yet durable."""
        if node is None:
            folder.entries.pop(name, None)
        else:
            folder.entries[name] = node
        folder.pending.append((number, name, node))

    # against the real folder

    def untracked(self) -> list[str]:
        """Files and folders under the root that the model does not hold, or holds with other sizes: written
        outside the disk layer (lock files excepted). Empty when every write went through it."""
        found: list[str] = []
        self._compare(self.root, self.folder_node(0), "", found)
        return found

    def _compare(self, folder: Path, model: FolderNode, prefix: str, found: list[str]) -> None:
        real = {e.name: e for e in os.scandir(folder)}
        for name in sorted(set(real) | set(model.entries)):
            rel = prefix + name
            if name in UNTRACKED:
                continue
            if name not in model.entries or name not in real:
                found.append(f"{rel}: {'made' if name in real else 'deleted'} outside the disk layer")
                continue
            child = self.nodes[model.entries[name]]
            if isinstance(child, FolderNode):
                if not real[name].is_dir(follow_symlinks=False):
                    found.append(f"{rel}: a folder in the model, not on disk")
                else:
                    self._compare(Path(real[name].path), child, rel + "/", found)
            elif not child.open_handles and real[name].stat(follow_symlinks=False).st_size != len(child.data):
                found.append(f"{rel}: written outside the disk layer ({real[name].stat().st_size} bytes, "
                             f"the model has {len(child.data)})")

    # after a power loss

    def image(self, pattern: str, rng: random.Random) -> Image:
        """The folder's files (bytes) and folders (None) after a power loss now, for one loss pattern."""
        changes = sorted({number for node in self.nodes.values() if isinstance(node, FolderNode) for number, _, _ in node.pending})
        if pattern in ("kill", "metadata"):
            kept = set(changes)
        elif pattern == "lost":
            kept = set()
        elif pattern == "ordered":
            kept = set(changes[: rng.randint(0, len(changes))])
        elif pattern == "torn":
            kept = {number for number in changes if rng.random() < 0.5}
        else:
            raise ValueError(f"unknown loss pattern {pattern!r}")
        out: Image = {}
        self._image(0, "", kept, pattern, rng, out)
        return out

    def _image(self, node: int, prefix: str, kept: set[int], pattern: str, rng: random.Random, out: Image) -> None:
        folder = self.folder_node(node)
        entries = dict(folder.durable)
        for number, name, target in folder.pending:
            if number in kept:
                if target is None:
                    entries.pop(name, None)
                else:
                    entries[name] = target
        for name, child in sorted(entries.items()):
            rel = prefix + name
            model = self.nodes[child]
            if isinstance(model, FolderNode):
                out[rel] = None
                self._image(child, rel + "/", kept, pattern, rng, out)
            else:
                out[rel] = _content(model, pattern, rng)


def _content(file: FileNode, pattern: str, rng: random.Random) -> bytes:
    """A file's bytes after the power loss."""
    current, synced = bytes(file.data), file.synced if file.synced is not None else b""
    if pattern == "kill" or current == synced:
        return current
    if pattern != "torn":
        return synced
    size = rng.choice([len(synced), len(current)])
    new = rng.randint(0, -(-len(current) // BLOCK))  # the first `new` blocks reached the device, the rest did not
    out = bytearray(size)
    for block in range(-(-size // BLOCK)):
        lo, hi = block * BLOCK, min(size, (block + 1) * BLOCK)
        piece = (current if block < new else synced)[lo:hi]
        out[lo:lo + len(piece)] = piece
    return bytes(out)


def capture(root: Path) -> Image:
    """A folder's files (bytes) and folders (None), by relative path."""
    out: Image = {}
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(folder, root)
        for name in dirs:
            out[os.path.normpath(os.path.join(rel, name))] = None
        for name in sorted(files):
            out[os.path.normpath(os.path.join(rel, name))] = Path(folder, name).read_bytes()
    return out


def materialize(root: Path, image: Image) -> None:
    """Make `root` hold exactly `image` (what a machine finds after it boots again)."""
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    for rel, data in sorted(image.items(), key=lambda item: item[0].count("/")):
        path = Path(root, rel)
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
