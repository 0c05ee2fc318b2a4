"""Names and shapes of a Qdrant index: point and chunk ids, payload paths, the URL, filters."""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import IndexBusy, UsageError
from ..local.paths import NAME_PATTERN

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
            return QdrantSpec(collection, url=f"{scheme}://{where}", api_key=api_key,
                              shards=counts.get("shards"), replicas=counts.get("replicas"))
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


def catalog_of(physical: str) -> str:
    """The catalog collection beside a physical collection."""
    return f"{physical}__catalog"
