"""The MCP server (the official SDK's MCPServer): four read-only tools over one warm index.

Each tool has a typed input schema (its parameters) and output schema (its answer's model);
its answer is the model as structured content, the same as JSON text, then any page images.
A failure is a tool error (isError) with the CLI's message: never a traceback."""

from __future__ import annotations

import base64
import functools
import inspect
import json
import re
import sys
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError, WithJsonSchema

from .._version import __version__
from ..core.errors import LgptError
from ..query.bounds import MAX_QUERY_CHARS
from ..serve.httpguard import printable, redact
from .backend import IndexTools
from .images import FittedImage
from .schemas import MAX_LIST, DocumentList, IndexStatus, PageAnswer, SearchAnswer, SearchArguments

INSTRUCTIONS = """lgpt-index: visual retrieval over an indexed folder of documents (PDF, office files, images).
`search` returns the pages that best answer a question (with their images when asked, size-capped);
`get_page` shows one page; `list_documents` and `index_status` say what the index holds."""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

SEARCH_FIELDS = ("k", "filters", "mode", "first_pass", "with_images", "all_copies", "regions")  # the request's fields the search tool takes
QUERY_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "description": "the question, in words"}
Document = Annotated[str, Field(min_length=1, max_length=4096, description="a document as search or list_documents name it "
                                                                            "(or its sha256)")]
Page = Annotated[int, Field(ge=1, description="1-based page number")]


def create_server(tools: IndexTools, lifespan=None) -> MCPServer:
    """The server with its four tools; `lifespan` runs once when it starts serving."""
    server: MCPServer = MCPServer("lgpt-index", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING",
                                  lifespan=lifespan, middleware=[_plain_argument_errors])

    async def search(**arguments: Any) -> CallToolResult:
        """The pages of the indexed documents that best answer `query`, best first: document, page, score, the
        page's text when the index has it (cut to fit the text caps), and with `with_images` the page images,
        scaled down to fit the image caps."""
        query = arguments.pop("query")
        try:
            request = SearchArguments.model_validate({"queries": [query], "with_text": True, **arguments})
        except ValidationError as exc:  # past the types the SDK checked: the request's own limits, said as the SDK says its own
            # (as it is: the policy's rewriting of the folders it knows, applied to the values echoed, would tell them)
            raise ToolError(plain_argument_problems(str(exc))) from None
        answer, images = await tools.search(request)
        return _result(answer, images)

    search.__signature__ = search_signature()  # type: ignore[attr-defined]  # the SDK reads the tool's parameters from it
    server.tool(annotations=READ_ONLY)(_tool_errors(tools)(search))

    @server.tool(annotations=READ_ONLY)
    @_tool_errors(tools)
    async def list_documents(prefix: Annotated[str, Field(max_length=4096, description="only documents whose path starts "
                                                                                          "with this (a folder or a name)")] = "",
                             offset: Annotated[int, Field(ge=0)] = 0,
                             limit: Annotated[int, Field(ge=1, le=MAX_LIST)] = 100) -> DocumentList:
        """The documents in the index (paged: pass next_offset as offset for the next page)."""
        return await tools.run(tools.list_documents, prefix, offset, limit)

    @server.tool(annotations=READ_ONLY)
    @_tool_errors(tools)
    async def index_status() -> IndexStatus:
        """What the index holds (documents, pages, model, the search modes it answers) and whether its model is loaded."""
        return await tools.run(tools.status)

    @server.tool(annotations=READ_ONLY)
    @_tool_errors(tools)
    async def get_page(document: Document, page: Page,
                       with_image: Annotated[bool, Field(description="the page as an image (PNG)")] = True,
                       highlight: Annotated[str | None, Field(min_length=1, max_length=MAX_QUERY_CHARS,
                                                              description="a question: the page's regions that answer it drawn "
                                                                          "on its image (the words outlined, the model's "
                                                                          "matches as a heat map) and listed in `regions`")] = None,
                       ) -> Annotated[CallToolResult, PageAnswer]:
        """One page of an indexed document: its image (size-capped) and its text when the index has it (capped);
        with `highlight`, where on it that question matched."""
        answer, images = await tools.page(document, page, with_image, highlight)
        return _result(answer, images)

    return server


def search_signature() -> inspect.Signature:
    """The search tool's parameters, generated from its request (SearchArguments): `query`, then the request's
    fields it takes, each published with the request's own schema (the tool's limits in it) and checked when
    the request is built."""
    published = SearchArguments.model_json_schema()["properties"]
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("query", keyword, annotation=Annotated[str, WithJsonSchema(QUERY_SCHEMA)])]
    for name in SEARCH_FIELDS:
        field = SearchArguments.model_fields[name]
        parameters.append(inspect.Parameter(name, keyword, default=field.get_default(call_default_factory=True),
                                            annotation=Annotated[Any, WithJsonSchema(published[name])]))
    return inspect.Signature(parameters, return_annotation=Annotated[CallToolResult, SearchAnswer])


def _result(answer: BaseModel, images: list[FittedImage]) -> CallToolResult:
    structured = answer.model_dump(mode="json")
    content: list[Any] = [TextContent(type="text", text=json.dumps(structured, ensure_ascii=False))]
    content += [ImageContent(type="image", data=base64.b64encode(image.png).decode("ascii"), mime_type="image/png")
                for image in images]
    return CallToolResult(content=content, structured_content=structured)


_ARGUMENTS_HEADER = re.compile(r"\d+ validation errors? for \w+Arguments\n")
_ARGUMENT_PROBLEM = re.compile(r"^(?P<where>\S[^\n]*)\n  (?P<what>[^\n]*?) \[type=(?P<type>[\w.]+), input_value=(?P<value>.*?), "
                               r"input_type=\w+\](?:\n +For further information visit \S+)?", re.MULTILINE)


def plain_argument_problems(text: str) -> str:
    """The SDK's text for arguments that fail the input schema (pydantic's report, with its type codes
    and links) as one line a person or a model reads: `k: Input should be a valid integer (got 'many')`."""
    header = _ARGUMENTS_HEADER.search(text)
    if header is None:
        return text
    problems = [f"{m['where']}: {m['what']}" + ("" if m["type"] == "missing" else f" (got {m['value'][:80]})")
                for m in _ARGUMENT_PROBLEM.finditer(text, header.end())]
    return text[: header.start()] + "invalid arguments: " + "; ".join(problems) + "." if problems else text


async def _plain_argument_errors(ctx, call_next):
    """Server middleware: a tools/call answer that is an argument error gets plain_argument_problems' text."""
    result = await call_next(ctx)
    if ctx.method == "tools/call" and isinstance(result, dict) and result.get("isError"):
        for block in result.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "text":
                block["text"] = plain_argument_problems(block["text"])
    return result


def _tool_errors(tools: IndexTools):
    """A tool's failures as tool errors with the CLI's message (and hint), paths as the policy shows them."""

    def decorate(function):
        @functools.wraps(function)
        async def wrapper(*args, **kwargs):
            try:
                return await function(*args, **kwargs)
            except ToolError:
                raise
            except LgptError as exc:
                message = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
                raise ToolError(tools.policy.message(message)) from None
            except Exception as exc:  # noqa: BLE001 - a bug of ours: one line for the client and the log, no traceback
                reason = printable(redact(" ".join(str(exc).split())))[:300]
                message = f"internal error: {type(exc).__name__}{': ' + reason if reason else ''}"
                print(f"lgpt-index mcp: {function.__name__}: {message}", file=sys.stderr, flush=True)
                raise ToolError(tools.policy.message(message + "; this is a bug in lgpt-index, please report it")) from None

        return wrapper

    return decorate
