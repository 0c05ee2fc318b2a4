"""`lgpt-index upgrade` (issue 28): indexes written without binary codes, or with version 1's plain
sign codes, get current codes as one new generation through the transaction core; a reader never
writes them; a kill at any point leaves one sound generation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from localgpt_index.index.scoring.codes.pack import as_words, pack_codes


class _V1Writer:
    """Version 1's part writer (plain sign codes), as indexes written before version 2 hold them."""

    def __init__(self, dim):
        self.dim, self.chunks = dim, []

    def add(self, row, vectors, page, extra):
        self.chunks.append(pack_codes(np.asarray(vectors)))

    def seal(self, sink):
        from localgpt_index.index.format.manifest import PartRef

        codes = np.concatenate(self.chunks)
        return PartRef(version=1, blobs=[sink.put(codes.tobytes(), "codes")],
                       meta={"dim": self.dim, "rows": len(codes), "bytes_per_row": codes.shape[1], "blob_rows": 1 << 22})

    def discard(self):
        self.chunks = []


def _old_index(fake_model, corpus, tmp_path, codes: str):
    """An index as an older version wrote it: no codes part ("none") or version 1's ("v1")."""
    from helpers import artifacts_plugged, build_json

    from localgpt_index.index.scoring.codes import artifact
    from localgpt_index.index.scoring.codes.artifact import Codes

    class V1(Codes):
        version = 1

        def part_writer(self, dim):
            return _V1Writer(dim)

    index = tmp_path / "idx"
    with artifacts_plugged(unplugged=(artifact,)) if codes == "none" else artifacts_plugged(V1()):
        result, _ = build_json(corpus[0], index, "--model", str(fake_model))
    assert result.exit_code in (0, 3), result.stderr
    return index


def _manifest(index):
    from localgpt_index.index.local.store import LocalStore

    return LocalStore(index / "default").read_manifest()


