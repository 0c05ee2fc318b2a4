#!/usr/bin/env python3
"""The crasher loop (issue 39), in the spirit of Qdrant's `crasher`: `lgpt-index watch` on a folder
under a stream of edits, killed with SIGKILL at random times, again and again, while readers query
the index throughout. At the end one more watch catches up, and every document's latest content must
be indexed exactly once, and `verify` must pass.

    python scripts/crasher.py --iterations 200 --model PATH --dir DIR [--seed S] [--kill-window LOW,HIGH] [--json]

PATH is a checkpoint of a supported family (a fake one from localgpt_index.testing.fake works with
LGPT_PLUGINS=localgpt_index.testing.fake, as the tests do). DIR is made if missing: DIR/docs holds
the documents, DIR/idx the index. Each watch is killed a random time in --kill-window seconds (default
0.05,2.5) after it says it is watching: a real model loads in its first build, so give it a later window
(e.g. 4,12) for kills to land in commits. Exit 0 when everything held, 1 otherwise (the report says what).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

NAMES = ["a.pdf", "b.pdf", "c.pdf", "sub/d.pdf", "sub/deep/e f.pdf", "g.png", "sub/h.png"]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


@dataclass
class Report:
    iterations: int = 0
    kills: int = 0
    kills_mid_build: int = 0  # killed after a build started and before it reported its end
    commits_seen: int = 0
    edits: int = 0
    queries: int = 0
    query_retries: int = 0  # a reader that followed a new HEAD (the files of the one it opened were collected)
    query_errors: list[str] = field(default_factory=list)
    final_documents: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.query_errors


def write_document(path: Path, rng: random.Random) -> None:
    """A small PDF (reportlab) or PNG (Pillow) of a few random words, written in place as an editor would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    words = [" ".join(rng.choices(WORDS, k=3)) for _ in range(rng.randint(1, 3))]
    if path.suffix == ".png":
        from PIL import Image, ImageDraw

        image = Image.new("RGB", (320, 240), "white")
        ImageDraw.Draw(image).text((10, 10), "\n".join(words), fill="black")
        image.save(path)
        return
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path))
    for text in words:
        pdf.drawString(72, 720, text)
        pdf.showPage()
    pdf.save()


class Editor(threading.Thread):
    """Adds, edits in place, renames, copies and deletes files of the folder until stopped."""

    def __init__(self, docs: Path, rng: random.Random, report: Report) -> None:
        super().__init__(daemon=True, name="editor")
        self.docs, self.rng, self.report = docs, rng, report
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.rng.uniform(0.02, 0.3)):
            self.edit()

    def edit(self) -> None:
        present = [n for n in NAMES if (self.docs / n).exists()]
        name = self.rng.choice(NAMES)
        action = self.rng.choice(["write", "write", "write", "rename", "copy", "delete"]) if present else "write"
        if action == "write":
            write_document(self.docs / name, self.rng)
        else:
            source = self.docs / self.rng.choice(present)
            target = self.docs / self.rng.choice([n for n in NAMES if n.endswith(source.suffix)])
            if action == "delete":
                source.unlink()
            elif source != target:
                target.parent.mkdir(parents=True, exist_ok=True)
                if action == "rename":
                    os.replace(source, target)
                else:
                    target.write_bytes(source.read_bytes())
        self.report.edits += 1


class Reader(threading.Thread):
    """Opens the index afresh and queries it (text, and vectors without a model) until stopped."""

    def __init__(self, index_dir: Path, report: Report) -> None:
        super().__init__(daemon=True, name="reader")
        self.index_dir, self.report = index_dir, report
        self.stopped = threading.Event()

    def run(self) -> None:
        import numpy as np

        from localgpt_index import LocalStore, open_index
        from localgpt_index.core.errors import MissingIndexFile

        rng = np.random.default_rng(0)
        while not self.stopped.wait(0.05):
            if not LocalStore(self.index_dir / "default").exists():
                continue
            index = None
            try:
                index = open_index(self.index_dir)
                if index.view.artifact("lexical") is not None:  # None: no page has text yet (pictures only)
                    index.search("alpha beta", k=5, mode="text")
                dim = next(iter(index.view.manifest.segments.values())).dim if index.view.manifest.segments else 128
                index.search_vectors([rng.standard_normal((4, dim)).astype(np.float32)], k=5)
                self.report.queries += 1
            except MissingIndexFile as exc:  # fine only where two commits since the open collected its files
                head = LocalStore(self.index_dir / "default").read_head()
                if index is not None and head is not None and head.generation > index.view.manifest.generation:
                    self.report.query_retries += 1
                else:
                    self.report.query_errors.append(f"a file of the current generation is missing: {exc}"[:300])
            except Exception as exc:  # noqa: BLE001 - any other error of a reader is a finding
                self.report.query_errors.append(f"{type(exc).__name__}: {exc}"[:300])


