#!/usr/bin/env python3
"""Indexing on a CPU, in both regimes: lgpt-index build against byaldi's RAGMultiModalModel.index.

Two self-made checkpoints with ColPali's real geometry (448 px, 1,024 image tokens, 128-d
vectors): "cpu" (wider layers, about 24 GFLOP a page: model-bound, as any real model is on a
CPU) and "bench" (narrow: its model costs about what rendering does, so the pipeline is the
limit). Each system runs as a process of its own and is timed as a user sees it, start to
exit; its peak RSS is its own. lgpt-index runs in the dtype its probe picks (bfloat16 on a CPU
with AMX or AVX512-BF16, and then also with --dtype float32); byaldi in float32 and, since it cannot
read office files, gets them converted to PDF first (that conversion is not counted for it; it
is for lgpt-index).

    python scripts/bench_build.py                          # cpu: 16 PDFs x 5 pages; bench: 40 PDFs x 5 + 4 office files;
                                                           # scanned: 40 image-only PDFs x 5 pages on the bench checkpoint
    python scripts/bench_build.py --only scanned           # the scanned corpus alone: default, --ocr never, byaldi,
                                                           # and the ceilings this machine sets (same round)
    python scripts/bench_build.py --only scanned-cpu       # 16 image-only PDFs x 5 pages on the model-bound checkpoint
    python scripts/bench_build.py --only scanned-full --device cuda   # on a GPU: 40 x 5 on a full-size ColPali (3B)
    python scripts/bench_build.py --only cpu
    python scripts/bench_build.py --only cpu --repeat 5            # 5 rounds, and the median ratios
    python scripts/bench_build.py --baseline e3a3eed       # also each regime with that commit's lgpt-index
    python scripts/bench_build.py --only bench --baseline 31bee69 --repeat 3 --baseline-only   # no byaldi: faster
    python scripts/bench_build.py --only bench --baseline 31bee69 --repeat 3 --batch-size 2    # the same batch everywhere
    python scripts/bench_build.py --family colqwen2_5      # a dynamic-resolution family against colpali-engine's loop
    python scripts/bench_build.py --family colqwen2_5 --repeat 5   # 5 rounds, and the median ratio
    python scripts/bench_build.py --family colqwen2_5 --dtype float32 --baseline 8125464

With --family F, the "bench" geometry of that family (768 image tokens a page, narrow layers)
builds 20 PDFs x 5 pages against colpali-engine's plain loop as its README shows it: each PDF
rendered by pdf2image at its default 200 dpi, then processor and model one page at a time, in
the dtype lgpt-index ran in (its probe's choice, or --dtype).

"Once loaded" starts, for every system, when its model is ready, counted from the start of its
script (lgpt-index runs under a small wrapper that says when; the time before includes the
imports on both sides), and ends when its work is done, inside the process: byaldi's and the
loop's scripts time their own indexing, and the wrapper says when lgpt-index's CLI has returned
(at exit, before the interpreter tears down). The whole process is timed from outside.

Prints, per regime: whole-process seconds, pages/s once the model is loaded, the encoder's busy
share, peak RSS, and the ratios; and the model alone (lgpt-index's encoder on pages prepared
beforehand, in the batch size its build kept), which bounds what any pipeline can gain once
loaded. With --baseline, each round also builds with that commit's lgpt-index and with this tree's
`--text never` (pixels only: no page text, no OCR, no text index, as a baseline from before page
text indexes), and prints this tree / baseline twice: like for like (--text never) and full (the
default, page text included: its cost), with the batch size each build kept, and the medians with
their spread (min-max) over the rounds. Exits 1 only if two systems disagree on the pages indexed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # the ones this process may use


def make_corpus(folder: Path, pdfs: int, pages: int, office: bool) -> None:
    from docgen import make_docx, make_pdf, make_pptx, make_xlsx

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(pdfs):
        make_pdf(folder / f"report-{i:03d}.pdf", [f"Report {i} section {p}" for p in range(1, pages + 1)])
    if office:
        make_docx(folder / "memo.docx", ["Memo", "Revenue grew."], page_breaks=2)
        make_docx(folder / "letter.docx", ["Letter", "Dear reader."], page_breaks=1)
        make_pptx(folder / "deck.pptx", ["Overview", "Numbers", "Plan", "Risks"])
        make_xlsx(folder / "sheet.xlsx", [("Quarter", "Revenue")] + [(f"Q{q}", q * 10) for q in range(1, 5)])


def make_scanned_corpus(folder: Path, pdfs: int, pages: int, dpi: int = 150) -> None:
    """Image-only PDFs (no text layer: what a scanner makes), deterministically: text pages (make_pdf's,
    each document its own words) rendered in grey at `dpi`, and saved as pictures, one a page."""
    from docgen import make_pdf

    from localgpt_index.ingest.render import render_page_at_dpi

    folder.mkdir(parents=True, exist_ok=True)
    source = folder.parent / f".{folder.name}-source"
    for i in range(pdfs):
        text = make_pdf(source / f"scan-{i:03d}.pdf", [f"Scanned letter {i} item {p} code {1000 * i + p}" for p in range(1, pages + 1)])
        images = [render_page_at_dpi(text, page, dpi).convert("L") for page in range(1, pages + 1)]
        images[0].save(folder / f"scan-{i:03d}.pdf", save_all=True, append_images=images[1:], resolution=dpi)
    shutil.rmtree(source)


def byaldi_copy(corpus: Path, target: Path) -> None:
    """The corpus as byaldi can read it: PDFs as they are, office files converted to PDF first."""
    from localgpt_index.ingest.convert import ConverterSet

    target.mkdir(parents=True)
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


BYALDI = """
import json, sys, time
started = time.perf_counter()
import torch
from byaldi import RAGMultiModalModel
from localgpt_index.models.loaders import byaldi_visible_path
from localgpt_index.models.resolve import resolve_model
ref = resolve_model(sys.argv[1])
with byaldi_visible_path(ref.path, ref.family) as path:
    rag = RAGMultiModalModel.from_pretrained(path, device=sys.argv[5], verbose=0, index_root=sys.argv[3])
