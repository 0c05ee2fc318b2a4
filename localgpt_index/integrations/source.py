"""Where a retriever's pages come from, framework-free: an open index, or a running `lgpt-index serve`.

An open index and its query encoder (the Python API), or a running `lgpt-index serve` (`query
--server` semantics, serve.client). Both give the
`query --json` document's hits (interop.results.Hit), turned into one PageHit each; the adapters only
turn a PageHit into their framework's document type.

Nothing heavy is imported here: numpy and the index come with an IndexSource, httpx with a ServerSource,
and the model (torch) on the first search of an index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..core.errors import LgptError, UsageError
from ..query.request import QuerySettings, validated

if TYPE_CHECKING:
    from PIL.Image import Image

    from ..query.search import Searcher


def search_options(**given: Any) -> QuerySettings:
    """What `query` takes besides the text (k, filters, first_pass, mode, with_text, with_images, dpi...), from
    keyword arguments: each page's text by default; a bad one is a UsageError naming it."""
    return validated(QuerySettings, "bad retriever option", **{"with_text": True, **given})


def per_call(settings: QuerySettings, given: dict[str, Any]) -> QuerySettings:
    """`settings` with the options one call gives (`retriever.invoke(query, k=1)`) in place of the retriever's own."""
    return settings if not given else search_options(**{**settings.model_dump(exclude_unset=True), **given})


@dataclass(frozen=True)
class PageHit:
    """One page that answers a query, as both adapters hand it on."""

    query: str
    rank: int
    score: float
    path: str
    page: int  # 1-based
    sha256: str
    kind: str
    document_metadata: dict[str, str] = field(default_factory=dict)
    text: str | None = None  # the page text, where the index holds it
    image_base64: str | None = None  # the page as PNG, when images were asked for
    image_error: str | None = None  # why a page asked for carries no image
    image_url: str | None = None  # where a server hands out the page as PNG
    copies: tuple[str, ...] = ()  # the other paths of a byte-identical document (this page is theirs too)
    regions: list[dict[str, Any]] | None = None  # where on the page it matched (interop.results.HitRegion), when asked

    @classmethod
    def from_hit(cls, query: str, hit: dict[str, Any], image_url: str | None = None) -> PageHit:
        """From one hit of the query document (interop.results.Hit), and the page text when it has one."""
        return cls(query=query, rank=hit["rank"], score=hit["score"], path=hit["path"], page=hit["page"], sha256=hit["sha256"],
                   kind=hit["kind"], document_metadata=dict(hit.get("metadata") or {}), text=hit.get("text"),
                   image_base64=hit.get("image_base64"), image_error=hit.get("image_error"), image_url=image_url,
                   copies=tuple(hit.get("copies", ())), regions=hit.get("regions"))

    @property
    def id(self) -> str:
        """A stable id of the page (the same page found twice has the same id)."""
        return f"{self.sha256}#page={self.page}"

    def metadata(self) -> dict[str, Any]:
        """The metadata both adapters attach: where the page is (and `copies`: the other paths of the same
        bytes, where there are), its score, how to get its image (`sha256` and `page`, which `page_image`
        resolves on either source; `image_url` on a server), and with `regions=True` where on it it matched."""
        found: dict[str, Any] = {"path": self.path, "page": self.page, "score": self.score, "rank": self.rank,
                                 "sha256": self.sha256, "kind": self.kind, "document_metadata": dict(self.document_metadata),
                                 "has_text": self.text is not None}
        optional = {"image_url": self.image_url, "image_error": self.image_error}
        found.update({key: value for key, value in optional.items() if value is not None})
        if self.copies:
            found["copies"] = list(self.copies)
        if self.regions is not None:
            found["regions"] = self.regions
        return found


@runtime_checkable
class PageSource(Protocol):
    """What a retriever asks: the hits of one query, and a page's PNG by its document's sha256."""

    def search(self, query: str, options: QuerySettings) -> list[PageHit]: ...

    def page_png(self, sha256: str, page: int, dpi: int) -> bytes: ...


