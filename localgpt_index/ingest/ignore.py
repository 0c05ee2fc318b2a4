"""Which paths of an indexed tree `.lgptignore` files leave out: gitignore's syntax and rules (pathspec).

A `.lgptignore` applies to its folder and everything below it, its patterns relative to that folder;
a deeper file's match (a negation `!` included) overrides a shallower one, as in git, and a file
inside an ignored folder cannot be brought back (the folder is never entered).
"""

from __future__ import annotations

import os
import re

from pathspec import GitIgnoreSpec
from pathspec.patterns.gitignore import GitIgnorePatternError

from ..core.errors import LgptError, UsageError

IGNORE_FILE = ".lgptignore"

_SPECIAL = re.compile(r"([\\*?\[\]!#])")

# The ignore files that apply in a folder, from the root down: (their folder relative to the root, their rules)
Chain = tuple[tuple[str, GitIgnoreSpec], ...]


class IgnoreRules:
    """The `.lgptignore` files under `root`, each read once (`fresh`: read again whenever it changed, for a
    watcher that lives across edits of them). Paths are relative to `root`, with '/'."""

    def __init__(self, root: str, fresh: bool = False) -> None:
        self.root = root
        self.fresh = fresh
        self.problems: list[tuple[str, str]] = []  # (ignore file, why) for files or lines that could not be used
        self._specs: dict[str, tuple[tuple[int, int, int] | None, GitIgnoreSpec | None]] = {}

    def _spec(self, folder: str) -> GitIgnoreSpec | None:
        """The rules of `folder`'s ignore file (relative to root; '' is root), None where it has none."""
        path = os.path.join(self.root, folder, IGNORE_FILE)
        cached = self._specs.get(folder)
        if cached is not None and not self.fresh:
            return cached[1]
        try:
            info = os.stat(path)
            key: tuple[int, int, int] | None = (info.st_ino, info.st_size, info.st_mtime_ns)
        except OSError:
            key = None
        if cached is not None and cached[0] == key:
            return cached[1]
        spec = self._read(path) if key is not None else None
        self._specs[folder] = (key, spec)
        return spec

    def _read(self, path: str) -> GitIgnoreSpec | None:
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                lines = handle.read().splitlines()
        except OSError as exc:
            self.problems.append((path, f"cannot read: {exc.strerror or exc}"))
            return None
        try:
            return GitIgnoreSpec.from_lines(lines)
        except GitIgnorePatternError:  # keep the good lines, name the bad ones
            good = []
            for number, line in enumerate(lines, 1):
                try:
                    GitIgnoreSpec.from_lines([line])
                    good.append(line)
                except GitIgnorePatternError:
                    self.problems.append((path, f"line {number}: not a valid pattern: {line!r}"))
            return GitIgnoreSpec.from_lines(good)

    def chain(self, folder: str, above: Chain = (), present: bool = True) -> Chain:
        """The ignore files that apply in `folder` (relative to root): those of the folder above, `above`,
        and its own (`present`: whether its listing holds one; a walk knows, and spares the look)."""
        spec = self._spec(folder) if present else None
        return above + ((folder, spec),) if spec is not None else above

    def matches(self, rel: str, is_dir: bool, chain: Chain | None = None) -> bool:
        """Whether the ignore files of the folders above `rel` (`chain`, if the caller has it) ignore it, the
        deepest that has a say deciding (its folders themselves not checked: a walk never enters an ignored one)."""
        if chain is None:
            parts = rel.split("/")
            chain = ()
            for depth in range(len(parts)):
                chain = self.chain("/".join(parts[:depth]), chain)
        ignored = False
        for folder, spec in chain:
            below = (rel[len(folder) + 1:] if folder else rel) + ("/" if is_dir else "")
            result = spec.check_file(below).include
            if result is not None:
                ignored = result
        return ignored

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether `rel` or a folder above it is ignored."""
        parts = rel.split("/")
        return any(self.matches("/".join(parts[:n]), True) for n in range(1, len(parts))) or self.matches(rel, is_dir)


def ignore_line(rel: str, is_dir: bool) -> str:
    """The pattern that ignores exactly `rel` (relative to the ignore file's folder, with '/'), nothing else."""
    if "\n" in rel or "\r" in rel:
        raise UsageError(f"{rel!r}: a name with a line break cannot be written in an ignore file.")
    escaped = _SPECIAL.sub(r"\\\1", rel)
    stripped = escaped.rstrip(" ")
    escaped = stripped + "\\ " * (len(escaped) - len(stripped))  # trailing spaces are dropped unless escaped
    return "/" + escaped + ("/" if is_dir else "")


def add_ignored(root: str, rel: str, is_dir: bool) -> str:
    """Append the pattern for `rel` to `root`'s ignore file (created if missing); the file's path."""
    path = os.path.join(root, IGNORE_FILE)
    line = ignore_line(rel, is_dir)
    try:
        try:
            with open(path, "rb") as handle:
                text = handle.read()
        except FileNotFoundError:
            text = b""
        if line not in text.decode("utf-8", "surrogateescape").splitlines():
            with open(path, "ab") as handle:
                separator = b"" if not text or text.endswith(b"\n") else b"\n"
                handle.write(separator + line.encode("utf-8", "surrogateescape") + b"\n")
    except OSError as exc:
        raise LgptError(f"{path}: cannot add {line}: {exc.strerror or exc}.") from None
    return path
