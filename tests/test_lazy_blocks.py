"""An index larger than memory: opening reads no vectors, each block of vectors is checked when it is
first read (once per process), `verify` checks them all, and old segments (64 MiB blocks) still answer.

The indexes here are written through the real store (a transaction, write_segment, commit) with pages of
256 x 128 float16 vectors: 64 KiB a page, one CHECK_BLOCK, so each page lies across two blocks."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli, torchless
from helpers import counted_failpoint, flip_byte

pytestmark = torchless  # its processes serve the fake model

DIM, ROWS, DOCS, PAGES = 128, 256, 6, 4  # 24 pages of 64 KiB after a 128-byte header: 25 blocks of 64 KiB


def _make_index(root: Path, seed: int = 7) -> None:
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.local.store import LocalStore

    rng = np.random.default_rng(seed)
    with LocalStore(root).begin() as txn:
        segment = txn.write_segment([rng.standard_normal((ROWS, DIM)).astype(np.float16) for _ in range(DOCS * PAGES)], DIM)
        documents = [Document(path=f"/docs/doc-{d}.pdf", sha256=f"{d:064x}", size=1, kind="pdf", pages=PAGES,
                              spans=[Span(segment=segment.id, first=d * PAGES, pages=PAGES)]) for d in range(DOCS)]
        txn.commit(documents, ModelInfo(id="synthetic", family="fake", fingerprint="synthetic", dim=DIM), Settings(dim=DIM))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lazy") / "default"
    _make_index(root)
    return root


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    import shutil

    shutil.copytree(pristine, tmp_path / "default")
    return tmp_path / "default"


def _vectors(root: Path) -> Path:
    return next((root / "segments").glob("*.vectors.npy"))


def _queries() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((12, DIM)).astype(np.float32) for _ in range(2)]


def _reference(root: Path) -> np.ndarray:
    """Every page's exact score, from the file itself (no store, no checks)."""
    from localgpt_index.index.scoring.maxsim import maxsim

    vectors = np.load(_vectors(root), mmap_mode="r")
    return maxsim(_queries(), vectors, np.arange(0, DOCS * PAGES * ROWS + 1, ROWS))


@pytest.fixture
def checks():
    """How many blocks are hashed, counted at the failpoint every block check passes."""
    with counted_failpoint("vectors.check_block") as counted:
        yield counted


def _blocks(root: Path) -> int:
    from localgpt_index.index.local.store import LocalStore

    [segment] = LocalStore(root).read_manifest().segments.values()
    return len(segment.checksum.blocks)


def test_opening_reads_no_vector_block_and_a_scan_checks_each_once(root, checks):
    from localgpt_index.index.local.store import LocalStore

    store = LocalStore(root)
    view = store.open_view()
    assert checks == [] and store.blocks_checked() == 0  # opening: sizes, header, offsets only
    hits = view.search_vectors(_queries(), k=DOCS * PAGES)
    assert len(checks) == _blocks(root) == store.blocks_checked()  # the scan checked every block as it streamed
    reference = _reference(root)
    for q, ranked in enumerate(hits):
        for hit in ranked:
            page = int(hit.path.split("-")[1][:-4]) * PAGES + hit.page - 1
            assert hit.score == pytest.approx(float(reference[q, page]), abs=1e-3)
    view.search_vectors(_queries(), k=3)
    again = store.reopened()
    again.open_view().search_vectors(_queries(), k=3)
    assert len(checks) == _blocks(root)  # once per process: not again, not by a reopened view


def test_a_damaged_block_is_found_by_the_reads_that_need_it_and_by_verify(root, checks):
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.local.store import LocalStore
    from localgpt_index.index.view import page_table

    reference = _reference(root)
    flip_byte(_vectors(root), _vectors(root).stat().st_size - 100)  # the last page, far from the first document's
    store = LocalStore(root)
    view = store.open_view()
    assert checks == []
    first_doc = {sid: tuple(a[:PAGES] for a in parts) for sid, parts in page_table(view.documents).items()}
    hits = view._rank(_queries(), view.documents, 4, "cpu", first_doc)  # what rescoring candidates does
    assert [h.score for h in hits[0]] == pytest.approx(sorted(reference[0, :PAGES], reverse=True), abs=1e-3)
    assert 0 < len(checks) < _blocks(root)
    with pytest.raises(IndexProblem, match=r"block \d+ \(bytes \d+\.\.\d+\) does not match its checksum; the vectors are damaged"):
        view.search_vectors(_queries(), k=3)
    with pytest.raises(IndexProblem, match="damaged"):  # and again: a damaged block is never scored
        view.search_vectors(_queries(), k=3)
    problems = LocalStore(root).verify()
    assert any(f"block {_blocks(root) - 1} of {_blocks(root)}" in p for p in problems), problems


