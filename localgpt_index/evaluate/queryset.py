"""Evaluation query sets: queries with graded relevant pages, read from lgpt-index's JSONL file (here) or
from a BEIR folder (beir.py); sets.py picks the reader. Every malformed line is a UsageError naming the
file, the line and the reason."""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from ..core.errors import UsageError
from ..core.files import read_user_text
from ..query.request import check_query_text

MAX_FILE_BYTES = 256 << 20  # a query set, or a BEIR corpus of page ids and text; larger is a mistake


@dataclass(frozen=True)
class Judgment:
    """A relevant page: its document's path as the query set names it, its 1-based page, its grade
    (0 judged not relevant, 1 or more relevant; nDCG's gain is the grade)."""

    path: str
    page: int
    grade: int
    where: str = field(default="", compare=False)  # the line that gave it, where it is not its query's (BEIR's qrels)


@dataclass(frozen=True)
class EvalQuery:
    id: str
    text: str
    relevant: tuple[Judgment, ...]
    where: str  # the file and line that gave it, for messages
    tags: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # the author's other keys (--group-by)


@dataclass(frozen=True)
class QuerySet:
    source: str
    format: Literal["jsonl", "beir"]
    queries: tuple[EvalQuery, ...]
    notes: tuple[str, ...] = field(default=())  # what was left out, and why (BEIR: queries with no relevant page)


class _Judged(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: StrictStr = Field(min_length=1)
    page: StrictInt = Field(ge=1)
    grade: StrictInt = Field(1, ge=0)


class _Line(BaseModel):
    """One line of the JSONL format; other keys (a category, a note) are the author's own: kept as tags
    (--group-by), never checked."""

    model_config = ConfigDict(extra="allow")
    id: StrictStr | StrictInt | None = None
    query: StrictStr
    relevant: list[_Judged] = Field(min_length=1)


def load_jsonl(source: Path, path: str) -> QuerySet:
    """lgpt-index's format: one JSON object a line (docs/eval.md)."""
    queries: list[EvalQuery] = []
    seen: dict[str, str] = {}
    for number, text in read_lines(source):
        where = f"{path} line {number}"
        line = parse_line(text, where, _Line)
        query = _query(line, where)
        if query.id in seen:
            raise UsageError(f"{where}: id {query.id!r} was already used ({seen[query.id]}).")
        seen[query.id] = where
        queries.append(query)
    if not queries:
        raise UsageError(f"{path}: no queries (an empty query set).",
                         hint='One JSON object a line: {"query": "...", "relevant": [{"path": "...", "page": 1, "grade": 1}]}.')
    return QuerySet(str(path), "jsonl", tuple(queries))


def _query(line: _Line, where: str) -> EvalQuery:
    query_id = str(line.id) if line.id is not None else where.rpartition(" ")[2]
    text = check_text(line.query, where)
    judgments = tuple(Judgment(check_path(j.path, where), j.page, j.grade) for j in line.relevant)
    check_judgments(judgments, where)
    return EvalQuery(query_id, text, judgments, where, tags_of(line.model_extra))


def tags_of(extra: dict | None) -> dict[str, str]:
    """The scalar extra keys of a line (strings, numbers, booleans) as text: what --group-by can group by."""
    return {key: str(value) for key, value in (extra or {}).items() if isinstance(value, (str, int, float, bool))}


def check_text(text: str, where: str) -> str:
    """The query of the line `where`, checked as every query is (query.request.check_query_text)."""
    return check_query_text(text, f"{where}: the query")


def check_path(path: str, where: str) -> str:
    """A document path as a query set may give it: absolute, or relative without `..` (matched against
    the end of the indexed paths, matching.py)."""
    if "\x00" in path:
        raise UsageError(f"{where}: path {path!r} holds a NUL byte.")
    if ".." in PurePosixPath(path.replace("\\", "/")).parts:
        raise UsageError(f"{where}: path {path!r} climbs with '..'.",
                         hint="Give the path absolute, or as it ends in the index (relative to the folder that was built).")
    return path


def check_judgments(judgments: tuple[Judgment, ...], where: str) -> None:
    """No page judged twice (as far as the spellings tell: matching.py also compares the documents they name),
    and something to find."""
    pages = [(normal_path(j.path), j.page) for j in judgments]
    twice = next((p for p in pages if pages.count(p) > 1), None)
    if twice:
        raise UsageError(f"{where}: page {twice[1]} of {twice[0]} is judged twice.")
    if not any(j.grade >= 1 for j in judgments):
        raise UsageError(f"{where}: no relevant page (every grade is 0): nothing to find.",
                         hint="Give at least one page a grade of 1 or more.")


def normal_path(path: str) -> str:
    """A judged path with `./`, doubled slashes and the platform's separators made one spelling."""
    return posixpath.normpath(path.replace(os.sep, "/")) if path else path


def parse_line(text: str, where: str, model: type[BaseModel]):
    """A JSON object validated by `model`; the first problem named with its place in the object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON ({exc.msg} at column {exc.colno}).") from None
    except ValueError:  # a number of more digits than Python converts (4,300)
        raise UsageError(f"{where}: a number with too many digits to read.") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a JSON object, found {type(data).__name__}.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        place = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
        raise UsageError(f"{where}: {place + ': ' if place else ''}{error['msg'].lower()}.") from None


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, blank lines left out. Lines end at a line feed (CR LF too)
    only: a JSON string may hold U+2028, U+0085 and the other line ends str.splitlines() splits at."""
    text = read_user_text(path, limit=MAX_FILE_BYTES, label=str(path))
    for number, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if line.strip():
            yield number, line
