"""Where each of a page's vectors lies on the page: the patch geometry every family declares.

A page's stored vectors are the model's output for every token of its prompt; some are image tokens,
each seeing a patch of the page. A family's geometry (Family.patches) says which rows those are and
where each patch lies, as boxes in page fractions (x0, y0, x1, y1 from the top left):

- ColPali, ColGemma3: a square grid over the page resized to a square (PaliGemma: 32 x 32 at 448 px;
  Gemma3: 64 x 64 patches pooled to 16 x 16), the image tokens one block of the prompt;
- ColQwen2/2.5/3/3.5: a grid of 2 x 2-merged patches over the page as smart_resize sized it, row by
  row; its shape depends on the page's rendered size, which the page's source gives at query time (its
  points, or an image's pixels: the size the build rendered it at, re-derived as the build does);
- ColIdefics3 (ColSmol), ColModernVBert: the page split into tiles, row by row, each a square grid of
  pixel-shuffled patches, then the whole page again (the global view).

The real families' rows and shapes come from their own processor (ProcessorPatches): a blank page of
the rendered size goes through process_images once per size, and its image tokens (the model config's
image token) are the rows, its grid (Qwen's image_grid_thw; Idefics3's row and column tokens) the shape.
Pure arithmetic at import; the processor (torch) loads on the first page asked.
"""

from __future__ import annotations

import json
import math
import re
import threading
from array import array
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from ..core.sizes import PixelBudget, RenderSize, fitted_size

Box = tuple[float, float, float, float]
WHOLE: Box = (0.0, 0.0, 1.0, 1.0)


@dataclass(frozen=True)
class PatchLayout:
    """The image tokens of one page: their rows in its vectors and each one's box in page fractions."""

    rows: np.ndarray  # (n,) int: rows of the page's vectors
    boxes: np.ndarray  # (n, 4) float: x0, y0, x1, y1, from the page's top left

    @cached_property
    def touching(self) -> Neighbours:
        """Each patch's others that touch or overlap it (a grid's neighbours; a tile's and the global view's
        patches over the same place): worked out once a layout, for the patches a query's hits cluster."""
        return touching_boxes(self.boxes)


@dataclass(frozen=True)
class Neighbours:
    """Each patch's neighbours, compactly (4 bytes a pair: a 1,024-patch grid's take 36 KB, where a frozenset a
    patch took 0.9 MB, and a server keeps a layout for each page size met): patch i's are
    others[starts[i]: starts[i + 1]], in order."""

    starts: array  # ('i', patches + 1)
    others: array  # ('i', pairs)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, patch: int) -> array:
        return self.others[self.starts[patch]: self.starts[patch + 1]]


def touching_boxes(boxes: np.ndarray, near: float = 1e-6, chunk: int = 512) -> Neighbours:
    """For each box, the others it touches or overlaps (within `near`): all pairs, `chunk` boxes against all at a time."""
    rows, others = [], []
    x0, y0, x1, y1 = (boxes[:, side] for side in range(4))
    for start in range(0, len(boxes), chunk):
        part = boxes[start: start + chunk]
        touch = (part[:, 0, None] <= x1 + near) & (x0 <= part[:, 2, None] + near) & \
            (part[:, 1, None] <= y1 + near) & (y0 <= part[:, 3, None] + near)
        touch[np.arange(len(part)), np.arange(start, start + len(part))] = False
        row, other = np.nonzero(touch)
        rows.append(row + start)
        others.append(other)
    row, other = (np.concatenate(found) if found else np.zeros(0, np.int64) for found in (rows, others))
    starts = np.searchsorted(row, np.arange(len(boxes) + 1))
    return Neighbours(array("i", starts.astype(np.int32).tobytes()), array("i", other.astype(np.int32).tobytes()))


class PatchGeometry(Protocol):
    """A family's patch geometry for one checkpoint and render size (Family.patches makes it)."""

    needs_page_size: bool  # its layout depends on the page's size (layout's page_size)

    def layout(self, count: int, page_size: tuple[int, int] | None) -> PatchLayout | None:
        """The image tokens of a page of `count` vectors whose source is `page_size` pixels (w, h) as
        rendered for the model before its own resizing; None where the vectors do not have that layout.
        One layout object is one count of vectors (query/patches.clustered stacks the pages of one)."""
        ...

    def query_tokens(self, text: str, rows: int) -> list[str | None]:
        """Each of a query's `rows` vectors' token, None for the prompt's own and padding tokens."""
        ...


