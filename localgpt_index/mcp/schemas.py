"""What the MCP tools answer (their output schemas) and the limits they keep (image and text caps).

Documents are named as `serve` names them (serve.httpguard.PathPolicy): relative to the folder
they were indexed from, unless the server runs with --absolute-paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, Field, PlainSerializer

from ..core.errors import UsageError
from ..interop.results import HitRegion
from ..query.request import Limits, QueryRequest

# a hit's regions as the query document has them: a field that does not apply left out, never null
Regions = Annotated[list[HitRegion], PlainSerializer(lambda regions: [region.model_dump(mode="json", exclude_none=True)
                                                                     for region in regions])]

MAX_K = 50  # hits per search: an answerer reads them all
MAX_LIST = 500  # documents per list_documents page
DEFAULT_IMAGE_BYTES = 512 * 1024  # one page image, as PNG
DEFAULT_ANSWER_IMAGE_BYTES = 2 * 1024 * 1024  # all the page images of one answer together
MIN_IMAGE_SIDE = 32  # a page is not shrunk below this: it says why it has no image instead
RENDER_DPI = 150  # pages are rendered at this resolution, then scaled down to fit the caps
DEFAULT_TEXT_CHARS = 20_000  # one page's text (a dense page holds 5,000-10,000 characters)
DEFAULT_ANSWER_TEXT_CHARS = 200_000  # all the page texts of one answer together


@dataclass(frozen=True)
class ImageCaps:
    """Bytes of PNG a page image may take, alone and with the others of its answer."""

    per_image: int = DEFAULT_IMAGE_BYTES
    per_answer: int = DEFAULT_ANSWER_IMAGE_BYTES

    def __post_init__(self) -> None:
        if self.per_image < 1024 or self.per_answer < 1024:
            raise UsageError("--max-image-bytes and --max-answer-image-bytes must be at least 1024.")

    def share(self, images: int) -> int:
        """The bytes each of `images` images may take: the total cap split evenly, at most the per-image cap."""
        return min(self.per_image, self.per_answer // max(1, images))


@dataclass(frozen=True)
class TextCaps:
    """Characters of page text an answer carries, per page and for all its pages together."""

    per_page: int = DEFAULT_TEXT_CHARS
    per_answer: int = DEFAULT_ANSWER_TEXT_CHARS

    def __post_init__(self) -> None:
        if self.per_page < 1 or self.per_answer < 1:
            raise UsageError("--max-text-chars and --max-answer-text-chars must be at least 1.")

    def limits(self, lengths: list[int]) -> list[int]:
        """The characters each of texts of `lengths` may keep: at most per_page each and per_answer
        together; a text shorter than an even share of what is left keeps all of it, and leaves the
        rest to the longer ones, which share it evenly."""
        wanted = [min(length, self.per_page) for length in lengths]
        budget, left, cap = self.per_answer, len(wanted), self.per_page
        for length in sorted(wanted):
            if length > budget // left:
                cap = budget // left
                break
            budget, left = budget - length, left - 1
        return [min(length, cap) for length in wanted]


class SearchArguments(QueryRequest):
    """The `search` tool's request: one query (its `query` argument), at most MAX_K pages, a number of pages
    for the first pass (the server's index is not this client's to judge); each hit carries its page's text."""

    limits = Limits(queries=1, k=MAX_K, auto=False, place="query")


class PageImage(BaseModel):
    """A page image sent as MCP image content (image/png), after the text content of the answer."""

    content_index: int = Field(description="position of the image in the answer's content list")
    width: int
    height: int
    bytes: int = Field(description="size of the PNG")
    scaled: bool = Field(description="downscaled to fit the size caps")


class FoundPage(BaseModel):
    """A page the search tool found, named as list_documents names its document."""

    rank: int
    score: float
    document: str = Field(description="the document's path, as list_documents names it")
    page: int = Field(description="1-based page number")
    sha256: str = Field(description="sha256 of the document's bytes")
    kind: str = Field(description="pdf, image, docx, ...")
    metadata: dict[str, str] = Field(default_factory=dict)
    snippet: str | None = Field(None, description="where the query's words are in the page's text (index with page text)")
    text: str | None = Field(None, description="the page's text, when the index holds page text (cut to fit the text caps)")
    text_truncated: bool = Field(False, description="the page's text was cut to fit the text caps (index_status says them)")
    image: PageImage | None = Field(None, description="the page image, when with_images asked for it")
    image_error: str | None = Field(None, description="why the page has no image")
    copies: list[str] = Field(default_factory=list, description="the other documents with the same bytes (this page is theirs "
                                                                "too), named as list_documents names them")
    regions: Regions | None = Field(None, description="where on the page it matched, best first (when `regions` asked): "
                                                              "boxes in page fractions from its top left")


class SearchAnswer(BaseModel):
    query: str
    mode: str = Field(description="how the pages were ranked")
    k: int
    generation: int = Field(description="the index generation that answered")
    hits: list[FoundPage]
    hints: list[str] = Field(default_factory=list, description="text mode, no page found: why (the words no page holds, "
                                                               "each with the nearest indexed words; or a quoted phrase no page holds)")


class DocumentEntry(BaseModel):
    document: str
    pages: int
    kind: str
    sha256: str
    converter: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class DocumentList(BaseModel):
    generation: int
    prefix: str
    offset: int
    total: int = Field(description="documents under the prefix")
    documents: list[DocumentEntry]
    next_offset: int | None = Field(None, description="offset of the next page of documents, if any")


class FailedDocument(BaseModel):
    document: str
    stage: str
    reason: str


class WatchStatus(BaseModel):
    state: str = Field(description="watching, building, retrying (its last build could not write: a full disk) or stopped")
    builds: int
    problem: str | None = Field(None, description="why it is retrying, or why it stopped")
    failed_in_a_row: int = Field(description="builds that could not write since the last that could")
    retry_in_s: float | None = Field(None, description="seconds until the next try, while retrying")
    exit_code: int | None = Field(None, description="once stopped")


class IndexStatus(BaseModel):
    index: str = Field(description="the index's name")
    generation: int
    documents: int
    pages: int
    model: str = Field(description="the model the index was built with")
    model_state: str = Field(description="loading, ready, failed or stale")
    model_problem: str | None = None
    modes: list[str] = Field(description="the search modes this index answers")
    ready_modes: list[str] = Field(description="the modes that answer now: text at once, visual and hybrid once the model is loaded")
    page_text: bool = Field(description="whether hits carry the page's text")
    last_build: str
    failures: list[FailedDocument] = Field(default_factory=list)
    image_caps: dict[str, int] = Field(description="bytes of PNG per image and per answer")
    text_caps: dict[str, int] = Field(description="characters of page text per page and per answer")
    watch: WatchStatus | None = Field(None, description="with --watch: what the watcher keeping the index up to date does")


class PageAnswer(BaseModel):
    document: str
    page: int
    pages: int = Field(description="pages of the document")
    sha256: str
    kind: str
    text: str | None = Field(None, description="the page's text (cut to fit the text caps)")
    text_truncated: bool = Field(False, description="the page's text was cut to fit the text caps")
    image: PageImage | None = None
    image_error: str | None = None
    regions: Regions | None = Field(None, description="with `highlight`: where on the page it matched, best first, "
                                                              "as drawn on the image (boxes in page fractions)")
