"""The lexical side: the one tokenizer, the one BM25 (against a hand computation), the FTS5 engine's
statistics under incremental updates and deletion, snippets, and the fusion of candidate lists."""

from __future__ import annotations

import math
import random
import shutil

import numpy as np
import pytest
import Stemmer

from localgpt_index.index.text.engine import BM25, LexicalError, LexicalIndex, LexicalPage
from localgpt_index.index.text.tokenize import tokenize
from localgpt_index.query.fusion import evidence, evidence_weights, fuse

from helpers import page_snippet


# -- tokenizer ----------------------------------------------------------------------------------------

def test_tokenizer_folds_case_and_width_in_any_script():
    assert tokenize("Straße STRASSE strasse") == ["strasse"] * 3
    assert tokenize("ＦＵＬＬ ﬁnance") == ["full", "finance"]  # NFKC: full-width letters, ligatures
    assert tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # vowel signs stay in their word
    assert tokenize("Ελληνικά ΚΕΊΜΕΝΟ") == ["ελληνικα", "κειμενο"]  # accents folded, as in Latin scripts
    assert tokenize("東京の会社") == ["東", "京", "の", "会", "社"]  # no spaces: one token a character


def test_codes_and_numbers_stay_findable():
    tokens = tokenize("Invoice INV-2024-0042, total 1,250.00 EUR (v1.3)")
    assert tokens[:5] == ["invoice", "inv", "2024", "0042", "inv20240042"]
    assert {"1", "250", "00", "125000", "v1", "3", "v13"} <= set(tokens)
    # the code typed with or without its separators, in any case, finds the glued token
    assert "inv20240042" in tokenize("inv20240042") and "inv20240042" in tokenize("INV/2024/0042")
    assert tokenize("well-known e-mail") == ["well", "known", "e", "mail"]  # no digit: not a code, no glued token
    assert tokenize("x" * 65 + " ok") == ["ok"]  # a run too long to be a word


# -- BM25 ---------------------------------------------------------------------------------------------

PAGES = [
    LexicalPage("a.pdf", 1, "the invoice INV-2024-0042 was paid"),
    LexicalPage("a.pdf", 2, "the cat sat on the mat"),
    LexicalPage("b.pdf", 1, "an invoice for the cat food, invoice total"),
]


def hand_bm25(query: str, pages: list[LexicalPage], k1=1.2, b=0.75) -> dict[tuple[str, int], float]:
    docs = {(p.path, p.page): p.text.lower().replace(",", " ").replace("-", " ").split() for p in pages}
    for key, words in docs.items():  # the code's glued token, as the tokenizer adds it, then the English stems
        if "inv" in words:
            words.append("inv20240042")
        words += _stems(words)
    n_docs = len(docs)
    avgdl = sum(len(words) for words in docs.values()) / n_docs
    scores = {}
    for key, words in docs.items():
        total = 0.0
        for term in dict.fromkeys(query.lower().split() + _stems(query.lower().split())):
            tf = words.count(term)
            if tf:
                holding = sum(term in other for other in docs.values())
                idf = math.log(1 + (n_docs - holding + 0.5) / (holding + 0.5))
                total += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(words) / avgdl))
        if total:
            scores[key] = total
    return scores


def _stems(words: list[str]) -> list[str]:
    english = Stemmer.Stemmer("english")
    return [stem for word in words if word.isalpha() and len(word) >= 3 and (stem := english.stemWord(word)) != word]


def make_index(folder, pages, name="text.sqlite", languages=("en",)) -> LexicalIndex:
    index = LexicalIndex.create(folder / name, languages)
    index.update(removed=[], added=pages)
    return index


def test_bm25_equals_a_hand_computation(tmp_path):
    index = make_index(tmp_path, PAGES)
    for query in ["invoice", "cat invoice", "the", "mat cat the"]:
        hits = index.search(query, 10)
        expected = hand_bm25(query, PAGES)
        assert {(hit.path, hit.page): hit.score for hit in hits} == pytest.approx(expected, rel=1e-12), query
        assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    hit = index.search("INV-2024-0042", 1)[0]
    assert (hit.path, hit.page) == ("a.pdf", 1)
    assert index.search("nothing matches", 5) == []
    assert BM25.idf(10, 10) > 0  # a word on every page weighs little, never less than nothing


