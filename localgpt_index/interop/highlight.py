"""Regions drawn on a page: text regions outlined, visual regions as a translucent heat map.

One drawing for every front end (`query --export-pages --highlight`, serve's `/pages?highlight=`, the
MCP `get_page` tool), and one way of naming where on the page a region is (`top right`). PIL is
imported by the drawing only: the command line names regions without it (a warm query stays light)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.types import Region

if TYPE_CHECKING:
    from PIL.Image import Image

TEXT_OUTLINE = (230, 0, 126)  # text regions: an opaque outline (magenta: rare on a page)
HEAT = (255, 72, 0)  # visual regions: this colour laid over the page, more opaque where the score is higher
MAX_HEAT_ALPHA = 120  # of 255: the best visual region; the page stays readable under it
MIN_HEAT_ALPHA = 40  # the weakest one drawn still shows


def draw_regions(image: Image, regions: Iterable[Region]) -> Image:
    """`image` (a page) with `regions` drawn on a copy: the visual ones as a heat map first, then the text
    ones outlined on top (a line's outline stays visible where a heat patch covers it)."""
    from PIL import ImageDraw

    page = image.convert("RGB")
    found = list(regions)
    visual = [region for region in found if region.source == "visual"]
    if visual:
        page = _heat(page, visual)
    draw = ImageDraw.Draw(page)
    width = outline_width(page.size)
    for region in (region for region in found if region.source == "text"):
        draw.rectangle(pixel_box(region.bbox, page.size, pad=width), outline=TEXT_OUTLINE, width=width)
    return page


def outline_width(size: tuple[int, int]) -> int:
    """The outline's thickness in pixels: about 0.3 % of the page's longer side, at least 2."""
    return max(2, round(max(size) * 0.003))


def pixel_box(bbox: Sequence[float], size: tuple[int, int], pad: int = 0) -> tuple[int, int, int, int]:
    """A box in page fractions as pixels of an image of `size`, grown by `pad` on each side and kept on the image."""
    width, height = size
    x0, y0, x1, y1 = bbox
    return (max(0, round(x0 * width) - pad), max(0, round(y0 * height) - pad),
            min(width - 1, round(x1 * width) + pad), min(height - 1, round(y1 * height) + pad))


def _heat(page: Image, visual: list[Region]) -> Image:
    """The visual regions as one translucent layer: each box's opacity follows its score (where boxes
    overlap, the stronger one's)."""
    from PIL import Image as PILImage, ImageDraw

    top = max(region.score for region in visual)
    alpha = PILImage.new("L", page.size, 0)
    draw = ImageDraw.Draw(alpha)
    for region in sorted(visual, key=lambda region: region.score):  # the strongest drawn last, on top
        share = region.score / top if top > 0 else 1.0
        draw.rectangle(pixel_box(region.bbox, page.size), fill=round(MIN_HEAT_ALPHA + (MAX_HEAT_ALPHA - MIN_HEAT_ALPHA) * share))
    return PILImage.composite(PILImage.new("RGB", page.size, HEAT), page, alpha)


def highlighted_png(png: bytes, regions: Iterable[Region]) -> bytes:
    """A page's PNG with `regions` drawn on it (draw_regions), as PNG."""
    from PIL import Image as PILImage

    from .pages import png_bytes

    with PILImage.open(io.BytesIO(png)) as image:
        return png_bytes(draw_regions(image, regions))


def region_of(document: dict[str, Any]) -> Region:
    """A Region from its JSON form (Region.to_dict; interop.results.HitRegion)."""
    source = document["source"]
    x0, y0, x1, y1 = (float(value) for value in document["bbox"])
    matched = document.get("terms" if source == "text" else "tokens") or ()
    return Region((x0, y0, x1, y1), source, float(document["score"]), tuple(matched), document.get("text"))


def where(bbox: Sequence[float]) -> str:
    """Where on the page a box is, in words, by its centre: top, middle or bottom; left, centre or right
    (`top right`; the very middle: `centre`)."""
    x = (bbox[0] + bbox[2]) / 2
    y = (bbox[1] + bbox[3]) / 2
    row = "top" if y < 1 / 3 else "middle" if y < 2 / 3 else "bottom"
    column = "left" if x < 1 / 3 else "centre" if x < 2 / 3 else "right"
    return "centre" if (row, column) == ("middle", "centre") else f"{row} {column}"


def best_region_line(hit: dict[str, Any]) -> str | None:
    """A hit's best region in words, for people: the best text region (`p.3, top right: "net revenue grew
    12 %"`), else the best visual one (`p.3, top right (visual)`); None where the hit has none."""
    regions = hit.get("regions") or []
    text = next((region for region in regions if region["source"] == "text"), None)
    if text is not None:
        words = text.get("text") or " ".join(text.get("terms") or ())
        return f'p.{hit["page"]}, {where(text["bbox"])}: "{words}"'
    if regions:
        return f'p.{hit["page"]}, {where(regions[0]["bbox"])} (visual)'
    return None
