"""Where on the page, end to end (issue 44): a text-layer PDF with a known sentence drawn at a known place,
its word positions read at build (pdftotext -bbox-layout), `query --mode text --regions` and `--export-pages
--highlight` through the command line; the sentence's box checked in the JSON and in the picture's pixels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import run_process
from localgpt_index.interop.highlight import TEXT_OUTLINE

PAGE = (612, 792)  # US letter, in points
SENTENCE = "Net revenue grew twelve percent in the third quarter"
SIZE = 14  # points
AT = (270, 690)  # where its baseline starts, from the bottom left (PDF's origin)


def _pdf(path: Path) -> tuple[float, float, float, float]:
    """A two-page text-layer PDF, SENTENCE alone in the top right of page 2; its box in page fractions from the top left."""
    from reportlab.pdfbase.pdfmetrics import stringWidth
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path), pagesize=PAGE, invariant=1)
    c.setFont("Helvetica", 12)
    for line in range(12):
        c.drawString(72, 700 - 20 * line, f"Page one, line {line + 1}: hiring plan and the office move.")
    c.showPage()
    c.setFont("Helvetica", 12)
    for line in range(10):  # below it, well apart
        c.drawString(72, 420 - 20 * line, f"Line {line + 1}: costs and the hiring plan, in figures.")
    c.setFont("Helvetica", SIZE)
    c.drawString(*AT, SENTENCE)
    c.showPage()
    c.save()
    width, height = PAGE
    x0, baseline = AT
    x1 = x0 + stringWidth(SENTENCE, "Helvetica", SIZE)
    return x0 / width, (height - baseline - 0.75 * SIZE) / height, x1 / width, (height - baseline + 0.25 * SIZE) / height


def _iou(a, b) -> float:
    inner = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    area = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inner
    return inner / area if area > 0 else 0.0


@pytest.mark.slow  # end to end: a build and the command line in processes of their own, with real word positions
def test_the_sentences_box_is_the_top_text_region_and_is_drawn_where_it_is(fake_model, tmp_path):
    """Passes once the text regions are produced (the word positions stored with the page text, issue 44)."""
    box = _pdf(tmp_path / "docs" / "report.pdf")
    index = str(tmp_path / "idx")
    built = run_process("build", str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", index)
    assert built.returncode == 0, built.stderr
    asked = ["query", "net revenue grew twelve percent", "--mode", "text", "--regions", "-k", "1", "--index-dir", index]
    answered = run_process(*asked, "--json")
    assert answered.returncode == 0, answered.stderr
    [hit] = json.loads(answered.stdout)["queries"][0]["results"]
    assert hit["page"] == 2 and hit["regions"], hit
    top = hit["regions"][0]
    assert top["source"] == "text" and _iou(top["bbox"], box) >= 0.5, (top, box)
    assert "revenue" in top["text"].lower()
    line = run_process(*asked, "--format", "lines")
    named = line.stdout.rstrip("\n").split("\t")[-1]
    assert named.startswith("at: p.2, top ") and '"Net revenue grew' in named, line.stdout  # (right: the line; centre: its words)

    exported = run_process(*asked, "--export-pages", str(tmp_path / "pages"), "--highlight", "--dpi", "100")
    assert exported.returncode == 0, exported.stderr
    [entry] = json.loads((tmp_path / "pages" / "manifest.json").read_text())["queries"][0]["results"]
    with Image.open(tmp_path / "pages" / entry["image"]) as image:
        page = image.convert("RGB")
    width, height = page.size
    near = (int((box[0] - 0.03) * width), int((box[1] - 0.03) * height), int((box[2] + 0.03) * width), int((box[3] + 0.03) * height))
    ys, xs = np.nonzero(np.all(np.asarray(page) == TEXT_OUTLINE, axis=2))
    assert len(xs) > 2 * (near[2] - near[0])  # an outline around the sentence: its two long sides at least
    assert near[0] <= xs.min() and xs.max() <= near[2] and near[1] <= ys.min() and ys.max() <= near[3]  # and nowhere else


@pytest.mark.slow  # pooling runs on torch
def test_an_index_whose_hits_cannot_have_visual_regions_says_why(fake_model, tmp_path):
    """Pooled vectors are no patches of the page: `query --regions` says so (and a plain index says nothing)."""
    from conftest import run_cli

    _pdf(tmp_path / "docs" / "report.pdf")
    said = {}
    for name, options in (("pooled", ["--pool-factor", "2"]), ("plain", [])):
        index = str(tmp_path / name)
        built = run_cli("build", str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", index, *options)
        assert built.exit_code == 0, built.stderr
        done = run_cli("query", "net revenue", "--mode", "visual", "--regions", "--index-dir", index)
        assert done.exit_code == 0, done.stderr
        said[name] = done.stderr
    assert "hint: no visual regions: this index's hits have none, its pages' vectors are pooled (--pool-factor)" in said["pooled"]
    assert "no visual regions" not in said["plain"]
