"""A build's pages to vectors, page by page, whatever the device does.

Out of memory halves the batch, a page that cannot be encoded is pinned on that page alone; then
the vectors are token-pooled. Each result is a page's vectors or its DocumentError, in page order."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.cpus import available_cpus
from ..core.errors import DocumentError, LgptError, page_failure
from .failures import DeviceLost, DeviceOutOfMemory
from .protocols import PageEncoder


def encode_resiliently(encoder: PageEncoder, pages: list, log: Callable[[str], None] = lambda message: None) -> list:
    """Vectors per page, or the DocumentError of a page that cannot be encoded.

    Out of memory halves the encoder's batch and tries again; a lost device (DeviceLost)
    stops the caller; an error a page can cause (page_failure) is pinned on the pages that
    fail alone; any other error (a bug) propagates."""
    try:
        out: list = []
        for start in range(0, len(pages), encoder.batch_size):
            out += encoder.encode_pages(pages[start : start + encoder.batch_size])
        return out
    except DeviceOutOfMemory as exc:
        if encoder.batch_size <= 1:
            raise DeviceLost(
                f"the device {encoder.precision.device} is out of memory with a single page ({exc}).",
                hint="Free the device (other processes?), or use --device cpu.",
            ) from None
        encoder.batch_size = max(1, encoder.batch_size // 2)
        log(f"warning: out of memory; batch size lowered to {encoder.batch_size}")
        return encode_resiliently(encoder, pages, log)
    except (LgptError, KeyboardInterrupt):
        raise
    except Exception as exc:
        failure = page_failure("encode", exc)
        if failure is None:
            raise
        if len(pages) == 1:
            return [failure]
        return [r for page in pages for r in encode_resiliently(encoder, [page], log)]


def pool_some(results: list, factor: int) -> list:
    """Token pooling for the pages that were encoded (errors pass through)."""
    vectors = [r for r in results if not isinstance(r, DocumentError)]
    pooled = iter(pool_tokens(vectors, factor) if vectors else [])
    return [r if isinstance(r, DocumentError) else next(pooled) for r in results]


def pool_tokens(vectors: list[np.ndarray], factor: int) -> list[np.ndarray]:
    """colpali-engine's HierarchicalTokenPooler: each page keeps about 1/factor of its vectors,
    each the normalised mean of a cluster of similar ones. Its authors report about 98 % of
    retrieval quality kept at factor 3."""
    import torch
    from colpali_engine.compression.token_pooling import HierarchicalTokenPooler

    pooled = HierarchicalTokenPooler().pool_embeddings(
        [torch.from_numpy(v.astype(np.float32)) for v in vectors], pool_factor=factor, num_workers=available_cpus()
    )
    return [p.numpy().astype(np.float16) for p in pooled]
