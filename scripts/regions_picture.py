#!/usr/bin/env python3
"""The picture of docs/regions.md ("Where on the page"): a page of the bundled examples with a query's regions drawn.

Builds an index of examples/docs in a temporary folder (with --model: the demo's vidore/colpali-v1.3 by
default, a tiny test checkpoint with --model tiny: its visual regions mean nothing, use --mode text with it),
asks the query with regions, and draws the top hit's regions on its page as `query --export-pages
--highlight` draws them, scaled to --width pixels:

    .venv/bin/python scripts/regions_picture.py                        # docs/img/where-on-the-page.png
    .venv/bin/python scripts/regions_picture.py --model tiny --mode text
    .venv/bin/python scripts/regions_picture.py --query "Q3 revenue" --out /tmp/page.png

A hit without regions writes nothing and exits 1: the docs keep no picture of an undrawn page.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERY = "What was the revenue in the third quarter?"  # the README's demo question
OUT = ROOT / "docs" / "img" / "where-on-the-page.png"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vidore/colpali-v1.3", help="the model to build with ('tiny': a random-weight test checkpoint)")
    parser.add_argument("--mode", choices=("hybrid", "text", "visual"), default="hybrid")
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--width", type=int, default=720, help="the picture's width in pixels")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lgpt-regions-") as work:
        model = args.model
        if model == "tiny":
            model = str(Path(work) / "tiny")
            subprocess.run([sys.executable, str(ROOT / "scripts" / "make_checkpoint.py"), "tiny", model], check=True,
                           stdout=subprocess.DEVNULL)
        built = subprocess.run([sys.executable, "-m", "localgpt_index", "build", str(ROOT / "examples" / "docs"),
                                "--index-dir", str(Path(work) / "idx"), "--model", model, "-q"])
        if built.returncode not in (0, 3):  # 3: some documents failed (no LibreOffice): the PDFs are indexed
            return built.returncode
        return draw(Path(work) / "idx", args)


def draw(index_dir: Path, args: argparse.Namespace) -> int:
    from localgpt_index import open_index, page_image
    from localgpt_index.interop.highlight import draw_regions

    index = open_index(index_dir)
    [hits] = index.search(args.query, k=1, mode=args.mode, regions=True)
    if not hits or not hits[0].regions:
        print(f"no regions for {args.query!r} ({'no hit' if not hits else hits[0].path}): no picture written", file=sys.stderr)
        return 1
    hit = hits[0]
    picture = draw_regions(page_image(index, hit, dpi=150), hit.regions)
    picture = picture.resize((args.width, round(picture.height * args.width / picture.width)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    picture.save(args.out, optimize=True)
    for region in hit.regions:
        words = region.text or " ".join(region.matched)
        print(f"{region.source:6} {[round(value, 3) for value in region.bbox]} {region.score:.3f} {words}")
    print(f"{args.out}: {Path(hit.path).name} page {hit.page}, {len(hit.regions)} region(s) drawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
