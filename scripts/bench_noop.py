#!/usr/bin/env python3
"""A build of a folder where nothing changed: answered from the stat cache, not by reading every byte.

Makes a folder of 10,000 files holding more than 5 GB (PNG pages of random pixels, stored
without compression), indexes it once with the fake model, then times whole `lgpt-index
build` processes, start to exit, as a user sees them:

- no-op: nothing changed (stat cache: no file is read);
- touched: one file's times changed, its bytes did not (that file is hashed, nothing embedded);
- --rehash: every file read and hashed, which is what every build did before the stat cache.

    python scripts/bench_noop.py                 # 10,000 files, about 5.2 GB
    python scripts/bench_noop.py --files 2000    # smaller

Prints the seconds of each and the ratio. Exits 1 if a no-op build embedded or hashed anything.
The folder is written to a temporary folder on the same disk (--work to choose) and removed after.
"""

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

# the fake family registers as a plugin, here and in the processes started
os.environ.setdefault("LGPT_PLUGINS", "localgpt_index.testing.fake")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SIDE = 418  # 418 x 418 RGB = 524,172 bytes of pixels per file


def make_files(folder: Path, count: int) -> int:
    from PIL import Image

    rng = np.random.default_rng(0)
    total = 0
    for number in range(count):
        sub = folder / f"box-{number // 500:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
        path = sub / f"scan-{number:05d}.png"
        Image.fromarray(pixels).save(path, compress_level=0)
        total += path.stat().st_size
    return total


def timed_build(docs: Path, index: Path, *extra: str) -> tuple[float, dict]:
    command = [sys.executable, "-m", "localgpt_index", "build", str(docs), "--index-dir", str(index), "--json", "-q", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stderr[-2000:])
        sys.exit(1)
    return seconds, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=None, help="where to write the folder (default: the temporary folder)")
    args = parser.parse_args()
    from localgpt_index.testing.fake import write_fake_checkpoint

    work = Path(tempfile.mkdtemp(prefix="lgpt-bench-noop-", dir=args.work))
    try:
        docs, index = work / "docs", work / "idx"
        started = time.perf_counter()
        total = make_files(docs, args.files)
        past = time.time() - 3600  # files written an hour ago, as in a real folder
        for path in docs.rglob("*.png"):
            os.utime(path, (past, past))
        print(f"{args.files:,} files, {total / 1e9:.2f} GB, written in {time.perf_counter() - started:.0f} s")
        model = write_fake_checkpoint(work / "fake", render_size=(32, 32))
        first, report = timed_build(docs, index, "--model", str(model), "--batch-size", "64")
        print(f"first build (fake model):  {first:7.2f} s, {report['indexed']:,} documents")
        noop, report = timed_build(docs, index)
        if report["hashed"] or report["pages_embedded"]:
            print(f"a no-op build hashed {report['hashed']} and embedded {report['pages_embedded']}")
            sys.exit(1)
        print(f"no-op build:               {noop:7.2f} s  (files read: {report['hashed']})")
        os.utime(next(docs.rglob("*.png")))
        touched, report = timed_build(docs, index)
        print(f"one file touched:          {touched:7.2f} s  (files read: {report['hashed']}, pages embedded: {report['pages_embedded']})")
        rehash, report = timed_build(docs, index, "--rehash")
        print(f"--rehash (every byte):     {rehash:7.2f} s  (files read: {report['hashed']}, pages embedded: {report['pages_embedded']})")
        print(f"no-op / --rehash: {noop / rehash:.2f} ({rehash / noop:.1f}x faster); the bar is a no-op under 2 s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
