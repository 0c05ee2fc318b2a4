"""Which indexed page a judgment names.

The index records documents by absolute path; a query set names
them absolute (compared as they are) or relative: a relative path names the one indexed document whose
path ends with it, whole components compared (`invoices/a.pdf` names /home/me/docs/invoices/a.pdf).
Two indexed documents ending alike make the set ambiguous (an error); a page the index does not hold
stays in the judgments, unanswerable: it counts as a miss, as it would for any retriever. Byte-identical
documents (copies) share their page ids: a hit on any copy answers a judgment naming another."""

from __future__ import annotations

import posixpath
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from ..core.errors import UsageError
from ..index.format.manifest import Document
from .queryset import EvalQuery, Judgment, normal_path
from .results import Unanswerable


@dataclass(frozen=True)
class Judged:
    """The judgments as the evaluator takes them: per query, page id -> grade; and the page ids' pages."""

    qrels: dict[str, dict[str, int]]
    pages: dict[str, tuple[str, int]]  # page id -> (indexed path, page)
    unanswerable: tuple[Unanswerable, ...]


def page_id(number: int, page: int) -> str:
    """The evaluator's id of page `page` of the index's document `number` (ASCII whatever the path holds)."""
    return f"d{number}p{page}"


def content_numbers(documents: Sequence[Document]) -> list[int]:
    """Each document's number as the evaluator names its pages: the first document with the same bytes
    (content hash), so that a judgment of a page and a hit on any copy of it name one page id."""
    first: dict[str, int] = {}
    return [first.setdefault(doc.sha256, number) for number, doc in enumerate(documents)]


class PathFinder:
    """The indexed documents by path, and by their last path component for relative names."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self.numbers = {normal_path(doc.path): number for number, doc in enumerate(documents)}
        self.contents = {normal_path(doc.path): doc.sha256 for doc in documents}
        self.by_name: dict[str, list[str]] = defaultdict(list)
        for path in self.numbers:
            self.by_name[posixpath.basename(path)].append(path)

    def find(self, path: str, where: str) -> int | None:
        """The number of the document `path` names; None when the index has none."""
        wanted = normal_path(path)
        if posixpath.isabs(wanted):
            return self.numbers.get(wanted)
        found = [p for p in self.by_name.get(posixpath.basename(wanted), []) if p == wanted or p.endswith("/" + wanted)]
        if len({self.contents[p] for p in found}) > 1:  # copies (the same bytes) name one page id: not ambiguous
            shown = ", ".join(found[:3]) + (" ..." if len(found) > 3 else "")
            raise UsageError(f"{where}: {path} names {len(found)} documents of the index ({shown}).",
                             hint="Give more of its path, or the absolute path.")
        return self.numbers[found[0]] if found else None


def judge(queries: Sequence[EvalQuery], documents: Sequence[Document]) -> Judged:
    """The judgments of `queries` on the index's pages."""
    finder = PathFinder(documents)
    content = content_numbers(documents)
    qrels: dict[str, dict[str, int]] = {}
    pages: dict[str, tuple[str, int]] = {}
    unanswerable: list[Unanswerable] = []
    for query in queries:
        grades: dict[str, int] = {}
        named: dict[tuple[int, int], Judgment] = {}  # (document, page) -> the judgment that named it first
        for judgment in query.relevant:
            number = finder.find(judgment.path, query.where)
            if number is not None:
                _once(named, (number, judgment.page), judgment, query, documents[number].path)
            reason = _why_not(judgment, documents[number] if number is not None else None)
            if reason:
                unanswerable.append(Unanswerable(query_id=query.id, path=judgment.path, page=judgment.page, grade=judgment.grade,
                                                 reason=reason))
                grades[f"missing{len(unanswerable)}"] = judgment.grade  # judged, never retrieved
                continue
            assert number is not None
            ident = page_id(content[number], judgment.page)
            grades[ident] = max(grades.get(ident, judgment.grade), judgment.grade)  # two copies judged: the higher grade
            pages[ident] = (documents[number].path, judgment.page)
        qrels[query.id] = grades
    return Judged(qrels, pages, tuple(unanswerable))


def _once(named: dict[tuple[int, int], Judgment], key: tuple[int, int], judgment: Judgment, query: EvalQuery, path: str) -> None:
    """A page judged under two spellings (relative, absolute, `./`) is refused, as one judged twice alike:
    which grade counted would depend on the order of the lines."""
    first = named.setdefault(key, judgment)
    if first is not judgment:
        raise UsageError(f"{query.where}: page {key[1]} of {path} is judged twice, as {_spelt(first)} and {_spelt(judgment)}.",
                         hint="Judge each page once.")


def _spelt(judgment: Judgment) -> str:
    return repr(judgment.path) + (f" ({judgment.where})" if judgment.where else "")


def _why_not(judgment: Judgment, doc: Document | None) -> str | None:
    if doc is None:
        return "not in the index"
    if judgment.page > doc.pages:
        return f"the index holds {doc.pages} page(s) of it"
    return None
