"""A Qdrant index fingerprinted the old way (issue 24): a collection whose catalog is format 2, its
model fingerprinted by the first MiB of each weight file, is read, queried and verified as it is,
and the next build records the current format and the whole-weights fingerprint even when no
document changed. Fast tier: the fake family with a weight file, Qdrant's in-process mode."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from conftest import run_cli
from helpers import open_qdrant
from test_model_identity import MIB, _docs, _fake_with_weights, _flip_in_place, _old_fingerprint


def _catalog(client, collection: str) -> str:
    physical = next(a.collection_name for a in client.get_aliases().aliases if a.alias_name == collection)
    return f"{physical}__catalog"


def _read_catalog(folder: Path, collection: str = "docs") -> tuple[dict, dict]:
    """HEAD's payload and the manifest it names, read the way the store reads them."""
    from localgpt_index.index.qdrant.ids import HEAD_ID, chunk_id

    client = open_qdrant(folder)
    try:
        catalog = _catalog(client, collection)
        head = dict(client.retrieve(catalog, [HEAD_ID])[0].payload)
        ids = [chunk_id(head["generation"], i, head.get("chunk_key")) for i in range(head["chunks"])]
        chunks = {p.id: p.payload["data"] for p in client.retrieve(catalog, ids)}
        return head, json.loads("".join(chunks[i] for i in ids))
    finally:
        client.close()


def _downgrade_to_format_2(folder: Path, model: Path, collection: str = "docs") -> None:
    """Rewrite the current generation's catalog as the previous lgpt-index wrote it: format 2 in the
    chunks and in HEAD (with the sha256 of the new text), the model fingerprinted the old way, no scheme.
    HEAD keeps `paths: 2`, so that no path upgrade hides whether the format alone is upgraded."""
    from qdrant_client import models

    from localgpt_index.index.qdrant.ids import CHUNK_CHARS, HEAD_ID, chunk_id

    head, data = _read_catalog(folder, collection)
    data["format"] = "lgpt-index/2"
    data["model"].pop("fingerprint_scheme")
    data["model"]["fingerprint"] = _old_fingerprint(model)
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    generation, key = head["generation"], head.get("chunk_key")
    client = open_qdrant(folder)
    try:
        catalog = _catalog(client, collection)
        client.delete(catalog, points_selector=models.PointIdsList(points=[chunk_id(generation, i, key) for i in range(head["chunks"])]))
        client.upsert(catalog, [models.PointStruct(id=chunk_id(generation, i, key), vector={}, payload={
            "kind": "manifest", "generation": generation, "chunk": i, "data": chunk}) for i, chunk in enumerate(chunks)])
        client.set_payload(catalog, {"format": "lgpt-index/2", "chunks": len(chunks),
                                     "sha256": hashlib.sha256(text.encode()).hexdigest()}, points=[HEAD_ID])
    finally:
        client.close()


def _everything(folder: Path) -> dict[str, dict]:
    """Every collection's points (id -> payload and vectors): what a reader must leave as it found it."""
    client = open_qdrant(folder)
    try:
        found = {}
        for name in sorted(c.name for c in client.get_collections().collections):
            points, offset = {}, None
            while True:
                records, offset = client.scroll(name, limit=256, offset=offset, with_payload=True, with_vectors=True)
                points.update({str(r.id): (r.payload, r.vector) for r in records})
                if offset is None:
                    break
            found[name] = points
        return found
    finally:
        client.close()


def _query(url: str):
    return run_cli("query", "doc 1 page 2", "--store", url, "--json")


def test_a_qdrant_index_fingerprinted_the_old_way_opens_queries_and_builds_incrementally(tmp_path):
    from localgpt_index.index.format.manifest import FORMAT

    model = _fake_with_weights(tmp_path / "model")
    docs, qd = _docs(tmp_path / "docs", 3), tmp_path / "qd"
    for path in [*docs.iterdir(), *model.iterdir()]:  # not "racily clean" (plan.trusted_stat), however slow the machine
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns - 3600 * 10**9))
    url = f"qdrant+path://{qd}/docs"
    built = run_cli("build", str(docs), "--model", str(model), "--store", url, "--json")
    assert built.exit_code == 0, built.stderr
    current = json.loads(built.stdout)["model"]["fingerprint"]
    answers = _query(url)
    assert answers.exit_code == 0 and json.loads(answers.stdout)["queries"][0]["results"], answers.stderr
    _downgrade_to_format_2(qd, model)
    head, manifest = _read_catalog(qd)
    assert head["format"] == manifest["format"] == "lgpt-index/2" and head["paths"] == 2
    before = _everything(qd)

    verified = run_cli("verify", "--store", url)
    assert verified.exit_code == 0, verified.stderr + verified.stdout
    status = run_cli("status", "--store", url)
    assert status.exit_code == 0 and _old_fingerprint(model) in status.stdout, status.stderr
    old = _query(url)
    assert old.exit_code == 0 and old.stdout == answers.stdout, old.stderr
    assert _everything(qd) == before  # readers never write

    result = run_cli("build", str(docs), "--store", url, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["pages_embedded"] == 0 and report["unchanged"] == 3
    head, manifest = _read_catalog(qd)
    assert head["format"] == manifest["format"] == FORMAT != "lgpt-index/2"
    assert manifest["model"]["fingerprint"] == current and manifest["model"]["fingerprint_scheme"] == 2
    assert run_cli("verify", "--store", url).exit_code == 0
    assert _query(url).stdout == answers.stdout
    again = run_cli("build", str(docs), "--store", url, "--json")  # upgraded once: no commit of nothing after
    assert again.exit_code == 0 and json.loads(again.stdout)["generation"] == head["generation"], again.stderr

    _flip_in_place(model / "model.safetensors", 2 * MIB)  # past the first MiB: now known by every byte
    refused = _query(url)
    assert refused.exit_code == 1 and "was built with" in refused.stderr + refused.stdout
    assert "Traceback" not in refused.stderr + refused.stdout
