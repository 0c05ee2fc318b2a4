"""Metadata per document: rules from a file at build time, filters at query time.

A rules file maps path globs to key/value pairs, as JSON

    {"reports/**": {"team": "finance"}, "*.pptx": {"kind": "slides"}}

or as CSV with a `glob` column and one column per key

    glob,team,year
    reports/*,finance,2024

Globs match the path relative to the indexed folder (with `/`), or the file name.
Every matching rule applies, later rules overriding earlier ones for the same key.
"""

from __future__ import annotations

import csv
import fnmatch
import json
from pathlib import Path

from .errors import UsageError

Rules = list[tuple[str, dict[str, str]]]


def load_rules(path: str | Path) -> Rules:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--metadata {path}: {exc.strerror or exc}.") from exc
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if not rows or "glob" not in rows[0]:
            raise UsageError(f"--metadata {path}: a CSV needs a header with a 'glob' column.")
        return [(row.pop("glob"), {k: str(v) for k, v in row.items() if k and v not in (None, "")}) for row in rows]
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--metadata {path}: not valid JSON ({exc}).") from exc
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UsageError(f'--metadata {path}: expected {{"glob": {{"key": "value"}}, ...}}.')
    return [(glob, {str(k): str(v) for k, v in values.items()}) for glob, values in data.items()]


def metadata_for(path: Path, root: Path, rules: Rules) -> dict[str, str]:
    rel = path.relative_to(root).as_posix()
    found: dict[str, str] = {}
    for glob, values in rules:
        if fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(path.name, glob):
            found.update(values)
    return found


def parse_filters(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    filters = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--filter {pair}: expected KEY=VALUE.")
        filters[key] = value
    return filters


def matches(metadata: dict, filters: dict[str, str]) -> bool:
    return all(str(metadata.get(key)) == value for key, value in filters.items())
