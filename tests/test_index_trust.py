"""Atomic commits under kill -9, incremental and resumable builds, locking, removal, corruption.

The fast tier: a fake model (deterministic vectors from the page bytes), real poppler, real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from localgpt_index.core import failpoints
from docgen import make_pdf, make_png
from helpers import build_ok, held_build, verify_ok

QUERIES = ["quarterly revenue", "invoice total", "market outlook"]


def _make_docs(folder: Path, names: list[str], start: int = 0) -> list[Path]:
    made = []
    for i, name in enumerate(names, start):
        if name.endswith(".png"):
            made.append(make_png(folder / name, f"Image {name}", size=(300 + 20 * i, 400)))
        else:
            made.append(make_pdf(folder / name, [f"{name} page {p}" for p in range(1, 2 + i % 3)]))
    return made


BASE = ["a-report.pdf", "b-scan.png", "c-notes.pdf"]
EXTRA = ["d-deck.pdf", "e-photo.png", "f-summary.pdf", "g-appendix.pdf"]


def _cli(*args: str, env: dict | None = None, **popen) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "localgpt_index", *args], capture_output=True, text=True, env=full_env, timeout=300, **popen
    )


def _results(index_dir: Path) -> list:
    out = run_cli("query", *QUERIES, "-k", "20", "--index-dir", str(index_dir), "--json")
    assert out.exit_code == 0, out.stderr
    return [[(h["path"], h["page"], round(h["score"], 4)) for h in q["results"]] for q in json.loads(out.stdout)["queries"]]


@pytest.fixture(scope="module")
def scenario(fake_model, tmp_path_factory):
    """A folder indexed with BASE (generation 1), EXTRA then added; reference results for both states."""
    work = tmp_path_factory.mktemp("trust")
    docs = work / "docs"
    _make_docs(docs, BASE)
    base_index = work / "base-index"
    os.environ["HF_HUB_OFFLINE"] = "1"
    args = ["--model", str(fake_model), "--batch-size", "1"]
    build_ok(str(docs), *args, "--index-dir", str(base_index))
    before = _results(base_index)
    _make_docs(docs, EXTRA, start=len(BASE))
    full_index = work / "full-index"
    build_ok(str(docs), *args, "--index-dir", str(full_index))
    after = _results(full_index)
    assert before != after
    return {"work": work, "docs": docs, "base_index": base_index, "before": before, "after": after, "args": args}


def _fresh_copy(scenario, tmp_path) -> Path:
    index_dir = tmp_path / "index"
    shutil.copytree(scenario["base_index"], index_dir)
    return index_dir


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("point", ["write-vectors", "before-head"])
def test_kill_before_the_switch_leaves_the_old_generation(scenario, tmp_path, point):
    index_dir = _fresh_copy(scenario, tmp_path)
    killed = _cli("build", str(scenario["docs"]), *scenario["args"], "--index-dir", str(index_dir),
                  env={"LGPT_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    verify_ok(index_dir)
    assert _results(index_dir) == scenario["before"]
    # the next build cleans up the orphans and finishes the job
    build_ok(str(scenario["docs"]), "--index-dir", str(index_dir), "--batch-size", "1")
    assert _results(index_dir) == scenario["after"]
    segments = {p.name.split(".")[0] for p in (index_dir / "default" / "segments").iterdir()}
    manifests = sorted(p.name for p in (index_dir / "default").glob("gen-*.json"))
    assert len(manifests) == 2 and len(segments) == 2  # current and previous generation only


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_kill_right_after_the_switch_is_the_new_generation(scenario, tmp_path):
    index_dir = _fresh_copy(scenario, tmp_path)
    killed = _cli("build", str(scenario["docs"]), *scenario["args"], "--index-dir", str(index_dir),
                  env={"LGPT_FAILPOINT": "after-head"})
    assert killed.returncode == -9
    verify_ok(index_dir)
    assert _results(index_dir) == scenario["after"]
    again = run_cli("build", str(scenario["docs"]), "--index-dir", str(index_dir), "--json")
    assert json.loads(again.stdout)["model_calls"] == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_kill_during_embedding_resumes_from_the_last_batch(scenario, tmp_path):
    index_dir = _fresh_copy(scenario, tmp_path)
    killed = _cli("build", str(scenario["docs"]), *scenario["args"], "--commit-every", "1", "--index-dir",
                  str(index_dir), env={"LGPT_FAILPOINT": "encode:5"})
    assert killed.returncode == -9
    verify_ok(index_dir)
    status = json.loads(run_cli("status", "--index-dir", str(index_dir), "--json").stdout)
    committed_extra = status["documents"] - len(BASE)
    assert 1 <= committed_extra < len(EXTRA)  # some batches committed, not all
    from localgpt_index.index.local.store import LocalStore

    partial = sum(d.pages for d in LocalStore(index_dir / "default").read_manifest().in_progress)  # carried on, not redone
    resumed = run_cli("build", str(scenario["docs"]), "--index-dir", str(index_dir), "--batch-size", "1", "--json")
    report = json.loads(resumed.stdout)
    assert report["unchanged"] == len(BASE) + committed_extra
    assert report["indexed"] == len(EXTRA) - committed_extra
    assert report["pages_embedded"] == report["model_calls"] == report["pages_total"] - status["pages"] - partial
    assert _results(index_dir) == scenario["after"]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_incremental_change_delete_rename(fake_model, tmp_path):
    docs = tmp_path / "docs"
    files = _make_docs(docs, BASE + EXTRA)
    common = ["--index-dir", str(tmp_path / "idx"), "--json"]
    first = json.loads(run_cli("build", str(docs), "--model", str(fake_model), *common).stdout)
    assert first["indexed"] == 7
    before = run_cli("query", "report", "-k", "50", "--index-dir", str(tmp_path / "idx"), "--json").stdout

    make_pdf(files[0], ["a changed report", "with", "three pages"])  # new bytes
    # the old entry answers until the new one is committed: a build killed before its commit changes nothing
    killed = _cli("build", str(docs), "--index-dir", str(tmp_path / "idx"), env={"LGPT_FAILPOINT": "before-head"})
    assert killed.returncode == -9, killed.stderr
    verify_ok(tmp_path / "idx")
    assert run_cli("query", "report", "-k", "50", "--index-dir", str(tmp_path / "idx"), "--json").stdout == before
    assert sum(h["path"].endswith("a-report.pdf") for h in json.loads(before)["queries"][0]["results"]) == 1  # its one old page

    files[1].unlink()  # deleted
    files[2].rename(docs / "c-renamed.pdf")  # same bytes, new name
    report = json.loads(run_cli("build", str(docs), *common).stdout)
    assert (report["indexed"], report["removed"], report["reused"]) == (1, 2, 1)  # removed: deleted, renamed; changed: replaced
    assert report["pages_embedded"] == 3 and report["model_calls"] >= 1
    paths = {Path(d["path"]).name for d in _catalog(tmp_path / "idx")}
    assert "b-scan.png" not in paths and "c-renamed.pdf" in paths and "c-notes.pdf" not in paths
    assert report["pages_total"] == sum(d["pages"] for d in _catalog(tmp_path / "idx"))

    results = run_cli("query", "report", "-k", "50", "--index-dir", str(tmp_path / "idx"), "--json")
    hits = json.loads(results.stdout)["queries"][0]["results"]
    assert not any(h["path"].endswith(("b-scan.png", "c-notes.pdf")) for h in hits)
    assert sum(h["path"].endswith("a-report.pdf") for h in hits) == 3


def _catalog(index_dir: Path) -> list[dict]:
    from localgpt_index.query.search import open_index

    return [vars(d) for d in open_index(index_dir).documents]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_rebuild_keeps_the_old_generation_until_it_commits(scenario, tmp_path):
    index_dir = _fresh_copy(scenario, tmp_path)
    killed = _cli("build", str(scenario["docs"]), *scenario["args"], "--rebuild", "--commit-every", "1",
                  "--index-dir", str(index_dir), env={"LGPT_FAILPOINT": "encode:6"})
    assert killed.returncode == -9
    assert _results(index_dir) == scenario["before"]  # no partial commit of a rebuild
    rebuilt = run_cli("build", str(scenario["docs"]), *scenario["args"], "--rebuild", "--commit-every", "1",
                      "--index-dir", str(index_dir), "--json")
    assert rebuilt.exit_code == 0, (rebuilt.stdout, rebuilt.stderr)
    report = json.loads(rebuilt.stdout)
    assert report["indexed"] == len(BASE + EXTRA) and report["generation"] == 2
    assert _results(index_dir) == scenario["after"]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_two_writers_exactly_one_proceeds(scenario, tmp_path):
    index_dir = _fresh_copy(scenario, tmp_path)
    args = ["build", str(scenario["docs"]), *scenario["args"], "--index-dir", str(index_dir)]
    release = tmp_path / "release"
    first = held_build(args, release, "encode")
    try:
        second = _cli(*args)  # the first writer holds the lock, mid-build
    finally:
        release.touch()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 1 and "is being written by pid" in second.stderr, second.stderr
    assert f"pid {first.pid}" in second.stderr
    assert _results(index_dir) == scenario["after"]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_lock_wait_and_stale_lock(scenario, tmp_path):
    from localgpt_index.index.local.store import LocalStore

    index_dir = _fresh_copy(scenario, tmp_path)
    store = LocalStore(index_dir / "default")
    source = f"qdrant+path://{tmp_path / 'qd'}/copy"  # import's source: a copy of this index
    assert run_cli("export", source, "--format", "qdrant", "--index-dir", str(index_dir)).exit_code == 0
    with store.lock():
        busy = run_cli("build", str(scenario["docs"]), "--index-dir", str(index_dir))
        assert busy.exit_code == 1 and f"pid {os.getpid()}" in busy.stderr and "--wait" in busy.stderr
        # every writer: remove and import fail at once the same way
        for writer in (["remove", str(scenario["docs"] / "a-report.pdf")], ["import", source, "--format", "qdrant"]):
            refused = run_cli(*writer, "--index-dir", str(index_dir))
            assert refused.exit_code == 1 and f"being written by pid {os.getpid()}" in refused.stderr, refused.stderr
        # queries never block on a writer
        assert _results(index_dir) == scenario["before"]
    # a writer killed while holding the lock leaves nothing that blocks: `build --wait` waits for it,
    # and the writer is killed while it waits (at the failpoint where a writer waits for the lock)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from localgpt_index.index.local.store import LocalStore; s = LocalStore(__import__('pathlib').Path(r'%s'));"
        "cm = s.lock(); cm.__enter__(); print('locked', flush=True); sys.stdin.read()") % store.root],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    busy = run_cli("build", str(scenario["docs"]), "--index-dir", str(index_dir))
    assert busy.exit_code == 1 and f"pid {holder.pid} on " in busy.stderr  # the holder's record names it
    waits: list[str] = []

    def kill_the_holder_while_waiting(name: str) -> None:
        if name == "lock-wait":
            waits.append(name)
            if holder.poll() is None:
                holder.kill()
                holder.wait()

    failpoints.set_hook(kill_the_holder_while_waiting)
    try:
        waited = run_cli("build", str(scenario["docs"]), "--batch-size", "1", "--wait", "60", "--index-dir", str(index_dir))
    finally:
        failpoints.set_hook(None)
        if holder.poll() is None:
            holder.kill()
    assert waited.exit_code == 0, waited.stderr
    assert waits and holder.returncode == -9  # it did wait, and went on once the holder was gone

    # import --wait waits too, and goes on once the holder lets go
    held = LocalStore(index_dir / "copy").lock()
    held.__enter__()
    released: list[str] = []

    def release_while_waiting(name: str) -> None:
        if name == "lock-wait" and not released:
            released.append(name)
            held.__exit__(None, None, None)

    failpoints.set_hook(release_while_waiting)
    try:
        imported = run_cli("import", source, "--format", "qdrant", "--wait", "60", "--name", "copy", "--index-dir", str(index_dir))
    finally:
        failpoints.set_hook(None)
        if not released:
            held.__exit__(None, None, None)
    assert imported.exit_code == 0 and released, imported.stderr


def test_remove_documents(scenario, tmp_path):
    index_dir = _fresh_copy(scenario, tmp_path)
    target = scenario["docs"] / "b-scan.png"
    out = run_cli("remove", str(target), "--index-dir", str(index_dir), "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["removed"] == [str(target)]
    assert target.exists()  # the file itself is untouched
    paths = {h[0] for q in _results(index_dir) for h in q}
    assert str(target) not in paths and len(paths) == 2
    missing = run_cli("remove", str(tmp_path / "nope.pdf"), "--index-dir", str(index_dir))
    assert missing.exit_code == 1 and "not in the index" in missing.stderr
    verify_ok(index_dir)


def _flip(path: Path, offset_from_end: int = 10) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 2)])


def _swap_words(path: Path) -> None:
    """Exchange two 8-byte words of the vectors: format 1's word sum could not see it."""
    data = bytearray(path.read_bytes())
    a, b = 128, 128 + 64
    data[a : a + 8], data[b : b + 8] = data[b : b + 8], data[a : a + 8]
    assert bytes(data) != path.read_bytes()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_flip, _truncate, _swap_words], ids=["flip", "truncate", "swap"])
