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

import hashlib
import os
import re
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ...core.errors import IndexBusy, IndexProblem, LgptError, UsageError
from ...core.failpoints import failpoint
from ...core.files import sha256_file
from ...core.types import PageRef
from ..errors import IndexWriteError, MissingIndexFile
from ..files import regular_size
from ..holder import gone_here, holder_text
from ..local.layout import NAME_PATTERN
from ..manifest import (
    FORMAT,
    REBUILD_HINT,
    Document,
    Failure,
    Manifest,
    ModelInfo,
    Segment,
    Settings,
    Span,
)
from ..pdfstore import PdfStore
from ..view import IndexView

PENDING = 1 << 40
VECTOR, POOLED = "page", "pooled"
NAMESPACE = uuid.UUID("6f1e2a63-6a5e-4b53-9b8e-2d3f0c1a7e55")
HEAD_ID = str(uuid.uuid5(NAMESPACE, "head"))
LEASE_ID = str(uuid.uuid5(NAMESPACE, "lease"))
CHUNK_CHARS = 1 << 20
UPSERT_BATCH = 16
LEASE_TTL_S = 120.0
LEASE_RENEW_S = LEASE_TTL_S / 4  # the timer's period
LEASE_MARGIN_S = LEASE_TTL_S / 4  # a writer stops this long before its lease could run out
NO_TOKEN = "-"  # matches no lease: a conditional upsert with it inserts only where there is none
PATHS_VERSION = 2  # HEAD's `paths`: payloads carry path_raw for paths that are not UTF-8
PDF_STORE_MARKER = ".lgpt-pdf-store"  # discovery skips a folder that holds it
MIN_SERVER = (1, 16)  # conditional updates (update_filter): the lease's compare-and-swap


def point_id(segment: str, row: int) -> str:
    return str(uuid.uuid5(NAMESPACE, f"{segment}:{row}"))


def chunk_id(generation: int, chunk: int, key: str | None = None) -> str:
    """A catalog chunk's point: per writer (`key`), so that two writers' catalogs of one generation never mix."""
    return str(uuid.uuid5(NAMESPACE, f"manifest:{generation}:{chunk}" + (f":{key}" if key else "")))


def payload_path(path: str) -> str:
    """A path as JSON can carry it: bytes that are not UTF-8 as backslash escapes (readable, not unique)."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def path_fields(path: str) -> dict[str, str]:
    """The payload fields naming a page's document: `path`, and `path_raw` where it is not UTF-8."""
    shown = payload_path(path)
    return {"path": shown} if shown == path else {"path": shown, "path_raw": os.fsencode(path).hex()}


def doc_key(path: str, legacy: bool = False) -> tuple[str, str]:
    """What a document's points are found under (`legacy`: a collection from before path_raw)."""
    fields = path_fields(path)
    if legacy or "path_raw" not in fields:
        return ("text", fields["path"])
    return ("raw", fields["path_raw"])


def point_key(payload: dict, legacy: bool = False) -> tuple[str, str]:
    if legacy or "path_raw" not in payload:
        return ("text", str(payload.get("path")))
    return ("raw", str(payload["path_raw"]))


def check_server_version(version: str, where: str) -> None:
    """Writers need conditional updates: Qdrant 1.16 or later (an older server would ignore the condition)."""
    from ...core.errors import EnvironmentMissing

    numbers = re.match(r"v?(\d+)\.(\d+)", version or "")
    if numbers is None or (int(numbers[1]), int(numbers[2])) < MIN_SERVER:
        raise EnvironmentMissing(f"{where} runs Qdrant {version or '(unknown version)'}; writing an index needs "
                                 f"{MIN_SERVER[0]}.{MIN_SERVER[1]} or later (conditional updates, for the writer's lease).",
                                 hint="Upgrade the Qdrant server (or qdrant-client, for qdrant+path://); readers work as they are.")


class LeaseLost(IndexBusy):
    """This writer's lease ran out or was taken over: it stops, nothing more of it is written."""


@dataclass(frozen=True)
class QdrantSpec:
    collection: str
    path: Path | None = None  # local (in-process) mode
    url: str | None = None  # a server or cluster
    api_key: str | None = None
    shards: int | None = None  # for the collections a build creates on a cluster (?shards=N&replicas=M)
    replicas: int | None = None

    @property
    def location(self) -> str:
        return f"qdrant+path://{self.path}/{self.collection}" if self.path else f"{self.url}/{self.collection}".replace("http", "qdrant", 1)


def parse_store_url(url: str, api_key: str | None = None) -> QdrantSpec:
    """qdrant://HOST:PORT/COLLECTION, qdrants://... (https), qdrant+path://DIR/COLLECTION (in-process);
    a cluster's collections take ?shards=N&replicas=M."""
    from urllib.parse import parse_qs

    url, _, query = url.partition("?")
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    if set(options) - {"shards", "replicas"} or not all(v.isdigit() and 1 <= int(v) <= 1024 for v in options.values()):
        raise UsageError(f"--store {url}?{query}: the only options are shards=N and replicas=M (whole numbers).")
    counts = {k: int(v) for k, v in options.items()}
    for prefix, scheme in (("qdrant+path://", None), ("qdrants://", "https"), ("qdrant://", "http")):
        if url.startswith(prefix):
            rest = url[len(prefix):]
            where, _, collection = rest.rpartition("/")
            if not where or not NAME_PATTERN.match(collection):
                raise UsageError(f"--store {url}: expected {prefix}{'DIR' if scheme is None else 'HOST:PORT'}/COLLECTION "
                                 "(a collection name of letters, digits, '-' and '_').")
            if scheme is None:
                return QdrantSpec(collection, path=Path(os.path.abspath(os.path.expanduser(where))))
            _check_host(url, where)
            return QdrantSpec(collection, url=f"{scheme}://{where}", api_key=api_key, **counts)
    raise UsageError(f"--store {url}: expected local, qdrant://HOST:PORT/COLLECTION, qdrants://... or qdrant+path://DIR/COLLECTION.")


