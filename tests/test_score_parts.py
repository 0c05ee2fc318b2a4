"""An exact pass scores two parts at once on the CPU scorer (LocalView.score_units): the next part is
scored while the one before is, with the same scores as one part after the other."""

from __future__ import annotations

import numpy as np
from conftest import run_cli
from docgen import make_pdf
from helpers import first_part_held_until_a_second_starts


def test_an_exact_pass_scores_the_next_part_while_the_one_before_is_scored(fake_model, tmp_path, monkeypatch):
    from localgpt_index.index.local.segments import SegmentFiles
    from localgpt_index.index.view import LocalView
    from localgpt_index.query.search import open_index

    docs, root = tmp_path / "docs", tmp_path / "idx"
    for number in range(3):
        make_pdf(docs / f"doc-{number}.pdf", [f"page {number} {p}" for p in range(3)])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(root)).exit_code == 0
    monkeypatch.setattr(SegmentFiles, "GROUP_BYTES", 1)  # a part a page
    index = open_index(root)
    queries = index.load_encoder().encode_queries(["page 1 2", "doc 0"])
    units = index.view.exact_units()
    one_by_one = np.concatenate([index.view.score_unit(queries, unit) for unit in units], axis=1)
    with monkeypatch.context() as patch:
        patch.setattr(LocalView, "parts_in_flight", lambda self, device="cpu": 1)
        expected = [[(h.path, h.page, h.score) for h in hits] for hits in index.search_vectors(queries, 3)]

    started = first_part_held_until_a_second_starts(monkeypatch)
    scores = np.concatenate(index.view.score_units(queries, units), axis=1)
    assert len(units) == 9 and started == units
    assert np.array_equal(scores, one_by_one)
    hits = index.search_vectors(queries, 3)  # the pass a query takes goes through score_units
    assert len(started) == 2 * len(units) and [[(h.path, h.page, h.score) for h in q] for q in hits] == expected
