"""An index larger than memory: N synthetic pages of 1,030 x 128 float16 vectors written through the real
store (a transaction, write_segment with its binary codes, commit), then, in a fresh process (the scorer
loaded first, as in `serve` or a Python program): the time and bytes read to open it, then queries through
the real query path (LocalView.search_vectors with first_pass=C: the first pass over the stored codes,
exact rescoring of the C candidates) for each C, one query at a time, and their recall@10 against one
exact pass over every page for all the queries at once (its answers kept beside the index for reruns).

    python scripts/bench_bigindex.py --quick                  # 2,000 pages (about 0.5 GB), in a temporary folder
    python scripts/bench_bigindex.py --pages 40 --segment-pages 20 --candidates 5 --warm   # tests/test_lazy_blocks.py
    python scripts/bench_bigindex.py --pages 100000 --dir /work/big100k --keep   # 26 GB: check df first
    python scripts/bench_bigindex.py --pages 100000 --dir /work/big100k --reuse  # measure again, no write
    python scripts/bench_bigindex.py --pages 100000 --dir /work/big100k-v3 --reuse --candidates 100,300,1000 --queries 5 \
        --compare-early --first-query-warm                                        # issue 28's cold-disk numbers

The page cache is dropped before the measuring process starts where this process may (root:
/proc/sys/vm/drop_caches), and the report says whether it was ("cold") or not ("warm"). The first query
of the process maps the codes and reads them from disk when cold (version 3 codes are checked block by block
as the first pass scores them; version 2's sha256 of every blob first); `--first-query-warm` runs a second
fresh process for its first query with the codes cached. Before every
later query the vectors files are evicted from the page cache and their blocks marked unchecked (--vectors-cache
cold, the default: an index larger than memory keeps only its codes cached), so its rescoring reads and checks
its candidates' blocks from disk; "again"
is the same query once more with everything cached. Each query reports its wall and CPU seconds (first pass,
prefetch, rescoring), the candidates' bytes read early (during the first pass: index/scoring/early_reads.py), late
and wasted; `--compare-early` runs each query also with early reads off, interleaved. Then, in the same process,
the disk's random-read rate (1,000 reads of 256 KiB at 16-128 in flight, and of 1 MiB) and the floor it gives
per C (first pass + candidates' bytes / rate), beside the 1.5 s target. Bytes read are /proc/self/io's read_bytes; memory
is /proc/self/status (RssAnon sampled every 10 ms for its peak); resident bytes of the codes and vectors
files by fincore (util-linux) where it is installed."""

from __future__ import annotations

import argparse
import mmap
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

TOKENS, DIM, PAGES_PER_DOC = 1030, 128, 10


