#!/usr/bin/env python3
"""The build's own overhead per document, at 1k and 100k one-page documents (fake encoder).

With a fake model (deterministic vectors, no torch) what is left is the build itself:
discovery, hashing, planning, the producer that schedules conversions and rendering,
the consumer, segment writes and commits. Each of those must cost O(1) per document;
the issue's bar is the time per document at 100k within 1.3x of that at 1k.

    python scripts/bench_scheduler.py                  # 1,000 and 100,000 documents
    python scripts/bench_scheduler.py --sizes 1000 20000

The documents are tiny PNG files (decoding one costs microseconds), so the numbers are
the scheduler's and the store's, not poppler's. Prints seconds per size, ms per document
and the ratio to the smallest size. Exits 1 if a build did not index every document.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# the fake family registers as a plugin, here and in the processes started
os.environ.setdefault("LGPT_PLUGINS", "localgpt_index.testing.fake")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_pngs(folder: Path, count: int) -> None:
    """`count` distinct 8x8 PNG files, 100 per sub-folder."""
    import zlib

    def png(seed: int) -> bytes:
        import struct

        raw = b"".join(b"\x00" + bytes((seed * 7 + y * 13 + x) % 256 for x in range(24)) for y in range(8))
        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
        data = zlib.compress(raw + seed.to_bytes(4, "big"))
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")

    for number in range(count):
        sub = folder / f"part-{number // 100:05d}"
        if number % 100 == 0:
            sub.mkdir(parents=True, exist_ok=True)
        (sub / f"page-{number:06d}.png").write_bytes(png(number))


def run(count: int, work: Path, model: Path) -> float:
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.local.store import LocalStore

    docs = work / f"docs-{count}"
    make_pngs(docs, count)
    store = LocalStore(work / f"idx-{count}" / "default")
    started = time.perf_counter()
    report = build_index(docs, store, BuildOptions(model=ModelSpec(str(model)), batch_size=32))
    seconds = time.perf_counter() - started
    if report.indexed != count:
        print(f"  only {report.indexed} of {count} documents indexed: {report.failures[:3]}")
        sys.exit(1)
    stages = ", ".join(f"{k} {v:.1f}" for k, v in sorted(report.stage_seconds.items(), key=lambda kv: -kv[1])[:5])
    print(f"  {count:>7,} documents: {seconds:7.1f} s  {1000 * seconds / count:6.3f} ms/document  "
          f"(generations {report.generation}; busiest stages, s: {stages})")
    return seconds / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    args = parser.parse_args()
    from localgpt_index.testing.fake import write_fake_checkpoint

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-scheduler-") as tmp:
        work = Path(tmp)
        model = write_fake_checkpoint(work / "fake", page_tokens=16, render_size=(8, 8))
        print(f"one-page PNG documents, fake encoder, batch 32, default commits ({os.cpu_count()} cores)")
        per_doc = [run(count, work, model) for count in args.sizes]
        for count, value in zip(args.sizes[1:], per_doc[1:]):
            print(f"time per document at {count:,} / at {args.sizes[0]:,}: {value / per_doc[0]:.2f}x")


if __name__ == "__main__":
    main()
