"""docs/index-format.md: scoring is exact MaxSim; ties go to the earlier path, then the earlier page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from conftest import run_cli
from docgen import make_pdf


def test_equal_scores_are_ordered_by_path_then_page(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    first = make_pdf(docs / "zeta.pdf", ["the same page"] * 3)  # three equal pages: equal vectors, equal scores
    # the later path is indexed first (the manifest lists it first): its order must not decide the ties
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    (docs / "mid").mkdir()
    for copy in (docs / "mid" / "copy.pdf", docs / "alpha.pdf"):  # the same bytes under other names: the same vectors
        shutil.copyfile(first, copy)
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    result = run_cli("query", "the same page", "-k", "9", "--mode", "visual", "--index-dir", str(index), "--json", "--all-copies")
    assert result.exit_code == 0, result.stderr
    hits = json.loads(result.stdout)["queries"][0]["results"]
    names = ("alpha.pdf", "mid/copy.pdf", "zeta.pdf")
    found = [(-hit["score"], Path(hit["path"]).relative_to(docs).as_posix(), hit["page"]) for hit in hits]
    assert len({score for score, _, _ in found}) == 3 and found == sorted(found), found  # each page's score: three equal hits
    assert [name for _, name, _ in found] == list(names) * 3, found
    # without --all-copies, the copies are one hit each page: the earliest path, naming the others
    collapsed = json.loads(run_cli("query", "the same page", "-k", "9", "--mode", "visual", "--index-dir", str(index), "--json").stdout)
    assert [(Path(hit["path"]).name, hit["page"], [Path(p).relative_to(docs).as_posix() for p in hit["copies"]])
            for hit in collapsed["queries"][0]["results"]] == [("alpha.pdf", page, ["mid/copy.pdf", "zeta.pdf"])
                                                               for _, _, page in found[::3]]
    # equal pages of one document: the ranking itself, given nine equal scores
    from localgpt_index.query.search import open_index

    view = open_index(index).view
    table = view.all_pages()
    [ranked] = view.rank_scores(np.zeros((1, 9), dtype=np.float32), view.manifest.documents, 9, table)
    assert [(Path(hit.path).relative_to(docs).as_posix(), hit.page) for hit in ranked] == [
        (name, page) for name in names for page in (1, 2, 3)]
