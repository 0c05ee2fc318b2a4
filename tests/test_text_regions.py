"""Text regions (issue 44): word positions kept with the page text, and the lines holding a query's terms.

Black-box through the Python API (`open_index(...).search(..., regions=True, mode="text")`): this branch
has no `--regions` flag on `query`. The planted-facts test (testing/regionset.py: text-layer and scanned
PDFs and PNGs, rotated and two-column pages) runs poppler and Tesseract: the slow tier. The rest is fast:
the parsers, the packing and the region logic on made-up pages, and small builds with real poppler."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from docgen import make_pdf
from helpers import artifacts_plugged, flip_byte

from localgpt_index import open_index
from localgpt_index.core.errors import IndexProblem
from localgpt_index.core.words import NO_LINE, WORD_SCALE, FoundWord, PageWords, align
from localgpt_index.index.text.query import parse
from localgpt_index.index.text.lexicon import QueryTerms, page_lexicon
from localgpt_index.index.text.regions import page_text_regions
from localgpt_index.index.text.words import decode_words, encode_words
from localgpt_index.ingest.ocr import Tesseract
from localgpt_index.ingest.text import page_layer
from localgpt_index.interop.reports import query_answer
from localgpt_index.query.request import QueryRequest
from localgpt_index.testing.regionset import iou, make_region_set


def _page(*blocks: list[list[tuple[str, tuple[float, float, float, float]]]], width: float = 100, height: float = 200,
          form: str = "") -> bytes:
    """pdftotext -bbox-layout's XML for one page (from after `<page `): one flow a block; each coordinate written in
    `form` (".6f": as poppler writes them)."""
    out = [f'width="{width}" height="{height}">'.encode()]
    for block in blocks:
        out.append(b"<flow><block>")
        for line in block:
            out.append(b"<line>")
            for text, (x0, y0, x1, y1) in line:
                out.append(f'<word xMin="{x0:{form}}" yMin="{y0:{form}}" xMax="{x1:{form}}" yMax="{y1:{form}}">{text}</word>'.encode())
            out.append(b"</line>")
        out.append(b"</block></flow>")
    return b"".join(out)


def _line(y: float, *words: str, x: float = 10, gap: float = 3) -> list[tuple[str, tuple[float, float, float, float]]]:
    line = []
    for word in words:
        line.append((word, (x, y, x + 5 * len(word), y + 10)))
        x += 5 * len(word) + gap
    return line


def test_the_text_is_written_as_pdftotext_writes_it_and_every_token_has_its_box():
    xml = _page([_line(10, "Net", "rev&amp;enue", "is", "up-"), _line(22, "ward", "now")], [_line(50, "(", "const", gap=0)])
    text, words = page_layer(xml, turned=False)
    assert text == "Net rev&enue is upward now\n\n(const"  # a hyphen joins a flow's lines; touching words stay one
    assert len(words) == len(text.split()) == 6
    first = words.fractions()[0]
    assert np.allclose(first, [10 / 100, 10 / 200, 25 / 100, 20 / 200], atol=1e-4)
    assert words.lines.tolist()[:5] == [0, 0, 0, 0, 1] and len(words.blocks) == 3
    assert words.blocks.tolist() == [0, 0, 1]


def test_poppler_s_six_decimals_and_any_other_form_of_a_box_read_the_same():
    lines = ([_line(10.25, "Net", "rev&amp;enue", "is", "up-"), _line(22.5, "ward", "now", x=-3.5)], [_line(50, "(", "const", gap=0)])
    exact = page_layer(_page(*lines, form=".6f"), turned=False)  # (read as integers of millionths)
    assert exact[0] == "Net rev&enue is upward now\n\n(const"
    for form in ("", ".2f", ".3e"):  # (each word's box by the pattern)
        text, words = page_layer(_page(*lines, form=form), turned=False)
        assert text == exact[0] and words == exact[1]
    assert exact[1].fractions()[4][0] == pytest.approx(0.195, abs=1e-4)  # "now": after "ward", which begins left of the page


def test_a_word_outside_a_line_or_with_no_box_is_left_out_and_the_others_keep_their_lines():
    page = _page([_line(10, "one", "two"), _line(30, "three")], form=".6f")
    word = b'<word xMin="1.000000" yMin="2.000000" xMax="3.000000" yMax="4.000000">stray</word>'
    stray = page.replace(b"<flow><block>", b"<flow><block>" + word)
    boxless = page.replace(b'<word xMin="10.000000" yMin="30.000000"', b'<word yMin="30.000000"')
    assert page_layer(stray, turned=False) == page_layer(page, turned=False)
    text, words = page_layer(boxless, turned=False)
    assert text == "one two" and words.lines.tolist() == [0, 0]


def test_a_word_holding_a_space_an_empty_word_and_a_nul_keep_the_boxes_in_step():
    xml = _page([_line(10, "New York", "", "c\x00d", "end")])
    text, words = page_layer(xml, turned=False)
    assert text.split() == ["New", "York", "c", "d", "end"] and len(words) == 5  # (a control character is a space)
    fractions = words.fractions()
    assert np.allclose(fractions[0], fractions[1]) and fractions[0][0] == pytest.approx(0.1, abs=1e-4)  # "New York"'s box, both
    assert np.allclose(fractions[2], fractions[3])
    assert fractions[4][0] > fractions[3][2] > fractions[1][2]  # the words after them keep their own


def test_a_page_turned_a_quarter_swaps_the_media_box():
    _, words = page_layer(_page([_line(10, "word")], width=100, height=200), turned=True)
    assert np.allclose(words.fractions()[0], [10 / 200, 10 / 100, 30 / 200, 20 / 100], atol=1e-4)
    assert page_layer(_page([_line(10, "word")]), turned=None) == ("word", None)  # pdfinfo could not say: no boxes


def test_tesseract_tsv_gives_each_token_its_box_and_its_text_is_kept():
    tsv = ("1\t1\t0\t0\t0\t0\t0\t0\t1000\t500\t-1\t\n"
           "5\t1\t1\t1\t1\t1\t100\t50\t200\t40\t95\tHello\n"
           "5\t1\t1\t1\t1\t2\t320\t50\t180\t40\t95\tworld\n"
           "5\t1\t1\t1\t2\t1\t100\t120\t90\t40\t95\tagain\n")
    read = Tesseract.clean("Hello world\nagain\n\x1e" + tsv)
    assert (read.text, read.source) == ("Hello world\nagain", "ocr")
    assert read.words is not None and read.words.lines.tolist() == [0, 0, 1]
    assert np.allclose(read.words.fractions()[1], [0.32, 0.1, 0.5, 0.18], atol=1e-4)
    assert Tesseract.clean("Hello world\n").words is None  # the `tesseract` command: text alone


def test_align_maps_the_tokens_a_tool_split_or_joined():
    found = [FoundWord(text, (i / 10, 0, (i + 1) / 10, 0.1), 0, 0) for i, text in enumerate(["end-", "ing", "here", "x"])]
    words = align(["ending", "here", "extra", "x"], found)
    assert words.lines.tolist() == [0, 0, NO_LINE, 0]  # "extra" is nowhere in the tool's words: no box
    assert words.boxes[0].tolist() == [0, 0, round(0.2 * WORD_SCALE), round(0.1 * WORD_SCALE)]


def test_packed_rows_read_back_their_lines_exactly_their_words_within_a_step_and_damage_is_said():
    text, page = _words([["alpha", "beta", "gamma"], ["delta"], ["eps", "zeta"], ["eta", "theta", "iota"]], columns=2)
    turned = PageWords(page.boxes[:, [1, 0, 3, 2]], page.lines, page.blocks)  # lines running down the page
    rows = [page, None, PageWords(page.boxes[:0], page.lines[:0], page.blocks[:0]), turned]
    read = decode_words(encode_words(rows))
    assert read[1] is None and len(read[2]) == 0
    for before, after in ((page, read[0]), (turned, read[3])):
        assert np.array_equal(before.lines, after.lines) and np.array_equal(before.blocks, after.blocks)
        assert np.abs(before.fractions() - after.fractions()).max() < 1 / 255
        terms = QueryTerms(parse("beta eta"), None)
        assert _regions(text, after, terms) == _regions(text, before, terms)
    with pytest.raises(IndexProblem, match="words part is damaged"):
        decode_words(encode_words(rows)[:-3])


def _words(lines: list[list[str]], columns: int = 1) -> tuple[str, PageWords]:
    """A made-up page: each line's words left to right, lines top to bottom (two columns: the first half left)."""
    found, tokens = [], []
    half = (len(lines) + 1) // 2 if columns == 2 else len(lines)
    for number, line in enumerate(lines):
        left, top = (0.05 if number < half else 0.55), 0.05 * (number % half) + 0.05
        for index, word in enumerate(line):
            found.append(FoundWord(word, (left + 0.08 * index, top, left + 0.08 * index + 0.07, top + 0.02), number,
                                   0 if number < half else 1))
            tokens.append(word)
    text = "\n".join(" ".join(line) for line in lines)
    return text, align(text.split(), found)


