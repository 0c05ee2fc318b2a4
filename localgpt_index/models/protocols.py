"""What build, query and serve call of an encoder: PageEncoder and QueryEncoder.

And the limits every query encoder applies (check_queries)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:
    from ..core.sizes import RenderSize
    from .device import Precision
    from .guard import DtypeFix
    from .resolve import ModelRef
    from .tuning import CpuTuner

MAX_QUERY_CHARS = 2048  # longer text is refused before tokenising (a 1 MB query took 600 s)
MAX_QUERY_TOKENS = 512  # what the models read well: ColPali-family training queries are far shorter


class QueryEncoder(Protocol):
    """Turns query texts into multi-vectors (tokens x dim): what `query` and `serve` call."""

    model: ModelRef
    precision: Precision

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 array (tokens, dim) per query (check_queries' limits apply)."""
        ...


class PageEncoder(QueryEncoder, Protocol):
    """Turns page images into multi-vectors (tokens x dim): what `build` calls. A family's encoder
    may subclass it for the defaults below (prepare_page: none)."""

    dim: int
    batch_size: int = 4  # pages a forward pass; encode_resiliently lowers it after running out of memory
    forward_calls: int = 0
    dtype_fixes: list[DtypeFix] = []  # noqa: RUF012 - read only; each encoder assigns its own
    max_visual_tokens: int | None = None  # image tokens a page at most, where the family has such a budget
    cpu_tuner: CpuTuner | None = None  # on a CPU: what builds with this encoder measured (tuning.tuner_for), kept with it

    @property
    def render_size(self) -> RenderSize:
        """(width, height) the model consumes; for dynamic resolution the long side pages are rendered at (or None)."""
        ...

    def prepare_page(self, image: Any) -> Any:
        """Work on one page that may run in another thread before encode_pages (default: none)."""
        return image

    def encode_pages(self, pages: Sequence) -> list[np.ndarray]:
        """One float16 array (tokens, dim) per page (an image, or what prepare_page made of it).

        Raises DeviceOutOfMemory, DeviceLost, or another exception for a page it cannot encode."""
        ...


def check_queries(texts: Sequence[str]) -> list[str]:
    """Queries fit for a model: not empty, not longer than it reads (UsageError otherwise)."""
    from ..core.errors import UsageError

    checked = []
    for number, text in enumerate(texts, 1):
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"query {number} is empty.")
        if len(text) > MAX_QUERY_CHARS:
            raise UsageError(
                f"query {number} is {len(text):,} characters long; queries are limited to {MAX_QUERY_CHARS:,} "
                f"characters ({MAX_QUERY_TOKENS} tokens, what the model reads)."
            )
        checked.append(text)
    return checked