def _check_host(url: str, where: str) -> None:
    """HOST[:PORT] of a server URL: a host name or address, a port from 1 to 65535."""
    from urllib.parse import urlsplit

    problem = None
    try:
        parts = urlsplit(f"//{where}")
        port = parts.port
    except ValueError as exc:  # a port that is not a number, or out of range
        problem = str(exc)
    else:
        if not parts.hostname or parts.username is not None or parts.password is not None or parts.path:
            problem = "no host name" if not parts.hostname else "expected HOST:PORT only"
        elif port is not None and port < 1:
            problem = "port 0"
    if problem:
        raise UsageError(f"--store {url}: {where!r} is not HOST:PORT ({problem}); the port is a number from 1 to 65535.")


def _models():
    try:
        from qdrant_client import models
    except ImportError:  # pragma: no cover - a broken install
        from ...core.errors import EnvironmentMissing

        raise EnvironmentMissing("qdrant-client is not installed.", hint="pip install 'lgpt-index[qdrant]'") from None
    return models


def _flt(**conditions: Any):
    """A payload filter from keyword conditions: key=value (match), key=(lo, hi) (range, inclusive)."""
    models = _models()
    must = []
    for key, value in conditions.items():
        key = key.replace("__", ".")
        if isinstance(value, tuple):
            must.append(models.FieldCondition(key=key, range=models.Range(gte=value[0], lte=value[1])))
        else:
            must.append(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
    return models.Filter(must=must)


def visible_filter(generation: int, filters: dict[str, str] | None = None):
    """The points a reader of `generation` sees (and, with `filters`, only those documents' pages)."""
    models = _models()
    must = [models.FieldCondition(key="visible_from", range=models.Range(lte=generation))]
    for key, value in (filters or {}).items():
        must.append(models.FieldCondition(key=f"metadata.{key}", match=models.MatchValue(value=value)))
    return models.Filter(must=must, must_not=[models.FieldCondition(key="gen_removed", range=models.Range(lte=generation))])


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
        # the PDFs of the in-process mode's own folder are this collection's alone: collected after a
        # commit; a --pdf-store elsewhere may be shared by several collections, so it is never cleaned
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
            self._client = self._connect()
        return self._client

    def _connect(self):
        _models()
        from qdrant_client import QdrantClient

        if self.spec.path is not None:
            self._check_folder()
        try:
            if self.spec.path is not None:
                # one lock around every call: the in-process mode is not thread-safe, and the lease's timer thread calls it
                return _Serialized(QdrantClient(path=str(self.spec.path), force_disable_check_same_thread=True))
            # check_compatibility would print a raw warning when the server is down; our own message says it
            return QdrantClient(url=self.spec.url, api_key=self.spec.api_key, timeout=60, check_compatibility=False)
        except RuntimeError as exc:  # in-process mode: one process at a time
            if "already accessed" in str(exc):
                raise IndexBusy(f"{self.location} is open in another process: Qdrant's in-process mode allows one at a time.",
                                hint="Stop the other process (a build, a serve), or use a Qdrant server for readers beside writers.") from None
            raise IndexProblem(f"{self.location}: {' '.join(str(exc).split())[:200]}") from None

    def writable(self) -> "QdrantStore":
        """This store is about to be written: an in-process folder may be created."""
        self._may_create = True
        return self

    def _check_folder(self) -> None:
        """An in-process folder is opened only where Qdrant's data is; a writer may start an empty or new one."""
        folder = self.spec.path
        if (folder / "meta.json").is_file():
            return
        if not folder.exists():
            if self._may_create:
                return
            raise IndexProblem(f"no index at {self.location}: {folder} does not exist (nothing was created).",
                               hint="Check the path, or build one first: lgpt-index build DOCS --store URL.")
        if not folder.is_dir() or any(folder.iterdir()):
            raise UsageError(f"--store {self.location}: {folder} is not a Qdrant in-process folder (no meta.json); refused, "
                             "nothing was written there.", hint="Name a new or empty folder, or the one a build used.")
        if not self._may_create:
            raise IndexProblem(f"no index at {self.location}: {folder} is empty.",
                               hint="Build one first: lgpt-index build DOCS --store URL.")

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
            if not named or (self._head(target) is None and not self.ours_shaped(target)):  # shaped: ours, damaged
                raise self._foreign(f"{name} is an alias of {target}, which is not an lgpt-index index")
        return target

    def ours_shaped(self, name: str) -> bool:
        """A collection with our vectors (a catalog: none at all), as a rebuild creates them."""
        vectors = self.client.get_collection(name).config.params.vectors
        if name.endswith("__catalog"):
            sample = self.client.scroll(name, limit=8, with_payload=["kind"])[0]
            return not vectors and all((p.payload or {}).get("kind") in ("manifest", "head") for p in sample)
        return isinstance(vectors, dict) and set(vectors) == {VECTOR, POOLED}

    def _foreign(self, what: str) -> UsageError:
        return UsageError(f"--store {self.location}: {what}; refused, nothing was changed or deleted.",
                          hint="Name a collection that does not exist yet (a build creates it), or one lgpt-index built.")

    @staticmethod
    def catalog_of(physical: str) -> str:
        return f"{physical}__catalog"

    @property
    def lease_collection(self) -> str:
        return f"{self.spec.collection}__lease"

    # reading

    def exists(self) -> bool:
        physical = self.physical()
        return physical is not None and self._head(physical) is not None

    def _head(self, physical: str) -> dict | None:
        with self.talking("reading HEAD"):
            if not self.client.collection_exists(self.catalog_of(physical)):
                return None
            found = self.client.retrieve(self.catalog_of(physical), [HEAD_ID], with_payload=True)
        head = dict(found[0].payload) if found else None
        return head if head and head.get("kind") == "head" else None

    def head_key(self) -> tuple:
        physical = self.physical()
        head = self._head(physical) if physical else None
        return (physical, head.get("generation") if head else None)

    def read_manifest(self, physical: str | None = None) -> Manifest | None:
        physical = physical or self.physical()
        if physical is None:
            return None
        head = self._head(physical)
        if head is None:
            return None
        manifest = self._manifest(physical, head)
        self.legacy_paths = head.get("paths") != PATHS_VERSION  # of the manifest last read
        self.head_format = head.get("format")
        return manifest

    def _manifest(self, physical: str, head: dict) -> Manifest:
        where = f"{self.location} (generation {head.get('generation')})"
        try:
            generation, chunks, digest = int(head["generation"]), int(head["chunks"]), str(head["sha256"])
        except (KeyError, TypeError, ValueError):
            raise IndexProblem(f"{where}: the HEAD point is malformed.", hint=REBUILD_HINT) from None
        ids = [chunk_id(generation, i, head.get("chunk_key")) for i in range(chunks)]
        with self.talking("reading the catalog"):
            found = {r.id: r.payload for r in self.client.retrieve(self.catalog_of(physical), ids, with_payload=True)}
        if len(found) != chunks:
            raise IndexProblem(f"{where}: {chunks - len(found)} of {chunks} catalog chunks are missing.", hint=REBUILD_HINT)
        text = "".join(str(found[i].get("data", "")) for i in ids)
        raw = text.encode("utf-8", "surrogatepass")
        if hashlib.sha256(raw).hexdigest() != digest:
            raise IndexProblem(f"{where}: checksum mismatch; the catalog is damaged.", hint=REBUILD_HINT)
        manifest = Manifest.from_json(raw, where)
        if manifest.generation != generation:
            raise IndexProblem(f"{where}: the catalog says generation {manifest.generation}.", hint=REBUILD_HINT)
        return manifest

    def open(self) -> Manifest:
        manifest = self.read_manifest()
        if manifest is None:
            raise IndexProblem(f"no index at {self.location}.", hint="Build one first: lgpt-index build DOCS --store URL.")
        return manifest

    def open_view(self):
        physical = self.physical()
        manifest = self.read_manifest(physical)
        if manifest is None:
            raise IndexProblem(f"no index at {self.location}.", hint="Build one first: lgpt-index build DOCS --store URL.")
        self._check_count(physical, manifest)
        return QdrantIndex(self, manifest, physical, self.legacy_paths)

    def _check_count(self, physical: str, manifest: Manifest) -> None:
        """The points a reader sees against the catalog's pages: one count, so that points deleted
        behind the index's back (another client) are damage reported now, not empty answers."""
        with self.talking("counting the points"):
            visible = self.client.count(physical, count_filter=visible_filter(manifest.generation), exact=True).count
        expected = sum(d.pages for d in manifest.documents)
        if visible != expected:
            raise IndexProblem(f"{self.location} is damaged: the catalog names {expected} pages, the collection {physical} "
                               f"holds {visible} of them (points were deleted or added by another client).",
                               hint=f"`lgpt-index verify` lists the documents concerned; {REBUILD_HINT}")

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
        return PdfStore(self.pdf_store, owned=self.pdf_store_owned, marker=PDF_STORE_MARKER)

    def size_bytes(self, manifest: Manifest) -> int:
        """Vectors as Qdrant holds them (float16 with the server's datatype), plus the stored PDFs here."""
        total = sum(s.rows * s.dim * 2 for s in manifest.segments.values())
        pdfs = self.pdfs()
        return total + (pdfs.size(manifest) if pdfs is not None else 0)

    def verify(self) -> list[str]:
        """The catalog, the collection's configuration, and every document's pages against the points."""
        try:
            physical = self.physical()
            manifest = self.read_manifest(physical)
            if manifest is None:
                return [f"no index at {self.location}."]
            return self._verify(physical, manifest)
        except UsageError:
            raise  # not an index of ours at all (another tool's collection): not damage
        except LgptError as exc:
            return [exc.message]

    def _verify(self, physical: str, manifest: Manifest) -> list[str]:
        problems = []
        with self.talking("reading the collection"):
            info = self.client.get_collection(physical)
        params = info.config.params.vectors
        page = params.get(VECTOR) if isinstance(params, dict) else None
        dim = manifest.model.dim or manifest.settings.dim
        if page is None or page.multivector_config is None or (dim and page.size != dim):
            problems.append(f"{physical}: its '{VECTOR}' vectors are not {dim}-d multi-vectors.")
        legacy = self.legacy_paths
        seen: dict[tuple[str, str], set[int]] = {}
        shown: dict[tuple[str, str], str] = {}
        for record in self.scroll(physical, visible_filter(manifest.generation), ["path", "path_raw", "page"]):
            key = point_key(record.payload, legacy)
            seen.setdefault(key, set()).add(int(record.payload["page"]))
            shown[key] = str(record.payload["path"])
        expected = {doc_key(d.path, legacy): (d.path, set(range(1, d.pages + 1))) for d in manifest.documents}
        for key, (path, pages) in expected.items():
            if seen.get(key) != pages:
                problems.append(f"{path}: {len(seen.get(key, ()))} of its {len(pages)} pages are in the collection.")
        for key in set(seen) - set(expected):
            problems.append(f"{shown[key]}: {len(seen[key])} page(s) in the collection but not in the catalog.")
        for doc in [*manifest.documents, *manifest.in_progress]:
            if doc.pdf and self.pdf_store is not None:
                pdf = self.pdf_store / doc.pdf
                try:
                    regular_size(self.pdf_store, doc.pdf)  # never through a link out of the store
                except MissingIndexFile:
                    problems.append(f"{pdf}: missing (the converted PDF of {doc.path}).")
                except IndexProblem as exc:
                    problems.append(f"{exc.message} (the converted PDF of {doc.path})")
                else:
                    if sha256_file(pdf) != doc.pdf_sha256:
                        problems.append(f"{pdf}: sha256 mismatch; the converted PDF of {doc.path} is damaged.")
        return problems

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

    @contextmanager
    def begin(self, wait_s: float = 0.0, rebuild: bool = False) -> Iterator["QdrantTransaction"]:
        self.writable().physical()  # another tool's collection is refused before anything is created
        with self._lease(wait_s) as lease:
            physical = self.physical()
            try:
                base = self.read_manifest(physical) if physical else None
            except IndexProblem as exc:
                if not rebuild:
                    raise IndexProblem(f"{exc.message} Nothing was changed.", hint=REBUILD_HINT) from None
                base = None
            transaction = QdrantTransaction(self, physical, base, rebuild, lease)
            transaction.recover()
            try:
                yield transaction
            finally:
                transaction.discard_staged()

    @contextmanager
    def _lease(self, wait_s: float) -> Iterator["_Lease"]:
        """One writer per collection: the lease point, taken by compare-and-swap, renewed by a timer."""
        lease = _Lease(self)
        deadline = time.monotonic() + wait_s
        with self.talking("taking the lease"):
            check_server_version(self.client.info().version, self.location)
            if not self.client.collection_exists(self.lease_collection):
                self.client.create_collection(self.lease_collection, vectors_config={})
            while not lease.take():
                if time.monotonic() >= deadline:
                    current = lease.read() or {}
                    until = time.strftime("%H:%M:%S", time.localtime(float(current.get("expires", 0))))
                    raise IndexBusy(f"{self.location} is being written by {current.get('holder', 'another writer')} "
                                    f"(its lease runs until {until} unless renewed).",
                                    hint="Wait for it to finish, or pass --wait SECONDS; a crashed writer's lease expires by itself.")
                time.sleep(0.5)
        self.lease = lease
        lease.start()
        try:
            yield lease
        finally:
            lease.release()
            self.lease = None


class _Lease:
    """A writer's hold on a collection: the lease point's owner token and expiry, changed only by
    conditional upserts (compare-and-swap on the token and a version), renewed by a timer thread."""

    def __init__(self, store: QdrantStore) -> None:
        self.store = store
        self.token = uuid.uuid4().hex
        self.holder = holder_text()
        self.expires = 0.0  # as last confirmed
        self.version = 0
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def client(self):
        return self.store.client

    def read(self) -> dict | None:
        found = self.client.retrieve(self.store.lease_collection, [LEASE_ID], with_payload=True)
        return dict(found[0].payload) if found else None

    def _write(self, expected_token: str, expected_version: int | None) -> dict | None:
        """Upsert our lease where the point holds `expected_token` (and version), or where there is none;
        returns the point as read back."""
        models = _models()
        must = [models.FieldCondition(key="token", match=models.MatchValue(value=expected_token))]
        if expected_version is not None:
            must.append(models.FieldCondition(key="version", match=models.MatchValue(value=expected_version)))
        self.version += 1
        payload = {"holder": self.holder, "token": self.token, "version": self.version,
                   "expires": self.store.clock() + LEASE_TTL_S}
        self.client.upsert(self.store.lease_collection, [models.PointStruct(id=LEASE_ID, vector={}, payload=payload)],
                           update_filter=models.Filter(must=must), wait=True)
        return self.read()

    def take(self) -> bool:
        """One attempt: the lease is ours if there was none, it had expired, or its holder was killed here."""
        current = self.read()
        if current is not None and float(current.get("expires", 0)) >= self.store.clock() and not _holder_gone(current):
            return False
        failpoint("lease-take")
        if current is None:
            after = self._write(NO_TOKEN, None)
        else:
            self.version = int(current.get("version", 0) or 0)
            after = self._write(str(current.get("token")), self.version if "version" in current else None)
        if after is None or after.get("token") != self.token:
            return False
        self.expires = float(after["expires"])
        return True

    def renew(self) -> None:
        """Extend the lease if it is still ours; otherwise it is lost, and the writer stops."""
        if self.lost:
            return
        failpoint("lease-renew")
        after = self._write(self.token, None)
        if after is None or after.get("token") != self.token:
            holder = (after or {}).get("holder", "another writer")
            self.lost = f"its lease was taken over by {holder}"
        else:
            self.expires = float(after["expires"])
            failpoint("lease-renewed")

    def _run(self) -> None:
        while not self._stop.wait(self.store.renew_every_s) and not self.lost:
            try:
                self.renew()
            except Exception:  # a transient error: the next tick tries again; check() fences on the expiry
                pass

    def start(self) -> None:
        name = f"{threading.current_thread().name}-lease"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raise LeaseLost unless the lease is ours with time to spare (the fence before every write)."""
        if not self.lost and self.store.clock() >= self.expires - LEASE_MARGIN_S:
            self.lost = "its lease could not be renewed in time"
        if self.lost:
            raise LeaseLost(f"{self.store.location}: this writer stopped, {self.lost}; nothing more of it was written, "
                            "and no other writer's work was touched.",
                            hint="Run the command again: a build carries on from the last commit.")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.lost:
            return
        models = _models()
        try:
            self.client.delete(self.store.lease_collection, points_selector=models.FilterSelector(filter=models.Filter(must=[
                models.HasIdCondition(has_id=[LEASE_ID]),
                models.FieldCondition(key="token", match=models.MatchValue(value=self.token))])))
        except Exception:
            pass  # it expires


class _Serialized:
    """A client whose calls take one lock (the in-process mode is not thread-safe)."""

    def __init__(self, client: Any) -> None:
        self._inner = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attribute(*args, **kwargs)

        return call


class QdrantSegmentWriter:
    """Upserts pages as points in batches; `rows` records whose page each row is."""

    def __init__(self, txn: "QdrantTransaction", dim: int) -> None:
        self.txn, self.dim = txn, dim
        self.id = f"seg-{uuid.uuid4().hex}"
        self.lengths: list[int] = []
        self.owners: list[str] = []
        self._batch: list = []

    @property
    def pages(self) -> int:
        return len(self.lengths)

    def append(self, vectors: np.ndarray, page: PageRef | None = None, visible_from: int = PENDING) -> int:
        if page is None:
            raise ValueError("a Qdrant store needs to know whose page each vector block is")
        block = np.asarray(vectors, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != self.dim or block.shape[0] < 1:
            raise ValueError(f"a page of shape {block.shape}, expected (tokens >= 1, {self.dim})")
        row = len(self.lengths)
        self._batch.append(self.txn.point(self.id, row, block, page, visible_from))
        self.lengths.append(int(block.shape[0]))
        self.owners.append(page.path)
        if len(self._batch) >= UPSERT_BATCH:
            self.flush()
        if row == 1:
            self.flush()
            failpoint("write-vectors")
        return row

    def flush(self) -> None:
        if self._batch:
            self.txn.upsert(self._batch)
            self._batch = []

    def segment(self) -> Segment:
        return Segment(id=self.id, pages=len(self.lengths), rows=sum(self.lengths), dim=self.dim, storage="qdrant")


class QdrantTransaction:
    """A writer's changes to a Qdrant index; see the module's docstring for what each commit does."""

    def __init__(self, store: QdrantStore, physical: str | None, base: Manifest | None, rebuild: bool,
                 lease: _Lease | None = None) -> None:
        self.store = store
        self.lease = lease
        self.base = base
        self.current = base
        self.previous: Manifest | None = None  # the generation before `current` (a slow reader may still be on it)
        self.generation = base.generation if base else 0
        self.pdfs = store.pdfs()
        self.needs_upgrade = False
        self.previous_physical = physical
        self.rebuild = rebuild or physical is None or base is None
        self.physical = f"{store.spec.collection}__{uuid.uuid4().hex[:10]}" if self.rebuild else physical
        self._created = False
        self._segments: dict[str, Segment] = dict(base.segments) if base else {}
        self._owners: dict[str, list[str]] = {}  # staged segment -> the path of each row
        self._staged: set[str] = set()
        self._writers: list[QdrantSegmentWriter] = []
        self._committed_owners: dict[tuple[str, int], str] | None = None
        self.token = lease.token if lease else uuid.uuid4().hex
        self._wrote = False  # points upserted since the last commit (some perhaps in no finished segment)

    @property
    def client(self):
        return self.store.client

    @property
    def catalog(self) -> str:
        return QdrantStore.catalog_of(self.physical)

    @contextmanager
    def writing(self) -> Iterator[None]:
        try:
            with self.store.talking("writing"):
                yield
        except LeaseLost:
            raise
        except OSError as exc:  # the PDF store
            raise IndexWriteError(f"could not write to {self.store.location}: {exc.strerror or exc}; "
                                  f"the index keeps generation {self.generation}.") from None
        except IndexProblem as exc:
            if isinstance(exc, IndexWriteError):
                raise
            self.fence()  # a takeover (its recovery deleted what we wrote) is said as such
            raise IndexWriteError(f"{exc.message} The index keeps generation {self.generation}.",
                                  hint="Fix the cause and run the command again: a build carries on from the last commit.") from None

    def fence(self) -> None:
        """Stop (LeaseLost) unless this writer still holds its lease with time to spare."""
        if self.lease is not None:
            self.lease.check()

    # set-up and recovery

    def _ensure_collections(self, dim: int) -> None:
        if self._created:
            return
        models = _models()
        server = self.store.spec.path is None
        with self.writing():
            if not self.client.collection_exists(self.physical):
                self.client.create_collection(self.physical, vectors_config={
                    VECTOR: models.VectorParams(
                        size=dim, distance=models.Distance.DOT, datatype=models.Datatype.FLOAT16,
                        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                        hnsw_config=models.HnswConfigDiff(m=0),  # no graph: MaxSim over every visible page, exact
                        on_disk=server or None,  # a server keeps the big multi-vectors on disk, the pooled ones in RAM
                    ),
                    POOLED: models.VectorParams(size=dim, distance=models.Distance.DOT),
                }, shard_number=self.store.spec.shards, replication_factor=self.store.spec.replicas)
                if self.store.spec.path is None:  # a server filters faster with them; the in-process mode has none
                    for field, schema in (("path", "keyword"), ("sha256", "keyword"), ("visible_from", "integer"),
                                          ("gen_removed", "integer"), ("gen_written", "integer")):
                        self.client.create_payload_index(self.physical, field, field_schema=schema)
            if not self.client.collection_exists(self.catalog):
                self.client.create_collection(self.catalog, vectors_config={})
        self._created = True

    def recover(self) -> None:
        """Undo what a writer killed before its commit left: points and catalog chunks above HEAD's
        generation, pages it made visible or removed, and physical collections of a rebuild that
        never switched the alias."""
        import re

        models = _models()
        g = self.generation
        ours = re.compile(rf"^{re.escape(self.store.spec.collection)}__[0-9a-f]{{10}}(__catalog)?$")
        keep = {self.previous_physical, QdrantStore.catalog_of(self.previous_physical)} if self.previous_physical else set()
        if self.pdfs is not None:
            self.pdfs.sweep_temporary()
        with self.writing():
            for name in [c.name for c in self.client.get_collections().collections]:
                if ours.match(name) and name not in keep and self.store.ours_shaped(name):
                    self.client.delete_collection(name)
            if self.previous_physical is None or self.base is None:
                return
            physical = self.previous_physical
            self._claim_head(physical)
            self.client.delete(physical, points_selector=models.FilterSelector(filter=_flt(gen_written=(g + 1, PENDING))))
            self.client.set_payload(physical, {"visible_from": PENDING}, points=_flt(visible_from=(g + 1, PENDING - 1)))
            self.client.delete_payload(physical, keys=["gen_removed"], points=_flt(gen_removed=(g + 1, PENDING)))
            self.client.delete(QdrantStore.catalog_of(physical), points_selector=models.FilterSelector(
                filter=_flt(generation=(g + 1, PENDING))))
            if self.store.legacy_paths and not self.rebuild:
                self._upgrade_paths()
            if self.store.head_format != FORMAT and not self.rebuild:
                self.needs_upgrade = True  # an older catalog (migrated on read): the next commit writes the current format
        self._created = not self.rebuild

    def _claim_head(self, physical: str) -> None:
        """HEAD names this writer: a writer that lost its lease can no longer replace it (see _write_head)."""
        models = _models()
        self.client.set_payload(QdrantStore.catalog_of(physical), {"writer": self.token},
                                points=models.PointIdsList(points=[HEAD_ID]), wait=True)

    def _upgrade_paths(self) -> None:
        """A collection from before path_raw: its pages of paths that are not UTF-8 get it; the
        commit that follows marks HEAD, and from then on they are read by their exact bytes."""
        models = _models()
        for doc in [*self.base.documents, *self.base.in_progress]:
            fields = path_fields(doc.path)
            if "path_raw" in fields:
                ids = [point_id(seg, row) for seg, row in self._rows(doc)]
                self.client.set_payload(self.previous_physical, fields, points=models.PointIdsList(points=ids), wait=True)
        self.needs_upgrade = True

    # staging

    def point(self, segment: str, row: int, block: np.ndarray, page: PageRef, visible_from: int):
        models = _models()
        pooled = block.mean(axis=0)
        pooled = pooled / (np.linalg.norm(pooled) or 1.0)
        payload = {**path_fields(page.path), "page": page.page, "sha256": page.sha256, "kind": page.kind,
                   "metadata": dict(page.metadata), "segment": segment, "row": row,
                   "gen_written": self.generation + 1, "visible_from": visible_from, "writer": self.token}
        return models.PointStruct(id=point_id(segment, row), vector={VECTOR: block, POOLED: pooled}, payload=payload)

    def upsert(self, points: list) -> None:
        failpoint("upsert")
        self.fence()
        self._wrote = True
        with self.writing():
            for attempt in range(4):
                try:
                    self.client.upsert(self.physical, points, wait=True)
                    break
                except Exception:
                    if attempt == 3:
                        raise
                    time.sleep(0.5 * 2 ** attempt)  # a transient error of a server: retried

    def segment_writer(self, dim: int) -> QdrantSegmentWriter:
        self._ensure_collections(dim)
        writer = QdrantSegmentWriter(self, dim)
        self._writers.append(writer)
        return writer

    def finish_segment(self, writer: QdrantSegmentWriter) -> Segment | None:
        self._writers.remove(writer)
        if not writer.pages:
            return None
        writer.flush()
        segment = writer.segment()
        self._segments[segment.id] = segment
        self._owners[segment.id] = list(writer.owners)
        self._staged.add(segment.id)
        return segment

    def write_segment(self, pages: Sequence[np.ndarray], dim: int, refs: Sequence[PageRef] | None = None) -> Segment:
        if refs is None:
            raise ValueError("a Qdrant store needs to know whose page each vector block is")
        writer = self.segment_writer(dim)
        for page, ref in zip(pages, refs):
            writer.append(page, ref)
        segment = self.finish_segment(writer)
        if segment is None:
            raise ValueError("a segment needs at least one page")
        return segment

    def store_pdf(self, pdf: Path) -> tuple[str, str] | None:
        """A converted PDF into the PDF store, named by its own sha256 (None without a PDF store)."""
        if self.pdfs is None:
            return None
        with self.writing():
            return self.pdfs.put(pdf)

    def pdf_path(self, rel: str) -> Path:
        return self.store.pdf_file(rel)

    # commit

    def commit(self, documents: Sequence[Document], model: ModelInfo, settings: Settings,
               failures: Sequence[Failure] = (), in_progress: Sequence[Document] = ()) -> Manifest:
        """A new generation of exactly these documents: pages of other paths copied, complete
        documents made visible, pages no document names any more removed, the catalog written,
        then HEAD replaced (and for a rebuild, the alias switched)."""
        self._ensure_collections(model.dim or settings.dim or 128)
        following = self.generation + 1
        with self.writing():
            documents = [self._owned(d, following) for d in documents]
            in_progress = [self._owned(d, PENDING) for d in in_progress]
            failpoint("write-vectors")
            failpoint("before-switch")
            self.fence()  # nothing of the commit's switch is written by a writer that lost its lease
            self._show(documents, following)
            self._remove_unnamed(documents, in_progress, following)
            live = {s.segment for d in [*documents, *in_progress] for s in d.spans}
            manifest = Manifest.model_construct(
                generation=following, created=time.time(), model=model, settings=settings,
                segments={sid: self._segments[sid] for sid in sorted(live)},
                documents=sorted(documents, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
                in_progress=sorted(in_progress, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
                failures=list(failures),
            )
            manifest._references_resolve()
            self.fence()
            self._write_catalog(manifest)
            failpoint("before-head")
            self.fence()
            self._write_head(manifest)
            failpoint("after-head")
            if self.physical != self.previous_physical:
                self.fence()
                self._switch_alias()
        self.previous, self.current, self.generation, self._committed_owners = self.current, manifest, following, None
        self._staged -= live
        self._wrote = bool(self._staged)
        self._collect(following)
        if self.pdfs is not None:
            self.pdfs.committed(manifest)
            self.pdfs.collect([manifest, self.previous])
        return manifest

    def _rows(self, doc: Document) -> list[tuple[str, int]]:
        return [(s.segment, r) for s in doc.spans for r in range(s.first, s.first + s.pages)]

    def _owner_map(self) -> dict[tuple[str, int], str]:
        """Whose page each committed point is (from the previous generation's catalog)."""
        if self._committed_owners is None:
            owners = {}
            for doc in ([*self.current.documents, *self.current.in_progress] if self.current else []):
                for key in self._rows(doc):
                    owners[key] = doc.path
            self._committed_owners = owners
        return self._committed_owners

    def _owner(self, segment: str, row: int) -> tuple[str | None, str]:
        """(path, collection) of the point at (segment, row)."""
        if segment in self._owners:
            return self._owners[segment][row], self.physical
        return self._owner_map().get((segment, row)), self.previous_physical

    def _owned(self, doc: Document, visible_from: int) -> Document:
        """The document with points of its own in the collection being written: pages stored under
        another path (a renamed or duplicated file reuses vectors), or in the collection a rebuild
        replaces, are copied."""
        rows = self._rows(doc)
        owners = [self._owner(seg, row) for seg, row in rows]
        if all(path == doc.path and where == self.physical for path, where in owners):
            self._retag(doc)
            return doc
        fetched: dict[str, np.ndarray] = {}
        by_collection: dict[str, list[str]] = {}
        for (seg, row), (_, where) in zip(rows, owners):
            by_collection.setdefault(where, []).append(point_id(seg, row))
        for where, ids in by_collection.items():
            for start in range(0, len(ids), 64):
                for record in self.client.retrieve(where, ids[start : start + 64], with_vectors=[VECTOR]):
                    fetched[str(record.id)] = np.asarray(record.vector[VECTOR], dtype=np.float32)
        ids = [point_id(seg, row) for seg, row in rows]
        missing = [n for n, pid in enumerate(ids, 1) if pid not in fetched]
        if missing:
            raise IndexProblem(f"{doc.path}: page {missing[0]} of the vectors it reuses is missing.", hint=REBUILD_HINT)
        writer = QdrantSegmentWriter(self, fetched[ids[0]].shape[1])
        for number, pid in enumerate(ids, 1):
            writer.append(fetched[pid], PageRef(doc.path, number, doc.sha256, doc.kind, doc.metadata), visible_from=PENDING)
        writer.flush()
        segment = writer.segment()
        self._segments[segment.id] = segment
        self._owners[segment.id] = list(writer.owners)
        self._staged.add(segment.id)
        return doc.model_copy(update={"spans": [Span(segment=segment.id, first=0, pages=len(ids))]})

    def _retag(self, doc: Document) -> None:
        """New metadata for a document already stored: its points' payload follows (in place)."""
        old = next((d for d in (self.current.documents if self.current else []) if d.path == doc.path), None)
        if old is not None and old.metadata != doc.metadata and old.spans == doc.spans:
            models = _models()
            ids = [point_id(seg, row) for seg, row in self._rows(doc)]
            self.client.set_payload(self.physical, {"metadata": dict(doc.metadata)}, points=models.PointIdsList(points=ids))

    def _show(self, documents: list[Document], generation: int) -> None:
        """Pages of complete documents that were waiting (PENDING) become visible from `generation`."""
        models = _models()
        previous = {d.path: d for d in (self.current.documents if self.current else [])}
        ids = [point_id(seg, row) for d in documents if previous.get(d.path) != d for seg, row in self._rows(d)]
        for start in range(0, len(ids), 1024):
            self.fence()
            self.client.set_payload(self.physical, {"visible_from": generation}, points=models.Filter(must=[
                models.HasIdCondition(has_id=ids[start : start + 1024]),
                models.FieldCondition(key="visible_from", match=models.MatchValue(value=PENDING))]))

    def _remove_unnamed(self, documents: list[Document], in_progress: list[Document], generation: int) -> None:
        """Pages the previous generation named and this one does not: removed from `generation`."""
        if self.current is None or self.physical != self.previous_physical:
            return
        models = _models()
        live = {key for d in [*documents, *in_progress] for key in self._rows(d)}
        gone = [point_id(seg, row) for d in [*self.current.documents, *self.current.in_progress]
                for seg, row in self._rows(d) if (seg, row) not in live]
        for start in range(0, len(gone), 1024):
            self.fence()
            self.client.set_payload(self.physical, {"gen_removed": generation}, points=models.PointIdsList(points=gone[start : start + 1024]))

    def _write_catalog(self, manifest: Manifest) -> None:
        models = _models()
        text = manifest.to_json().decode("ascii")
        chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
        points = [models.PointStruct(id=chunk_id(manifest.generation, i, self.token), vector={},
                                     payload={"kind": "manifest", "generation": manifest.generation, "chunk": i, "data": chunk})
                  for i, chunk in enumerate(chunks)]
        self.client.upsert(self.catalog, points, wait=True)
        self._head_payload = {"kind": "head", "format": FORMAT, "generation": manifest.generation, "chunks": len(chunks),
                              "sha256": hashlib.sha256(text.encode()).hexdigest(), "physical": self.physical,
                              "paths": PATHS_VERSION, "writer": self.token, "chunk_key": self.token}

    def _write_head(self, manifest: Manifest) -> None:
        """HEAD replaced only where it still names this writer (claimed when the lease was taken): a
        writer whose lease was taken over cannot commit, whatever its clock says."""
        models = _models()
        mine = models.Filter(must=[models.FieldCondition(key="writer", match=models.MatchValue(value=self.token))])
        self.client.upsert(self.catalog, [models.PointStruct(id=HEAD_ID, vector={}, payload=self._head_payload)],
                           update_filter=mine, wait=True)
        found = self.client.retrieve(self.catalog, [HEAD_ID], with_payload=True)
        if not found or found[0].payload.get("writer") != self.token or found[0].payload.get("generation") != manifest.generation:
            if self.lease is not None:
                self.lease.lost = "another writer took over its lease and HEAD"
            self.fence()

    def _switch_alias(self) -> None:
        """Readers move to the new physical collection in one step; the old one is dropped after."""
        models = _models()
        operations = []
        if self.previous_physical is not None:
            operations.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self.store.spec.collection)))
        operations.append(models.CreateAliasOperation(create_alias=models.CreateAlias(
            collection_name=self.physical, alias_name=self.store.spec.collection)))
        self.client.update_collection_aliases(change_aliases_operations=operations)
        old = self.previous_physical
        self.previous_physical = self.physical
        if old is not None:
            for name in (old, QdrantStore.catalog_of(old)):
                try:
                    self.client.delete_collection(name)
                except Exception:
                    pass  # collected by the next writer's recovery

    def _collect(self, generation: int) -> None:
        """Pages removed before the previous generation, and catalogs older than it, are deleted."""
        models = _models()
        try:
            self.client.delete(self.physical, points_selector=models.FilterSelector(filter=_flt(gen_removed=(0, generation - 1))))
            self.client.delete(self.catalog, points_selector=models.FilterSelector(filter=_flt(generation=(0, generation - 2))))
        except Exception:
            pass  # best effort: the next commit tries again

    def discard_staged(self) -> None:
        """Staged points that no commit named: deleted now (a killed writer's are, by the next one)."""
        models = _models()
        self._writers.clear()
        if self.pdfs is not None:
            self.pdfs.discard([self.current, self.previous])
        if not self._staged and not self._wrote:
            return
        try:
            if self.physical != self.previous_physical:
                self.client.delete_collection(self.physical)
                self.client.delete_collection(self.catalog)
            else:  # ours only: after a takeover the points above HEAD may be the new writer's
                self.client.delete(self.physical, points_selector=models.FilterSelector(
                    filter=_flt(gen_written=(self.generation + 1, PENDING), writer=self.token)))
        except Exception:
            pass
        self._staged.clear()


