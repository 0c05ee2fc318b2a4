"""Find the documents under a folder: deterministic, no hidden files, no loops."""

from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

PDF = "pdf"
IMAGE = "image"
OFFICE = "office"
MARKDOWN = "markdown"

KIND_BY_SUFFIX: dict[str, str] = {
    ".pdf": PDF,
    **{s: IMAGE for s in (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp")},
    **{
        s: OFFICE
        for s in (
            ".docx", ".doc", ".odt", ".rtf",  # word processing
            ".pptx", ".ppt", ".odp",  # presentations
            ".xlsx", ".xls", ".ods",  # spreadsheets
            ".html", ".htm", ".txt",
        )
    },
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
}

# Editor and OS droppings that are never documents.
JUNK_PATTERNS = ("~$*", ".~lock.*", "Thumbs.db", "desktop.ini", "*.tmp", "*~")


@dataclass(frozen=True)
class SourceFile:
    path: Path  # absolute, as found (symlinks not resolved)
    kind: str
    size: int
    mtime: float
    sha256: str

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()


@dataclass
class Discovery:
    root: Path
    files: list[SourceFile]
    skipped: list[tuple[Path, str]]  # (path, why): unsupported type, junk, outside the folder


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _is_junk(name: str) -> bool:
    return name.startswith(".") or any(fnmatch.fnmatch(name, p) for p in JUNK_PATTERNS)


def _matches(rel: str, patterns: tuple[str, ...]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


def discover(
    root: Path,
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
) -> Discovery:
    """Walk `root` recursively and return the supported documents in byte order of their paths.

    Symlinks are followed only when their target lies inside `root`; a directory
    reached twice (a loop) is walked once.
    """
    root = Path(os.path.abspath(root))
    real_root = os.path.realpath(root)
    files: list[SourceFile] = []
    skipped: list[tuple[Path, str]] = []
    seen_dirs: set[str] = set()

    def inside(real: str) -> bool:
        return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)

    def walk(directory: Path) -> None:
        real_dir = os.path.realpath(directory)
        if real_dir in seen_dirs:
            return
        seen_dirs.add(real_dir)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            skipped.append((directory, f"cannot list folder: {exc.strerror or exc}"))
            return
        for entry in entries:
            path = Path(entry.path)
            if _is_junk(entry.name):
                continue
            try:
                is_link = entry.is_symlink()
                if is_link and not inside(os.path.realpath(path)):
                    skipped.append((path, "symlink to outside the folder"))
                    continue
                if entry.is_dir():
                    walk(path)
                    continue
                if not entry.is_file():
                    if is_link:
                        skipped.append((path, "broken symlink"))
                    continue
            except OSError as exc:
                skipped.append((path, f"cannot read: {exc.strerror or exc}"))
                continue
            rel = os.fsencode(path.relative_to(root)).decode("utf-8", "replace")
            if include and not _matches(rel, include):
                continue
            if exclude and _matches(rel, exclude):
                continue
            kind = KIND_BY_SUFFIX.get(path.suffix.lower())
            if kind is None:
                skipped.append((path, f"unsupported type {path.suffix or '(no extension)'}"))
                continue
            try:
                stat = path.stat()
                digest = sha256_file(path)
            except OSError as exc:
                skipped.append((path, f"cannot read: {exc.strerror or exc}"))
                continue
            files.append(SourceFile(path, kind, stat.st_size, stat.st_mtime, digest))

    if not root.is_dir():
        from .errors import UsageError

        raise UsageError(f"{root}: not a folder.")
    walk(root)
    return Discovery(root, files, skipped)
