"""`build --ray local`: a real local Ray cluster on this machine, the same index as a plain build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import copy_tree, faulty_model, run_cli
from docgen import make_pdf, make_pdf_of_shapes, make_png
from helpers import build_ok, descendants, held_build, make_pdfs

pytestmark = pytest.mark.slow  # a real Ray cluster, real LibreOffice


def _catalog(index: Path) -> dict[str, tuple]:
    from localgpt_index.query.search import open_index

    opened = open_index(index)
    return {d.path: (d.pages, d.sha256, d.kind, d.converter) for d in opened.documents}


def _vectors(index: Path) -> dict[tuple[str, int], np.ndarray]:
    from localgpt_index.query.search import open_index

    opened = open_index(index)
    return {(d.path, page): vectors.astype(np.float32) for d in opened.documents
            for page, vectors in enumerate(opened.view.page_vectors(d), 1)}


def test_ray_builds_the_same_index_as_a_plain_build(fake_model, corpus, tmp_path):
    root, _ = corpus
    docs = copy_tree(root, tmp_path / "docs")
    make_pdf(docs / "long.pdf", [f"long page {p}" for p in range(20)])  # several chunks
    plain, distributed = tmp_path / "plain", tmp_path / "ray"
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(plain))
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(distributed), "--ray", "local", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["indexed"] == 7 and report["failed"] == 0 and report["model_calls"] > 0
    assert _catalog(distributed) == _catalog(plain)
    ours, theirs = _vectors(distributed), _vectors(plain)
    assert ours.keys() == theirs.keys()
    assert max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours) <= 1e-3
    assert run_cli("verify", "--index-dir", str(distributed)).exit_code == 0

    again = run_cli("build", str(docs), "--index-dir", str(distributed), "--ray", "local", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["pages_embedded"] == 0  # incremental: nothing embedded


@pytest.mark.parametrize("family", ["colqwen2_5", "colidefics3"], ids=["pixel-budget", "long-side"])
def test_a_dynamic_resolution_family_through_ray_equals_a_plain_build(family, tmp_path):
    """Pages of every shape rendered by Ray tasks at the family's sizes: the same vectors."""
    from localgpt_index.testing.checkpoints import make_family_checkpoint

    model = make_family_checkpoint(tmp_path / family, family)
    docs = tmp_path / "docs"
    make_pdf_of_shapes(docs / "shapes.pdf")
    make_png(docs / "scan.png", "scan", size=(500, 300))
    plain, distributed = tmp_path / "plain", tmp_path / "ray"
    build_ok(str(docs), "--model", str(model), "--index-dir", str(plain))
    result = run_cli("build", str(docs), "--model", str(model), "--index-dir", str(distributed), "--ray", "local", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["failed"] == 0
    ours, theirs = _vectors(distributed), _vectors(plain)
    assert ours.keys() == theirs.keys() and len(ours) == 6
    assert all(ours[k].shape == theirs[k].shape for k in ours)  # the same image tokens a page
    assert max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours) <= 1e-3


def test_a_worker_killed_mid_build_loses_and_duplicates_nothing(tmp_path):
    docs = tmp_path / "docs"
    make_pdfs(docs, 6, 6)
    make_png(docs / "scan.png", "scan")
    slow = faulty_model(tmp_path / "slow-model", seconds_per_page=0.15)
    plain = tmp_path / "plain"
    build_ok(str(docs), "--model", str(slow), "--index-dir", str(plain))
    index = tmp_path / "ray"
    release = tmp_path / "release"  # the build holds at its second encoded batch until this file exists
    proc = held_build(["build", str(docs), "--model", str(slow), "--index-dir", str(index), "--ray", "local",
                       "--commit-every", "8", "--json"], release, "encode", nth=2)
    workers = descendants(proc.pid, "EncoderWorker")  # this build's actors, not another test's
    assert workers
    for worker in workers:
        worker.kill()
    release.touch()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["failed"] == 0
    assert _catalog(index) == _catalog(plain)
    ours, theirs = _vectors(index), _vectors(plain)
    assert ours.keys() == theirs.keys() and all(np.array_equal(ours[k], theirs[k]) for k in ours)
    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0


def test_without_ray_the_option_names_the_extra(fake_model, tmp_path):
    blocker = tmp_path / "no-ray" / "ray"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('Ray is not installed here')\n")
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["a"])
    env = {**os.environ, "PYTHONPATH": f"{blocker.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-m", "localgpt_index", "build", str(docs), "--model", str(fake_model),
                             "--index-dir", str(tmp_path / "idx"), "--ray", "local"], capture_output=True, text=True, env=env)
    assert result.returncode == 4 and "lgpt-index[ray]" in result.stderr and "Traceback" not in result.stderr


def test_ray_into_a_qdrant_store(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdfs(docs, 3, 3)
    make_png(docs / "scan.png", "scan")
    plain = ["--index-dir", str(tmp_path / "plain")]
    store = ["--store", f"qdrant+path://{tmp_path / 'qd'}/docs"]
    build_ok(str(docs), "--model", str(fake_model), *plain)
    result = run_cli("build", str(docs), "--model", str(fake_model), "--ray", "local", *store)
    assert result.exit_code == 0, result.stderr
    answers = [json.loads(run_cli("query", "report", "-k", "20", "--json", *where).stdout)["queries"][0]["results"]
               for where in (plain, store)]
    assert [(h["path"], h["page"]) for h in answers[0]] == [(h["path"], h["page"]) for h in answers[1]]
    assert run_cli("verify", *store).exit_code == 0
