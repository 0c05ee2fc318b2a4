#!/usr/bin/env python3
"""What page text costs a build (issue 27), with the bench checkpoint (scripts/bench_build.py's
narrow ColPali geometry: its model costs about what rendering does, so any added work shows).

1. Text extraction on text PDFs: `build --ocr never` (one pdftotext per document, each segment's
   text part and the text index written) against the same build with `--text never` (pixels only:
   no pdftotext, no text part, no text index). Target: <= +5 %.
2. OCR alone: pages/s of Tesseract on scanned (image-only) PDF pages, the 300 dpi render included,
   one page at a time, as the build's OCR pool does with its default workers (half the CPUs).
3. A build of scanned pages with `--ocr auto` against max(OCR alone, encoding alone), encoding alone
   being `build --ocr never` of the same pages. Target: <= +15 %.

Builds are whole processes timed from outside (start-up and model load included, the same in every
variant) and, from the process's own report, "once loaded" (model ready to exit, as bench_build.py
has it). Rounds are interleaved (A, B, A, B, ...), each ratio is taken within its round, and the
median and spread (min-max) are printed: the machine's speed drifts, so compare within a run.

    python scripts/bench_text.py                    # 20 text PDFs x 5 pages, 12 scanned pages, 3 rounds
    python scripts/bench_text.py --small            # 8 x 3 and 6 scanned pages, 2 rounds (minutes)
    python scripts/bench_text.py --rounds 5
    python scripts/bench_text.py --extraction-only --rounds 6   # only 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_build  # noqa: E402  (its build wrapper, process runner and checkpoint)
import make_eval_set  # noqa: E402  (its text-PDF and scanner writers)

LINES = ("Quarterly operations review for the northern region and its pump stations.",
         "Invoice INV-{n:05d} from Halvorsen Marine Supply totals EUR {n}.50, due within thirty days.",
         "Technician Maribel Okonkwo replaced the check valve, model VX-442, at station P-{n}.",
         "The maintenance budget for the year is 410,000; two technicians joined in July.",
         "Shipments leave the Bergen warehouse every Tuesday with pallets of fittings and valves.")


def page_lines(n: int, page: int) -> tuple[str, ...]:
    body = [line.format(n=n * 10 + page) for line in LINES] * 4
    return (f"Report {n} - page {page}", *body)


def make_text_pdfs(folder: Path, pdfs: int, pages: int) -> None:
    folder.mkdir(parents=True)
    for n in range(pdfs):
        make_eval_set.write_text_pdf(folder / f"report-{n:03d}.pdf", tuple(page_lines(n, p) for p in range(1, pages + 1)))


def make_scans(folder: Path, pages: int) -> None:
    folder.mkdir(parents=True)
    for n in range(pages):  # one page a document, as scanners often give them
        make_eval_set.write_scan_pdf(folder / f"scan-{n:03d}.pdf", (page_lines(n, 1)[:12],), n)


def build(docs: Path, model: str, index: Path, *args: str, env: dict | None = None) -> dict:
    """One build as a whole process: wall seconds, seconds once loaded, pages, and the text tally."""
    shutil.rmtree(index, ignore_errors=True)
    seconds, out, err = bench_build.run([sys.executable, "-c", bench_build.OURS, "build", str(docs), "--model", model,
                                         "--index-dir", str(index), "--json", "-q", *args], env={**bench_build.ENV, **(env or {})})
    import json

    report = json.loads(out)
    ready = float(err.split("MODEL READY ")[1].split()[0])
    done = float(err.split("BUILD DONE ")[1].split()[0])
    return {"seconds": seconds, "loaded": done - ready, "pages": report["pages_embedded"], "text": report["text"],
            "stages": report["stage_seconds"]}


def stages(result: dict) -> str:
    """The build's own stage seconds that tell where page text's time went (summed over threads)."""
    names = ("encode", "text", "ocr", "text_wait", "commit")
    return ", ".join(f"{name} {result['stages'][name]:.2f}" for name in names if name in result["stages"])


def ocr_alone(scans: Path, workers: int) -> tuple[float, int]:
    """Seconds to OCR every page of the scans (render at 300 dpi + Tesseract), `workers` pages at a time."""
    from localgpt_index.ingest.ocr import Tesseract

    tesseract = Tesseract.find()
    if tesseract is None:
        sys.exit("Tesseract is not installed (apt-get install tesseract-ocr tesseract-ocr-eng)")
    pdfs = sorted(scans.glob("*.pdf"))
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        texts = list(pool.map(lambda pdf: tesseract.read_pdf_page(pdf, 1, "eng"), pdfs))
    seconds = time.perf_counter() - started
    if sum("Report" in text for text in texts) < len(pdfs) * 0.9:
        sys.exit("OCR did not read the scans' titles: the measurement would be of failures")
    return seconds, len(pdfs)


def spread(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.3f}{unit} (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="8 text PDFs x 3 pages, 6 scanned pages, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--extraction-only", action="store_true", help="only 1. (text PDFs with and without page text)")
    args = parser.parse_args()
    pdfs, pages, scanned, rounds = (8, 3, 6, 2) if args.small else (20, 5, 12, 3)
    rounds = args.rounds or rounds
    from localgpt_index.ingest.pagetext import default_ocr_workers
    from localgpt_index.testing.checkpoints import make_checkpoint

    workers = default_ocr_workers()
    with tempfile.TemporaryDirectory(prefix="bench-text-") as tmp_name:
        tmp = Path(tmp_name)
        model = str(make_checkpoint(tmp / "bench-colpali", "bench"))
        texts, scans, index = tmp / "text-pdfs", tmp / "scans", tmp / "index"
        make_text_pdfs(texts, pdfs, pages)
        make_scans(scans, scanned)
        print(f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f}: a shared machine, compare within a run); "
              f"{pdfs} text PDFs x {pages} pages, {scanned} scanned pages, {rounds} interleaved rounds, OCR workers {workers}")
        build(texts, model, index, "--ocr", "never")  # warm the page cache and the model's files
        extraction, loaded, ocr_rates, scanned_ratio, scanned_loaded = [], [], [], [], []
        for number in range(1, rounds + 1):
            if number % 2:  # the order turns each round: neither variant always runs first
                with_text = build(texts, model, index, "--ocr", "never")
                without = build(texts, model, index, "--text", "never")
            else:
                without = build(texts, model, index, "--text", "never")
                with_text = build(texts, model, index, "--ocr", "never")
            assert with_text["pages"] == without["pages"] == pdfs * pages
            assert with_text["text"]["layer"] == pdfs * pages and without["text"]["layer"] == 0, (with_text, without)
            extraction.append(with_text["seconds"] / without["seconds"])
            loaded.append(with_text["loaded"] / without["loaded"])
            print(f"round {number} (load average {os.getloadavg()[0]:.1f}): text PDFs {with_text['seconds']:.2f} s with "
                  f"text, {without['seconds']:.2f} s --text never (x{extraction[-1]:.3f}; once loaded "
                  f"{with_text['loaded']:.2f} / {without['loaded']:.2f} s, x{loaded[-1]:.3f}); stage seconds with text "
                  f"[{stages(with_text)}], --text never [{stages(without)}]")
            if args.extraction_only:
                continue
            ocr_seconds, ocr_pages = ocr_alone(scans, workers)
            ocr_rates.append(ocr_pages / ocr_seconds)
            encoding = build(scans, model, index, "--ocr", "never")
            both = build(scans, model, index, "--ocr", "auto")
            assert both["text"]["ocr"] == scanned and encoding["text"]["ocr"] == 0, (both, encoding)
            scanned_ratio.append(both["seconds"] / max(ocr_seconds, encoding["seconds"]))
            scanned_loaded.append(both["loaded"] / max(ocr_seconds, encoding["loaded"]))
            print(f"  OCR alone {ocr_seconds:.2f} s ({ocr_rates[-1]:.2f} pages/s); scanned build: encoding alone "
                  f"{encoding['seconds']:.2f} s, with OCR {both['seconds']:.2f} s (x{scanned_ratio[-1]:.3f} of the slower; "
                  f"once loaded {encoding['loaded']:.2f} / {both['loaded']:.2f} s, x{scanned_loaded[-1]:.3f}); stage seconds: "
                  f"scans encoding alone [{stages(encoding)}], with OCR [{stages(both)}]")
        print(f"text extraction, whole build:  x{spread(extraction)}   (target <= x1.05)")
        print(f"text extraction, once loaded:  x{spread(loaded)}")
        if not args.extraction_only:
            print(f"OCR pages/s (300 dpi render + Tesseract, {workers} worker(s)): {spread(ocr_rates)}")
            print(f"scanned build / max(OCR alone, encoding alone): x{spread(scanned_ratio)}   (target <= x1.15)")
            print(f"  the same once the model is loaded: x{spread(scanned_loaded)}")


if __name__ == "__main__":
    main()