def _regions(text: str, words: PageWords, terms: QueryTerms):
    """A page's text regions for `terms`, its matches found in its lexicon as a query's are (QueryAnalysis.page)."""
    lexicon = page_lexicon(text)
    return page_text_regions(terms.matches(lexicon), words)


def test_the_line_with_the_most_terms_comes_first_under_the_index_analysis():
    text, words = _words([["filler", "words", "here"], ["Planning", "the", "Café", "budgets"], ["budget", "only"],
                          ["more", "filler"], ["turbines", "spin"]])
    regions = _regions(text, words, QueryTerms(parse("cafe plans budget turb*", ["en"]), "en"))
    assert [r.text for r in regions] == ["Planning the Café budgets budget only", "turbines spin"]  # adjacent lines merged
    assert set(regions[0].matched) == {"cafe", "plan", "budget"} and regions[1].matched == ("turb*",)
    assert regions[0].source == "text" and regions[0].score > regions[1].score
    x0, y0, x1, y1 = regions[0].bbox
    assert (round(y0, 3), round(y1, 3)) == (0.1, 0.17) and x0 == pytest.approx(0.05, abs=1e-4)


def test_a_phrase_is_a_term_where_its_words_follow_each_other():
    text, words = _words([["late", "fees", "and", "payment", "terms"], ["filler"], ["the", "late", "payment", "notice"],
                          ["filler"], ["a", "late-payment", "fee"]])
    regions = _regions(text, words, QueryTerms(parse('"late payment"'), None))
    assert [r.text for r in regions] == ["the late payment notice", "a late-payment fee", "late fees and payment terms"]
    assert regions[0].matched == ('"late payment"', "late", "payment") and regions[2].matched == ("late", "payment")
    assert regions[0].score > regions[2].score
    # the words apart, or the other way round: no phrase
    assert all('"late payment"' not in r.matched for r in _regions("payment late", _words([["payment", "late"]])[1],
                                                                          QueryTerms(parse('"late payment"'), None)))


