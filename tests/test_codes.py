"""Binary codes and the first pass (issue 28): packing, the hamming MaxSim kernel against a brute-force
reference (compiled and NumPy), exact scores after rescoring, and a planted needle found."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from localgpt_index.index.scoring.codes import SegmentCodes, first_pass, hamming_maxsim, kernel_name, pack_codes, query_words, two_pass
from localgpt_index.index.scoring.codes.pack import (CENTROIDS, as_words, code_segment, query_tables, residual_codes, train_codebook,
                                                      unpack_signs)
from localgpt_index.index.scoring.maxsim import maxsim

KERNELS = ["numba", "numpy"]


def _pages(rng, lengths, dim=128):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    vectors = rng.standard_normal((int(offsets[-1]), dim)).astype(np.float16)
    return vectors, offsets


def _reference(queries, vectors, offsets, pages):
    """Brute force: signs as +1/-1, hamming = (dim - <q, p>) / 2, per token the smallest per page, summed."""
    dim = vectors.shape[1]
    signs = np.where(vectors.view(np.uint16) < 0x8000, 1, -1)
    out = np.zeros((len(queries), len(pages)), dtype=np.int64)
    for i, q in enumerate(queries):
        q_signs = np.where(np.asarray(q, dtype=np.float32).view(np.uint32) < 0x80000000, 1, -1)
        for j, p in enumerate(pages):
            rows = signs[offsets[p] : offsets[p + 1]]
            if len(rows):
                out[i, j] = ((dim - q_signs @ rows.T) // 2).min(axis=1).sum()
    return out


@pytest.mark.parametrize("dim", [128, 96, 130, 8])
def test_packing_keeps_every_sign_in_one_bit_a_dimension(dim):
    rng = np.random.default_rng(dim)
    vectors = rng.standard_normal((300, dim)).astype(np.float16)
    vectors[0, 0], vectors[1, 0] = 0.0, -0.0
    codes = pack_codes(vectors)
    assert codes.dtype == np.uint8 and codes.shape == (300, -(-dim // 64) * 8)
    assert (pack_codes(np.ones((1, 128), np.float16)).nbytes, pack_codes(np.ones((1, 128), np.float32)).nbytes) == (16, 16)
    assert np.array_equal(unpack_signs(codes, dim), np.where(np.signbit(vectors), -1, 1))
    assert np.array_equal(pack_codes(vectors.astype(np.float32)), codes)
    assert not np.unpackbits(codes, axis=1)[:, dim:].any()  # the padding is zero bits
    assert as_words(codes).shape == (300, codes.shape[1] // 8)


@pytest.mark.parametrize("dim", [128, 64, 200])  # two words (the fused loop), one, four
@pytest.mark.parametrize("kernel", KERNELS)
def test_hamming_maxsim_equals_a_brute_force_reference(kernel, dim):
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 40, size=300)
    lengths[7] = 0  # a page without rows adds nothing
    vectors, offsets = _pages(rng, lengths, dim)
    queries = [rng.standard_normal((n, dim)).astype(np.float32) for n in (5, 1, 17)]
    q_words, owner = query_words(queries)
    words = as_words(pack_codes(vectors))
    for pages in (np.arange(300), np.array([299, 3, 7, 150]), np.array([], dtype=np.int64)):
        got = hamming_maxsim(q_words, owner, len(queries), words, offsets, pages, kernel=kernel)
        assert np.array_equal(got, _reference(queries, vectors, offsets, pages))


@pytest.mark.parametrize("dim", [128, 200])
@pytest.mark.parametrize("kernel", KERNELS)
def test_estimated_maxsim_equals_a_brute_force_reference(kernel, dim):
    """Residual codes: per token the largest q.centroid[id] - weight * hamming over a page's rows, summed."""
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 40, size=200)
    vectors, offsets = _pages(rng, lengths, dim)
    words, ids, book = code_segment(vectors)
    queries = [rng.standard_normal((n, dim)).astype(np.float32) for n in (5, 12)]
    q_words, owner = query_words(queries)
    table, weight = query_tables(np.concatenate(queries), book)
    signs = unpack_signs(words.view(np.uint8), dim)
    q_signs = np.where(np.concatenate(queries) >= 0, 1, -1)
    hamming = (dim - q_signs @ signs.T) / 2  # (tokens, rows)
    estimate = table[ids].T - weight[:, None] * hamming
    best = np.maximum.reduceat(estimate, offsets[:-1], axis=1)
    expected = np.stack([best[owner == n].sum(axis=0) for n in range(len(queries))])
    pages = np.arange(200)
    got = SegmentCodes("s", words, offsets, pages, ids, book).estimates(q_words, owner, np.concatenate(queries), 2, kernel=kernel)
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_residual_codes_keep_the_exact_top_10_where_pages_share_large_components():
    """Vectors like the tiny checkpoint's (and ColPali's): each page's row r is one shared vector per
    position plus a small part of its own, so the signs of the vectors are the same for every page and
    plain sign codes rank at random; the residual codes keep the exact top-10 among few candidates."""
    rng = np.random.default_rng(5)
    positions = rng.standard_normal((24, 128)).astype(np.float32)
    pages, rows = 600, 24
    vectors = (np.tile(positions, (pages, 1)) + 0.06 * rng.standard_normal((pages * rows, 128))).astype(np.float16)
    offsets = np.arange(pages + 1, dtype=np.int64) * rows
    queries = [rng.standard_normal((12, 128)).astype(np.float32) for _ in range(10)]
    words, ids, book = code_segment(vectors)
    coded = SegmentCodes("s", words, offsets, np.arange(pages), ids, book)
    plain = SegmentCodes("s", as_words(pack_codes(vectors)), offsets, np.arange(pages))

    def recall(segment):
        found = []
        for q in queries:
            exact = set(np.argsort(-maxsim([q], vectors, offsets)[0], kind="stable")[:10])
            found.append(len(exact & {p for _, p, _ in two_pass([q], [segment], [vectors], 150, 10)[0]}) / 10)
        return np.mean(found)

    assert recall(coded) >= 0.85 and recall(plain) <= 0.5  # measured: 0.91 and 0.30