def watch_command(docs: Path, index_dir: Path, model: str) -> list[str]:
    return [sys.executable, "-m", "localgpt_index", "watch", str(docs), "--index-dir", str(index_dir), "--model", model,
            "--json", "--settle", "0.2", "--wait", "30"]


def run_once(command: list[str], rng: random.Random, report: Report, window: tuple[float, float]) -> None:
    """One watch, killed with SIGKILL after a random time; its events counted."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    building, watching = threading.Event(), threading.Event()

    def events() -> None:
        for line in process.stdout:
            event = json.loads(line).get("event")
            watching.set()
            if event == "build-started":
                building.set()
            elif event in ("build-committed", "build-up-to-date", "build-failed"):
                building.clear()
                report.commits_seen += event == "build-committed"

    reader = threading.Thread(target=events, daemon=True)
    reader.start()
    watching.wait(120)  # the process has started (a real model's libraries take seconds to import)
    time.sleep(rng.uniform(*window))
    mid_build = building.is_set()
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    reader.join(5)
    report.kills += 1
    report.kills_mid_build += mid_build


def catch_up(command: list[str], timeout: float = 300.0) -> int:
    """One more watch, until its catch-up build ends (or `timeout`); stopped with SIGINT. Its exit code."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ended = threading.Event()

    def events() -> None:
        for line in process.stdout:
            if json.loads(line).get("event") in ("build-committed", "build-up-to-date", "build-failed"):
                ended.set()

    threading.Thread(target=events, daemon=True).start()
    ended.wait(timeout)
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        return -9


def final_check(docs: Path, index_dir: Path, report: Report) -> None:
    """Every file's latest bytes indexed exactly once, nothing else; verify passes."""
    from localgpt_index import LocalStore

    store = LocalStore(index_dir / "default")
    problems = store.verify()
    report.problems += [f"verify: {p}" for p in problems]
    documents = store.open_view().documents
    report.final_documents = len(documents)
    paths = [d.path for d in documents]
    if len(paths) != len(set(paths)):
        report.problems.append("a document is indexed twice")
    held = {os.path.relpath(d.path, docs): d.sha256 for d in documents}
    wanted = {str(p.relative_to(docs)): hashlib.sha256(p.read_bytes()).hexdigest() for p in docs.rglob("*") if p.is_file()}
    for name in sorted(set(held) | set(wanted)):
        if held.get(name) != wanted.get(name):
            what = "missing" if name not in held else "left behind" if name not in wanted else "an older version"
            report.problems.append(f"{name}: {what} in the index")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--model", required=True, help="a model folder or hub id")
    parser.add_argument("--dir", required=True, type=Path, help="a working folder (docs/ and idx/ inside)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-window", default="0.05,2.5", help="LOW,HIGH: seconds after 'watching' a kill lands in")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    started = time.monotonic()
    low, _, high = args.kill_window.partition(",")
    window = (float(low), float(high or low))
    rng = random.Random(args.seed)
    docs, index_dir = args.dir / "docs", args.dir / "idx"
    docs.mkdir(parents=True, exist_ok=True)
    report = Report()
    command = watch_command(docs, index_dir, args.model)
    editor, reader = Editor(docs, random.Random(args.seed + 1), report), Reader(index_dir, report)
    editor.start()
    reader.start()
    for iteration in range(args.iterations):
        run_once(command, rng, report, window)
        report.iterations = iteration + 1
        if not args.json and (iteration + 1) % 10 == 0:
            print(f"{iteration + 1} kills, {report.commits_seen} commits seen, {report.edits} edits, {report.queries} queries",
                  file=sys.stderr)
    editor.stopped.set()
    editor.join()
    code = catch_up(command)
    reader.stopped.set()
    reader.join()
    if code != 0:
        report.problems.append(f"the last watch exited {code}")
    final_check(docs, index_dir, report)
    report.seconds = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps({**asdict(report), "ok": report.ok}, indent=2))
    else:
        print(json.dumps({k: v for k, v in asdict(report).items() if k != "query_errors"}), file=sys.stderr)
        for line in report.query_errors[:10] + report.problems[:20]:
            print(f"problem: {line}", file=sys.stderr)
        print("held" if report.ok else "FAILED", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