def grid_boxes(rows: int, cols: int, within: Box = WHOLE) -> np.ndarray:
    """The cells of a rows x cols grid over `within`, row by row: (rows * cols, 4)."""
    x0, y0, x1, y1 = within
    ys, xs = np.divmod(np.arange(rows * cols), cols)
    width, height = (x1 - x0) / cols, (y1 - y0) / rows
    return np.stack([x0 + xs * width, y0 + ys * height, x0 + (xs + 1) * width, y0 + (ys + 1) * height], axis=1)


def square_grid(tokens: int) -> np.ndarray:
    """A square grid of `tokens` cells over the whole page (ColPali, ColGemma3; a fake's)."""
    side = math.isqrt(tokens)
    if side * side != tokens or side == 0:
        raise ValueError(f"{tokens} image tokens are not a square grid")
    return grid_boxes(side, side)


def tiled_grid(tile_rows: int, tile_cols: int, tokens: int) -> np.ndarray:
    """Idefics3's tiles, row by row, then the global view (the whole page), each a square grid of its
    tokens' share; an image too small to split has the global view alone (tile_rows = tile_cols = 0)."""
    views = tile_rows * tile_cols + 1
    per_view = tokens // views
    if per_view * views != tokens:
        raise ValueError(f"{tokens} image tokens do not split into {views} views")
    tiles = [(c / tile_cols, r / tile_rows, (c + 1) / tile_cols, (r + 1) / tile_rows)
             for r in range(tile_rows) for c in range(tile_cols)]
    cells = square_grid(per_view)
    return np.concatenate([cells * np.array([x1 - x0, y1 - y0] * 2) + np.array([x0, y0] * 2) for x0, y0, x1, y1 in [*tiles, WHOLE]])


def _config(folder: Path) -> dict:
    try:
        data = json.loads((folder / "config.json").read_bytes()[: 1 << 20])
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Probe:
    """What the processor makes of a blank page of one size: its token count, the image tokens'
    positions, and the grid of their patches (Qwen: merged cells; Idefics3: tiles)."""

    tokens: int
    positions: np.ndarray
    grid: tuple[int, int] | None = None


# How a family arranges its image tokens, from a probe: the boxes of its image tokens in order.
Arrangement = Callable[[Probe], np.ndarray]


def square_arrangement(probe: Probe) -> np.ndarray:
    return square_grid(len(probe.positions))


def merged_arrangement(probe: Probe) -> np.ndarray:
    assert probe.grid is not None, "a Qwen probe has its grid"
    return grid_boxes(*probe.grid)


def tiled_arrangement(probe: Probe) -> np.ndarray:
    rows, cols = probe.grid or (0, 0)
    return tiled_grid(rows, cols, len(probe.positions))


TILE_TOKEN = re.compile(r"^<row_(\d+)_col_(\d+)>$")


