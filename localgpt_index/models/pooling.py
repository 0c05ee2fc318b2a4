"""Token pooling: fewer vectors a page, each the mean of a cluster of similar ones (lossy, optional)."""

from __future__ import annotations


import numpy as np

from ..core.cpus import available_cpus
from ..core.errors import DocumentError


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
