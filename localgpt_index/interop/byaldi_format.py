"""byaldi's on-disk index layout, both ways, so LocalGPT-Vision-style code can use our indexes.

byaldi 0.0.7 writes, under `<index_root>/<index_name>/`:

    index_config.json.gz          model_name, full_document_collection, highest_doc_id, ...
    embeddings/embeddings_<i>.pt  torch.save of a list of (tokens, 128) tensors, 500 per file
    embed_id_to_doc_id.json.gz    {embed_id: {"doc_id": int, "page_id": int}}
    doc_ids_to_file_names.json.gz {doc_id: file name}
    metadata.json.gz              {doc_id: {key: value}}
    collection/<i>.json.gz        {embed_id: base64 PNG}, only with the page images
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from ..ingest.discover import IMAGE, KIND_BY_SUFFIX, PDF, sha256_file
from ..core.errors import IndexProblem, LgptError, UsageError
from ..core.failpoints import failpoint
from ..models.families import find_family
from ..models.loaders import COLPALI_ENGINE
from ..index.format.manifest import Document, ModelInfo, Settings, Span, describe
from ..core.types import SearchHit
from ..index.protocols import Store, View
from .transfer import write_documents

CHUNK = 500
BYALDI_VERSION = "0.0.7"
MAX_JSON_BYTES = 256 << 20  # decompressed, per file: a gzip of whitespace can inflate to gigabytes
MAX_TENSOR_FILE = 8 << 30
EMBEDDING_FILE = re.compile(r"^embeddings_(\d{1,12})\.pt$")


def _write_gz(path: Path, data) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)


def _read_gz(path: Path) -> Any:
    """A gzip'd JSON file of byaldi's, decompressed up to MAX_JSON_BYTES."""
    try:
        with gzip.open(path, "rb") as handle:
            raw = handle.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"{path}: missing; not a byaldi index folder.") from None
    except (OSError, EOFError) as exc:
        raise UsageError(f"{path}: not a readable gzip file ({exc}).") from None
    if len(raw) > MAX_JSON_BYTES:
        raise UsageError(f"{path}: inflates to more than {MAX_JSON_BYTES >> 20} MiB; refused.")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not valid JSON ({' '.join(str(exc).split())[:120]}).") from None


# export


def check_export_target(out: Path, index_folders: tuple[Path, ...]) -> Path:
    """Refuse an output folder that is, contains or is inside the index, or is or contains the
    current folder; with --force, replace only an empty folder or an earlier byaldi export."""
    out = Path(os.path.abspath(out))
    real_out = os.path.realpath(out)
    cwd = os.path.realpath(os.getcwd())
    for folder in index_folders:
        index = os.path.realpath(folder)
        if _within(real_out, index) or _within(index, real_out):
            raise UsageError(f"export {out}: refused, it is, contains or lies inside the index ({index}).",
                             hint="Choose a new folder outside the index, for example ./byaldi-export.")
    if _within(cwd, real_out):
        raise UsageError(f"export {out}: refused, it is or contains the current folder ({cwd}).",
                         hint="Choose a new folder, for example ./byaldi-export.")
    return out


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def export_byaldi(index: View, out: Path, with_images: bool = False, dpi: int = 150, force: bool = False) -> dict:
    """Write `index` as a byaldi index folder `out` (load it with from_index(out.name, index_root=out.parent)).

    Everything is written to a new folder beside `out`, swapped in only once complete: a
    failed export leaves an earlier one as it was."""
    out = check_export_target(out, index.store.local_folders)
    model_name = index.manifest.model.path or index.manifest.model.id
    family = find_family(index.manifest.model.family)
    if family is not None and family.loader is COLPALI_ENGINE:
        raise UsageError(f"byaldi 0.0.7 loads ColPali and ColQwen2 only; this index's model is {family.display} ({model_name}).",
                         hint="Use the index itself (query, serve, the Python API), or export --format qdrant.")
    if "colpali" not in model_name.lower() and "colqwen2" not in model_name.lower():
        raise LgptError(
            f"byaldi only loads models whose path contains 'colpali' or 'colqwen2'; this index's model is {model_name}.",
            hint="Put the model in a folder with such a name and rebuild, or load the exported files yourself.",
        )
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not empty.", hint="Choose another folder, or pass --force to replace an earlier export.")
    if out.exists() and force and (not out.is_dir() or (any(out.iterdir()) and not (out / "index_config.json.gz").is_file())):
        raise UsageError(f"{out}: --force replaces only an earlier byaldi export (with index_config.json.gz); this is something else.")
    tmp = out.with_name(f".{out.name}.lgpt-export-{uuid.uuid4().hex[:8]}")
    try:
        result = _write_export(index, tmp, model_name, with_images, dpi)
        _swap_in(tmp, out)
    except OSError as exc:
        raise LgptError(f"export {out}: cannot write ({exc.strerror or exc}); an earlier export there is untouched.") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {**result, "path": str(out)}


def _swap_in(tmp: Path, out: Path) -> None:
    old = out.with_name(f".{out.name}.lgpt-old-{uuid.uuid4().hex[:8]}")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _write_export(index: View, out: Path, model_name: str, with_images: bool, dpi: int) -> dict:
    import torch

    (out / "embeddings").mkdir(parents=True)
    embeddings: list[torch.Tensor] = []
    embed_map, names, metadata, pages = {}, {}, {}, []
    for doc_id, doc in enumerate(index.documents):
        names[str(doc_id)] = doc.path
        if doc.metadata:
            metadata[str(doc_id)] = doc.metadata
        for page, vectors in enumerate(index.page_vectors(doc), 1):
            embed_map[str(len(embeddings))] = {"doc_id": doc_id, "page_id": page}
            # byaldi keeps its vectors in its model's dtype, bfloat16; so must we, or its scorer mixes dtypes
            embeddings.append(torch.from_numpy(np.asarray(vectors, dtype=np.float32)).to(torch.bfloat16))
            pages.append(SearchHit(0, 0.0, doc.path, page, doc.sha256, doc.kind, doc.metadata))
    for start in range(0, len(embeddings), CHUNK):
        torch.save(embeddings[start : start + CHUNK], out / "embeddings" / f"embeddings_{start}.pt")
    failpoint("export-write")
    _write_gz(out / "embed_id_to_doc_id.json.gz", embed_map)
    _write_gz(out / "doc_ids_to_file_names.json.gz", names)
    _write_gz(out / "metadata.json.gz", metadata)
    if with_images:
        import base64

        from .pages import page_image, png_bytes

        (out / "collection").mkdir()
        for start in range(0, len(pages), CHUNK):
            chunk = {str(start + i): base64.b64encode(png_bytes(page_image(index, hit, dpi))).decode("ascii")
                     for i, hit in enumerate(pages[start : start + CHUNK])}
            _write_gz(out / "collection" / f"{start}.json.gz", chunk)
    _write_gz(out / "index_config.json.gz", {
        "model_name": model_name,
        "full_document_collection": with_images,
        "highest_doc_id": len(index.documents) - 1,
        "resize_stored_images": False,
        "max_image_width": None,
        "max_image_height": None,
        "library_version": BYALDI_VERSION,
    })
    return {"documents": len(index.documents), "pages": len(embeddings), "images": with_images}


# import: every field of an untrusted folder is checked

IdKey = Annotated[str, Field(pattern=r"^\d{1,12}$")]


class _Config(BaseModel):
    model_config = ConfigDict(extra="allow")
    model_name: Annotated[StrictStr, Field(min_length=1, max_length=4096)]
    library_version: StrictStr | None = None


class _EmbedEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    doc_id: Annotated[StrictInt, Field(ge=0, le=10**12)]
    page_id: Annotated[StrictInt, Field(ge=1, le=10**9)]


class _Tables(BaseModel):
    embed_map: dict[IdKey, _EmbedEntry]
    names: dict[IdKey, Annotated[StrictStr, Field(max_length=4096)]]
    metadata: dict[IdKey, dict[Annotated[StrictStr, Field(max_length=256)], StrictStr | StrictInt | float | bool]]


@dataclass
class ImportReport:
    index: str
    source: str
    documents: int
    pages: int
    model: str
    generation: int


def import_byaldi(source: Path, store: Store, model: str | None = None, wait_s: float = 0.0) -> ImportReport:
    """Read a byaldi index folder into a new index, without embedding anything again (`wait_s`: for another writer)."""
    from ..models.resolve import expected_dim, resolve_model

    config, tables = _read_tables(source)
    ref = resolve_model(model or config.model_name)
    dim = expected_dim(ref)
    embeddings = _read_embeddings(source, dim)
    ids = sorted(int(k) for k in tables.embed_map)
    if ids != list(range(len(embeddings))):
        raise UsageError(f"{source}: {len(embeddings)} embeddings but embed_id_to_doc_id names ids "
                         f"{ids[:3]}...; each embedding needs exactly one entry.")
    by_doc: dict[int, list[tuple[int, int]]] = {}
    for key, entry in tables.embed_map.items():
        by_doc.setdefault(entry.doc_id, []).append((entry.page_id, int(key)))
    for doc_id, pages in by_doc.items():
        if len({p for p, _ in pages}) != len(pages):
            raise UsageError(f"{source}: document {doc_id} lists the same page twice.")
    with store.begin(wait_s) as txn:
        if txn.base is not None and (txn.base.documents or txn.base.in_progress):
            raise IndexProblem(f"{store.location} already holds documents.", hint="Import into a new --name.")
        order = sorted(by_doc)
        templates = _unique_paths([_document(doc_id, tables, len(by_doc[doc_id])) for doc_id in order])
        documents = write_documents(txn, ((doc, [embeddings[e] for _, e in sorted(by_doc[d])]) for doc, d in zip(templates, order)), dim)
        manifest = txn.commit(
            documents,
            ModelInfo(**ref.to_dict(), dim=dim),
            Settings(dim=dim, imported_from=f"byaldi {config.library_version or '?'}"),
        )
    return ImportReport(store.location, str(source), len(documents), manifest.page_count, ref.id, manifest.generation)


def _read_tables(source: Path) -> tuple[_Config, _Tables]:
    try:
        config = _Config.model_validate(_read_gz(source / "index_config.json.gz"))
        names_path, meta_path = source / "doc_ids_to_file_names.json.gz", source / "metadata.json.gz"
        tables = _Tables.model_validate({
            "embed_map": _read_gz(source / "embed_id_to_doc_id.json.gz"),
            "names": _read_gz(names_path) if names_path.exists() else {},
            "metadata": _read_gz(meta_path) if meta_path.exists() else {},
        })
    except ValidationError as exc:
        raise UsageError(f"{source}: not a valid byaldi index: {describe(exc)}.") from None
    return config, tables


def _read_embeddings(source: Path, dim: int) -> list[np.ndarray]:
    """byaldi's embeddings_*.pt, loaded as plain tensors only (weights_only: no pickled code runs)."""
    import torch

    folder = source / "embeddings"
    try:
        numbered = [(int(match[1]), p) for p in folder.iterdir() if (match := EMBEDDING_FILE.match(p.name))]
        files = [p for _, p in sorted(numbered, key=lambda pair: pair[0])]
    except OSError as exc:
        raise UsageError(f"{folder}: cannot be listed ({exc.strerror or exc}); not a byaldi index folder.") from None
    if not files:
        raise UsageError(f"{folder}: no embeddings_*.pt files; nothing to import.")
    pages: list[np.ndarray] = []
    for path in files:
        if not path.is_file() or path.stat().st_size > MAX_TENSOR_FILE:
            raise UsageError(f"{path}: not a regular file of at most {MAX_TENSOR_FILE >> 30} GiB.")
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types for foreign or hostile files
            raise UsageError(f"{path}: not a file of plain tensors ({' '.join(str(exc).split())[:160]}).") from None
        if not isinstance(loaded, (list, tuple)):
            raise UsageError(f"{path}: expected a list of tensors, found {type(loaded).__name__}.")
        pages += [_page_vectors(path, number, tensor, dim) for number, tensor in enumerate(loaded)]
    return pages


