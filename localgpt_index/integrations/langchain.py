"""A LangChain retriever over an index or a running `lgpt-index serve`.

langchain-core only (`pip install 'lgpt-index[langchain]'`):

    retriever = LgptRetriever.from_index(k=5)                      # ./.lgpt-index/default, the model loads here
    retriever = LgptRetriever.from_server("http://127.0.0.1:8765")  # the server's index and warm model
    documents = retriever.invoke("what was Q3 revenue?")
    documents = retriever.invoke("what was Q3 revenue?", k=1)      # options per call, over the retriever's own

Each page found is a langchain_core Document: the page text as `page_content` (empty where the
index holds none) and source.PageHit.metadata() as `metadata`, with `image_base64` too when
`with_images=True`; `retriever.page_image(document)` gives the page as a PIL image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field

from ..query.request import QuerySettings
from .source import PageHit, PageSource, open_source, per_call, retrieved_page_image, search_options

if TYPE_CHECKING:
    from PIL.Image import Image

    from ..query.search import Searcher

__all__ = ["LgptRetriever", "to_document"]


class LgptRetriever(BaseRetriever):
    """The pages of an lgpt-index index that best answer a query, as LangChain Documents."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: PageSource = Field(description="an IndexSource (Python API) or a ServerSource (a running serve)")
    options: QuerySettings = Field(default_factory=search_options)

    @classmethod
    def from_index(cls, index: Searcher | None = None, *, index_dir: str | None = None, name: str | None = None,
                   store: Any = None, **options: Any) -> LgptRetriever:
        """Over an open `Searcher` (localgpt_index.open_index), or the one `index_dir`/`name`/`store` names;
        `options` are the query's (search_options: k, filters, first_pass, mode, with_images, dpi...)."""
        return cls(source=open_source(index, index_dir=index_dir, name=name, store=store), options=search_options(**options))

    @classmethod
    def from_server(cls, url: str, *, token: str | None = None, **options: Any) -> LgptRetriever:
        """Over a running `lgpt-index serve` at `url` (its bearer `token` where it has one)."""
        return cls(source=open_source(server=url, token=token), options=search_options(**options))

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **options: Any) -> list[Document]:
        options.pop("verbose", None)  # invoke's own keyword, handed on with the rest
        return [to_document(hit) for hit in self.source.search(query, per_call(self.options, options))]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **options: Any) -> list[Document]:
        return await run_in_executor(None, self._get_relevant_documents, query, run_manager=run_manager.get_sync(), **options)

    def page_image(self, document: Document, dpi: int | None = None) -> Image:
        """The page `document` stands for, as a PIL image (rendered by the index or fetched from the server)."""
        return retrieved_page_image(self.source, document.metadata, dpi or self.options.dpi)


def to_document(hit: PageHit) -> Document:
    metadata = hit.metadata()
    if hit.image_base64 is not None:
        metadata["image_base64"] = hit.image_base64
    return Document(id=hit.id, page_content=hit.text or "", metadata=metadata)
