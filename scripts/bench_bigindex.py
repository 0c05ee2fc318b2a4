"""An index larger than memory: N synthetic pages of 1,030 x 128 float16 vectors written through the real
store (a transaction, write_segment, commit), then, in a fresh process: the time and bytes read to open it,
one exact query over every page, and rescoring C random candidate pages (what a first pass leaves),
each with the blocks of vectors checked, the bytes read (/proc/self/io) and RSS anon/file.

    python scripts/bench_bigindex.py --quick                  # 2,000 pages (about 0.5 GB), in a temporary folder
    python scripts/bench_bigindex.py --pages 40 --candidates 5 --warm   # what tests/test_lazy_blocks.py runs
    python scripts/bench_bigindex.py --pages 100000 --dir /work/bigindex-data   # 26 GB: check df first

The page cache is dropped before the measuring process starts where this process may (root:
/proc/sys/vm/drop_caches), and the report says whether it was ("cold") or not ("warm")."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TOKENS, DIM, PAGES_PER_DOC = 1030, 128, 10


def write_index(root: Path, pages: int, segment_pages: int, seed: int = 1) -> float:
    """Pages of random unit vectors through the store, one segment per `segment_pages`, one commit."""
    from localgpt_index.index.manifest import Document, ModelInfo, Settings, Span
    from localgpt_index.index.store import IndexStore

    rng = np.random.default_rng(seed)

    def page() -> np.ndarray:
        v = rng.standard_normal((TOKENS, DIM), dtype=np.float32)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)

    started = time.perf_counter()
    with IndexStore(root).begin() as txn:
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


def measure(root: Path, candidates: int, exact: bool) -> dict:
    """In this (fresh) process: open, rescoring `candidates` random pages, and one exact query."""
    from localgpt_index.index.store import IndexStore
    from localgpt_index.index.view import page_table

    from localgpt_index.index.score import maxsim

    rng = np.random.default_rng(5)
    query = [rng.standard_normal((20, DIM), dtype=np.float32)]
    # a warm process (serve, the Python API): the scorer loaded and its threads started before the index is opened
    maxsim(query, np.zeros((8, DIM), dtype=np.float16), np.array([0, 4, 8]))
    report: dict = {"process_memory_mb": memory()}
    store = IndexStore(root)
    before, t0 = read_bytes(), time.perf_counter()
    view = store.open_view()
    report["open"] = {"s": time.perf_counter() - t0, "read_bytes": read_bytes() - before, "blocks_checked": store.blocks_checked(),
                      "memory_mb": memory()}
    table = page_table(view.documents)
    owners = [(sid, i) for sid, (rows, _, _) in table.items() for i in range(len(rows))]
    chosen: dict[str, list[int]] = {}
    for column in np.sort(rng.choice(len(owners), size=min(candidates, len(owners)), replace=False)):
        sid, i = owners[column]
        chosen.setdefault(sid, []).append(i)
    narrowed = {sid: tuple(a[np.array(idx)] for a in table[sid]) for sid, idx in chosen.items()}
    before, t0, checked = read_bytes(), time.perf_counter(), store.blocks_checked()
    view._rank(query, view.documents, 10, "cpu", narrowed)
    report["rescore"] = {"candidates": candidates, "s": time.perf_counter() - t0, "read_bytes": read_bytes() - before,
                         "candidate_bytes": candidates * TOKENS * DIM * 2, "blocks_checked": store.blocks_checked() - checked,
                         "memory_mb": memory()}
    if exact:
        before, t0, checked = read_bytes(), time.perf_counter(), store.blocks_checked()
        view.search_vectors(query, k=10)
        report["exact"] = {"s": time.perf_counter() - t0, "read_bytes": read_bytes() - before,
                           "blocks_checked": store.blocks_checked() - checked, "memory_mb": memory()}
        t0 = time.perf_counter()
        view.search_vectors(query, k=10)
        report["exact_again_s"] = time.perf_counter() - t0
    return report


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="2,000 pages in a temporary folder (a smoke test)")
    parser.add_argument("--dir", type=Path, help="where to write the index (default: a temporary folder)")
    parser.add_argument("--segment-pages", type=int, default=10_000)
    parser.add_argument("--candidates", type=int, help="pages rescored (default 1000; --quick: 100)")
    parser.add_argument("--no-exact", action="store_true", help="skip the exact query over every page")
    parser.add_argument("--keep", action="store_true", help="keep the index (default: deleted when done)")
    parser.add_argument("--warm", action="store_true", help="leave the page cache as it is (the machine's other users keep theirs)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the fresh measuring process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.candidates, not args.no_exact)))
        return
    pages = 2000 if args.quick else args.pages
    args.candidates = args.candidates or (100 if args.quick else 1000)
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-bigindex-"))
    root = base / "default"
    need = pages * TOKENS * DIM * 2
    if shutil.disk_usage(base if base.exists() else base.parent).free < need * 1.2:
        sys.exit(f"{base}: {need / 1e9:.1f} GB needed, not free")
    try:
        write_s = write_index(root, pages, min(args.segment_pages, pages))
        cold = not args.warm and drop_caches()
        script = [sys.executable, __file__, "--measure", str(root), "--candidates", str(args.candidates)]
        done = subprocess.run(script + (["--no-exact"] if args.no_exact else []), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
        report = {"pages": pages, "vectors_gb": need / 1e9, "write_s": write_s, "page_cache": "cold" if cold else "warm",
                  **json.loads(done.stdout)}
        print(json.dumps(report, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
            if args.dir is None:
                shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
