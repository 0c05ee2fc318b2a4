"""Trading indexes with byaldi 0.0.7: its own from_index loads our export; ours imports its index."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from docgen import make_pdf, make_png

pytestmark = pytest.mark.slow  # the real-component tier

QUERIES = ["q3 revenue", "invoice total", "market overview"]


@pytest.fixture(scope="module")
def indexed(tiny_model, corpus, tmp_path_factory):
    root, _ = corpus
    work = tmp_path_factory.mktemp("byaldi-format")
    os.environ["HF_HUB_OFFLINE"] = "1"
    rules = work / "meta.json"
    rules.write_text(json.dumps({"reports/*": {"team": "finance"}}))
    assert run_cli("build", str(root), "--model", str(tiny_model), "--metadata", str(rules),
                   "--index-dir", str(work / "idx")).exit_code == 0
    return work


def _bf16_step(score: float) -> float:
    """The spacing of bfloat16 numbers around `score`: byaldi scores in bfloat16."""
    return 2.0 ** (np.floor(np.log2(abs(score))) - 7)


def test_byaldi_loads_and_searches_our_export(indexed):
    from byaldi import RAGMultiModalModel

    from localgpt_index.query.search import open_index

    out = indexed / "exported" / "lgpt"
    result = run_cli("export", str(out), "--format", "byaldi", "--with-images", "--dpi", "30", "--index-dir", str(indexed / "idx"))
    assert result.exit_code == 0, result.stderr
    rag = RAGMultiModalModel.from_index("lgpt", index_root=str(out.parent), device="cpu", verbose=0)
    index = open_index(indexed / "idx")
    assert len(rag.model.indexed_embeddings) == index.page_count
    assert len(rag.model.collection) == index.page_count  # the page images came along
    names = rag.model.doc_ids_to_file_names
    for query in QUERIES:
        theirs = rag.search(query, k=index.page_count)
        # our scorer on byaldi's own query vectors: the only difference left is byaldi's bfloat16 arithmetic
        ours = index.search_vectors([rag.model.encode_query(query).float().numpy()[0]], k=index.page_count)[0]
        our_score = {(h.path, h.page): h.score for h in ours}
        ranked = [(names[r.doc_id], r.page_num) for r in theirs]
        assert sorted(ranked) == sorted(our_score)
        for r, key in zip(theirs, ranked):
            assert abs(r.score - our_score[key]) <= 2 * _bf16_step(r.score)
        # same order, except between pages whose scores byaldi's bfloat16 cannot tell apart
        for i, a in enumerate(ranked):
            for b in ranked[i + 1:]:
                if our_score[b] - our_score[a] > 4 * _bf16_step(our_score[a]):
                    pytest.fail(f"byaldi puts {a} before {b} although ours scores it clearly lower")
        top = [(h.path, h.page) for h in ours[:3]]
        if ours[2].score - ours[3].score > 4 * _bf16_step(ours[2].score):
            assert set(ranked[:3]) == set(top)
    finance = rag.search("revenue", k=20, filter_metadata={"team": "finance"})
    assert finance and {Path(names[r.doc_id]).parent.name for r in finance} == {"reports"}


def test_export_refuses_a_non_empty_folder(indexed, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    result = run_cli("export", str(tmp_path / "busy"), "--index-dir", str(indexed / "idx"))
    assert result.exit_code == 2 and "--force" in result.stderr


def test_import_an_index_byaldi_built(tiny_model, tmp_path):
    import torch
    from byaldi import RAGMultiModalModel

    docs = tmp_path / "docs"
    make_pdf(docs / "a-report.pdf", ["Quarterly revenue", "Costs"])
    make_png(docs / "b-scan.png", "Invoice 42")
    rag = RAGMultiModalModel.from_pretrained(str(tiny_model), device="cpu", verbose=0, index_root=str(tmp_path / "byaldi"))
    rag.index(input_path=str(docs), index_name="theirs", metadata=[{"src": "pdf"}, {"src": "scan"}], overwrite=True)

    result = run_cli("import", str(tmp_path / "byaldi" / "theirs"), "--format", "byaldi",
                     "--index-dir", str(tmp_path / "idx"), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["documents"], report["pages"]) == (2, 3)

    from localgpt_index.query.search import open_index

    index = open_index(tmp_path / "idx")
    by_name = {Path(d.path).name: d for d in index.documents}
    assert by_name["a-report.pdf"].pages == 2 and by_name["b-scan.png"].kind == "image"
    # byaldi gives the metadata list in the order it walks the folder (the file system's order): each document
    # keeps what byaldi gave it
    doc_ids = {Path(name).name: doc_id for doc_id, name in rag.model.doc_ids_to_file_names.items()}
    assert {name: by_name[name].metadata for name in doc_ids} == {name: rag.model.doc_id_to_metadata[doc_id]
                                                                  for name, doc_id in doc_ids.items()}
    assert sorted(d.metadata["src"] for d in index.documents) == ["pdf", "scan"]
    theirs = [t.to(torch.float32).numpy() for t in rag.model.indexed_embeddings]
    vectors, offsets = index.store.segment_arrays(next(iter(index.manifest.segments.values())))
    ours = [np.asarray(vectors[offsets[p] : offsets[p + 1]], dtype=np.float32) for p in range(3)]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, atol=1e-3)
    # the real files are there: a build of the same folder finds them unchanged and embeds nothing
    again = json.loads(run_cli("build", str(docs), "--index-dir", str(tmp_path / "idx"), "--json").stdout)
    assert again["unchanged"] == 2 and again["model_calls"] == 0
    query = run_cli("query", "revenue", "--index-dir", str(tmp_path / "idx"), "--json")
    assert query.exit_code == 0 and len(json.loads(query.stdout)["queries"][0]["results"]) == 3