class ProcessorPatches:
    """A real family's geometry, from its processor: the image tokens of a blank page of the page's
    rendered size (once per size) and the family's arrangement of them."""

    def __init__(self, folder: str | Path, processor: str, render_size: RenderSize, arrangement: Arrangement) -> None:
        self.folder, self.processor_class, self.render_size = Path(folder), processor, render_size
        self.arrangement = arrangement
        self.needs_page_size = not isinstance(render_size, tuple)
        # the network's image token (Gemma3's processor names its placeholder, <start_of_image>, instead); an
        # adapter's folder has no config of the network: the processor's then
        config = _config(self.folder)
        token = config.get("image_token_id", config.get("image_token_index"))
        self.image_token = int(token) if isinstance(token, int) else None
        self._processor: Any = None
        self._probes: dict[tuple[int, int], Probe] = {}
        self._queries: dict[tuple[str, int], list[str | None]] = {}  # a query's tokens, asked once per hit
        self._layouts: dict[tuple[int, tuple[int, int] | None], PatchLayout | None] = {}  # pages of one size share theirs
        self._empty_query: list[int] | None = None
        self._lock = threading.Lock()

    def processor(self) -> Any:
        if self._processor is None:
            import colpali_engine.models as engine

            self._processor = getattr(engine, self.processor_class).from_pretrained(str(self.folder))
        return self._processor

    def probe(self, size: tuple[int, int]) -> Probe:
        """The processor's tokens for a blank page of `size`, kept per size."""
        with self._lock:
            known = self._probes.get(size)
            if known is None:
                known = self._probes[size] = self._probe(size)
            return known

    def _probe(self, size: tuple[int, int]) -> Probe:
        from PIL import Image

        processor = self.processor()
        batch = processor.process_images([Image.new("RGB", size, "white")])
        ids = batch["input_ids"][0].numpy()
        image_token = self.image_token if self.image_token is not None else getattr(processor, "image_token_id", None)
        positions = np.flatnonzero(ids == image_token)
        grid = None
        if "image_grid_thw" in batch:  # Qwen: patches, merged merge x merge into one token
            merge = int(processor.image_processor.merge_size)
            _, height, width = (int(n) for n in batch["image_grid_thw"][0])
            grid = (height // merge, width // merge)
        else:
            tiles = [TILE_TOKEN.match(str(token)) for token in processor.tokenizer.convert_ids_to_tokens(ids.tolist())]
            found = [(int(m.group(1)), int(m.group(2))) for m in tiles if m]
            if found:
                grid = (max(r for r, _ in found), max(c for _, c in found))
        return Probe(len(ids), positions, grid)

    def layout(self, count: int, page_size: tuple[int, int] | None) -> PatchLayout | None:
        key = (count, page_size)
        if key not in self._layouts:
            if len(self._layouts) >= 256:
                self._layouts.clear()
            self._layouts[key] = self._layout(count, page_size)
        return self._layouts[key]

    def _layout(self, count: int, page_size: tuple[int, int] | None) -> PatchLayout | None:
        if isinstance(self.render_size, tuple):
            sizes = [self.render_size]
        elif page_size is None:
            return None
        else:  # a pixel either way on a side: poppler's -scale-to rounds the short side its own way
            width, height = fitted_size(self.render_size, *page_size)
            sizes = [(width, height), (width, height - 1), (width, height + 1), (width - 1, height), (width + 1, height)]
        for size in sizes:
            probe = self.probe(size)
            if probe.tokens == count and len(probe.positions):
                try:
                    boxes = self.arrangement(probe)
                except ValueError:
                    return None
                return PatchLayout(probe.positions, boxes) if len(boxes) == len(probe.positions) else None
            if isinstance(self.render_size, PixelBudget):
                break  # smart_resize's grid is exact: no pixel either way
        return None  # not this processor's layout (pooled vectors, another render size)

    def query_tokens(self, text: str, rows: int) -> list[str | None]:
        """The asker's tokens: what the query's prompt adds around them (its prefix, the augmentation
        tokens) is what it adds to an empty query too, and special tokens are never the asker's."""
        known = self._queries.get((text, rows))
        if known is None:
            if len(self._queries) >= 64:
                self._queries.clear()
            known = self._queries[(text, rows)] = self._query_tokens(text, rows)
        return known

    def _query_tokens(self, text: str, rows: int) -> list[str | None]:
        with self._lock:
            processor = self.processor()
            ids = [int(i) for i in processor.process_queries([text])["input_ids"][0]]
            if self._empty_query is None:  # what the prompt alone gives: the same for every query
                self._empty_query = [int(i) for i in processor.process_queries([""])["input_ids"][0]]
            empty = self._empty_query
        if len(ids) != rows:
            return [None] * rows
        tokenizer = processor.tokenizer
        prefix = 0
        while prefix < min(len(ids), len(empty)) and ids[prefix] == empty[prefix]:
            prefix += 1
        suffix = 0
        while suffix < min(len(ids), len(empty)) - prefix and ids[-1 - suffix] == empty[-1 - suffix]:
            suffix += 1
        special = set(tokenizer.all_special_ids)
        names: list[str | None] = [None] * rows
        for row in range(prefix, rows - suffix):
            if ids[row] not in special:
                name = tokenizer.convert_tokens_to_string([tokenizer.convert_ids_to_tokens(ids[row])]).strip()
                names[row] = name or None
        return names


def processor_patches(arrangement: Arrangement) -> Callable[[Any, Any, RenderSize], PatchGeometry]:
    """A family's `patches` (family, model, render size -> geometry): its processor's image tokens,
    arranged by `arrangement`."""

    def patches(family: Any, model: Any, render_size: RenderSize) -> PatchGeometry:
        return ProcessorPatches(model.path, family.processor, render_size, arrangement)

    return patches
