"""Visual regions (issue 44): each query token's best patch, through the family's patch geometry, clustered
into boxes on the page. A test encoder whose page vectors match the query only at a planted patch: the fake
family here (fast), each real family's layout through a hook on its vectors in test_visual_regions_families.py."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from conftest import run_cli
from localgpt_index.core.sizes import PixelBudget, fitted_size
from localgpt_index.index.format.manifest import Document
from localgpt_index.models.geometry import PatchLayout, grid_boxes, square_grid, tiled_grid
from localgpt_index.query.patches import clustered, no_visual_regions
from localgpt_index.query.search import open_index
from localgpt_index.testing.fake import write_fake_checkpoint

RED = (230, 20, 20)
SIDE = 4  # the fake checkpoint's 16 page vectors: a 4 x 4 grid
# page sizes: portrait, landscape, and extreme both ways
SHAPES = {"portrait": (300, 420), "landscape": (480, 270), "tall": (90, 900), "wide": (1000, 80)}


def cell_box(row: int, col: int, side: int = SIDE) -> tuple[float, float, float, float]:
    return (col / side, row / side, (col + 1) / side, (row + 1) / side)


def planted_page(path, size: tuple[int, int], box: tuple[float, float, float, float]) -> None:
    """A white page with a red rectangle at `box` (page fractions)."""
    image = Image.new("RGB", size, "white")
    width, height = size
    ImageDraw.Draw(image).rectangle([box[0] * width, box[1] * height, box[2] * width - 1, box[3] * height - 1], fill=RED)
    image.save(path)


def covers(bbox, box, slack: float = 0.02) -> bool:
    return bbox[0] <= box[0] + slack and bbox[1] <= box[1] + slack and bbox[2] >= box[2] - slack and bbox[3] >= box[3] - slack


def area(box) -> float:
    return (box[2] - box[0]) * (box[3] - box[1])


@pytest.fixture(scope="module")
def seeing_model(tmp_path_factory):
    return write_fake_checkpoint(tmp_path_factory.mktemp("models") / "seeing", render_size=(128, 128),
                                 colours={"red": RED}, seeing_patches=True)


# (row, col) of the planted patch: off the diagonal, so a transposed grid puts it elsewhere
PLANTED = {"portrait": (0, 3), "landscape": (2, 1), "tall": (1, 3), "wide": (3, 2)}


PDF_PAGE = 2  # pages.pdf: three pages, the red patch on the second alone, at PLANTED["pages"]
PLANTED["pages"] = (1, 2)


def planted_pdf(path, box: tuple[float, float, float, float]) -> None:
    from reportlab.pdfgen import canvas

    width, height = 612, 792
    pdf = canvas.Canvas(str(path), pagesize=(width, height), invariant=1)
    for number in range(1, 4):
        pdf.drawString(72, 72, f"page {number}")
        if number == PDF_PAGE:
            pdf.setFillColorRGB(*(c / 255 for c in RED))
            pdf.rect(box[0] * width, (1 - box[3]) * height, (box[2] - box[0]) * width, (box[3] - box[1]) * height, fill=1, stroke=0)
        pdf.showPage()
    pdf.save()


@pytest.fixture(scope="module")
def planted_index(seeing_model, tmp_path_factory):
    docs = tmp_path_factory.mktemp("docs")
    for name, size in SHAPES.items():
        planted_page(docs / f"{name}.png", size, cell_box(*PLANTED[name]))
    planted_pdf(docs / "pages.pdf", cell_box(*PLANTED["pages"]))
    index = tmp_path_factory.mktemp("index")
    result = run_cli("build", str(docs), "--model", str(seeing_model), "--index-dir", str(index))
    assert result.exit_code == 0, result.stderr
    return docs, index


def test_the_top_visual_region_covers_the_planted_patch_on_every_shape(planted_index):
    docs, index = planted_index
    hits = open_index(index).search("red", k=len(PLANTED), mode="visual", regions=True)[0]
    assert {(hit.path.rsplit("/", 1)[-1], hit.page) for hit in hits} == {*((f"{n}.png", 1) for n in SHAPES), ("pages.pdf", PDF_PAGE)}
    for hit in hits:
        name = hit.path.rsplit("/", 1)[-1].rpartition(".")[0]
        box = cell_box(*PLANTED[name])
        visual = [region for region in hit.regions or () if region.source == "visual"]
        assert visual, f"{name}: no visual region"
        top = visual[0]
        assert covers(top.bbox, box) and area(top.bbox) <= 2 * area(box), (name, top.bbox, box)
        assert "red" in top.matched and top.score > 0.5
        assert [region.score for region in visual] == sorted((region.score for region in visual), reverse=True)


def test_regions_are_asked_for(planted_index):
    docs, index = planted_index
    hits = open_index(index).search("red", k=2, mode="visual")[0]
    assert all(hit.regions is None for hit in hits)
    assert no_visual_regions(open_index(index).view) is None


def test_a_family_without_a_geometry_gives_no_visual_regions(tmp_path):
    """page_tokens that make no square grid: the fake declares no geometry for it; an empty list and why."""
    model = write_fake_checkpoint(tmp_path / "odd", page_tokens=15)
    (tmp_path / "docs").mkdir()
    planted_page(tmp_path / "docs" / "a.png", (200, 200), cell_box(0, 0))
    result = run_cli("build", str(tmp_path / "docs"), "--model", str(model), "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 0, result.stderr
    searcher = open_index(tmp_path / "idx")
    hits = searcher.search("red", k=1, mode="visual", regions=True)[0]
    assert hits and [region for region in hits[0].regions or () if region.source == "visual"] == []
    assert "cannot be placed on the page" in (no_visual_regions(searcher.view) or "")


def test_adjacent_patches_merge_and_distant_ones_do_not():
    layout = PatchLayout(np.arange(16), square_grid(16))
    page = np.eye(16, dtype=np.float32)
    query = page[[1, 2, 2, 14]]  # patches 1 and 2 touch (top row); 14 is far (bottom row)
    regions, same, elsewhere, cold = clustered([layout] * 4, [page, page, np.roll(page, 4, axis=0), -page], query, ["a", "b", "c", "d"])
    assert [r.bbox for r in regions] == [(0.25, 0.0, 0.75, 0.25), (0.5, 0.75, 0.75, 1.0)]
    assert regions[0].matched == ("a", "b", "c") and regions[0].score == 0.75
    assert same == regions  # pages scored together: each its own
    # a page whose patches lie a row lower (the last row's wraps to the top, beside them): one box
    assert [(r.bbox, r.matched, r.score) for r in elsewhere] == [((0.25, 0.0, 0.75, 0.5), ("a", "b", "c", "d"), 1.0)]
    assert cold == []  # no patch scores above zero
    assert clustered([layout], [page], query, [None] * 4) == [[]]  # the prompt's and padding tokens are nobody's


def test_each_patch_s_neighbours_are_the_patches_its_box_touches_or_overlaps():
    from localgpt_index.models.geometry import grid_boxes, touching_boxes

    # ColSmol's way: six tiles of 3 x 3 patches, then the whole page again (the global view, over all of them)
    boxes = np.concatenate([grid_boxes(3, 3, (c / 3, r / 2, (c + 1) / 3, (r + 1) / 2)) for r in range(2) for c in range(3)]
                           + [grid_boxes(3, 3)])

    def touch(a, b):
        return a[0] <= b[2] + 1e-6 and b[0] <= a[2] + 1e-6 and a[1] <= b[3] + 1e-6 and b[1] <= a[3] + 1e-6

    expected = [frozenset(j for j in range(len(boxes)) if j != i and touch(boxes[i], boxes[j])) for i in range(len(boxes))]
    def listed(neighbours):
        return [frozenset(neighbours[i]) for i in range(len(neighbours))]

    assert listed(touching_boxes(boxes, chunk=7)) == expected == listed(PatchLayout(np.arange(len(boxes)), boxes).touching)
    assert expected[0] == {1, 3, 4, 54}  # its right, lower and diagonal neighbours in its tile, and the global view's cell over it
    grid = touching_boxes(grid_boxes(4, 4))
    assert list(grid[5]) == [0, 1, 2, 4, 6, 8, 9, 10] and list(grid[0]) == [1, 4, 5]  # a grid's 8 and 3 neighbours, in order
    assert len(touching_boxes(np.zeros((0, 4)))) == 0 and list(touching_boxes(grid_boxes(1, 1))[0]) == []


def test_pages_of_documents_in_several_spans():
    from localgpt_index.index.format.manifest import Span
    from localgpt_index.query.patches import pages_of

    spans = [Span(segment="seg-1", first=7, pages=2), Span(segment="seg-2", first=0, pages=3)]
    doc = Document.model_construct(path="/a.pdf", pages=5, spans=spans)
    other = Document.model_construct(path="/b.pdf", pages=1, spans=[Span(segment="seg-3", first=4, pages=1)])
    asked = [(doc, n) for n in range(1, 6)] + [(other, 1), (doc, 4)]
    read = pages_of(asked)
    assert [(span.segment, span.first, span.pages) for span in read.spans] == [
        ("seg-1", 7, 1), ("seg-1", 8, 1), ("seg-2", 0, 1), ("seg-2", 1, 1), ("seg-2", 2, 1), ("seg-3", 4, 1), ("seg-2", 1, 1)]
    assert read.pages == 7


def test_grids_are_row_by_row():
    assert grid_boxes(2, 3)[1].tolist() == [1 / 3, 0.0, 2 / 3, 0.5]
    assert grid_boxes(2, 3)[3].tolist() == [0.0, 0.5, 1 / 3, 1.0]
    tiles = tiled_grid(2, 1, 12)  # two tiles (top, bottom) of 4 tokens, then the global view
    assert tiles[5].tolist() == [0.5, 0.5, 1.0, 0.75] and tiles[8].tolist() == [0.0, 0.0, 0.5, 0.5]
    assert fitted_size(PixelBudget(64 * 28 * 28, 4 * 28 * 28, 28), 1700, 2200) == PixelBudget(
        64 * 28 * 28, 4 * 28 * 28, 28).fit(1700, 2200)
    assert fitted_size(112, 300, 600) == (56, 112) and fitted_size((448, 448), 10, 10) == (448, 448)
    assert fitted_size(2000, 300, 600) == (1000, 2000)  # a long side: scaled up too
    # no size named: shrunk to the default long side, never enlarged (as the build renders an image)
    assert fitted_size(None, 3000, 1500) == (1024, 512) and fitted_size(None, 300, 200) == (300, 200)
    assert fitted_size(64, 1, 5000) == (1, 64)  # an extreme strip keeps a pixel


@pytest.mark.slow  # Qdrant's in-process store: over a second
def test_local_and_qdrant_stores_give_the_same_regions(seeing_model, planted_index, tmp_path):
    from localgpt_index.index.open import open_store

    docs, index = planted_index
    url = f"qdrant+path://{tmp_path / 'qd'}/docs"
    result = run_cli("build", str(docs), "--model", str(seeing_model), "--store", url)
    assert result.exit_code == 0, result.stderr
    store = open_store(url)
    try:
        answers = [open_index(index).search("red", k=len(PLANTED), mode="visual", regions=True)[0],
                   open_index(store=store).search("red", k=len(PLANTED), mode="visual", regions=True)[0]]
    finally:
        store.close()
    local, qdrant = ({(hit.path, hit.page): hit.regions for hit in hits} for hits in answers)
    assert local == qdrant and all(regions for regions in local.values())
