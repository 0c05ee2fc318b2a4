"""The index protocols (index/protocols.py) are what both backends implement: the type checker says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PLANTED = '''
from localgpt_index.index.protocols import Store
from localgpt_index.index.local.store import LocalStore


class Drifted(LocalStore):
    def verify(self, full: bool) -> list[str]:  # a required argument the protocol does not pass
        return []


def planted(store: Drifted) -> Store:
    return store
'''


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_both_stores_fit_the_protocols_and_a_drifted_store_does_not(tmp_path):
    planted = tmp_path / "planted_drift.py"
    planted.write_text(PLANTED)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports", "--no-incremental",
         "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), "localgpt_index/index/conformance.py", str(planted)],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert not [line for line in lines if "conformance.py" in line], result.stdout
    assert any(planted.name in line and "Store" in line for line in lines), result.stdout + result.stderr


def test_the_index_modules_keep_the_size_limits():
    """No module of index/ over 800 lines, no function over 60 (issue 40)."""
    from helpers import size_problems

    index = ROOT / "localgpt_index" / "index"
    assert size_problems(sorted(index.rglob("*.py")), index) == []



LOCAL_SCORING = ("_table", "_codes", "_first_pass", "_rank")  # the local view's scoring state and steps


def test_the_qdrant_view_shares_the_generation_view_and_carries_no_local_scoring(fake_model, tmp_path):
    """Both views hold what every view shares (GenerationView) and every member of the View protocol;
    only the local view carries the local scoring (its page table, the codes' first pass, the exact ranking)."""
    import numpy as np

    from docgen import make_pdf
    from helpers import build_ok
    from localgpt_index.index import protocols
    from localgpt_index.index.open import open_store
    from localgpt_index.index.qdrant.view import QdrantView
    from localgpt_index.index.view import GenerationView, LocalView

    make_pdf(tmp_path / "docs" / "report.pdf", ["quarterly report", "market outlook"])
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"))
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model), "--store", url)
    local_store, qdrant_store = open_store(index_dir=tmp_path / "idx"), open_store(url)
    try:
        local, qdrant = local_store.open_view(), qdrant_store.open_view()
        assert type(local) is LocalView and type(qdrant) is QdrantView
        assert isinstance(local, GenerationView) and isinstance(qdrant, GenerationView)
        assert not isinstance(qdrant, LocalView)
        members = set(protocols.View.__annotations__) | {n for n in vars(protocols.View) if not n.startswith("_")}
        for view in (local, qdrant):
            assert all(hasattr(view, name) for name in members), sorted(n for n in members if not hasattr(view, n))
            assert view.page_count == 2 and [d.path for d in view.documents] == [str(tmp_path / "docs" / "report.pdf")]
        dim = next(iter(local.manifest.segments.values())).dim
        assert local.search_vectors([np.ones((3, dim), dtype=np.float32)], 1)[0]  # builds the local page table
        assert local._table is not None and hasattr(local, "_first_pass") and hasattr(local, "_rank")
        present = [name for name in LOCAL_SCORING if hasattr(qdrant, name)]
        assert present == [], f"the Qdrant view carries local scoring: {present}"
        # the in-process mode scores exactly, whatever is asked (tests/test_qdrant_quantization.py: a server's first pass)
        assert (local.scoring_path(None).path, qdrant.scoring_path(5).path) == ("exact", "exact")
        assert qdrant.scoring_path(5).hint and qdrant.scoring_path("auto").candidates is None
    finally:
        local_store.close()
        qdrant_store.close()
