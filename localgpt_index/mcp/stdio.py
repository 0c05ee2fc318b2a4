"""The stdio transport: the SDK's (stdio_server), with an answer to every line it cannot read.

The SDK drops a line its parser refuses (a lone surrogate escape, nesting past its depth limit, text
that is not JSON): the client that sent a request there would wait for ever. Here such a line gets a
JSON-RPC 2.0 error, -32700 (parse error) or -32600 (JSON, but not a JSON-RPC message), with the
line's id where it can be read (else null), and the server goes on with the next line."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError


async def serve_stdio(server: MCPServer) -> None:
    """`server.run("stdio")`, the lines the SDK cannot read answered (until the client closes stdin)."""
    # MCPServer.run_stdio_async's own route to the connection loop, with a relay between the transport and it
    lowlevel = server._lowlevel_server  # noqa: SLF001 - the SDK offers no public seam for the stdio read stream
    async with stdio_server() as (lines, write):
        relay, read = anyio.create_memory_object_stream[Any](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_answer_unreadable, lines, relay, write)
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
            tasks.cancel_scope.cancel()


async def _answer_unreadable(lines, relay, write) -> None:
    """Messages on to the server; for each line the transport could not read (an exception), its error."""
    async with relay:
        async for item in lines:
            if not isinstance(item, Exception):
                await relay.send(item)
                continue
            try:
                await write.send(SessionMessage(refusal(item)))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the server has ended


def refusal(problem: Exception) -> JSONRPCError:
    """The error that answers a line the SDK's parser refused with `problem`."""
    errors = problem.errors() if isinstance(problem, ValidationError) else []
    first: Mapping[str, object] = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        raw = first.get("input")
        reason = str(first.get("msg", "")).removeprefix("Invalid JSON: ")
        return _error(line_id(raw) if isinstance(raw, str) else None, PARSE_ERROR, f"Parse error: {reason or 'not JSON'}")
    found = next((error["input"].get("id") for error in errors if isinstance(error.get("input"), dict)), None)
    return _error(_usable_id(found), INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 request, notification or response")


def _error(request_id: int | str | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


_STRUCTURE = re.compile(r'["{}\[\]]')
_KEY_END = re.compile(r"\s*:\s*")
_DECODER = json.JSONDecoder()


def line_id(line: str) -> int | str | None:
    """The top-level "id" member of a JSON object on one line the parser refused, read without recursion
    (however deep the other members go) and without trusting the rest; None where none can be read."""
    if not line.lstrip().startswith("{"):
        return None
    depth, at = 0, 0
    try:
        while (mark := _STRUCTURE.search(line, at)) is not None:
            if mark.group() != '"':
                depth += 1 if mark.group() in "{[" else -1
                at = mark.end()
                continue
            text, at = _DECODER.raw_decode(line, mark.start())  # one string, by json's own (C) scanner
            colon = _KEY_END.match(line, at)
            if depth == 1 and text == "id" and colon is not None:
                value, _ = _DECODER.raw_decode(line, colon.end())
                return _usable_id(value)
    except (ValueError, RecursionError):
        return None
    return None


def _usable_id(value: object) -> int | str | None:
    """`value` as a JSON-RPC id (an integer or a string the answer can carry), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: it cannot be written back
            return None
        return value
    return None