@pytest.mark.parametrize("kind", ["HEAD", "manifest", "vectors", "offsets", pytest.param("pdf", marks=pytest.mark.slow)])
def test_damaged_files_are_detected(request, tmp_path, kind, damage):
    source = request.getfixturevalue("office_index" if kind == "pdf" else "plain_index")
    damaged = tmp_path / "index"
    shutil.copytree(source, damaged)
    root = damaged / "default"
    pattern = {"HEAD": "HEAD", "manifest": "gen-*.json", "vectors": "segments/*.vectors.npy",
               "offsets": "segments/*.offsets.npy", "pdf": "pdf/*.pdf"}[kind]
    target = next(root.glob(pattern)) if kind != "manifest" else root / json.loads((root / "HEAD").read_text())["manifest"]
    damage(target)
    checked = run_cli("verify", "--index-dir", str(damaged))
    assert checked.exit_code == 1
    assert "damaged" in checked.stderr or "unreadable" in checked.stderr, checked.stderr
    if kind != "pdf":  # the PDFs are for page images; answers come from the vectors
        queried = run_cli("query", "revenue", "--index-dir", str(damaged), "--json")
        assert queried.exit_code == 1  # under --json, the error document and nothing else
        assert json.loads(queried.stdout)["error"]["kind"] == "index", queried.stdout
        assert "Traceback" not in queried.stderr


