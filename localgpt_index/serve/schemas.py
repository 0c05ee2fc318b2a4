"""What `serve` accepts and answers: the request body, the limits, the error document.

The request body is the query request (query.request) with the server's limits; a document leaves
as JSON with ASCII escapes, an error in the one error shape. The query document it answers with is
the CLI's own (interop.results.QueryDocument)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel, Field
from pydantic_core import PydanticSerializationError, to_json

from ..query.request import Limits, QueryRequest
from .httpguard import error_body

MAX_BODY_BYTES = 1 << 20
MAX_QUERIES = 64


class QueryBody(QueryRequest):
    """`POST /query`: the queries of one request are encoded together, and with those of
    requests that arrive within a few milliseconds."""

    limits = Limits(queries=MAX_QUERIES, auto=False, place="queries[{index}]")


class ErrorDocument(BaseModel):
    error: dict[str, Any] = Field(description='{"status": 400, "message": "..."}')


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
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
