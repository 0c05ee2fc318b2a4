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
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .discover import KIND_BY_SUFFIX, PDF, sha256_file
from .errors import IndexProblem, LgptError, UsageError
from .search import Index, SearchHit
from .store import DocumentEntry, IndexStore, Manifest

CHUNK = 500
BYALDI_VERSION = "0.0.7"


def _write_gz(path: Path, data) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)


def _read_gz(path: Path):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def export_byaldi(index: Index, out: Path, with_images: bool = False, dpi: int = 150, force: bool = False) -> dict:
    """Write `index` as a byaldi index folder `out` (load it with from_index(out.name, index_root=out.parent))."""
    import torch

    if out.exists() and any(out.iterdir()):
        if not force:
            raise UsageError(f"{out} exists and is not empty.", hint="Choose another folder, or pass --force.")
        shutil.rmtree(out)
    model_name = index.manifest.model.get("path") or index.manifest.model["id"]
    if "colpali" not in model_name.lower() and "colqwen2" not in model_name.lower():
        raise LgptError(
            f"byaldi only loads models whose path contains 'colpali' or 'colqwen2'; this index's model is {model_name}.",
            hint="Put the model in a folder with such a name and rebuild, or load the exported files yourself.",
        )
    (out / "embeddings").mkdir(parents=True)
    embeddings, embed_map, names, metadata, pages = [], {}, {}, {}, []
    for doc_id, doc in enumerate(index.documents):
        vectors, offsets = index.store.segment_arrays(index.manifest.segments[doc.segment])
        names[str(doc_id)] = doc.path
        if doc.metadata:
            metadata[str(doc_id)] = doc.metadata
        for page in range(doc.pages):
            row = doc.first_page + page
            embed_map[str(len(embeddings))] = {"doc_id": doc_id, "page_id": page + 1}
            # byaldi keeps its vectors in its model's dtype, bfloat16; so must we, or its scorer mixes dtypes
            embeddings.append(torch.from_numpy(np.array(vectors[offsets[row] : offsets[row + 1]], dtype=np.float32)).to(torch.bfloat16))
            pages.append(SearchHit(0, 0.0, doc.path, page + 1, doc.sha256, doc.kind, doc.metadata))
    for start in range(0, len(embeddings), CHUNK):
        torch.save(embeddings[start : start + CHUNK], out / "embeddings" / f"embeddings_{start}.pt")
    _write_gz(out / "embed_id_to_doc_id.json.gz", embed_map)
    _write_gz(out / "doc_ids_to_file_names.json.gz", names)
    _write_gz(out / "metadata.json.gz", metadata)
    if with_images:
        from .pages import page_image, png_base64

        (out / "collection").mkdir()
        for start in range(0, len(pages), CHUNK):
            chunk = {str(start + i): png_base64(page_image(index, hit, dpi)) for i, hit in enumerate(pages[start : start + CHUNK])}
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
    return {"path": str(out), "documents": len(index.documents), "pages": len(embeddings), "images": with_images}


@dataclass
class ImportReport:
    index: str
    source: str
    documents: int
    pages: int
    model: str
    generation: int


def import_byaldi(source: Path, store: IndexStore, model: str | None = None) -> ImportReport:
    """Read a byaldi index folder into a new index, without embedding anything again."""
    import torch

    from .models import resolve_model

    try:
        config = _read_gz(source / "index_config.json.gz")
        embed_map = {int(k): v for k, v in _read_gz(source / "embed_id_to_doc_id.json.gz").items()}
        names_path = source / "doc_ids_to_file_names.json.gz"
        names = {int(k): v for k, v in _read_gz(names_path).items()} if names_path.exists() else {}
        meta_path = source / "metadata.json.gz"
        metadata = {int(k): v for k, v in _read_gz(meta_path).items()} if meta_path.exists() else {}
        files = sorted((source / "embeddings").glob("embeddings_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
        embeddings = [t for f in files for t in torch.load(f, map_location="cpu")]
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{source}: not a readable byaldi index ({exc}).") from exc
    if len(embeddings) != len(embed_map):
        raise UsageError(f"{source}: {len(embeddings)} embeddings but {len(embed_map)} entries in embed_id_to_doc_id.")

    ref = resolve_model(model or config["model_name"])
    by_doc: dict[int, list[tuple[int, int]]] = {}
    for embed_id, entry in embed_map.items():
        by_doc.setdefault(int(entry["doc_id"]), []).append((int(entry["page_id"]), embed_id))
    order = sorted(by_doc)
    page_vectors = [
        embeddings[embed_id].to(torch.float32).numpy().astype(np.float16)
        for doc_id in order for _, embed_id in sorted(by_doc[doc_id])
    ]
    with store.lock():
        if (old := store.read_manifest()) is not None and old.documents:
            raise IndexProblem(f"{store.root} already holds documents.", hint="Import into a new --name.")
        segment = store.write_segment(page_vectors)
        documents, first = [], 0
        for doc_id in order:
            path = names.get(doc_id, f"byaldi-doc-{doc_id}")
            file = Path(path)
            exists = file.is_file()
            documents.append(DocumentEntry(
                path=str(file.resolve()) if exists else path,
                sha256=sha256_file(file) if exists else f"byaldi:{doc_id}:{path}",
                size=file.stat().st_size if exists else 0,
                mtime=file.stat().st_mtime if exists else 0.0,
                kind=KIND_BY_SUFFIX.get(file.suffix.lower(), PDF),
                pages=len(by_doc[doc_id]), segment=segment.id, first_page=first,
                metadata={str(k): str(v) for k, v in metadata.get(doc_id, {}).items()},
            ))
            first += len(by_doc[doc_id])
        generation = (old.generation if old else 0) + 1
        store.commit(Manifest(
            generation=generation,
            model={**ref.to_dict(), "dim": segment.dim},
            settings={"vector_dtype": "float16", "dim": segment.dim, "imported_from": f"byaldi {config.get('library_version')}",
                      "pool_factor": 1},
            documents=sorted(documents, key=lambda d: d.path.encode("utf-8", "surrogateescape")),
            segments={segment.id: segment},
        ))
    return ImportReport(str(store.root), str(source), len(documents), len(page_vectors), ref.id, generation)