def test_the_compiled_kernel_is_there_and_equals_numpy_over_many_pages():
    assert kernel_name() == "numba"  # numba is a dependency: the first pass must not silently run the slow kernel
    rng = np.random.default_rng(2)
    vectors, offsets = _pages(rng, rng.integers(50, 120, size=800))
    q_words, owner = query_words([rng.standard_normal((20, 128)).astype(np.float32)])
    words = as_words(pack_codes(vectors))
    fast = hamming_maxsim(q_words, owner, 1, words, offsets, kernel="numba")
    assert np.array_equal(fast, hamming_maxsim(q_words, owner, 1, words, offsets, kernel="numpy"))


def test_concurrent_callers_get_their_own_answers():
    rng = np.random.default_rng(3)
    vectors, offsets = _pages(rng, rng.integers(10, 40, size=3000))
    words = as_words(pack_codes(vectors))
    queries = [[rng.standard_normal((12, 128)).astype(np.float32)] for _ in range(6)]
    expected = [hamming_maxsim(*query_words(q), 1, words, offsets) for q in queries]
    got: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(queries))

    def ask(i):
        start.wait()
        got[i] = hamming_maxsim(*query_words(queries[i]), 1, words, offsets)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(got[i], expected[i]) for i in range(len(queries)))


def _segments(rng, count=2, pages=400):
    segments, vectors = [], []
    for n in range(count):
        v, offsets = _pages(rng, rng.integers(20, 80, size=pages))
        segments.append(SegmentCodes(f"s{n}", as_words(pack_codes(v)), offsets, np.arange(pages, dtype=np.int64)))
        vectors.append(v)
    return segments, vectors


def test_rescoring_returns_the_exact_scores_of_the_candidates_and_all_candidates_is_exact():
    rng = np.random.default_rng(4)
    segments, vectors = _segments(rng)
    query = rng.standard_normal((9, 128)).astype(np.float32)
    exact = {s.segment: maxsim([query], v, s.offsets)[0] for s, v in zip(segments, vectors)}
    picks = first_pass([query], segments, 50)[0]
    assert sum(len(p) for p in picks.values()) == 50
    hits = two_pass([query], segments, vectors, 50, k=50)[0]
    assert {(s, p) for s, p, _ in hits} == {(s, int(p)) for s, ps in picks.items() for p in ps}
    for segment, page, score in hits:
        assert score == pytest.approx(float(exact[segment][page]), rel=1e-6)
    everything = two_pass([query], segments, vectors, 10_000, k=10)[0]
    ranked = sorted(((float(sc), s, p) for s, scores in exact.items() for p, sc in enumerate(scores)), key=lambda x: (-x[0], x[1], x[2]))
    assert [(s, p) for s, p, _ in everything] == [(s, p) for _, s, p in ranked[:10]]


