"""Qdrant's binary quantization of the page multi-vectors: configuration, migration, search parameters.

The collection's configuration, the migration of a collection from before it, and the search
parameters a query sends.

Qdrant keeps one bit a dimension of every page vector beside the float16 originals (32x smaller
than float32, in RAM). A query asks either for exact MaxSim over the originals (the default:
`ignore=True`) or for the first pass: Qdrant scores every visible page by its binary codes,
keeps `oversampling x limit` of them and rescores those with the original vectors (`rescore=True`).
With HNSW off (`m=0`) a server searches every indexed segment by a plain scan, over the codes when
asked; segments not yet indexed (below the optimizer's threshold) have no codes and are scanned exactly.

The client's in-process mode accepts the configuration (it is stored and read back) and the search
parameters, and ignores both: it always scores exactly (qdrant-client 1.20,
`local/qdrant_local.py`), and it does not apply `update_collection`'s vector changes."""

from __future__ import annotations

import warnings
from typing import Any

from .ids import VECTOR, _models

# The in-process mode warns once a process that it ignores quantization search parameters: it scores
# exactly, which query --json says (scoring.reason); the warning would only repeat it to a user.
warnings.filterwarnings("ignore", message=r"Local mode performs exact \(brute-force\) search", category=UserWarning)


def binary_quantization():
    """The page vectors' quantization: one bit a dimension, the codes kept in RAM (the originals are
    on disk on a server). `always_ram` rather than the newer `memory`, which a 1.16 server does not know."""
    models = _models()
    return models.BinaryQuantization(binary=models.BinaryQuantizationConfig(always_ram=True))


def is_quantized(client: Any, physical: str) -> bool:
    """Whether the collection's page vectors have binary quantization (their own, or the collection's)."""
    config = client.get_collection(physical).config
    vectors = config.params.vectors
    page = vectors.get(VECTOR) if isinstance(vectors, dict) else None
    quantization = getattr(page, "quantization_config", None) or config.quantization_config
    return quantization is not None and getattr(quantization, "binary", None) is not None


def add_quantization(client: Any, physical: str) -> bool:
    """A collection from before binary quantization gets it (Qdrant builds the codes in the background;
    queries meanwhile score the pages without codes exactly). True when the change was sent."""
    if is_quantized(client, physical):
        return False
    models = _models()
    client.update_collection(physical, vectors_config={VECTOR: models.VectorParamsDiff(quantization_config=binary_quantization())})
    return True


def search_params(candidates: int | None, limit: int):
    """Exact (`candidates` None: the binary codes ignored), or the binary first pass: about
    `candidates` pages preselected by their codes, rescored with the original vectors."""
    models = _models()
    if candidates is None:
        return models.SearchParams(quantization=models.QuantizationSearchParams(ignore=True))
    return models.SearchParams(quantization=models.QuantizationSearchParams(
        ignore=False, rescore=True, oversampling=oversampling(candidates, limit)))


def oversampling(candidates: int, limit: int) -> float:
    """Qdrant's factor: it preselects `oversampling x limit` points by their codes."""
    return max(1.0, candidates / max(limit, 1))
