"""`export` never destroys what it should not: the index, the current folder, an earlier export."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from docgen import make_pdf
from helpers import build_ok

pytestmark = pytest.mark.slow  # torch.save writes byaldi's files


@pytest.fixture
def indexed(tmp_path, monkeypatch) -> Path:
    from localgpt_index.testing.fake import write_fake_checkpoint

    model = write_fake_checkpoint(tmp_path / "fake-colpali")  # byaldi loads only names with "colpali"
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["a", "b"])
    monkeypatch.chdir(tmp_path)
    build_ok(str(docs), "--model", str(model))
    return tmp_path


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("target", [".", ".lgpt-index", ".lgpt-index/default", ".lgpt-index/default/segments", ".."])
def test_export_refuses_the_index_and_the_current_folder(indexed, target):
    before = _tree(indexed / ".lgpt-index")
    result = run_cli("export", target, "--force")
    assert result.exit_code == 2 and "refused" in result.stderr, result.stderr
    assert _tree(indexed / ".lgpt-index") == before
    assert run_cli("verify").exit_code == 0


def test_force_replaces_only_an_earlier_export(indexed):
    other = indexed / "photos"
    other.mkdir()
    (other / "holiday.jpg").write_bytes(b"not an export")
    result = run_cli("export", str(other), "--force")
    assert result.exit_code == 2 and "only an earlier byaldi export" in result.stderr
    assert (other / "holiday.jpg").read_bytes() == b"not an export"


def test_a_failed_export_leaves_the_earlier_one_as_it_was(indexed, monkeypatch):
    out = indexed / "exported"
    assert run_cli("export", str(out)).exit_code == 0
    before = _tree(out)
    monkeypatch.setenv("LGPT_FAILPOINT", "export-write:1:enospc")
    failed = run_cli("export", str(out), "--force")
    assert failed.exit_code == 1 and "No space left on device" in failed.stderr and "untouched" in failed.stderr
    assert _tree(out) == before
    assert not [p for p in indexed.iterdir() if p.name.startswith(".exported.")]  # no half-written folder left
    monkeypatch.delenv("LGPT_FAILPOINT")
    assert run_cli("export", str(out), "--force").exit_code == 0
    assert os.listdir(out)
