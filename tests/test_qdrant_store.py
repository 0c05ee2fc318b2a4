"""Qdrant as the store (its client's in-process mode, the same API as a cluster): the same answers and
the same guarantees as the local store."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from conftest import run_cli, run_process
from docgen import make_pdf, make_png
from helpers import build_ok, make_pdfs

QUERIES = ["quarterly report", "a scanned receipt", "market outlook"]


def _docs(folder: Path) -> None:
    for i in range(4):
        make_pdf(folder / f"report-{i}.pdf", [f"report {i} page {p}" for p in range(1 + i % 3)])
    make_png(folder / "scan.png", "a scan")
    make_png(folder / "photo.png", "a photo", size=(300, 200))


def _answers(*store: str) -> list[list[tuple[str, int, float]]]:
    result = run_cli("query", *QUERIES, "-k", "20", "--json", *store)
    assert result.exit_code == 0, result.stderr
    return [[(h["path"], h["page"], h["score"]) for h in q["results"]] for q in json.loads(result.stdout)["queries"]]


def _same(local, qdrant) -> None:
    for ours, theirs in zip(local, qdrant):
        assert [(p, n) for p, n, _ in ours] == [(p, n) for p, n, _ in theirs]
        assert all(abs(a[2] - b[2]) <= 1e-3 for a, b in zip(ours, theirs))


@pytest.fixture
def stores(tmp_path):
    return {"local": ["--index-dir", str(tmp_path / "idx")], "qdrant": ["--store", f"qdrant+path://{tmp_path / 'qd'}/docs"]}


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_same_pages_in_the_same_order_as_the_local_store(fake_model, tmp_path, stores):
    docs = tmp_path / "docs"
    _docs(docs)
    rules = tmp_path / "meta.json"
    rules.write_text(json.dumps({"report-*": {"team": "finance"}, "scan.png": {"team": "ops"}}))
    for store in stores.values():
        result = run_cli("build", str(docs), "--model", str(fake_model), "--metadata", str(rules), *store)
        assert result.exit_code == 0, result.stderr
    _same(_answers(*stores["local"]), _answers(*stores["qdrant"]))
    filtered = {name: run_cli("query", "report", "--filter", "team=finance", "-k", "20", "--json", *store).stdout
                for name, store in stores.items()}
    found = {name: json.loads(answer)["queries"][0]["results"] for name, answer in filtered.items()}
    assert found["local"] and [(h["path"], h["page"]) for h in found["local"]] == [(h["path"], h["page"]) for h in found["qdrant"]]
    assert {Path(h["path"]).name for h in found["qdrant"]} <= {f"report-{i}.pdf" for i in range(4)}

    for store in stores.values():  # a remove, a change, an addition, a rename
        assert run_cli("remove", str(docs / "report-1.pdf"), *store).exit_code == 0
    make_pdf(docs / "report-2.pdf", ["changed", "report", "two"])
    make_pdf(docs / "added.pdf", ["added later"])
    (docs / "photo.png").rename(docs / "renamed-photo.png")
    (docs / "report-1.pdf").unlink()
    for store in stores.values():
        result = run_cli("build", str(docs), *store, "--json")
        assert result.exit_code == 0, result.stderr
        report = json.loads(result.stdout)
        assert (report["indexed"], report["reused"], report["removed"]) == (2, 1, 1)
    _same(_answers(*stores["local"]), _answers(*stores["qdrant"]))
    assert run_cli("verify", *stores["qdrant"]).exit_code == 0
    status = {name: json.loads(run_cli("status", "--json", *store).stdout) for name, store in stores.items()}
    assert status["qdrant"]["pages"] == status["local"]["pages"] and status["qdrant"]["documents"] == 6


@pytest.fixture(scope="module")
def qdrant_scenario(fake_model, tmp_path_factory):
    """A collection built from BASE documents, and the answers before and after adding EXTRA."""
    work = tmp_path_factory.mktemp("qdrant-kill")
    docs = work / "docs"
    make_pdfs(docs, 3, 2, "base")
    store = ["--store", f"qdrant+path://{work / 'qd'}/docs"]
    build_ok(str(docs), "--model", str(fake_model), "--batch-size", "1", *store)
    before = _answers(*store)
    make_pdfs(docs, 4, 3, "extra")
    full = work / "full"
    build_ok(str(docs), "--model", str(fake_model), "--store", f"qdrant+path://{full}/docs")
    after = _answers("--store", f"qdrant+path://{full}/docs")
    return {"work": work, "docs": docs, "qd": work / "qd", "before": before, "after": after}


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("point", ["write-vectors", "before-head", "after-head", "encode:4"])
def test_kill_at_each_commit_step(qdrant_scenario, tmp_path, point):
    copy = tmp_path / "qd"
    shutil.copytree(qdrant_scenario["qd"], copy)
    store = ["--store", f"qdrant+path://{copy}/docs"]
    killed = run_process("build", str(qdrant_scenario["docs"]), "--batch-size", "1", "--commit-every", "2", *store,
                         env={"LGPT_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    assert run_cli("verify", *store).exit_code == 0
    answers = _answers(*store)
    if point == "after-head":
        assert json.loads(run_cli("status", "--json", *store).stdout)["generation"] == 2  # the new generation, whole
    elif point in ("write-vectors", "before-head"):
        assert answers == qdrant_scenario["before"]  # nothing of the killed commit is visible
    result = run_cli("build", str(qdrant_scenario["docs"]), *store)
    assert result.exit_code == 0, result.stderr
    assert run_cli("verify", *store).exit_code == 0
    _same(qdrant_scenario["after"], _answers(*store))


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_killed_rebuild_leaves_the_old_collection_answering(qdrant_scenario, tmp_path):
    copy = tmp_path / "qd"
    shutil.copytree(qdrant_scenario["qd"], copy)
    store = ["--store", f"qdrant+path://{copy}/docs"]
    killed = run_process("build", str(qdrant_scenario["docs"]), "--rebuild", "--batch-size", "1", *store,
                         env={"LGPT_FAILPOINT": "encode:5"})
    assert killed.returncode == -9
    assert _answers(*store) == qdrant_scenario["before"]
    from localgpt_index.index.open import open_store

    client_store = open_store(f"qdrant+path://{copy}/docs")
    names = {c.name for c in client_store.client.get_collections().collections}
    client_store.close()
    assert len([n for n in names if n.startswith("docs__") and not n.endswith(("__catalog", "__lease"))]) == 2  # the stray half
    rebuilt = run_cli("build", str(qdrant_scenario["docs"]), "--rebuild", *store, "--json")
    assert rebuilt.exit_code == 0, rebuilt.stderr
    client_store = open_store(f"qdrant+path://{copy}/docs")
    names = {c.name for c in client_store.client.get_collections().collections}
    physical = client_store.physical()
    client_store.close()
    assert [n for n in names if n.startswith("docs__") and not n.endswith(("__catalog", "__lease"))] == [physical]
    _same(qdrant_scenario["after"], _answers(*store))


def test_one_writer_at_a_time_and_an_expired_lease_is_taken_over(fake_model, tmp_path):
    from qdrant_client import models

    from localgpt_index.core.errors import IndexBusy
    from localgpt_index.index.qdrant.ids import LEASE_ID
    from localgpt_index.index.open import open_store

    store = open_store(f"qdrant+path://{tmp_path / 'qd'}/docs")
    with store.begin():
        pass  # creates the lease collection
    lease = {"holder": "pid 1 on elsewhere", "token": "theirs", "expires": time.time() + 60}
    store.client.upsert(store.lease_collection, [models.PointStruct(id=LEASE_ID, vector={}, payload=lease)])
    with pytest.raises(IndexBusy, match="pid 1 on elsewhere"):
        with store.begin(wait_s=0.5):
            pass
    store.client.set_payload(store.lease_collection, {"expires": time.time() - 1}, points=[LEASE_ID])
    with store.begin():
        pass  # the crashed writer's lease ran out
    store.close()


def test_export_into_a_held_qdrant_target_is_refused_and_waits_with_wait(fake_model, tmp_path, monkeypatch):
    """The busy hint says --wait SECONDS: export has it, and goes on once the holder is gone."""
    import socket
    import subprocess
    import sys
    from types import SimpleNamespace

    from qdrant_client import models

    from localgpt_index.index.open import open_store
    from localgpt_index.index.qdrant import lease as lease_module
    from localgpt_index.index.qdrant.ids import LEASE_ID

    docs = tmp_path / "docs"
    make_pdfs(docs, 1, 1)
    local = ["--index-dir", str(tmp_path / "idx")]
    build_ok(str(docs), "--model", str(fake_model), *local)
    url = f"qdrant+path://{tmp_path / 'qd'}/copy"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        store = open_store(url)
        with store.begin():
            pass  # creates the lease collection
        record = f"pid {holder.pid} on {socket.gethostname()}"
        store.client.upsert(store.lease_collection, [models.PointStruct(id=LEASE_ID, vector={}, payload={
            "holder": record, "token": "theirs", "expires": time.time() + 600})])
        store.close()
        refused = run_cli("export", url, "--format", "qdrant", *local)
        assert refused.exit_code == 1 and f"being written by {record}" in refused.stderr and "--wait" in refused.stderr

        waits: list[float] = []

        def sleep(seconds: float) -> None:  # the lease's wait loop: the holder goes while export waits
            waits.append(seconds)
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            time.sleep(seconds)

        monkeypatch.setattr(lease_module, "time", SimpleNamespace(**{n: getattr(time, n) for n in ("monotonic", "strftime", "localtime")},
                                                                   sleep=sleep))
        waited = run_cli("export", url, "--format", "qdrant", "--wait", "120", *local, "--json")
        assert waited.exit_code == 0, waited.stderr
        assert waits and json.loads(waited.stdout)["documents"] == 1
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_export_to_qdrant_and_import_back_embed_nothing(fake_model, tmp_path, unstable_converter):
    docs = tmp_path / "docs"
    _docs(docs)
    (docs / "note.txt").write_text("a converted note")
    local = ["--index-dir", str(tmp_path / "idx")]
    build_ok(str(docs), "--model", str(fake_model), *local)
    url = f"qdrant+path://{tmp_path / 'qd'}/copy"
    exported = run_cli("export", url, "--format", "qdrant", *local, "--json")
    assert exported.exit_code == 0, exported.stderr
    assert json.loads(exported.stdout)["pages"] == json.loads(run_cli("status", "--json", *local).stdout)["pages"]
    _same(_answers(*local), _answers("--store", url))
    pages = run_cli("query", "note", "-k", "20", "--export-pages", str(tmp_path / "pages"), "--store", url)
    assert pages.exit_code == 0, pages.stderr  # the converted document's PDF came along into the PDF store
    back = ["--index-dir", str(tmp_path / "back")]
    imported = run_cli("import", url, "--format", "qdrant", *back)
    assert imported.exit_code == 0, imported.stderr
    _same(_answers(*local), _answers(*back))
    assert run_cli("verify", *back).exit_code == 0
    again = json.loads(run_cli("build", str(docs), *back, "--json").stdout)
    assert again["pages_embedded"] == 0


def test_a_missing_pdf_store_is_said(fake_model, tmp_path, unstable_converter):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("converted")
    store = ["--store", f"qdrant+path://{tmp_path / 'qd'}/docs"]
    build_ok(str(docs), "--model", str(fake_model), *store)
    shutil.rmtree(tmp_path / "qd" / "docs-pdf")
    result = run_cli("query", "note", "--export-pages", str(tmp_path / "pages"), *store)
    assert result.exit_code == 1 and "missing from the PDF store" in result.stderr and "--pdf-store" in result.stderr


def test_verify_finds_a_lost_page(fake_model, tmp_path):
    from qdrant_client import models

    from localgpt_index.index.open import open_store

    docs = tmp_path / "docs"
    _docs(docs)
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    build_ok(str(docs), "--model", str(fake_model), "--store", url)
    store = open_store(url)
    [point] = store.client.scroll(store.physical(), limit=1, scroll_filter=models.Filter(must=[
        models.FieldCondition(key="path", match=models.MatchValue(value=str(docs / "scan.png")))]))[0]
    store.client.delete(store.physical(), points_selector=models.PointIdsList(points=[point.id]))
    store.close()
    result = run_cli("verify", "--store", url)
    assert result.exit_code == 1 and "scan.png: 0 of its 1 pages" in result.stderr


def test_another_model_is_refused_as_with_the_local_store(fake_model, tmp_path):
    from conftest import faulty_model

    docs = tmp_path / "docs"
    _docs(docs)
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    build_ok(str(docs), "--model", str(fake_model), "--store", url)
    other = faulty_model(tmp_path / "other", page_tokens=4)
    assert run_cli("query", "q", "--model", str(other), "--store", url).exit_code == 1
    assert run_cli("build", str(docs), "--model", str(other), "--store", url).exit_code == 1


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_serve_over_a_qdrant_store(fake_model, tmp_path):
    from served import Server

    docs = tmp_path / "docs"
    _docs(docs)
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    build_ok(str(docs), "--model", str(fake_model), "--store", url)
    expected = json.loads(run_cli("query", *QUERIES, "-k", "5", "--json", "--store", url).stdout)
    running = Server("--store", url, "--absolute-paths")  # answers compared with the CLI's
    try:
        running.wait_ready()
        with running.client() as client:
            served = client.post("/query", json={"queries": QUERIES, "k": 5}).json()
    finally:
        assert running.stop() == 0
    assert served == expected


@pytest.mark.parametrize("url, problem", [
    ("qdrant://host:6333", "expected qdrant://HOST:PORT/COLLECTION"),
    ("qdrant://host:6333/bad name", "expected"),
    ("qdrant://host:6333/docs?shards=x", "shards=N"),
    ("redis://host/docs", "expected local, qdrant://"),
])
def test_store_urls_are_checked(url, problem):
    result = run_cli("status", "--store", url)
    assert result.exit_code == 2 and problem in result.stderr


def test_an_unreachable_qdrant_server_is_exit_4():
    result = run_cli("status", "--store", "qdrant://127.0.0.1:9/docs")
    assert result.exit_code == 4 and "cannot reach Qdrant at qdrant://127.0.0.1:9/docs" in result.stderr
