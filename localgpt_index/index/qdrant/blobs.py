"""Artifact blobs of a Qdrant index: points of the catalog collection, as the manifest's chunks are.

Keyed by the blob's content name, its bytes base64 in chunks; read back checked (every chunk there,
size and sha256), collected when no kept generation names them."""

from __future__ import annotations

import base64
import hashlib
import math
import re
import uuid
from typing import Any

from ...core.errors import IndexProblem
from ..format.manifest import REBUILD_HINT, BlobRef
from .ids import NAMESPACE, _models

RAW_CHUNK = 3 << 18  # 768 KiB of bytes: 1 MiB of base64 per point, as the manifest's chunks
_EXT = re.compile(r"^[a-z0-9]{1,12}$")


def blob_chunk_id(name: str, chunk: int) -> str:
    return str(uuid.uuid5(NAMESPACE, f"blob:{name}:{chunk}"))


def _chunks(size: int) -> int:
    return max(1, math.ceil(size / RAW_CHUNK))


class QdrantBlobs:
    """The blob sink and source of one catalog collection."""

    def __init__(self, store: Any, catalog: str, fallback: str | None = None) -> None:  # a QdrantStore
        """`fallback`: a catalog read when a blob is not in `catalog` (a rebuild reads its base's there)."""
        self.store, self.catalog, self.fallback = store, catalog, fallback

    def put(self, data: bytes, ext: str) -> BlobRef:
        if not _EXT.match(ext):
            raise ValueError(f"a blob's extension is a short lowercase word, not {ext!r}")
        models = _models()
        digest = hashlib.sha256(data).hexdigest()
        ref = BlobRef(name=f"{digest}.{ext}", bytes=len(data), sha256=digest)
        points = [models.PointStruct(id=blob_chunk_id(ref.name, i), vector={}, payload={
            "kind": "blob", "blob": ref.name, "chunk": i,
            "data": base64.b64encode(data[i * RAW_CHUNK:(i + 1) * RAW_CHUNK]).decode("ascii")})
            for i in range(_chunks(len(data)))]
        for point in points:
            self.store.client.upsert(self.catalog, [point], wait=True)
        return ref

    def read(self, ref: BlobRef) -> bytes:
        ids = [blob_chunk_id(ref.name, i) for i in range(_chunks(ref.bytes))]
        found = self._chunks(self.catalog, ids)
        if len(found) != len(ids) and self.fallback and self.fallback != self.catalog:
            found = self._chunks(self.fallback, ids)
        where = f"{self.store.location}: artifact blob {ref.name}"
        if len(found) != len(ids):
            raise IndexProblem(f"{where}: {len(ids) - len(found)} of its {len(ids)} chunks are missing.", hint=REBUILD_HINT)
        try:
            data = b"".join(base64.b64decode(str(found[i].get("data", "")), validate=True) for i in ids)
        except ValueError:
            data = b""
        if len(data) != ref.bytes or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise IndexProblem(f"{where}: checksum mismatch; the artifact is damaged.", hint=REBUILD_HINT)
        return data

    def _chunks(self, catalog: str, ids: list[str]) -> dict[str, dict]:
        with self.store.talking("reading an artifact"):
            if not self.store.client.collection_exists(catalog):
                return {}
            return {str(r.id): r.payload or {} for r in self.store.client.retrieve(catalog, ids, with_payload=True)}

    def collect(self, live: set[str]) -> None:
        """Delete blobs not in `live` (best effort)."""
        models = _models()
        must_not = [models.FieldCondition(key="blob", match=models.MatchAny(any=sorted(live)))] if live else []
        flt = models.Filter(must=[models.FieldCondition(key="kind", match=models.MatchValue(value="blob"))], must_not=must_not)
        try:
            self.store.client.delete(self.catalog, points_selector=models.FilterSelector(filter=flt))
        except Exception:
            pass  # the next commit tries again

    def delete(self, names: set[str]) -> None:
        if not names:
            return
        models = _models()
        flt = models.Filter(must=[models.FieldCondition(key="blob", match=models.MatchAny(any=sorted(names)))])
        try:
            self.store.client.delete(self.catalog, points_selector=models.FilterSelector(filter=flt))
        except Exception:
            pass
