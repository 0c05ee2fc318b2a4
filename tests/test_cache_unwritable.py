"""docs/integrity.md and building.md: lgpt-index's user cache (weight digests, the checked-record key) is only
a cache: where it cannot be written, build and query work as before, without caching."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli
from helpers import make_pdfs, verify_ok


@pytest.fixture(scope="module")
def module_caches() -> dict[str, str | None]:
    """The caches a module fixture's builds and servers would write to."""
    return {name: os.environ.get(name) for name in ("XDG_CACHE_HOME", "HF_HOME")}


def test_the_suites_module_fixtures_write_no_user_cache(module_caches, tmp_path_factory):
    """Module and session fixtures run before a test's own isolated_env (tests/conftest.py): their caches are the
    session's, under the suite's temporary folder, not the user's ~/.cache (visual priors, weight digests)."""
    base = tmp_path_factory.getbasetemp()
    for name, folder in module_caches.items():
        assert folder is not None and Path(folder).is_relative_to(base), (name, folder)


def test_the_suites_environment_drops_the_users_index_settings(tmp_path):
    """What the session's fixtures and each test start from (conftest.isolate): a shell's LGPT_INDEX_DIR would have
    a module fixture's build write into the user's own index."""
    from conftest import isolate

    with pytest.MonkeyPatch.context() as patch:
        for name in ("LGPT_INDEX_DIR", "LGPT_INDEX_NAME", "LGPT_MODEL"):
            patch.setenv(name, "the user's")
        patch.delenv("HF_HUB_OFFLINE", raising=False)
        isolate(patch, tmp_path)
        assert not {"LGPT_INDEX_DIR", "LGPT_INDEX_NAME", "LGPT_MODEL"} & set(os.environ)
        assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["XDG_CACHE_HOME"] == str(tmp_path / "cache")


def test_a_cache_folder_that_cannot_be_created_only_means_no_caching(fake_model, tmp_path, monkeypatch):
    from localgpt_index.core import files
    from localgpt_index.index.local import checked

    # tests run as root, which ignores permission bits: a folder under a regular file can never be created
    (tmp_path / "file.txt").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file.txt" / "sub"))
    monkeypatch.setattr(files, "RACY_NS", 0)  # the model and the index are seconds old: have every cache write attempted
    monkeypatch.setattr(checked, "RACY_NS", 0)
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdfs(docs, 2, 1)
    for new in (2, 1):  # the second build checks the first's files, which it would have recorded, and adds one
        result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--json")
        assert result.exit_code == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert json.loads(result.stdout)["indexed"] == new, result.stdout
        make_pdfs(docs, 1, 1, stem="later")
    found = run_cli("query", "report 1 page 0", "-k", "3", "--index-dir", str(index), "--json")
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout)
    verify_ok(index)
    assert not (tmp_path / "file.txt" / "sub").exists()
