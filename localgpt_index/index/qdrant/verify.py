"""`verify` of a Qdrant index: its configuration, every document's pages against the points, the stored PDFs.

A stored PDF is checked as a regular file inside the PDF store, with its sha256."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ...core.errors import IndexProblem, LgptError, MissingIndexFile, UsageError
from ...core.files import sha256_file
from ..artifact_registry import check_all
from ..format.files import plain_files, regular_size
from ..format.manifest import (
    Manifest,
)
from .blobs import QdrantBlobs
from .ids import (
    VECTOR,
    parse_store_url,
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


def gone_records(store: Any) -> list[str]:
    """Notes (not damage) on the records of a shared --pdf-store (index/format/pdfstore.py) whose Qdrant collection
    no longer exists: such a record keeps its PDFs for good. Only what can be told from here is said:
    in-process folders (their meta.json) and collections of the same server; a record of another
    server's collection, or one that cannot be read, is left unsaid."""
    pdfs = store.pdfs()
    if pdfs is None or pdfs.refs is None:
        return []
    notes = []
    for path in sorted(plain_files(pdfs.refs.folder)):
        if not path.name.endswith(".json") or path.is_symlink() or path == pdfs.refs.record:
            continue
        try:
            record = json.loads(path.read_bytes())
            location, count = str(record["location"]), len(record["pdfs"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _gone(store, location):
            notes.append(f"{path}: the record of {location}, which no longer exists, keeps {count} PDF(s) in "
                         f"{store.pdf_store}; delete the record to let them go (docs/qdrant.md, Stored PDFs).")
    return notes


def _gone(store: Any, location: str) -> bool:
    """Whether the index at `location` is known to be gone (False: it exists, or it cannot be told from here)."""
    try:
        spec = parse_store_url(location)
    except UsageError:
        return False
    if spec.path is not None:
        return _folder_lacks(spec.path, spec.collection)
    if spec.url != store.spec.url:
        return False  # another server: not asked
    with store.talking("reading the aliases"):
        return not any(a.alias_name == spec.collection for a in store.client.get_aliases().aliases)


def _folder_lacks(folder: Path, collection: str) -> bool:
    """An in-process folder without the collection: no folder, no meta.json, or no alias of that name to a collection in it."""
    meta = folder / "meta.json"
    if not folder.is_dir():
        return True
    try:
        if os.path.islink(meta):
            return False
        data = json.loads(meta.read_bytes())
        physical = data.get("aliases", {}).get(collection)
        return physical is None or physical not in data.get("collections", {})
    except FileNotFoundError:
        return True
    except (OSError, ValueError, AttributeError):
        return False
