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

`--incremental N` measures instead what every build under watch pays before it embeds anything: an
incremental `lgpt-index build` of one new one-page PDF (the fake encoder) on an index of N pages of
1,030 x 128 float16 vectors (258 KiB a page, written through the store beside the folder's own
documents, as those of another folder), the index's files evicted from the page cache before each build
(posix_fadvise DONTNEED). Rounds alternate "full" (no record of checked files: the writer hashes every
vectors file, as before the record existed) and "record" (the record the previous build wrote), or with
`--baseline TREE` the tree TREE's code (e.g. the main worktree) for the first. Each reports the
build's wall seconds and the bytes it read from disk (its rusage's ru_inblock, which is /proc/PID/io's
read_bytes):

    python scripts/bench_watch.py --incremental 4000 --rounds 3
    python scripts/bench_watch.py --incremental 4000 --rounds 3 --baseline /work/main
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


def add_pages(root: Path, pages: int, segment_pages: int) -> None:
    """`pages` synthetic pages (random unit vectors) committed beside the index's documents, as another folder's."""
    import numpy as np

    from localgpt_index.index.format.manifest import Document, Span
    from localgpt_index.index.local.store import LocalStore

    rng = np.random.default_rng(1)

    def page() -> np.ndarray:
        v = rng.standard_normal((1030, 128), dtype=np.float32)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float16)

    with LocalStore(root).begin() as txn:
        current = txn.current
        documents = list(current.documents)
        for first in range(0, pages, segment_pages):
            count = min(segment_pages, pages - first)
            segment = txn.write_segment([page() for _ in range(count)], current.settings.dim)
            documents += [Document(path=f"/bench-other/doc-{first + d:07d}.pdf", sha256=f"{first + d:064x}", size=1, kind="pdf",
                                   pages=1, spans=[Span(segment=segment.id, first=d, pages=1)]) for d in range(count)]
        txn.commit(documents, current.model, current.settings)


def evict(root: Path) -> None:
    """Every file of the index out of the page cache (written back first: dirty pages stay)."""
    os.sync()
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed_build(docs: Path, index: Path, model: Path, pythonpath: str) -> dict:
    """One `lgpt-index build` in a process of its own, of the code in the tree `pythonpath` (its working folder too:
    `python -m` puts that first on sys.path): wall seconds, bytes read from disk, CPU seconds, its report."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": pythonpath}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "build", str(docs), "--model", str(model), "--index-dir",
                             str(index), "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=pythonpath)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"build failed with exit code {proc.returncode}")
    report = json.loads(out)
    return {"wall_s": round(wall, 3), "read_mb": round(usage.ru_inblock * 512 / 1e6, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "indexed": report["indexed"], "generation": report["generation"]}


def incremental(args) -> int:
    from docgen import make_pdf

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-incremental-", dir=args.dir) as name:
        tmp = Path(name)
        model = model_folder("fake", tmp)
        docs, index = tmp / "docs", tmp / "idx"
        make_pdf(docs / "first.pdf", ["the folder's first document"])
        timed_build(docs, index, model, str(ROOT))
        started = time.perf_counter()
        add_pages(index / "default", args.incremental, args.segment_pages)
        size = sum(p.stat().st_size for p in (index / "default" / "segments").glob("*.vectors.npy"))
        print(f"index: {args.incremental} pages beside the folder's, {size / 1e9:.2f} GB of vectors, written in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
        time.sleep(2.1)  # files changed less than 2 s before a check are not recorded (index/local/checked.py)
        saved = 0

        def one(variant: str) -> dict:
            nonlocal saved
            saved += 1
            make_pdf(docs / f"saved-{saved}.pdf", [f"saved {saved}: a new page"])
            if variant == "full" and not args.baseline:
                (index / "default" / "checked.json").unlink(missing_ok=True)
            evict(index)
            load = os.getloadavg()[0]
            run = timed_build(docs, index, model, args.baseline if variant == "full" and args.baseline else str(ROOT))
            run.update(variant=variant, load_1m=round(load, 2))
            print(json.dumps(run), file=sys.stderr)
            return run

        one("record")  # the first record: written by a build that checks everything
        runs = [one(variant) for r in range(args.rounds) for variant in (("full", "record") if r % 2 == 0 else ("record", "full"))]
    result: dict = {"pages": args.incremental, "vectors_gb": round(size / 1e9, 2), "baseline": args.baseline or "no record",
                    "cpus": os.cpu_count(), "runs": runs}
    for variant in ("full", "record"):
        mine = [r for r in runs if r["variant"] == variant]
        result[variant] = {key: round(statistics.median(r[key] for r in mine), 3) for key in ("wall_s", "read_mb", "cpu_s")}
    result["ratio_wall_full_over_record"] = round(result["full"]["wall_s"] / result["record"]["wall_s"], 2)
    print(json.dumps(result, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["fake", "bench"], default="fake")
    parser.add_argument("--pdfs", type=int, default=20, help="PDFs (3 pages each) in the folder at start")
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--settle", type=float, default=1.0, help="watch --settle")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--incremental", type=int, default=0, metavar="N",
                        help="measure an incremental build of one new PDF on an index of N pages instead (see above)")
    parser.add_argument("--segment-pages", type=int, default=1000, help="--incremental: pages a segment")
    parser.add_argument("--rounds", type=int, default=3, help="--incremental: rounds of both variants, interleaved")
    parser.add_argument("--baseline", default=None, metavar="TREE", help="--incremental: a source tree whose code runs the 'full' builds")
    parser.add_argument("--dir", default=None, help="--incremental: where the temporary index goes (default: the system's)")
    args = parser.parse_args()
    if args.incremental:
        return incremental(args)

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
