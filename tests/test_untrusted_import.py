"""`import --format byaldi` reads an untrusted folder: every field checked, no pickled code run,
bounded decompression; a bad folder is exit 2 with the reason, and nothing is committed."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow  # real torch.load on real byaldi files


def _gz(path: Path, data) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)


def _byaldi_folder(root: Path, pages=None, config=None, embed_map=None, names=None) -> Path:
    """A byaldi 0.0.7 index folder: two documents, three pages of 128-d vectors (`pages`: a function of torch)."""
    import torch

    pages = pages(torch) if pages is not None else [torch.randn(5, 128), torch.randn(6, 128), torch.randn(4, 128)]
    (root / "embeddings").mkdir(parents=True)
    torch.save(pages, root / "embeddings" / "embeddings_0.pt")
    _gz(root / "index_config.json.gz", config if config is not None else {"model_name": "vidore/colpali", "library_version": "0.0.7"})
    _gz(root / "embed_id_to_doc_id.json.gz", embed_map if embed_map is not None else
        {"0": {"doc_id": 0, "page_id": 1}, "1": {"doc_id": 0, "page_id": 2}, "2": {"doc_id": 1, "page_id": 1}})
    _gz(root / "doc_ids_to_file_names.json.gz", names if names is not None else {"0": "a.pdf", "1": "b.pdf"})
    _gz(root / "metadata.json.gz", {})
    return root


def _import(folder: Path, index: Path, model: Path, env: dict | None = None):
    return run_cli("import", str(folder), "--model", str(model), "--index-dir", str(index), "--json", env=env)


def test_a_sound_folder_imports(fake_model, tmp_path):
    result = _import(_byaldi_folder(tmp_path / "ok"), tmp_path / "idx", fake_model)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["pages"] == 3
    assert run_cli("verify", "--index-dir", str(tmp_path / "idx")).exit_code == 0


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {Path.cwd() / 'pwned'}",))


def test_pickled_code_does_not_run_even_when_the_environment_asks_for_it(fake_model, tmp_path):
    folder = _byaldi_folder(tmp_path / "evil", pages=lambda torch: [torch.randn(5, 128), _Payload(), torch.randn(4, 128)])
    result = _import(folder, tmp_path / "idx", fake_model, env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    assert result.exit_code == 2 and "not a file of plain tensors" in result.stderr
    assert not (Path.cwd() / "pwned").exists()


BAD = {
    "config-a-list": (dict(config=["model_name"]), "not a valid byaldi index"),
    "config-without-model": (dict(config={"library_version": "0.0.7"}), "model_name"),
    "id-not-an-integer": (dict(embed_map={"0": {"doc_id": "zero", "page_id": 1}, "1": {"doc_id": 0, "page_id": 2},
                                          "2": {"doc_id": 1, "page_id": 1}}), "doc_id"),
    "negative-id": (dict(embed_map={"0": {"doc_id": -1, "page_id": 1}, "1": {"doc_id": 0, "page_id": 2},
                                    "2": {"doc_id": 1, "page_id": 1}}), "doc_id"),
    "missing-entry": (dict(embed_map={"0": {"doc_id": 0, "page_id": 1}, "1": {"doc_id": 0, "page_id": 2}}), "exactly one entry"),
    "64-d": (dict(pages=lambda torch: [torch.randn(5, 64)] * 3), "expected (tokens >= 1, 128)"),
    "1-d": (dict(pages=lambda torch: [torch.randn(128)] * 3), "expected (tokens >= 1, 128)"),
    "no-rows": (dict(pages=lambda torch: [torch.randn(0, 128)] * 3), "expected (tokens >= 1, 128)"),
    "nan": (dict(pages=lambda torch: [torch.full((5, 128), float("nan"))] * 3), "NaN"),
    "integers": (dict(pages=lambda torch: [torch.ones(5, 128, dtype=torch.int64)] * 3), "not a floating-point tensor"),
    "not-a-list": (dict(pages=lambda torch: {"a": torch.randn(5, 128)}), "expected a list of tensors"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_folders_are_refused_with_the_reason(fake_model, tmp_path, case):
    kwargs, reason = BAD[case]
    folder = _byaldi_folder(tmp_path / case, **kwargs)
    result = _import(folder, tmp_path / "idx", fake_model)
    assert result.exit_code == 2, result.stderr
    assert reason in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "idx" / "default" / "HEAD").exists()


def test_an_empty_embeddings_folder(fake_model, tmp_path):
    folder = _byaldi_folder(tmp_path / "empty")
    (folder / "embeddings" / "embeddings_0.pt").unlink()
    result = _import(folder, tmp_path / "idx", fake_model)
    assert result.exit_code == 2 and "no embeddings_*.pt" in result.stderr


def test_a_gzip_that_inflates_without_bound_is_refused(fake_model, tmp_path):
    folder = _byaldi_folder(tmp_path / "bomb")
    with gzip.open(folder / "doc_ids_to_file_names.json.gz", "wb", compresslevel=9) as handle:
        block = b" " * (1 << 24)
        for _ in range(20):  # 320 MiB of whitespace, a few hundred KB compressed
            handle.write(block)
    assert (folder / "doc_ids_to_file_names.json.gz").stat().st_size < 2 << 20
    result = _import(folder, tmp_path / "idx", fake_model)
    assert result.exit_code == 2 and "inflates to more than" in result.stderr


def test_a_full_disk_during_an_import_is_one_clean_message(fake_model, tmp_path, monkeypatch):
    monkeypatch.setenv("LGPT_FAILPOINT", "write-vectors:1:enospc")
    result = _import(_byaldi_folder(tmp_path / "ok"), tmp_path / "idx", fake_model)
    assert result.exit_code == 1 and "No space left on device" in result.stderr and "Traceback" not in result.stderr