def _page_vectors(path: Path, number: int, tensor: Any, dim: int) -> np.ndarray:
    import torch

    where = f"{path}: item {number}"
    if not isinstance(tensor, torch.Tensor) or not torch.is_floating_point(tensor):
        raise UsageError(f"{where}: not a floating-point tensor.")
    if tensor.ndim != 2 or tensor.shape[0] < 1 or tensor.shape[1] != dim:
        raise UsageError(f"{where}: shape {tuple(tensor.shape)}, expected (tokens >= 1, {dim}) for this model.")
    vectors = tensor.to(torch.float32).numpy()
    if not np.isfinite(vectors).all() or np.abs(vectors).max() > 65504:
        raise UsageError(f"{where}: holds NaN, infinite or out-of-range values.")
    return vectors.astype(np.float16)


def _document(doc_id: int, tables: _Tables, pages: int) -> Document:
    """A byaldi document as a catalog entry (its spans are placeholders until written)."""
    import hashlib

    path = tables.names.get(str(doc_id), f"byaldi-doc-{doc_id}")
    file = Path(path)
    exists = file.is_absolute() and file.is_file()
    info = file.stat() if exists else None
    kind = KIND_BY_SUFFIX.get(file.suffix.lower(), PDF)
    # a PDF or picture still there gets its real sha256, so a later build of its folder embeds nothing
    # that did not change; a file a build converts (office, text, Markdown) comes without the PDF its
    # pages are shown from, so it must not look unchanged: the next build converts and embeds it
    real = exists and kind in (PDF, IMAGE)
    return Document(
        path=str(file.resolve()) if exists else path,
        sha256=sha256_file(file) if real else hashlib.sha256(f"byaldi:{doc_id}:{path}".encode("utf-8", "surrogateescape")).hexdigest(),
        size=info.st_size if info else 0,
        kind=kind,
        pages=pages,
        spans=[Span(segment="seg-placeholder", first=0, pages=pages)],
        metadata={str(k): str(v) for k, v in tables.metadata.get(str(doc_id), {}).items()},
    )


def _unique_paths(documents: list[Document]) -> list[Document]:
    """byaldi allows one file name for several documents; the index needs one entry per path."""
    seen: dict[str, int] = {}
    unique = []
    for doc in documents:
        count = seen.get(doc.path, 0)
        seen[doc.path] = count + 1
        unique.append(doc if not count else doc.model_copy(update={"path": f"{doc.path}#{count + 1}"}))
    return unique