class IndexSource:
    """The Python API: an open index (one committed generation) and the query encoder of its model,
    loaded on the first search (`index.load_encoder(ModelSpec(device=..., dtype=...))` beforehand picks where)."""

    def __init__(self, index: Searcher) -> None:
        self.index = index

    @classmethod
    def open(cls, index_dir: str | None = None, name: str | None = None, store: Any = None) -> IndexSource:
        from ..query.search import open_index

        return cls(open_index(index_dir, name, store))

    def search(self, query: str, options: QuerySettings) -> list[PageHit]:
        from ..interop.pages import attach_images
        from ..interop.reports import query_document

        request = options.asking(query)
        results = self.index.search(request)
        document = query_document(self.index.view, request.queries, results, request.k, self.index.mode(request), request.fusion)
        if request.with_images:
            attach_images(document, results, self.index.view, request.dpi)
        return [PageHit.from_hit(query, hit) for hit in document["queries"][0]["results"]]

    def page_png(self, sha256: str, page: int, dpi: int) -> bytes:
        from ..core.types import SearchHit
        from ..interop.pages import page_image, png_bytes

        document = next((d for d in self.index.documents if d.sha256 == sha256), None)
        if document is None:
            raise LgptError(f"no document with sha256 {sha256[:12]} in {self.index.store.location}.")
        return png_bytes(page_image(self.index, SearchHit(0, 0.0, document.path, page, document.sha256, document.kind), dpi))


class ServerSource:
    """A running `lgpt-index serve` at `url`, asked as `query --server` asks it (its answers checked)."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float | None = None) -> None:
        from ..serve.client import TIMEOUT_S, ServerClient

        self.client = ServerClient(url, token, TIMEOUT_S if timeout_s is None else timeout_s)

    def search(self, query: str, options: QuerySettings) -> list[PageHit]:
        document = self.client.query(options.asking(query))
        return [PageHit.from_hit(query, hit, self._url(hit["sha256"], hit["page"], options.dpi))
                for hit in document["queries"][0]["results"]]

    def page_png(self, sha256: str, page: int, dpi: int) -> bytes:
        """The page's PNG, its size read from its header first: one over MAX_PAGE_PIXELS is refused undecoded."""
        data = self.client.page(sha256, page, dpi)
        size = png_dimensions(data)
        sent = f"the server at {self.client.url} sent page {page} of {sha256[:12]}"
        if size is None:
            raise LgptError(f"{sent} without a PNG header (IHDR).")
        if size[0] * size[1] > MAX_PAGE_PIXELS:
            raise LgptError(f"{sent} as a {size[0]}x{size[1]} image: over {MAX_PAGE_PIXELS:,} pixels, it is not decoded.",
                            hint="Ask for it at a lower dpi (an A4 page at 600 dpi is 35 million pixels).")
        return data

    def _url(self, sha256: str, page: int, dpi: int) -> str:
        return f"{self.client.url}/pages/{sha256}/{page}.png?dpi={dpi}"


def open_source(index: Searcher | None = None, *, server: str | None = None, token: str | None = None,
                index_dir: str | None = None, name: str | None = None, store: Any = None) -> PageSource:
    """A ServerSource for `server`, else an IndexSource for `index` (or the index it opens)."""
    if server is not None:
        if index is not None or index_dir is not None or name is not None or store is not None:
            raise UsageError("give either a server or an index, not both: the server answers from the index it serves.")
        return ServerSource(server, token)
    if index is not None:
        return IndexSource(index)
    return IndexSource.open(index_dir, name, store)


def retrieved_page_image(source: PageSource, metadata: dict[str, Any], dpi: int = 150) -> Image:
    """The page a retrieved document's metadata names (its `sha256` and `page`), as a PIL image; a PNG that
    cannot be decoded is an LgptError naming where it came from."""
    import io

    from PIL import Image as PILImage

    try:
        sha256, page = str(metadata["sha256"]), int(metadata["page"])
    except (KeyError, TypeError, ValueError):
        raise UsageError("not a page found by lgpt-index: its metadata has no sha256 and page.") from None
    data = source.page_png(sha256, page, dpi)
    try:
        with PILImage.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (OSError, ValueError, SyntaxError, EOFError, PILImage.DecompressionBombError) as exc:
        origin = f"the server at {source.client.url}" if isinstance(source, ServerSource) else "the index"
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise LgptError(f"page {page} of {sha256[:12]} from {origin} cannot be decoded ({reason}).") from None


MAX_PAGE_PIXELS = 89_478_485  # PIL's Image.MAX_IMAGE_PIXELS, where serve's own decoding of a page warns of a bomb


def png_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR chunk, which the format puts first (None without one); nothing is decoded."""
    import struct

    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height
