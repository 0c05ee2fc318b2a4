"""The Qdrant store's public names, where callers and tests have imported them.

The implementation lives in `index/qdrant/` (the Qdrant backend); this module re-exports it.
"""

from .qdrant.store import *  # noqa: F403
from .qdrant.store import (  # noqa: F401  (the names callers use, explicitly)
    CHUNK_CHARS,
    HEAD_ID,
    LEASE_ID,
    LEASE_MARGIN_S,
    LEASE_TTL_S,
    QdrantIndex,
    QdrantSegmentWriter,
    QdrantSpec,
    QdrantStore,
    QdrantTransaction,
    check_server_version,
    chunk_id,
    parse_store_url,
)
