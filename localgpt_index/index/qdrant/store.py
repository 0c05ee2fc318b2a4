"""Qdrant as the index store: the same transaction, catalog and guarantees as the local store.

One Qdrant point per page: the page's multi-vector (MaxSim, dot product, HNSW off: exact
ranking), a pooled single vector for an optional prefetch, and a payload with the page's
document (path, page, sha256, kind, metadata) and its generations:

    gen_written    the commit that wrote it (points above HEAD's generation are a crashed
                   writer's: deleted when the next writer starts)
    visible_from   the commit from which queries see it (PENDING while its document is in progress)
    gen_removed    the commit that removed it (kept one generation for readers, then deleted)
    writer         the token of the writer that staged it (a writer that lost its lease deletes only its own)

A path that is not UTF-8 is shown in `path` with backslash escapes and kept exactly in
`path_raw` (its bytes in hex), so two documents never share a payload path; collections from
before (HEAD without `paths: 2`) are read the old way and upgraded by the next build.

Queries see `visible_from <= G and not gen_removed <= G` for HEAD's generation G, so a build
interrupted at any point leaves the collection answering as after its last commit.

The catalog (the same manifest as a local index, validated the same way) lives beside the
points, in `<physical>__catalog`, split into chunks, with a HEAD point replaced last. The
name users give is an alias of the physical collection `<name>__<10 hex digits>`: --rebuild
writes a new physical collection and switches the alias once it is complete. A name that is
anything else (another tool's collection, or an alias of one) is refused before any work.
A catalog of an older format (HEAD's `format`) is migrated on read and written in the current
format by the next writer's commit, even one that changes no document.

One writer at a time: a lease point in `<name>__lease` (holder, token, expiry), taken and
renewed by compare-and-swap (a conditional upsert, `update_filter`), renewed by a timer thread
from the moment it is taken; the writer fences itself (stops before its lease could have run
out on its own clock), claims HEAD with its token, and writes HEAD only while HEAD still names
it. Clocks of the machines that share a collection must agree to within LEASE_MARGIN_S.

Needs a Qdrant server 1.16 or later (conditional updates) and qdrant-client 1.16 or later
(tested with 1.20, whose in-process mode supports them too).

Stored PDFs (for page images and resumed conversions) go to --pdf-store, a local or shared folder.
"""
from __future__ import annotations

import os
import re
import time
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from ...core.errors import IndexProblem, LgptError, MissingIndexFile, UsageError
from ..format.files import regular_size
from ..format.manifest import (
    Manifest,
)
from ..format.pdfstore import PdfStore, SharedRefs
from ..transaction import Transaction, open_transaction
from . import catalog, connection
from . import verify as checks
from .ids import (
    LEASE_RENEW_S,
    PATHS_VERSION,
    PDF_STORE_MARKER,
    POOLED,
    VECTOR,
    QdrantSpec,
    catalog_of,
)
from .lease import _Lease
from .txn import QdrantParts
from .view import QdrantView

__all__ = ["QdrantStore"]


