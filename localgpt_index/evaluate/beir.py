"""BEIR's layout (the one ViDoRe and mteb publish): corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv.

A corpus row names a page of an indexed document in one of two ways:
- `path` and `page` fields (page 1-based), beside `_id`;
- an `_id` of the form PATH#PAGE (the last '#' splits it; PAGE 1-based).
Queries without qrels in the split are other splits' and are left out; a qrels row naming a query
or a corpus row that does not exist is an error, as is a malformed line anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..core.errors import UsageError
from .queryset import EvalQuery, Judgment, QuerySet, check_judgments, check_path, check_text, parse_line, read_lines, tags_of


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
