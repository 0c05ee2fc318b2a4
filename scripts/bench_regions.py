#!/usr/bin/env python3
"""What text regions cost (issue 44): the word positions' size, their build cost, and a query with regions.

    python scripts/bench_regions.py                            # 20 PDFs x 5 pages of prose, 3 rounds, 30 queries
    python scripts/bench_regions.py --pdfs 40 --rounds 5 --baseline 4f43e61

1. Size: the "words" parts (artifacts/*.wordsz) against the "text" parts (artifacts/*.jsonz) of one index of
   text-layer PDFs (target: within +20 %).
2. Build: this tree's `lgpt-index build` (pdftotext -bbox-layout, a pdfinfo a document, the words part) against the
   baseline commit's (plain pdftotext, no positions), each a process of its own with the fake model (so that text
   extraction weighs the most it can; `--build-model bench` or `cpu`: a test checkpoint of a real family's geometry,
   pipeline-bound or model-bound as a real model is on a CPU), alternating, median of the rounds (target: within +5 %). The baseline is
   `git archive`d into a temporary folder and run from there. Whole builds move by 10-40 % from round to round on a
   shared 2-core machine, so the text layers are also read alone, both ways, in this process: their difference is
   printed in ms a document and as a share of the baseline's build CPU.
3. Query: `search(..., regions=True)` against the same without, k=10, text, hybrid and visual mode, one process,
   alternating query by query: each query's least CPU over the rounds, averaged (target: within +15 %).
   `--model tiny` asks an index built with the tiny ColPali test checkpoint instead of the fake model (a real
   family's patch geometry and query encoder; random weights), `--model cpu` the model-bound one (1,024 patches
   a page, a query encoder that costs tens of ms), `--model PATH` one built with that checkpoint.

    python scripts/bench_regions.py --model tiny --rounds 7 --queries 40
    python scripts/bench_regions.py --build-model bench --rounds 3 --queries 2   # the build cost beside a real geometry's
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from localgpt_index.testing.scanset import WORDS  # noqa: E402


SYLLABLES = ("ka", "lo", "mi", "ren", "tas", "vo", "dru", "pel", "sin", "gor", "ba", "lum", "tre", "nos", "fi", "xa")


def vocabulary(rng: random.Random, size: int = 4000) -> tuple[list[str], list[float]]:
    """Made-up words of 1 to 4 syllables and their Zipf weights (rank^-1), as prose's words are distributed."""
    words: dict[str, None] = dict.fromkeys(WORDS)
    while len(words) < size:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))] = None
    ordered = list(words)
    rng.shuffle(ordered)
    return ordered, [1 / rank for rank in range(1, len(ordered) + 1)]


