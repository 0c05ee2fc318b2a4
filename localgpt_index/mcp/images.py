"""Page images for MCP answers: rendered as `serve` renders them, then scaled to fit the answer's caps.

serve.images.PageImages renders them (render slots and a cache); each PNG is scaled down until it
fits its share of the answer's caps."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image

from ..core.errors import LgptError
from ..core.types import Region, SearchHit
from ..interop.highlight import highlighted_png
from ..interop.pages import page_or_error, png_bytes
from ..ingest.processes import Stopped
from ..serve.images import STOPPING, PageImages
from .schemas import MIN_IMAGE_SIDE, RENDER_DPI, ImageCaps


@dataclass
class FittedImage:
    png: bytes
    width: int
    height: int
    scaled: bool


def fit_png(png: bytes, limit: int) -> FittedImage:
    """`png`, or the same picture scaled down until its PNG takes at most `limit` bytes.
    A picture that would have to shrink below MIN_IMAGE_SIDE is refused (LgptError)."""
    with Image.open(io.BytesIO(png)) as image:
        image.load()
        width, height = image.size
        if len(png) <= limit:
            return FittedImage(png, width, height, False)
        picture = image.convert("RGB")
    data, size = png, (width, height)
    for _ in range(8):  # PNG bytes follow the pixel count closely: two or three rounds mostly
        scale = math.sqrt(limit / len(data)) * 0.92
        size = (max(1, int(size[0] * scale)), max(1, int(size[1] * scale)))
        if min(size) < MIN_IMAGE_SIDE:
            break
        data = png_bytes(picture.resize(size, Image.Resampling.LANCZOS))
        if len(data) <= limit:
            return FittedImage(data, size[0], size[1], True)
    raise LgptError(f"the page image does not fit in {limit:,} bytes, even scaled down to {MIN_IMAGE_SIDE} pixels.")


class McpPageImages:
    """The images of one answer: each page rendered once (serve's cache), each fitted to its share."""

    def __init__(self, caps: ImageCaps, pages: PageImages | None = None) -> None:
        self.caps = caps
        self.pages = pages or PageImages()

    def fitted(self, index, hits: list[SearchHit], regions: Sequence[Region] | None = None) -> list[FittedImage | str]:
        """An image for each hit, or why it has none; together within the answer's cap; `regions` (get_page's
        highlight, one page): drawn on it before it is fitted."""
        share = self.caps.share(len(hits))
        return [self._one(index, hit, share, regions) for hit in hits]

    def _one(self, index, hit: SearchHit, limit: int, regions: Sequence[Region] | None) -> FittedImage | str:
        try:
            png = page_or_error(lambda: self.pages.png(index, hit, RENDER_DPI)[0])
        except Stopped:  # the server is stopping (SIGTERM, Ctrl-C): its renders were ended
            return STOPPING
        if isinstance(png, str):
            return png
        if regions is not None:
            png = highlighted_png(png, regions)
        try:
            return fit_png(png, limit)
        except LgptError as exc:
            return exc.message
