"""A Qdrant writer's set-up under its lease: collections created on first use, and what a killed
writer left (points and catalog chunks above HEAD, stray physical collections) undone."""

from __future__ import annotations

from typing import Any

from .commit import doc_rows
from .quantization import add_quantization, binary_quantization
from .sparse import sparse_config
from .ids import (
    HEAD_ID,
    POOLED,
    VECTOR,
    _models,
    catalog_of,
    path_fields,
    point_id,
)


def ensure_collections(txn: Any, dim: int) -> None:
    if txn._created:
        return
    models = _models()
    server = txn.store.spec.path is None
    with txn.writing():
        if not txn.client.collection_exists(txn.physical):
            txn.client.create_collection(txn.physical, vectors_config={
                VECTOR: models.VectorParams(
                    size=dim, distance=models.Distance.DOT, datatype=models.Datatype.FLOAT16,
                    multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                    hnsw_config=models.HnswConfigDiff(m=0),  # no graph: MaxSim over every visible page, exact
                    on_disk=server or None,  # a server keeps the big multi-vectors on disk, the pooled ones in RAM
                    quantization_config=binary_quantization(),  # their 1-bit codes in RAM: --first-pass (quantization.py)
                ),
                POOLED: models.VectorParams(size=dim, distance=models.Distance.DOT),
            }, sparse_vectors_config=sparse_config(), shard_number=txn.store.spec.shards, replication_factor=txn.store.spec.replicas)
            if txn.store.spec.path is None:  # a server filters faster with them; the in-process mode has none
                for field, schema in (("path", "keyword"), ("sha256", "keyword"), ("visible_from", "integer"),
                                      ("gen_removed", "integer"), ("gen_written", "integer")):
                    txn.client.create_payload_index(txn.physical, field, field_schema=schema)
        if not txn.client.collection_exists(txn.catalog):
            txn.client.create_collection(txn.catalog, vectors_config={})
    txn._created = True


def upgrade_quantization(txn: Any) -> None:
    """A collection from before binary quantization gets it, under the writer's lease (any build, even
    one that changes no document); Qdrant then builds the codes in the background. A rebuild creates it with them."""
    if txn.rebuild:
        return
    add_quantization(txn.client, txn.previous_physical)


def claim_head(txn: Any, physical: str) -> None:
    """HEAD names this writer: a writer that lost its lease can no longer replace it (see _write_head)."""
    models = _models()
    txn.client.set_payload(catalog_of(physical), {"writer": txn.token},
                            points=models.PointIdsList(points=[HEAD_ID]), wait=True)


def upgrade_paths(txn: Any) -> None:
    """A collection from before path_raw: its pages of paths that are not UTF-8 get it; the
    commit that follows marks HEAD, and from then on they are read by their exact bytes."""
    models = _models()
    for doc in [*txn.base.documents, *txn.base.in_progress]:
        fields = path_fields(doc.path)
        if "path_raw" in fields:
            ids = [point_id(seg, row) for seg, row in doc_rows(txn, doc)]
            txn.client.set_payload(txn.previous_physical, fields, points=models.PointIdsList(points=ids), wait=True)
    txn.needs_upgrade = True
