"""`query --mode hybrid|visual|text` end to end through the CLI, the server and the Python API."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli, validate
from helpers import report_index as build_report_index


@pytest.fixture(scope="module")
def visual_only(fake_model, tmp_path_factory):
    """An index whose generation holds no page text (as built before page text existed)."""
    return build_report_index(tmp_path_factory.mktemp("visual"), fake_model, reports=3, pages=2)


def test_an_index_without_text_answers_visual_and_refuses_text_modes(visual_only):
    index = ["--index-dir", str(visual_only["index"])]
    answered = run_cli("query", "quarterly report", "--json", *index)
    assert answered.exit_code == 0, answered.stderr
    document = json.loads(answered.stdout)
    validate(document, "query")
    assert document["mode"] == "visual" and "fusion" not in document
    assert all("snippet" not in hit and "text_rank" not in hit for hit in document["results"])
    for mode in ("text", "hybrid"):
        refused = run_cli("query", "quarterly report", "--mode", mode, *index)
        assert refused.exit_code == 1
        assert f"holds no page text, so --mode {mode} cannot answer" in refused.stderr
        assert "--mode visual" in refused.stderr and "Traceback" not in refused.stderr
    bad = run_cli("query", "x", "--mode", "lexical", *index)
    assert bad.exit_code == 2 and "lexical" in bad.stderr