rag.model.model = rag.model.model.to(getattr(torch, sys.argv[4]))  # byaldi hard-codes bfloat16
loaded = time.perf_counter()
rag.index(input_path=sys.argv[2], index_name="bench", store_collection_with_index=False, overwrite=True)
print(json.dumps({"pages": len(rag.model.indexed_embeddings), "load_s": loaded - started,
                  "index_s": time.perf_counter() - loaded}))
"""


ENGINE = """
import json, sys, time
from pathlib import Path
started = time.perf_counter()
import torch
import colpali_engine.models as engine
from pdf2image import convert_from_path
from localgpt_index.models.families import family_named
family = family_named(sys.argv[3])
model = getattr(engine, family.architecture).from_pretrained(sys.argv[1], dtype=getattr(torch, sys.argv[4])).eval()
processor = getattr(engine, family.processor).from_pretrained(sys.argv[1])
loaded = time.perf_counter()
pages = 0
for pdf in sorted(Path(sys.argv[2]).glob("*.pdf")):
    for image in convert_from_path(str(pdf)):
        with torch.no_grad():
            model(**processor.process_images([image]))
        pages += 1
print(json.dumps({"pages": pages, "load_s": loaded - started, "index_s": time.perf_counter() - loaded}))
"""


# The model alone: lgpt-index's encoder (the probe's device, `dtype`) on pages rendered and prepared
# beforehand, in batches of the size the build kept: what "once loaded" would be if the pipeline cost
# nothing. byaldi's rate once loaded over this one is the most any pipeline can gain on it.
MODEL_ALONE = """
import json, sys, time
from pathlib import Path
from localgpt_index.models.loading import open_probed_encoder
from localgpt_index.models.resolve import ModelSpec, resolve_model
from localgpt_index.ingest.render import render_pdf_pages
from localgpt_index.models.tuning import cpu_threads
encoder = open_probed_encoder(resolve_model(sys.argv[1]), ModelSpec(device=sys.argv[5], dtype=sys.argv[3]), batch_size=int(sys.argv[4]))
pdfs = sorted(Path(sys.argv[2]).glob("*.pdf"))[:4]
pages = [encoder.prepare_page(page) for pdf in pdfs for page in render_pdf_pages(pdf, encoder.render_size, 1, 5)]
with cpu_threads(encoder):
    encoder.encode_pages(pages[: encoder.batch_size])  # a shape's first call pays one-time costs
    started = time.perf_counter()
    encoder.encode_pages(pages)
print(json.dumps({"pages": len(pages), "seconds": time.perf_counter() - started}))
"""


# lgpt-index's build, run as `python -m localgpt_index` would run it, saying on stderr when its
# model is ready and when the build is over (at exit, before the interpreter tears down): its pages/s
# "once loaded" are timed between the two, as the other systems' are from their load to their last page
OURS = """
import atexit, sys, time
started = time.perf_counter()
atexit.register(lambda: print(f"BUILD DONE {time.perf_counter() - started:.4f}", file=sys.stderr, flush=True))
try:  # when the build begins (its report's commit times count from there): this tree's, not a baseline's
    import localgpt_index.cli.build
    import localgpt_index.indexing.run as build_module
    begin = build_module.build_index
    def timed_build(*args, **kwargs):
        print(f"BUILD START {time.perf_counter() - started:.4f}", file=sys.stderr, flush=True)
        return begin(*args, **kwargs)
    build_module.build_index = timed_build
