"""Issue 27's corpus measurement: 40 documents of four kinds with planted facts (tests/corpus27.py), built
with the random-weight tiny checkpoint and OCR on, evaluated by the real `lgpt-index eval` command."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import run_process

import corpus27

MODES = ["--modes", "visual,text,hybrid", "--fusions", "weighted,rrf", "--group-by", "category"]


def table(document: dict) -> str:
    """recall@5 of each run, overall and per category, side by side (docs/hybrid.md records it)."""
    rows = [f"{'run':<16}{'all':>7}" + "".join(f"{c:>12}" for c in corpus27.CATEGORIES)]
    for run in document["runs"]:
        name = run["mode"] + (f" ({run['fusion']})" if run["fusion"] else "")
        rows.append(f"{name:<16}{run['measures']['recall@5']:>7.2f}"
                    + "".join(f"{run['groups'][c]['measures']['recall@5']:>12.2f}" for c in corpus27.CATEGORIES))
    return "\n".join(rows)


@pytest.mark.slow
def test_text_finds_planted_facts_in_every_kind_of_document_and_hybrid_keeps_it(tmp_path, tiny_model):
    if not shutil.which("tesseract"):
        pytest.fail("Tesseract is not installed (scripts/bootstrap.sh installs it)")
    queries = corpus27.write(tmp_path)
    docs = [p for p in (tmp_path / "docs").rglob("*") if p.is_file()]
    assert len(docs) >= 40 and {p.suffix for p in docs} == {".pdf", ".docx", ".pptx", ".png"}
    for scan in (tmp_path / "docs" / "scans").glob("*.pdf"):  # the scanned category is OCR's: no text layer
        assert subprocess.run(["pdftotext", str(scan), "-"], capture_output=True, text=True).stdout.strip() == "", scan

    built = run_process("build", "docs", "--model", str(tiny_model), "--ocr", "auto", cwd=tmp_path, timeout=900)
    assert built.returncode == 0, built.stderr
    result = run_process("eval", "queries.jsonl", "--json", *MODES, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["queries"] == len(queries) == 40 and document["unanswerable"] == []
    print("\nrecall@5 (the fact's page in the top 5), 40 questions, 10 per category\n" + table(document))

    runs = {(run["mode"], run["fusion"]): run for run in document["runs"]}
    text = runs[("text", None)]
    for category in corpus27.CATEGORIES:
        assert text["groups"][category]["queries"] == 10
        assert text["groups"][category]["measures"]["recall@5"] >= 0.9, (category, table(document))
    assert runs[("hybrid", "weighted")]["measures"]["recall@5"] >= 0.8, table(document)
