"""Value types shared across the layers: a file's kind, a page's owner, a search hit, a mode.

How a query is answered (its mode and fusion) is here too: query.request asks them, interop's
documents report them. No pydantic here (what a file looked like is core.filestat's): the command
line's warm path reads the modes without it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, get_args

Mode = Literal["hybrid", "visual", "text"]  # hybrid: the text and visual lists fused
MODES: Final[tuple[Mode, ...]] = get_args(Mode)
Fusion = Literal["weighted", "rrf"]  # how hybrid fuses its lists (query/fusion.py)
FUSIONS: Final[tuple[Fusion, ...]] = get_args(Fusion)
Kind = Literal["pdf", "image", "office", "markdown"]  # a document's kind, by its suffix (ingest/discover.py)


@dataclass(frozen=True)
class PageRef:
    """Whose page a vector block is: stores that keep one record per page (Qdrant) need it."""

    path: str
    page: int  # 1-based
    sha256: str
    kind: str
    metadata: dict


RegionSource = Literal["text", "visual"]  # from the page's words, or from the query tokens' best patches


@dataclass(frozen=True)
class Region:
    """Where on a page a hit matched: a box in page fractions (x0, y0, x1, y1; 0,0 the top left of the page
    as rendered), from the words holding the query's terms ("text") or the patches its tokens matched best
    ("visual"), with its score and what matched there (the terms, or the query tokens; a text region's words too)."""

    bbox: tuple[float, float, float, float]
    source: RegionSource
    score: float
    matched: tuple[str, ...] = ()
    text: str | None = None  # text regions: the words in the box, in reading order (index/text/regions.REGION_WORDS at most)

    def to_dict(self) -> dict:
        key = "terms" if self.source == "text" else "tokens"
        document: dict = {"bbox": [round(value, 4) for value in self.bbox], "source": self.source, "score": self.score,
                          key: list(self.matched)}
        if self.text is not None:
            document["text"] = self.text
        return document


@dataclass(frozen=True)
class SearchHit:
    rank: int
    score: float
    path: str
    page: int  # 1-based
    sha256: str
    kind: str
    metadata: dict = field(default_factory=dict)
    # hybrid queries: the page's place in each candidate list (None: not in that list's top N)
    fused: bool = False
    visual_rank: int | None = None
    text_rank: int | None = None
    visual_score: float | None = None
    text_score: float | None = None
    snippet: str | None = None  # the page's text where the query's words are, matched words marked
    text: str | None = None  # the page's whole text, when asked for
    copies: tuple[str, ...] = ()  # the other paths of a byte-identical document (query/copies.py)
    regions: tuple[Region, ...] | None = None  # where on the page it matched, when asked for (query/regions.py)

    def to_dict(self) -> dict:
        # by hand, not dataclasses.asdict: its recursive deep copy was most of a query answer's cost
        # in the server (metadata holds strings: a copy of the dict is enough)
        document = {"rank": self.rank, "score": self.score, "path": self.path, "page": self.page, "sha256": self.sha256,
                    "kind": self.kind, "metadata": dict(self.metadata)}
        if self.fused:
            document.update(visual_rank=self.visual_rank, text_rank=self.text_rank,
                            visual_score=self.visual_score, text_score=self.text_score)
        if self.snippet is not None:
            document["snippet"] = self.snippet
        if self.text is not None:
            document["text"] = self.text
        if self.copies:
            document["copies"] = list(self.copies)
        if self.regions is not None:
            document["regions"] = [region.to_dict() for region in self.regions]
        return document

    def changed(self, **fields: object) -> SearchHit:
        """This hit with `fields` changed, as dataclasses.replace gives it, without running __init__ again (a frozen
        dataclass's sets each of its 16 fields through object.__setattr__): a query's hits are changed two or three
        times each (rank, snippet, regions): 1.3 µs a change against replace's 5.4 (a 2-core AVX2 VM). The values are
        not checked."""
        if not fields.keys() <= self.__dataclass_fields__.keys():
            raise TypeError(f"SearchHit has no field {sorted(fields.keys() - self.__dataclass_fields__.keys())[0]!r}")
        hit = object.__new__(type(self))
        hit.__dict__.update(self.__dict__)
        hit.__dict__.update(fields)
        return hit
