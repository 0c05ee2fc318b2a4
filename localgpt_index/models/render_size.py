"""The size pages are rendered at for a model, expected before it loads and read once it has.

Expected from its saved processor settings before it loads, and read from its loaded processor
(ProcessorGeometry) once it has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.sizes import RenderSize
    from .resolve import ModelRef


def expected_render_size(model: ModelRef, max_visual_tokens: int | None = None) -> RenderSize | None:
    """The render size the model's encoder will ask for, read from its saved processor settings
    before anything is imported or loaded (a build renders pages while the model loads). None
    where they do not tell; the loaded encoder's render_size is the authority, and a build whose
    expectation was wrong renders its pages again."""
    from ..core.sizes import PixelBudget, render_size_for
    from .families import family_named

    folder = Path(model.path)
    own = family_named(model.family).render_size
    if own is not None:
        return own(folder)
    image = _small_json(folder / "preprocessor_config.json") or _small_json(folder / "processor_config.json").get("image_processor")
    if not isinstance(image, dict) or not isinstance(image.get("size"), dict):
        return None
    try:
        expected = render_size_for(image["size"], image.get("patch_size"), image.get("merge_size"))
    except (TypeError, ValueError):
        return None
    if isinstance(expected, PixelBudget) and max_visual_tokens is not None:
        budget = max_visual_tokens * expected.cell * expected.cell  # as limit_visual_tokens sets it
        expected = PixelBudget(budget, min(expected.min_pixels, budget), expected.cell)
    return expected


def _small_json(path: Path, limit: int = 1 << 20) -> dict:
    """A small JSON object from a model folder, or {} (absent, too large, not an object)."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(limit + 1))  # a larger file is cut short, and does not parse
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class ProcessorGeometry:
    """The page geometry of a loaded processor: its render size and, where it sizes its grid of
    image tokens by a pixel budget, that budget in tokens (which --max-visual-tokens lowers)."""

    def __init__(self, image_processor: Any) -> None:
        self.image_processor = image_processor

    @property
    def size(self) -> dict:
        """The processor's size settings as a plain dict (transformers keeps a SizeDict)."""
        return dict(getattr(self.image_processor, "size", None) or {})

    @property
    def grid_cell(self) -> int | None:
        """Pixels a side of one image token, where the processor sizes its grid by a pixel budget."""
        from ..core.sizes import grid_cell

        processor = self.image_processor
        return grid_cell(self.size, getattr(processor, "patch_size", None), getattr(processor, "merge_size", None))

    @property
    def max_visual_tokens(self) -> int | None:
        """Image tokens a page at most, where the processor sizes its grid by a pixel budget."""
        cell = self.grid_cell
        return None if cell is None else int(self.image_processor.size["longest_edge"]) // (cell * cell)

    def limit_visual_tokens(self, tokens: int) -> None:
        """At most `tokens` image tokens a page (what colpali-engine's `max_num_visual_tokens` sets)."""
        cell = self.grid_cell
        if cell is None:
            raise ValueError("this processor does not size its grid by a pixel budget")
        size = self.image_processor.size
        size["longest_edge"] = tokens * cell * cell
        size["shortest_edge"] = min(int(size["shortest_edge"]), tokens * cell * cell)

    @property
    def render_size(self) -> RenderSize:
        """What pages are rendered at: (width, height) for a family with a fixed input size; for a
        dynamic one, the processor's pixel budget (each page then comes out at the size the
        processor would give it, and is not resized again), or its longest edge."""
        from ..core.sizes import render_size_for

        processor = self.image_processor
        return render_size_for(self.size, getattr(processor, "patch_size", None), getattr(processor, "merge_size", None))
