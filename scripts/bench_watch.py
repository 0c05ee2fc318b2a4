#!/usr/bin/env python3
"""Time from save to searchable under `lgpt-index watch`.

`lgpt-index watch DOCS --json` runs in a process of its own on a folder of `--pdfs` PDFs (built
first by its catch-up build). The catch-up build loads the model (kept from then on); one PDF saved first warms up; then
`--saves` new one-page PDFs are saved, one at a time, and for each the script measures, from the
moment the file is closed, until a query through the Python API finds the document in the index.
The build's own embedding time for that file (convert, render, prepare, encode) comes from the
build's report; the rest is the watcher's overhead (events, settle interval, discover, commit).
Target: overhead under 5 s.

    python scripts/bench_watch.py                   # the fake encoder: the watcher's overhead alone
    python scripts/bench_watch.py --model bench     # the bench checkpoint (real ColPali geometry) on the CPU

Exits 1 if a save was not searchable within --timeout seconds, or a query failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
EMBED_STAGES = ("convert", "render", "prepare", "encode", "pool", "load_model")


def model_folder(kind: str, tmp: Path) -> Path:
    if kind == "fake":
        from localgpt_index.testing.fake import write_fake_checkpoint

        os.environ["LGPT_PLUGINS"] = ",".join(filter(None, [os.environ.get("LGPT_PLUGINS"), "localgpt_index.testing.fake"]))
        return write_fake_checkpoint(tmp / "fake")
    from localgpt_index.testing.checkpoints import make_checkpoint

    return make_checkpoint(tmp / "bench-colpali", "bench")


class Watch:
    """The watcher process and its events."""

    def __init__(self, docs: Path, index: Path, model: Path, settle: float) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "watch", str(docs), "--model", str(model),
                                      "--index-dir", str(index), "--settle", str(settle), "--json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
        self.events: list[dict] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.cond:
                self.events.append(json.loads(line))
                self.cond.notify_all()

    def wait(self, test, timeout: float) -> dict:
        with self.cond:
            found = self.cond.wait_for(lambda: next((e for e in self.events if test(e)), None), timeout)
        if not found:
            raise SystemExit(f"no such event within {timeout} s; seen: {[e['event'] for e in self.events]}")
        return found

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


def searchable(index: Path, path: Path, query, timeout: float) -> tuple[float, int]:
    """Seconds until a query (`query`: its vectors, encoded once) answers from a generation that holds
    `path` (polled every 10 ms), and that generation."""
    from localgpt_index import open_index

    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        try:
            opened = open_index(index)
            if any(d.path == str(path) for d in opened.manifest.documents):
                assert str(path) in {hit.path for hit in opened.search_vectors(query, k=1000)[0]}
                return time.perf_counter() - started, opened.manifest.generation
        except Exception as exc:  # noqa: BLE001 - before the first commit there is no index
            if "no index" not in str(exc):
                raise
        time.sleep(0.01)
    raise SystemExit(f"{path.name} was not searchable within {timeout} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["fake", "bench"], default="fake")
    parser.add_argument("--pdfs", type=int, default=20, help="PDFs (3 pages each) in the folder at start")
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--settle", type=float, default=1.0, help="watch --settle")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()

    from docgen import make_pdf

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-watch-") as name:
        tmp = Path(name)
        model = model_folder(args.model, tmp)
        docs, index = tmp / "docs", tmp / "idx"
        for n in range(args.pdfs):
            make_pdf(docs / f"report-{n}.pdf", [f"report {n} page {p}" for p in range(3)])
        watch = Watch(docs, index, model, args.settle)
        try:
            watch.wait(lambda e: e["event"] == "build-committed", args.timeout)
            from localgpt_index import open_index

            query = open_index(index).load_encoder().encode_queries(["a new page"])  # once, as a warm server does
            latencies, embeds = [], []
            for n in range(-1, args.saves):  # -1: the save that loads the model
                saved = make_pdf(tmp / "staging" / f"saved-{n + 1}.pdf", [f"saved {n + 1}: a new page"])
                target = docs / saved.name
                os.replace(saved, target)  # saved whole, as editors do
                seconds, generation = searchable(index, target, query, args.timeout)
                event = watch.wait(lambda e: e["event"] == "build-committed" and e["generation"] == generation, args.timeout)
                stages = event["report"]["stage_seconds"]
                embed = sum(stages.get(stage, 0.0) for stage in EMBED_STAGES)
                label = "first save (warm-up, not counted)" if n < 0 else f"save {n + 1}"
                print(f"{label}: searchable after {seconds:.2f} s; embedding {embed:.2f} s; overhead {seconds - embed:.2f} s "
                      f"(stages {stages})")
                if n >= 0:
                    latencies.append(seconds)
                    embeds.append(embed)
        finally:
            watch.stop()
    overhead = [s - e for s, e in zip(latencies, embeds)]
    print(f"\nsave -> searchable ({args.model} model, {args.pdfs * 3}-page index, --settle {args.settle}): median "
          f"{statistics.median(latencies):.2f} s (max {max(latencies):.2f}), of which embedding median "
          f"{statistics.median(embeds):.2f} s; overhead median {statistics.median(overhead):.2f} s, max {max(overhead):.2f} s "
          f"(target: under 5 s)")
    return 0 if max(overhead) < 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
