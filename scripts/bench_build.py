#!/usr/bin/env python3
"""Indexing speed and peak memory: lgpt-index build against byaldi's RAGMultiModalModel.index.

One generated corpus (PDFs of 5 pages plus office files), the "bench" checkpoint
(real ColPali geometry: 448 px, 1024 image tokens, 128-d vectors, small widths),
the same device and dtype for both. byaldi runs inside torch.autocast, as the
seed code does; it cannot read office files, so it gets them already converted
to PDF by LibreOffice (their conversion time is not counted for byaldi, it is
for lgpt-index). Each system runs in its own process, so peak RSS is its own.

    python scripts/bench_build.py                    # 40 PDFs x 5 pages + 4 office files, CPU float32
    python scripts/bench_build.py --pdfs 10 --device cuda --dtype bfloat16

Prints pages/s for each, their ratio and peak memory. Exits 1 only if the two
disagree on the number of pages indexed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def make_corpus(folder: Path, pdfs: int, pages: int) -> None:
    from docgen import make_docx, make_pdf, make_pptx, make_xlsx

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(pdfs):
        make_pdf(folder / f"report-{i:03d}.pdf", [f"Report {i} section {p}" for p in range(1, pages + 1)])
    make_docx(folder / "memo.docx", ["Memo", "Revenue grew."], page_breaks=2)
    make_docx(folder / "letter.docx", ["Letter", "Dear reader."], page_breaks=1)
    make_pptx(folder / "deck.pptx", ["Overview", "Numbers", "Plan", "Risks"])
    make_xlsx(folder / "sheet.xlsx", [("Quarter", "Revenue")] + [(f"Q{q}", q * 10) for q in range(1, 5)])


def byaldi_copy(corpus: Path, target: Path) -> float:
    """The corpus as byaldi can read it: PDFs as they are, office files converted to PDF one
    by one (as a script around byaldi would). Returns the seconds the conversion took."""
    from localgpt_index.convert import ConverterSet

    target.mkdir(parents=True)
    started = time.perf_counter()
    converters = ConverterSet.detect()
    try:
        for path in sorted(corpus.iterdir()):
            if path.suffix == ".pdf":
                shutil.copy(path, target / path.name)
            else:
                pdf = converters.for_suffix(path.suffix).convert(path, target / f".work-{path.stem}")
                shutil.move(str(pdf), target / f"{path.stem}{path.suffix.replace('.', '-')}.pdf")
                shutil.rmtree(target / f".work-{path.stem}")
    finally:
        converters.close()
    return time.perf_counter() - started


def run_ours(args) -> dict:
    from localgpt_index.build import BuildOptions, build_index
    from localgpt_index.store import IndexStore

    store = IndexStore(Path(args.out) / "ours")
    options = BuildOptions(model=args.model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    started = time.perf_counter()
    report = build_index(Path(args.docs), store, options)
    total = time.perf_counter() - started
    seconds = total - report.stage_seconds.get("load_model", 0.0)
    return {"pages": report.pages_embedded, "seconds": seconds, "stages": report.stage_seconds}


def run_byaldi(args) -> dict:
    import torch
    from byaldi import RAGMultiModalModel

    from localgpt_index.encode import _byaldi_visible_path
    from localgpt_index.models import resolve_model

    dtype = getattr(torch, args.dtype)
    device = "cuda" if args.device.startswith("cuda") else args.device
    with _byaldi_visible_path(resolve_model(args.model)) as path:
        rag = RAGMultiModalModel.from_pretrained(path, device=device, verbose=0, index_root=str(Path(args.out) / "byaldi"))
    rag.model.model = rag.model.model.to(dtype)  # byaldi hard-codes bfloat16; same dtype as ours
    started = time.perf_counter()
    with torch.autocast(device_type=device.split(":")[0], dtype=dtype, enabled=dtype != torch.float32):
        rag.index(input_path=args.docs, index_name="bench", store_collection_with_index=False, overwrite=True)
    seconds = time.perf_counter() - started
    return {"pages": len(rag.model.indexed_embeddings), "seconds": seconds}


def worker(args) -> None:
    result = run_ours(args) if args.worker == "ours" else run_byaldi(args)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pdfs", type=int, default=40)
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--model", default=None, help="default: a bench checkpoint made now")
    parser.add_argument("--worker", choices=["ours", "byaldi"], help=argparse.SUPPRESS)
    parser.add_argument("--docs", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.worker:
        worker(args)
        return

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-") as tmp:
        tmp = Path(tmp)
        if args.model is None:
            from localgpt_index.checkpoints import make_checkpoint

            args.model = str(make_checkpoint(tmp / "bench-colpali", "bench"))
        make_corpus(tmp / "corpus", args.pdfs, args.pages)
        convert_s = byaldi_copy(tmp / "corpus", tmp / "corpus-pdf")
        results = {}
        for name, docs in (("lgpt-index", tmp / "corpus"), ("byaldi", tmp / "corpus-pdf")):
            cmd = [sys.executable, __file__, "--worker", "ours" if name == "lgpt-index" else "byaldi",
                   "--docs", str(docs), "--out", str(tmp / "out"), "--model", args.model,
                   "--device", args.device, "--dtype", args.dtype]
            if args.batch_size:
                cmd += ["--batch-size", str(args.batch_size)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
            results[name] = json.loads(out.stdout.strip().splitlines()[-1])
            r = results[name]
            r["pages_per_s"] = r["pages"] / r["seconds"]
            print(f"{name:>10}: {r['pages']} pages in {r['seconds']:.1f} s = {r['pages_per_s']:.2f} pages/s, "
                  f"peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
        ours, theirs = results["lgpt-index"], results["byaldi"]
        print(f"corpus: {args.pdfs} PDFs x {args.pages} pages + 4 office files; {args.device}, {args.dtype}")
        print(f"speed ratio (lgpt-index / byaldi): {ours['pages_per_s'] / theirs['pages_per_s']:.2f}x")
        with_conversion = theirs["pages"] / (theirs["seconds"] + convert_s)
        print(f"speed ratio against byaldi plus converting its office files first ({convert_s:.1f} s): "
              f"{ours['pages_per_s'] / with_conversion:.2f}x")
        print(f"peak memory ratio (lgpt-index / byaldi): {ours['peak_rss_mib'] / theirs['peak_rss_mib']:.2f}")
        print(f"lgpt-index stage seconds (busy time per stage): {ours['stages']}")
        if ours["pages"] != theirs["pages"]:
            sys.exit(f"page counts differ: lgpt-index {ours['pages']}, byaldi {theirs['pages']}")


if __name__ == "__main__":
    main()