def test_paths_filter_and_page_text(tmp_path):
    odd = "/docs/caf\udce9.pdf"  # a file name that is not UTF-8, as Python keeps it
    index = make_index(tmp_path, PAGES + [LexicalPage(odd, 1, "unique zebra \ud800 text")])
    assert [(hit.path, hit.page) for hit in index.search("zebra", 5)] == [(odd, 1)] and odd in index.paths()
    assert index.page_text(odd, 1) == "unique zebra ? text"  # a lone surrogate in text cannot reach SQLite
    index.update(removed=[odd], added=[])
    assert [(hit.path, hit.page) for hit in index.search("invoice", 10, paths={"a.pdf"})] == [("a.pdf", 1)]
    assert index.page_text("b.pdf", 1) == PAGES[2].text and index.page_text("b.pdf", 9) is None


# -- incremental updates and deletion -----------------------------------------------------------------

def random_pages(rng: random.Random, documents: int, tag: str = "") -> list[LexicalPage]:
    words = [f"w{i}" for i in range(60)]
    return [LexicalPage(f"doc{d}.pdf", page, " ".join(rng.choices(words, k=rng.randint(5, 40))) + tag)
            for d in range(documents) for page in (1, 2)]


def test_removed_and_replaced_documents_leave_the_statistics(tmp_path):
    """After removing and replacing documents, what BM25 sees (N, avgdl, each n_t) and every score
    equal those of an index built fresh from the live pages: deleted rows do not linger."""
    rng = random.Random(7)
    pages = random_pages(rng, 30)
    index = make_index(tmp_path, pages)
    rows = "SELECT id, CAST(path AS TEXT) AS name FROM pages WHERE name NOT IN ({})"
    kept_ids = dict(index._db.execute(rows.format("'doc3.pdf', 'doc4.pdf', 'doc5.pdf'")))
    replaced = [LexicalPage("doc4.pdf", 1, "w1 w1 w1 w2 brandnew"), LexicalPage("doc4.pdf", 2, "w3")]
    index.update(removed=["doc3.pdf", "doc4.pdf", "doc5.pdf"], added=replaced)
    live = [p for p in pages if p.path not in {"doc3.pdf", "doc4.pdf", "doc5.pdf"}] + replaced
    fresh = make_index(tmp_path, live, "fresh.sqlite")
    terms = [f"w{i}" for i in range(60)] + ["brandnew"]
    assert index.statistics(terms) == fresh.statistics(terms)
    for query in ["w1 w2", "w3 brandnew", "w10 w20 w30 w40"]:
        assert index.search(query, 100) == fresh.search(query, 100)
    hit = index.search("brandnew", 5)[0]
    assert (hit.path, hit.page) == ("doc4.pdf", 1)
    # only the changed documents' rows were touched: the others keep their rows
    assert dict(index._db.execute(rows.format("'doc4.pdf'"))) == kept_ids


def test_a_readers_copy_is_not_changed_by_a_writer(tmp_path):
    """The per-generation use: a writer copies the base generation's file and updates the copy."""
    base = make_index(tmp_path, PAGES)
    base.close()
    shutil.copyfile(tmp_path / "text.sqlite", tmp_path / "next.sqlite")
    writer = LexicalIndex.open(tmp_path / "next.sqlite", writable=True)
    writer.update(removed=["a.pdf"], added=[])
    reader = LexicalIndex.open(tmp_path / "text.sqlite")
    assert reader.page_count() == 3 and writer.page_count() == 1
    with pytest.raises(Exception):
        reader.update(removed=["b.pdf"], added=[])  # opened read-only


def test_a_generation_stores_the_index_as_bytes_and_updates_a_copy():
    """What the per-generation artifact does: the base's bytes, updated in memory, serialised anew."""
    base = LexicalIndex.create()
    base.update(removed=[], added=PAGES)
    data = base.to_bytes()
    following = LexicalIndex.from_bytes(data)
    following.update(removed=["a.pdf"], added=[LexicalPage("c.pdf", 1, "invoice")])
    assert LexicalIndex.from_bytes(data).page_count() == 3  # the base's bytes are untouched
    again = LexicalIndex.from_bytes(following.to_bytes())
    assert again.paths() == {"b.pdf", "c.pdf"} and again.problems() == []
    with pytest.raises(LexicalError, match="not a readable text index"):
        LexicalIndex.from_bytes(b"\0" * 4096)


def test_a_damaged_or_foreign_file_is_refused(tmp_path):
    (tmp_path / "junk.sqlite").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(LexicalError, match="not a readable text index"):
        LexicalIndex.open(tmp_path / "junk.sqlite")
    index = make_index(tmp_path, PAGES)
    index._db.execute("UPDATE meta SET value = '999' WHERE key = 'tokenizer'")
    index.close()
    with pytest.raises(LexicalError, match="another version"):
        LexicalIndex.open(tmp_path / "text.sqlite")


