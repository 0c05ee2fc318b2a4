"""The full-text engine: an SQLite FTS5 index of page tokens, scored with the one BM25 of both stores.

One SQLite file per generation (a per-generation artifact: a writer copies the base generation's
file and applies only the changed documents' rows; readers open it read-only). Tables:

    meta(key, value)                  tokenizer and format versions, the languages it was told
    pages(id, path, page, length, language, text)   one row per page: its text (snippets,
                                      `--with-text`), its token count (|d| of BM25) and the language
                                      its words were stemmed in (None: none); the path as bytes (a
                                      file name that is not UTF-8 is kept as its surrogate escapes are)
    terms(exact, stems)               contentless FTS5 over the page's exact tokens, in order (phrases
                                      match them), and its stems, each space-joined (tokenize='ascii':
                                      our tokens hold no ASCII separator and no capital, so FTS5 keeps
                                      them verbatim); detail=full keeps term frequencies and positions;
                                      a page leaves it by FTS5's 'delete' with the tokens of its stored
                                      text (no contentless-delete in 3.40)
    term_rows, term_hits, term_cols   fts5vocab views: pages holding a term, its occurrences, and by column

Why FTS5 and our own BM25 over its postings (docs/dev/lexical.md has the measurements): FTS5
applies a delete to its statistics at once, so the statistics a query sees are those of the live
pages only; tantivy's document frequencies count deleted documents until a merge that its Python
binding cannot ask for. Scoring ourselves keeps one BM25 for this engine and the Qdrant sparse
vectors (FTS5's own bm25() uses another idf): Robertson/Sparck Jones, the Lucene form,

    score(q, d) = sum over distinct query tokens t present in d of  idf(t) * tf_weight(tf, |d|)
    idf(t)      = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))            (never negative; Qdrant's IDF modifier)
    tf_weight   = tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))

N is the number of live pages, n_t how many of them hold t, |d| a page's token count and avgdl the
mean over live pages: pages of removed or replaced documents are not counted (the engine keeps
these statistics exact under deletion). tf_weight is what a Qdrant sparse vector stores per token;
idf is what its IDF modifier applies at query time.
"""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from .language import detect
from .lexicon import PageLexicon, page_lexicon
from .query import TextQuery, parse
from .tokenize import TOKENIZER_VERSION, Analysed, analyse

ENGINE_VERSION: Final = 2
VOCABULARY: Final = 200_000  # the indexed words a miss's suggestions are looked for among (bounded work)
LANGUAGES_KEPT: Final = 65_536  # documents' languages a reader keeps (a bounded cache)
LEXICONS_KEPT: Final = 1024  # pages' lexicons a reader keeps (about 0.1 MB each for a page of prose: 3,500 characters)
LEXICON_CHARS_KEPT: Final = 4_000_000  # and their texts' characters at most (a lexicon takes about 25 bytes a character)
HOLDING_KEPT: Final = 65_536  # tokens whose page counts a reader keeps (idf)
PREFIX_TERMS: Final = 64  # a prefix (turb*) stands for at most this many indexed words, the most frequent

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE pages(id INTEGER PRIMARY KEY, path BLOB NOT NULL, page INTEGER NOT NULL, length INTEGER NOT NULL, language TEXT,
                   text TEXT NOT NULL);
CREATE INDEX pages_by_path ON pages(path);
CREATE VIRTUAL TABLE terms USING fts5(exact, stems, content='', tokenize='ascii', detail=full);
CREATE VIRTUAL TABLE term_rows USING fts5vocab(terms, 'row');
CREATE VIRTUAL TABLE term_hits USING fts5vocab(terms, 'instance');
CREATE VIRTUAL TABLE term_cols USING fts5vocab(terms, 'col');
"""


@dataclass(frozen=True)
class BM25:
    k1: float = 1.2
    b: float = 0.75

    @staticmethod
    def idf(pages: int, holding: int | np.ndarray) -> float | np.ndarray:
        """ln(1 + (N - n + 0.5) / (n + 0.5))"""
        return np.log1p((pages - np.asarray(holding, dtype=np.float64) + 0.5) / (np.asarray(holding, dtype=np.float64) + 0.5))

    def tf_weight(self, tf: np.ndarray | float, length: np.ndarray | float, avgdl: float) -> np.ndarray:
        """The saturated, length-normalised term frequency."""
        tf = np.asarray(tf, dtype=np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * np.asarray(length, dtype=np.float64) / max(avgdl, 1e-9))
        return tf * (self.k1 + 1.0) / (tf + norm)


WEIGHTING = BM25()


@dataclass(frozen=True)
class LexicalPage:
    """One page's text, as the engine takes it."""

    path: str
    page: int
    text: str


