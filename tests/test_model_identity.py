"""Model identity (issue 24): a model is known by every byte of its weights (its base's too, for an
adapter), an index fingerprinted the old way keeps working and is upgraded by its next write, and
doctor checks the model of the index at hand. Fast tier: the fake family, no torch."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from conftest import run_cli
from helpers import flip_byte
from docgen import make_pdf
from helpers import build_json, build_ok

MIB = 1 << 20


def _weights(folder: Path, name: str = "model.safetensors", size: int = 3 * MIB) -> Path:
    """A weight file of `size` bytes (the fake family never reads it; fingerprints do)."""
    path = folder / name
    path.write_bytes(os.urandom(size))
    return path


def _fake_with_weights(folder: Path) -> Path:
    from localgpt_index.testing.fake import write_fake_checkpoint

    write_fake_checkpoint(folder)
    _weights(folder)
    return folder


def _flip_in_place(path: Path, offset: int) -> None:
    """Change one byte in place, same size, mtime restored (what `cp -p` or `rsync --inplace -t` leave)."""
    info = path.stat()
    flip_byte(path, offset)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_size == info.st_size


def _docs(folder: Path, count: int = 2) -> Path:
    for i in range(count):
        make_pdf(folder / f"doc-{i}.pdf", [f"doc {i} page 1", f"doc {i} page 2"])
    return folder


def _query(index: Path, *args: str):
    return run_cli("query", "doc 1 page 2", "--index-dir", str(index), "--json", *args)


def _current_format() -> str:
    from localgpt_index.index.format.manifest import FORMAT

    return FORMAT


def _said(result) -> str:
    """What a command told: its message on stderr (and, under --json, its error document on stdout)."""
    return result.stderr + result.stdout


def _raw_manifest(index: Path) -> tuple[dict, dict]:
    root = index / "default"
    head = json.loads((root / "HEAD").read_text())
    return head, json.loads((root / head["manifest"]).read_text())


# 1. the whole weights


def test_a_weight_change_past_the_first_mib_is_another_model(tmp_path):
    model = _fake_with_weights(tmp_path / "model")
    docs, index = _docs(tmp_path / "docs"), tmp_path / "idx"
    result, report = build_json(docs, index, "--model", str(model))
    assert result.exit_code == 0, result.stderr
    before = report["model"]["fingerprint"]

    _flip_in_place(model / "model.safetensors", 2 * MIB + 12345)

    query = _query(index)
    assert query.exit_code == 1
    assert "was built with" in _said(query) and "cannot be compared with another model" in _said(query)
    assert "Traceback" not in _said(query)
    build, _ = build_json(docs, index, "--model", str(model))
    assert build.exit_code == 1 and "is a different model" in _said(build)
    build, _ = build_json(docs, index)  # the index's own model, as recorded: the same folder, other weights
    assert build.exit_code == 1 and "is a different model" in _said(build)
    _, manifest = _raw_manifest(index)
    assert manifest["model"]["fingerprint"] == before  # nothing was written


def test_an_adapter_is_known_by_its_base_models_weights_too(tmp_path):
    from localgpt_index.testing.fake import write_fake_checkpoint

    base = _fake_with_weights(tmp_path / "base")
    adapter = write_fake_checkpoint(tmp_path / "adapter")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "peft_type": "LORA"}))
    _weights(adapter, "adapter_model.safetensors", 4096)
    docs, index = _docs(tmp_path / "docs"), tmp_path / "idx"
    result, _ = build_json(docs, index, "--model", str(adapter))
    assert result.exit_code == 0, result.stderr
    assert _query(index).exit_code == 0

    _flip_in_place(base / "model.safetensors", 100)  # the base changes; the adapter's own files do not

    query = _query(index)
    assert query.exit_code == 1 and "was built with" in _said(query)
    build, _ = build_json(docs, index, "--model", str(adapter))
    assert build.exit_code == 1 and "is a different model" in _said(build)


def test_weight_digests_are_remembered_by_stat_and_a_change_in_place_is_seen(tmp_path):
    """The cache of whole-weight digests: trusted while size, mtime, ctime and inode are those it
    recorded, never for a file changed in place (its ctime moves), and not for a file modified
    too recently to tell (an injected clock stands for the time passing)."""
    from localgpt_index.models.resolve import WeightDigests

    weights = _weights(tmp_path, "w.safetensors", MIB + 10)
    cache = tmp_path / "digests.json"
    now = WeightDigests(cache)  # the real clock: the file was just written, too recent to remember
    real = now.of(weights)
    now.save()
    assert not cache.exists()

    later = WeightDigests(cache, clock=lambda: weights.stat().st_ctime_ns + 10**10)
    assert later.of(weights) == real
    later.save()
    data = json.loads(cache.read_text())
    [entry] = data["files"].values()
    entry["xxh3_128"] = "0" * 32  # a remembered digest is believed while the stat matches
    cache.write_text(json.dumps(data))
    assert WeightDigests(cache).of(weights) == "0" * 32

    _flip_in_place(weights, MIB + 5)  # same size, same mtime: only the ctime tells
    changed = WeightDigests(cache).of(weights)
    assert changed not in ("0" * 32, real)

    cache.write_text("{not json")  # a damaged cache costs a hash, nothing else
    assert WeightDigests(cache).of(weights) == changed


# 2. indexes fingerprinted the old way


def _old_fingerprint(folder: Path) -> str:
    """The fingerprint lgpt-index wrote into format 2 manifests (models._folder_fingerprint before
    issue 24), reproduced here as it was: config bytes, then each weight file's name, size and first MiB."""
    digest = hashlib.sha256()
    for name in ("config.json", "adapter_config.json"):
        if (folder / name).exists():
            digest.update((folder / name).read_bytes())
    for weights in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        digest.update(weights.name.encode())
        digest.update(str(weights.stat().st_size).encode())
        with open(weights, "rb") as handle:
            digest.update(handle.read(1 << 20))
    return "sha256:" + digest.hexdigest()


