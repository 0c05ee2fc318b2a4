"""`lgpt-index eval` on the shipped evaluation set (examples/eval): its numbers equal a second,
independent computation (trec_eval's definitions written out here, and pytrec_eval called directly),
in both query-set formats; malformed query sets are refused naming the line and the reason; modes
are passed to the query layer, and one it cannot answer is refused."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import load_schema, run_cli, validate
from helpers import build_ok

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "eval"
MEASURES = ("ndcg@1", "ndcg@5", "ndcg@10", "recall@1", "recall@5", "recall@10", "recall@100", "mrr@10")


# --- the reference: trec_eval's definitions, written out -------------------------------------------

def ndcg(ranked: list[str], grades: dict[str, int], k: int) -> float:
    """trec_eval's ndcg_cut: gain = the grade (linear), discount log2(rank + 1), ideal from every judgment."""
    dcg = sum(grades.get(page, 0) / math.log2(rank + 1) for rank, page in enumerate(ranked[:k], 1))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    best = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, 1))
    return dcg / best if best else 0.0


def recall(ranked: list[str], grades: dict[str, int], k: int) -> float:
    relevant = {page for page, grade in grades.items() if grade >= 1}
    return len(relevant & set(ranked[:k])) / len(relevant)


def reciprocal_rank(ranked: list[str], grades: dict[str, int], k: int = 10) -> float:
    return next((1 / rank for rank, page in enumerate(ranked[:k], 1) if grades.get(page, 0) >= 1), 0.0)


