"""What the MCP tools do, without MCP: the warm index of `serve`, its path policy, capped images and text.

The warm index is serve.service's: the model loaded once, HEAD followed, queries encoded on one
thread and scored together on another.

Only the model's part of a search (encoding, the visual list) goes through serve's batcher; the rest of
a call (the text list, fusion, snippets, page text, images) runs on a worker thread of its own, so a
call slow there holds up no other, and a call its client left is abandoned when the server stops.

Nothing outside the index is read: documents are found by the name the index gives them (or their
sha256), and pages are rendered from what the index recorded, exactly as `serve` renders them."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from ..core.errors import IndexProblem, UsageError
from ..core.types import MODES, Mode, Region, SearchHit
from ..interop.reports import documents_document, status_document, text_misses
from ..interop.results import HitRegion
from ..query.request import QueryRequest
from ..serve.httpguard import PathPolicy
from ..serve.batcher import QueryBatcher
from ..serve.images import highlight_regions
from ..serve.service import IndexService
from .images import FittedImage, McpPageImages
from .schemas import (DocumentEntry, DocumentList, FailedDocument, FoundPage, ImageCaps, IndexStatus, PageAnswer, PageImage,
                      SearchAnswer, TextCaps, WatchStatus)

WORKERS = 32  # calls whose work past the model runs side by side; the 33rd waits for one of them
BUILD_HINT = "Build it first: lgpt-index build DOCS (with the same --index-dir / --name / --store as this server)."
T = TypeVar("T")


class IndexTools:
    """The index behind the tools: one per server process, shared by every MCP session."""

    def __init__(self, service: IndexService, policy: PathPolicy | None = None, caps: ImageCaps | None = None,
                 text_caps: TextCaps | None = None) -> None:
        self.service = service
        self.policy = policy or PathPolicy()
        self.policy.learn_location(service.store.location)
        service.on_switch = self.policy.learn  # a generation the batcher opens is known before its messages are
        self.caps = caps or ImageCaps()
        self.text_caps = text_caps or TextCaps()
        self.batcher = QueryBatcher(service)
        self.images = McpPageImages(self.caps)
        self._loading: Future | None = None
        self._batching = False
        self._lock = threading.Lock()
        # not the event loop's default executor: the loop waits for that one's threads when it closes
        self._workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="lgpt-mcp")
        self._working = 0  # calls running on the workers

    # the index and the model

    def current(self):
        """The current generation (reopened when a build or remove moved HEAD since the last call)."""
        store = self.service.store
        if not store.exists():
            raise IndexProblem(f"no index at {store.location}.", hint=BUILD_HINT)
        index = self.service.index()
        self.policy.learn(index)
        return index

    def start_loading(self) -> Future | None:
        """Load the model on the encoder thread, once, as soon as there is an index to say which."""
        with self._lock:
            if self._loading is None and self.service.store.exists():
                self._loading = self.batcher.run_on_encoder_thread(self._load)
            return self._loading

    def settled(self) -> bool:
        """No work left on a thread of ours: no model load under way, no call running on a worker, no query
        in the batcher. Where some is left, the client is gone and nothing waits for it: the caller exits."""
        with self._lock:
            working = self._working
        return (self._loading is None or self._loading.done()) and not working and not self.batcher.busy

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on a worker thread: a slow call holds only its own thread (never the event loop, nor
        another call); cancelled (the client left), it is abandoned."""
        return await asyncio.get_running_loop().run_in_executor(self._workers, self._counted, work, *args)

    def _counted(self, work: Callable[..., T], *args: Any) -> T:
        with self._lock:
            self._working += 1
        try:
            return work(*args)
        finally:
            with self._lock:
                self._working -= 1

    def _load(self) -> None:
        self.service.load()  # records a failure instead of raising
        if self.service.failure is None:
            self.service.warm_up()

    def model_state(self) -> str:
        service = self.service
        if service.failure is not None:
            return "failed"
        if service.encoder is None:
            return "loading" if self._loading is not None else "not loaded"
        return "stale" if service.stale else "ready"

    # the tools

    async def search(self, request: QueryRequest) -> tuple[SearchAnswer, list[FittedImage]]:
        """The tool's answer to `request` (one query, schemas.SearchArguments)."""
        index = await self.run(self.current)
        used = index.mode(request)  # the query layer's choice: a mode the index cannot answer is refused
        if index.page_count == 0:
            raise IndexProblem(f"the index at {index.store.location} holds no pages yet.", hint=BUILD_HINT)
        generation, visual, vectors = (index, None, None) if used == "text" else await self._visual_list(index, request)  # text: no model
        return await self.run(self._answer, generation, request, used, visual, vectors)

    async def _visual_list(self, index, request: QueryRequest) -> tuple[Any, list[SearchHit], Any]:
        """The model's part of `request`: its visual list, deep enough for the fusion, from the batcher
        (with the queries of the other calls); the generation that answered, and the query's vectors."""
        loading = self.start_loading()
        if loading is not None:
            await asyncio.wrap_future(loading)
        self.service.require_ready()
        if not self._batching:  # started on the loop that serves the tools
            self.batcher.start()
            self._batching = True
        # the text side is the worker's (_answer); the depth is the fusion's, past the tool's own limit on k
        visual = request.model_copy(update={"k": index.visual_depth(request), "mode": "visual", "with_text": False,
                                            "all_copies": True, "regions": False})  # the raw list: _answer collapses the copies
        answer = await self.batcher.submit(visual)
        return answer.index, answer.results[0], answer.vectors[0]

    def _answer(self, index, request: QueryRequest, used: Mode, visual: list[SearchHit] | None,
                vectors: Any) -> tuple[SearchAnswer, list[FittedImage]]:
        """On a worker: the rest of a search (the text list, fusion, snippets, page text, regions, images), capped."""
        hits = index.finish(request, None if visual is None else [visual], None if vectors is None else [vectors])[0]
        entries = [self._hit(index, hit) for hit in hits]
        self._cap_texts(entries)
        images: list[FittedImage] = []
        if request.with_images and hits:
            for entry, image in zip(entries, self.images.fitted(index, hits)):
                self._attach(entry, image, images)
        return SearchAnswer(query=request.queries[0], mode=used, k=request.k, generation=index.manifest.generation,
                            hits=entries, hints=text_misses(index, used, request.queries, [hits])[0]), images

    def list_documents(self, prefix: str, offset: int, limit: int) -> DocumentList:
        index = self.current()
        published = self.policy.publish(documents_document(index.view, self.policy.prefix(prefix, index)), index)
        everything = published["documents"]
        chosen = everything[offset : offset + limit]
        more = offset + limit if offset + limit < len(everything) else None
        return DocumentList(generation=published["generation"], prefix=prefix, offset=offset, total=len(everything),
                            documents=[DocumentEntry(document=d["path"], pages=d["pages"], kind=d["kind"], sha256=d["sha256"],
                                                     converter=d["converter"], metadata=d["metadata"]) for d in chosen],
                            next_offset=more)

    def status(self) -> IndexStatus:
        index = self.current()
        status = self.policy.publish(status_document(index.view), index)
        problem = self.service.failure.message if self.service.failure else self.service.stale
        return IndexStatus(index=status["index"], generation=status["generation"], documents=status["documents"],
                           pages=status["pages"], model=status["model"]["id"], model_state=self.model_state(),
                           model_problem=self.policy.message(problem) if problem else None, modes=search_modes(index),
                           ready_modes=list(self.service.ready_modes(index)),
                           page_text=has_text(index), last_build=status["last_build"],
                           failures=[FailedDocument(document=f["path"], stage=f["stage"], reason=self.policy.message(f["reason"]))
                                     for f in status["failures"]],
                           image_caps={"per_image": self.caps.per_image, "per_answer": self.caps.per_answer},
                           text_caps={"per_page": self.text_caps.per_page, "per_answer": self.text_caps.per_answer},
                           watch=self._watch_status())

    def _watch_status(self) -> WatchStatus | None:
        if self.service.watch_status is None:
            return None
        state = self.service.watch_status()
        return WatchStatus(**{**state, "problem": self.policy.message(state["problem"]) if state["problem"] else None})

    async def page(self, document: str, page: int, with_image: bool, highlight: str | None) -> tuple[PageAnswer, list[FittedImage]]:
        """The get_page tool's answer; with `highlight`, its regions found (serve.images.highlight_regions) and drawn."""
        index, hit = await self.run(self._page_hit, document, page)
        regions = None
        if highlight is not None:
            regions = await highlight_regions(self.service, self.batcher, index, highlight, hit.path, hit.page)
        return await self.run(self.get_page, index, hit, with_image, regions)

    def _page_hit(self, document: str, page: int) -> tuple[Any, SearchHit]:
        index = self.current()
        if not self.policy.absolute and os.path.isabs(document):  # one answer whatever it names: it tells no folder
            raise UsageError("document: an absolute path; documents are named as list_documents names them (reports/q3.pdf), "
                             "or by their sha256 (absolute paths are answered only with --absolute-paths).")
        doc = next((d for d in index.documents if document in (self._name(d.path, index), d.sha256)), None)
        if doc is None:
            raise UsageError("document: not in the index (its name is not repeated back); list_documents names the "
                             "documents it holds.")
        if not 1 <= page <= doc.pages:
            raise UsageError(f"page {page} out of range: {self._name(doc.path, index)} has {doc.pages} page(s).")
        return index, SearchHit(0, 0.0, doc.path, page, doc.sha256, doc.kind)

    def get_page(self, index, hit: SearchHit, with_image: bool,
                 regions: Sequence[Region] | None = None) -> tuple[PageAnswer, list[FittedImage]]:
        """A page's answer: its text and image (capped), and `regions` (None: not asked) listed and drawn on the image."""
        doc = index.document(hit.path)
        answer = PageAnswer(document=self._name(hit.path, index), page=hit.page, pages=doc.pages, sha256=hit.sha256,
                            kind=hit.kind, text=page_text(index, hit),
                            regions=_listed(regions))
        self._cap_texts([answer])
        images: list[FittedImage] = []
        if with_image:
            self._attach(answer, self.images.fitted(index, [hit], regions)[0], images)
        return answer, images

    # naming

    def _name(self, path: str, index) -> str:
        return path if self.policy.absolute else self.policy.relative(path, self.policy.root(index))

    def _hit(self, index, hit: SearchHit) -> FoundPage:
        return FoundPage(rank=hit.rank, score=hit.score, document=self._name(hit.path, index), page=hit.page, sha256=hit.sha256,
                         kind=hit.kind, metadata={str(k): str(v) for k, v in hit.metadata.items()}, snippet=hit.snippet,
                         text=page_text(index, hit), copies=[self._name(path, index) for path in hit.copies],
                         regions=_listed(hit.regions))

    def _cap_texts(self, entries: Sequence[FoundPage | PageAnswer]) -> None:
        """The page texts of one answer cut to fit the text caps, each cut one saying so."""
        limits = self.text_caps.limits([len(entry.text or "") for entry in entries])
        for entry, limit in zip(entries, limits):
            if entry.text is not None and len(entry.text) > limit:
                entry.text, entry.text_truncated = cut_text(entry.text, limit), True

    def _attach(self, entry: FoundPage | PageAnswer, image: FittedImage | str, images: list[FittedImage]) -> None:
        if isinstance(image, str):
            entry.image_error = self.policy.message(image)
            return
        images.append(image)
        # the answer's content: its JSON text first, then the images in order
        entry.image = PageImage(content_index=len(images), width=image.width, height=image.height, bytes=len(image.png),
                                scaled=image.scaled)


def cut_text(text: str, limit: int) -> str:
    """The first `limit` characters of `text` at most, ending at a space where one is near the limit."""
    kept = text[:limit]
    space = max(kept.rfind(" "), kept.rfind("\n"))
    return (kept[:space] if space > limit * 0.9 else kept).rstrip()


def has_text(index) -> bool:
    """Whether this generation holds page text."""
    return index.lexical is not None and index.lexical.has_pages()


def search_modes(index) -> list[str]:
    """visual always; text and hybrid where the index reads text (even while no page has any)."""
    return list(MODES) if index.lexical is not None else ["visual"]


def page_text(index, hit: SearchHit) -> str | None:
    """The page's text: carried by the hit, or read from the generation's text index."""
    text = hit.text
    if text is not None:
        return text
    lexical = index.lexical
    return lexical.page_text(hit.path, hit.page) if lexical is not None else None


def _listed(regions: Sequence[Region] | None) -> list[HitRegion] | None:
    """Regions as the MCP answers list them (the query document's form); None: not asked."""
    return None if regions is None else [HitRegion(**region.to_dict()) for region in regions]
