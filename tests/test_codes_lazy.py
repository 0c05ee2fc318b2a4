"""Codes version 3 (issue 28): a reader maps a segment's codes without reading them and checks each 64 KiB
block when the first pass is about to score rows in it; version 2 codes still answer, and `upgrade` adds
their block hashes without coding again (a line a segment on stderr); the candidates' pages are read
while the first pass still runs (index/scoring/early_reads).

The indexes are written through the real store with pages of 256 x 128 float16 vectors: 4,096 rows (16
pages) share one 64 KiB block of codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import counted_failpoint, flip_byte

DIM, ROWS, PAGES = 128, 256, 4  # a document of 4 pages: 1,024 rows, a quarter of a codes block


def _make_index(root: Path, docs: int = 20, segment_docs: int = 20, seed: int = 11) -> None:
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.local.store import LocalStore

    rng = np.random.default_rng(seed)
    with LocalStore(root).begin() as txn:
        documents = []
        for first in range(0, docs, segment_docs):
            count = min(segment_docs, docs - first)
            segment = txn.write_segment([rng.standard_normal((ROWS, DIM)).astype(np.float16) for _ in range(count * PAGES)], DIM)
            documents += [Document(path=f"/docs/doc-{first + d:03d}.pdf", sha256=f"{first + d:064x}", size=1, kind="pdf", pages=PAGES,
                                   metadata={"doc": str(first + d)}, spans=[Span(segment=segment.id, first=d * PAGES, pages=PAGES)])
                          for d in range(count)]
        txn.commit(documents, ModelInfo(id="synthetic", family="fake", fingerprint="synthetic", dim=DIM), Settings(dim=DIM))


def _queries() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((12, DIM)).astype(np.float32) for _ in range(2)]


@pytest.fixture
def code_checks():
    """The code blocks hashed, counted at the failpoint each check of an artifact's block passes."""
    with counted_failpoint("artifact.check_block") as counted:
        yield counted


