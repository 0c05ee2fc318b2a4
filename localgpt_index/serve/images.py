"""Page images of `serve` (`/pages/...png` and `with_images`), rendered a few at once.

A bounded number per answer; the last PNGs are kept."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections import OrderedDict

from fastapi import Request
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..core.failpoints import failpoint
from ..core.types import Region
from ..ingest.processes import Stopped
from ..interop.pages import page_or_error
from ..query.regions import page_regions
from ..query.request import check_query_text
from .httpguard import PathPolicy

MAX_IMAGE_BUDGET = 32  # with_images: page images per answer, counted at 150 dpi (one at 300 dpi counts 4)
RENDER_SLOTS = 2  # pages rendered at once, all requests together
IMAGE_CACHE_BYTES = 64 << 20  # PNGs kept for reuse


STOPPING = "not rendered: the server is stopping"


class PageImages:
    """Rendered pages for /pages and with_images: a bounded number per answer, a few renders at once,
    the PNGs last asked for kept (by document sha256, page and dpi: the same bytes for the same page)."""

    def __init__(self, budget: int = MAX_IMAGE_BUDGET, slots: int = RENDER_SLOTS, cache_bytes: int = IMAGE_CACHE_BYTES) -> None:
        self.budget, self.cache_bytes = budget, cache_bytes
        self._slots = threading.BoundedSemaphore(slots)
        self._cache: OrderedDict[tuple, bytes] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @staticmethod
    def cost(dpi: int) -> float:
        """A page at `dpi` in pages at 150 dpi (pixels grow with the square of the dpi)."""
        return max(1.0, (dpi / 150) ** 2)

    def png(self, index, hit, dpi: int) -> tuple[bytes, bool]:
        """The page as PNG bytes, and whether it was rendered now (else it came from the cache)."""
        from ..interop.pages import _check_unchanged, page_image, png_bytes

        key = (hit.sha256, hit.page, dpi)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        doc = index.document(hit.path)
        if cached is not None and doc is not None:
            if not doc.pdf:
                _check_unchanged(doc)  # a source that changed since it was indexed is refused, as when rendering
            return cached, False
        with self._slots:
            failpoint("serve.render")
            data = png_bytes(page_image(index, hit, dpi))
        with self._lock:
            self._cache[key] = data
            self._held += len(data)
            while self._held > self.cache_bytes and self._cache:
                self._held -= len(self._cache.popitem(last=False)[1])
        return data, True

    async def render(self, index, hit, dpi: int) -> bytes:
        """The page as PNG bytes, rendered on a thread in the command's ProcessScope (asyncio.to_thread
        carries the context, run_in_executor does not): stopping the server ends its pdftoppm."""
        try:
            return (await asyncio.to_thread(self.png, index, hit, dpi))[0]
        except Stopped:
            raise StarletteHTTPException(503, STOPPING) from None

    async def fill(self, document: dict, answer, dpi: int, request: Request, policy: PathPolicy) -> int:
        """Give each hit of `document` its image: a page that cannot be rendered gets an error of its
        own, pages past the budget say so, and rendering stops when the client is gone.
        Returns the pages rendered now (the others came from the cache)."""
        policy.learn(answer.index)
        done: dict[tuple, tuple[str | None, str | None, int]] = {}
        spent = 0.0
        for entries, hits in zip([q["results"] for q in document["queries"]], answer.results):
            for entry, hit in zip(entries, hits):
                key = (hit.sha256, hit.page)
                if key not in done:
                    if spent + self.cost(dpi) > self.budget:
                        done[key] = (None, self._over_budget(hit, dpi), 0)
                    elif await request.is_disconnected():
                        return sum(d[2] for d in done.values())  # no one to answer: the rest is not rendered
                    else:
                        spent += self.cost(dpi)
                        done[key] = await self._one(answer.index, hit, dpi, policy)
                entry["image_base64"], error, _ = done[key]
                if error:
                    entry["image_error"] = error
        return sum(d[2] for d in done.values())

    def _over_budget(self, hit, dpi: int) -> str:
        return (f"not rendered: at most {self.budget} pages at 150 dpi per answer ({int(self.budget / self.cost(dpi))} "
                f"at {dpi} dpi); fetch it from /pages/{hit.sha256}/{hit.page}.png?dpi={dpi}")

    async def _one(self, index, hit, dpi: int, policy: PathPolicy) -> tuple[str | None, str | None, int]:
        try:  # in the command's ProcessScope, as render()
            found = await asyncio.to_thread(page_or_error, lambda: self.png(index, hit, dpi))
        except Stopped:
            return None, STOPPING, 0
        if isinstance(found, str):
            return None, policy.message(found), 0
        data, new = found
        return base64.b64encode(data).decode("ascii"), None, int(new)


async def highlight_regions(service, batcher, index, query: str, path: str, page: int) -> tuple[Region, ...]:
    """The regions of `query` on one page, to draw (`/pages?highlight=`, MCP get_page): its visual ones too
    where the model is loaded (the query encoded on the encoder thread, between two forward passes), its
    text ones only while it is not. A query that is no query is a UsageError naming `highlight`."""
    check_query_text(query, "highlight")
    vectors = None
    encoder = service.encoder
    if service.ready and not service.stale and encoder is not None:
        vectors = (await asyncio.wrap_future(batcher.run_on_encoder_thread(encoder.encode_queries, [query])))[0]
    return await asyncio.to_thread(page_regions, index.view, index.lexical, query, vectors, path, page)