except ImportError:
    pass
try:
    from localgpt_index.models.torch_encoder import TorchEncoder as Encoder
except ImportError:  # a --baseline from before the models package was split (31bee69 and older)
    from localgpt_index.encode import ByaldiEncoder as Encoder
load = Encoder.__init__
def loaded(self, *args, **kwargs):
    load(self, *args, **kwargs)
    print(f"MODEL READY {time.perf_counter() - started:.4f}", file=sys.stderr, flush=True)
Encoder.__init__ = loaded
from localgpt_index.cli import run
sys.argv[0] = "lgpt-index"
run()
"""


def run(command: list[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, str, str]:
    """Wall seconds, stdout and stderr of a whole process. Commands are wrapped in a small Python
    that prints its one child's peak RSS last (RUSAGE_CHILDREN of a process with one child)."""
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env or ENV, cwd=cwd)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 3):
        sys.exit(f"{command[:4]} failed:\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout, proc.stderr


BATCH_SIZE: int | None = None  # --batch-size: every lgpt-index build (this tree's and the baseline's) uses it
DEVICE = "cpu"  # --device: where every system's model runs (byaldi's, lgpt-index's, the model alone)
BASELINE_ONLY = False  # --baseline-only: no byaldi, no model alone; this tree (default, --text never) and the baseline
ROUND = 0


def ours(python: str, docs: Path, model: str, index: Path, pythonpath: str | None = None, dtype: str = "auto",
         extra: tuple[str, ...] = ()) -> dict:
    env = {**ENV, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    shutil.rmtree(index, ignore_errors=True)  # every build from scratch
    command = [python, "-c", "import sys, resource, subprocess; r = subprocess.run(sys.argv[1:]); "
               "u = resource.getrusage(resource.RUSAGE_CHILDREN); print('RSS', u.ru_maxrss, u.ru_utime + u.ru_stime); "
               "sys.exit(r.returncode)",
               python, "-c", OURS, "build", str(docs), "--model", model, "--index-dir", str(index), "--json", "-q",
               *(["--dtype", dtype] if dtype != "auto" else []),
               *(["--batch-size", str(BATCH_SIZE)] if BATCH_SIZE else []), *(["--device", DEVICE] if DEVICE != "cpu" else []), *extra]
    # `python -c` puts the working directory first on sys.path: a baseline runs from its own tree
    seconds, out, err = run(command, env=env, cwd=pythonpath)
    lines = out.strip().splitlines()
    rss, cpu = int(lines[-1].split()[1]) / 1024, float(lines[-1].split()[2])  # (its CPU: its own and its children's)
    report = json.loads("\n".join(lines[:-1]))
    ready = float(err.split("MODEL READY ")[1].split()[0])  # from the start of the script, as the others' load_s
    done = float(err.split("BUILD DONE ")[1].split()[0])
    begun = float(err.split("BUILD START ")[1].split()[0]) if "BUILD START " in err else None
    visual = report.get("visual_commit_s")
    return {"seconds": seconds, "cpu": cpu, "pages": report["pages_embedded"], "rss": rss,
            "encode": report["stage_seconds"].get("encode", 0.0),
            "to_visual": begun + visual if begun is not None and visual is not None else None,
            "to_text": begun + report["text_commit_s"] if begun is not None and report.get("text_commit_s") else None,
            "text": report.get("text"),
            "loaded_rate": report["pages_embedded"] / max(done - ready, 1e-9), "load": ready,
            "tuning": report.get("cpu_tuning"), "dtype": report["precision"]["dtype"], "stages": report["stage_seconds"],
            "batch": (report.get("cpu_tuning") or {}).get("batch_size") or BATCH_SIZE}


def theirs(python: str, docs: Path, model: str, out: Path, family: str | None = None, dtype: str = "float32") -> dict:
    """byaldi's index, or with `family` colpali-engine's plain loop, in `dtype`."""
    script = ([python, "-c", ENGINE, model, str(docs), family, dtype] if family
              else [python, "-c", BYALDI, model, str(docs), str(out), dtype, DEVICE])
    command = [python, "-c", "import sys, resource, subprocess; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(r.stdout.strip()); print('RSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)",
               *script]
    seconds, text, _ = run(command)
    lines = text.strip().splitlines()
    rss = int(lines[-1].split()[1]) / 1024
    result = json.loads(lines[-2])
    return {"seconds": seconds, "pages": result["pages"], "rss": rss, "load": result["load_s"],
            "loaded_rate": result["pages"] / max(result["index_s"], 1e-9)}


def model_alone(python: str, model: str, docs: Path, dtype: str, batch: int) -> float:
    """Pages/s of the model alone (MODEL_ALONE), in a process of its own."""
    _, out, _ = run([python, "-c", MODEL_ALONE, model, str(docs), dtype, str(batch), DEVICE])
    result = json.loads(out.strip().splitlines()[-1])
    return result["pages"] / result["seconds"]


def regime(name: str, spec: str, pdfs: int, pages: int, office: bool, tmp: Path, baseline: Path | None,
           repeat: int = 1) -> bool:
    """`repeat` rounds of every system, one after the other in each, and the median ratios (see family_regime)."""
    from localgpt_index.testing.checkpoints import make_checkpoint

    model = str(make_checkpoint(tmp / f"{spec}-colpali", spec))
    corpus = tmp / f"corpus-{spec}"
    make_corpus(corpus, pdfs, pages, office)
    if not BASELINE_ONLY:
        byaldi_copy(corpus, tmp / f"corpus-{spec}-pdf")
    agree, ratios = True, []
    for round_number in range(1, repeat + 1):
        for index in tmp.glob(f"idx-{spec}*"):
            shutil.rmtree(index)  # each round builds from scratch
        heading = f"[{name}] round {round_number}/{repeat}:" if repeat > 1 else f"[{name}]"
        round_agrees, round_ratios = regime_round(heading, spec, model, corpus, tmp, baseline)
        agree &= round_agrees
        ratios.append(round_ratios)
    if repeat > 1:
        def median(key: str, unit: str = "x") -> str:
            values = [r[key] for r in ratios]
            return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}{unit}-{max(values):.2f}{unit})"

        if not BASELINE_ONLY:
            print(f"[{name}] median of {repeat} rounds against byaldi (float32): whole process {median('whole')}, once "
                  f"loaded {median('loaded')}, peak RSS ratio {median('rss', '')}; the model alone {median('ceiling')}")
        if baseline is not None:
            print(f"[{name}] median of {repeat} rounds, this tree / baseline (min-max), whole process: like for like "
                  f"(--text never) {median('pixels')}, full (page text) {median('baseline')}; pages/s once loaded: like "
                  f"for like {median('pixels_loaded')}, full {median('full_loaded')}")
    return agree


