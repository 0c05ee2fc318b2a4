#!/usr/bin/env python3
"""`build --ray local` against a plain build on the same corpus: pages/s, and the driver's peak memory.

The "bench" checkpoint (real ColPali geometry, small widths) on the CPU; PDFs of 10 pages. Each
build runs in a process of its own, so the peak RSS printed is the driver's own (Ray's workers and
actors are other processes; with --ray the driver loads no model). The driver's memory must not
grow with the corpus: it holds a fixed number of chunks in flight.

    python scripts/bench_ray.py                      # 200 and 2,000 pages
    python scripts/bench_ray.py --pages 100 400

Prints pages/s of both, their ratio, and the driver's peak RSS at each size (and the ratio of the
largest to the smallest). Exits 1 if a build failed or the two indexes differ in pages.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from build_worker import print_result, run_worker  # noqa: E402


def worker(args) -> None:
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.local.store import LocalStore

    options = BuildOptions(model=ModelSpec(args.model), ray=args.ray or None)
    started = time.perf_counter()
    report = build_index(Path(args.docs), LocalStore(Path(args.index) / "default"), options)
    seconds = time.perf_counter() - started - report.stage_seconds.get("load_model", 0.0)
    print_result(report, seconds)


def measure(model: str, docs: Path, index: Path, ray: str | None) -> dict:
    command = [sys.executable, __file__, "--worker", "--model", model, "--docs", str(docs), "--index", str(index)]
    command += ["--ray", ray] if ray else []
    return run_worker(command, "build")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, nargs="+", default=[200, 2000], help="corpus sizes (multiples of 10)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--docs", help=argparse.SUPPRESS)
    parser.add_argument("--index", help=argparse.SUPPRESS)
    parser.add_argument("--ray", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from docgen import make_pdf

    from localgpt_index.testing.checkpoints import make_checkpoint

    failed = False
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-ray-") as tmp:
        tmp = Path(tmp)
        model = str(make_checkpoint(tmp / "bench-colpali", "bench"))
        driver_rss = {}
        print(f"bench checkpoint, CPU ({os.cpu_count()} cores); --ray local starts a cluster on this machine")
        for pages in args.pages:
            docs = tmp / f"docs-{pages}"
            for i in range(pages // 10):
                make_pdf(docs / f"report-{i:04d}.pdf", [f"Report {i} section {p}" for p in range(10)])
            plain = measure(model, docs, tmp / f"plain-{pages}", None)
            distributed = measure(model, docs, tmp / f"ray-{pages}", "local")
            failed |= plain["pages"] != distributed["pages"]
            driver_rss[pages] = distributed["peak_rss_mib"]
            print(f"{pages:>6} pages: plain {plain['pages'] / plain['seconds']:6.1f} pages/s (peak RSS {plain['peak_rss_mib']:.0f} MiB), "
                  f"--ray local {distributed['pages'] / distributed['seconds']:6.1f} pages/s (driver peak RSS "
                  f"{distributed['peak_rss_mib']:.0f} MiB): {plain['seconds'] / distributed['seconds']:.2f}x", flush=True)
        sizes = sorted(driver_rss)
        print(f"driver peak RSS at {sizes[-1]:,} pages / at {sizes[0]:,}: {driver_rss[sizes[-1]] / driver_rss[sizes[0]]:.3f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
