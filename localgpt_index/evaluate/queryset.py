"""Evaluation query sets: queries with graded relevant pages, from lgpt-index's JSONL file or a BEIR folder.

load_query_set picks the reader. Every malformed line is a UsageError naming the file, the line and
the reason.

BEIR's layout (the one ViDoRe and mteb publish) is corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv. A
corpus row names a page of an indexed document in one of two ways:
- `path` and `page` fields (page 1-based), beside `_id`;
- an `_id` of the form PATH#PAGE (the last '#' splits it; PAGE 1-based).
Queries without qrels in the split are other splits' and are left out; a qrels row naming a query
or a corpus row that does not exist is an error, as is a malformed line anywhere.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
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


# BEIR folders

_DIGITS = re.compile(r"[0-9]{1,9}")  # ASCII only: str.isdigit() and int() take other scripts' digits, and "_"
_WHOLE = re.compile(r"[+-]?[0-9]{1,9}")


class _CorpusRow(BaseModel):
    model_config = ConfigDict(extra="ignore")  # title, text, image: not read
    id: StrictStr | StrictInt = Field(alias="_id")
    path: StrictStr | None = Field(None, min_length=1)
    page: StrictInt | None = Field(None, ge=1)


class _QueryRow(BaseModel):
    model_config = ConfigDict(extra="allow")  # kept as tags (--group-by)
    id: StrictStr | StrictInt = Field(alias="_id")
    text: StrictStr


def load_beir(folder: Path, split: str = "test") -> QuerySet:
    qrels_file = folder / "qrels" / f"{split}.tsv"
    missing = [name for name in ("corpus.jsonl", "queries.jsonl") if not (folder / name).is_file()]
    if not qrels_file.is_file():
        missing.append(f"qrels/{split}.tsv")
    if missing:
        splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise UsageError(f"{folder}: not a BEIR folder: no {', '.join(missing)}."
                         + (f" Its qrels splits: {', '.join(splits)}." if splits else ""),
                         hint="A BEIR folder holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv (--split, default test).")
    pages = _corpus(folder / "corpus.jsonl")
    texts = _queries(folder / "queries.jsonl")
    judged: dict[str, list[tuple[Judgment, str]]] = {}
    for number, line in read_lines(qrels_file):
        where = f"{qrels_file} line {number}"
        fields = line.rstrip("\r\n").split("\t")
        if number == 1 and fields[0].strip().lower() in ("query-id", "query_id", "qid"):
            continue  # the header
        query_id, corpus_id, grade = _qrel(fields, where)
        if query_id not in texts:
            raise UsageError(f"{where}: query {query_id!r} is not in queries.jsonl.")
        if corpus_id not in pages:
            raise UsageError(f"{where}: corpus id {corpus_id!r} is not in corpus.jsonl.")
        path, page = pages[corpus_id]
        judged.setdefault(query_id, []).append((Judgment(path, page, grade, where), where))
    return _query_set(folder, qrels_file, texts, judged)


def _query_set(folder: Path, qrels_file: Path, texts: dict[str, tuple[str, str, dict[str, str]]],
               judged: dict[str, list[tuple[Judgment, str]]]) -> QuerySet:
    queries, unjudged = [], []
    for query_id, (text, where, tags) in texts.items():
        if query_id not in judged:
            continue  # another split's
        judgments = tuple(j for j, _ in judged[query_id])
        if not any(j.grade >= 1 for j in judgments):
            unjudged.append(query_id)
            continue
        check_judgments(judgments, f"{qrels_file} (query {query_id!r}, {judged[query_id][0][1]})")
        queries.append(EvalQuery(query_id, text, judgments, where, tags))
    if not queries:
        raise UsageError(f"{qrels_file}: no query with a relevant page (an empty query set).")
    notes = (f"{len(unjudged)} queries of {qrels_file.name} have no page graded 1 or more and are left out "
             f"(first: {unjudged[0]!r}).",) if unjudged else ()
    return QuerySet(str(folder), "beir", tuple(queries), notes)


def _qrel(fields: list[str], where: str) -> tuple[str, str, int]:
    if len(fields) != 3:
        raise UsageError(f"{where}: expected 3 tab-separated fields (query-id, corpus-id, score), found {len(fields)}.")
    query_id, corpus_id, score = (f.strip() for f in fields)
    if not _WHOLE.fullmatch(score):  # int() would also read "1_0" as 10, and digits of other scripts
        raise UsageError(f"{where}: score {score!r} is not a whole number (ASCII digits, at most 9).")
    grade = int(score)
    if grade < 0:
        raise UsageError(f"{where}: score {grade} is negative; grades are 0 (not relevant) or more.")
    return query_id, corpus_id, grade


def _corpus(path: Path) -> dict[str, tuple[str, int]]:
    pages: dict[str, tuple[str, int]] = {}
    for number, line in read_lines(path):
        where = f"{path} line {number}"
        row = parse_line(line, where, _CorpusRow)
        corpus_id = str(row.id)
        if row.path is not None and row.page is not None:
            page = (row.path, row.page)
        elif row.path is not None or row.page is not None:
            raise UsageError(f"{where}: `path` and `page` go together (or give an _id of the form PATH#PAGE).")
        else:
            page = _page_id(corpus_id, where)
        if corpus_id in pages:
            raise UsageError(f"{where}: corpus id {corpus_id!r} appears twice.")
        pages[corpus_id] = (check_path(page[0], where), page[1])
    return pages


def _page_id(corpus_id: str, where: str) -> tuple[str, int]:
    path, _, page = corpus_id.rpartition("#")
    if not path or not _DIGITS.fullmatch(page) or int(page) < 1:  # isdigit() is true of "²", which int() refuses
        raise UsageError(f"{where}: corpus id {corpus_id!r} names no page: give `path` and `page` fields, "
                         "or an _id of the form PATH#PAGE (page 1-based).")
    return path, int(page)


def _queries(path: Path) -> dict[str, tuple[str, str, dict[str, str]]]:
    texts: dict[str, tuple[str, str, dict[str, str]]] = {}
    for number, line in read_lines(path):
        where = f"{path} line {number}"
        row = parse_line(line, where, _QueryRow)
        query_id = str(row.id)
        if query_id in texts:
            raise UsageError(f"{where}: query id {query_id!r} appears twice.")
        texts[query_id] = (check_text(row.text, where), where, tags_of(row.model_extra))
    return texts


def load_query_set(path: str | Path, split: str = "test") -> QuerySet:
    """A JSONL query file, or a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv)."""
    source = Path(path)
    if source.is_dir():
        return load_beir(source, split)
    if not source.is_file():
        raise UsageError(f"{path}: no such file or folder.",
                         hint="Give a JSONL query file, or a BEIR folder (corpus.jsonl, queries.jsonl, qrels/).")
    return load_jsonl(source, str(path))
