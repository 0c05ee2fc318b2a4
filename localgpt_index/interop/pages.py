"""Page images for answerers: the pages of search hits, rendered from their source at a chosen dpi.

And the one rule every front end (query --with-images, serve's with_images, the MCP tools) applies
to a page that cannot be rendered: its own hit carries why (page_or_error), the others keep their
images."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Protocol, Sequence, TypeVar

from PIL import Image

from ..ingest.discover import IMAGE, PDF
from ..core.errors import LgptError
from ..core.types import SearchHit
from ..index.format.manifest import Document
from ..index.protocols import Store

DEFAULT_DPI = 150
Rendered = TypeVar("Rendered", bytes, tuple[bytes, bool])  # a page's PNG, and what else its renderer says; never text
CANNOT_RENDER = ("the page cannot be rendered: its source changed or disappeared since it was indexed (run build), "
                 "or the stored PDF is damaged")


class Pages(Protocol):
    """What page_image reads of an open index: a View, or what open_index returns (query.search.Searcher)."""

    @property
    def store(self) -> Store: ...

    def document(self, path: str) -> Document | None: ...


def page_image(index: Pages, hit: SearchHit, dpi: int = DEFAULT_DPI) -> Image.Image:
    """The page as an image: from the PDF a document was converted to (kept in the index), the
    source PDF, or the image file. A source that changed since it was indexed is refused."""
    doc = index.document(hit.path)
    if doc is None or not 1 <= hit.page <= doc.pages:
        raise LgptError(f"{hit.path}: no page {hit.page} in the index.")
    if doc.pdf:
        return _render_page(index.store.pdf_file(doc.pdf), hit.page, dpi, doc.path)
    if doc.kind not in (PDF, IMAGE):  # converted by a build, which stores the PDF; imported without one
        raise LgptError(f"{doc.path}: its pages cannot be shown: the index holds no PDF of this {doc.kind} document "
                        "(imported from byaldi?).", hint="Run build on its folder: it converts the document and keeps the PDF.")
    _check_unchanged(doc)
    if doc.kind == "image":
        try:
            with Image.open(doc.path) as image:
                image.seek(hit.page - 1)
                return image.convert("RGB")
        except (OSError, ValueError, EOFError, Image.DecompressionBombError) as exc:
            raise LgptError(f"{doc.path}: frame {hit.page} cannot be decoded ({' '.join(str(exc).split())[:200]}).") from None
    return _render_page(Path(doc.path), hit.page, dpi, doc.path)


def _check_unchanged(doc) -> None:
    try:
        stat = os.stat(doc.path)
    except OSError:
        raise LgptError(f"{doc.path} disappeared since it was indexed.", hint="Run build again.") from None
    recorded = doc.stat
    # ctime too: a rewrite in place that restores size and mtime (cp -p, rsync --inplace -t) still moves it;
    # a stat that differs only where content cannot have changed (chmod, a racy record) is settled by the sha256
    same = stat.st_size == doc.size and recorded is not None and (stat.st_mtime_ns, stat.st_ctime_ns) == (
        recorded.mtime_ns, recorded.ctime_ns)
    if not same and (stat.st_size != doc.size or _sha256(doc.path) != doc.sha256):
        raise LgptError(f"{doc.path} changed since it was indexed.", hint="Run build again.")


def _sha256(path: str) -> str | None:
    from ..ingest.discover import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def _render_page(pdf: Path, page: int, dpi: int, source: str) -> Image.Image:
    from ..core.errors import DocumentError
    from ..ingest.render import render_page_at_dpi

    try:
        return render_page_at_dpi(pdf, page, dpi)
    except DocumentError as exc:
        raise LgptError(f"{source}: page {page} cannot be rendered ({exc.reason}).") from None


def png_bytes(image: Image.Image) -> bytes:
    """A page image as PNG: the one encoding of every page image the tool hands out."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def page_or_error(render: Callable[[], Rendered]) -> Rendered | str:
    """What `render` gives of a page (its PNG), or why the page has none (a str: CANNOT_RENDER and the
    reason): a page that cannot be rendered costs its own hit its image, never the answer."""
    try:
        return render()
    except LgptError as exc:
        return f"{CANNOT_RENDER}: {exc.message}"


