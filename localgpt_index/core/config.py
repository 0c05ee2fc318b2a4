"""Finding the index and the project's config file as git finds `.git`: here, then up the parent folders.

The walk stops below `$HOME` (a folder inside it never reaches the home folder's own) and at a file
system boundary, as git does. The config file is `lgpt-index.toml`, or `[tool.lgpt-index]` in a
`pyproject.toml`; the nearest one holding settings wins.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError
from .files import read_user_text

INDEX_FOLDER = ".lgpt-index"
CONFIG_FILE = "lgpt-index.toml"
PYPROJECT = "pyproject.toml"
PYPROJECT_TABLE = "lgpt-index"  # [tool.lgpt-index]
CONFIG_LIMIT = 1 << 20


def upward(start: Path | None = None) -> Iterator[Path]:
    """`start` (default: the current folder) and its parents, as far as the walk goes: not into or above
    `$HOME` from a folder under it, and not across a file system boundary."""
    here = Path(start if start is not None else os.getcwd()).absolute()
    home = Path(os.environ["HOME"]).absolute() if os.environ.get("HOME") else None
    try:
        device = here.stat().st_dev
    except OSError:
        return
    for folder in (here, *here.parents):
        if folder == home and folder != here:  # from below $HOME: not the home folder's own
            return
        try:
            if folder.stat().st_dev != device:
                return
        except OSError:
            return
        yield folder
        if folder == home:
            return


def find_index_dir(start: Path | None = None) -> Path | None:
    """The nearest `.lgpt-index` folder, here or in a parent; None when the walk finds none."""
    return next((folder / INDEX_FOLDER for folder in upward(start) if (folder / INDEX_FOLDER).is_dir()), None)


@dataclass(frozen=True)
class ProjectConfig:
    """The settings of a config file: top-level keys, and one table per command (`[query]`)."""

    path: Path | None = None  # None: no config file was found
    settings: dict[str, Any] = field(default_factory=dict)
    commands: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """What relative paths in the file are relative to."""
        return self.path.parent if self.path is not None else Path.cwd()


def find_config(start: Path | None = None) -> ProjectConfig:
    """The nearest config file's settings (an empty ProjectConfig without one)."""
    for folder in upward(start):
        own = folder / CONFIG_FILE
        if own.is_file():
            return _split(own, _read(own))
        pyproject = folder / PYPROJECT
        if pyproject.is_file():
            table = _read(pyproject).get("tool", {}).get(PYPROJECT_TABLE)
            if table is not None:
                if not isinstance(table, dict):
                    raise UsageError(f"{pyproject}: [tool.{PYPROJECT_TABLE}] must be a table.")
                return _split(pyproject, table)
    return ProjectConfig()


def _read(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):  # (imported here: a run without a config file parses none)
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    text = read_user_text(path, limit=CONFIG_LIMIT, label=str(path))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}.") from None


def _split(path: Path, table: dict[str, Any]) -> ProjectConfig:
    """Top-level values apart from the command tables (a table is a command's)."""
    settings = {key: value for key, value in table.items() if not isinstance(value, dict)}
    commands = {key: value for key, value in table.items() if isinstance(value, dict)}
    return ProjectConfig(path, settings, commands)
