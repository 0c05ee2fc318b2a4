"""What build, query and serve call of an encoder: PageEncoder and QueryEncoder.

And the query length the models read well (MAX_QUERY_TOKENS; a query's text is checked before it
comes here: query.request.check_query_text)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:
    from ..core.sizes import RenderSize
    from .device import Precision
    from .guard import DtypeFix
    from .resolve import ModelRef
    from .tuning import CpuTuner

MAX_QUERY_TOKENS = 512  # what the models read well: ColPali-family training queries are far shorter


class QueryEncoder(Protocol):
    """Turns query texts into multi-vectors (tokens x dim): what `query` and `serve` call."""

    model: ModelRef
    precision: Precision

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One float32 array (tokens, dim) per query (texts checked by query.request.check_query_text)."""
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
