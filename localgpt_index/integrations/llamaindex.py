"""A LlamaIndex retriever over an index or a running `lgpt-index serve`.

llama-index-core only (`pip install 'lgpt-index[llamaindex]'`):

    retriever = LgptRetriever.from_index(similarity_top_k=5)
    retriever = LgptRetriever.from_server("http://127.0.0.1:8765", with_images=True)
    nodes = retriever.retrieve("what was Q3 revenue?")
    retriever.similarity_top_k = 1                                  # as on LlamaIndex's own retrievers

Each page found is a NodeWithScore: a TextNode with the page text (empty where the index holds none),
or with `with_images=True` an ImageNode that carries the page as base64 PNG too; source.PageHit.metadata()
is the node's metadata. Offline: nothing on this path tokenizes, so llama-index never reaches for its
tiktoken or NLTK files (tests/test_integrations.py checks that neither is even imported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import ImageNode, NodeWithScore, QueryBundle, TextNode

from ..core.errors import UsageError
from ..query.request import QuerySettings
from .source import PageHit, PageSource, open_source, per_call, retrieved_page_image, search_options

if TYPE_CHECKING:
    from PIL.Image import Image

    from ..query.search import Searcher

__all__ = ["LgptRetriever", "to_node"]

# Metadata an LLM or an embedding need not read (LlamaIndex puts a node's metadata into its content)
HIDDEN_METADATA = ["sha256", "rank", "kind", "has_text", "image_url", "image_error", "document_metadata", "regions"]


class LgptRetriever(BaseRetriever):
    """The pages of an lgpt-index index that best answer a query, as LlamaIndex nodes."""

    def __init__(self, source: PageSource, options: QuerySettings | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        self.source = source
        self.options = options or search_options()
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_index(cls, index: Searcher | None = None, *, index_dir: str | None = None, name: str | None = None,
                   store: Any = None, **options: Any) -> LgptRetriever:
        """Over an open `Searcher` (localgpt_index.open_index), or the one `index_dir`/`name`/`store` names;
        `options` are the query's (named_options: similarity_top_k, filters, first_pass, mode, with_images, dpi...)."""
        return cls(open_source(index, index_dir=index_dir, name=name, store=store), named_options(options))

    @classmethod
    def from_server(cls, url: str, *, token: str | None = None, **options: Any) -> LgptRetriever:
        """Over a running `lgpt-index serve` at `url` (its bearer `token` where it has one)."""
        return cls(open_source(server=url, token=token), named_options(options))

    @property
    def similarity_top_k(self) -> int:
        """Pages per query (`k` in `query` and LangChain); settable, as on LlamaIndex's own retrievers."""
        return self.options.k

    @similarity_top_k.setter
    def similarity_top_k(self, k: int) -> None:
        self.options = per_call(self.options, {"k": k})

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [to_node(hit, self.options.all_copies) for hit in self.source.search(query_bundle.query_str, self.options)]

    def page_image(self, node: NodeWithScore | TextNode, dpi: int | None = None) -> Image:
        """The page `node` stands for, as a PIL image (rendered by the index or fetched from the server)."""
        inner = node.node if isinstance(node, NodeWithScore) else node
        return retrieved_page_image(self.source, inner.metadata, dpi or self.options.dpi)


def named_options(options: dict[str, Any]) -> QuerySettings:
    """search_options under LlamaIndex's names: the number of pages is `similarity_top_k`."""
    if "k" in options:
        raise UsageError("bad retriever option (k: a LlamaIndex retriever names it similarity_top_k).")
    renamed = {("k" if key == "similarity_top_k" else key): value for key, value in options.items()}
    return search_options(**renamed)


def to_node(hit: PageHit, apart: bool = False) -> NodeWithScore:
    """The node of `hit`; `apart` (all_copies): its id names the path too, or LlamaIndex, which drops a
    node whose id it has seen, would keep one copy of the page."""
    common: dict[str, Any] = {"id_": f"{hit.id}&path={hit.path}" if apart else hit.id, "text": hit.text or "", "metadata": hit.metadata(),
                              "excluded_llm_metadata_keys": HIDDEN_METADATA, "excluded_embed_metadata_keys": HIDDEN_METADATA}
    if hit.image_base64 is not None:
        node: TextNode = ImageNode(image=hit.image_base64, image_mimetype="image/png", **common)
    else:
        node = TextNode(**common)
    return NodeWithScore(node=node, score=hit.score)