def _holder_gone(lease: dict) -> bool:
    """A lease taken by a process of this machine that no longer runs (killed): no need to wait it out."""
    return gone_here(str(lease.get("holder", "")))


class QdrantIndex(IndexView):
    """A read-only view of one committed generation in Qdrant: the catalog from the catalog
    collection, pages ranked by Qdrant's exact MaxSim over the points visible to it."""

    def __init__(self, store: QdrantStore, manifest: Manifest, physical: str, legacy_paths: bool = False) -> None:
        super().__init__(store, manifest)
        self.physical = physical
        self.legacy_paths = legacy_paths
        self._paths = {doc_key(d.path, legacy_paths): d.path for d in manifest.documents}

    def search_vectors(self, query_vectors, k: int, device: str = "cpu", filters=None, candidates=None):
        """Top-k pages per query; ties go to the earlier path, then the earlier page, as locally.
        With `candidates`, Qdrant first takes that many pages by the pooled vector (lossy)."""
        from ...core.types import SearchHit

        models = _models()
        if not len(query_vectors):
            return []
        flt = visible_filter(self.manifest.generation, filters)
        requests = []
        for query in query_vectors:
            query = np.asarray(query, dtype=np.float32)
            prefetch = None
            if candidates:
                pooled = query.mean(axis=0)
                prefetch = models.Prefetch(query=(pooled / (np.linalg.norm(pooled) or 1.0)).tolist(), using=POOLED,
                                           filter=flt, limit=candidates)
            requests.append(models.QueryRequest(query=query.tolist(), using=VECTOR, filter=flt, prefetch=prefetch,
                                                limit=k + 16, with_payload=["path", "path_raw", "page", "sha256", "kind", "metadata"]))
        with self.store.talking("querying"):
            answers = self.store.client.query_batch_points(self.physical, requests)
        results = []
        for answer in answers:
            named = [(self._paths.get(point_key(p.payload, self.legacy_paths)), p) for p in answer.points]
            points = [(path, p) for path, p in named if path is not None]
            points.sort(key=lambda hit: (-hit[1].score, hit[0].encode("utf-8", "surrogateescape"), hit[1].payload["page"]))
            results.append([
                SearchHit(rank, float(p.score), path, int(p.payload["page"]), p.payload["sha256"],
                          p.payload["kind"], {str(k): str(v) for k, v in (p.payload.get("metadata") or {}).items()})
                for rank, (path, p) in enumerate(points[:k], 1)
            ])
        return results

    def page_vectors(self, doc: Document) -> list[np.ndarray]:
        """Every page's vectors of a document, in page order (exports)."""
        ids = [point_id(s.segment, r) for s in doc.spans for r in range(s.first, s.first + s.pages)]
        found: dict[str, np.ndarray] = {}
        with self.store.talking("reading vectors"):
            for start in range(0, len(ids), 64):
                for record in self.store.client.retrieve(self.physical, ids[start : start + 64], with_vectors=[VECTOR]):
                    found[str(record.id)] = np.asarray(record.vector[VECTOR], dtype=np.float16)
        if len(found) != len(ids):
            raise IndexProblem(f"{doc.path}: {len(ids) - len(found)} of its pages are missing from {self.store.location}.",
                               hint=REBUILD_HINT)
        return [found[i] for i in ids]
