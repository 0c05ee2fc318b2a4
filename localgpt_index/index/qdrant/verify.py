"""`verify` of a Qdrant index: the collection's configuration, every document's pages against the
points, and the stored PDFs (regular files inside the PDF store, sha256)."""

from __future__ import annotations

from typing import Any

from ...core.errors import IndexProblem, LgptError, UsageError
from ...core.files import sha256_file
from ..errors import MissingIndexFile
from ..artifacts import check_all
from ..files import regular_size
from ..manifest import (
    Manifest,
)
from .blobs import QdrantBlobs
from .ids import (
    VECTOR,
    doc_key,
    point_key,
    visible_filter,
)


def verify_points(store: Any, physical: str, manifest: Manifest) -> list[str]:
    problems = []
    with store.talking("reading the collection"):
        info = store.client.get_collection(physical)
    params = info.config.params.vectors
    page = params.get(VECTOR) if isinstance(params, dict) else None
    dim = manifest.model.dim or manifest.settings.dim
    if page is None or page.multivector_config is None or (dim and page.size != dim):
        problems.append(f"{physical}: its '{VECTOR}' vectors are not {dim}-d multi-vectors.")
    legacy = store.legacy_paths
    seen: dict[tuple[str, str], set[int]] = {}
    shown: dict[tuple[str, str], str] = {}
    for record in store.scroll(physical, visible_filter(manifest.generation), ["path", "path_raw", "page"]):
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
        if doc.pdf and store.pdf_store is not None:
            pdf = store.pdf_store / doc.pdf
            try:
                regular_size(store.pdf_store, doc.pdf)  # never through a link out of the store
            except MissingIndexFile:
                problems.append(f"{pdf}: missing (the converted PDF of {doc.path}).")
            except IndexProblem as exc:
                problems.append(f"{exc.message} (the converted PDF of {doc.path})")
            else:
                if sha256_file(pdf) != doc.pdf_sha256:
                    problems.append(f"{pdf}: sha256 mismatch; the converted PDF of {doc.path} is damaged.")
    return problems + check_all(manifest, QdrantBlobs(store, store.catalog_of(physical)))


def verify(store: Any) -> list[str]:
    """The catalog, the collection's configuration, and every document's pages against the points."""
    try:
        physical = store.physical()
        manifest = store.read_manifest(physical)
        if manifest is None:
            return [f"no index at {store.location}."]
        return verify_points(store, physical, manifest)
    except UsageError:
        raise  # not an index of ours at all (another tool's collection): not damage
    except LgptError as exc:
        return [exc.message]