def regime_round(heading: str, spec: str, model: str, corpus: Path, tmp: Path, baseline: Path | None) -> tuple[bool, dict]:
    """One round of a regime: lgpt-index, byaldi (in bfloat16 too where lgpt-index ran in it), the
    model alone, the baseline; printed, with the ratios against byaldi float32."""
    python = sys.executable
    if BASELINE_ONLY:
        return baseline_round(heading, spec, model, corpus, tmp, baseline)
    us = ours(python, corpus, model, tmp / f"idx-{spec}")
    runs = {f"lgpt-index build ({us['dtype']})": us}
    if us["dtype"] != "float32":  # the probe picked bfloat16 (a CPU with AMX or AVX512-BF16): float32 as well
        runs["lgpt-index --dtype float32"] = ours(python, corpus, model, tmp / f"idx-{spec}-float32", dtype="float32")
    them = theirs(python, tmp / f"corpus-{spec}-pdf", model, tmp / f"byaldi-{spec}")
    others = {"byaldi index (float32)": them}
    theirs_bf16 = None
    if us["dtype"] == "bfloat16":  # byaldi's own default, for the same dtype on both sides
        theirs_bf16 = theirs(python, tmp / f"corpus-{spec}-pdf", model, tmp / f"byaldi-{spec}-bf16", dtype="bfloat16")
        others["byaldi index (bfloat16)"] = theirs_bf16
    batch = us["batch"] or 4
    alone = model_alone(python, model, corpus, us["dtype"], batch)
    print(f"{heading} {spec} checkpoint, {us['pages']} pages, CPU, {CORES} cores")
    for label, r in (*runs.items(), *others.items()):
        print(f"  {label:<29} whole process {r['seconds']:6.1f} s, {r['loaded_rate']:6.2f} pages/s once loaded "
              f"(model load {r['load']:.1f} s), peak RSS {r['rss']:.0f} MiB")
    if theirs_bf16 is not None:
        print(f"  bfloat16 on both sides: whole process {theirs_bf16['seconds'] / us['seconds']:.2f}x faster; once loaded: "
              f"{us['loaded_rate'] / theirs_bf16['loaded_rate']:.2f}x")
    for label, r in runs.items():
        print(f"  {label} against byaldi (float32): whole process {them['seconds'] / r['seconds']:.2f}x faster; once loaded: "
              f"{r['loaded_rate'] / them['loaded_rate']:.2f}x; peak RSS ratio {r['rss'] / them['rss']:.2f}; "
              f"encoder busy {r['encode'] / max(r['seconds'] - r['load'], 1e-9):.0%} of the build after the model loaded")
        if r["tuning"]:
            print(f"    batch trials (pages/s by batch size): {r['tuning']['pages_per_second_by_batch']}, "
                  f"kept {r['tuning']['batch_size']}, {r['tuning']['threads']} model thread(s)")
    print(f"  the model alone ({us['dtype']}, batch {batch}, 20 pages prepared beforehand): {alone:.2f} pages/s, "
          f"{1000 / alone:.0f} ms a page; lgpt-index once loaded is {us['loaded_rate'] / alone:.0%} of it, and a "
          f"pipeline that cost nothing would be {alone / them['loaded_rate']:.2f}x byaldi (float32) once loaded")
    agree = all(r["pages"] == them["pages"] for r in runs.values())
    ratios = {"whole": them["seconds"] / us["seconds"], "loaded": us["loaded_rate"] / them["loaded_rate"],
              "rss": us["rss"] / them["rss"], "ceiling": alone / them["loaded_rate"]}
    if baseline is not None:
        before, pixels = baseline_pair(python, corpus, model, tmp, spec, baseline)
        agree &= before["pages"] == us["pages"] == pixels["pages"]
        ratios.update(against_baseline(us, pixels, before))
    return agree, ratios