def test_the_cli_reports_a_damaged_block_with_exit_1(fake_model, tmp_path):
    from docgen import make_pdf
    from helpers import build_ok

    index = tmp_path / "idx"
    make_pdf(tmp_path / "docs" / "a.pdf", ["a page", "another page"])
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", str(index))
    assert run_cli("status", "--index-dir", str(index)).exit_code == 0
    vectors = _vectors(index / "default")
    flip_byte(vectors, vectors.stat().st_size - 3)
    status = run_cli("status", "--index-dir", str(index))
    assert status.exit_code == 0, status.stderr  # opening does not read the vectors
    for args in (["query", "a page"], ["verify"]):
        result = run_cli(*args, "--index-dir", str(index))
        assert result.exit_code == 1, result.stderr
        assert "damaged" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_truncated_or_reshaped_vectors_file_fails_at_open(root):
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.local.store import LocalStore

    path = _vectors(root)
    raw = path.read_bytes()
    path.write_bytes(raw[:-1])
    with pytest.raises(IndexProblem, match="bytes, the manifest says"):
        LocalStore(root).open()
    # the same size, the header says Fortran order: the vectors would be read transposed
    path.write_bytes(raw.replace(b"'fortran_order': False", b"'fortran_order': True ", 1))
    with pytest.raises(IndexProblem, match="Fortran order"):
        LocalStore(root).open()


def _to_legacy_blocks(root: Path) -> None:
    """Rewrite the manifest as a lgpt-index before lazy checks wrote it: 64 MiB blocks."""
    from localgpt_index.index.format.checksums import LEGACY_CHECK_BLOCK, block_checksums

    head = json.loads((root / "HEAD").read_text())
    data = json.loads((root / head["manifest"]).read_text())
    for key, segment in data["segments"].items():
        path = root / "segments" / f"{key}.vectors.npy"
        segment["checksum"] = {"algorithm": "xxh3_64", "block_size": LEGACY_CHECK_BLOCK,
                               "blocks": block_checksums(path, block_size=LEGACY_CHECK_BLOCK)}
    raw = json.dumps(data).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "sha256": hashlib.sha256(raw).hexdigest()}))


def test_old_64_mib_blocks_still_answer_and_the_next_write_upgrades_them(root, checks):
    from localgpt_index.index.format.checksums import CHECK_BLOCK
    from localgpt_index.index.local.store import LocalStore

    reference = _reference(root)
    _to_legacy_blocks(root)
    assert _blocks(root) == 1
    store = LocalStore(root)
    hits = store.open_view().search_vectors(_queries(), k=1)
    assert hits[0][0].score == pytest.approx(float(reference[0].max()), abs=1e-3) and len(checks) == 1
    assert LocalStore(root).verify() == []
    with LocalStore(root).begin() as txn:  # the next write re-hashes them in small blocks
        txn.commit(txn.current.documents, txn.current.model, txn.current.settings)
    [segment] = LocalStore(root).read_manifest().segments.values()
    assert segment.checksum.block_size == CHECK_BLOCK and len(segment.checksum.blocks) > 1
    assert LocalStore(root).verify() == []


def test_an_upgrade_never_rehashes_damaged_vectors(root):
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.format.checksums import rechecksum
    from localgpt_index.index.local.store import LocalStore

    _to_legacy_blocks(root)
    flip_byte(_vectors(root), 5000)
    [segment] = LocalStore(root).read_manifest().segments.values()
    with pytest.raises(IndexProblem, match="does not match its checksum"):
        rechecksum(_vectors(root), segment.checksum)


