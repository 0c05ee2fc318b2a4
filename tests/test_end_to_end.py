"""build -> query through the real CLI, real LibreOffice, real poppler, real byaldi."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from conftest import copy_tree, poppler_page_count, run_cli, validate

pytestmark = pytest.mark.slow  # the real-component tier

ANSI = re.compile(r"\x1b\[")


@pytest.fixture(scope="module")
def built(tiny_model, corpus, tmp_path_factory):
    """One build of the mixed corpus, shared by the tests of this module."""
    root, files = corpus
    work = tmp_path_factory.mktemp("e2e")
    docs = copy_tree(root, work / "docs")
    an_hour_ago = time.time() - 3600
    for path in docs.rglob("*"):  # documents as users have them: not written within the last tick
        os.utime(path, (an_hour_ago, an_hour_ago), follow_symlinks=False)
    before = _tree_state(docs)
    index_dir = work / "index"
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        result = run_cli("build", str(docs), "--model", str(tiny_model), "--index-dir", str(index_dir), "--json")
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE")
    return {"docs": docs, "files": files, "index_dir": index_dir, "result": result, "before": before, "root": root}


def _tree_state(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_build_indexes_every_page_exactly_once(built):
    result = built["result"]
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    validate(report, "build")
    assert report["documents_seen"] == 6 and report["indexed"] == 6 and report["failed"] == 0

    from localgpt_index.query.search import open_index

    index = open_index(built["index_dir"])
    docs = {Path(d.path).relative_to(built["docs"]).as_posix(): d for d in index.documents}
    assert sorted(docs) == sorted(p.relative_to(built["root"]).as_posix() for p in built["files"].values())
    for rel, doc in docs.items():
        if doc.kind == "image":
            expected = 1
        elif doc.kind == "pdf":
            expected = poppler_page_count(built["docs"] / rel)
        else:  # converted: compare with poppler's count of the very PDF that was rendered
            assert doc.pdf, rel
            expected = poppler_page_count(index.store.root / doc.pdf)
        assert doc.pages == expected, rel
    assert docs["reports/annual-report.pdf"].pages == 3
    assert docs["slides/deck.pptx"].pages == 3
    assert docs["reports/memo.docx"].pages == 2
    assert report["pages_total"] == report["pages_embedded"] == sum(d.pages for d in docs.values())
    # every page has its own vectors: one offsets entry per page in the segments
    assert sum(s.pages for s in index.manifest.segments.values()) == report["pages_total"]


def test_build_writes_nothing_into_the_documents_folder(built):
    assert _tree_state(built["docs"]) == built["before"]


def test_build_stderr_has_no_colour_codes_when_not_a_tty(built):
    assert not ANSI.search(built["result"].stderr)
    assert "6 indexed" in built["result"].stderr


def test_query_json_returns_k_valid_results(built):
    result = run_cli("query", "q3 revenue", "-k", "4", "--index-dir", str(built["index_dir"]), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document, "query")
    hits = document["queries"][0]["results"]
    assert [h["rank"] for h in hits] == [1, 2, 3, 4]
    assert all(a["score"] >= b["score"] for a, b in zip(hits, hits[1:]))
    from localgpt_index.query.search import open_index

    pages = {d.path: d.pages for d in open_index(built["index_dir"]).documents}
    for hit in hits:
        assert Path(hit["path"]).exists()
        assert 1 <= hit["page"] <= pages[hit["path"]]
    assert len({(h["path"], h["page"]) for h in hits}) == 4


def test_query_several_texts_and_table_output(built):
    result = run_cli("query", "revenue", "invoice total", "-k", "2", "--index-dir", str(built["index_dir"]), "--json")
    document = json.loads(result.stdout)
    validate(document, "query")
    assert [q["query"] for q in document["queries"]] == ["revenue", "invoice total"]
    assert "results" not in document and all(len(q["results"]) == 2 for q in document["queries"])

    table = run_cli("query", "revenue", "-k", "3", "--index-dir", str(built["index_dir"]), "--format", "table")
    assert table.exit_code == 0
    assert table.stdout.count("│") >= 3 * 4 and not ANSI.search(table.stdout)


def test_queries_file_and_missing_query(built, tmp_path):
    queries = tmp_path / "queries.txt"
    queries.write_text("revenue\n\ninvoice total\n")
    result = run_cli("query", "first", "--queries-file", str(queries), "-k", "1", "--index-dir", str(built["index_dir"]), "--json")
    assert [q["query"] for q in json.loads(result.stdout)["queries"]] == ["first", "revenue", "invoice total"]
    empty = run_cli("query", "--index-dir", str(built["index_dir"]))
    assert empty.exit_code == 2 and "no query: give TEXT or --queries-file." in empty.stderr
    (tmp_path / "blank.txt").write_text("\n  \n")
    blank = run_cli("query", "--queries-file", str(tmp_path / "blank.txt"), "--index-dir", str(built["index_dir"]))
    assert blank.exit_code == 2 and f"no query: --queries-file {tmp_path / 'blank.txt'} holds none" in blank.stderr


def test_status_json(built):
    result = run_cli("status", "--index-dir", str(built["index_dir"]), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document, "status")
    from localgpt_index.models.device import choose_precision, detect_capabilities

    # the probe's choice here: float32, or bfloat16 on a CPU with AMX or AVX512-BF16
    assert document["documents"] == 6 and document["settings"]["dtype"] == choose_precision(detect_capabilities()).dtype
    assert document["model"]["dim"] == 128 and document["settings"]["vector_dtype"] == "float16"


def test_second_build_of_unchanged_folder_does_no_model_work(built, tiny_model):
    result = run_cli("build", str(built["docs"]), "--index-dir", str(built["index_dir"]), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["unchanged"] == 6 and report["indexed"] == 0 and report["model_calls"] == 0
    assert "up to date" in result.stderr


def test_query_with_another_model_is_refused(built, tmp_path):
    from localgpt_index.testing.checkpoints import make_checkpoint

    other = make_checkpoint(tmp_path / "other-colpali", "tiny", seed=1)
    result = run_cli("query", "revenue", "--model", str(other), "--index-dir", str(built["index_dir"]))
    assert result.exit_code == 1
    assert "built with" in result.stderr and "--rebuild" in result.stderr


def test_metadata_rules_and_filters(corpus, tiny_model, tmp_path):
    root, _ = corpus
    rules = tmp_path / "meta.json"
    rules.write_text(json.dumps({"reports/*": {"team": "finance"}, "*.pptx": {"kind": "slides", "team": "sales"}}))
    index = ["--index-dir", str(tmp_path / "idx")]
    built = run_cli("build", str(root), "--model", str(tiny_model), "--metadata", str(rules), *index)
    assert built.exit_code == 0, built.stderr

    def hits(*filters):
        args = [x for f in filters for x in ("--filter", f)]
        out = run_cli("query", "revenue", "-k", "50", *args, "--json", *index)
        assert out.exit_code == 0, out.stderr
        document = json.loads(out.stdout)
        validate(document, "query")
        return document["queries"][0]["results"]

    finance = hits("team=finance")
    assert {Path(h["path"]).name for h in finance} == {"annual-report.pdf", "memo.docx"} and len(finance) == 5
    assert all(h["metadata"]["team"] == "finance" for h in finance)
    assert {Path(h["path"]).name for h in hits("team=sales", "kind=slides")} == {"deck.pptx"}
    assert hits("team=nobody") == []

    csv_rules = tmp_path / "meta.csv"
    csv_rules.write_text("glob,team\nscans/*,ops\n")
    again = run_cli("build", str(root), "--metadata", str(csv_rules), "--json", *index)
    report = json.loads(again.stdout)
    assert report["model_calls"] == 0 and report["generation"] == 2  # metadata alone: a new generation, no model work
    assert {Path(h["path"]).name for h in hits("team=ops")} == {"receipt.png"}
    assert hits("team=finance") == []


def test_export_pages_and_images_in_json(built, tmp_path):
    import base64
    import io

    from PIL import Image

    out = tmp_path / "pages"
    result = run_cli("query", "revenue", "q3", "-k", "20", "--export-pages", str(out), "--dpi", "40", "--with-images",
                     "--json", "--index-dir", str(built["index_dir"]))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document, "query")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [q["query"] for q in manifest["queries"]] == ["revenue", "q3"]
    for query_json, query_manifest in zip(document["queries"], manifest["queries"]):
        for hit_json, hit_file in zip(query_json["results"], query_manifest["results"]):
            assert (hit_json["path"], hit_json["page"]) == (hit_file["path"], hit_file["page"])
            on_disk = Image.open(out / hit_file["image"])
            inline = Image.open(io.BytesIO(base64.b64decode(hit_json["image_base64"])))
            assert on_disk.size == inline.size and on_disk.size[0] > 50
            if hit_json["kind"] == "pdf":  # the corpus PDF has letter pages: 340 x 440 at 40 dpi
                assert on_disk.size == (340, 440)
    kinds = {h["kind"] for q in manifest["queries"] for h in q["results"]}
    assert kinds == {"pdf", "office", "markdown", "image"}  # every page of the corpus, every way of rendering it
    plain = run_cli("query", "revenue", "--json", "--index-dir", str(built["index_dir"]))
    assert "image_base64" not in plain.stdout
