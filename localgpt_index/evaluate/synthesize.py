"""Known-item questions drawn from an index's own page text: `eval --synthesize N`, no hand-written answers.

Each question is a phrase of PHRASE_WORDS words that occurs on one page of the index only (its text,
case and accents folded), asked in one of four spellings, in turn: `exact` (as the page has it),
`unaccented` (its accents dropped), `inflected` (one word's ending changed: a simple suffix added or
taken off), `dropped` (two of its inner words left out). The page it came from is the one relevant
page. The same index and seed draw the same questions.

What they measure: whether each mode finds the one page a distinctive phrase of its text comes from,
asked as the page spells it or nearly (recall@1/5/10, MRR). What they do not: questions in other words
than the page's (paraphrases), questions about what a page shows rather than says (charts, photos,
layout: the visual list is at a disadvantage here), pages without text, or several relevant pages."""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Final

from .queryset import EvalQuery, Judgment, QuerySet

PHRASE_WORDS: Final = 6
SPELLINGS: Final = ("exact", "unaccented", "inflected", "dropped")
TRIES: Final = 40  # phrases tried for one question before another page is drawn
WORD = re.compile(r"\w+(?:[-'’]\w+)*")
ABOUT = ("synthesized known-item questions: a phrase from one page, asked exact, unaccented, inflected or with "
         "words dropped; they measure finding a page by its own words, not paraphrases or what a page only shows")


def fold(text: str) -> str:
    """Lower case, accents dropped (NFKD, combining marks removed)."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def synthesize(index: Any, count: int, seed: int = 0) -> QuerySet:
    """`count` known-item questions from the page text of `index` (a query.search.Searcher), drawn with `seed`."""
    lexical = index.lexical
    pages = []
    if lexical is not None:
        for doc in index.documents:
            for page in range(1, doc.pages + 1):
                words = WORD.findall(lexical.page_text(doc.path, page) or "")
                if len(words) >= PHRASE_WORDS:
                    pages.append((doc.path, page, words))
    folded = [" " + " ".join(fold(word) for word in words) + " " for _, _, words in pages]
    rng = random.Random(seed)
    queries: list[EvalQuery] = []
    for _ in range(count * 4 if pages else 0):
        if len(queries) == count:
            break
        chosen = rng.randrange(len(pages))
        path, page, words = pages[chosen]
        phrase = _unique_phrase(words, chosen, folded, rng)
        if phrase is None:
            continue
        spelling = SPELLINGS[len(queries) % len(SPELLINGS)]
        where = f"synthesized question {len(queries) + 1} (seed {seed})"
        queries.append(EvalQuery(id=f"s{len(queries) + 1:04d}", text=respell(phrase, spelling, rng), where=where,
                                 relevant=(Judgment(path, page, 1),), tags={"spelling": spelling}))
    notes = () if len(queries) == count else (f"only {len(queries)} of {count} questions could be drawn: too few pages "
                                              f"with a phrase of {PHRASE_WORDS} words found nowhere else.",)
    return QuerySet(source=f"--synthesize {count} --seed {seed}", format="jsonl", queries=tuple(queries), notes=notes)


def _unique_phrase(words: Sequence[str], own: int, folded: Sequence[str], rng: random.Random) -> list[str] | None:
    """A run of PHRASE_WORDS words of the page, with letters in, whose folded text is on no other page."""
    for _ in range(TRIES):
        start = rng.randrange(len(words) - PHRASE_WORDS + 1)
        phrase = list(words[start : start + PHRASE_WORDS])
        if sum(any(char.isalpha() for char in word) for word in phrase) < PHRASE_WORDS // 2:
            continue
        needle = " " + " ".join(fold(word) for word in phrase) + " "
        if not any(needle in text for number, text in enumerate(folded) if number != own):
            return phrase
    return None


def respell(phrase: Sequence[str], spelling: str, rng: random.Random) -> str:
    """The phrase as `spelling` asks (see the module's docstring)."""
    words = list(phrase)
    if spelling == "unaccented":
        words = ["".join(c for c in unicodedata.normalize("NFKD", w) if not unicodedata.combining(c)) for w in phrase]
    elif spelling == "inflected":
        long = [i for i, word in enumerate(words) if len(word) >= 5 and word.isalpha()]
        if long:
            at = rng.choice(long)
            words[at] = inflect(words[at])
    elif spelling == "dropped":
        inner = list(range(1, len(words) - 1))
        for at in sorted(rng.sample(inner, min(2, len(inner))), reverse=True):
            del words[at]
    return " ".join(words)


def inflect(word: str) -> str:
    """A simple change of ending: one taken off where the word has it (-s, -es, -ed, -ing, -e), else -s added."""
    for ending in ("ing", "ed", "es", "s", "e"):
        if word.lower().endswith(ending) and len(word) - len(ending) >= 4:
            return word[: -len(ending)]
    return word + "s"


AGAINST_K: Final = 10  # --against exact: the exact top that a lossy setting is asked to keep


def against_exact(index: Any, query_set: QuerySet, name: str | None = None, k: int = AGAINST_K) -> QuerySet:
    """The questions of `query_set` judged by exact search itself: each one's relevant pages are the exact
    visual list's top `k` of `index` (grade 1), so a variant's recall@10 is the share of that top it keeps;
    `name`: the index's, where it is another than the one evaluated (an unpooled one beside a pooled one)."""
    from .modes import Variant, search

    exact = search(index, [query.text for query in query_set.queries], Variant("visual"), k)
    queries = tuple(EvalQuery(id=query.id, text=query.text, where=query.where, tags=query.tags,
                              relevant=tuple(Judgment(hit.path, hit.page, 1) for hit in hits) or query.relevant)
                    for query, hits in zip(query_set.queries, exact))
    judge = f" of index {name}" if name else ""
    return QuerySet(source=f"{query_set.source}, judged by the exact top {k}{judge}", format=query_set.format, queries=queries,
                    notes=query_set.notes)