@dataclass(frozen=True)
class TextHit:
    path: str
    page: int
    score: float


@dataclass(frozen=True)
class _Table:
    """The pages, by row id (ascending), as arrays: loaded once per open."""

    ids: np.ndarray
    lengths: np.ndarray
    paths: list[str]
    pages: np.ndarray
    languages: tuple[str, ...]  # those its pages were stemmed in


@dataclass(frozen=True)
class Miss:
    """Why a query may find nothing: its words no page holds, and the nearest indexed words to each."""

    unknown: list[str]
    suggestions: dict[str, list[str]]


class LexicalError(Exception):
    """The engine's file is not one this version can read (another tokenizer or format, damage)."""


class LexicalIndex:
    """One generation's full-text index; read-only unless opened `writable` (by a writer, on a copy)."""

    def __init__(self, db: sqlite3.Connection, where: str, weighting: BM25 = WEIGHTING) -> None:
        self._db = db
        self.where = where
        self.weighting = weighting
        try:
            meta = dict(db.execute("SELECT key, value FROM meta"))
        except sqlite3.DatabaseError as exc:
            db.close()
            raise LexicalError(f"{where}: not a readable text index ({exc}).") from None
        versions = {key: meta.get(key) for key in ("engine", "tokenizer")}
        wanted = {"engine": str(ENGINE_VERSION), "tokenizer": str(TOKENIZER_VERSION)}
        if versions != wanted:
            db.close()
            raise LexicalError(f"{where}: text index of another version ({versions}, this one reads {wanted}).")
        # the languages it was told (none: each page's detected among every Snowball language)
        self.told: tuple[str, ...] = tuple(filter(None, meta.get("languages", "").split(",")))
        self._rows: _Table | None = None
        self._languages: dict[str, str | None] = {}  # a document's, once asked (regions ask it for every hit)
        self._lexicons: OrderedDict[tuple[str, int], PageLexicon] = OrderedDict()  # the pages met last (page_lexicon)
        self._kept_chars = 0  # their texts' characters
        self._updates = 0  # update() calls (a writer's copy): a lexicon made before the last one is not kept
        self._holding_pages: dict[str, int] = {}  # the pages holding a token, once asked (idf; a query's search tells them)
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path, writable: bool = False) -> LexicalIndex:
        """A file, read-only unless `writable` (a writer's copy)."""
        # one connection, used under a lock: the server answers from several threads
        try:
            db = sqlite3.connect(f"file:{path}?mode={'rw' if writable else 'ro'}", uri=True, isolation_level=None,
                                 check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise LexicalError(f"{path}: not a readable text index ({exc}).") from None
        return cls(db, str(path))

    @classmethod
    def create(cls, path: Path | str = ":memory:", languages: Collection[str] = ()) -> LexicalIndex:
        """A new, empty index: in a file, or in memory (a writer serialises it with to_bytes); its pages
        stemmed in `languages` (one: every page; several: each page's detected among them; none: among all)."""
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.executescript(_SCHEMA)
        db.executemany("INSERT INTO meta VALUES (?, ?)", [("engine", str(ENGINE_VERSION)), ("tokenizer", str(TOKENIZER_VERSION)),
                                                         ("languages", ",".join(sorted(languages)))])
        return cls(db, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "text index") -> LexicalIndex:
        """An index held in memory from its serialised bytes (what a generation stores)."""
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        try:
            _deserialize(db, data)
        except sqlite3.DatabaseError as exc:
            db.close()
            raise LexicalError(f"{where}: not a readable text index ({exc}).") from None
        return cls(db, where)

    def to_bytes(self) -> bytes:
        """The whole index as one SQLite database image (VACUUMed: no free pages travel)."""
        self._db.execute("VACUUM")
        return _serialize(self._db)

    def problems(self) -> list[str]:
        """What SQLite's and FTS5's own integrity checks find (verify)."""
        found = []
        try:
            found += [row[0] for row in self._db.execute("PRAGMA integrity_check") if row[0] != "ok"]
            self._db.execute("INSERT INTO terms(terms) VALUES ('integrity-check')")
            total = self._db.execute("SELECT count(*) FROM pages").fetchone()[0]
            lengths = sum(len(analyse(text, language).tokens) != length
                          for text, length, language in self._db.execute("SELECT text, length, language FROM pages"))
            if lengths:
                found.append(f"{lengths} of {total} pages' token counts do not match their text")
        except sqlite3.DatabaseError as exc:
            found.append(str(exc))
        return [f"{self.where}: {problem}" for problem in found]

    def close(self) -> None:
        self._db.close()

    # -- writing (a writer's copy only) ------------------------------------------------------------

    def update(self, removed: Iterable[str], added: Iterable[LexicalPage]) -> None:
        """Drop every page of the `removed` documents, then index the `added` pages, in one SQLite
        transaction; the other documents' rows are not touched."""
        db = self._db
        db.execute("BEGIN")
        try:
            for path in removed:
                gone = db.execute("SELECT id, text, language FROM pages WHERE path = ?", (_key(path),)).fetchall()
                db.executemany("INSERT INTO terms(terms, rowid, exact, stems) VALUES ('delete', ?, ?, ?)",
                               [(row, *_columns(analyse(text, language))) for row, text, language in gone])
                db.execute("DELETE FROM pages WHERE path = ?", (_key(path),))
            for document in _documents(added):
                texts = [page.text.encode("utf-8", "replace").decode("utf-8") for page in document]  # no lone surrogate reaches SQLite
                language = detect(texts, self.told)
                for page, text in zip(document, texts):
                    analysed = analyse(text, language)
                    row = db.execute("INSERT INTO pages(path, page, length, language, text) VALUES (?, ?, ?, ?, ?)",
                                     (_key(page.path), page.page, len(analysed.tokens), language, text)).lastrowid
                    db.execute("INSERT INTO terms(rowid, exact, stems) VALUES (?, ?, ?)", (row, *_columns(analysed)))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        with self._lock:
            self._rows = None
            self._languages = {}
            self._lexicons.clear()
            self._kept_chars = 0
            self._holding_pages = {}
            self._updates += 1

    # -- reading -------------------------------------------------------------------------------------

    def paths(self) -> set[str]:
        return {_name(path) for (path,) in self._db.execute("SELECT DISTINCT path FROM pages")}

    def page_text(self, path: str, page: int) -> str | None:
        """A page's stored text (None: the page is not in this index)."""
        with self._lock:
            row = self._db.execute("SELECT text FROM pages WHERE path = ? AND page = ?", (_key(path), page)).fetchone()
        return row[0] if row else None

    def page_lexicon(self, path: str, page: int) -> PageLexicon | None:
        """A page's text as snippets and regions read it (lexicon.py): made the first time the page is met and kept
        for the LEXICONS_KEPT pages met last, LEXICON_CHARS_KEPT characters at most (a server's hits: their pages are not
        read nor analysed again);
        None where the page is not in this index."""
        key = (path, page)
        with self._lock:
            found = self._lexicons.get(key)
            if found is not None:
                self._lexicons.move_to_end(key)
                return found
            updates = self._updates
        text = self.page_text(path, page)
        if text is None:
            return None
        made = page_lexicon(text)  # (outside the lock: a thread asking for a page kept does not wait on it)
        with self._lock:
            if key not in self._lexicons and updates == self._updates:  # (not a text an update() replaced meanwhile)
                self._lexicons[key] = made
                self._kept_chars += len(text)
            while len(self._lexicons) > LEXICONS_KEPT or self._kept_chars > LEXICON_CHARS_KEPT:
                self._kept_chars -= len(self._lexicons.popitem(last=False)[1].text)
        return made

    def language(self, path: str) -> str | None:
        """The language a document's pages were stemmed in (None: none, or not in this index)."""
        with self._lock:
            if path not in self._languages:
                if len(self._languages) >= LANGUAGES_KEPT:
                    self._languages.clear()
                row = self._db.execute("SELECT language FROM pages WHERE path = ? LIMIT 1", (_key(path),)).fetchone()
                self._languages[path] = row[0] if row else None
            return self._languages[path]

    def page_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pages").fetchone()[0])

    def has_pages(self) -> bool:
        """Whether any page has text (one row read, under the connection's lock: queries ask it on any thread)."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM pages LIMIT 1").fetchone() is not None

    def token_count(self) -> int:
        """The sum of the pages' token counts (avgdl = token_count / page_count)."""
        return int(self._db.execute("SELECT coalesce(sum(length), 0) FROM pages").fetchone()[0])

    def statistics(self, tokens: Iterable[str]) -> tuple[int, float, list[int]]:
        """(N, avgdl, [n_t for each token]): what BM25 sees, live pages only."""
        table = self._table()
        holding = [self._holding(token) for token in tokens]
        return len(table.ids), float(table.lengths.mean()) if len(table.ids) else 0.0, holding

    def languages(self) -> tuple[str, ...]:
        """The languages its pages were stemmed in: a query is stemmed in each."""
        with self._lock:
            return self._table().languages

    def parse(self, query: str) -> TextQuery:
        """`query` as this index reads it (stemmed in its languages)."""
        return parse(query, self.languages())

    def search(self, query: str, n: int, paths: Collection[str] | None = None) -> list[TextHit]:
        """The `n` best pages for `query` by BM25 (ties by path and page), among `paths` if given; with a
        quoted phrase, only pages that hold it."""
        with self._lock:
            return self._search(parse(query, self._table().languages), n, paths)

    def _search(self, query: TextQuery, n: int, paths: Collection[str] | None) -> list[TextHit]:
        table = self._table()
        if not len(table.ids):
            return []
        avgdl = float(table.lengths.mean())
        found_rows, found_weights = [], []
        for token in dict.fromkeys(query.terms + [term for prefix in query.prefixes for term in self._expand(prefix)]):
            postings = np.array(self._db.execute("SELECT doc, count(*) FROM term_hits WHERE term = ? GROUP BY doc", (token,)).fetchall(),
                                dtype=np.int64).reshape(-1, 2)
            self._keep_holding(token, len(postings))
            if not len(postings):
                continue
            at = np.searchsorted(table.ids, postings[:, 0])
            found_rows.append(at)
            found_weights.append(self.weighting.idf(len(table.ids), len(postings)) *
                                 self.weighting.tf_weight(postings[:, 1], table.lengths[at], avgdl))
        if not found_rows:
            return []
        scores = np.bincount(np.concatenate(found_rows), weights=np.concatenate(found_weights), minlength=len(table.ids))
        hit = np.flatnonzero(scores > 0)
        for phrase in query.phrases:
            holding = np.array([row for (row,) in self._db.execute("SELECT rowid FROM terms WHERE terms MATCH ?", (_phrase(phrase),))],
                               dtype=np.int64)
            hit = hit[np.isin(table.ids[hit], holding)]
        if paths is not None:
            wanted = set(paths)
            hit = hit[np.fromiter((table.paths[at] in wanted for at in hit), dtype=bool, count=len(hit))]
        order = sorted(hit.tolist(), key=lambda at: (-scores[at], table.paths[at], table.pages[at]))[:n]
        return [TextHit(table.paths[at], int(table.pages[at]), float(scores[at])) for at in order]

    def idf(self, tokens: list[str]) -> dict[str, float]:
        """Each of `tokens`' BM25 idf here (0: no page holds it), as a query's search weighs it (the counts it read
        are kept, HOLDING_KEPT tokens at most, so a query's snippets and regions ask nothing more of SQLite)."""
        with self._lock:
            pages = len(self._table().ids)
            holding = {}
            for token in tokens:
                count = self._holding_pages.get(token)
                if count is None:
                    count = self._holding(token)
                    self._keep_holding(token, count)
                holding[token] = count
        return {token: float(self.weighting.idf(pages, count)) if count else 0.0 for token, count in holding.items()}

    def _keep_holding(self, token: str, pages: int) -> None:
        """Keep how many pages hold `token` (under the lock), HOLDING_KEPT tokens at most."""
        if len(self._holding_pages) >= HOLDING_KEPT:
            self._holding_pages = {}
        self._holding_pages[token] = pages

    def _expand(self, prefix: str) -> list[str]:
        """The indexed words starting with `prefix`, the PREFIX_TERMS held by the most pages."""
        rows = self._db.execute("SELECT term FROM term_rows WHERE term >= ? AND term < ? ORDER BY doc DESC, term LIMIT ?",
                                (prefix, prefix + "\U0010ffff", PREFIX_TERMS))
        return [term for (term,) in rows]

    def explain(self, query: str, suggestions: int = 3) -> Miss:
        """Why `query` may find nothing: its words no page holds (as written nor as a stem), each with
        the nearest indexed words (edit distance at most 2, over a bounded vocabulary)."""
        with self._lock:
            parsed = parse(query, self._table().languages)
            stems = dict(zip(parsed.exact, [parse(word, self._table().languages).stemmed for word in parsed.exact]))
            unknown = [word for word in parsed.exact if not self._holding(word) and not any(self._holding(stem) for stem in stems[word])]
            unknown += [f"{prefix}*" for prefix in parsed.prefixes if not self._expand(prefix)]
            if not unknown:
                return Miss([], {})
            vocabulary = [term for (term,) in self._db.execute("SELECT term FROM term_cols WHERE col = 'exact' LIMIT ?", (VOCABULARY,))]
        from rapidfuzz import process
        from rapidfuzz.distance import Levenshtein

        near = {word: [term for term, _, _ in process.extract(word.rstrip("*"), vocabulary, scorer=Levenshtein.distance, score_cutoff=2,
                                                                limit=suggestions)] for word in unknown}
        return Miss(unknown, near)

    def _holding(self, token: str) -> int:
        row = self._db.execute("SELECT doc FROM term_rows WHERE term = ?", (token,)).fetchone()
        return int(row[0]) if row else 0

    def _table(self) -> _Table:
        if self._rows is None:
            rows = self._db.execute("SELECT id, length, path, page, language FROM pages ORDER BY id").fetchall()
            self._rows = _Table(np.array([row[0] for row in rows], dtype=np.int64), np.array([row[1] for row in rows], dtype=np.float64),
                                [_name(row[2]) for row in rows], np.array([row[3] for row in rows], dtype=np.int64),
                                tuple(sorted({row[4] for row in rows if row[4]})))
        return self._rows


def _documents(pages: Iterable[LexicalPage]) -> Iterator[list[LexicalPage]]:
    """The pages grouped by document (a document's pages come together): its language is told once."""
    for _, document in itertools.groupby(pages, key=lambda page: page.path):
        yield list(document)


def _columns(analysed: Analysed) -> tuple[str, str]:
    return " ".join(analysed.exact), " ".join(analysed.stemmed)


def _phrase(tokens: list[str]) -> str:
    """An FTS5 query for `tokens` in order in the exact column (our tokens hold no quote)."""
    return "exact : \"" + " ".join(tokens) + "\""


def _deserialize(db: sqlite3.Connection, data: bytes) -> None:
    """Load a database image into an in-memory connection (Python 3.11+ directly; 3.10 via a file)."""
    if hasattr(db, "deserialize"):
        db.deserialize(data)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "image.sqlite"
        path.write_bytes(data)
        source = sqlite3.connect(path)
        try:
            source.backup(db)
        finally:
            source.close()


def _serialize(db: sqlite3.Connection) -> bytes:
    if hasattr(db, "serialize"):
        return db.serialize()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "image.sqlite"
        target = sqlite3.connect(path)
        try:
            db.backup(target)
        finally:
            target.close()
        return path.read_bytes()


def _key(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def _name(stored: bytes) -> str:
    return bytes(stored).decode("utf-8", "surrogateescape")