def scanned_regime(spec: str, pdfs: int, pages: int, tmp: Path, baseline: Path | None, repeat: int = 1) -> bool:
    """Scanned PDFs (image-only: every page needs OCR) against byaldi (float32), in the same rounds:
    lgpt-index's default build (pixels first, OCR text following in the build), its time to the
    visual commit (from its process's start), and --ocr never (like for like: no OCR, as byaldi); and
    the ceilings this machine sets, measured in the same round (scanned_ceilings)."""
    from localgpt_index.testing.checkpoints import make_checkpoint

    full = {"dtype": "bfloat16", "device": DEVICE} if spec == "full" else {}  # (3B parameters: made where they will run)
    model = str(make_checkpoint(tmp / f"{spec}-colpali", spec, **full))
    corpus = tmp / f"corpus-scanned-{spec}"
    make_scanned_corpus(corpus, pdfs, pages)
    python, agree = sys.executable, True
    target = 1.5 if spec == "cpu" else 1.0  # (issue 41: the model-bound checkpoint's default build >= 1.5x byaldi)
    their_dtype = "float32" if DEVICE == "cpu" else "bfloat16"  # (byaldi's own on a GPU)
    ratios: list[dict] = []
    for round_number in range(1, repeat + 1):
        us = ours(python, corpus, model, tmp / f"idx-scanned-{spec}")
        never = ours(python, corpus, model, tmp / f"idx-scanned-{spec}-never", extra=("--ocr", "never"))
        them = theirs(python, corpus, model, tmp / f"byaldi-scanned-{spec}", dtype=their_dtype)
        alone = model_alone(python, model, corpus, never["dtype"], never["batch"] or (4 if DEVICE == "cpu" else 0))  # (0: the device's)
        runs = {f"lgpt-index build ({us['dtype']})": us, "lgpt-index --ocr never": never, f"byaldi index ({their_dtype})": them}
        if baseline is not None:
            runs["baseline build"] = ours(python, corpus, model, tmp / f"idx-scanned-{spec}-baseline", pythonpath=str(baseline))
            runs["baseline --ocr never"] = ours(python, corpus, model, tmp / f"idx-scanned-{spec}-baseline-never",
                                                pythonpath=str(baseline), extra=("--ocr", "never"))
        print(f"[scanned {spec}] round {round_number}/{repeat}: {us['pages']} image-only pages ({pdfs} PDFs), {DEVICE}, "
              f"{CORES} cores, load average {os.getloadavg()[0]:.1f}")
        for label, r in runs.items():
            print(f"  {label:<29} whole process {r['seconds']:6.1f} s, {r['loaded_rate']:6.2f} pages/s once loaded "
                  f"(model load {r['load']:.1f} s), peak RSS {r['rss']:.0f} MiB" + (f", {r['cpu']:.1f} CPU s" if "cpu" in r else ""))
        stages = us["stages"]
        print(f"  default build: visual commit at {us['to_visual']:.1f} s, text commit at {us['to_text'] or float('nan'):.1f} s "
              f"(from its process's start); text {us['text']}; OCR {stages.get('ocr', 0.0):.1f} busy s, encode "
              f"{stages.get('encode', 0.0):.1f} s, waited for text {stages.get('text_wait', 0.0):.2f} s")
        print(f"  the encoder, pages/s while it encodes: {encoder_rate(us):.2f} with OCR beside it (the default build), "
              f"{encoder_rate(never):.2f} without (--ocr never); the model alone {alone:.2f}")
        round_ratios = {"whole": them["seconds"] / us["seconds"], "visual": them["seconds"] / us["to_visual"],
                        "never": them["seconds"] / never["seconds"], **scanned_ceilings(us, never, them, alone)}
        print(f"  against byaldi ({their_dtype}): default build whole process {round_ratios['whole']:.2f}x (target >= {target}x); "
              f"time to the visual commit {round_ratios['visual']:.2f}x byaldi's whole index (target >= 5x); "
              f"--ocr never whole process {round_ratios['never']:.2f}x", flush=True)
        print(f"  ceilings, this round: whole process {round_ratios['whole_ceiling']:.2f}x (the default build's "
              f"{us['cpu']:.1f} CPU s over {CORES} cores, or its --ocr never build's wall where longer): reached "
              f"{round_ratios['whole'] / round_ratios['whole_ceiling']:.0%}; visual commit {round_ratios['visual_ceiling']:.2f}x "
              f"(the --ocr never build's, at {never['to_visual']:.1f} s: OCR beside it costing the encoder nothing): reached "
              f"{round_ratios['visual'] / round_ratios['visual_ceiling']:.0%}; and {round_ratios['pipeline_ceiling']:.2f}x "
              f"for a pipeline that cost nothing (the model's load, {never['load']:.1f} s, then {us['pages']} pages at "
              f"the model alone's {alone:.2f} pages/s)", flush=True)
        if baseline is not None:
            before, never_before = runs["baseline build"], runs["baseline --ocr never"]
            print(f"  this tree / baseline, whole process: default {before['seconds'] / us['seconds']:.2f}x, "
                  f"--ocr never {never_before['seconds'] / never['seconds']:.2f}x (like for like)")
        ratios.append(round_ratios)
        agree &= us["pages"] == never["pages"] == them["pages"]
    if repeat > 1:
        print(f"[scanned {spec}] median of {repeat} rounds against byaldi (min-max): " + ", ".join(
            f"{key.replace('_', ' ')} {statistics.median(r[key] for r in ratios):.2f}x "
            f"({min(r[key] for r in ratios):.2f}x-{max(r[key] for r in ratios):.2f}x)"
            for key in ("whole", "whole_ceiling", "visual", "visual_ceiling", "pipeline_ceiling", "never")))
    return agree