def attach_images(document: dict, results: Sequence[Sequence[SearchHit]], index: Pages, dpi: int) -> None:
    """Each hit of `document` (reports.query_document's, for `results`) with its page as base64 PNG in
    `image_base64`, or null there and an `image_error` (page_or_error); a page found twice rendered once."""
    done: dict[tuple[str, int], bytes | str] = {}
    for answer, hits in zip(document["queries"], results):
        for entry, hit in zip(answer["results"], hits):
            key = (hit.sha256, hit.page)
            if key not in done:
                done[key] = page_or_error(lambda: png_bytes(page_image(index, hit, dpi)))  # noqa: B023 - called at once
            found = done[key]
            entry["image_base64"] = None if isinstance(found, str) else base64.b64encode(found).decode("ascii")
            if isinstance(found, str):
                entry["image_error"] = found


def export_pages(document: dict, out: Path, dpi: int, fetch: Callable[[dict], bytes]) -> Path:
    """Write every hit of a query document as PNG into `out` (`fetch` gives a hit's PNG bytes),
    with manifest.json describing them; returns the manifest's path."""
    try:
        return _export_pages(document, out, dpi, fetch)
    except OSError as exc:
        raise LgptError(f"--export-pages {out}: cannot write ({exc.strerror or exc}).") from None


def _export_pages(document: dict, out: Path, dpi: int, fetch: Callable[[dict], bytes]) -> Path:
    """The pages are staged in a hidden folder inside `out` and take their names once every page came, the
    manifest last: a page that cannot be had (a server's answer that is not a PNG) leaves nothing behind. The
    pages an earlier export's manifest there named and this one did not write are removed."""
    made = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    manifest: dict = {"version": 1, "dpi": dpi, "queries": []}
    stage: Path | None = None
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".lgpt-export-", dir=out))
        for q_number, answer in enumerate(document["queries"], 1):
            entries = []
            for hit in answer["results"]:
                stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(hit["path"]).stem)[:60] or "page"
                name = f"q{q_number:02d}-r{hit['rank']:02d}-{stem}-p{hit['page']}.png"
                (stage / name).write_bytes(fetch(hit))  # a name given twice (two hits at one rank): the later page
                entries.append({**{k: v for k, v in hit.items() if k != "image_base64"}, "image": name})
            manifest["queries"].append({"query": answer["query"], "results": entries})
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=True))
        earlier = _exported(out / "manifest.json")
        for name in sorted(os.listdir(stage), key=lambda n: n == "manifest.json"):  # the manifest last
            os.replace(stage / name, out / name)
        stage.rmdir()
        written = {entry["image"] for answer in manifest["queries"] for entry in answer["results"]}
        for name in earlier - written:  # an earlier export's page this one did not write: not left as if it had
            (out / name).unlink(missing_ok=True)
    except BaseException:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        for folder in made:
            with contextlib.suppress(OSError):  # something else put a file there meanwhile: it stays
                folder.rmdir()
        raise
    return out / "manifest.json"


_EXPORTED = re.compile(r"q\d{2,}-r\d{2,}-[A-Za-z0-9._-]*-p\d+\.png")  # the names _export_pages gives


def _exported(manifest: Path) -> set[str]:
    """The page images an export's manifest names (none where there is no such manifest, or it is not one)."""
    try:
        data = json.loads(manifest.read_text())
        names = {entry["image"] for answer in data["queries"] for entry in answer["results"]}
    except (OSError, ValueError, TypeError, KeyError):
        return set()
    return {name for name in names if isinstance(name, str) and _EXPORTED.fullmatch(name)}


def local_page(index: Pages, dpi: int) -> Callable[[dict], bytes]:
    """A fetcher for export_pages that renders from this index."""

    def fetch(hit: dict) -> bytes:
        return png_bytes(page_image(index, SearchHit(hit["rank"], hit["score"], hit["path"], hit["page"], hit["sha256"], hit["kind"]), dpi))

    return fetch