def test_a_subset_of_pages_is_searched_and_positions_refer_to_it():
    rng = np.random.default_rng(5)
    segments, _ = _segments(rng, count=1)
    subset = SegmentCodes("s0", segments[0].words, segments[0].offsets, np.array([5, 9, 300], dtype=np.int64))
    picks = first_pass([rng.standard_normal((4, 128)).astype(np.float32)], [subset], 2)[0]
    assert set(picks) == {"s0"} and len(picks["s0"]) == 2 and set(picks["s0"]) <= {0, 1, 2}


def test_a_planted_needle_is_found_with_few_candidates():
    """One page holds the query's tokens (with noise) among 2 x 400 random pages: the first pass keeps it."""
    rng = np.random.default_rng(6)
    segments, vectors = _segments(rng)
    query = rng.standard_normal((12, 128)).astype(np.float32)
    needle = 321
    start = int(segments[1].offsets[needle])
    vectors[1][start : start + 12] = (query + 0.6 * rng.standard_normal(query.shape)).astype(np.float16)
    segments[1] = SegmentCodes("s1", as_words(pack_codes(vectors[1])), segments[1].offsets, segments[1].pages)
    hits = two_pass([query], segments, vectors, candidates=5, k=1)[0]
    assert hits[0][:2] == ("s1", needle)


def test_without_numba_the_numpy_kernel_answers(monkeypatch):
    from localgpt_index.index.scoring.codes import kernel as module

    monkeypatch.setattr(module, "_numba_kernel", lambda: None)
    assert module.kernel_name() == "numpy"
    rng = np.random.default_rng(7)
    vectors, offsets = _pages(rng, rng.integers(1, 30, size=50))
    queries = [rng.standard_normal((6, 128)).astype(np.float32)]
    got = module.hamming_maxsim(*query_words(queries), 1, as_words(pack_codes(vectors)), offsets)
    assert np.array_equal(got, _reference(queries, vectors, offsets, np.arange(50)))
    with pytest.raises(RuntimeError, match="numba"):
        module.hamming_maxsim(*query_words(queries), 1, as_words(pack_codes(vectors)), offsets, kernel="numba")


def _query(index, *args):
    import json

    from conftest import run_cli

    # visual: the first pass is of the visual list (hybrid would add the text list's pages)
    result = run_cli("query", "quarterly revenue", "-k", "5", "--mode", "visual", "--index-dir", str(index), "--json", *args)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), result.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_build_writes_codes_and_the_first_pass_answers_from_them(fake_model, corpus, tmp_path):
    from helpers import build_json, verify_ok

    from localgpt_index.query.search import open_index

    index = tmp_path / "idx"
    result, _ = build_json(corpus[0], index, "--model", str(fake_model))
    assert result.exit_code in (0, 3), result.stderr
    view = open_index(index).view
    segments = view.manifest.segments.values()
    assert segments and all(seg.parts["codes"].meta["rows"] == seg.rows for seg in segments)
    for seg in segments:  # the stored codes are the residuals' signs of the stored vectors against the stored codebook
        vectors, _ = view.store.segment_arrays(seg)
        stored = view.artifact("codes").segment(seg.id)
        codes, ids, _ = residual_codes(vectors, stored.codebook.centroids)
        assert np.array_equal(stored.words, as_words(codes)) and np.array_equal(stored.ids, ids)
        assert len(stored.codebook.centroids) == min(seg.rows, CENTROIDS)
    verify_ok(index)
    exact, _ = _query(index)
    assert "scoring" not in exact  # without --first-pass: exact, the document as before
    everything, _ = _query(index, "--first-pass", "100000")
    assert everything["scoring"] == {"path": "first-pass", "candidates": 100000, "reason": "asked for", "hint": None,
                                     "exact_segments": 0}
    assert everything["queries"][0]["results"] == exact["queries"][0]["results"]
    narrow, _ = _query(index, "--first-pass", "2")
    assert len(narrow["queries"][0]["results"]) == 2 and narrow["scoring"]["candidates"] == 2
    exact_scores = {(h["path"], h["page"]): h["score"] for h in _query(index, "-k", "1000")[0]["queries"][0]["results"]}
    assert all(h["score"] == pytest.approx(exact_scores[(h["path"], h["page"])], rel=1e-6) for h in narrow["queries"][0]["results"])
    auto, _ = _query(index, "--first-pass", "auto")
    assert auto["scoring"]["path"] == "exact" and "auto" in auto["scoring"]["reason"]

    _set_codes_version(index / "default", 9)  # codes of a newer lgpt-index: treated as no codes
    newer, stderr = _query(index, "--first-pass", "2")
    assert newer["scoring"]["path"] == "exact" and newer["queries"][0]["results"] == exact["queries"][0]["results"]
    assert "hint:" in stderr and "lgpt-index upgrade" in stderr