def encoder_rate(build: dict) -> float:
    """A build's pages over its encoder's busy seconds (stage_seconds.encode)."""
    return build["pages"] / max(build["encode"], 1e-9)


def scanned_ceilings(us: dict, never: dict, them: dict, alone: float) -> dict:
    """byaldi's whole index over the least time each of the scanned bench's measures could take, from this round's runs:
    the whole process no less than the default build's CPU seconds (its own and its children's) over CORES, nor than
    its --ocr never build; the visual commit no sooner than the --ocr never build's (OCR beside the encoder costing it
    nothing); and no pipeline sooner than the model's load (as the build reports it) then the model alone on every page."""
    fastest = max(us["cpu"] / CORES, never["seconds"])
    return {"whole_ceiling": them["seconds"] / fastest, "visual_ceiling": them["seconds"] / never["to_visual"],
            "pipeline_ceiling": them["seconds"] / (never["load"] + us["pages"] / alone)}


def baseline_round(heading: str, spec: str, model: str, corpus: Path, tmp: Path, baseline: Path | None) -> tuple[bool, dict]:
    """--baseline-only: this tree (default), this tree --text never and the baseline, no byaldi; the
    order turns by one each round (A B C, B C A, ...), so that no variant always runs first or last."""
    global ROUND
    if baseline is None:
        sys.exit("--baseline-only needs --baseline REF")
    python = sys.executable
    runs = [("default", lambda: ours(python, corpus, model, tmp / f"idx-{spec}")),
            ("pixels", lambda: ours(python, corpus, model, tmp / f"idx-{spec}-pixels", extra=("--text", "never"))),
            ("baseline", lambda: ours(python, corpus, model, tmp / f"idx-{spec}-baseline", pythonpath=str(baseline)))]
    ROUND += 1
    turn = ROUND % len(runs)
    done = {name: run() for name, run in runs[turn:] + runs[:turn]}
    us, pixels, before = done["default"], done["pixels"], done["baseline"]
    print(f"{heading} {spec} checkpoint, {us['pages']} pages, CPU, {CORES} cores, load average "
          f"{os.getloadavg()[0]:.1f}; order {', '.join(done)}")
    for label, r in ((f"lgpt-index build ({us['dtype']})", us), ("this tree --text never", pixels),
                     (f"baseline ({baseline.name.removeprefix('baseline-')})", before)):
        print(f"  {label:<29} whole process {r['seconds']:6.1f} s, {r['loaded_rate']:6.2f} pages/s once loaded "
              f"(model load {r['load']:.1f} s), peak RSS {r['rss']:.0f} MiB, batch {r['batch']}")
    ratios = against_baseline(us, pixels, before)
    return before["pages"] == us["pages"] == pixels["pages"], ratios


