"""What `serve` accepts and answers: the request body, the limits, the error document.

And the two ways a document leaves (JSON with ASCII escapes, the one error shape). The query document
it answers with is the CLI's own (interop.results.QueryDocument)."""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticSerializationError, to_json

from ..models.protocols import MAX_QUERY_CHARS
from .httpguard import error_body

MAX_BODY_BYTES = 1 << 20
MAX_QUERIES = 64
MAX_K = 1000


class QueryBody(BaseModel):
    """`POST /query`: the queries of one request are encoded together, and with those of
    requests that arrive within a few milliseconds."""

    model_config = ConfigDict(extra="forbid")
    queries: list[str] = Field(min_length=1, max_length=MAX_QUERIES,
                               description=f"at most {MAX_QUERIES}, each at most {MAX_QUERY_CHARS} characters")
    k: int = Field(5, ge=1, le=MAX_K, description="pages per query")
    filters: dict[str, str] | list[str] = Field(default_factory=dict,
                                                description='{"team": "finance"} or ["team=finance"]: all must match')
    first_pass: int | None = Field(None, ge=1, le=1_000_000,
                                   description="lossy: score sign codes first, then only the best N pages exactly")
    mode: Literal["hybrid", "visual", "text"] | None = Field(
        None, description="hybrid (the default when the index has page text), visual (the default otherwise) or text")
    fusion: Literal["weighted", "rrf"] = Field("weighted", description="hybrid: evidence-weighted scores, or plain reciprocal-rank fusion")
    rrf_k: int = Field(60, ge=0, le=100_000, description="hybrid with fusion rrf: the k of 1 / (k + rank)")
    with_text: bool = Field(False, description="each result carries its page's text")
    with_images: bool = Field(False, description="each result carries its page as base64 PNG")
    dpi: int = Field(150, ge=20, le=600, description="resolution of those images")


class ErrorDocument(BaseModel):
    error: dict[str, Any] = Field(description='{"status": 400, "message": "..."}')


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """The one error shape (httpguard.error_body) as the application's answer; `headers`: those the
    error carries (a 405's Allow, which HTTP requires)."""
    return Response(error_body(status, message), status_code=status, media_type="application/json", headers=headers)


def json_response(document: dict, headers: dict[str, str] | None = None) -> Response:
    """`document` as JSON with ASCII escapes, by pydantic's serializer (Rust: a /query answer in half
    the time of json.dumps), or by json.dumps where a string holds a lone surrogate (a file name that
    is not UTF-8 travels as a \\udcXX escape, as in the CLI's JSON)."""
    try:
        body = to_json(document, ensure_ascii=True)
    except (PydanticSerializationError, TypeError):  # the surrogate; TypeError: a pydantic-core without ensure_ascii
        body = json.dumps(document, ensure_ascii=True).encode()
    return Response(body, media_type="application/json", headers=headers)