def _set_codes_version(root, version: int) -> None:
    """Rewrite the current manifest as if every segment's codes part were of `version` (HEAD's sha256 recomputed)."""
    import hashlib
    import json

    head = json.loads((root / "HEAD").read_text())
    data = json.loads((root / head["manifest"]).read_text())
    for segment in data["segments"].values():
        segment["parts"]["codes"]["version"] = version
    raw = json.dumps(data).encode()
    (root / head["manifest"]).write_bytes(raw)
    (root / "HEAD").write_text(json.dumps({**head, "sha256": hashlib.sha256(raw).hexdigest()}))


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_an_index_without_codes_is_scored_exactly_with_a_hint_and_the_reader_writes_none(fake_model, corpus, tmp_path):
    from helpers import artifacts_plugged, build_json

    from localgpt_index.index.scoring.codes import artifact as codes

    index = tmp_path / "idx"
    with artifacts_plugged(unplugged=(codes,)):
        result, _ = build_json(corpus[0], index, "--model", str(fake_model))
    assert result.exit_code in (0, 3), result.stderr
    before = sorted(p.relative_to(index) for p in index.rglob("*"))
    exact, _ = _query(index)
    asked, stderr = _query(index, "--first-pass", "2")
    assert asked["scoring"]["path"] == "exact" and "no binary codes" in asked["scoring"]["reason"]
    assert "hint:" in stderr and "lgpt-index upgrade" in stderr
    assert asked["queries"][0]["results"] == exact["queries"][0]["results"]
    assert sorted(p.relative_to(index) for p in index.rglob("*")) == before  # nothing derived by a reader


def test_first_pass_auto_turns_on_above_the_threshold(monkeypatch):
    from localgpt_index.index.scoring.codes import plan

    assert plan.choose("auto", plan.AUTO_FROM_PAGES - 1, 1, ["a"], {"a"}).path == "exact"
    on = plan.choose("auto", plan.AUTO_FROM_PAGES, 1, ["a", "b"], {"a"})
    assert (on.path, on.candidates, on.exact_segments) == ("first-pass", plan.DEFAULT_CANDIDATES, 1) and on.hint
    monkeypatch.setattr(plan, "physical_memory", lambda: 1000)
    assert plan.choose("auto", 10, 1001, ["a"], {"a"}).path == "first-pass"  # larger than memory
    assert plan.choose(None, 10**6, 10**12, ["a"], {"a"}).path == "exact"  # exact stays the default