def write_index(root: Path, pages: int, segment_pages: int, seed: int = 1) -> float:
    """Pages of random unit vectors through the store, one segment per `segment_pages`, one commit."""
    from localgpt_index.index.format.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.local.store import LocalStore

    rng = np.random.default_rng(seed)

    def page() -> np.ndarray:
        v = rng.standard_normal((TOKENS, DIM), dtype=np.float32)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)

    started = time.perf_counter()
    with LocalStore(root).begin() as txn:
        documents = []
        for first in range(0, pages, segment_pages):
            count = min(segment_pages, pages - first)
            segment = txn.write_segment((page() for _ in range(count)), DIM)
            documents += [Document(path=f"/bench/doc-{(first + d) // PAGES_PER_DOC:07d}.pdf", sha256=f"{first + d:064x}", size=1,
                                   kind="pdf", pages=min(PAGES_PER_DOC, count - d),
                                   spans=[Span(segment=segment.id, first=d, pages=min(PAGES_PER_DOC, count - d))])
                          for d in range(0, count, PAGES_PER_DOC)]
            print(f"  {first + count} pages written ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        txn.commit(documents, ModelInfo(id="synthetic", family="fake", fingerprint="synthetic", dim=DIM), Settings(dim=DIM))
    return time.perf_counter() - started


def memory() -> dict:
    """RSS, its anonymous and file-backed parts, and the peak RSS, in MB (/proc/self/status)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            fields[key] = int(value.split()[0]) // 1024
    return fields


def read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


class PeakAnon:
    """The peak of RssAnon (MB) while it runs: /proc/self/status has no high-water mark for it."""

    def __init__(self) -> None:
        self.peak = memory()["RssAnon"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, memory()["RssAnon"])

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, memory()["RssAnon"])


def resident_mb(paths: list[Path]) -> int | None:
    """Bytes of these files in the page cache (MB), by fincore; None where it is not installed."""
    if not paths or not shutil.which("fincore"):
        return None
    done = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, paths)], capture_output=True,
                          text=True, check=False)
    return sum(int(x) for x in done.stdout.split()) >> 20 if done.returncode == 0 else None


def evict(store, view) -> None:
    """Every vectors file out of the page cache (our mapping's pages unmapped first: the kernel keeps mapped ones),
    and its blocks unchecked again: the next query reads and checks its candidates' blocks as a fresh process would."""
    for segment in view.manifest.segments.values():
        files = store.segment_files(segment)
        files.guard._done[:] = False
        files.guard._all = False
        files.guard._map.madvise(mmap.MADV_DONTNEED)
        fd = os.open(files.guard.path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(spent: dict, name: str, function):
    """`function`, adding the seconds each call takes to spent[name] (a breakdown of one query)."""
    def run(*args, **kwargs):
        t0, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
            spent[f"{name}_cpu"] = spent.get(f"{name}_cpu", 0.0) + time.process_time() - cpu  # the process's CPU, all threads
    return run


def make_queries(count: int, seed: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((20, DIM), dtype=np.float32) for _ in range(count)]


def one_query(store, view, query: np.ndarray, candidates: int, spent: dict) -> dict:
    spent.clear()
    counts = view.read_counts
    was = (counts.early, counts.late, counts.wasted)
    before, checked, t0, cpu = read_bytes(), store.blocks_checked(), time.perf_counter(), time.process_time()
    [hits] = view.search_vectors([query], 10, "cpu", None, candidates)  # the first pass (positional: older trees name it candidates)
    cpu = time.process_time() - cpu
    early, late, wasted = (now - then for now, then in zip((counts.early, counts.late, counts.wasted), was))
    return {"s": time.perf_counter() - t0, "cpu_s": cpu, **{f"{k}_s": v for k, v in spent.items()},
            "read_mb": (read_bytes() - before) / 1e6,
            "early_mb": early / 1e6, "late_mb": late / 1e6, "wasted_mb": wasted / 1e6, "candidates_mb": (early + late - wasted) / 1e6,
            "blocks_checked": store.blocks_checked() - checked, "top": [(h.path, h.page) for h in hits]}


def disk_rate(paths: list[Path], reads: int, size: int, depth: int, seed: int) -> dict:
    """The disk's random-read rate as rescoring reads: `reads` ranges of `size` bytes at random 64 KiB-aligned offsets
    of the vectors files, evicted from the page cache first, `depth` reads in flight (preadv, no read-ahead)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(seed)
    fds = [os.open(path, os.O_RDONLY) for path in paths]
    try:
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        sizes = [os.fstat(fd).st_size for fd in fds]
        picks = [(fds[f], int(rng.integers(0, (sizes[f] - size) >> 16)) << 16) for f in rng.integers(0, len(fds), reads)]
        local = threading.local()

        def read(pick: tuple[int, int]) -> None:
            buffer = getattr(local, "buffer", None) or bytearray(size)
            local.buffer = buffer
            os.preadv(pick[0], [buffer], pick[1])

        with ThreadPoolExecutor(depth) as pool:
            before, t0 = read_bytes(), time.perf_counter()
            list(pool.map(read, picks))
            seconds = time.perf_counter() - t0
        return {"reads": reads, "read_kib": size >> 10, "in_flight": depth, "s": seconds, "mb_s": reads * size / 1e6 / seconds,
                "disk_read_mb": (read_bytes() - before) / 1e6}
    finally:
        for fd in fds:
            os.close(fd)


def summary(runs: list[dict]) -> dict:
    keys = [k for k in runs[0] if k != "top"]
    return {"median": {k: float(np.median([r[k] for r in runs])) for k in keys}, "max_s": max(r["s"] for r in runs),
            "runs": [{k: round(r[k], 4) for k in keys} for r in runs]}


def measure(root: Path, candidates: list[int], queries: int, exact: bool, evict_vectors: bool, compare: bool,
            compare_early: bool = False, first_only: bool = False, early_margin: float | None = None) -> dict:
    """In this (fresh) process: open, then `queries` queries through the first pass for each C, then exact
    (`first_only`: open and the first query only)."""
    import localgpt_index.index.view as view_module
    from localgpt_index.index.scoring.codes import hamming_maxsim, kernel_name, pack_codes, query_words
    from localgpt_index.index.scoring.codes.pack import as_words
    from localgpt_index.index.scoring.maxsim import maxsim
    from localgpt_index.index.local.store import LocalStore

    opening, *asked = make_queries(queries + 1)  # the process's first query is one of its own: it maps and checks the codes
    # a warm process (serve, the Python API): the scorer loaded and its threads started before the index is opened
    maxsim([opening], np.zeros((8, DIM), dtype=np.float16), np.array([0, 4, 8]))
    t0 = time.perf_counter()
    # and the first pass's compiled kernel, called once (numba: its machine code loaded from its cache, compiled once per machine)
    hamming_maxsim(*query_words([opening]), 1, as_words(pack_codes(np.ones((4, DIM), np.float32))), np.array([0, 4]))
    kernel_load_s = time.perf_counter() - t0
    peak = PeakAnon()
    report: dict = {"process_memory_mb": memory(), "codes_kernel": kernel_name(), "codes_kernel_load_s": kernel_load_s}
    store = LocalStore(root)
    before, t0 = read_bytes(), time.perf_counter()
    view = store.open_view()
    report["open"] = {"s": time.perf_counter() - t0, "read_bytes": read_bytes() - before, "blocks_checked": store.blocks_checked(),
                      "memory_mb": memory()}
    vectors = [store.segment_files(seg).guard.path for seg in view.manifest.segments.values()]
    codes = [root / "artifacts" / blob.name for seg in view.manifest.segments.values() for part in seg.parts.values()
             for blob in part.blobs]
    report["resident_mb_at_open"] = {"codes": resident_mb(codes), "vectors": resident_mb(vectors)}
    spent: dict = {}
    view._first_pass = timed(spent, "first_pass", view._first_pass)
    view._rank = timed(spent, "rescore", view._rank)
    prefetching = {"on": True}
    real_prefetch = view_module.prefetch
    view_module.prefetch = timed(spent, "prefetch", lambda reads: real_prefetch(reads) if prefetching["on"] else 0)
    early_on = {"on": True}
    real_early = view_module.EarlyReads
    tuning = {"margin": early_margin} if early_margin else {}
    view_module.EarlyReads = lambda *a, **k: real_early(*a, **k, **tuning) if early_on["on"] else real_early(*a, **k, start=2.0)  # never
    first = one_query(store, view, opening, candidates[0], spent)
    report["first_query"] = {k: v for k, v in first.items() if k != "top"} | {
        "candidates": candidates[0], "memory_mb": memory(), "codes_resident_mb_before": report["resident_mb_at_open"]["codes"]}
    if first_only:
        return report
    tops: dict[int, list] = {}
    report["queries"] = {}
    for c in candidates:
        runs = []
        for query in asked:
            if evict_vectors:
                evict(store, view)
            runs.append(one_query(store, view, query, c, spent))
        again = one_query(store, view, asked[-1], c, spent)
        tops[c] = [r["top"] for r in runs]
        if compare:  # the same queries without prefetch (the blocks faulted in group by group), interleaved
            plain = []
            for query in asked:
                prefetching["on"] = False
                evict(store, view)
                plain.append(one_query(store, view, query, c, spent))
                prefetching["on"] = True
                evict(store, view)
                runs.append(one_query(store, view, query, c, spent))
            report["queries_no_prefetch"] = report.get("queries_no_prefetch", {}) | {c: summary(plain)}
        if compare_early:  # the same queries with the candidates read only after the first pass, interleaved (order alternating)
            late_only = []
            for number, query in enumerate(asked):
                for on in ((False, True) if number % 2 == 0 else (True, False)):
                    early_on["on"] = on
                    evict(store, view)
                    (runs if on else late_only).append(one_query(store, view, query, c, spent))
            early_on["on"] = True
            report["queries_no_early"] = report.get("queries_no_early", {}) | {c: summary(late_only)}
        report["queries"][c] = summary(runs) | {"again": {k: v for k, v in again.items() if k != "top"}, "memory_mb": memory(),
                                               "resident_mb": {"codes": resident_mb(codes), "vectors": resident_mb(vectors)}}
    # the disk's ceiling, in the same run: rescoring's reads (whole 64 KiB blocks, ~320 KiB a page, 32 in flight) and variants
    shapes = [(256 << 10, 32), (256 << 10, 16), (256 << 10, 64), (256 << 10, 128), (1 << 20, 32)] * 2  # two interleaved rounds
    # fresh offsets every run: a virtual disk's host may cache what an earlier run read
    seeds = np.random.SeedSequence().generate_state(len(shapes))
    rates = [disk_rate(vectors, 1000, size, depth, seed) for seed, (size, depth) in zip(seeds, shapes)]
    report["disk"] = rates
    rate = float(np.median([r["mb_s"] for r in rates if (r["read_kib"], r["in_flight"]) == (256, 32)]))  # rescoring's own shape
    report["floor"] = {c: {"first_pass_s": q["median"].get("first_pass_s", 0.0), "candidates_mb": q["median"]["candidates_mb"],
                           "disk_mb_s": rate, "floor_s": q["median"].get("first_pass_s", 0.0) + q["median"]["candidates_mb"] / rate,
                           "overlapped_floor_s": max(q["median"].get("first_pass_s", 0.0), q["median"]["candidates_mb"] / rate),
                           "measured_s": q["median"]["s"], "target_s": 1.5} for c, q in report["queries"].items()}
    report["load_average"] = os.getloadavg()
    if exact:
        report["exact"] = exact_pass(root, store, view, asked, spent)
        truth = report["exact"].pop("tops")
        report["recall_at_10"] = {c: float(np.mean([len({tuple(h) for h in t} & {tuple(h) for h in e}) / 10
                                                    for t, e in zip(tops[c], truth)])) for c in candidates}
    report["peak_rss_anon_mb"] = peak.stop()
    report["process_memory_mb_end"] = memory()
    return report


def exact_pass(root: Path, store, view, asked: list[np.ndarray], spent: dict) -> dict:
    """The exact top-10 of every query, in one pass over every page (kept beside the index: a rerun reads it)."""
    import hashlib

    index_id = hashlib.sha256(" ".join(sorted(view.manifest.segments)).encode()).hexdigest()[:12]
    saved = root.parent / f"exact-{index_id}-{len(asked)}q.json"
    if saved.exists():
        return json.loads(saved.read_text()) | {"from": str(saved)}
    before, t0, checked = read_bytes(), time.perf_counter(), store.blocks_checked()
    answers = view.search_vectors(asked, k=10)
    result = {"queries": len(asked), "s": time.perf_counter() - t0, "read_bytes": read_bytes() - before,
              "blocks_checked": store.blocks_checked() - checked, "memory_mb": memory(),
              "tops": [[(h.path, h.page) for h in hits] for hits in answers]}
    saved.write_text(json.dumps(result))
    return result


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def existing_pages(root: Path) -> int | None:
    from localgpt_index.index.local.store import LocalStore

    manifest = LocalStore(root).read_manifest() if root.exists() else None
    return manifest.page_count if manifest else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="2,000 pages in a temporary folder (a smoke test)")
    parser.add_argument("--dir", type=Path, help="where to write the index (default: a temporary folder)")
    parser.add_argument("--segment-pages", type=int, default=4000,
                        help="pages a segment (4,000: a segment's codes fit in one blob, which a reader maps)")
    parser.add_argument("--candidates", default="100,300,1000", help="C, the first pass's candidates: a comma-separated list")
    parser.add_argument("--queries", type=int, default=5, help="queries a C (each 20 random tokens)")
    parser.add_argument("--no-exact", action="store_true", help="no exact pass (no recall)")
    parser.add_argument("--vectors-cache", choices=["cold", "keep"], default="cold",
                        help="cold: the vectors evicted from the page cache before each query (the codes stay)")
    parser.add_argument("--compare-prefetch", action="store_true",
                        help="also run each query without prefetching its candidates' blocks (interleaved with it, vectors evicted)")
    parser.add_argument("--compare-early", action="store_true",
                        help="also run each query with its candidates read only after the first pass (interleaved, vectors evicted)")
    parser.add_argument("--first-query-warm", action="store_true",
                        help="then a second fresh process, page cache as the first left it: its open and first query (codes cached)")
    parser.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--early-margin", type=float, help="early reads' margin (index/scoring/early_reads.MARGIN by default)")
    parser.add_argument("--keep", action="store_true", help="keep the index (default: deleted when done)")
    parser.add_argument("--reuse", action="store_true", help="measure the index already in --dir (written by --keep); implies --keep")
    parser.add_argument("--warm", action="store_true", help="leave the page cache as it is (the machine's other users keep theirs)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the fresh measuring process
    args = parser.parse_args()
    candidates = [int(c) for c in args.candidates.split(",")]
    if args.measure:
        print(json.dumps(measure(args.measure, candidates, args.queries, not args.no_exact, args.vectors_cache == "cold",
                                 args.compare_prefetch, args.compare_early, args.first_only, args.early_margin)))
        return
    pages = 2000 if args.quick else args.pages
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-bigindex-"))
    root = base / "default"
    need = pages * TOKENS * DIM * 2
    keep = args.keep or args.reuse
    try:
        write_s = None
        if not (args.reuse and existing_pages(root) == pages):
            if args.reuse or root.exists():
                keep = True  # never delete what this run did not write
                sys.exit(f"{root}: no index of {pages} pages to reuse" if args.reuse else f"{root} exists: --reuse measures it")
            if shutil.disk_usage(base if base.exists() else base.parent).free < need * 1.2:
                sys.exit(f"{base}: {need / 1e9:.1f} GB needed, not free")
            write_s = write_index(root, pages, min(args.segment_pages, pages))
        cold = not args.warm and drop_caches()
        script = [sys.executable, __file__, "--measure", str(root), "--candidates", args.candidates, "--queries", str(args.queries),
                  "--vectors-cache", args.vectors_cache]
        script += (["--no-exact"] if args.no_exact else []) + (["--compare-prefetch"] if args.compare_prefetch else [])
        script += ["--compare-early"] if args.compare_early else []
        script += ["--early-margin", str(args.early_margin)] if args.early_margin else []
        load_start = os.getloadavg()
        done = subprocess.run(script, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
        report = {"pages": pages, "vectors_gb": need / 1e9, "write_s": write_s, "page_cache": "cold" if cold else "warm",
                  "load_average_start": load_start, **json.loads(done.stdout)}
        if args.first_query_warm:  # a process started after the first: the codes are in the page cache, the candidates' pages mostly not
            again = subprocess.run([*script, "--first-only"], capture_output=True, text=True, check=False)
            if again.returncode != 0:
                sys.exit(again.stderr[-3000:])
            warm = json.loads(again.stdout)
            report["first_query_warm_process"] = {"open": warm["open"], **warm["first_query"]}
        print(json.dumps(report, indent=1))
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
            for saved in base.glob("exact-*q.json"):
                saved.unlink()
            if args.dir is None:
                shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
