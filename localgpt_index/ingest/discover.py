"""Find the documents under a folder: deterministic, no hidden or ignored files, no loops, no reading.

Discovery only lists folders and stats files; which files are read and hashed is the
planner's decision (a file whose stat matches the index's record is not read at all).
It records which folders it listed completely, so that a folder it could not list
never makes its documents look deleted. Paths its `.lgptignore` files ignore (ignore.py) are not
there for a build: a folder they ignore is neither entered nor counted as one it holds, so the
documents of an ignored file or folder leave the index.
"""

from __future__ import annotations

import fnmatch
import os
import stat as stat_mode
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Iterable

from ..core.errors import UsageError
from ..core.files import sha256_file
from ..core.filestat import FileStat
from ..core.types import Kind
from .ignore import IGNORE_FILE, Chain, IgnoreRules

PDF: Final = "pdf"
IMAGE: Final = "image"
OFFICE: Final = "office"
MARKDOWN: Final = "markdown"

KIND_BY_SUFFIX: dict[str, Kind] = {
    ".pdf": PDF,
    **{s: IMAGE for s in (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp")},
    **{
        s: OFFICE
        for s in (
            ".docx", ".doc", ".odt", ".rtf", ".dotx", ".dot", ".ott",  # word processing (and templates)
            ".pptx", ".ppt", ".odp", ".potx", ".pot", ".otp",  # presentations
            ".xlsx", ".xls", ".ods", ".xltx", ".xlt", ".ots", ".csv", ".tsv",  # spreadsheets
            ".html", ".htm", ".txt",
        )
    },
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
}

# Editor and OS droppings that are never documents.
JUNK_PATTERNS = ("~$*", ".~lock.*", "Thumbs.db", "desktop.ini", "*.tmp", "*~")
MAX_PATH_BYTES = 4000  # a longer path cannot be opened on most systems


@dataclass(frozen=True)
class FoundFile:
    """A supported file as discovery saw it (nothing read yet)."""

    path: str  # absolute, as found (symlinks not resolved; bytes that are not UTF-8 as surrogate escapes)
    kind: Kind
    stat: FileStat

    @property
    def size(self) -> int:
        return self.stat.size

    @property
    def suffix(self) -> str:
        return Path(self.path).suffix.lower()


@dataclass
class Discovery:
    root: str
    files: list[FoundFile]
    skipped: list[tuple[str, str]]  # (path, why): unsupported type, junk, outside the folder, not a file
    listed: frozenset[str]  # folders listed completely: a document missing from one is gone
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why): its documents are kept
    excluded: tuple[str, ...] = ()  # folders never entered (the index itself)
    # every folder a listing held, walked or not (a loop, the index, unreadable), except those ignored (gone to a build)
    folders: frozenset[str] = frozenset()


def file_stat(info: os.stat_result) -> FileStat:
    return FileStat(size=info.st_size, mtime_ns=info.st_mtime_ns, ino=info.st_ino, ctime_ns=info.st_ctime_ns)


def hash_files(files: Iterable[FoundFile], workers: int = 2) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """sha256 of each file (threads: hashlib releases the GIL); files that cannot be read are listed apart."""
    files = list(files)

    def one(found: FoundFile) -> tuple[str, str | None, str | None]:
        try:
            return found.path, sha256_file(found.path), None
        except OSError as exc:
            return found.path, None, f"cannot read: {exc.strerror or exc}"

    hashes: dict[str, str] = {}
    unreadable: list[tuple[str, str]] = []
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for path, digest, error in pool.map(one, files):
            if digest is None:
                unreadable.append((path, error or "cannot read"))
            else:
                hashes[path] = digest
    return hashes, unreadable


def is_junk(name: str) -> bool:
    return name.startswith(".") or any(fnmatch.fnmatch(name, p) for p in JUNK_PATTERNS)


def _matches_any(rel: str, patterns: tuple[str, ...]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


def selected(rel: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> bool:
    """Whether --include/--exclude let a path (relative to the folder, with '/') through."""
    return (not include or _matches_any(rel, include)) and not (exclude and _matches_any(rel, exclude))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _is_index(folder: str) -> bool:
    """An lgpt-index index (another --name of the same index folder, say), a Qdrant in-process
    folder (a qdrant+path store, its PDF store inside), or a Qdrant store's PDF store: never documents."""
    def has(name: str) -> bool:
        return os.path.isfile(os.path.join(folder, name))

    return ((has("HEAD") and os.path.isdir(os.path.join(folder, "segments")))
            or (has("meta.json") and has(".lock")) or has(".lgpt-pdf-store"))


def _inside(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


class _Walker:
    """One walk of a folder, iterative (a folder thousands of levels deep is no problem)."""

    def __init__(self, root: str, include: tuple[str, ...], exclude: tuple[str, ...], skip_dirs: tuple[str, ...]) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.include, self.exclude = include, exclude
        self.skip_ids = {_identity(d) for d in skip_dirs} - {None}
        self.ignore = IgnoreRules(root)
        self.result = Discovery(root, [], [], frozenset())
        self._listed: set[str] = set()
        self._folders: set[str] = set()
        self._seen_dirs: set[tuple[int, int]] = set()

    def walk(self) -> Discovery:
        stack: list[tuple[str, str, Chain]] = [(self.root, "", ())]  # a folder, relative to the root, the ignore files above it
        while stack:
            directory, rel, above = stack.pop()
            subdirs = self._list(directory, rel, above)
            stack.extend(reversed(subdirs))
        self.result.files.sort(key=lambda f: os.fsencode(f.path))
        self.result.listed = frozenset(self._listed)
        self.result.folders = frozenset(self._folders)
        self.result.skipped += self.ignore.problems
        return self.result

    def _list(self, directory: str, rel: str, above: Chain) -> list[tuple[str, str, Chain]]:
        identity = _identity(directory)  # (device, inode): a loop is seen without resolving paths
        if identity is not None:  # None: the folder cannot be stat'ed (its listing says why)
            if identity in self._seen_dirs:
                return []
            self._seen_dirs.add(identity)
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            self.result.unreadable.append((directory, f"cannot list folder: {exc.strerror or exc}"))
            return []
        chain = self.ignore.chain(rel, above, any(entry.name == IGNORE_FILE for entry in entries))
        subdirs = []
        for entry in entries:
            if is_junk(entry.name):
                continue
            entry_rel = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if self._entry(entry, entry_rel, chain):
                    subdirs.append((entry.path, entry_rel, chain))
            except OSError as exc:
                self.result.unreadable.append((entry.path, f"cannot read: {exc.strerror or exc}"))
        self._listed.add(directory)
        return subdirs

    def _entry(self, entry: os.DirEntry, rel: str, chain: Chain) -> bool:
        """Record one folder entry; True for a folder to walk."""
        path = entry.path
        is_link = entry.is_symlink()
        real = os.path.realpath(path) if is_link else None
        if real is not None and not _inside(real, self.real_root):
            self.result.skipped.append((path, "symlink to outside the folder"))
            return False
        is_dir = entry.is_dir()
        if chain and self.ignore.matches(rel, is_dir, chain):
            return False
        if is_dir:
            self._folders.add(path)
            if _identity(path) in self.skip_ids or _is_index(path):
                self.result.excluded += (path,)
                return False
            return True
        if len(os.fsencode(path)) > MAX_PATH_BYTES:
            self.result.skipped.append((path, f"path longer than {MAX_PATH_BYTES} bytes"))
            return False
        kind = KIND_BY_SUFFIX.get(os.path.splitext(entry.name)[1].lower())
        if not selected(rel, self.include, self.exclude):
            return False
        if kind is None:
            if entry.is_file():
                self.result.skipped.append((path, f"unsupported type {os.path.splitext(entry.name)[1] or '(no extension)'}"))
            return False
        try:
            info = os.stat(path)
        except FileNotFoundError:
            self.result.skipped.append((path, "broken symlink" if is_link else "vanished while listing"))
            return False
        if not stat_mode.S_ISREG(info.st_mode):
            what = {stat_mode.S_IFIFO: "a FIFO", stat_mode.S_IFSOCK: "a socket",
                    stat_mode.S_IFCHR: "a device", stat_mode.S_IFBLK: "a device"}
            self.result.skipped.append((path, f"not a regular file ({what.get(stat_mode.S_IFMT(info.st_mode), 'special')})"))
            return False
        self.result.files.append(FoundFile(path, kind, file_stat(info)))
        return False


def discover(
    root: Path | str,
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    skip_dirs: tuple[str | Path, ...] = (),
) -> Discovery:
    """Walk `root` and return the supported documents in byte order of their paths.

    Symlinks are followed only when their target lies inside `root`; a folder reached
    twice (a loop) is walked once; folders in `skip_dirs` (the index) are never entered.
    """
    root_text = os.path.abspath(os.fsdecode(root))
    if os.path.isfile(root_text):
        return _discover_file(root_text, tuple(include), tuple(exclude), tuple(os.fspath(d) for d in skip_dirs))
    if not os.path.isdir(root_text):
        raise UsageError(f"{root_text}: not a folder or a file.")
    return _Walker(root_text, tuple(include), tuple(exclude), tuple(os.fspath(d) for d in skip_dirs)).walk()


def _discover_file(path: str, include: tuple[str, ...], exclude: tuple[str, ...], skip_dirs: tuple[str, ...]) -> Discovery:
    """One file given as DOCS: its folder is the root, but no folder counts as listed, so the
    documents beside it are kept, never taken for deleted."""
    folder, name = os.path.split(path)
    real = os.path.realpath(path)
    if any(_inside(real, os.path.realpath(d)) for d in skip_dirs):
        raise UsageError(f"{path}: a file of the index itself, not a document.")
    kind = KIND_BY_SUFFIX.get(os.path.splitext(name)[1].lower())
    if kind is None:
        known = ", ".join(sorted(KIND_BY_SUFFIX))
        raise UsageError(f"{path}: unsupported type {os.path.splitext(name)[1] or '(no extension)'}.", hint=f"Supported: {known}.")
    result = Discovery(folder, [], [], frozenset())
    if is_junk(name):
        result.skipped.append((path, "a hidden or temporary file"))
        return result
    if IgnoreRules(folder).matches(name, False):
        result.skipped.append((path, f"ignored by {os.path.join(folder, IGNORE_FILE)}"))
        return result
    if not selected(name, include, exclude):
        return result
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        result.skipped.append((path, f"path longer than {MAX_PATH_BYTES} bytes"))
        return result
    try:
        info = os.stat(path)
    except OSError as exc:
        result.unreadable.append((path, f"cannot read: {exc.strerror or exc}"))
        return result
    result.files.append(FoundFile(path, kind, file_stat(info)))
    return result
