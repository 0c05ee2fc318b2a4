"""How large a page is rendered for a model: fixed sizes, long sides and pixel budgets (pure arithmetic)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class PixelBudget:
    """Dynamic resolution by area (the Qwen-VL processors): a page becomes a grid of cells of
    `cell` pixels, with at most `max_pixels` (at least `min_pixels`) in all, proportions kept."""

    max_pixels: int
    min_pixels: int
    cell: int

    def fit(self, width: float, height: float) -> tuple[int, int]:
        """(width, height) the processor resizes a width x height picture to (transformers'
        qwen2_vl smart_resize); a page rendered at this size is not resized again."""
        f = self.cell
        h_bar, w_bar = round(height / f) * f, round(width / f) * f
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h_bar, w_bar = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar, w_bar = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
        return w_bar, h_bar


# A page size: (width, height) for a model with a fixed input size; the long side in pixels
# for a dynamic-resolution one that scales the long side; a PixelBudget for one that sizes
# its grid by area (then every page gets its own size); None: DEFAULT_LONG_SIDE.
RenderSize = tuple[int, int] | int | PixelBudget | None

DEFAULT_LONG_SIDE = 1024  # a page's long side where the processor names no size


def fitted_size(size: RenderSize, width: float, height: float) -> tuple[int, int]:
    """(width, height) a picture of width x height pixels is given to a model of render size `size`: a pixel
    budget's fit, a fixed size, the long side scaled to `size` (up or down); None: shrunk to DEFAULT_LONG_SIDE
    where it is longer (a PDF page is rendered at DEFAULT_LONG_SIDE whatever its size: ingest/render.py)."""
    if isinstance(size, PixelBudget):
        return size.fit(width, height)
    if isinstance(size, tuple):
        return size
    scale = (size or DEFAULT_LONG_SIDE) / max(width, height)
    if size is None and scale >= 1:
        return round(width), round(height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def render_size_for(size: dict, patch_size: int | None = None, merge_size: int | None = None) -> RenderSize:
    """What pages are rendered at for an image processor with this `size` (and patch and merge
    sizes): (width, height) for a fixed input size; a PixelBudget where it sizes a grid of tokens
    by area; the longest edge where it scales that; None where it says nothing."""
    size = {key: value for key, value in size.items() if value is not None}
    if "height" in size and "width" in size:
        return (int(size["width"]), int(size["height"]))
    cell = grid_cell(size, patch_size, merge_size)
    if cell is not None:
        return PixelBudget(int(size["longest_edge"]), int(size["shortest_edge"]), cell)
    if "longest_edge" in size:
        return int(size["longest_edge"])
    return None


def grid_cell(size: dict, patch_size: int | None, merge_size: int | None) -> int | None:
    """Pixels a side of one image token, for a processor that sizes its grid of tokens by a pixel
    budget (its size's "longest_edge" then counts pixels)."""
    if patch_size is None or merge_size is None or size.get("shortest_edge") is None or size.get("longest_edge") is None:
        return None
    return int(patch_size) * int(merge_size)