def _query(index, *args):
    from conftest import run_cli

    result = run_cli("query", "quarterly revenue", "-k", "5", "--mode", "visual", "--index-dir", str(index), "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("codes", ["none", "v1"])
def test_upgrade_writes_current_codes_as_a_new_generation_and_the_first_pass_answers(fake_model, corpus, tmp_path, codes):
    from conftest import run_cli
    from helpers import verify_ok

    index = _old_index(fake_model, corpus, tmp_path, codes)
    before = _manifest(index)
    assert all(("codes" in seg.parts) == (codes == "v1") for seg in before.segments.values())
    verify_ok(index)  # version 1 parts are still sound
    files = sorted(p.relative_to(index) for p in index.rglob("*"))
    exact, _ = _query(index)
    asked, stderr = _query(index, "--first-pass", "2")
    assert asked["scoring"]["path"] == "exact" and "no binary codes" in asked["scoring"]["reason"]
    assert "hint:" in stderr and "lgpt-index upgrade" in stderr
    assert sorted(p.relative_to(index) for p in index.rglob("*")) == files  # nothing written by a reader

    done = run_cli("upgrade", "--index-dir", str(index), "--json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    after = _manifest(index)
    assert report["upgraded"] and report["generation"] == after.generation == before.generation + 1
    assert report["segments_coded"] == len(after.segments) and report["pages_coded"] == after.page_count
    assert after.documents == before.documents and set(after.segments) == set(before.segments)
    assert all(seg.parts["codes"].version == 3 for seg in after.segments.values())
    verify_ok(index)
    everything, _ = _query(index, "--first-pass", "100000")
    assert everything["scoring"]["path"] == "first-pass" and everything["scoring"]["hint"] is None
    assert everything["queries"][0]["results"] == exact["queries"][0]["results"]

    again = run_cli("upgrade", "--index-dir", str(index), "--json")
    assert again.exit_code == 0 and not json.loads(again.stdout)["upgraded"]
    assert _manifest(index).generation == after.generation  # nothing to do: no new generation


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("point", ["upgrade-segment", "before-head", "after-head"])
def test_a_kill_during_upgrade_leaves_one_sound_generation_and_a_rerun_finishes(fake_model, corpus, tmp_path, point):
    from conftest import run_cli, run_process
    from helpers import verify_ok

    index = _old_index(fake_model, corpus, tmp_path, "none")
    before = _manifest(index)
    exact, _ = _query(index)
    killed = run_process("upgrade", "--index-dir", str(index), env={"LGPT_FAILPOINT": point})
    assert killed.returncode == -9, killed.stderr
    verify_ok(index)
    now = _manifest(index)
    if point == "after-head":
        assert now.generation == before.generation + 1 and all("codes" in s.parts for s in now.segments.values())
    else:
        assert now.generation == before.generation and all("codes" not in s.parts for s in now.segments.values())
    assert _query(index)[0]["queries"][0]["results"] == exact["queries"][0]["results"]
    done = run_cli("upgrade", "--index-dir", str(index), "--json")
    assert done.exit_code == 0, done.stderr
    verify_ok(index)
    assert all(seg.parts["codes"].version == 3 for seg in _manifest(index).segments.values())
    leftovers = [p for p in (index / "default").rglob("*") if p.name.startswith(".tmp")]
    assert not leftovers


def test_upgrade_of_a_missing_index_says_so(tmp_path):
    from conftest import run_cli

    result = run_cli("upgrade", "--index-dir", str(tmp_path / "none"))
    assert result.exit_code == 1 and "no index" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_stored_version_1_codes_are_the_signs(fake_model, corpus, tmp_path):
    """The old-index fixture writes what version 1 wrote: the signs of the vectors."""
    from localgpt_index.index.local.store import LocalStore

    store = LocalStore(_old_index(fake_model, corpus, tmp_path, "v1") / "default")
    for seg in store.read_manifest().segments.values():
        vectors, _ = store.segment_arrays(seg)
        stored = store.open_view().artifact("codes")
        assert seg.id not in stored and seg.id in stored.stale  # read as absent
        assert seg.parts["codes"].meta["rows"] == len(as_words(pack_codes(vectors)))


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_status_names_the_first_pass_threshold_and_whether_auto_uses_it(fake_model, corpus, tmp_path, monkeypatch):
    from conftest import run_cli, validate

    from localgpt_index.index.scoring.codes import plan

    index = _old_index(fake_model, corpus, tmp_path, "v1")

    def status():
        result = run_cli("status", "--index-dir", str(index), "--json")
        assert result.exit_code == 0, result.stderr
        document = json.loads(result.stdout)
        validate(document, "status")
        return document["first_pass"]

    old = status()
    pages = _manifest(index).page_count
    assert old["auto_from_pages"] == plan.AUTO_FROM_PAGES and "20,000 pages" in old["threshold"]
    assert (old["auto_uses_it"], old["path"], old["coded_segments"]) == (False, "exact", 0)  # below the threshold, and v1 codes
    monkeypatch.setattr(plan, "AUTO_FROM_PAGES", pages)  # the threshold reached: still exact without current codes
    assert status()["path"] == "exact" and "no binary codes" in status()["reason"]
    assert run_cli("upgrade", "--index-dir", str(index)).exit_code == 0
    now = status()
    assert now["auto_uses_it"] and now["path"] == "first-pass" and now["coded_segments"] == now["segments"] > 0
    text = run_cli("status", "--index-dir", str(index)).stdout
    assert "first pass  auto: from" in text and "--first-pass auto here: uses it" in text


def test_upgrade_of_a_qdrant_store_writes_nothing_and_says_why(fake_model, tmp_path):
    from conftest import run_cli, validate
    from helpers import make_pdfs

    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 2)
    url = f"qdrant+path://{tmp_path / 'qd'}/notes"
    assert run_cli("build", str(docs), "--model", str(fake_model), "--store", url).exit_code == 0
    done = run_cli("upgrade", "--store", url, "--json")
    assert done.exit_code == 0, done.stderr
    report = json.loads(done.stdout)
    assert not report["upgraded"] and "Qdrant" in report["note"] and report["generation"] >= 1
    status = run_cli("status", "--store", url, "--json")
    assert status.exit_code == 0, status.stderr
    validate(json.loads(status.stdout), "status")  # first_pass says how Qdrant's own first pass would answer