def test_npy_headers_are_read_as_numpy_writes_them():
    import io
    import struct

    import numpy as np

    from localgpt_index.index.local.segments import _npy_header, read_npy_header

    arrays = [(np.zeros((3, 128), "<f2"), (1, 0)), (np.arange(5, dtype="<i8"), (1, 0)), (np.zeros(0, "<i8"), (2, 0)),
              (np.zeros((2, 3), "<f2", order="F"), (1, 0)), (np.zeros((), "<f4"), (3, 0))]
    for array, version in arrays:
        written = io.BytesIO()
        np.lib.format.write_array(written, array, version=version)
        raw = written.getvalue()
        shape, fortran, dtype, start = read_npy_header(raw)
        assert (shape, fortran, dtype) == (array.shape, bool(np.isfortran(array)), array.dtype), version
        assert raw[start:] == array.tobytes(order="A")
    assert read_npy_header(_npy_header(7, 64))[:3] == ((7, 64), False, np.dtype("<f2"))  # the segments' own
    for damaged in (raw[:9], b"\x93NUMPY\x01\x00" + struct.pack("<H", 21) + b"{'descr': __import__}", b"\x93NUMPY\x09\x00" + raw[8:]):
        with pytest.raises(ValueError):
            read_npy_header(damaged)


def test_a_query_parses_no_python(plain_index, monkeypatch):
    """CPython 3.11.7's AST conversion is not thread-safe (gh-106905): a query beside a build's thread raised
    SystemError where both parsed Python (numpy's .npy reader parsed each header with ast.literal_eval)."""
    import ast
    import builtins

    from localgpt_index import open_index

    open_index(plain_index).search("revenue", k=2)  # (the first loads modules, which compiles their classes' code)
    parsed: list[str] = []
    compiled = builtins.compile

    def spy(source, filename, mode, flags=0, *args, **kwargs):
        if flags & ast.PyCF_ONLY_AST:
            parsed.append(str(filename))
        return compiled(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", spy)
    assert open_index(plain_index).search("revenue", k=2)[0]
    assert parsed == []


@pytest.fixture(scope="module")
def plain_index(scenario, tmp_path_factory) -> Path:
    return scenario["base_index"]


@pytest.fixture(scope="module")
def office_index(fake_model, corpus, tmp_path_factory) -> Path:
    """An index with converted documents (real LibreOffice), so that it holds stored PDFs too."""
    root, _ = corpus
    index_dir = tmp_path_factory.mktemp("office-index")
    build_ok(str(root), "--model", str(fake_model), "--index-dir", str(index_dir))
    return index_dir


@pytest.mark.slow
def test_token_pooling_shrinks_the_index_and_is_kept_consistent(tiny_model, tmp_path):
    docs = tmp_path / "docs"
    _make_docs(docs, BASE)
    plain, pooled = tmp_path / "plain", tmp_path / "pooled"
    build_ok(str(docs), "--model", str(tiny_model), "--index-dir", str(plain))
    result = run_cli("build", str(docs), "--model", str(tiny_model), "--pool-factor", "3", "--index-dir", str(pooled), "--json")
    assert result.exit_code == 0, result.stderr
    status = {name: json.loads(run_cli("status", "--index-dir", str(d), "--json").stdout)
              for name, d in (("plain", plain), ("pooled", pooled))}
    assert status["pooled"]["pages"] == status["plain"]["pages"]
    # 29 vectors per tiny page pool to 29 // 3 = 9
    assert status["pooled"]["vectors"] == status["plain"]["pages"] * 9 and status["plain"]["vectors"] == status["plain"]["pages"] * 29
    assert status["pooled"]["settings"]["pool_factor"] == 3
    verify_ok(pooled)
    hits = json.loads(run_cli("query", "report", "-k", "3", "--index-dir", str(pooled), "--json").stdout)["queries"][0]["results"]
    assert len(hits) == 3
    mixed = run_cli("build", str(docs), "--pool-factor", "2", "--index-dir", str(pooled))
    assert mixed.exit_code == 1 and "--pool-factor 3" in mixed.stderr
