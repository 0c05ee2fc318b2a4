"""A query request, defined once: what every front end asks of an index.

The CLI, `POST /query`, the MCP `search` tool, the retrievers and `eval` each build one at their
edge; the HTTP OpenAPI schema and the MCP tool's input schema are generated from it.

It owns the one check of a query's text (`check_query_text`: not empty, at most MAX_QUERY_CHARS
characters, UTF-8) and the one parser of the first pass (N or "auto"); its mode and fusion are the
literals of core.types (Mode, Fusion), which the query document (interop.results) reports too.
What a front end takes beyond the request's own bounds is a `Limits` of its subclass (`serve`: at most 64
queries; MCP: one query, k at most 50; neither decides "auto" for a remote index).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from ..core.errors import UsageError
from ..core.metadata import parse_filters
from ..core.types import Fusion, Mode
from .bounds import DPI, MAX_FIRST_PASS, MAX_K, MAX_QUERY_CHARS, MAX_RRF_K, check_utf8
from .fusion import RRF_K

AUTO: Final = "auto"  # first_pass: the index decides (codes.plan); a local index only


@dataclass(frozen=True)
class Limits:
    """What one front end takes: the request's own bounds narrowed, and how its messages name a query
    (`place`: {number} 1-based, {index} 0-based)."""

    queries: int | None = None  # queries in one request; None: any number
    k: int = MAX_K
    auto: bool = True  # whether first_pass may be "auto"
    place: str = "query {number}"


def check_query_text(text: object, place: str) -> str:
    """A query fit for a model: text, not blank, at most MAX_QUERY_CHARS characters, UTF-8 (a lone
    surrogate, such as Python keeps for argv bytes that are not UTF-8, no tokenizer reads); a UsageError
    naming `place` otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"{place} is empty.")
    if len(text) > MAX_QUERY_CHARS:
        from ..models.protocols import MAX_QUERY_TOKENS  # numpy comes with it: only when it is said

        raise UsageError(f"{place} is {len(text):,} characters long; queries are limited to {MAX_QUERY_CHARS:,} "
                         f"characters ({MAX_QUERY_TOKENS} tokens, what the model reads).")
    check_utf8(text, place)
    return text


def _filters(value: Any) -> Any:
    """`{"team": "finance"}`, `["team=finance"]` (the command line's KEY=VALUE) or None: a dict."""
    if value is None:
        return {}
    if isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            if isinstance(item, str):
                check_utf8(item, f"filters[{number}]")
        return parse_filters([str(item) for item in value], place="filters")
    if isinstance(value, dict):
        for key, item in value.items():
            if not key:
                raise UsageError("filters: a key may not be empty.")
            if isinstance(key, str) and isinstance(item, str):
                check_utf8(f"{key}={item}", "filters (a key or its value)")
    return value


Filters = Annotated[dict[str, str], BeforeValidator(_filters, json_schema_input_type=dict[str, str] | list[str] | None)]


