"""Visual regions of every real family (issue 44), on tiny self-made checkpoints: the family's real
processor and loading path, with a hook on its vectors in place of the network. The hook reads what
the processor gave the network (its image tokens, its pixels, the real pixel shuffle of the Idefics3
connector) and makes the image tokens that see the planted red patch match the query; the top visual
region must lie in that patch on pages of every shape (a transposed or shifted grid puts it elsewhere),
and the image-token rows the query side places on the page are those the build's processor made."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image, ImageDraw

from conftest import run_cli
from localgpt_index.models.runner import NetRunner

pytestmark = pytest.mark.slow  # real checkpoints, colpali-engine and torch: the real-component tier

RED = (230, 20, 20)
PLANTED = (0.5, 0.0, 1.0, 0.5)  # the top right quadrant: a transpose puts it bottom left
SHAPES = {"portrait": (300, 420), "landscape": (480, 270), "tall": (90, 900), "wide": (1000, 80)}
FAMILIES = ["colpali", "colqwen2", "colqwen2_5", "colqwen3", "colqwen3_5", "colidefics3", "colmodernvbert", "colgemma3"]
# and the real grids: ColPali's 32 x 32 at 448 px, ColQwen2.5's budget of 768 merged patches
CHECKPOINTS = [(family, "tiny") for family in FAMILIES] + [("colpali", "bench"), ("colqwen2_5", "bench")]
PATCH = {"colqwen3": 16, "colqwen3_5": 16}  # pixels a side of a vision patch (14 elsewhere)


def _unit(seed: int, rows: int, dim: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _reddish(channels) -> object:
    """Red where the mean red channel stands well above the green one (normalised pixels, mean and std 0.5)."""
    return (channels[0] - channels[1]) > 1.0


def _red_tokens(net, batch: dict, number: int, patch: int):
    """Which image tokens of input `number` see mostly red, in their order in the prompt."""
    pixels = batch["pixel_values"]
    if "image_grid_thw" in batch:  # Qwen: a row per patch, merge x merge consecutive rows one token (the merger)
        rows = pixels[number].float()
        red = _reddish(rows.reshape(rows.shape[0], 3, -1).mean(-1).T)
        return red.reshape(-1, 4).float().mean(1) >= 0.75
    if pixels.dim() == 5:  # Idefics3: tiles, each a square of patches, pixel-shuffled by the connector itself
        tiles = pixels[number].float()
        count, _, side, _ = tiles.shape
        grid = side // patch
        cells = tiles.reshape(count, 3, grid, patch, grid, patch).mean((3, 5))
        red = _reddish(cells.permute(1, 0, 2, 3)).float().reshape(count, grid * grid, 1)
        connector = next(module for module in net.modules() if hasattr(module, "pixel_shuffle"))
        factor = getattr(connector, "scale_factor", None) or connector.pixel_shuffle_factor
        return (connector.pixel_shuffle(red, factor).mean(-1) >= 0.75).reshape(-1)
    image = pixels[number].float()  # one square image, its patches row by row (then pooled: Gemma3)
    grid = image.shape[-1] // patch
    return _reddish(image.reshape(3, grid, patch, grid, patch).mean((2, 4)))


def _hook(recorded: list, patch: int):
    """NetRunner.__call__ in place of the network: noise, but the red-seeing image tokens hold RED (with a
    little noise of their own), and every query token is RED."""

    def call(self: NetRunner, batch: dict) -> list[np.ndarray]:
        config = self.net.config
        image_token = getattr(config, "image_token_id", None)
        image_token = getattr(config, "image_token_index", None) if image_token is None else image_token
        dim = int(getattr(self.net, "dim", 128))
        red = _unit(7, 1, dim)[0]
        out = []
        for number in range(batch["input_ids"].shape[0]):
            ids = batch["input_ids"][number][batch["attention_mask"][number].bool()].numpy()
            vectors = _unit(len(recorded) + 1, len(ids), dim)
            if "pixel_values" not in batch:
                vectors[:] = red
            else:
                rows = np.flatnonzero(ids == image_token)
                seen = _red_tokens(self.net, batch, number, patch)
                if seen.dim() == 2:  # a square grid of patches, pooled to the image tokens' grid
                    side = math.isqrt(len(rows))
                    pool = seen.shape[0] // side
                    seen = seen.float().reshape(side, pool, side, pool).mean((1, 3)).reshape(-1) >= 0.75
                seen = seen.numpy()
                assert len(seen) == len(rows)
                vectors[rows[seen]] = red + 0.05 * _unit(len(recorded) + 2, int(seen.sum()), dim)
                grid = batch.get("image_grid_thw")
                recorded.append((tuple(rows), None if grid is None else tuple(int(n) // 2 for n in grid[number][1:])))
            out.append(vectors)
        self.calls += 1
        return out

    return call


def _planted_page(path, size: tuple[int, int]) -> None:
    image = Image.new("RGB", size, "white")
    width, height = size
    box = PLANTED
    ImageDraw.Draw(image).rectangle([box[0] * width, box[1] * height, box[2] * width - 1, box[3] * height - 1], fill=RED)
    image.save(path)


@pytest.fixture(scope="module")
def planted_docs(tmp_path_factory):
    from reportlab.pdfgen import canvas

    docs = tmp_path_factory.mktemp("docs")
    for name, size in SHAPES.items():
        _planted_page(docs / f"{name}.png", size)
    pdf = canvas.Canvas(str(docs / "slide.pdf"), pagesize=(842, 595), invariant=1)  # landscape A4, through pdfinfo
    pdf.setFillColorRGB(*(c / 255 for c in RED))
    pdf.rect(421, 297.5, 421, 297.5, fill=1, stroke=0)  # PDF y runs upwards: the top right quadrant
    pdf.showPage()
    pdf.save()
    return docs


def _checkpoint(family: str, geometry: str, folder):
    from localgpt_index.testing.checkpoints import make_checkpoint, make_family_checkpoint

    if family == "colpali":
        return make_checkpoint(folder / f"{geometry}-colpali", geometry)
    return make_family_checkpoint(folder / family, family, geometry=geometry)


def _centre_in(bbox, box, slack: float = 0.01) -> bool:
    x, y = (bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2
    return box[0] - slack <= x <= box[2] + slack and box[1] - slack <= y <= box[3] + slack


@pytest.mark.parametrize(("family", "geometry"), CHECKPOINTS)
def test_the_top_visual_region_lies_in_the_planted_patch(family, geometry, planted_docs, tmp_path, monkeypatch):
    from localgpt_index.core.sizes import fitted_size
    from localgpt_index.models.geometry import ProcessorPatches
    from localgpt_index.query.patches import page_pixels, patch_geometry
    from localgpt_index.query.search import open_index

    recorded: list = []
    monkeypatch.setattr(NetRunner, "__call__", _hook(recorded, PATCH.get(family, 14)))
    model = _checkpoint(family, geometry, tmp_path)
    index = tmp_path / "index"
    result = run_cli("build", str(planted_docs), "--model", str(model), "--index-dir", str(index), "--text", "never",
                     "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    searcher = open_index(index)
    hits = searcher.search("red red red", k=len(SHAPES) + 1, mode="visual", regions=True)[0]
    assert len(hits) == len(SHAPES) + 1
    patches = patch_geometry(searcher.view)
    assert isinstance(patches, ProcessorPatches)
    for hit in hits:
        visual = [region for region in hit.regions or () if region.source == "visual"]
        assert visual, f"{family} {hit.path}: no visual region"
        top = visual[0]
        assert _centre_in(top.bbox, PLANTED), (family, hit.path, top)
        assert top.matched and top.score > 0.5
        # the rows the query side calls image tokens are those the build's processor made for this page
        doc = searcher.view.document(hit.path)
        size = page_pixels(searcher.view, doc, hit.page) if patches.needs_page_size else None
        layout = patches.layout(len(searcher.view.page_vectors(doc)[hit.page - 1]), size)
        assert layout is not None
        grid = patches.probe(fitted_size(patches.render_size, *size) if size else patches.render_size).grid
        assert (tuple(layout.rows), grid if family.startswith("colqwen") else None) in recorded, (family, hit.path)
