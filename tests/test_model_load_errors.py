"""A model folder that cannot be loaded (issue 24): pickled code in a `.bin` without safetensors, a
config that claims another family, weights whose shapes do not match the config, no weights at
all. Each stops `build`, `query` and `serve` with one message naming the folder and the reason,
exit 4, and no traceback. Real-component tier: tiny checkpoints from localgpt_index.testing.checkpoints."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import copy_tree, run_cli, run_process
from docgen import make_pdf
from helpers import build_ok

pytestmark = pytest.mark.slow  # the real-component tier

REVISION = "3" * 40

# what each broken folder must be told apart by, in the message
REASONS = {
    "pickle": "pickled weights (*.bin) hold more than tensors",
    "family": "cannot be loaded as ColQwen2",
    "width": "the shapes of its weights do not match the widths its config.json declares",
    "none": "no weights: no *.safetensors or *.bin file",
}


class _RunsCode:
    """What a hostile pickle holds: unpickling it would create a folder (no shell involved)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def _break(good: Path, folder: Path, how: str) -> Path:
    """A copy of the tiny checkpoint, broken one way."""
    import torch

    copy_tree(good, folder)
    if how == "pickle":  # a pickle that would run code, and no safetensors beside it
        (folder / "model.safetensors").unlink()
        torch.save({"weight": _RunsCode(folder.parent / f"{folder.name}-pwned")}, folder / "pytorch_model.bin")
    elif how == "family":  # the config claims ColQwen2; the files are ColPali's
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "architectures": ["ColQwen2"], "model_type": "qwen2_vl"}))
    elif how == "width":  # the config says 128 wide, the weights are 64
        config = json.loads((folder / "config.json").read_text())
        config["text_config"]["hidden_size"] = 128
        (folder / "config.json").write_text(json.dumps(config))
    elif how == "none":
        (folder / "model.safetensors").unlink()
    return folder


@pytest.fixture(scope="module")
def broken(tiny_model, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("broken")
    return {how: _break(tiny_model, root / f"{how}-colpali", how) for how in REASONS}


def _assert_one_message(stderr: str, folder: Path, how: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert f"model {folder}" in stderr and REASONS[how] in stderr, stderr
    assert not (folder.parent / f"{folder.name}-pwned").exists()  # no pickled code ran


@pytest.mark.parametrize("how", list(REASONS))
def test_build_with_a_broken_model_says_why_and_exits_4(broken, how, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["revenue"])
    result = run_cli("build", str(docs), "--model", str(broken[how]), "--index-dir", str(tmp_path / "idx"), "--device", "cpu")
    assert result.exit_code == 4, result.stderr
    _assert_one_message(result.stderr, broken[how], how)
    assert "hint: Point --model at a complete checkpoint" in result.stderr
    assert not (tmp_path / "idx" / "default" / "HEAD").exists()


def test_build_in_its_own_process_prints_no_traceback(broken, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["revenue"])
    result = run_process("build", str(docs), "--model", str(broken["pickle"]), "--index-dir", str(tmp_path / "idx"),
                         "--device", "cpu")
    assert result.returncode == 4
    _assert_one_message(result.stderr, broken["pickle"], "pickle")


def _index_on_a_cached_snapshot(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """An index built with a hub model whose cached snapshot (named by its revision, so known by it)
    is then damaged: queries reach the loader with a model that passes the identity check."""
    import huggingface_hub.constants

    from localgpt_index.testing.fake import write_fake_checkpoint

    hub = tmp_path / "hf-home" / "hub"
    repo = hub / "models--acme--retriever"
    snapshot = write_fake_checkpoint(repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))  # read at import; processes read HF_HOME
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "a.pdf", ["revenue"])
    build_ok(str(docs), "--model", "acme/retriever", "--index-dir", str(index))
    return snapshot, index


@pytest.mark.parametrize("how", list(REASONS))
def test_query_with_a_damaged_cached_model_says_why_and_exits_4(broken, how, tmp_path, monkeypatch):
    snapshot, index = _index_on_a_cached_snapshot(tmp_path, monkeypatch)
    shutil.rmtree(snapshot)
    copy_tree(broken[how], snapshot)

    result = run_cli("query", "revenue", "--index-dir", str(index), "--device", "cpu")
    assert result.exit_code == 4, result.stderr
    _assert_one_message(result.stderr, snapshot, how)
    assert f"hf download acme/retriever --revision {REVISION}" in result.stderr  # the way to repair the cache
    assert result.stdout == ""


def test_serve_with_a_damaged_cached_model_says_why_and_exits_4(broken, tmp_path, monkeypatch):
    snapshot, index = _index_on_a_cached_snapshot(tmp_path, monkeypatch)
    shutil.rmtree(snapshot)
    copy_tree(broken["width"], snapshot)

    result = run_process("serve", "--port", "0", "--index-dir", str(index), "--device", "cpu", timeout=90)
    assert result.returncode == 4, result.stderr
    _assert_one_message(result.stderr, snapshot, "width")