def test_lines_of_two_columns_are_not_merged_and_a_wide_gap_cuts_a_line():
    text, words = _words([["alpha", "one"], ["beta", "two"], ["alpha", "three"], ["beta", "four"]], columns=2)
    regions = _regions(text, words, QueryTerms(parse("alpha"), None))
    assert [r.text for r in regions] == ["alpha one", "alpha three"]
    # OCR's one line across two columns: cut at the gap
    found = [FoundWord(w, (x, 0.1, x + 0.05, 0.12), 0, 0) for w, x in (("left", 0.1), ("side", 0.16), ("right", 0.6), ("side", 0.66))]
    regions = _regions("left side right side", align("left side right side".split(), found), QueryTerms(parse("right"), None))
    assert regions[0].text == "right side" and regions[0].bbox[0] == pytest.approx(0.6, abs=1e-4)
    assert _regions("other text", words, QueryTerms(parse("alpha"), None)) == []  # positions of another text: none


def test_a_question_s_rare_word_outranks_its_common_ones_and_a_word_s_forms_count_once():
    """A natural question: the line holding "revenue" beats the one holding "the", "was" and "in" (words every page
    of the index holds), in the regions and in the snippet's window; "revenue" and "revenues" on one line are one
    of the query's words, not two."""
    from localgpt_index.index.text.engine import LexicalIndex, LexicalPage
    from localgpt_index.index.text.lexicon import QueryAnalysis
    from localgpt_index.index.text.snippet import snippet

    lines = [["the", "plan", "was", "in", "the", "drawer"], ["filler"], ["quarterly", "revenue", "and", "revenues", "grew"],
             ["filler"] * 40, ["the", "list", "was", "in", "the", "hall"]]
    text, words = _words(lines)
    index = LexicalIndex.create(languages=["en"])
    index.update([], [LexicalPage("/a.pdf", 1, text)] + [LexicalPage(f"/other{n}.pdf", 1, "the cat was in the garden")
                                                         for n in range(9)])
    matches = QueryAnalysis(index, "What was the revenue in the third quarter?").page("/a.pdf", 1)
    regions = page_text_regions(matches, words)
    assert regions[0].text == "quarterly revenue and revenues grew" and regions[0].matched == ("revenue", "quarter", "revenu")
    assert len(regions) == 1  # the lines of "the", "was" and "in" alone make no region
    query = matches.query
    held = {query.unit_of[term] for term in regions[0].matched}
    assert regions[0].score == pytest.approx(sum(query.weights[unit] for unit in held) / sum(query.weights), abs=1e-4)
    assert "**revenue**" in snippet(matches) and "hall" not in snippet(matches)
    # the snippet's window too: three common words together lose to the rare one alone
    far = "the plan was in the drawer " + "filler " * 60 + "revenue grew " + "filler " * 60
    index.update(["/a.pdf"], [LexicalPage("/a.pdf", 1, far)])
    shown = snippet(QueryAnalysis(index, "What was the revenue in the third quarter?").page("/a.pdf", 1))
    assert "**revenue**" in shown and "drawer" not in shown
    # one page, every word as rare as the others: each of the question's words counts alike, each once (what and
    # third, held by no page, weigh nothing)
    alone = LexicalIndex.create(languages=["en"])
    alone.update([], [LexicalPage("/a.pdf", 1, text)])
    regions = page_text_regions(QueryAnalysis(alone, "What was the revenue in the third quarter?").page("/a.pdf", 1), words)
    assert regions[0].text == "the plan was in the drawer" and regions[0].score == pytest.approx(3 / 5, abs=1e-4)