def make_corpus(folder: Path, pdfs: int, pages: int, seed: int = 5) -> list[str]:
    """Text-layer PDFs of prose: 50 lines of 10 to 14 Zipf-distributed words a page, a paragraph's break now and
    then. Returns every page's text (for queries)."""
    from reportlab.pdfgen import canvas

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words, weights = vocabulary(rng)
    texts: list[str] = []
    for number in range(pdfs):
        pdf = canvas.Canvas(str(folder / f"doc-{number:03d}.pdf"), invariant=1)
        for _ in range(pages):
            pdf.setFont("Helvetica", 10)
            y, page = 740.0, []
            while y > 60:
                page.append(" ".join(rng.choices(words, weights, k=rng.randint(10, 14))))
                pdf.drawString(72, y, page[-1])
                y -= 26 if rng.random() < 0.1 else 13
            pdf.showPage()
            texts.append(" ".join(page))
        pdf.save()
    return texts


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def build(tree: Path, docs: Path, index: Path, model: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `lgpt-index build` run from `tree` (a process of its own, start to exit;
    its CPU and its children's: pdftotext, pdfinfo, pdftoppm): CPU seconds hold still on a loaded machine."""
    env = {**os.environ, "PYTHONPATH": str(tree), "LGPT_PLUGINS": "localgpt_index.testing.fake", "LGPT_OCR": "never",
           "HF_HUB_OFFLINE": "1"}
    started, cpu = time.perf_counter(), children_cpu()
    subprocess.run([sys.executable, "-m", "localgpt_index", "build", str(docs), "--index-dir", str(index), "--model", str(model),
                    "--quiet", "--rebuild"], check=True, env=env, cwd=tree)
    return time.perf_counter() - started, children_cpu() - cpu


def text_layers_cpu(docs: Path, pages: int, rounds: int) -> tuple[float, float]:
    """CPU seconds (this process's and its children's) to read every PDF's text layer: as the baseline did (plain
    pdftotext, split on form feeds) and as this tree does (pdftotext -bbox-layout, pdfinfo, the words' boxes)."""
    from localgpt_index.ingest.text import clean_page_text, pdf_page_texts

    def plain() -> None:
        for pdf in sorted(docs.glob("*.pdf")):
            out = subprocess.run(["pdftotext", "-enc", "UTF-8", "-f", "1", "-l", str(pages), str(pdf), "-"], capture_output=True).stdout
            [clean_page_text(page) for page in out.decode("utf-8", "replace").split("\f")[:pages]]

    def positioned() -> None:
        for pdf in sorted(docs.glob("*.pdf")):
            pdf_page_texts(pdf, 1, pages)

    spent: dict[str, list[float]] = {"plain": [], "positioned": []}
    for _ in range(rounds):
        for name, read in (("plain", plain), ("positioned", positioned)):
            started = time.process_time() + children_cpu()
            read()
            spent[name].append(time.process_time() + children_cpu() - started)
    return statistics.median(spent["plain"]), statistics.median(spent["positioned"])


def sizes(index: Path) -> tuple[int, int]:
    folder = index / "default" / "artifacts"
    return sum(p.stat().st_size for p in folder.glob("*.wordsz")), sum(p.stat().st_size for p in folder.glob("*.jsonz"))


def queries_timed(index: Path, texts: list[str], count: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    """CPU seconds a query (three words of a page), without and with regions, by mode: each query's least over the
    rounds, averaged over the queries (so the total a user's queries cost, each without the machine's noise; a
    median of all the times hides the queries whose regions cost the most); and with regions the first time its
    pages are met (each mode's first round, on a new reader: a page's line pieces are made then, and its lexicon
    where no snippet of the query without regions, just before, made it (visual mode); kept for the rounds after,
    as a server keeps them; a page two queries of that round share is made once).
    The queries run on one thread (BLAS and OpenMP pools limited to one, after the model is loaded): otherwise the
    process's CPU time counts the pools' idle workers spinning between two small products, as much as the work itself."""
    os.environ["LGPT_PLUGINS"] = "localgpt_index.testing.fake"
    from threadpoolctl import threadpool_limits

    from localgpt_index import open_index
    from localgpt_index.index.text.lexicon import part_stems, token_parts

    searcher = open_index(index)
    rng = random.Random(9)
    asked = [" ".join(rng.sample(rng.choice(texts).split(), 3)) for _ in range(count)]
    found: dict[str, tuple[float, float, float]] = {}
    for mode in ("text", "hybrid", "visual"):
        searcher.search(asked[0], k=10, mode=mode)  # warm: the text index, the model
        first: list[float] = []
        least: dict[bool, list[float]] = {False: [float("inf")] * count, True: [float("inf")] * count}
        with threadpool_limits(limits=1), torch_threads(1):
            for turn in range(rounds + 1):
                for number, query in enumerate(asked):
                    for regions in (False, True):
                        started = time.process_time()
                        searcher.search(query, k=10, mode=mode, regions=regions)
                        spent = time.process_time() - started
                        if regions and not turn:
                            first.append(spent)
                        elif turn:
                            least[regions][number] = min(least[regions][number], spent)
            searcher = open_index(index)  # the next mode meets its pages for the first time too: a new reader,
            token_parts.cache_clear()  # and the analysis' caches of words emptied
            part_stems.cache_clear()
        found[mode] = (statistics.mean(least[False]), statistics.mean(least[True]), statistics.mean(first))
    return found


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's own intra-op threads set to `count` for the block, where torch is loaded (a real model)."""
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)


def checkpoint(name: str, work: Path) -> Path:
    """The model called `name`: fake, a ColPali test checkpoint (tiny, bench, cpu: localgpt_index/testing/checkpoints.py)
    written under `work` once, or a path."""
    from localgpt_index.testing.checkpoints import SPECS, make_checkpoint
    from localgpt_index.testing.fake import write_fake_checkpoint

    folder = work / f"model-{name}"
    if name == "fake":
        return folder if folder.exists() else write_fake_checkpoint(folder)
    if name in SPECS and name != "full":  # ("full": the 3B model's size, for GPUs)
        return folder if folder.exists() else make_checkpoint(folder, name)
    if not Path(name).is_dir():
        sys.exit(f"bench_regions: {name}: not a model (fake, tiny, bench, cpu) nor a checkpoint's folder")
    return Path(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdfs", type=int, default=20)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--baseline", default="4f43e61", help="the commit to build without word positions")
    parser.add_argument("--build-rounds", type=int, help="rounds of the build cost (default: --rounds; 0: no build cost, queries only)")
    parser.add_argument("--model", default="fake", help="the queries' index model: fake, tiny (ColPali test checkpoint) or a path")
    parser.add_argument("--build-model", default="fake", help="the builds' model: fake, tiny, bench, cpu (test checkpoints) or a path")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-regions-") as scratch:
        work = Path(scratch)
        docs, model, baseline = work / "docs", checkpoint(args.build_model, work), work / "baseline"
        texts = make_corpus(docs, args.pdfs, args.pages)
        baseline.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(baseline)], input=archive, check=True)
        times: dict[str, list[tuple[float, float]]] = {"this tree": [], "baseline": []}
        rounds = args.rounds if args.build_rounds is None else args.build_rounds
        for _ in range(max(rounds, 1)):
            for name, tree in (("this tree", ROOT), ("baseline", baseline))[:1 if rounds == 0 else 2]:
                times[name].append(build(tree, docs, work / name.replace(" ", "-"), model))
        words, text = sizes(work / "this-tree")
        print(f"corpus: {args.pdfs} PDFs x {args.pages} pages of prose (text layers; Zipf words of a 4,000-word vocabulary); "
              f"the builds' model: {args.build_model}")
        print(f"size: words parts {words:,} B, text parts {text:,} B: words / text = {words / text:.2f} (+{(words / text - 1) * 100:.0f} %"
              " if over 1; target <= 1.20)")
        for kind, at in (("wall", 0), ("CPU", 1)) if rounds else ():
            ours, theirs = (statistics.median(t[at] for t in times[name]) for name in ("this tree", "baseline"))
            print(f"build, {kind} seconds (whole process and its children, median of {rounds}): this tree {ours:.2f} s, "
                  f"baseline {args.baseline} {theirs:.2f} s: {(ours / theirs - 1) * 100:+.1f} % (target <= +5 %); rounds: "
                  f"{[round(t[at], 2) for t in times['this tree']]} against {[round(t[at], 2) for t in times['baseline']]}")
        if rounds:
            plain, positioned = text_layers_cpu(docs, args.pages, rounds)
            baseline_cpu = statistics.median(t[1] for t in times["baseline"])
            print(f"text layers alone, CPU seconds: plain pdftotext {plain:.3f} s, with word positions {positioned:.3f} s "
                  f"({(positioned - plain) / args.pdfs * 1000:+.1f} ms a document; "
                  f"{(positioned - plain) / baseline_cpu * 100:+.1f} % of the baseline's build CPU: the positions' own cost, "
                  "steadier than the builds' difference)")
        asked = work / "this-tree"
        if args.model != args.build_model:
            build(ROOT, docs, asked := work / "queried", checkpoint(args.model, work))
        print(f"queries: the index of the {args.model} model, {args.pdfs * args.pages} pages, one thread")
        for mode, (without, with_regions, first) in queries_timed(asked, texts, args.queries, args.rounds).items():
            print(f"query k=10 {mode}, CPU a query (each query's least, mean): without regions {without * 1000:.2f} ms, "
                  f"with {with_regions * 1000:.2f} ms: "
                  f"{(with_regions / without - 1) * 100:+.1f} % (target <= +15 %), {(with_regions - without) * 1e5:.0f} us a hit; "
                  f"its pages met for the first time: {first * 1000:.2f} ms ({(first / without - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
