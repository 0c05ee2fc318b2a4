#!/usr/bin/env python3
"""What feeding the model costs it on a CPU, when the model is the bottleneck.

The model-bound "cpu" checkpoint in one process, on 10 pages rendered and prepared beforehand:
its batches alone, then with a thread beside it that renders and prepares a page at the model's
pace (one every `--period` seconds, as a build's feeders run once its queue is full), then with
one that renders without pause. The rounds alternate the three, and the medians are printed.
torch's threads wait for each other whenever one loses its core, so a feeder costs the model more
than its own CPU time.

    python scripts/bench_feeding.py
    python scripts/bench_feeding.py --rounds 6 --batch 2
    python scripts/bench_feeding.py --switch-interval 0.0005     # the interpreter's, 5 ms by default
    OMP_WAIT_POLICY=PASSIVE python scripts/bench_feeding.py      # torch's threads sleep instead of spinning
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


class Feeder(threading.Thread):
    """Renders and prepares pages until stopped: one every `period` seconds (0: without pause)."""

    def __init__(self, encoder, pdfs: list[Path], period: float) -> None:
        super().__init__(daemon=True)
        self.encoder, self.pdfs, self.period = encoder, pdfs, period
        self.stopped = threading.Event()

    def run(self) -> None:
        from localgpt_index.ingest.render import render_pdf_pages

        number = 0
        while not self.stopped.is_set():
            started = time.perf_counter()
            for image in render_pdf_pages(self.pdfs[number % len(self.pdfs)], self.encoder.render_size, 1, 1):
                self.encoder.prepare_page(image)
            number += 1
            self.stopped.wait(max(0.0, self.period - (time.perf_counter() - started)))


def ms_a_page(encoder, pages: list, feeder: Feeder | None) -> float:
    if feeder is not None:
        feeder.start()
    started = time.perf_counter()
    encoder.encode_pages(pages)
    seconds = time.perf_counter() - started
    if feeder is not None:
        feeder.stopped.set()
        feeder.join()
    return 1000 * seconds / len(pages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1, help="pages a forward pass")
    parser.add_argument("--period", type=float, default=0.27, help="seconds between the paced feeder's pages")
    parser.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval for the run")
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    from docgen import make_pdf

    from localgpt_index.testing.checkpoints import make_checkpoint
    from localgpt_index.models.encode import open_probed_encoder
    from localgpt_index.models.resolve import resolve_model
    from localgpt_index.ingest.render import render_pdf_pages
    from localgpt_index.models.tuning import cpu_threads

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-feeding-") as tmp:
        tmp = Path(tmp)
        model = make_checkpoint(tmp / "cpu-colpali", "cpu")
        pdfs = [make_pdf(tmp / f"report-{i}.pdf", [f"Report {i} section {p}" for p in range(1, 6)]) for i in range(4)]
        encoder = open_probed_encoder(resolve_model(str(model)), batch_size=args.batch)
        pages = [encoder.prepare_page(page) for pdf in pdfs[:2] for page in render_pdf_pages(pdf, encoder.render_size, 1, 5)]
        modes = {"alone": None, f"a page prepared every {args.period:g} s beside it": args.period,
                 "a feeder without pause beside it": 0.0}
        results: dict[str, list[float]] = {mode: [] for mode in modes}
        with cpu_threads(encoder):
            encoder.encode_pages(pages[: args.batch])  # a shape's first call pays one-time costs
            for _ in range(args.rounds):
                for mode, period in modes.items():
                    feeder = None if period is None else Feeder(encoder, pdfs, period)
                    results[mode].append(ms_a_page(encoder, pages, feeder))
        print(f"the cpu checkpoint, {encoder.precision.dtype}, batch {args.batch}, {len(pages)} pages, {args.rounds} rounds")
        for mode, runs in results.items():
            print(f"  {mode:<42} {statistics.median(runs):6.1f} ms a page (median; {min(runs):.0f}-{max(runs):.0f})")


if __name__ == "__main__":
    main()