def test_a_query_word_that_is_another_s_stem_is_a_word_of_its_own():
    from localgpt_index.index.text.engine import LexicalIndex, LexicalPage
    from localgpt_index.index.text.lexicon import QueryAnalysis

    text, words = _words([["running", "and", "run"], ["filler"], ["running"]])
    index = LexicalIndex.create(languages=["en"])
    index.update([], [LexicalPage("/a.pdf", 1, text), LexicalPage("/b.pdf", 1, "other words")])
    for query in ("running run", "run running"):
        regions = page_text_regions(QueryAnalysis(index, query).page("/a.pdf", 1), words)
        assert regions[0].text == "running and run" and regions[0].score == 1.0, query  # both words: the whole weight


def test_a_stem_of_another_language_weighs_its_own_rarity():
    """A page's word may match a query word's stem in another of the index's languages only (QueryTerms matches the
    stems of every language the query was parsed in): a unit of its own, weighed by its own idf, not by a flat 1."""
    query = QueryTerms(parse("alpha delta"), "en", {"alpha": 2.0, "delta": 0.5, "beta": 0.25})
    assert query.term_units(["alpha", "beta"]) == ([0, 3], [2.0, 0.25], 2.75)  # (its unit: numbered past the query's)
    assert QueryTerms(parse("alpha"), "en").term_units(["alpha", "beta"]) == ([0, 2], [1.0, 1.0], 2.0)  # no index: each weighs 1


def test_a_merged_paragraph_shows_the_line_of_its_rarest_word_and_common_words_merge_none():
    """A question's "the" on every line of a paragraph neither merges it nor makes regions of its lines: the region is
    the line holding "revenue". Lines that each hold a telling word ("budget") merge, and the region's text starts at
    the line holding the rarest ("revenue"), not at the paragraph's first line."""
    from localgpt_index.index.text.engine import LexicalIndex, LexicalPage
    from localgpt_index.index.text.lexicon import QueryAnalysis

    lines = [["the", f"w{n}a", f"w{n}b", f"w{n}c", f"w{n}d", f"w{n}e", f"w{n}f", f"w{n}g", f"w{n}h"] for n in range(6)]
    lines[4][3] = "revenue"
    text, words = _words(lines)
    index = LexicalIndex.create(languages=["en"])
    others = [LexicalPage(f"/o{n}.pdf", 1, "the cat" + " budget" * (n < 2)) for n in range(5)]
    index.update([], [LexicalPage("/a.pdf", 1, text), *others])
    [region] = page_text_regions(QueryAnalysis(index, "What was the revenue?").page("/a.pdf", 1), words)
    assert region.matched == ("the", "revenue") and region.text == " ".join(lines[4])
    assert region.bbox[1] == pytest.approx(0.25, abs=1e-4) and region.bbox[3] == pytest.approx(0.27, abs=1e-4)  # its line's box

    for line in lines:
        line[1] = "budget"  # held by this page and two of the five others: telling, lighter than "revenue"
    text, words = _words(lines)
    index.update(["/a.pdf"], [LexicalPage("/a.pdf", 1, text)])
    [region] = page_text_regions(QueryAnalysis(index, "the budget revenue").page("/a.pdf", 1), words)
    assert region.matched == ("the", "budget", "revenue") and region.bbox[1] == pytest.approx(0.05, abs=1e-4)  # the paragraph's box
    assert region.text == "… " + " ".join(lines[4]) + " " + " ".join(lines[5])  # from "revenue"'s line, as many lines as fit
    # an earlier "revenue" the positions have no box for (a word poppler gave no line) is no line's
    lines[2][8] = "revenue"  # (its line's last word: the line is not cut where it is missing)
    text, words = _words(lines)
    words.lines[words.lines.tolist().index(2) + 8] = NO_LINE
    index.update(["/a.pdf"], [LexicalPage("/a.pdf", 1, text)])
    [region] = page_text_regions(QueryAnalysis(index, "the budget revenue").page("/a.pdf", 1), words)
    assert region.text.startswith("… " + " ".join(lines[4]))
    # a prefix weighs as much as the rarest word: the word's line still comes first
    lines[1][5] = "alphabet"
    text, words = _words(lines)
    index.update(["/a.pdf"], [LexicalPage("/a.pdf", 1, text)])
    [region] = page_text_regions(QueryAnalysis(index, "the budget revenue alph*").page("/a.pdf", 1), words)
    assert region.matched == ("the", "budget", "revenue", "alph*") and region.text.startswith("… the budget w2b")


