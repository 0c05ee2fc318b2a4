"""A ColPali query's forward pass through the parts whose results it keeps.

colpali-engine's ColPali.forward runs PaliGemmaForConditionalGeneration with every hidden state
captured (hooks on each layer, a tuple built per pass) and its LM head, then projects the last hidden
state. A query needs the last hidden state only: PaliGemma's language model gives it, and the
projection, norm and mask below are ColPali.forward's own steps.

PaliGemmaModel, on the way to its language model, builds the attention mask and positions twice a pass
(its own and the language model's: transformers' mask helpers, most of a small model's query pass).
They depend on the input's shape and its attention mask only: the first query of each shape goes
through PaliGemmaModel, and the mask and positions its language model receives are kept for the
shape; later queries of that shape run the language model's embedding, decoder layers and norm
directly on them. The first such query of a process is also run through PaliGemmaModel, and the
direct pass is kept only where both give the same bits (a one-query process pays no extra pass). On
the bench checkpoint a query pass (after a pause, as in `serve`) takes 1.3-1.5 ms of CPU instead of
2.1-2.5.

The runner checks the result against the whole network on its first query, bit for bit, and keeps the
whole network where they differ (a colpali-engine whose ColPali.forward does more, say).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

MAX_SHAPES = 256  # query shapes whose mask and positions are kept (a query's tokens are bounded: few lengths)
DIRECT_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})  # what the direct pass reads (through the mask)


def query_parts(net: Any) -> Callable[[dict], Any] | None:
    """A function of a query's inputs (no pixels) giving what `net(**inputs)` gives, for colpali-engine's
    ColPali; None for another network."""
    try:
        from colpali_engine.models import ColPali
    except ImportError:  # pragma: no cover - colpali-engine comes with byaldi
        return None
    if type(net) is not ColPali:  # a subclass may change forward
        return None
    return ColPaliQueryParts(net)


class ColPaliQueryParts:
    """ColPali's query pass: PaliGemma's language model on masks and positions kept per query shape."""

    def __init__(self, net: Any) -> None:
        self.net = net
        self.shapes: dict[tuple, tuple[Any, Any]] = {}  # shape key -> (attention mask as the layers take it, position ids)
        self.direct: bool | None = None  # whether the direct pass gives PaliGemmaModel's bits (None: not yet seen)

    def __call__(self, inputs: dict) -> Any:
        if self.direct is False:  # found to differ: no shape is kept, none is looked up
            return self._through_model(inputs, None)
        key = _shape_key(inputs)
        known = self.shapes.get(key)
        if known is None:
            return self._through_model(inputs, key)
        direct = self._project(self._language_model(inputs, *known), inputs)
        if self.direct is None:  # once a process: the direct pass against PaliGemmaModel's
            out = self._through_model(inputs, None)
            self.direct = same_bits(direct, out)
            if not self.direct:
                self.shapes.clear()
            return out
        return direct

    def _through_model(self, inputs: dict, key: tuple | None) -> Any:
        """Through PaliGemmaModel; with `key`, its language model's mask and positions kept for the shape
        (unless the inputs hold more than the direct pass reads, or enough shapes are kept)."""
        model = self.net.model.model
        taken: dict[str, Any] = {}
        mine = threading.get_ident()

        def take(module: Any, args: tuple, kwargs: dict) -> None:
            if threading.get_ident() == mine:  # another thread's pass may run while the hook is on the module
                taken.update(mask=kwargs.get("attention_mask"), positions=kwargs.get("position_ids"))

        keep = key is not None and set(inputs) <= DIRECT_INPUTS and len(self.shapes) < MAX_SHAPES
        hook = model.language_model.register_forward_pre_hook(take, with_kwargs=True) if keep else None
        try:
            out = self._project(model(**inputs, use_cache=False).last_hidden_state, inputs)
        finally:
            if hook is not None:
                hook.remove()
        if key is not None and keep and "positions" in taken:
            self.shapes[key] = (taken["mask"], taken["positions"])
        return out

    def _language_model(self, inputs: dict, mask: Any, positions: Any) -> Any:
        """The last hidden state, as GemmaModel.forward computes it, with the mask and positions given."""
        model = self.net.model.model
        ids = inputs["input_ids"]
        if model.config.image_token_id >= model.vocab_size:  # PaliGemmaModel's own step (image tokens out of vocabulary)
            ids = ids.masked_fill(ids == model.config.image_token_id, 0)
        language = model.language_model
        hidden = language.embed_tokens(ids)
        rotary = language.rotary_emb(hidden, position_ids=positions)
        for layer in language.layers[: language.config.num_hidden_layers]:
            hidden = layer(hidden, attention_mask=mask, position_ids=positions, cache=None, use_cache=False,
                           position_embeddings=rotary)
        return language.norm(hidden)

    def _project(self, last: Any, inputs: dict) -> Any:
        """ColPali.forward's steps after the language model: projection, norm, the padding masked out."""
        proj = self.net.custom_text_proj(last)
        proj = proj / proj.norm(dim=-1, keepdim=True)
        return proj * inputs["attention_mask"].unsqueeze(-1)


def _shape_key(inputs: dict) -> tuple:
    """What the mask and positions depend on: the inputs' names and shapes, and the attention mask's
    and token types' values."""
    key: list = []
    for name in sorted(inputs):
        value = inputs[name]
        key.append((name, tuple(value.shape), str(value.dtype)))
        if name in ("attention_mask", "token_type_ids"):
            key.append(value.cpu().numpy().tobytes())
    return tuple(key)


def same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors hold the same values bit for bit (NaNs included)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
