"""`lgpt-index eval --synthesize N`: known-item questions drawn from the index's own page text, no hand-written
answers; the same seed draws the same questions, and text mode finds their pages."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from docgen import make_pdf
from helpers import build_ok

PAGES = ["Müller GmbH invoices the Zürich café for espresso machines", "Late payment penalties apply after thirty days",
         "The pump station near Lake Orrin failed its pressure test", "Parental leave lasts sixteen weeks for every parent",
         "Crème brûlée is served at the Société Générale canteen", "Señora Núñez approved the Málaga warehouse lease"]


def synthesized(*args: str) -> dict:
    result = run_cli("eval", "--synthesize", "12", "--json", "--per-query", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_synthesized_questions_are_reproducible_and_text_finds_their_pages(tmp_path, fake_model):
    for number, text in enumerate(PAGES):
        make_pdf(tmp_path / "docs" / f"doc-{number}.pdf", [text, PAGES[(number + 1) % len(PAGES)] + " in brief"])
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model))
    first, again, other = synthesized("--seed", "3"), synthesized("--seed", "3"), synthesized("--seed", "4")
    asked = {run["mode"]: [q["query"] for q in run["per_query"]] for run in first["runs"]}
    assert set(asked) == {"visual", "text", "hybrid"} and len(asked["text"]) == 12 == first["queries"]
    assert asked["text"] == [q["query"] for q in again["runs"][1]["per_query"]]  # the same seed, the same questions
    assert asked["text"] != [q["query"] for q in other["runs"][1]["per_query"]]
    text = next(run for run in first["runs"] if run["mode"] == "text")
    assert text["measures"]["recall@5"] >= 0.95, text["measures"]
    grouped = json.loads(run_cli("eval", "--synthesize", "12", "--seed", "3", "--json", "--modes", "text",
                                 "--group-by", "spelling").stdout)
    assert set(grouped["runs"][0]["groups"]) == {"exact", "unaccented", "inflected", "dropped"}


def test_synthesize_or_a_query_set_one_of_them(tmp_path, fake_model):
    make_pdf(tmp_path / "docs" / "one.pdf", [PAGES[0]])
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model))
    both = run_cli("eval", "queries.jsonl", "--synthesize", "3")
    assert both.exit_code != 0 and "one of them" in both.stderr
    assert run_cli("eval").exit_code != 0


def test_against_exact_reports_how_much_of_the_exact_top_a_first_pass_keeps(tmp_path, fake_model):
    for number in range(8):
        make_pdf(tmp_path / "docs" / f"doc-{number}.pdf", [PAGES[number % len(PAGES)] + f" part {number}", "Notes and figures"])
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model))
    result = run_cli("eval", "--synthesize", "10", "--against", "exact", "--first-pass", "2", "--json")
    assert result.exit_code == 0, result.stderr
    runs = {run["first_pass"]: run["measures"]["recall@10"] for run in json.loads(result.stdout)["runs"]}
    assert runs[None] == 1.0 and runs[2] < 0.5, runs  # exact keeps all of itself; a first pass of 2 pages, at most 2 of 10


@pytest.mark.slow  # --pool-factor pools with torch: the real-component tier
def test_against_exact_judges_a_pooled_index_by_the_unpooled_one_beside_it(tmp_path, fake_model):
    for number in range(8):
        make_pdf(tmp_path / "docs" / f"doc-{number}.pdf", [PAGES[number % len(PAGES)] + f" part {number}", "Notes and figures"])
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model), "--name", "plain")
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model), "--name", "pooled", "--pool-factor", "4")

    def recall(*args: str) -> tuple[float, str]:
        result = run_cli("eval", "--synthesize", "10", "--against", "exact", "--json", *args)
        assert result.exit_code == 0, result.stderr
        document = json.loads(result.stdout)
        return document["runs"][0]["measures"]["recall@10"], document["query_set"]

    itself, _ = recall("--name", "pooled")
    judged, source = recall("--name", "pooled", "--reference", "plain")
    plain, _ = recall("--name", "plain", "--reference", "plain")
    assert itself == plain == 1.0 and judged < 1.0 and source.endswith("judged by the exact top 10 of index plain"), (judged, source)
    alone = run_cli("eval", "--synthesize", "10", "--reference", "plain")
    assert alone.exit_code == 2 and "--against exact" in alone.stderr
