#!/usr/bin/env python3
"""Peak memory of a build does not depend on how much is built: --rebuild against a plain build,
and one 3,000-page PDF against one 30-page PDF.

The "bench" checkpoint (real ColPali geometry: 448 px, 1024 image tokens, 128-d vectors,
about 264 KB of float16 vectors a page) on the CPU, each build in a process of its own so that
its peak RSS is its own:

- a plain build of 2,000 pages (200 PDFs x 10 pages), then `--rebuild` of the same folder;
- a build of a 30-page PDF, then of a 3,000-page PDF (vectors of the long one: about 800 MB).

    python scripts/bench_memory.py
    python scripts/bench_memory.py --pages 500 --long-pages 600    # quicker

Prints each peak RSS and the two ratios (the bar: within 10 %). Exits 1 if a build failed.
"""

from __future__ import annotations

import argparse
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

    started = time.perf_counter()
    options = BuildOptions(model=ModelSpec(args.model), rebuild=args.rebuild, batch_size=args.batch_size)
    report = build_index(Path(args.docs), LocalStore(Path(args.index) / "default"), options)
    print_result(report, time.perf_counter() - started)


def measure(label: str, model: str, docs: Path, index: Path, batch_size: int, rebuild: bool = False) -> dict:
    command = [sys.executable, __file__, "--worker", "--model", model, "--docs", str(docs), "--index", str(index),
               "--batch-size", str(batch_size)] + (["--rebuild"] if rebuild else [])
    result = run_worker(command, label)
    print(f"{label:>34}: {result['pages']:>5} pages in {result['seconds']:6.1f} s, peak RSS {result['peak_rss_mib']:6.0f} MiB",
          flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000, help="pages of the rebuild corpus (10 per PDF)")
    parser.add_argument("--short-pages", type=int, default=30)
    parser.add_argument("--long-pages", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--docs", help=argparse.SUPPRESS)
    parser.add_argument("--index", help=argparse.SUPPRESS)
    parser.add_argument("--rebuild", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from docgen import make_pdf

    from localgpt_index.testing.checkpoints import make_checkpoint

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-memory-") as tmp:
        tmp = Path(tmp)
        model = str(make_checkpoint(tmp / "bench-colpali", "bench"))
        corpus = tmp / "corpus"
        for i in range(args.pages // 10):
            make_pdf(corpus / f"report-{i:04d}.pdf", [f"Report {i} section {p}" for p in range(10)])
        plain = measure(f"plain build, {args.pages} pages", model, corpus, tmp / "idx", args.batch_size)
        rebuild = measure(f"--rebuild, {args.pages} pages", model, corpus, tmp / "idx", args.batch_size, rebuild=True)
        short, long = tmp / "short", tmp / "long"
        make_pdf(short / "short.pdf", [f"page {p}" for p in range(args.short_pages)])
        make_pdf(long / "long.pdf", [f"page {p}" for p in range(args.long_pages)])
        small = measure(f"one PDF of {args.short_pages} pages", model, short, tmp / "idx-short", args.batch_size)
        large = measure(f"one PDF of {args.long_pages} pages", model, long, tmp / "idx-long", args.batch_size)
        print(f"peak RSS --rebuild / plain build: {rebuild['peak_rss_mib'] / plain['peak_rss_mib']:.3f}")
        print(f"peak RSS {args.long_pages}-page PDF / {args.short_pages}-page PDF: {large['peak_rss_mib'] / small['peak_rss_mib']:.3f}")


if __name__ == "__main__":
    main()