def _downgrade_to_format_2(index: Path, model: Path) -> None:
    """Rewrite the current generation as the previous lgpt-index wrote it: format 2, the model
    fingerprinted the old way, no fingerprint scheme."""
    root = index / "default"
    head, data = _raw_manifest(index)
    data["format"] = "lgpt-index/2"
    data["model"].pop("fingerprint_scheme")
    data["model"]["fingerprint"] = _old_fingerprint(model)
    raw = json.dumps(data, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "format": "lgpt-index/2", "sha256": hashlib.sha256(raw).hexdigest()}))


def test_an_index_fingerprinted_the_old_way_opens_queries_and_builds_incrementally(tmp_path):
    model = _fake_with_weights(tmp_path / "model")
    docs, index = _docs(tmp_path / "docs", 3), tmp_path / "idx"
    result, report = build_json(docs, index, "--model", str(model))
    assert result.exit_code == 0, result.stderr
    current = report["model"]["fingerprint"]
    answers = _query(index)
    assert answers.exit_code == 0 and json.loads(answers.stdout)
    _downgrade_to_format_2(index, model)
    files = {p.name: p.read_bytes() for p in (index / "default").iterdir() if p.is_file()}

    assert run_cli("verify", "--index-dir", str(index)).exit_code == 0
    status = run_cli("status", "--index-dir", str(index))
    assert status.exit_code == 0 and _old_fingerprint(model) in status.stdout
    old = _query(index)
    assert old.exit_code == 0 and old.stdout == answers.stdout
    assert {p.name: p.read_bytes() for p in (index / "default").iterdir() if p.is_file()} == files  # readers never write

    result, report = build_json(docs, index)
    assert result.exit_code == 0, result.stderr
    assert report["pages_embedded"] == 0 and report["unchanged"] == 3
    head, manifest = _raw_manifest(index)
    assert head["format"] == manifest["format"] == _current_format() != "lgpt-index/2"
    assert manifest["model"]["fingerprint"] == current and manifest["model"]["fingerprint_scheme"] == 2
    assert _query(index).stdout == answers.stdout

    _flip_in_place(model / "model.safetensors", 2 * MIB)  # now known by every byte
    assert _query(index).exit_code == 1


def test_an_index_fingerprinted_the_old_way_still_refuses_what_the_old_way_told_apart(tmp_path):
    model = _fake_with_weights(tmp_path / "model")
    docs, index = _docs(tmp_path / "docs"), tmp_path / "idx"
    assert build_json(docs, index, "--model", str(model))[0].exit_code == 0
    _downgrade_to_format_2(index, model)

    _flip_in_place(model / "model.safetensors", 1000)  # inside the first MiB: the old scheme sees it
    query = _query(index)
    assert query.exit_code == 1 and "was built with" in _said(query)
    result, _ = build_json(docs, index)
    assert result.exit_code == 1 and "is a different model" in _said(result)
    head, manifest = _raw_manifest(index)
    assert head["format"] == "lgpt-index/2" and "fingerprint_scheme" not in manifest["model"]  # not upgraded