def test_snippet_marks_the_matched_words():
    text = "Lorem ipsum dolor. " * 20 + "The invoice INV-2024-0042 was paid by ACME on March 3. " + "Filler words. " * 20
    shown = page_snippet(text, "who paid invoice inv-2024-0042?")
    assert "**INV-2024-0042**" in shown and "**paid**" in shown and "**invoice**" in shown
    assert shown.startswith("… ") and shown.endswith(" …") and len(shown) < 260
    assert page_snippet("no match here", "zebra") == "no match here"
    assert page_snippet("", "zebra") == ""
    # whole words, joined by one space; a word's punctuation outside its mark; another inflection and a prefix marked
    shown = page_snippet("Engineers\n\nreviewed (turbines), then   the INVOICES.", "engineer turbine* invoice", "en")
    assert shown == "**Engineers** reviewed (**turbines**), then the **INVOICES**."
    assert page_snippet("word " * 100, "zebra") == " ".join(["word"] * 40) + " …"  # the page's first words
    # a compound whole, its part apart from what follows it; Chinese characters alone; a word's combining marks in it
    assert page_snippet("café's late-payment notice", "cafe late") == "**café**'s **late-payment** notice"
    assert page_snippet("我在東京工作很久了，東京很大。", "東京") == "我在**東京**工作很久了，**東京**很大。"
    assert page_snippet("मैं हिंदी बोलता हूँ", "हिंदी") == "मैं **हिंदी** बोलता हूँ"
    # a long token (a URL, base64, a line of Chinese) is cut around its matched word: the snippet stays short
    shown = page_snippet("see https://example.com/" + "a" * 300 + "/turbine/" + "b" * 3000 + " and more", "turbine")
    assert "/**turbine**/" in shown and len(shown) < 160, shown
    shown = page_snippet("start " + "x" * 5000 + " middle turbine end", "turbine")  # the best hit shown past a long token
    assert "**turbine**" in shown and len(shown) < 160, shown
    assert len(page_snippet("y" * 5000, "zebra")) < 110


# -- fusion --------------------------------------------------------------------------------------------

def test_rrf_is_the_textbook_formula():
    fused = fuse({"text": [("a", 9.0), ("b", 5.0)], "visual": [("b", 0.9), ("c", 0.8)]}, method="rrf", k=60)
    scores = {item.key: item.score for item in fused}
    assert scores == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62})
    assert [item.key for item in fused] == ["b", "a", "c"]
    assert fused[0].ranks == {"text": 2, "visual": 1} and fused[2].ranks == {"text": None, "visual": 2}
    with pytest.raises(ValueError):
        fuse({"text": []}, method="max")
    with pytest.raises(ValueError):
        fuse({"text": []}, k=-1)


def test_one_list_keeps_its_order_and_ties_are_deterministic():
    ranking = [(f"p{i}", 10.0 - i) for i in range(20)]
    assert [item.key for item in fuse({"text": ranking})] == [key for key, _ in ranking]
    assert [item.key for item in fuse({"text": [("x", 1.0)], "visual": [("y", 1.0)]}, method="rrf")] == ["x", "y"]


def noise_scores(rng: np.random.Generator, n: int = 100, pool: int = 3000) -> np.ndarray:
    return np.sort(rng.normal(size=pool))[::-1][:n]


def test_evidence_separates_a_clear_top_from_noise():
    rng = np.random.default_rng(0)
    noise = [evidence(noise_scores(rng)) for _ in range(200)]
    assert np.median(noise) < 1.3
    signal = noise_scores(rng).copy()
    signal[0] += 5.0
    assert evidence(signal) > 3.0
    assert evidence([4.0, 4.0, 4.0]) == 0.0 and evidence([]) == 0.0
    assert evidence([7.5]) == 10.0  # the one page that matched a rare term
    assert evidence([9.0, 2.0, 1.9]) > 2  # a short list that still falls: a rare term matched few pages
    assert evidence_weights({"a": [1.0, 1.0], "b": [2.0, 2.0]}) == {"a": 1.0, "b": 1.0}