def test_first_pass_takes_a_number_or_auto(fake_model, tmp_path):
    from conftest import run_cli

    for bad in ("0", "many", "-3"):
        result = run_cli("query", "x", "--first-pass", bad, "--index-dir", str(tmp_path / "none"))
        assert result.exit_code == 2 and "neither a number of candidate pages" in result.stderr, result.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_bench_quick_mode_runs_and_reports_recall_and_times(capsys):
    """scripts/bench_first_pass.py --quick --json: every figure present; with every page a candidate the first
    pass is exact (recall 1.0), so a broken rescoring or candidate split shows here."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "bench_first_pass.py"
    spec = importlib.util.spec_from_file_location("bench_first_pass", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.main(["--quick", "--json"])
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(report))
    assert report["kernel"] == "numba" and report["random"]["recall_at_10"][400] == 1.0
    assert report["timing"]["kernel_pages_per_s"] > 0 and report["big"]["pages"] == 2000
    assert set(report["big"]) >= {"first_pass_s", "rescore_s", "total_s", "within_1_5_s", "codes_bytes"}


def test_segments_written_before_codes_are_scored_exactly_beside_coded_ones(fake_model, tmp_path):
    """An index whose first segment has no codes (written before them), then a build that adds documents:
    the new segment gets codes, the old one is not given any (derive happens in no build nor reader),
    and a first pass keeps every page of the old segment (scored exactly) beside its candidates."""
    from helpers import artifacts_plugged, build_json, make_pdfs

    from localgpt_index.index.scoring.codes import artifact as codes
    from localgpt_index.query.search import open_index

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdfs(docs, 2, 3, "old")
    with artifacts_plugged(unplugged=(codes,)):
        assert build_json(docs, index, "--model", str(fake_model))[0].exit_code == 0
    make_pdfs(docs, 2, 3, "new")
    assert build_json(docs, index, "--model", str(fake_model))[0].exit_code == 0
    segments = list(open_index(index).manifest.segments.values())
    assert sorted("codes" in seg.parts for seg in segments) == [False, True]
    answer, stderr = _query(index, "--first-pass", "1", "-k", "12")
    assert answer["scoring"]["path"] == "first-pass" and answer["scoring"]["exact_segments"] == 1
    assert "hint:" in stderr and "lgpt-index upgrade" in stderr
    paths = [h["path"] for h in answer["queries"][0]["results"]]
    assert sum("old-" in p for p in paths) == 6 and sum("new-" in p for p in paths) == 1  # 6 exact + 1 candidate


def test_damaged_codes_are_found_by_verify(fake_model, tmp_path):
    from conftest import run_cli
    from helpers import build_json, make_pdfs

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdfs(docs, 1, 2)
    assert build_json(docs, index, "--model", str(fake_model))[0].exit_code == 0
    blob = next((index / "default" / "artifacts").glob("*.codes"))
    data = bytearray(blob.read_bytes())
    data[0] ^= 0xFF
    blob.write_bytes(bytes(data))
    result = run_cli("verify", "--index-dir", str(index))
    assert result.exit_code != 0 and "codes" in (result.stdout + result.stderr)


@pytest.mark.slow
def test_a_real_checkpoint_build_stores_codes_and_the_first_pass_with_every_page_is_exact(tiny_model, corpus, tmp_path):
    """The tiny checkpoint (torch) on rendered pages: codes stored for every row, and with every page a
    candidate the two passes return the exact ranking; with one candidate, one exact hit."""
    from helpers import build_json

    from localgpt_index.query.search import open_index

    index = tmp_path / "idx"
    result, _ = build_json(corpus[0], index, "--model", str(tiny_model))
    assert result.exit_code in (0, 3), result.stderr
    view = open_index(index).view
    assert all(seg.parts["codes"].meta["rows"] == seg.rows for seg in view.manifest.segments.values())
    exact, _ = _query(index)
    everything, _ = _query(index, "--first-pass", "100000")
    assert everything["scoring"]["path"] == "first-pass"
    assert [(h["path"], h["page"]) for h in everything["queries"][0]["results"]] == \
        [(h["path"], h["page"]) for h in exact["queries"][0]["results"]]
    one, _ = _query(index, "--first-pass", "1")
    assert len(one["queries"][0]["results"]) == 1


def test_codes_split_into_several_blobs_read_back_whole(monkeypatch):
    from localgpt_index.index.scoring.codes import artifact

    class Blobs:
        def __init__(self):
            self.data = {}

        def put(self, data, ext):
            from localgpt_index.index.format.manifest import BlobRef
            import hashlib

            digest = hashlib.sha256(data).hexdigest()
            self.data[digest] = data
            return BlobRef(name=f"{digest}.{ext}", bytes=len(data), sha256=digest)

        def read(self, ref):
            return self.data[ref.sha256]

    monkeypatch.setattr(artifact, "BLOB_ROWS", 7)
    monkeypatch.setattr(artifact, "TRAIN_ROWS", 10)  # the codebook is learned from the first 14 rows (two pages)
    rng = np.random.default_rng(8)
    pages = [rng.standard_normal((n, 128)).astype(np.float16) for n in (5, 9, 1, 6)]
    writer, blobs = artifact.CODES.part_writer(128), Blobs()
    for row, page in enumerate(pages):
        writer.add(row, page, None, {})
    part = writer.seal(blobs)
    # codes in blobs of 7 rows, the ids in blobs of 7 rows, the codebook (14 centroids and sigma), a hash a block of each
    assert [b.bytes for b in part.blobs] == [7 * 16] * 3 + [7] * 3 + [15 * 128 * 4] + [6 * 8]
    assert artifact.CODES.check(part, blobs, True) == []
    stored = artifact.CODES.open(None, {"s": part}, blobs).segment("s")
    assert np.array_equal(stored.codebook.centroids, train_codebook(np.concatenate(pages[:2])))
    codes, ids, abs_sum = residual_codes(np.concatenate(pages), stored.codebook.centroids)
    assert np.array_equal(stored.words, as_words(codes)) and np.array_equal(stored.ids, ids)
    assert np.allclose(stored.codebook.sigma, abs_sum / 21)
    bad = part.model_copy(update={"meta": {**part.meta, "rows": 22}})
    assert artifact.CODES.check(bad, blobs, True)  # the blobs do not hold what the entry says