def test_a_format_2_manifest_migrates_to_the_old_fingerprint_scheme():
    from localgpt_index.index.format.manifest import FORMAT, migrate

    data = {"format": "lgpt-index/2", "model": {"id": "m", "family": "fake", "fingerprint": "sha256:" + "0" * 64}}
    migrated = migrate(data, "test")
    assert migrated["format"] == FORMAT != "lgpt-index/2"
    assert migrated["model"]["fingerprint_scheme"] == 1 and migrated["model"]["fingerprint"] == data["model"]["fingerprint"]


# 4. doctor and the index at hand


def test_doctor_checks_the_model_the_index_at_hand_was_built_with(fake_model, tmp_path):
    docs = _docs(tmp_path / "docs")
    build_ok(str(docs), "--model", str(fake_model))  # ./.lgpt-index/default

    result = run_cli("doctor", "--json")
    diagnosis = json.loads(result.stdout)
    model = diagnosis["model"]
    assert model["id"] == str(fake_model) and model["available"] is True and model["source"] == "index"
    assert Path(model["index"]).resolve() == (tmp_path / ".lgpt-index" / "default").resolve()
    assert not [m for m in diagnosis["missing"] if m.startswith("model")]
    assert "vidore/colpali-v1.3" not in result.stdout
    assert result.exit_code == (0 if not diagnosis["missing"] else 4)
    human = run_cli("doctor")
    assert f"model        {fake_model} (the index's" in human.stdout and "NOT AVAILABLE" not in human.stdout


def test_doctor_says_when_the_index_model_changed(tmp_path):
    model = _fake_with_weights(tmp_path / "model")
    docs = _docs(tmp_path / "docs")
    build_ok(str(docs), "--model", str(model), "--name", "mine")
    _flip_in_place(model / "model.safetensors", 2 * MIB)

    result = run_cli("doctor", "--json", "--name", "mine")
    diagnosis = json.loads(result.stdout)
    assert result.exit_code == 4 and diagnosis["model"]["available"] is False
    [problem] = [m for m in diagnosis["missing"] if m.startswith("model")]
    assert "not the model the index was built with" in problem and str(model) in problem


def test_doctor_without_an_index_checks_the_default_model(tmp_path):
    result = run_cli("doctor", "--json")
    diagnosis = json.loads(result.stdout)
    assert result.exit_code == 4 and diagnosis["model"]["id"] == "vidore/colpali-v1.3"
    assert diagnosis["model"]["source"] == "default" and not (tmp_path / ".lgpt-index").exists()


def test_a_server_on_an_index_fingerprinted_the_old_way_answers_before_and_after_its_upgrade(tmp_path):
    from localgpt_index.query.request import QueryRequest
    from localgpt_index.serve.service import IndexService

    model = _fake_with_weights(tmp_path / "model")
    docs, index = _docs(tmp_path / "docs"), tmp_path / "idx"
    assert build_json(docs, index, "--model", str(model))[0].exit_code == 0
    _downgrade_to_format_2(index, model)
    service = IndexService(index / "default")
    service.load()
    assert service.failure is None and service.stale is None
    before = service.search([QueryRequest(queries=("doc 1",), k=3)])[0].results

    assert build_json(docs, index)[0].exit_code == 0  # the upgrade, committed beside the server
    after = service.search([QueryRequest(queries=("doc 1",), k=3)])[0]
    assert service.switches == 1 and service.stale is None
    assert after.index.manifest.model.fingerprint_scheme == 2 and after.results == before


def test_a_remove_on_an_index_fingerprinted_the_old_way_keeps_the_old_scheme_and_it_still_answers(tmp_path):
    """remove writes without loading the model: it keeps the fingerprint as recorded, with its scheme."""
    model = _fake_with_weights(tmp_path / "model")
    docs, index = _docs(tmp_path / "docs", 3), tmp_path / "idx"
    assert build_json(docs, index, "--model", str(model))[0].exit_code == 0
    _downgrade_to_format_2(index, model)

    removed = run_cli("remove", str(docs / "doc-2.pdf"), "--index-dir", str(index))
    assert removed.exit_code == 0, removed.stderr
    head, manifest = _raw_manifest(index)
    assert head["format"] == _current_format() != "lgpt-index/2"
    assert manifest["model"]["fingerprint_scheme"] == 1 and manifest["model"]["fingerprint"] == _old_fingerprint(model)
    assert _query(index).exit_code == 0
    result, report = build_json(docs, index)
    assert result.exit_code == 0 and report["pages_embedded"] == 2  # doc-2 again, nothing else
    assert _raw_manifest(index)[1]["model"]["fingerprint_scheme"] == 2