def lists_for(rng: np.random.Generator, pages: int, right: str, text_rank: int, visual_signal: bool) -> dict:
    """A text list with the right page at text_rank, its scores standing out (BM25 of a planted
    fact), and a visual list: noise (random weights), or with its own right page standing out."""
    keys = [f"p{i}" for i in range(pages)]
    others = [key for key in keys if key != right]
    text_keys = list(rng.choice(others, size=99, replace=False))
    text_keys.insert(text_rank - 1, right)
    text_scores = np.sort(rng.exponential(size=100))[::-1]
    text_scores[:text_rank] += 6.0
    visual_keys = list(rng.choice(keys, size=100, replace=False))
    visual_scores = noise_scores(rng)
    if visual_signal:
        visual_scores[0] += 6.0
    return {"text": list(zip(text_keys, text_scores)), "visual": list(zip(visual_keys, visual_scores))}


def test_a_no_signal_list_does_not_drown_a_signal_list():
    """The random-weight case: the visual list is noise. Weighted fusion keeps the text list's right
    page (ranked 1 to 3 there) in the top 5 nearly always; plain RRF, equal weights, often does not."""
    rng = np.random.default_rng(1)
    found = {"weighted": 0, "rrf": 0}
    trials = 300
    for trial in range(trials):
        lists = lists_for(rng, 1000, "p7", text_rank=1 + trial % 3, visual_signal=False)
        for method in found:
            found[method] += "p7" in [item.key for item in fuse(lists, method=method)[:5]]
    assert found["weighted"] >= 0.97 * trials
    assert found["rrf"] <= 0.85 * trials  # what the weighting is for


def test_both_lists_with_signal_both_right_pages_are_in_the_top_5():
    """The other direction: a fusion that ignores the visual list cannot pass this."""
    rng = np.random.default_rng(2)
    for trial in range(100):
        lists = lists_for(rng, 1000, "p7", text_rank=1, visual_signal=True)
        visual_right = lists["visual"][0][0]
        top = [item.key for item in fuse(lists)[:5]]
        assert "p7" in top and visual_right in top


# -- hybrid over a real store: a signal-carrying encoder finds what text cannot, and the reverse --------

DIM, TOKENS = 32, 16


def unit_vectors(rng: np.random.Generator, count: int) -> np.ndarray:
    vectors = rng.normal(size=(count, DIM))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float16)


def hybrid_index(tmp_path):
    """40 documents of 2 pages: random vectors, filler text; doc-03 page 2 holds a planted fact in
    its text; doc-17 page 1 is an image with no text at all (only its vectors can find it)."""
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.local.store import LocalStore
    from localgpt_index.query.search import Searcher

    rng = np.random.default_rng(5)
    words = [f"filler{i}" for i in range(300)]
    page_vectors = [unit_vectors(rng, TOKENS) for _ in range(80)]
    store = LocalStore(tmp_path / "index")
    with store.begin() as txn:
        segment = txn.write_segment(iter(page_vectors), DIM)
        documents = [Document(path=f"/docs/doc-{d:02d}.pdf", sha256=f"{d:064x}", size=1, kind="pdf", pages=2,
                              spans=[Span(segment=segment.id, first=2 * d, pages=2)],
                              metadata={"team": "a" if d % 2 else "b"}) for d in range(40)]
        txn.commit(documents, ModelInfo(id="synthetic", family="fake", fingerprint="synthetic", dim=DIM), Settings(dim=DIM))
    texts = []
    for d in range(40):
        for page in (1, 2):
            text = " ".join(rng.choice(words, size=60))
            if d % 3 == 0:  # distractors: the question's common words on many pages, so the text list is long
                text += " invoice" * (1 + d % 4 + page) + " was paid"
            if (d, page) == (3, 2):
                text += " The invoice INV-2024-0042 was paid by ACME Logistics in March."
            if (d, page) == (17, 1):
                text = ""
            texts.append(LexicalPage(f"/docs/doc-{d:02d}.pdf", page, text))
    lexical = make_index(tmp_path, texts)
    return Searcher(store.open_view(), lexical=lexical), page_vectors, rng


