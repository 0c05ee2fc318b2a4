#!/usr/bin/env python3
"""OCR's CPU a page and its character error rate, before and after pages were measured (issue 41).

On the generated scan set (localgpt_index/testing/scanset.py: 9 PDF pages of print at 8-14 pt in one
or two columns, a table, a rotated and a noisier page, a blank and a picture-only page, and 2 PNG
scans, with their true text), each variant reads every page as the build does (ingest/ocrbatch.py:
a PDF's pages in one Tesseract process; ingest/ocr.py: an image frame in one of its own):

- today: every PDF page rendered at 300 dpi and read (psm 3) by the `tesseract` command, an image
  frame at its own size;
- measured: the default (render at 150 dpi, the text's size measured, the page reduced or rendered
  finer so its lines are textsize.LINE_PX high; a page with no line of print not read), read by
  Tesseract's library in a process of ours (ingest/tesslib.py) where tesserocr is installed;
- with --steps also each step alone: fixed-150 (every page at 150 dpi by the command: the resolution
  alone) and measured-cli (the measured pages read by the command: all but the library).

CPU is user + system seconds of this process and its children (resource.getrusage: pdftoppm and
Tesseract included, the in-process measuring too). CER: Levenshtein distance between the text and the
true text, whitespace collapsed, over the true text's length (all pages together; what is read on a
page without text counts as errors). Recall: the share of the true words found on their page.

    python scripts/bench_ocr.py                 # today and measured, 2 rounds
    python scripts/bench_ocr.py --steps --rounds 3
    python scripts/bench_ocr.py --line-px 12,16     # other target line heights (textsize.LINE_PX) beside the default
"""

from __future__ import annotations

import argparse
import collections
import re
import resource
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rapidfuzz.distance import Levenshtein  # noqa: E402

from localgpt_index.ingest.ocr import DEFAULT_OCR_LANG, OCR_MEMORY_MIB, OcrFailed, Tesseract  # noqa: E402
from localgpt_index.ingest import textsize  # noqa: E402
from localgpt_index.ingest.ocrbatch import ocr_pdf_pages  # noqa: E402
from localgpt_index.ingest.text import PageText  # noqa: E402
from localgpt_index.testing.scanset import ScanSet, make_scan_set  # noqa: E402

Reader = Callable[[ScanSet], dict[tuple[str, int], str]]
DEFAULT_LINE_PX = textsize.LINE_PX


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def process_reader(tesseract: Tesseract, fixed_dpi: int | None, measured: bool, line_px: float | None = None) -> Reader:
    def read(scans: ScanSet) -> dict[tuple[str, int], str]:
        textsize.LINE_PX = line_px or DEFAULT_LINE_PX  # the variant's target line height (read where a page is measured)
        texts: dict[tuple[str, int], str] = {}
        for name, truth in scans.truth.items():
            path = scans.folder / name
            if name.endswith(".pdf"):
                pages = [(path, number) for number in range(1, len(truth) + 1)]

                def done(index: int, result: PageText | OcrFailed, name: str = name) -> None:
                    texts[(name, index + 1)] = result.text if isinstance(result, PageText) else f"<failed: {result.reason}>"

                ocr_pdf_pages(tesseract, pages, DEFAULT_OCR_LANG, 120.0, OCR_MEMORY_MIB, done, fixed_dpi=fixed_dpi)
            else:
                texts[(name, 1)] = tesseract.read_image_frame(path, 1, DEFAULT_OCR_LANG, 120.0, measured=measured).text
        return texts
    return read


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def score(scans: ScanSet, texts: dict[tuple[str, int], str]) -> tuple[float, float, int]:
    """CER over all pages, word recall, and the page count."""
    errors = length = found = wanted = pages = 0
    for name, truth in scans.truth.items():
        for number, true in enumerate(truth, 1):
            read, true = " ".join(texts.get((name, number), "").split()), " ".join(true.split())
            errors += Levenshtein.distance(true, read)
            length += len(true)
            have = collections.Counter(words(read))
            for word, count in collections.Counter(words(true)).items():
                wanted += count
                found += min(count, have[word])
            pages += 1
    return errors / max(1, length), found / max(1, wanted), pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", action="store_true", help="also fixed-150 and measured-cli")
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--line-px", default="", help="also measured with these target line heights (comma-separated: 12,16)")
    args = parser.parse_args()
    tesseract = Tesseract.find()
    if tesseract is None:
        sys.exit("Tesseract is not installed")
    command = Tesseract(tesseract.path, tesseract.languages)  # no library: the `tesseract` command, as before
    variants: dict[str, Reader] = {"today": process_reader(command, 300, False), "measured": process_reader(tesseract, None, True)}
    if args.steps:
        variants["fixed-150"] = process_reader(command, 150, False)
        variants["measured-cli"] = process_reader(command, None, True)
    for value in filter(None, args.line_px.split(",")):
        variants[f"measured@{value}"] = process_reader(tesseract, None, True, float(value))
    print(f"measured reads with {'the library (tesserocr)' if tesseract.tessdata else 'the tesseract command'}")
    with tempfile.TemporaryDirectory(prefix="bench-ocr-") as folder:
        scans = make_scan_set(Path(folder), args.seed)
        cpu: dict[str, list[float]] = collections.defaultdict(list)
        quality: dict[str, tuple[float, float, int]] = {}
        for _ in range(args.rounds):  # interleaved: the machine's speed drifts
            for name, read in variants.items():
                before = cpu_seconds()
                texts = read(scans)
                quality[name] = score(scans, texts)
                cpu[name].append((cpu_seconds() - before) / quality[name][2])
    base = min(cpu["today"])
    print(f"{'variant':<12} {'CPU s/page (best; rounds)':<34} {'x today':>8} {'CER %':>7} {'recall %':>9}")
    for name in variants:
        rounds = ", ".join(f"{value:.2f}" for value in cpu[name])
        cer, recall, pages = quality[name]
        print(f"{name:<12} {min(cpu[name]):.3f} ({rounds}){'':<{max(0, 24 - len(rounds))}} {min(cpu[name]) / base:>8.2f} "
              f"{100 * cer:>7.2f} {100 * recall:>9.2f}")
    print(f"{pages} pages a round; CPU: this process and its children (pdftoppm, Tesseract)")


if __name__ == "__main__":
    main()
