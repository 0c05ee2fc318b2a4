"""The index protocols (index/protocols.py) are what both backends implement: the type checker says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLANTED = '''
from localgpt_index.index.protocols import Store
from localgpt_index.index.store import IndexStore


class Drifted(IndexStore):
    def verify(self, full: bool) -> list[str]:  # a required argument the protocol does not pass
        return []


def planted(store: Drifted) -> Store:
    return store
'''


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
    """No module of index/ over 400 lines, no class over 200, no function over 60 (issue 25)."""
    from helpers import size_problems

    index = ROOT / "localgpt_index" / "index"
    assert size_problems(sorted(index.rglob("*.py")), index) == []

