"""The local store's public names, where callers and the README have always imported them.

The implementation lives in `index/local/` (the local backend); this module re-exports it.
"""

from .errors import IndexWriteError, MissingIndexFile
from .files import read_member, regular_size
from .local.store import (
    DEFAULT_INDEX_DIR,
    DEFAULT_INDEX_NAME,
    HEAD_LIMIT,
    MANIFEST_LIMIT,
    NAME_PATTERN,
    NPY_HEADER,
    IndexStore,
    PageRef,
    SegmentWriter,
    Transaction,
    _alive,
    block_checksums,
    index_path,
)
from .manifest import (
    CHECK_BLOCK,
    FORMAT,
    REBUILD_HINT,
    Checksum,
    Document,
    Failure,
    Head,
    Manifest,
    ModelInfo,
    Segment,
    Settings,
)

__all__ = [
    "DEFAULT_INDEX_DIR", "DEFAULT_INDEX_NAME", "HEAD_LIMIT", "MANIFEST_LIMIT", "NAME_PATTERN", "NPY_HEADER",
    "IndexStore", "IndexWriteError", "MissingIndexFile", "PageRef", "SegmentWriter", "Transaction",
    "block_checksums", "index_path", "read_member", "regular_size",
    "CHECK_BLOCK", "FORMAT", "REBUILD_HINT", "Checksum", "Document", "Failure", "Head", "Manifest", "ModelInfo",
    "Segment", "Settings",
]
_ = _alive  # kept importable for code that reached into the old module