class QuerySettings(BaseModel):
    """How queries are answered: a request's every field but its queries (a retriever keeps them, and asks
    each query it is given with them: `asking`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    limits: ClassVar[Limits] = Limits()

    k: int = Field(default=5, ge=1, description="pages per query")  # at most limits.k (_k: one bound, the front end's)
    filters: Filters = Field(default_factory=dict, description='{"team": "finance"} or ["team=finance"]: all must match')
    first_pass: Annotated[int, Field(ge=1, le=MAX_FIRST_PASS)] | Literal["auto"] | None = Field(
        default=None, description="lossy: score sign codes first, then only the best N pages exactly")
    mode: Mode | None = Field(default=None, description="how to rank: hybrid (the text and visual lists fused: the default where "
                                                        "the index has page text), visual (the page images: the default otherwise) or text")
    fusion: Fusion = Field(default="weighted", description="hybrid: evidence-weighted scores, or plain reciprocal-rank fusion")
    rrf_k: int = Field(default=RRF_K, ge=0, le=MAX_RRF_K, description="hybrid with fusion rrf: the k of 1 / (k + rank)")
    with_text: bool = Field(default=False, description="each result carries its page's text")
    with_images: bool = Field(default=False, description="each result carries its page as an image (PNG)")
    dpi: int = Field(default=DPI[1], ge=DPI[0], le=DPI[2], description="resolution of those images")
    regions: bool = Field(default=False, description="each result carries where on its page it matched: boxes in page fractions, "
                                                      "from the words holding the query's terms and the patches its tokens matched")
    all_copies: bool = Field(default=False, description="byte-identical documents listed apart, a hit per path (by default "
                                                         "their pages are one hit, the other paths in its `copies`)")

    @field_validator("k")
    @classmethod
    def _k(cls, k: int) -> int:
        if k > cls.limits.k:
            raise PydanticCustomError("less_than_equal", "Input should be less than or equal to {le}", {"le": cls.limits.k})
        return k

    @field_validator("first_pass", mode="before")
    @classmethod
    def _first_pass(cls, value: Any) -> Any:
        """The one parser of the first pass: N (a number of candidate pages, also as text) or "auto"."""
        if value is None or (value == AUTO and cls.limits.auto):
            return value
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            number = int(value)
        if number is None or not 1 <= number <= MAX_FIRST_PASS:
            expected = (f"neither a number of candidate pages (1 to {MAX_FIRST_PASS:,}) nor 'auto'" if cls.limits.auto
                        else f"not a number of candidate pages (1 to {MAX_FIRST_PASS:,})")
            raise PydanticCustomError("first_pass", "{value} is " + expected, {"value": repr(value)})
        return number

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        """The schema with this front end's limits (a subclass's) in place of the request's own bounds."""
        schema = handler(core_schema)
        fields = handler.resolve_ref_schema(schema)["properties"]
        if cls.limits.queries is not None and "queries" in fields:
            fields["queries"]["maxItems"] = cls.limits.queries
        fields["k"]["maximum"] = cls.limits.k
        if not cls.limits.auto:
            fields["first_pass"]["anyOf"] = [kind for kind in fields["first_pass"]["anyOf"] if kind.get("const") != AUTO]
        return schema

    @property
    def filtered(self) -> dict[str, str] | None:
        """The filters, or None when there are none."""
        return dict(self.filters) or None

    def asking(self, *queries: str) -> QueryRequest:
        """The request of `queries` with these settings (the queries checked)."""
        return QueryRequest(queries=queries, **self.model_dump(exclude_unset=True))


class QueryRequest(QuerySettings):
    """One request: its queries (encoded together) and how they are answered."""

    queries: tuple[str, ...] = Field(min_length=1, description=f"the questions, each at most {MAX_QUERY_CHARS} characters")

    @field_validator("queries")
    @classmethod
    def _queries(cls, queries: tuple[str, ...]) -> tuple[str, ...]:
        most = cls.limits.queries
        if most is not None and len(queries) > most:
            raise PydanticCustomError("too_long", "List should have at most {max_length} items after validation, not {actual_length}",
                                      {"max_length": most, "actual_length": len(queries)})
        return tuple(check_query_text(text, cls.limits.place.format(number=n + 1, index=n)) for n, text in enumerate(queries))


Settings = TypeVar("Settings", bound=QuerySettings)


def validated(model: type[Settings], what: str, **fields: Any) -> Settings:
    """`model` (QueryRequest, QuerySettings) from keyword arguments: the Python API's edge, where a bad
    field is a UsageError naming `what` and the field."""
    from pydantic import ValidationError

    try:
        return model(**fields)
    except ValidationError as exc:
        raise UsageError(f"{what} ({problems(exc.errors())}).") from None


def problems(errors: Sequence[Mapping[str, Any]], whole: str = "request") -> str:
    """A ValidationError's first few complaints on one line, each field named as a client writes it (`queries[1]:
    ...`; `whole`: the request itself; a body that is no JSON: where it stops). A field whose part has a complaint
    of its own is not named too (a list whose item is refused is not also said to be short of items)."""
    located = [(tuple(part for part in error.get("loc", ()) if part != "body"), error) for error in errors]
    parents = {where[:depth] for where, _ in located for depth in range(len(where))}
    found: list[str] = []
    for where, error in located:
        if where in parents:
            continue
        if error.get("type") == "json_invalid":
            at = f", at character {where[0]}" if where and isinstance(where[0], int) else ""
            found.append(f"{whole}: not JSON ({(error.get('ctx') or {}).get('error', 'a decode error')}{at})")
        else:
            name = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in where).lstrip(".") or whole
            found.append(f"{name}: {error.get('msg', 'invalid')}")
        if len(found) == MAX_PROBLEMS:
            break
    return "; ".join(found)


MAX_PROBLEMS = 3  # a message names this many, the first ones
