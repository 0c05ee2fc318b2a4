"""A ColPali query's forward pass through the parts whose results it keeps.

colpali-engine's ColPali.forward runs PaliGemmaForConditionalGeneration with every hidden state
captured (hooks on each layer, a tuple built per pass) and its LM head, then projects the last hidden
state. A query needs the last hidden state only: PaliGemmaModel gives it (the captured tuple's last
entry is that same tensor), and the projection, norm and mask below are ColPali.forward's own
steps. On a one-layer model that is about a tenth of a query pass's CPU time.

The runner checks the result against the whole network on its first query, bit for bit, and keeps the
whole network where they differ (a colpali-engine whose ColPali.forward does more, say).
"""

from __future__ import annotations

from typing import Any, Callable


def query_parts(net: Any) -> Callable[[dict], Any] | None:
    """A function of a query's inputs (no pixels) giving what `net(**inputs)` gives, for colpali-engine's
    ColPali; None for another network."""
    try:
        from colpali_engine.models import ColPali
    except ImportError:  # pragma: no cover - colpali-engine comes with byaldi
        return None
    if type(net) is not ColPali:  # a subclass may change forward
        return None

    def forward(inputs: dict) -> Any:
        last = net.model.model(**inputs, use_cache=False).last_hidden_state
        proj = net.custom_text_proj(last)
        proj = proj / proj.norm(dim=-1, keepdim=True)
        return proj * inputs["attention_mask"].unsqueeze(-1)

    return forward


def same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors hold the same values bit for bit (NaNs included)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
