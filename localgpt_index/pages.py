"""Page images for answerers: the pages of search hits, rendered from their source at a chosen dpi."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

from PIL import Image

from .errors import LgptError
from .search import Index, SearchHit

DEFAULT_DPI = 150


def page_image(index: Index, hit: SearchHit, dpi: int = DEFAULT_DPI) -> Image.Image:
    """The page as an image: from the source PDF (or the PDF a document was converted to), or the image file."""
    from pdf2image import convert_from_path

    doc = next(d for d in index.documents if d.path == hit.path)
    source = Path(doc.path)
    try:
        stat = source.stat()
        unchanged = stat.st_size == doc.size and stat.st_mtime == doc.mtime
    except OSError:
        unchanged = False
    if not doc.pdf and not unchanged:  # a converted document renders from the PDF kept in the index
        raise LgptError(f"{doc.path} changed or disappeared since it was indexed.", hint="Run build again.")
    if doc.kind == "image":
        with Image.open(source) as image:
            image.seek(hit.page - 1)
            return image.convert("RGB")
    pdf = index.store.root / doc.pdf if doc.pdf else source
    [image] = convert_from_path(str(pdf), dpi=dpi, first_page=hit.page, last_page=hit.page)
    return image.convert("RGB")


def png_base64(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def export_pages(index: Index, queries: list[str], results: list[list[SearchHit]], out: Path, dpi: int) -> Path:
    """Write every hit's page as PNG into `out`, with manifest.json describing them; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"version": 1, "dpi": dpi, "queries": []}
    for q_number, (text, hits) in enumerate(zip(queries, results), 1):
        entries = []
        for hit in hits:
            stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(hit.path).stem)[:60] or "page"
            name = f"q{q_number:02d}-r{hit.rank:02d}-{stem}-p{hit.page}.png"
            page_image(index, hit, dpi).save(out / name)
            entries.append({**hit.to_dict(), "image": name})
        manifest["queries"].append({"query": text, "results": entries})
    path = out / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=True))
    return path