def baseline_pair(python: str, corpus: Path, model: str, tmp: Path, spec: str, baseline: Path) -> tuple[dict, dict]:
    """The baseline's build and this tree's with `--text never` (pixels only, as the baseline indexes),
    one after the other, printed."""
    before = ours(python, corpus, model, tmp / f"idx-{spec}-baseline", pythonpath=str(baseline))
    pixels = ours(python, corpus, model, tmp / f"idx-{spec}-pixels", extra=("--text", "never"))
    for label, r in ((f"baseline ({baseline.name.removeprefix('baseline-')})", before), ("this tree --text never", pixels)):
        print(f"  {label:<29} whole process {r['seconds']:6.1f} s, {r['loaded_rate']:6.2f} pages/s once loaded "
              f"(model load {r['load']:.1f} s), peak RSS {r['rss']:.0f} MiB, batch {r['batch']}")
    return before, pixels


def against_baseline(us: dict, pixels: dict, before: dict) -> dict:
    """This tree / the baseline, whole process (baseline seconds / ours: above 1 is faster), printed:
    like for like (--text never: what the baseline does) and full (the default: page text, OCR where
    the text layer is thin, the text index), with the batch sizes each kept (the tuner's choice moves
    pages/s by up to a third: a ratio of builds that kept different sizes says so)."""
    like, full = before["seconds"] / pixels["seconds"], before["seconds"] / us["seconds"]
    batches = f"batch sizes kept: default {us['batch']}, --text never {pixels['batch']}, baseline {before['batch']}"
    same = "" if us["batch"] == pixels["batch"] == before["batch"] else " (they differ: --batch-size N fixes them)"
    text = {name: us["stages"].get(name, 0.0) for name in ("text", "ocr", "text_wait")}
    print(f"  this tree / baseline, whole process: like for like (--text never) {like:.2f}x, full (page text) {full:.2f}x; "
          f"{batches}{same}; page text's own seconds in the full build: pdftotext {text['text']:.2f}, OCR {text['ocr']:.2f}, "
          f"waited for {text['text_wait']:.2f}, commit {us['stages'].get('commit', 0.0):.2f} (--text never: "
          f"{pixels['stages'].get('commit', 0.0):.2f})")
    return {"baseline": full, "pixels": like, "pixels_loaded": pixels["loaded_rate"] / before["loaded_rate"],
            "full_loaded": us["loaded_rate"] / before["loaded_rate"]}


