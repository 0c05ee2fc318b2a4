"""A ColPali-family model on torch, assembled from named parts.

The network and processor its family's loader made (models/loaders.py), a NetRunner for the forward passes,
the processor's geometry, and the family's way of batching pages (page_batches)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .families import check_visual_tokens_supported, family_named
from .page_batches import QUERY_BATCH, GridPages, ShapedPages, SharedPromptPages, forward_by_shape
from .protocols import MAX_QUERY_TOKENS, PageEncoder
from .loaders import quiet_transformers
from .qwen_frames import patch_embeddings_as_products, temporal_frames
from .render_size import ProcessorGeometry
from .runner import NetRunner

if TYPE_CHECKING:
    from ..core.sizes import RenderSize
    from .device import Precision
    from .guard import DtypeFix
    from .resolve import ModelRef


class TorchEncoder(PageEncoder):
    """Pages and queries to multi-vectors through a loaded ColPali-family network, in batches under
    autocast on the device and dtype the probe picked."""

    def __init__(self, model: ModelRef, precision: Precision, batch_size: int, loaded: tuple[Any, Any],
                 compile: bool = False, loader: str = "") -> None:
        """`loaded`: (network, processor) as the family's `loader` made them.

        `compile` runs the network (or the parts the family names) through torch.compile: their
        many small element-wise kernels (norms, casts, activations) get fused, at the cost
        of a compilation on the first batch of each size. Errors then name no module."""
        family = family_named(model.family)
        self.model, self.precision, self.batch_size, self.loader = model, precision, batch_size, loader
        self.net, self.processor = loaded
        self.patch_embeddings_as_products = patch_embeddings_as_products(self.net)
        # Qwen pages go to the model as one of their identical temporal frames (see qwen_frames)
        self.one_frame = bool(self.patch_embeddings_as_products) and temporal_frames(self.processor) > 1
        self.compiled = compile
        if compile:
            for part in family.compile_parts or ("",):
                _attribute(self.net, part).compile(dynamic=False)
        self.runner = NetRunner(self.net, model.path, precision, compiled=compile, logits_to_keep=family.logits_to_keep,
                               use_cache=family.use_cache)
        self.geometry = ProcessorGeometry(self.processor.image_processor)
        self.dim = int(getattr(self.net, "dim", 128))
        self.grid = GridPages(self.processor, self.runner.dtype, self.one_frame) if family.pixel_grid else None
        self.pages: SharedPromptPages | ShapedPages = (
            SharedPromptPages(self.processor, self.runner, self.geometry, compiled=compile) if family.shared_prompt
            else ShapedPages(self.processor, self.runner, self.grid, pixels_as_list=family.pixel_grid))

    @property
    def forward_calls(self) -> int:  # type: ignore[override]  # the runner counts
        return self.runner.calls

    @property
    def dtype_fixes(self) -> list[DtypeFix]:  # type: ignore[override]  # the runner audits
        return self.runner.dtype_fixes

    @property
    def render_size(self) -> RenderSize:
        return self.geometry.render_size

    @property
    def max_visual_tokens(self) -> int | None:  # type: ignore[override]  # the processor's budget
        return self.geometry.max_visual_tokens

    def limit_visual_tokens(self, tokens: int) -> None:
        """At most `tokens` image tokens a page (the Qwen families only)."""
        check_visual_tokens_supported(self.model, tokens)
        self.geometry.limit_visual_tokens(tokens)

    def prepare_page(self, image: Any) -> Any:
        """Per-page preprocessing that can run off the model thread (the build's render thread
        calls it): ColPali's pixel values; for the other families, the processor's whole output
        for the page (its text and pixels: their shape depends on the page's size)."""
        with quiet_transformers():
            return self.pages.prepare(image)

    def process_pages(self, pages: list) -> dict:
        """ColPali's processor output for a batch of pages (images, or prepare_page's results)."""
        return self.pages.process(pages)  # type: ignore[union-attr]  # SharedPromptPages only

    def encode_pages(self, pages: Sequence) -> list[np.ndarray]:
        with quiet_transformers():
            return self.pages.encode(pages, self.batch_size)

    def encode_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Queries of the same token length share forward passes; queries of different lengths
        never do. Padding would make a query's vectors depend on its neighbours: with the sdpa
        attention of transformers 5, a padded PaliGemma query differs from the same query alone
        by up to 0.07 per component (tests/test_encoder.py), which reorders results."""
        from ..core.errors import UsageError

        with quiet_transformers():
            tokenised = [self.processor.process_queries([text]) for text in texts]
            for number, batch in enumerate(tokenised):
                length = int(batch["attention_mask"].shape[1])
                if length > MAX_QUERY_TOKENS + 16:  # the prompt and augmentation tokens come on top
                    raise UsageError(f"query {number + 1} is {length} tokens long; queries are limited to {MAX_QUERY_TOKENS}.")
            return forward_by_shape(self.runner, tokenised, max(self.batch_size, QUERY_BATCH))


def _attribute(root: Any, dotted: str) -> Any:
    """root.a.b for "a.b" (root itself for "")."""
    for name in filter(None, dotted.split(".")):
        root = getattr(root, name)
    return root
