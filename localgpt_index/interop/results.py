"""The query result document (`query --json`, `POST /query`), defined once.

The CLI builds it (reports.query_document), the server names it as its response model (so the
OpenAPI is generated from it), `query --server` checks a server's answer against it (strictly),
and the published schema localgpt_index/schemas/query.schema.json is generated from it:
`python -m localgpt_index.interop.results` writes it, and a test holds the file current.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.types import Fusion, Mode

QUERY_SCHEMA_VERSION: Final = 2  # 2: no `results` at the top (each query's are in `queries`); `copies`
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "query.schema.json"


def _no_default(schema: dict[str, Any]) -> None:
    """An optional field that is absent rather than null: its schema shows no `"default": null`."""
    schema.pop("default", None)


def _png(schema: dict[str, Any]) -> None:
    _no_default(schema)
    schema.update(contentEncoding="base64", contentMediaType="image/png")


def _absent(description: str) -> Any:
    """A field that is left out of the document when it does not apply: never null (an explicit null
    is refused), its default unvalidated and unpublished."""
    return Field(None, description=description, json_schema_extra=_no_default)


def _nullable(description: str) -> Any:
    """A field that is left out where it does not apply, and null where it applies but has no value."""
    return Field(None, description=description, json_schema_extra=_no_default)


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HitRegion(_Document):
    """Where on the page a hit matched (core.types.Region): a box in page fractions, from the words or the patches."""

    bbox: list[float] = Field(min_length=4, max_length=4, description="x0, y0, x1, y1 in fractions of the page's width and "
                                                                     "height, from its top left, as the page is rendered")
    source: Literal["text", "visual"] = Field(description="text: the words holding the query's terms; visual: the patches "
                                                          "the query's tokens matched best")
    score: float = Field(description="text: its share of the query's words, each weighed by its rarity in the index (idf); "
                                     "visual: the MaxSim share of its tokens")
    terms: list[str] = _absent("text: the query's terms found there (as analysed)")
    tokens: list[str] = _absent("visual: the query's tokens whose best patches it covers")
    text: str = _absent("text: the words in the box, in reading order, 32 words at most (past that, whole lines from the "
                        "one holding its rarest query word; … where words are left out)")


class Hit(_Document):
    """One page that answers a query."""

    rank: int = Field(ge=1)
    score: float = Field(description="visual: MaxSim; text: BM25; hybrid: the fused score")
    path: str
    page: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    kind: Literal["pdf", "image", "office", "markdown"]  # discover's kinds (a test holds them equal)
    metadata: dict[str, str]
    image_base64: str | None = Field(None, description="the page as PNG; null when it was not rendered: image_error says why",
                                     json_schema_extra=_png)
    image_error: str = _absent("why the page carries no image")
    visual_rank: int | None = _nullable("hybrid: the page's rank in the visual candidate list; null: not in its top N")
    text_rank: int | None = _nullable("hybrid: the page's rank in the text (BM25) candidate list; null: not in its top N")
    visual_score: float | None = _nullable("hybrid: the page's MaxSim score; null: not in the visual list")
    text_score: float | None = _nullable("hybrid: the page's BM25 score; null: not in the text list")
    snippet: str = _absent("the page's text where the query's words are, each matched word between ** (indexes with page text)")
    text: str = _absent("the page's whole text (--with-text)")
    copies: list[str] = _absent("the other paths of byte-identical documents: this page is theirs too (absent: none, "
                                "or --all-copies, which lists them apart)")
    regions: list[HitRegion] = _absent("where on the page it matched, best first (--regions)")


class QueryAnswer(_Document):
    """The hits of one query, best first."""

    query: str
    results: list[Hit]
    hints: list[str] = _absent("text mode, no page found: why (the words no page holds, each with the nearest indexed "
                               "words; or a quoted phrase no page holds)")


class DeviceUse(_Document):
    """The device scorer's part (query --device cuda, --scorer device): where it scored, and what it read."""

    device: str = Field(description="the torch device that scored exactly, e.g. cuda:0")
    resident_bytes: int = Field(ge=0, description="bytes of float16 vectors kept on the device for this generation")
    streamed_bytes: int = Field(ge=0, description="bytes of vectors copied to the device for this answer (0: all resident)")
    stacked_queries: int = Field(ge=0, description="queries scored together in the last pass")


class Scoring(_Document):
    """How the pages were scored: exact MaxSim over every page, or the binary first pass
    (hamming MaxSim over 1-bit codes) with exact rescoring of `candidates` pages per query."""

    path: Literal["exact", "first-pass", "store"]
    candidates: int | None = _nullable("pages per query rescored exactly after the first pass")
    reason: str
    hint: str | None = _nullable("what would make the fast path answer, where the exact one did")
    exact_segments: int = Field(0, ge=0, description="segments without codes, all of whose pages were scored exactly",
                                json_schema_extra=_no_default)
    device: DeviceUse = _absent("present when the device scorer answered (a GPU: docs/performance.md, On a GPU)")


class QueryDocument(_Document):
    """The `query --json` document: the hits of every query (in `queries`), and with exactly one query,
    that query's text at the top too. Version 1 also repeated that query's `results` at the top."""

    version: Literal[2] = Field(description="the version of this document's schema")
    index: str
    model: str
    k: int = Field(ge=1)
    mode: Mode = _absent("how the pages were found: hybrid fuses the text and visual lists")
    fusion: Fusion = _absent("hybrid: how the two lists were fused")
    queries: list[QueryAnswer]
    query: str = _absent("present when exactly one query was asked")
    scoring: Scoring = _absent("how the pages were scored, when `query --first-pass` was given or the device scorer "
                               "answered (without them: exact, on the CPU)")
    text_pending: int = _absent("text and hybrid: how many pages of the index the text list could not read yet "
                                "(committed before their OCR: hybrid ranks them by their visual score alone)")

    def to_json(self) -> dict[str, Any]:
        """The document as the CLI prints it: fields that do not apply are left out, not null."""
        return self.model_dump(exclude_unset=True)


def hint_notes(document: dict[str, Any]) -> list[tuple[str, str]]:
    """The messages (level, text) printed beside a query document for its queries' `hints`, wherever it was
    answered (here, a warm service, a server)."""
    return [("info", f"hint: {hint} (query {answer['query']!r})") for answer in document["queries"] for hint in answer.get("hints", ())]


def query_json_schema() -> dict[str, Any]:
    """The published JSON schema of the query document (query.schema.json)."""
    schema = QueryDocument.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://lgpt-index/schemas/query.schema.json",
            **schema, "title": "lgpt-index query --json"}


if __name__ == "__main__":  # python -m localgpt_index.interop.results: write the published schema
    SCHEMA_FILE.write_text(json.dumps(query_json_schema(), indent=2) + "\n")
    print(SCHEMA_FILE)