def _codes_blob(root: Path) -> tuple[Path, int]:
    """The one segment's codes blob and how many 64 KiB blocks it has."""
    from localgpt_index.index.local.store import LocalStore

    [segment] = LocalStore(root).read_manifest().segments.values()
    blob = segment.parts["codes"].blobs[0]
    return root / "artifacts" / blob.name, -(-blob.bytes // (64 << 10))


def test_the_codes_are_checked_block_by_block_as_the_first_pass_scores(tmp_path, code_checks):
    from localgpt_index.index.local.store import LocalStore

    root = tmp_path / "default"
    _make_index(root)  # 80 pages: 20,480 rows, 5 blocks of codes and one of ids
    [segment] = LocalStore(root).read_manifest().segments.values()
    part = segment.parts["codes"]
    assert part.version == 3 and part.meta["check_block"] == 64 << 10
    assert [b.bytes for b in part.blobs][-1] == 8 * (5 + 1)  # a hash for each block of the codes and of the ids

    view = LocalStore(root).open_view()
    view.artifact("codes").segment(segment.id)  # type: ignore[union-attr]  # mapped, nothing checked
    assert code_checks == []
    view.search_vectors(_queries(), k=3, first_pass=5, filters={"doc": "0"})  # rows 0..1023: codes block 0, ids block 0
    assert len(code_checks) == 2
    everything = view.search_vectors(_queries(), k=3, first_pass=5)
    assert len(code_checks) == 5 + 1  # each block once
    assert view.search_vectors(_queries(), k=3, first_pass=5) == everything and len(code_checks) == 6
    assert LocalStore(root).open_view().search_vectors(_queries(), k=3, first_pass=80) == LocalStore(root).open_view().search_vectors(
        _queries(), k=3)  # every page a candidate: the exact answer


def test_a_damaged_code_block_stops_the_first_pass_that_would_score_it_and_verify_finds_it(tmp_path):
    from conftest import run_cli

    from localgpt_index.core.errors import IndexProblem
    from localgpt_index.index.local.store import LocalStore

    root = tmp_path / "idx" / "default"
    _make_index(root)
    exact = LocalStore(root).open_view().search_vectors(_queries(), k=3)
    blob, _ = _codes_blob(root)
    flip_byte(blob, 3 * (64 << 10) + 100)  # block 3: rows 12,288.. (documents 12-15)
    view = LocalStore(root).open_view()
    assert view.search_vectors(_queries(), k=3, first_pass=5, filters={"doc": "0"})  # blocks 0 only: answers
    with pytest.raises(IndexProblem, match=r"block 3 \(bytes 196608\.\.262143\) does not match its checksum; the codes are damaged"):
        view.search_vectors(_queries(), k=3, first_pass=5)
    with pytest.raises(IndexProblem, match="block 3 "):
        view.search_vectors(_queries(), k=3, first_pass=5)  # every time it is read, never scored
    assert LocalStore(root).open_view().search_vectors(_queries(), k=3) == exact  # exact reads no codes
    problems = LocalStore(root).verify()
    assert any(blob.name in problem and "damaged" in problem for problem in problems), problems
    result = run_cli("verify", "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 1 and blob.name in result.stderr and "Traceback" not in result.stderr


def test_verify_finds_block_hashes_that_do_not_match_their_codes(tmp_path):
    from localgpt_index.index.scoring.codes import artifact
    from localgpt_index.index.local.blobs import LocalBlobs
    from localgpt_index.index.local.store import LocalStore

    root = tmp_path / "default"
    _make_index(root)
    [segment] = LocalStore(root).read_manifest().segments.values()
    part, blobs = segment.parts["codes"], LocalBlobs(root)
    assert artifact.CODES.check(part, blobs, True) == []
    wrong = blobs.put(np.zeros(6, dtype="<u8").tobytes(), "codes")  # sound as a blob (its own sha256), wrong as hashes
    forged = part.model_copy(update={"blobs": [*part.blobs[:-1], wrong]})
    assert artifact.CODES.check(forged, blobs, True) == ["its block hashes do not match its codes"]


class _V2:
    """Version 2's part writer: version 3's blobs without the block hashes."""

    def __init__(self, writer):
        self.writer = writer

    def add(self, *args):
        self.writer.add(*args)

    def seal(self, sink):
        part = self.writer.seal(sink)
        meta = {k: v for k, v in part.meta.items() if k != "check_block"}
        return part.model_copy(update={"version": 2, "blobs": part.blobs[:-1], "meta": meta})

    def discard(self):
        self.writer.discard()


def _v2_index(index: Path, docs: int, segment_docs: int) -> None:
    from helpers import artifacts_plugged

    from localgpt_index.index.scoring.codes.artifact import CODES, Codes

    class V2(Codes):
        version = 2

        def part_writer(self, dim):
            return _V2(CODES.part_writer(dim))

    with artifacts_plugged(V2()):
        _make_index(index / "default", docs, segment_docs)


def test_version_2_codes_still_answer_and_upgrade_adds_their_hashes_a_line_a_segment(tmp_path):
    from conftest import run_cli
    from helpers import verify_ok

    from localgpt_index.index.local.store import LocalStore

    index = tmp_path / "idx"
    _v2_index(index, docs=12, segment_docs=4)  # 3 segments
    shutil.copytree(index, tmp_path / "quiet")
    before = LocalStore(index / "default").read_manifest()
    assert {seg.parts["codes"].version for seg in before.segments.values()} == {2}
    view = LocalStore(index / "default").open_view()
    assert view.scoring_path(5).path == "first-pass" and view.scoring_path(5).hint is None  # read, checked whole
    answers = view.search_vectors(_queries(), k=3, first_pass=5)

    done = run_cli("upgrade", "--index-dir", str(index), "--json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["upgraded"] and report["segments_hashed"] == 3 and report["segments_coded"] == 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("segment ")]
    assert [line.split(" (")[0] for line in lines] == ["segment 1/3", "segment 2/3", "segment 3/3"], done.stderr
    assert all("block hashes added" in line for line in lines)
    after = LocalStore(index / "default").read_manifest()
    for sid, seg in after.segments.items():
        old, new = before.segments[sid].parts["codes"], seg.parts["codes"]
        assert new.version == 3 and new.blobs[:-1] == old.blobs  # the same codes, not computed again
    verify_ok(index)
    assert LocalStore(index / "default").open_view().search_vectors(_queries(), k=3, first_pass=5) == answers

    quiet = run_cli("upgrade", "--index-dir", str(tmp_path / "quiet"), "--quiet")
    assert quiet.exit_code == 0 and "segment " not in quiet.stderr, quiet.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_candidates_are_read_while_the_first_pass_runs_and_the_answer_is_unchanged(tmp_path, monkeypatch):
    import localgpt_index.index.scoring.early_reads as early_reads
    import localgpt_index.index.view as view_module
    from localgpt_index.index.scoring.codes import SegmentCodes
    from localgpt_index.index.local.store import LocalStore

    root = tmp_path / "default"
    _make_index(root, docs=40, segment_docs=4)  # 10 segments of 16 pages
    events: list[str] = []
    real_read_ahead, real_estimates = early_reads.read_ahead, SegmentCodes.estimates
    monkeypatch.setattr(early_reads, "read_ahead", lambda reads: (events.append("read"), real_read_ahead(reads))[1])
    monkeypatch.setattr(SegmentCodes, "estimates",
                        lambda self, *a, **k: (events.append("scored"), real_estimates(self, *a, **k))[1])
    view = LocalStore(root).open_view()
    answers = view.search_vectors(_queries(), k=3, first_pass=10)
    scored = [i for i, event in enumerate(events) if event == "scored"]
    assert len(scored) == 10 and 0 < events.index("read") < scored[-1]  # reads started before the last segment was scored
    assert scored[1] < events.index("read")  # not before START (15 %) of the pages were scored
    counts = view.read_counts
    assert counts.early > 0 and 0 <= counts.wasted < counts.early

    real_early = view_module.EarlyReads
    monkeypatch.setattr(view_module, "EarlyReads", lambda *a, **k: real_early(*a, **k, start=2.0))  # never: read after the pass
    late_only = LocalStore(root).open_view()
    assert late_only.search_vectors(_queries(), k=3, first_pass=10) == answers
    assert late_only.read_counts.early == 0 and late_only.read_counts.late > 0