def test_concurrent_readers_check_each_block_once(root, checks):
    from localgpt_index.index.local.store import LocalStore

    store = LocalStore(root)
    view = store.open_view()
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def read() -> None:
        start.wait()
        try:
            view.search_vectors(_queries(), k=3)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(checks) == _blocks(root) == store.blocks_checked()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_bench_smoke_run_opens_without_checking_and_rescoring_checks_only_candidates(tmp_path):
    import subprocess
    import sys

    script = Path(__file__).parent.parent / "scripts" / "bench_bigindex.py"
    done = subprocess.run([sys.executable, str(script), "--pages", "40", "--segment-pages", "20", "--candidates", "5", "--queries", "2",
                           "--warm", "--dir", str(tmp_path / "bench")], capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["pages"] == 40 and report["page_cache"] == "warm"
    assert report["open"]["blocks_checked"] == 0
    runs = report["queries"]["5"]["runs"]
    assert len(runs) == 2 and all(0 < run["blocks_checked"] <= 5 * 6 for run in runs)  # a 258 KiB page lies in 5 or 6 blocks of 64 KiB
    assert all(run["first_pass_s"] > 0 and run["rescore_s"] > 0 for run in runs)  # the real path: codes, then rescoring
    assert report["exact"]["blocks_checked"] > 0 and 0 <= report["recall_at_10"]["5"] <= 1
    assert report["open"]["memory_mb"]["RssAnon"] > 0 and report["peak_rss_anon_mb"] >= report["open"]["memory_mb"]["RssAnon"]
    assert not (tmp_path / "bench" / "default").exists() and not list((tmp_path / "bench").glob("exact-*"))


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_serve_starts_without_reading_vectors_and_answers_a_damaged_block_with_an_error(fake_model, tmp_path):
    from docgen import make_pdf
    from helpers import build_ok
    from served import Server

    index = tmp_path / "idx"
    make_pdf(tmp_path / "docs" / "a.pdf", ["a page", "another page"])
    build_ok(str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", str(index))
    vectors = _vectors(index / "default")
    flip_byte(vectors, vectors.stat().st_size - 3)
    running = Server("--index-dir", str(index), "-q")
    try:
        running.wait_ready()  # opened: the damaged block is not read until a query scores it
        with running.client() as client:
            answer = client.post("/query", json={"queries": ["a page"], "k": 3})
            status = client.get("/status")
        assert answer.status_code >= 400 and "does not match its checksum" in answer.text, answer.text
        assert "Traceback" not in answer.text and status.status_code == 200
    finally:
        running.stop()


def test_a_first_pass_rescoring_checks_only_its_candidates_blocks(root, checks):
    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.local.store import LocalStore

    store = LocalStore(root)
    view = store.open_view()
    assert view.scoring_path(5).path == "first-pass"  # the codes written with the segment
    expected = view.search_vectors(_queries(), k=3, first_pass=5)
    [files] = store._mmaps.values()
    read = set(np.flatnonzero(files.guard._done).tolist())
    assert 0 < len(checks) == len(read) <= 2 * 5 * 2 < _blocks(root)  # 2 queries x 5 candidates, a page in 2 blocks
    unread = max(set(range(_blocks(root))) - read)
    flip_byte(_vectors(root), unread * (64 << 10) + 10)
    fresh = LocalStore(root).open_view()
    assert fresh.search_vectors(_queries(), k=3, first_pass=5) == expected  # the damage lies outside what it reads
    with pytest.raises(IndexProblem, match=f"block {unread} "):
        fresh.search_vectors(_queries(), k=3)  # exact reads every block


def test_rescoring_reads_its_candidates_blocks_all_at_once_before_checking_them(root, monkeypatch):
    from localgpt_index.core import failpoints
    from localgpt_index.index.format import checksums
    from localgpt_index.index.local.store import LocalStore

    events: list[tuple] = []
    lock = threading.Lock()
    real = checksums.BlockGuard.read_into_cache

    def read(guard, lo: int, hi: int) -> None:
        with lock:
            events.append(("read", lo, hi))
        real(guard, lo, hi)

    monkeypatch.setattr(checksums.BlockGuard, "read_into_cache", read)
    failpoints.set_hook(lambda name: events.append(("check",)) if name == "vectors.check_block" else None)
    try:
        store = LocalStore(root)
        store.open_view().search_vectors(_queries()[:1], k=3, first_pass=5)
    finally:
        failpoints.set_hook(None)
    kinds = [event[0] for event in events]
    assert "read" in kinds and kinds.index("check") > max(i for i, kind in enumerate(kinds) if kind == "read")
    [files] = store._mmaps.values()
    read = {block for _, lo, hi in (e for e in events if e[0] == "read") for block in range(lo >> 16, -(-hi >> 16))}
    assert read == set(np.flatnonzero(files.guard._done).tolist()) and len(read) <= 5 * 2  # exactly the blocks checked


def test_the_codes_a_reader_keeps_are_mapped_from_their_blob_and_checked(root):
    import mmap

    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.local.store import LocalStore

    codes = LocalStore(root).open_view().artifact("codes")
    segment = next(iter(codes.parts))  # type: ignore[union-attr]
    words = codes.words(segment)  # type: ignore[union-attr]
    base = words
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)  # file-backed (the page cache), not a copy on the heap
    blob = root / "artifacts" / codes.parts[segment].blobs[0].name  # type: ignore[union-attr]  # its codes (then ids, codebook)
    flip_byte(blob, 5)
    with pytest.raises(IndexProblem, match="block 0 .* does not match its checksum; the codes are damaged"):  # checked by block
        LocalStore(root).open_view().search_vectors(_queries(), k=3, first_pass=5)