def family_regime(family: str, tmp: Path, dtype: str, baseline: Path | None, repeat: int = 1) -> bool:
    """`repeat` rounds, the systems one after the other in each: this machine's speed drifts by a
    third within an hour, so a ratio is only as good as the rounds it comes from (the median)."""
    from localgpt_index.testing.checkpoints import make_family_checkpoint

    model = str(make_family_checkpoint(tmp / f"bench-{family}", family, geometry="bench"))
    corpus = tmp / "corpus-family"
    make_corpus(corpus, 20, 5, False)
    python = sys.executable
    agree, loaded, whole = True, [], []
    for round_number in range(1, repeat + 1):
        shutil.rmtree(tmp / f"idx-{family}", ignore_errors=True)
        shutil.rmtree(tmp / f"idx-{family}-baseline", ignore_errors=True)
        us = ours(python, corpus, model, tmp / f"idx-{family}", dtype=dtype)
        # the loop runs in the dtype lgpt-index ran in (its README loads bfloat16 on a GPU)
        them = theirs(python, corpus, model, tmp / "unused", family=family, dtype=us["dtype"])
        runs = [("lgpt-index build", us), ("colpali-engine loop", them)]
        if baseline is not None:
            runs.append((f"baseline {baseline.name.removeprefix('baseline-')}",
                         ours(python, corpus, model, tmp / f"idx-{family}-baseline", pythonpath=str(baseline), dtype=dtype)))
        print(f"[{family}] round {round_number}/{repeat}: bench geometry (768 image tokens a page), {us['pages']} pages, "
              f"CPU {us['dtype']} both, {CORES} cores")
        for label, r in runs:
            print(f"  {label:<19} whole process {r['seconds']:6.1f} s, {r['loaded_rate']:6.2f} pages/s once loaded "
                  f"(model load {r['load']:.1f} s), peak RSS {r['rss']:.0f} MiB")
        loaded.append(us["loaded_rate"] / them["loaded_rate"])
        whole.append(them["seconds"] / us["seconds"])
        print(f"  pages/s once loaded: {loaded[-1]:.2f}x; whole process: {whole[-1]:.2f}x faster; "
              f"peak RSS ratio {us['rss'] / them['rss']:.2f}", flush=True)
        if baseline is not None:
            before = runs[-1][1]
            print(f"  this tree / baseline: {us['loaded_rate'] / before['loaded_rate']:.2f}x pages/s once loaded, "
                  f"{before['seconds'] / us['seconds']:.2f}x whole process")
        agree &= us["pages"] == them["pages"]
    if repeat > 1:
        print(f"[{family}] median of {repeat} rounds: {statistics.median(loaded):.2f}x pages/s once loaded "
              f"({min(loaded):.2f}x-{max(loaded):.2f}x), {statistics.median(whole):.2f}x whole process")
    return agree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["cpu", "bench", "scanned", "scanned-cpu", "scanned-full"], default=None,
                        help="scanned: 40 image-only PDFs x 5 pages (OCR on every page) on the bench checkpoint; "
                             "scanned-cpu: 16 x 5 on the model-bound one; scanned-full: 40 x 5 on a full-size ColPali "
                             "(PaliGemma-3B's widths, random weights: for a GPU, with --device cuda)")
    parser.add_argument("--pdfs", type=int, default=None, metavar="N",
                        help="the scanned regimes' corpus: N image-only PDFs of 5 pages (default: 40, scanned-cpu 16)")
    parser.add_argument("--device", default="cpu", help="the scanned regimes: where every system's model runs, cpu (default) "
                        "or cuda; byaldi in float32 on a CPU, in its own bfloat16 on a GPU")
    parser.add_argument("--family", default=None, help="only a family's bench geometry against colpali-engine's loop")
    parser.add_argument("--baseline", default=None, metavar="REF",
                        help="a git commit whose lgpt-index also builds each regime's corpus (or --family's)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every system, and the median ratios")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                        help="with --family: lgpt-index's dtype (the loop runs in the same)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="every lgpt-index build (this tree's and the baseline's) with --batch-size N: the CPU tuner's "
                             "choice, which moves pages/s by up to a third, is then the same on every side")
    parser.add_argument("--baseline-only", action="store_true",
                        help="with --baseline: only lgpt-index builds (this tree, this tree --text never, the baseline), no byaldi")
    args = parser.parse_args()
    if args.device != "cpu" and (args.family or args.only not in ("scanned", "scanned-cpu", "scanned-full")):
        parser.error("--device is for the scanned regimes (--only scanned, scanned-cpu or scanned-full)")
    global BATCH_SIZE, BASELINE_ONLY, DEVICE
    BATCH_SIZE, BASELINE_ONLY, DEVICE = args.batch_size, args.baseline_only, args.device
    agree = True
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-") as tmp:
        tmp = Path(tmp)
        baseline = None
        if args.baseline:
            baseline = tmp / f"baseline-{args.baseline}"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline],
                           check=True, capture_output=True)
        try:
            if args.family:
                sys.exit(0 if family_regime(args.family, tmp, args.dtype, baseline, args.repeat) else 1)
            if args.only in (None, "cpu"):
                agree &= regime("model-bound", "cpu", 16, 5, False, tmp, baseline, args.repeat)
            if args.only in (None, "bench"):
                agree &= regime("pipeline-bound", "bench", 40, 5, True, tmp, baseline, args.repeat)
            if args.only in (None, "scanned"):
                agree &= scanned_regime("bench", args.pdfs or 40, 5, tmp, baseline, args.repeat)
            if args.only in (None, "scanned-cpu"):
                agree &= scanned_regime("cpu", args.pdfs or 16, 5, tmp, baseline, args.repeat)
            if args.only == "scanned-full":
                agree &= scanned_regime("full", args.pdfs or 40, 5, tmp, baseline, args.repeat)
        finally:
            if baseline is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], capture_output=True)
    sys.exit(0 if agree else 1)


if __name__ == "__main__":
    main()
