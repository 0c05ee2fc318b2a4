"""What the page feed (and the build's engines) pass on about each document, matched by type.

A document's events go out in order: DocumentOpened, its pages, DocumentDone; or DocumentFailed
(at any point, and nothing of it after). FeedEnded closes a feed's queue (not yielded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import DocumentError
from .render import PagePoints
from .text import PageText

if TYPE_CHECKING:
    import numpy as np  # not at run time: importing the ingest modules leaves numpy (and its warning filters) out


@dataclass
class OpenedDocument:
    """A document ready to render: its PDF (converted or not) or image file, and its page count."""

    pdf: Path | None = None
    image: Path | None = None
    pages: int = 0
    converter: str | None = None
    notes: tuple[str, ...] = ()  # what conversion changed (references dropped to stay inside the folder)
    points: tuple[PagePoints, ...] = ()  # every page's size (a PDF's; none for an image)


@dataclass(frozen=True)
class DocumentOpened:
    """Its page count is known (and its PDF, where it was converted)."""

    number: int  # the document's position in the work list
    document: OpenedDocument


@dataclass(frozen=True)
class PageReady:
    """One page, as the encoder's prepare_page left it (a file or an image while the model loads)."""

    number: int
    image: object


@dataclass(frozen=True)
class DocumentDone:
    """Every page of the document was sent: `pages` of them (from its first page in this build)."""

    number: int
    pages: int


@dataclass(frozen=True)
class DocumentFailed:
    number: int
    error: DocumentError


@dataclass(frozen=True)
class FeedEnded:
    """No more events (the end of a feed's queue)."""


@dataclass(frozen=True)
class PagesEncoded:
    """A batch of encoded pages, in order: per page its document and its vectors, or the error that
    fails its document. The build's engines yield these instead of PageReady; the page text stage
    (pagetext.py) adds each page's text (None: not read, for a page that fails its document)."""

    pages: tuple[tuple[int, np.ndarray | DocumentError], ...] = field(default=())
    texts: tuple[PageText | None, ...] = field(default=())

    @property
    def numbers(self) -> set[int]:
        return {number for number, _ in self.pages}


FeedEvent = DocumentOpened | PageReady | DocumentDone | DocumentFailed
EngineEvent = DocumentOpened | PagesEncoded | DocumentDone | DocumentFailed