class QdrantStore:
    """An index in a Qdrant deployment (a server, a cluster, or the client's in-process mode)."""

    def __init__(self, spec: QdrantSpec, pdf_store: Path | None = None, *, client: Any = None,
                 clock: Callable[[], float] = time.time, renew_every_s: float = LEASE_RENEW_S) -> None:
        """`client`: an open client to share (the in-process mode admits one per folder);
        `clock`: the wall clock lease expiries are read against (tests inject one)."""
        self.spec = spec
        if pdf_store is None and spec.path is not None:
            pdf_store = spec.path / f"{spec.collection}-pdf"  # in-process mode: beside the data, on this machine
        self.pdf_store = Path(pdf_store) if pdf_store else None
        # the PDFs of the in-process mode's own folder are this collection's alone: collected by its
        # manifests; a --pdf-store elsewhere may be shared by several collections: by reference records
        self.pdf_store_owned = self.pdf_store is not None and spec.path is not None and (
            os.path.realpath(self.pdf_store) == os.path.realpath(spec.path / f"{spec.collection}-pdf"))
        self._client = client
        self._shared = client is not None
        self.clock = clock
        self.renew_every_s = renew_every_s
        self.lease: _Lease | None = None
        self._may_create = False  # readers never create an in-process folder; writers may
        self.legacy_paths = False
        self.head_format: str | None = None  # HEAD's `format` of the manifest last read (older: upgraded by the next writer)

    # plumbing

    @property
    def location(self) -> str:
        return self.spec.location

    @property
    def local_folders(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.spec.path, self.pdf_store) if p is not None)

    @property
    def client(self):
        if self._client is None:
            self._client = connection.connect_qdrant(self)
        return self._client

    def writable(self) -> "QdrantStore":
        """This store is about to be written: an in-process folder may be created."""
        self._may_create = True
        return self

    def close(self) -> None:
        if self._client is not None and not self._shared:
            self._client.close()
        self._client = None if not self._shared else self._client

    @contextmanager
    def talking(self, what: str) -> Iterator[None]:
        """Errors of the client (a refused connection, a server error) as one message."""
        try:
            yield
        except LgptError:
            raise
        except Exception as exc:  # qdrant-client raises httpx, grpc and its own types
            from ...core.errors import EnvironmentMissing

            text = " ".join(str(exc).split())[:300] or type(exc).__name__
            if any(word in text for word in ("Connection refused", "ConnectError", "Name or service", "timed out", "UNAVAILABLE")):
                raise EnvironmentMissing(f"cannot reach Qdrant at {self.location} ({text}).") from None
            raise IndexProblem(f"{self.location}: {what} failed ({type(exc).__name__}: {text}).") from None

    def physical(self) -> str | None:
        """The collection the name points to (an alias), or None when there is no index yet.
        A name that is another tool's collection, or an alias of one, is refused (UsageError)."""
        name = self.spec.collection
        with self.talking("reading the aliases"):
            target = next((a.collection_name for a in self.client.get_aliases().aliases if a.alias_name == name), None)
            if target is None:
                if self.client.collection_exists(name):
                    raise self._foreign(f"{name} is a collection, not an lgpt-index index (whose name is an alias)")
                return None
            named = re.fullmatch(rf"{re.escape(name)}__[0-9a-f]{{10}}", target)
            if not named or (catalog.read_head(self, target) is None and not self.ours_shaped(target)):  # shaped: ours, damaged
                raise self._foreign(f"{name} is an alias of {target}, which is not an lgpt-index index")
        return target

    def ours_shaped(self, name: str) -> bool:
        """A collection with our vectors (a catalog: none at all), as a rebuild creates them."""
        vectors = self.client.get_collection(name).config.params.vectors
        if name.endswith("__catalog"):
            sample = self.client.scroll(name, limit=8, with_payload=["kind"])[0]
            return not vectors and all((p.payload or {}).get("kind") in ("manifest", "head", "blob") for p in sample)
        return isinstance(vectors, dict) and set(vectors) == {VECTOR, POOLED}

    def _foreign(self, what: str) -> UsageError:
        return UsageError(f"--store {self.location}: {what}; refused, nothing was changed or deleted.",
                          hint="Name a collection that does not exist yet (a build creates it), or one lgpt-index built.")

    @staticmethod
    def catalog_of(physical: str) -> str:
        return catalog_of(physical)

    @property
    def lease_collection(self) -> str:
        return f"{self.spec.collection}__lease"

    # reading

    def exists(self) -> bool:
        physical = self.physical()
        return physical is not None and catalog.read_head(self, physical) is not None

    def head_key(self) -> tuple:
        physical = self.physical()
        head = catalog.read_head(self, physical) if physical else None
        return (physical, head.get("generation") if head else None)

    def read_manifest(self, physical: str | None = None) -> Manifest | None:
        physical = physical or self.physical()
        if physical is None:
            return None
        head = catalog.read_head(self, physical)
        if head is None:
            return None
        manifest = catalog.read_catalog(self, physical, head)
        self.legacy_paths = head.get("paths") != PATHS_VERSION  # of the manifest last read
        self.head_format = head.get("format")
        return manifest

    def open(self) -> Manifest:
        manifest = self.read_manifest()
        if manifest is None:
            raise IndexProblem(f"no index at {self.location}.", hint="Build one first: lgpt-index build DOCS --store URL.")
        return manifest

    def open_view(self) -> QdrantView:
        physical = self.physical()
        manifest = self.read_manifest(physical) if physical is not None else None
        if physical is None or manifest is None:
            raise IndexProblem(f"no index at {self.location}.", hint="Build one first: lgpt-index build DOCS --store URL.")
        catalog.check_count(self, physical, manifest)
        return QdrantView(self, manifest, physical, self.legacy_paths)

    def reopened(self) -> "QdrantStore":
        return self

    def pdf_file(self, rel: str) -> Path:
        if self.pdf_store is None:
            raise LgptError(f"{self.location} keeps no stored PDFs here: page images of converted documents need them.",
                            hint="Pass --pdf-store DIR (or set $LGPT_PDF_STORE): the folder the build stored them in.")
        try:
            regular_size(self.pdf_store, rel)
        except MissingIndexFile:
            raise LgptError(f"{self.pdf_store / rel} is missing from the PDF store.",
                            hint="Point --pdf-store at the folder the build used, or build again.") from None
        return self.pdf_store / rel

    def pdfs(self) -> PdfStore | None:
        """The PDF store, as a writer or a checker sees it (None: no --pdf-store here)."""
        if self.pdf_store is None:
            return None
        refs = None if self.pdf_store_owned else SharedRefs(self.pdf_store, self.location)
        return PdfStore(self.pdf_store, owned=self.pdf_store_owned, marker=PDF_STORE_MARKER, refs=refs)

    def size_bytes(self, manifest: Manifest) -> int:
        """Vectors as Qdrant holds them (float16 with the server's datatype), plus the stored PDFs here."""
        total = sum(s.rows * s.dim * 2 for s in manifest.segments.values())
        pdfs = self.pdfs()
        return total + (pdfs.size(manifest) if pdfs is not None else 0)

    def verify(self) -> list[str]:
        """The catalog, the collection's configuration, and every document's pages against the points."""
        return checks.verify(self)

    def verify_notes(self) -> list[str]:
        """What verify says beside damage: records of a shared --pdf-store whose collection is gone."""
        return checks.gone_records(self)

    def scroll(self, collection: str, flt, fields: list[str] | bool = True, with_vectors: bool | list[str] = False):
        offset = None
        while True:
            with self.talking("reading points"):
                records, offset = self.client.scroll(collection, scroll_filter=flt, limit=256, offset=offset,
                                                     with_payload=fields, with_vectors=with_vectors)
            yield from records
            if offset is None:
                return

    # writing

    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> AbstractContextManager[Transaction]:
        """The one writer's transaction (transaction.py's open_transaction; qdrant/txn.py's parts and backend)."""
        return open_transaction(QdrantParts(self), wait_s, rebuild)