def reference(qrels: dict[str, dict[str, int]], run: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    each = {}
    for query_id, grades in qrels.items():
        ranked = run.get(query_id, [])
        each[query_id] = {**{f"ndcg@{k}": ndcg(ranked, grades, k) for k in (1, 5, 10)},
                          **{f"recall@{k}": recall(ranked, grades, k) for k in (1, 5, 10, 100)},
                          "mrr@10": reciprocal_rank(ranked, grades)}
    return each


def by_pytrec_eval(qrels: dict[str, dict[str, int]], run: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """pytrec_eval (trec_eval's C code) with its own measure names; MRR@10 as recip_rank of the top 10."""
    import pytrec_eval

    scored = {q: {page: 1.0 / rank for rank, page in enumerate(run.get(q, []), 1)} for q in qrels}
    top10 = {q: {page: 1.0 / rank for rank, page in enumerate(run.get(q, [])[:10], 1)} for q in qrels}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,5,10", "recall.1,5,10,100"}).evaluate(scored)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    names = {"ndcg@1": "ndcg_cut_1", "ndcg@5": "ndcg_cut_5", "ndcg@10": "ndcg_cut_10", "recall@1": "recall_1",
             "recall@5": "recall_5", "recall@10": "recall_10", "recall@100": "recall_100"}
    return {q: {**{ours: full.get(q, {}).get(theirs, 0.0) for ours, theirs in names.items()},
                "mrr@10": rr.get(q, {}).get("recip_rank", 0.0)} for q in qrels}


def mean(each: dict[str, dict[str, float]]) -> dict[str, float]:
    return {m: sum(values[m] for values in each.values()) / len(each) for m in MEASURES}


# --- the shipped set, indexed ----------------------------------------------------------------------

def shipped_qrels() -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The shipped queries (id -> text) and their judgments, page ids "docs/PATH#PAGE" as the file has them."""
    texts, qrels = {}, {}
    for line in (EXAMPLES / "queries.jsonl").read_text().splitlines():
        row = json.loads(line)
        texts[row["id"]] = row["query"]
        qrels[row["id"]] = {f"{j['path']}#{j['page']}": j["grade"] for j in row["relevant"]}
    return texts, qrels


def shipped_categories() -> dict[str, str]:
    return {row["id"]: row["category"] for row in map(json.loads, (EXAMPLES / "queries.jsonl").read_text().splitlines())}


def ranked_by_query(index: Path, texts: dict[str, str], tmp_path: Path, *options: str, base: Path = EXAMPLES) -> dict[str, list[str]]:
    """`lgpt-index query --json -k 100` for every query: its ranking, as page ids relative to the set's folder."""
    (tmp_path / "questions.txt").write_text("\n".join(texts.values()) + "\n")
    result = run_cli("query", "--queries-file", str(tmp_path / "questions.txt"), "-k", "100", "--json",
                     "--index-dir", str(index), *options)
    assert result.exit_code == 0, result.stderr
    answers = json.loads(result.stdout)["queries"]
    return {query_id: [f"{Path(os.path.relpath(hit['path'], base)).as_posix()}#{hit['page']}" for hit in answer["results"]]
            for query_id, answer in zip(texts, answers)}


@pytest.fixture(scope="module")
def shipped_index(tmp_path_factory, fake_model) -> Path:
    """The shipped set's PDFs and PNGs indexed with the fake encoder (its .docx need LibreOffice: slow tier), once a
    module: its tests only read it."""
    index = tmp_path_factory.mktemp("shipped") / "idx"
    build_ok(str(EXAMPLES / "docs"), "--model", str(fake_model), "--index-dir", str(index), "--exclude", "*.docx")
    return index


def eval_json(*args: str) -> dict:
    result = run_cli("eval", *args, "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    validate(document, "eval")
    return document


def assert_same(ours: dict[str, float], theirs: dict[str, float]) -> None:
    assert set(ours) == set(MEASURES)
    for measure in MEASURES:
        assert ours[measure] == pytest.approx(theirs[measure], abs=1e-9), (measure, ours, theirs)


@pytest.mark.slow  # evaluates the shipped set and ranks every question twice: 2.5-3 s, the real-component tier
def test_eval_numbers_equal_an_independent_computation_on_the_shipped_set(shipped_index, tmp_path):
    texts, qrels = shipped_qrels()
    document = eval_json(str(EXAMPLES / "queries.jsonl"), "--index-dir", str(shipped_index), "--per-query", "--first-pass", "4",
                         "--group-by", "category")
    assert [(run["mode"], run["first_pass"]) for run in document["runs"]] == [("hybrid", None), ("hybrid", 4)]  # query's default
    assert document["queries"] == len(texts) and document["depth"] == 100
    # the .docx were left out of this index: their pages are judged, unanswerable, counted as misses
    assert sorted({u["path"] for u in document["unanswerable"]}) == ["docs/office/leave-policy.docx"]
    for run, options in zip(document["runs"], [(), ("--first-pass", "4")]):
        ranked = ranked_by_query(shipped_index, texts, tmp_path, *options)
        by_hand, by_trec = reference(qrels, ranked), by_pytrec_eval(qrels, ranked)
        details = {d["id"]: d for d in run["per_query"]}
        for query_id in texts:
            assert_same(details[query_id]["measures"], by_hand[query_id])
            assert_same(details[query_id]["measures"], by_trec[query_id])
            assert [f"{Path(os.path.relpath(p['path'], EXAMPLES)).as_posix()}#{p['page']}" for p in details[query_id]["top"]] \
                == ranked[query_id][:10]
        assert_same(run["measures"], mean(by_hand))
        assert_same(run["measures"], mean(by_trec))
        categories = shipped_categories()
        assert sorted(run["groups"]) == ["image", "office", "scanned", "text-layer"]
        for category, group in run["groups"].items():
            members = {q: values for q, values in by_hand.items() if categories[q] == category}
            assert group["queries"] == len(members)
            assert_same(group["measures"], mean(members))
    # the set exercises what tells the definitions apart: graded judgments both found, and misses
    exact = {d["id"]: d for d in document["runs"][0]["per_query"]}
    assert 0 < document["runs"][0]["measures"]["ndcg@10"] < 1
    assert any(len(qrels[q]) > 1 and 0 < exact[q]["measures"]["recall@100"] for q in qrels)


def test_the_beir_layout_of_the_set_gives_the_same_numbers(shipped_index):
    jsonl = eval_json(str(EXAMPLES / "queries.jsonl"), "--index-dir", str(shipped_index), "--per-query", "--group-by", "category")
    beir = eval_json(str(EXAMPLES / "beir"), "--index-dir", str(shipped_index), "--per-query", "--group-by", "category")
    assert beir["runs"][0]["groups"] == jsonl["runs"][0]["groups"]
    assert beir["format"] == "beir" and beir["queries"] == jsonl["queries"]
    assert beir["runs"][0]["measures"] == jsonl["runs"][0]["measures"]
    assert [d["measures"] for d in beir["runs"][0]["per_query"]] == [d["measures"] for d in jsonl["runs"][0]["per_query"]]


def test_the_table_for_people_and_the_warning_for_pages_the_index_lacks(shipped_index):
    result = run_cli("eval", str(EXAMPLES / "queries.jsonl"), "--index-dir", str(shipped_index), "--per-query",
                     "--format", "table", env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.stderr
    assert "nDCG" in result.stdout and "MRR" in result.stdout and "per query: hybrid" in result.stdout
    assert "invoice-billed" in result.stdout
    assert "3 judged page(s) are not in the index and count as misses" in result.stderr
    assert "docs/office/leave-policy.docx" in result.stderr


def test_the_published_schema_is_current():
    from localgpt_index.evaluate.results import eval_json_schema

    assert load_schema("eval") == eval_json_schema(), "regenerate: python -m localgpt_index.evaluate.results"


# --- malformed query sets: exit 2, the file, the line, the reason ----------------------------------

GOOD = '{"query": "q", "relevant": [{"path": "a.pdf", "page": 1}]}'
BAD_LINES = {
    "not_json": ('{"query": "q", "relevant": [', "line 2: not JSON"),
    "no_query": ('{"relevant": [{"path": "a.pdf", "page": 1}]}', "line 2: query: field required"),
    "no_relevant": ('{"query": "q", "relevant": []}', "line 2: relevant: list should have at least 1 item"),
    "page_zero": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": 0}]}', "line 2: relevant[0].page: input should be greater"),
    "page_text": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": "1"}]}', "relevant[0].page: input should be a valid integer"),
    "negative_grade": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": 1, "grade": -1}]}', "relevant[0].grade"),
    "typo_in_judgment": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": 1, "grdae": 2}]}', "relevant[0].grdae: extra inputs"),
    "nothing_relevant": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": 1, "grade": 0}]}', "line 2: no relevant page"),
    "twice": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": 1}, {"path": "a.pdf", "page": 1}]}', "judged twice"),
    "climbs": ('{"query": "q", "relevant": [{"path": "../a.pdf", "page": 1}]}', "line 2: path '../a.pdf' climbs"),
    "empty_query": ('{"query": " ", "relevant": [{"path": "a.pdf", "page": 1}]}', "line 2: the query is empty"),
    "same_id": ('{"id": 1, "query": "q", "relevant": [{"path": "a.pdf", "page": 1}]}', "line 2: id '1' was already used (.* line 1)"),
    "array": ('[1, 2]', "line 2: expected a JSON object"),
    "lone_surrogate": ('{"query": "caf\\udcff", "relevant": [{"path": "a.pdf", "page": 1}]}', "line 2: the query is not UTF-8"),
    "twice_spelt_two_ways": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": 1}, {"path": "./a.pdf", "page": 1}]}', "judged twice"),
    "page_of_5000_digits": ('{"query": "q", "relevant": [{"path": "a.pdf", "page": ' + "1" * 5000 + '}]}',
                            "line 2: a number with too many"),
}


@pytest.mark.parametrize("line,message", BAD_LINES.values(), ids=BAD_LINES.keys())
def test_a_malformed_line_is_refused_naming_the_line_and_the_reason(tmp_path, line, message):
    import re

    first = GOOD.replace('{"query"', '{"id": 1, "query"') if "already" in message else GOOD
    (tmp_path / "q.jsonl").write_text(first + "\n" + line + "\n")
    result = run_cli("eval", str(tmp_path / "q.jsonl"), "--index-dir", str(tmp_path / "no-index-needed"))
    assert result.exit_code == 2, result.stdout + result.stderr
    pattern = message if ".*" in message else re.escape(message)  # the same_id case is a pattern, the others text
    assert re.search(pattern, result.stderr.replace("\n", " "), re.IGNORECASE), result.stderr
    assert "q.jsonl" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("content,message", [
    ("", "no queries (an empty query set)"),
    ("\n  \n", "no queries (an empty query set)"),
    (b"\xff\xfe{}", "not UTF-8"),
], ids=["empty", "blank", "binary"])
def test_an_empty_or_unreadable_set_is_refused(tmp_path, content, message):
    path = tmp_path / "q.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = run_cli("eval", str(path), "--json")
    assert result.exit_code == 2 and message in result.stderr
    assert json.loads(result.stdout)["error"]["kind"] == "usage"


def _beir(tmp_path: Path, corpus: str, qrels: str) -> Path:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(corpus)
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "first"}\n{"_id": "q2", "text": "second"}\n')
    (folder / "qrels" / "test.tsv").write_text(qrels)
    return folder


@pytest.mark.parametrize("corpus,qrels,message", [
    ('{"_id": "a.pdf#1"}\n', "query-id\tcorpus-id\tscore\nq1\tb.pdf#1\t1\n", "test.tsv line 2: corpus id 'b.pdf#1' is not in corpus.jsonl"),
    ('{"_id": "a.pdf#1"}\n', "q9\ta.pdf#1\t1\n", "test.tsv line 1: query 'q9' is not in queries.jsonl"),
    ('{"_id": "a.pdf#1"}\n', "q1\ta.pdf#1\n", "test.tsv line 1: expected 3 tab-separated fields"),
    ('{"_id": "a.pdf#1"}\n', "q1\ta.pdf#1\thigh\n", "test.tsv line 1: score 'high' is not a whole number"),
    ('{"_id": "a.pdf"}\n', "q1\ta.pdf\t1\n", "corpus.jsonl line 1: corpus id 'a.pdf' names no page"),
    ('{"_id": "c1", "path": "a.pdf"}\n', "q1\tc1\t1\n", "corpus.jsonl line 1: `path` and `page` go together"),
    ('{"_id": "a.pdf#1"}\n', "q1\ta.pdf#1\t0\n", "no query with a relevant page"),
    ('{"_id": "a.pdf#\u00b2"}\n', "q1\ta.pdf#\u00b2\t1\n", "corpus.jsonl line 1: corpus id 'a.pdf#\u00b2' names no page"),
    ('{"_id": "a.pdf#1"}\n', "q1\ta.pdf#1\t1_0\n", "test.tsv line 1: score '1_0' is not a whole number"),
    ('{"_id": "a.pdf#1"}\n', "q1\ta.pdf#1\t\u0661\n", "test.tsv line 1: score '\u0661' is not a whole number"),
    ('{"_id": "a.pdf#1"}\n', "q1\ta.pdf#1\t" + "1" * 5000 + "\n", "test.tsv line 1: score '111"),
    ('{"_id": "a.pdf#' + "1" * 5000 + '"}\n', "q1\ta.pdf#1\t1\n", "corpus.jsonl line 1: corpus id 'a.pdf#111"),
], ids=["unknown_corpus_id", "unknown_query", "two_fields", "score_text", "id_without_page", "path_without_page", "none_relevant",
        "page_superscript", "score_underscore", "score_arabic_digit", "score_5000_digits", "page_5000_digits"])
def test_a_malformed_beir_folder_is_refused_naming_the_file_and_line(tmp_path, corpus, qrels, message):
    result = run_cli("eval", str(_beir(tmp_path, corpus, qrels)))
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr.replace("\n", " "), result.stderr


def test_a_folder_that_is_not_beir_names_what_it_lacks_and_the_splits_it_has(tmp_path):
    folder = _beir(tmp_path, '{"_id": "a.pdf#1"}\n', "q1\ta.pdf#1\t1\n")
    (folder / "qrels" / "test.tsv").rename(folder / "qrels" / "dev.tsv")
    result = run_cli("eval", str(folder))
    assert result.exit_code == 2 and "not a BEIR folder: no qrels/test.tsv" in result.stderr and "dev" in result.stderr
    assert run_cli("eval", str(folder), "--split", "dev", "--index-dir", str(tmp_path / "none")).exit_code == 1  # parsed; no index


@pytest.mark.parametrize("args,message", [
    (["--modes", "visual,lexical"], "unknown name 'lexical'"),
    (["--modes", ","], "no name"),
    (["--modes", "text", "--first-pass", "10"], "--first-pass narrows the visual list"),
    (["--modes", "visual", "--fusions", "rrf"], "add hybrid to --modes"),
    (["--group-by", "category"], "--group-by category: no query of"),
], ids=["unknown", "none", "first_pass_for_text", "fusion_without_hybrid", "group_by_unknown_key"])
def test_bad_modes_are_usage_errors(tmp_path, args, message):
    (tmp_path / "q.jsonl").write_text(GOOD + "\n")
    result = run_cli("eval", str(tmp_path / "q.jsonl"), *args)
    assert result.exit_code == 2 and message in result.stderr


# --- matching judged paths to the index --------------------------------------------------------------

def test_relative_paths_match_the_end_of_indexed_paths_and_ambiguity_is_an_error(tmp_path, fake_model):
    from docgen import make_pdf

    docs = tmp_path / "docs"
    make_pdf(docs / "2024" / "report.pdf", ["twenty twenty-four"])
    make_pdf(docs / "2025" / "report.pdf", ["twenty twenty-five", "second page"])
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"))
    index = ("--index-dir", str(tmp_path / "idx"))
    rows = [{"id": "by-end", "query": "q", "relevant": [{"path": "2025/report.pdf", "page": 2}]},
            {"id": "absolute", "query": "q", "relevant": [{"path": str(docs / "2024" / "report.pdf"), "page": 1}]},
            {"id": "no-page-3", "query": "q", "relevant": [{"path": "2025/report.pdf", "page": 3}]},
            {"id": "partial-name", "query": "q", "relevant": [{"path": "port.pdf", "page": 1}]}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    document = eval_json(str(tmp_path / "q.jsonl"), *index, "--per-query")
    reasons = {u["query_id"]: u["reason"] for u in document["unanswerable"]}
    assert reasons == {"no-page-3": "the index holds 2 page(s) of it", "partial-name": "not in the index"}
    found = {d["id"]: d["first_relevant"] for d in document["runs"][0]["per_query"]}
    assert found["by-end"] is not None and found["absolute"] is not None  # both matched: retrieved among 3 pages
    assert found["no-page-3"] is None and found["partial-name"] is None

    (tmp_path / "ambiguous.jsonl").write_text(json.dumps({"query": "q", "relevant": [{"path": "report.pdf", "page": 1}]}) + "\n")
    result = run_cli("eval", str(tmp_path / "ambiguous.jsonl"), *index)
    assert result.exit_code == 2
    assert "report.pdf names 2 documents of the index" in result.stderr and "2024/report.pdf" in result.stderr


@pytest.fixture(scope="module")
def two_page_index(fake_model, tmp_path_factory) -> tuple[Path, Path]:
    """docs/a.pdf (2 pages) and docs/b.pdf (1), indexed: (the docs folder, the index)."""
    from docgen import make_pdf

    work = tmp_path_factory.mktemp("eval-spellings")
    make_pdf(work / "docs" / "a.pdf", ["alpha one", "alpha two"])
    make_pdf(work / "docs" / "b.pdf", ["beta"])
    build_ok(str(work / "docs"), "--model", str(fake_model), "--index-dir", str(work / "idx"))
    return work / "docs", work / "idx"


@pytest.mark.parametrize("first,second", [("a.pdf", "ABS"), ("ABS", "a.pdf"), ("docs/a.pdf", "./a.pdf"), ("ABS", "docs//a.pdf")])
def test_a_page_judged_under_two_spellings_is_refused(two_page_index, tmp_path, first, second):
    """Issue 39 #8: two spellings of one indexed page are one page judged twice (else the later grade won,
    judged_pages counted it twice, and nDCG hung on the order of the judgments)."""
    docs, index = two_page_index
    spelt = [str(docs / "a.pdf") if name == "ABS" else name for name in (first, second)]
    row = {"query": "alpha", "relevant": [{"path": spelt[0], "page": 2, "grade": 2}, {"path": spelt[1], "page": 2, "grade": 1},
                                          {"path": "b.pdf", "page": 1}]}
    (tmp_path / "q.jsonl").write_text('{"query": "beta", "relevant": [{"path": "b.pdf", "page": 1}]}\n' + json.dumps(row) + "\n")
    result = run_cli("eval", str(tmp_path / "q.jsonl"), "--index-dir", str(index), "--json")
    assert result.exit_code == 2, result.stdout + result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert "q.jsonl line 2: page 2 of" in message and "judged twice" in message
    assert all(repr(name) in message or name in message for name in spelt), message


def test_a_page_judged_twice_through_two_beir_corpus_ids_names_both_qrels_lines(two_page_index, tmp_path):
    docs, index = two_page_index
    corpus = f'{{"_id": "a.pdf#1"}}\n{{"_id": "x", "path": "{docs / "a.pdf"}", "page": 1}}\n'
    folder = _beir(tmp_path, corpus, "q1\ta.pdf#1\t2\nq1\tx\t1\n")
    result = run_cli("eval", str(folder), "--index-dir", str(index))
    assert result.exit_code == 2, result.stdout + result.stderr
    said = result.stderr.replace("\n", " ")
    assert "judged twice" in said and "test.tsv line 1" in said and "test.tsv line 2" in said, said


def test_line_ends_inside_json_strings_are_text(two_page_index, tmp_path):
    """Issue 39 #7: JSON strings may hold U+2028 and U+0085 raw; lines end at a line feed (CR LF too), only."""
    _, index = two_page_index
    rows = [{"id": "one\u2028two", "query": "alpha\u2028two", "topic": "x\u0085y", "relevant": [{"path": "a.pdf", "page": 2}]},
            {"id": "three\u0085four", "query": "beta\u000bpage", "relevant": [{"path": "b.pdf", "page": 1}]}]
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    (tmp_path / "q.jsonl").write_bytes((lines[0] + "\r\n" + lines[1] + "\n").encode())
    document = eval_json(str(tmp_path / "q.jsonl"), "--index-dir", str(index), "--per-query", "--group-by", "topic")
    assert document["queries"] == 2 and document["judged_pages"] == 2
    assert [q["id"] for q in document["runs"][0]["per_query"]] == ["one\u2028two", "three\u0085four"]
    assert set(document["runs"][0]["groups"]) == {"x\u0085y", "(none)"}


# --- modes go to the query layer ------------------------------------------------------------------

def test_a_mode_is_passed_to_the_query_layer_and_refused_where_it_cannot_answer(shipped_index, tmp_path, fake_model):
    """Each variant's mode, fusion and first pass reach the query layer (the QueryRequest Index.search takes); a mode
    the index cannot answer, or an unknown fusion, is refused by the query layer before any query."""
    from docgen import make_png

    from localgpt_index.core.errors import IndexProblem, UsageError
    from localgpt_index.evaluate.modes import default_modes, variants
    from localgpt_index.evaluate.runner import evaluate
    from localgpt_index.evaluate.queryset import load_query_set
    from localgpt_index.query.search import Searcher, open_index

    query_set = load_query_set(EXAMPLES / "queries.jsonl")
    asked = []

    class Recording(Searcher):
        def search(self, request, **fields):
            asked.append((request.mode, request.fusion, request.k, request.first_pass))
            return super().search(request, **fields)

    index = Recording(open_index(shipped_index).view)
    assert default_modes(index) == ["hybrid"]  # the shipped set's PDFs have a text layer
    document = evaluate(index, query_set, variants(["text", "visual", "hybrid"], [7], ["weighted", "rrf"]))
    assert asked == [("text", "weighted", 100, None), ("visual", "weighted", 100, None), ("visual", "weighted", 100, 7),
                     ("hybrid", "weighted", 100, None), ("hybrid", "weighted", 100, 7), ("hybrid", "rrf", 100, None),
                     ("hybrid", "rrf", 100, 7)]
    assert [(r.mode, r.first_pass, r.fusion) for r in document.runs] == [
        ("text", None, None), ("visual", None, None), ("visual", 7, None), ("hybrid", None, "weighted"), ("hybrid", 7, "weighted"),
        ("hybrid", None, "rrf"), ("hybrid", 7, "rrf")]
    asked.clear()
    with pytest.raises(UsageError, match="hybrid borda.*fusion: Input should be 'weighted' or 'rrf'"):
        evaluate(index, query_set, variants(["visual", "hybrid"], [], ["borda"]))
    pictures = tmp_path / "pictures"
    make_png(pictures / "scan.png", "INV-20471")
    build_ok(str(pictures), "--model", str(fake_model), "--index-dir", str(tmp_path / "visual"), "--text", "never")
    visual = Recording(open_index(tmp_path / "visual").view)
    assert default_modes(visual) == ["visual"]
    with pytest.raises(IndexProblem, match="holds no page text, so --mode text cannot answer"):
        evaluate(visual, query_set, variants(["visual", "text", "hybrid"]))
    assert asked == []


# --- the slow tier: the whole set, LibreOffice and Tesseract -----------------------------------------

@pytest.mark.slow
def test_the_whole_set_builds_and_evaluates_out_of_the_box(tmp_path, tiny_model):
    """As the README has it: build examples/eval/docs (the .docx through LibreOffice), then
    `lgpt-index eval examples/eval/queries.jsonl`: every judged page answerable, numbers as computed here."""
    from conftest import run_process

    work = tmp_path / "repo"
    shutil.copytree(EXAMPLES, work / "examples" / "eval")
    built = run_process("build", "examples/eval/docs", "--model", str(tiny_model), cwd=work, timeout=900)
    assert built.returncode == 0, built.stderr
    result = run_process("eval", "examples/eval/queries.jsonl", "--json", "--per-query", cwd=work, timeout=600)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["unanswerable"] == [] and document["queries"] == 16
    texts, qrels = shipped_qrels()
    ranked = ranked_by_query(work / ".lgpt-index", texts, tmp_path, base=work / "examples" / "eval")
    by_hand = reference(qrels, ranked)
    for detail in document["runs"][0]["per_query"]:
        assert_same(detail["measures"], by_hand[detail["id"]])
    assert_same(document["runs"][0]["measures"], mean(by_hand))


@pytest.mark.slow
def test_ocr_reads_the_planted_facts_of_the_scans_and_pictures(tmp_path):
    """The set is fit for measuring text retrieval: Tesseract reads each image page's facts."""
    import subprocess

    if not shutil.which("tesseract"):
        pytest.fail("Tesseract is not installed (scripts/bootstrap.sh installs it)")
    facts = {"scans/lease-kestrel-street.pdf": ["2,350.00", "Dagny Whitcombe", "14B"],
             "scans/delivery-note-DN-5531.pdf": ["DN-5531", "12 pallets", "VX-440"],
             "images/whiteboard-sprint-42.png": ["PostgreSQL 16", "Tomasz Wieczorek"],
             "images/label-ZX-9310-B.png": ["ZX-9310-B", "77812"]}
    for name, expected in facts.items():
        source = EXAMPLES / "docs" / name
        assert subprocess.run(["pdftotext", str(source), "-"], capture_output=True, text=True).stdout.strip() == "" \
            if source.suffix == ".pdf" else True, f"{name} must have no text layer"
        if source.suffix == ".pdf":
            subprocess.run(["pdftoppm", "-r", "300", "-gray", "-png", str(source), str(tmp_path / source.stem)], check=True)
            source = next(tmp_path.glob(f"{source.stem}*.png"))
        text = subprocess.run(["tesseract", str(source), "-"], capture_output=True, text=True, check=True).stdout
        assert all(fact in text for fact in expected), (name, text)


@pytest.mark.slow  # no slow component, but two seconds of image work: the generator is checked in the slow tier
def test_the_committed_set_is_what_the_script_writes(tmp_path):
    """scripts/make_eval_set.py writes the committed queries, BEIR files and documents (the binary
    documents compared by name and text layer: their bytes follow the Pillow and FreeType of a machine)."""
    import subprocess

    subprocess.run([sys.executable, str(EXAMPLES.parent.parent / "scripts" / "make_eval_set.py"), str(tmp_path / "out")],
                   check=True, capture_output=True)
    out = tmp_path / "out"
    for name in ("queries.jsonl", "beir/corpus.jsonl", "beir/queries.jsonl", "beir/qrels/test.tsv"):
        assert (out / name).read_text() == (EXAMPLES / name).read_text(), name
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == \
        sorted(p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md")
    for pdf in (EXAMPLES / "docs").rglob("*.pdf"):
        ours = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
        fresh = subprocess.run(["pdftotext", str(out / pdf.relative_to(EXAMPLES)), "-"], capture_output=True, text=True).stdout
        assert ours == fresh, pdf