def test_a_region_s_text_is_its_first_lines_that_fit_or_a_long_line_around_its_match():
    from localgpt_index.index.text.regions import BEFORE, REGION_WORDS

    prose = [[f"w{line}x{word}" for word in range(10)] + ["budget"] for line in range(8)]  # one block, every line matching
    text, words = _words(prose)
    [region] = _regions(text, words, QueryTerms(parse("budget"), None))
    fit = REGION_WORDS // 11  # whole lines of 11 words
    assert region.text == " ".join(" ".join(line) for line in prose[:fit]) + " …"
    assert region.bbox[3] == pytest.approx(0.05 * 8 + 0.02, abs=1e-4)  # the box is still the whole block's
    long_line = [f"v{word}" for word in range(3 * REGION_WORDS)]
    long_line[2 * REGION_WORDS] = "budget"
    text, words = _words([long_line])
    [region] = _regions(text, words, QueryTerms(parse("budget"), None))
    shown = region.text.split()
    assert shown[0] == shown[-1] == "…" and len(shown) == REGION_WORDS + 2 and shown[1 + BEFORE] == "budget"
    text, words = _words([["budget", *long_line[:REGION_WORDS]]])  # the match first: cut at the end only
    assert _regions(text, words, QueryTerms(parse("budget"), None))[0].text.split()[::REGION_WORDS] == ["budget", "…"]
    text, words = _words([[*long_line[:REGION_WORDS + 8], "budget"]])  # the match last: the line's last words
    assert _regions(text, words, QueryTerms(parse("budget"), None))[0].text.split() == ["…", *long_line[9: REGION_WORDS + 8], "budget"]
    text, words = _words([[*long_line[:REGION_WORDS], "budget"], ["budget", "again"]])  # a long first line of two
    assert _regions(text, words, QueryTerms(parse("budget"), None))[0].text.split()[-3:] == [long_line[REGION_WORDS - 1], "budget", "…"]


def _build(docs: Path, index: Path, model: Path, *args: str) -> None:
    result = run_cli("build", str(docs), "--index-dir", str(index), "--model", str(model), *args)
    assert result.exit_code == 0, result.stderr


def _fact_pdf(path: Path) -> None:
    make_pdf(path, ["Quarterly summary", "Net revenue grew twelve percent"])


