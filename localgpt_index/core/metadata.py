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
import os
from pathlib import Path

from .errors import UsageError
from .files import read_user_text

Rules = list[tuple[str, dict[str, str]]]


MAX_RULES_BYTES = 16 << 20
MAX_KEY, MAX_VALUE = 256, 4096


def load_rules(path: str | Path) -> Rules:
    path = Path(path)
    text = read_user_text(path, limit=MAX_RULES_BYTES, label=f"--metadata {path}")
    rules = _csv_rules(path, text) if path.suffix.lower() == ".csv" else _json_rules(path, text)
    for glob, values in rules:
        for key, value in values.items():
            if not key or len(key) > MAX_KEY or len(value) > MAX_VALUE:
                raise UsageError(f"--metadata {path}: rule {glob!r}: keys must be 1-{MAX_KEY} characters, values at most {MAX_VALUE}.")
    return rules


def _csv_rules(path: Path, text: str) -> Rules:
    try:
        rows = list(csv.DictReader(text.splitlines()))
    except csv.Error as exc:
        raise UsageError(f"--metadata {path}: not a readable CSV ({exc}).") from None
    if not rows or "glob" not in rows[0]:
        raise UsageError(f"--metadata {path}: a CSV needs a header with a 'glob' column.")
    return [(row.pop("glob") or "", {k: str(v) for k, v in row.items() if k and v not in (None, "")}) for row in rows]


def _json_rules(path: Path, text: str) -> Rules:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"--metadata {path}: not valid JSON ({' '.join(str(exc).split())[:120]}).") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UsageError(f'--metadata {path}: expected {{"glob": {{"key": "value"}}, ...}}.')
    if not all(isinstance(v, (str, int, float, bool)) for values in data.values() for v in values.values()):
        raise UsageError(f"--metadata {path}: values must be strings or numbers.")
    return [(glob, {str(k): str(v) for k, v in values.items()}) for glob, values in data.items()]


def metadata_for(path: str | Path, root: str | Path, rules: Rules) -> dict[str, str]:
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    name = os.path.basename(path)
    found: dict[str, str] = {}
    for glob, values in rules:
        if fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(name, glob):
            found.update(values)
    return found


def parse_filters(pairs: tuple[str, ...] | list[str], place: str | None = None) -> dict[str, str]:
    """`KEY=VALUE` pairs as a dict; one that is not is a UsageError naming it as the command line took it, or by
    `place` and its position (`filters[0]`: a server's request, whose value is not repeated back)."""
    filters = {}
    for number, pair in enumerate(pairs):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{place}[{number}]: expected KEY=VALUE, such as team=finance." if place
                             else f"--filter {pair}: expected KEY=VALUE.")
        filters[key] = value
    return filters


def matches(metadata: dict, filters: dict[str, str]) -> bool:
    return all(str(metadata.get(key)) == value for key, value in filters.items())
