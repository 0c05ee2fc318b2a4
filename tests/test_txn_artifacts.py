"""Per-generation artifacts through the transaction core (index/artifacts.py), on both stores, with a
toy artifact registered from the test (tests/toy_artifact.py): written at commit, named in the
manifest, verified, collected, read lazily by a view that never writes, and whole under kill -9."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli, run_process
from helpers import build_ok, make_pdfs

KINDS = ["local", "qdrant"]


@pytest.fixture
def toy(monkeypatch):
    """The toy artifact, registered here and in every CLI process this test starts."""
    import toy_artifact

    from localgpt_index.core.plugins import plugin_manager

    plugin_manager().register(toy_artifact)  # before LGPT_PLUGINS names it: this process has loaded its plugins
    monkeypatch.setenv("LGPT_PLUGINS", f"{os.environ.get('LGPT_PLUGINS', '')},toy_artifact")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])))
    yield toy_artifact
    plugin_manager().unregister(toy_artifact)


def _args(kind: str, tmp_path: Path) -> list[str]:
    if kind == "local":
        return ["--index-dir", str(tmp_path / "idx")]
    return ["--store", f"qdrant+path://{tmp_path / 'qd'}/notes"]


def _open(kind: str, tmp_path: Path):
    from localgpt_index.index.open import open_store

    if kind == "local":
        return open_store(index_dir=tmp_path / "idx")
    return open_store(f"qdrant+path://{tmp_path / 'qd'}/notes")


def _build(kind, tmp_path, docs, fake_model, *extra):
    build_ok(str(docs), "--model", str(fake_model), "--batch-size", "1", *_args(kind, tmp_path), *extra)


def _blobs(kind: str, tmp_path: Path) -> set[str]:
    """The artifact blobs the store holds (local: files; Qdrant: catalog points)."""
    if kind == "local":
        folder = tmp_path / "idx" / "default" / "artifacts"
        return {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    store = _open(kind, tmp_path)
    try:
        catalog = store.catalog_of(store.physical())
        records = store.client.scroll(catalog, limit=10_000, with_payload=["kind", "blob"])[0]
        return {r.payload["blob"] for r in records if r.payload.get("kind") == "blob"}
    finally:
        store.close()


def _consistent(view) -> dict:
    """The toy artifact names the same generation as the vectors: totals and parts agree with the manifest."""
    manifest = view.manifest
    opened = view.artifact("toy")
    total = opened["total"]
    assert total["generation"] == manifest.generation
    assert total["pages"] == manifest.page_count == manifest.artifacts["toy"].meta["pages"]
    assert set(opened["parts"]) == set(manifest.segments)
    for sid, part in opened["parts"].items():
        assert len(part["tokens"]) == manifest.segments[sid].pages
    assert total["tokens"] == sum(len(v) for d in manifest.documents for v in view.page_vectors(d))
    return total


@pytest.mark.parametrize("kind", KINDS)
def test_an_artifact_is_written_at_commit_named_in_the_manifest_and_read_by_the_view(kind, toy, fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 2, "report")
    _build(kind, tmp_path, docs, fake_model)
    store = _open(kind, tmp_path)
    try:
        view = store.open_view()
        assert all("toy" in seg.parts for seg in view.manifest.segments.values())
        total = _consistent(view)
        assert total["pages"] == 4 and len(total["added"]) == 2 and total["removed"] == []
        assert view.artifact("absent") is None
    finally:
        store.close()
    assert run_cli("verify", *_args(kind, tmp_path)).exit_code == 0


def test_a_manifest_names_the_built_in_artifacts_and_keeps_its_bytes(fake_model, tmp_path):
    """The built-in artifacts (page text, the full-text index, binary codes: format 4 on) are in every new generation;
    one that is not registered in this process reads as None."""
    docs = tmp_path / "docs"
    make_pdfs(docs, 1, 2, "plain")
    _build("local", tmp_path, docs, fake_model)
    from localgpt_index.index.format.manifest import Manifest

    raw = next((tmp_path / "idx" / "default").glob("gen-*.json")).read_bytes()
    manifest = Manifest.from_json(raw, "here")
    assert manifest.format == "lgpt-index/5" and manifest.to_json() == raw
    assert all("text" in segment.parts and "codes" in segment.parts for segment in manifest.segments.values())
    store = _open("local", tmp_path)
    assert store.open_view().artifact("toy") is None  # not registered here: the caller falls back


def test_extra_page_data_reaches_the_part_writers(toy, tmp_path):
    """`append(vectors, page, extra)`: what the caller knows of a page ({"text": ...}) is fed to every part writer."""
    from localgpt_index.core.types import PageRef
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.local.store import LocalStore

    store = LocalStore(tmp_path / "idx")
    with store.begin() as txn:
        writer = txn.segment_writer(8)
        for page, text in enumerate(["first page", "second page"], 1):
            writer.append(np.ones((3, 8), dtype=np.float32), PageRef("/a.pdf", page, "0" * 64, "pdf", {}), {"text": text})
        segment = txn.finish_segment(writer)
        doc = Document(path="/a.pdf", sha256="0" * 64, size=1, kind="pdf", pages=2, spans=[Span(segment=segment.id, first=0, pages=2)])
        txn.commit([doc], ModelInfo(id="m", family="fake", fingerprint="f", dim=8), Settings(dim=8))
    part = store.open_view().artifact("toy")["parts"][segment.id]
    assert part == {"tokens": [3, 3], "texts": ["first page", "second page"]}


def _damage(kind: str, tmp_path: Path, name: str) -> None:
    if kind == "local":
        path = tmp_path / "idx" / "default" / "artifacts" / name
        data = bytearray(path.read_bytes())
        data[-2] ^= 0x01
        path.write_bytes(bytes(data))
        return
    from localgpt_index.index.qdrant.blobs import blob_chunk_id

    store = _open(kind, tmp_path)
    try:
        catalog = store.catalog_of(store.physical())
        store.client.set_payload(catalog, {"data": base64.b64encode(b'{"pages": 99}').decode()}, points=[blob_chunk_id(name, 0)])
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_damage_to_an_artifact_is_found_by_verify(kind, toy, fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdfs(docs, 1, 2, "report")
    _build(kind, tmp_path, docs, fake_model)
    store = _open(kind, tmp_path)
    name = store.read_manifest().artifacts["toy"].blobs[0].name
    store.close()
    _damage(kind, tmp_path, name)
    result = run_cli("verify", "--json", *_args(kind, tmp_path))
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["problems"]
    assert any("artifact toy" in p and "checksum mismatch" in p for p in problems), problems


@pytest.mark.parametrize("kind", KINDS)
def test_an_artifacts_blobs_are_collected_two_commits_later(kind, toy, fake_model, tmp_path):
    docs = tmp_path / "docs"
    names = []
    for round_ in range(3):
        make_pdfs(docs, 1, 2, f"round{round_}")
        _build(kind, tmp_path, docs, fake_model)
        store = _open(kind, tmp_path)
        names.append(store.read_manifest().artifacts["toy"].blobs[0].name)
        store.close()
        held = _blobs(kind, tmp_path)
        assert set(names[-2:]) <= held  # the new generation's and the previous one's (a slow reader's)
    assert names[0] not in _blobs(kind, tmp_path)


def _snapshot(kind: str, tmp_path: Path):
    if kind == "local":
        root = tmp_path / "idx"
        return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}
    store = _open(kind, tmp_path)
    try:
        catalog = store.catalog_of(store.physical())
        return sorted((str(r.id), json.dumps(r.payload, sort_keys=True))
                      for r in store.client.scroll(catalog, limit=10_000, with_payload=True)[0])
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_reader_opens_an_artifact_and_never_writes(kind, toy, fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 2, "report")
    _build(kind, tmp_path, docs, fake_model)
    before = _snapshot(kind, tmp_path)
    if kind == "local":
        for path in (tmp_path / "idx").rglob("*"):
            path.chmod(path.stat().st_mode & ~0o222)  # a read-only copy (root ignores it: the snapshot decides)
    store = _open(kind, tmp_path)
    try:
        _consistent(store.open_view())
    finally:
        store.close()
    assert _snapshot(kind, tmp_path) == before
    if kind == "local":
        for path in (tmp_path / "idx").rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("point", ["write-vectors", "before-head", "after-head"])
def test_kill_leaves_the_artifact_and_the_vectors_of_one_generation(kind, point, toy, fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 2, "base")
    _build(kind, tmp_path, docs, fake_model)
    make_pdfs(docs, 2, 3, "extra")
    killed = run_process("build", str(docs), "--model", str(fake_model), "--batch-size", "1", *_args(kind, tmp_path),
                         env={"LGPT_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    assert run_cli("verify", *_args(kind, tmp_path)).exit_code == 0
    store = _open(kind, tmp_path)
    try:
        total = _consistent(store.open_view())
    finally:
        store.close()
    assert total["generation"] == (2 if point == "after-head" else 1)
    assert total["pages"] == (10 if point == "after-head" else 4)
    _build(kind, tmp_path, docs, fake_model)  # the next writer carries on; its commit is whole too
    store = _open(kind, tmp_path)
    try:
        assert _consistent(store.open_view())["pages"] == 10
    finally:
        store.close()
    if kind == "local":
        shutil.rmtree(tmp_path / "idx")


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_killed_qdrant_rebuild_with_artifacts_leaves_no_stray_collection(toy, fake_model, tmp_path):
    """A rebuild writes its blobs into its new catalog; killed before its HEAD, the next writer's
    recovery recognises that catalog as ours (manifest chunks and blobs) and drops it with its collection."""
    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 2, "base")
    _build("qdrant", tmp_path, docs, fake_model)
    killed = run_process("build", str(docs), "--model", str(fake_model), "--rebuild", *_args("qdrant", tmp_path),
                         env={"LGPT_FAILPOINT": "before-head"})
    assert killed.returncode == -9, killed.stderr

    def ours() -> tuple[set[str], str]:
        store = _open("qdrant", tmp_path)
        try:
            names = {c.name for c in store.client.get_collections().collections if not c.name.endswith("__lease")}
            return names, store.physical()
        finally:
            store.close()

    names, physical = ours()
    assert len(names) == 4  # the old physical collection and catalog, and the killed rebuild's
    _build("qdrant", tmp_path, docs, fake_model)
    names, physical = ours()
    assert names == {physical, f"{physical}__catalog"}