def test_a_text_query_gives_the_line_of_its_terms_and_verify_checks_the_positions(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _fact_pdf(docs / "report.pdf")
    _build(docs, index, fake_model)
    [hits] = open_index(index).search("revenue grew", regions=True, mode="text", k=2)
    top = hits[0]
    assert (Path(top.path).name, top.page) == ("report.pdf", 2)
    assert top.regions[0].source == "text" and top.regions[0].matched == ("revenue", "grew")
    assert top.regions[0].text == "Net revenue grew twelve percent"
    # docgen draws the title at (72, 700) in 28 pt Helvetica-Bold on a letter page
    x0, y0, x1, y1 = top.regions[0].bbox
    assert x0 == pytest.approx(72 / 612, abs=0.01) and y0 < (792 - 700) / 792 < y1
    assert all(not hit.regions for hit in open_index(index).search("revenue grew", mode="text", k=2)[0])  # not asked: none
    # what a query derives from a page's words is kept for the last DERIVED pages handed out only
    searcher = open_index(index)
    searcher.search("revenue grew", regions=True, mode="text", k=2)
    positions, doc = searcher.view.artifact("words"), searcher.view.documents[0]
    positions.CACHED = 0  # no segment kept: a page handed out is still the same object, with what was derived
    first = positions.page(doc, 2)  # the top hit's
    assert set(first.derived) == {"line_pieces"}  # from the query (its lexicon: the text index keeps it)
    positions.DERIVED = 1
    assert positions.page(doc, 1) is not first and not first.derived
    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0
    blob = next((index / "default" / "artifacts").glob("*.wordsz"))
    flip_byte(blob, blob.stat().st_size // 2)
    result = run_cli("verify", "--index-dir", str(index))
    assert result.exit_code != 0 and "words part" in result.stdout + result.stderr


def test_word_positions_let_go_of_the_least_recently_used_segment_and_place_only_pages_asked_for(fake_model, tmp_path, monkeypatch):
    """Three segments (a build each), two kept: a segment used again stays, the one used least long ago goes
    (not every segment at once), a page asked again is not decoded again, and only the pages asked for are placed."""
    import localgpt_index.index.text.words as words_module

    docs, index = tmp_path / "docs", tmp_path / "idx"
    for name in ("a", "b", "c"):
        make_pdf(docs / f"{name}.pdf", [f"Page one of {name}", "Net revenue grew"])
        _build(docs, index, fake_model)
    view = open_index(index).view
    positions, docs_by_name = view.artifact("words"), {Path(doc.path).stem: doc for doc in view.documents}
    assert len({doc.spans[0].segment for doc in docs_by_name.values()}) == 3
    read: list[str] = []
    real, real_placed, placed = words_module.read_words_part, words_module._placed, []
    monkeypatch.setattr(words_module, "read_words_part", lambda ref, source: (read.append(ref.blobs[0]), real(ref, source))[1])
    monkeypatch.setattr(words_module, "_placed", lambda *args: (placed.append(1), real_placed(*args))[1])
    positions.CACHED = 2
    asked = [positions.page(docs_by_name[name], page) for name, page in (("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 1))]
    assert len(read) == 3  # a, b, c: a was used after b, so c let b go, and a's second page was in a's part
    assert asked[4] is asked[0]  # handed out before: the same page, with what was derived from it
    assert all(page.lines.base is None and page.blocks.base is None for page in asked)  # a page kept holds no segment's arrays
    positions.page(docs_by_name["b"], 2)
    assert len(read) == 4  # b was let go
    assert len(placed) == 5  # a page's words are placed when it is asked for, not with the rest of its segment's


def test_an_index_without_positions_answers_without_text_regions(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    _fact_pdf(docs / "report.pdf")
    from localgpt_index.index.text import artifact as text_module
    from localgpt_index.index.text.artifact import LexicalArtifact, TextArtifact

    with artifacts_plugged(TextArtifact(), LexicalArtifact(), unplugged=(text_module,)):  # as before word positions
        _build(docs, index, fake_model)
    assert not list((index / "default" / "artifacts").glob("*.wordsz"))
    searcher = open_index(index)
    request = QueryRequest(queries=["revenue grew"], regions=True, mode="text", k=2)
    [hits] = searcher.search(request)
    assert hits and all(not hit.regions for hit in hits)
    _, notes = query_answer(searcher, request, [hits])  # what `query` prints beside its answer
    assert any("`lgpt-index upgrade` adds them" in text for _, text in notes)


@pytest.mark.slow  # two builds, one into an in-process Qdrant: several seconds
def test_local_and_qdrant_stores_give_the_same_regions(fake_model, tmp_path):
    from localgpt_index.index.open import open_store

    docs = tmp_path / "docs"
    _fact_pdf(docs / "report.pdf")
    make_pdf(docs / "other.pdf", ["Revenue notes", "Costs grew as well"])
    _build(docs, tmp_path / "idx", fake_model)
    qdrant = f"qdrant+path://{tmp_path / 'qd'}/docs"
    result = run_cli("build", str(docs), "--store", qdrant, "--model", str(fake_model))
    assert result.exit_code == 0, result.stderr
    queries = ["revenue grew", "costs", "quarterly summary"]
    local = open_index(tmp_path / "idx").search(queries, regions=True, mode="text", k=4)
    store = open_store(qdrant)
    try:
        remote = open_index(store=store).search(queries, regions=True, mode="text", k=4)
    finally:
        store.close()
    assert [[(Path(h.path).name, h.page, h.regions) for h in hits] for hits in local] == \
        [[(Path(h.path).name, h.page, h.regions) for h in hits] for hits in remote]
    assert any(hit.regions for hits in local for hit in hits)


@pytest.mark.slow  # poppler and Tesseract on a dozen pages: several seconds
def test_the_top_text_region_is_the_planted_facts_line(fake_model, tmp_path):
    """Asked by the fact's words, or in a question whose "the" and "in" every page of the set holds (they merged the
    scanned pages' paragraphs into one region: 3 of 16 scanned facts' lines were found so)."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    facts = make_region_set(docs)
    assert {fact.scanned for fact in facts} == {True, False}
    _build(docs, index, fake_model, "--ocr", "auto")
    for form in ("{}", "Where is the {} in the document?"):
        results = open_index(index).search([form.format(fact.query) for fact in facts], regions=True, mode="text", k=3)
        found = {True: [], False: []}
        for fact, hits in zip(facts, results):
            hit = next((h for h in hits if Path(h.path).name == fact.file and h.page == fact.page), None)
            top = hit.regions[0] if hit is not None and hit.regions and hit.regions[0].source == "text" else None
            found[fact.scanned].append(top is not None and iou(top.bbox, fact.box) >= 0.5)
        layer, scanned = sum(found[False]) / len(found[False]), sum(found[True]) / len(found[True])
        assert layer >= 0.95, f"{form}: text-layer facts found: {sum(found[False])} of {len(found[False])}"
        assert scanned >= 0.85, f"{form}: scanned facts found: {sum(found[True])} of {len(found[True])}"


@pytest.mark.slow  # Tesseract on a few scanned pages, in a later generation: several seconds
def test_text_read_later_lands_its_word_positions_with_it(fake_model, tmp_path, monkeypatch):
    monkeypatch.setenv("LGPT_OCR", "auto")  # (the suite's default is never)
    docs, index = tmp_path / "docs", tmp_path / "idx"
    facts = [fact for fact in make_region_set(docs) if fact.file == "photo.png"]
    for other in docs.iterdir():
        if other.name != "photo.png":
            other.unlink()
    _build(docs, index, fake_model, "--ocr", "later")
    queries = [fact.query for fact in facts]
    assert all(not hits for hits in open_index(index).search(queries, regions=True, mode="text", k=1))  # pending: no text yet
    result = run_cli("build", "--text-only", "--index-dir", str(index))
    assert result.exit_code == 0, result.stderr
    results = open_index(index).search(queries, regions=True, mode="text", k=1)
    tops = [hits[0].regions[0].bbox if hits and hits[0].regions else None for hits in results]
    assert sum(top is not None and iou(top, fact.box) >= 0.5 for top, fact in zip(tops, facts)) >= len(facts) - 1


def test_upgrade_reads_the_positions_an_older_index_lacks(fake_model, tmp_path):
    from localgpt_index.index.text import artifact as text_module
    from localgpt_index.index.text.artifact import LexicalArtifact, TextArtifact

    docs, index = tmp_path / "docs", tmp_path / "idx"
    _fact_pdf(docs / "report.pdf")
    with artifacts_plugged(TextArtifact(), LexicalArtifact(), unplugged=(text_module,)):  # as before word positions
        _build(docs, index, fake_model)
    result = run_cli("upgrade", "--index-dir", str(index))
    assert result.exit_code == 0, result.stderr
    assert "word positions read for 2 pages in 1 segments" in result.stderr
    [hits] = open_index(index).search("revenue grew", regions=True, mode="text", k=1)
    assert hits[0].regions[0].text == "Net revenue grew twelve percent"
    assert "nothing to upgrade" in run_cli("upgrade", "--index-dir", str(index)).stderr
    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0


def test_the_page_lexicon_finds_every_token_that_analysing_each_token_finds():
    """Matching looks only at the tokens holding a part that begins with a term's start (a range of the page's
    sorted parts): it finds what analysing every token of the page finds, inflections whose stem changes the
    word's last letter, codes typed glued and prefixes among them."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from localgpt_index.index.text.tokenize import exact_tokens, stems

    vocabulary = ["happy", "happiness", "happier", "plans", "planning", "Café", "cafe", "INV-2024-0042", "inv20240042",
                  "(budget,", "budgets.", "turbine/turbo", "v1.3", "Müller", "muller", "run", "runs", "a", "x"]
    words = st.lists(st.one_of(st.sampled_from(vocabulary), st.text(alphabet="abcpy1-.", min_size=1, max_size=6)), max_size=30)
    queries = st.lists(st.sampled_from(["happiness", "happy", "plan", "cafe", "inv20240042", "2024", "budget", "turb*", "v1.3",
                                        "muller", "running", "pa*", "b1"]), min_size=1, max_size=3)

    @settings(max_examples=300, deadline=None)
    @given(words, queries, st.sampled_from([None, "en"]))
    @example(["happy", "happiness"], ["happiness"], "en")  # "happi": a stem that is no start of "happy"
    def same(tokens, query, language):
        text = " ".join(tokens)
        parsed = parse(" ".join(query), ["en"])
        every: dict[str, set[int]] = {}
        for index, token in enumerate(text.split()):  # each token analysed: its exact parts, their stems, the prefixes
            parts = exact_tokens(token)
            found = {part for part in parts if part in parsed.exact}
            found |= {stem for stem in stems([p for p in parts if p not in parsed.exact], language)
                      if stem in {*parsed.stemmed, *parsed.exact}}
            found |= {f"{prefix}*" for prefix in parsed.prefixes if any(part.startswith(prefix) for part in parts)}
            for term in found:
                every.setdefault(term, set()).add(index)
        assert QueryTerms(parsed, language).matches(page_lexicon(text)).found == every

    same()


def test_a_page_met_before_is_not_read_again_and_a_new_generation_s_text_is_read_anew():
    from localgpt_index.index.text.engine import LexicalIndex, LexicalPage
    from localgpt_index.index.text.lexicon import QueryAnalysis

    index = LexicalIndex.create()
    index.update([], [LexicalPage("/a.pdf", 1, "alpha beta gamma"), LexicalPage("/a.pdf", 2, "")])
    reads = []
    reading = index.page_text
    index.page_text = lambda path, page: reads.append((path, page)) or reading(path, page)  # type: ignore[method-assign]  # counted
    first = index.page_lexicon("/a.pdf", 1)
    assert first is not None and first.tokens == ["alpha", "beta", "gamma"] and reads == [("/a.pdf", 1)]
    assert index.page_lexicon("/a.pdf", 1) is first and len(reads) == 1  # kept: not read again
    analysis = QueryAnalysis(index, "gamma")
    assert analysis.page("/a.pdf", 1) is analysis.page("/a.pdf", 1)  # a query's matches on a page: worked out once
    assert analysis.page("/a.pdf", 1).found == {"gamma": {2}} and len(reads) == 1
    assert index.page_lexicon("/a.pdf", 2).tokens == [] and index.page_lexicon("/a.pdf", 3) is None  # no text; not in the index
    index.update(["/a.pdf"], [LexicalPage("/a.pdf", 1, "delta")])  # (a writer's copy: its next generation)
    assert index.page_lexicon("/a.pdf", 1).tokens == ["delta"] and reads[-1] == ("/a.pdf", 1)


def test_a_reader_keeps_the_lexicons_of_the_pages_it_met_last_within_a_count_and_a_size(monkeypatch):
    from localgpt_index.index.text import engine

    index = engine.LexicalIndex.create()
    index.update([], [engine.LexicalPage("/a.pdf", page, f"page {page} " + "word " * 10 * page) for page in range(1, 5)])
    monkeypatch.setattr(engine, "LEXICONS_KEPT", 2)
    first = index.page_lexicon("/a.pdf", 1)
    index.page_lexicon("/a.pdf", 2)
    assert index.page_lexicon("/a.pdf", 1) is first  # used again: the last met now
    index.page_lexicon("/a.pdf", 3)  # the page met longest ago (2) goes
    assert index.page_lexicon("/a.pdf", 1) is first and index.page_lexicon("/a.pdf", 2) is not None
    assert set(index._lexicons) == {("/a.pdf", 1), ("/a.pdf", 2)}
    monkeypatch.setattr(engine, "LEXICON_CHARS_KEPT", len(index.page_text("/a.pdf", 4)) + 10)
    index.page_lexicon("/a.pdf", 4)  # the largest: the others go to make room for it
    assert set(index._lexicons) == {("/a.pdf", 4)} and index._kept_chars == len(index.page_text("/a.pdf", 4))