def test_hybrid_finds_the_text_only_and_the_visual_only_page(tmp_path):
    from localgpt_index.query.request import QueryRequest

    index, page_vectors, rng = hybrid_index(tmp_path)
    image_page = 17 * 2  # doc-17 page 1
    query = "who paid invoice INV-2024-0042"
    # a signal-carrying query encoder: its vectors are (noisy) vectors of the image page
    signal = page_vectors[image_page][:6].astype(np.float32) + 0.05 * rng.normal(size=(6, DIM))
    noise = unit_vectors(rng, 6).astype(np.float32)

    def top(vectors, mode, fusion="weighted", filters=None):
        request = QueryRequest(queries=[query], k=5, filters=filters, mode=mode, fusion=fusion)
        hits = index.search_encoded(request, [vectors] if vectors is not None else None)[0]
        return [(hit.path.rsplit("/", 1)[1], hit.page) for hit in hits], hits

    text_page, visual_page = ("doc-03.pdf", 2), ("doc-17.pdf", 1)
    assert text_page in top(None, "text")[0] and visual_page not in top(None, "text")[0]
    assert visual_page in top(signal, "visual")[0] and text_page not in top(signal, "visual")[0]
    found, hits = top(signal, "hybrid")
    assert text_page in found and visual_page in found
    fused = {(hit.path.rsplit("/", 1)[1], hit.page): hit for hit in hits}
    assert fused[text_page].text_rank == 1 and fused[visual_page].visual_rank == 1
    assert "**INV-2024-0042**" in fused[text_page].snippet and fused[visual_page].snippet == ""
    assert fused[text_page].to_dict()["visual_rank"] is None or fused[text_page].visual_rank > 1
    # a no-signal encoder (random weights): hybrid keeps the text list's page first
    assert top(noise, "hybrid")[0][0] == text_page
    # filters apply to both lists: doc-03 is team a, doc-17 team a
    assert text_page not in top(signal, "hybrid", filters={"team": "b"})[0]
    assert visual_page not in top(signal, "hybrid", filters={"team": "b"})[0]
    assert all(hit.metadata["team"] == "b" for hit in top(signal, "hybrid", filters={"team": "b"})[1])
    filler = index.search_encoded(QueryRequest(queries=["filler1 filler2"], filters={"team": "b"}, mode="text"), None)[0]
    assert len(filler) == 5 and all(hit.metadata["team"] == "b" for hit in filler)
    assert index.mode() == "hybrid"


def test_without_text_the_default_is_visual_and_text_mode_is_refused(tmp_path):
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.query.request import QueryRequest
    from localgpt_index.query.search import Searcher

    index, page_vectors, _ = hybrid_index(tmp_path)
    bare = Searcher(index.view, lexical=None)
    assert bare.mode() == "visual"
    hits = bare.search_encoded(QueryRequest(queries=["x"], k=3), [page_vectors[0].astype(np.float32)])[0]
    assert hits[0].snippet is None and "visual_rank" not in hits[0].to_dict()
    with pytest.raises(IndexProblem, match="holds no page text"):
        bare.search_encoded(QueryRequest(queries=["x"], k=3, mode="text"), None)


def test_every_hit_that_chose_a_snippet_s_window_is_shown():
    """The window is scored over the snippet's last three quarters (it starts a quarter before its first hit): two
    terms 160 characters apart count for a window only where both would be shown, so the snippet is the later
    place where they stand side by side."""
    from helpers import page_snippet

    text = "x" * 100 + " alpha " + "y" * 150 + " beta " + "filler " * 60 + "alpha beta"
    shown = page_snippet(text, "alpha beta")
    assert "**alpha** **beta**" in shown, shown
    # a long word before the window's first hit: the snippet starts on it, earlier, and still shows the whole window
    text = "filler " * 10 + "w" * 30 + " " + "x" * 40 + " alpha " + "y" * 90 + " " + "z" * 45 + " beta " + "filler " * 10
    shown = page_snippet(text, "alpha beta")
    assert "**alpha**" in shown and "**beta**" in shown, shown


def test_the_densest_window_is_the_one_every_window_would_find():
    """snippet's one-pass window (issue 39 #1) picks the first hit of the earliest window whose distinct units weigh
    the most, exactly as trying every window does (the quadratic search it replaced)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from localgpt_index.index.text.snippet import _densest

    def every_window(hits, weights, width):
        held = [sum(weights[unit] for unit in {unit for start, unit in hits[first:] if start < hits[first][0] + width})
                for first in range(len(hits))]
        return held.index(max(held))

    starts = st.lists(st.tuples(st.integers(0, 500), st.integers(0, 3)), min_size=1, max_size=40)

    @settings(max_examples=300, deadline=None)
    @given(starts, st.lists(st.integers(1, 3000), min_size=4, max_size=4), st.integers(1, 120))
    def same(raw, weights, width):
        hits = sorted(raw)
        first, end = _densest([start for start, _ in hits], [unit for _, unit in hits], weights, width)
        assert first == every_window(hits, weights, width)
        assert end == first + sum(1 for start, _ in hits[first:] if start < hits[first][0] + width)  # the window's hits

    same()
