"""What the MCP tools do, without MCP: the warm index of `serve` (serve.service: the model loaded
once, HEAD followed, queries encoded on one thread and scored together on another), its path policy, and capped page images.

Nothing outside the index is read: documents are found by the name the index gives them (or their
sha256), and pages are rendered from what the index recorded, exactly as `serve` renders them."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from dataclasses import replace

from ..core.errors import IndexProblem, UsageError
from ..core.types import SearchHit
from ..interop.reports import documents_document, status_document
from ..serve.httpguard import PathPolicy, check_query_texts
from ..serve.batcher import QueryBatcher
from ..serve.service import IndexService, SearchRequest
from .images import FittedImage, McpPageImages
from .schemas import (DocumentEntry, DocumentList, FailedDocument, Hit, ImageCaps, IndexStatus, PageAnswer, PageImage,
                      SearchAnswer, WatchStatus)

BUILD_HINT = "Build it first: lgpt-index build DOCS (with the same --index-dir / --name / --store as this server)."


class IndexTools:
    """The index behind the tools: one per server process, shared by every MCP session."""

    def __init__(self, service: IndexService, policy: PathPolicy | None = None, caps: ImageCaps | None = None) -> None:
        self.service = service
        self.policy = policy or PathPolicy()
        self.policy.learn_location(service.store.location)
        service.on_switch = self.policy.learn  # a generation the batcher opens is known before its messages are
        self.caps = caps or ImageCaps()
        self.batcher = QueryBatcher(service)
        self.images = McpPageImages(self.caps)
        self._loading: Future | None = None
        self._batching = False
        self._lock = threading.Lock()

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
        """No model load under way (none started, or it ended)."""
        return self._loading is None or self._loading.done()

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

    async def search(self, query: str, k: int, filters: dict[str, str], mode: str | None, first_pass: int | None,
                     with_images: bool) -> tuple[SearchAnswer, list[FittedImage]]:
        query = check_query_texts([query], "query")[0]
        if any(not key for key in filters):
            raise UsageError("filters: a key may not be empty.")
        index = await asyncio.to_thread(self.current)
        request = search_request(index, query, k, filters, mode, first_pass)
        used = request_mode(index, request)
        if index.page_count == 0:
            raise IndexProblem(f"the index at {index.store.location} holds no pages yet.", hint=BUILD_HINT)
        loading = self.start_loading()
        if loading is not None:
            await asyncio.wrap_future(loading)
        self.service.require_ready()
        if not self._batching:  # started on the loop that serves the tools
            self.batcher.start()
            self._batching = True
        answer = await self.batcher.submit(request)
        hits = answer.results[0]
        entries = [self._hit(answer.index, hit) for hit in hits]
        images: list[FittedImage] = []
        if with_images and hits:
            fitted = await asyncio.to_thread(self.images.fitted, answer.index, hits)
            for entry, image in zip(entries, fitted):
                self._attach(entry, image, images)
        return SearchAnswer(query=query, mode=used, k=k, generation=answer.index.manifest.generation, hits=entries), images

    def list_documents(self, prefix: str, offset: int, limit: int) -> DocumentList:
        index = self.current()
        published = self.policy.publish(documents_document(index, self.policy.prefix(prefix, index)), index)
        everything = published["documents"]
        chosen = everything[offset : offset + limit]
        more = offset + limit if offset + limit < len(everything) else None
        return DocumentList(generation=published["generation"], prefix=prefix, offset=offset, total=len(everything),
                            documents=[DocumentEntry(document=d["path"], pages=d["pages"], kind=d["kind"], sha256=d["sha256"],
                                                     converter=d["converter"], metadata=d["metadata"]) for d in chosen],
                            next_offset=more)

    def status(self) -> IndexStatus:
        index = self.current()
        status = self.policy.publish(status_document(index), index)
        problem = self.service.failure.message if self.service.failure else self.service.stale
        return IndexStatus(index=status["index"], generation=status["generation"], documents=status["documents"],
                           pages=status["pages"], model=status["model"]["id"], model_state=self.model_state(),
                           model_problem=self.policy.message(problem) if problem else None, modes=search_modes(index),
                           page_text=has_text(index), last_build=status["last_build"],
                           failures=[FailedDocument(document=f["path"], stage=f["stage"], reason=self.policy.message(f["reason"]))
                                     for f in status["failures"]],
                           image_caps={"per_image": self.caps.per_image, "per_answer": self.caps.per_answer},
                           watch=self._watch_status())

    def _watch_status(self) -> WatchStatus | None:
        if self.service.watching is None:
            return None
        state = self.service.watching()
        return WatchStatus(**{**state, "problem": self.policy.message(state["problem"]) if state["problem"] else None})

    def get_page(self, document: str, page: int, with_image: bool) -> tuple[PageAnswer, list[FittedImage]]:
        index = self.current()
        doc = next((d for d in index.documents if document in (self._name(d.path, index), d.sha256)), None)
        if doc is None:
            raise UsageError(f"document {document!r}: not in the index; list_documents names the documents it holds.")
        name = self._name(doc.path, index)
        if not 1 <= page <= doc.pages:
            raise UsageError(f"page {page} out of range: {name} has {doc.pages} page(s).")
        hit = SearchHit(0, 0.0, doc.path, page, doc.sha256, doc.kind)
        answer = PageAnswer(document=name, page=page, pages=doc.pages, sha256=doc.sha256, kind=doc.kind,
                            text=page_text(index, hit))
        images: list[FittedImage] = []
        if with_image:
            self._attach(answer, self.images.fitted(index, [hit])[0], images)
        return answer, images

    # naming

    def _name(self, path: str, index) -> str:
        return path if self.policy.absolute else self.policy.relative(path, self.policy.root(index))

    def _hit(self, index, hit: SearchHit) -> Hit:
        return Hit(rank=hit.rank, score=hit.score, document=self._name(hit.path, index), page=hit.page, sha256=hit.sha256,
                   kind=hit.kind, metadata={str(k): str(v) for k, v in hit.metadata.items()}, snippet=getattr(hit, "snippet", None),
                   text=page_text(index, hit))

    def _attach(self, entry: Hit | PageAnswer, image: FittedImage | str, images: list[FittedImage]) -> None:
        if isinstance(image, str):
            entry.image_error = self.policy.message(image)
            return
        images.append(image)
        # the answer's content: its JSON text first, then the images in order
        entry.image = PageImage(content_index=len(images), width=image.width, height=image.height, bytes=len(image.png),
                                scaled=image.scaled)


# Page text and search modes come from the page-text work (issue 27: `SearchRequest.options`, a
# QueryOptions with the mode and with_text; `Index.lexical`, the generation's text index with
# `page_text(path, page)`; `Index.mode(options)`). Where the query layer has none of it, the index
# answers visual queries only and says so.

def _lexical(index):
    return getattr(index, "lexical", None)


def has_text(index) -> bool:
    """Whether this generation holds page text."""
    return _lexical(index) is not None


def _with_options() -> bool:
    return "options" in SearchRequest.__dataclass_fields__


def search_modes(index) -> list[str]:
    """visual always; text and hybrid where the query layer has modes and the index holds text."""
    return ["hybrid", "visual", "text"] if _with_options() and has_text(index) else ["visual"]


def search_request(index, query: str, k: int, filters: dict[str, str], mode: str | None, first_pass: int | None) -> SearchRequest:
    request = SearchRequest((query,), k, tuple(sorted(filters.items())), first_pass)
    if _with_options():
        from ..query.search import QueryOptions  # the page-text work's (see above)

        return replace(request, options=QueryOptions(mode=mode, with_text=True))
    if mode not in (None, "visual"):
        raise UsageError(f"mode {mode!r}: this index answers visual queries only (it holds no page text).",
                         hint="Leave mode out, or ask for mode visual.")
    return request


def request_mode(index, request: SearchRequest) -> str:
    """The mode that answers `request` (the query layer's choice; it refuses a mode the index cannot answer)."""
    options = getattr(request, "options", None)
    return index.mode(options) if options is not None else "visual"


def page_text(index, hit: SearchHit) -> str | None:
    """The page's text: carried by the hit, or read from the generation's text index."""
    text = getattr(hit, "text", None)
    if text is not None:
        return text
    lexical = _lexical(index)
    return lexical.page_text(hit.path, hit.page) if lexical is not None else None
