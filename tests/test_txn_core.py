"""What the local and Qdrant transactions share (index/transaction.py): one message for a failed write,
the same manifest assembly. Black-box through the CLI."""

from __future__ import annotations

import pytest

from conftest import run_cli
from docgen import make_png


def _store(kind: str, tmp_path) -> list[str]:
    if kind == "local":
        return ["--index-dir", str(tmp_path / "idx")]
    return ["--store", f"qdrant+path://{tmp_path / 'qd'}/notes"]


@pytest.mark.parametrize("kind", ["local", "qdrant"])
def test_a_full_disk_on_a_first_build_says_the_index_keeps_no_generation_and_what_to_do(kind, fake_model, tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    make_png(docs / "scan.png", "a scan")
    monkeypatch.setenv("LGPT_FAILPOINT", "before-head:1:enospc")
    result = run_cli("build", str(docs), "--model", str(fake_model), *_store(kind, tmp_path))
    assert result.exit_code == 1, result.stderr
    assert "No space left on device" in result.stderr
    assert "the index keeps no generation (it is still empty)" in result.stderr
    assert "Free some space and run the command again" in result.stderr
    assert "Traceback" not in result.stderr
    monkeypatch.delenv("LGPT_FAILPOINT")
    assert run_cli("build", str(docs), "--model", str(fake_model), *_store(kind, tmp_path)).exit_code == 0
