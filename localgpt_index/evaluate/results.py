"""The `eval --json` document, defined once.

The published schema localgpt_index/schemas/eval.schema.json is generated from it (`python -m
localgpt_index.evaluate.results` writes it; a test holds it current)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.types import Mode

EVAL_SCHEMA_VERSION: Final = 1
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "eval.schema.json"


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Measures(_Document):
    """trec_eval's measures (docs/eval.md), each in [0, 1]."""

    ndcg_1: float = Field(alias="ndcg@1", ge=0, le=1)
    ndcg_5: float = Field(alias="ndcg@5", ge=0, le=1)
    ndcg_10: float = Field(alias="ndcg@10", ge=0, le=1)
    recall_1: float = Field(alias="recall@1", ge=0, le=1)
    recall_5: float = Field(alias="recall@5", ge=0, le=1)
    recall_10: float = Field(alias="recall@10", ge=0, le=1)
    recall_100: float = Field(alias="recall@100", ge=0, le=1)
    mrr_10: float = Field(alias="mrr@10", ge=0, le=1)


class RetrievedPage(_Document):
    rank: int = Field(ge=1)
    path: str
    page: int = Field(ge=1)
    grade: int = Field(ge=0, description="its grade in the query set; 0 when it is not judged")


class QueryDetail(_Document):
    """One query's measures in one run (--per-query)."""

    id: str
    query: str
    measures: Measures
    first_relevant: int | None = Field(description="the rank of the first page graded 1 or more; null if none was returned")
    top: list[RetrievedPage] = Field(description="the first 10 pages returned")


class Group(_Document):
    """The queries that share a value of the --group-by key, and their mean measures."""

    queries: int = Field(ge=1)
    measures: Measures


class Run(_Document):
    """One way of answering: a mode, exact or with a first pass."""

    mode: Mode
    first_pass: int | None = Field(ge=1, description="pages the first pass kept (query --first-pass); null: exact")
    fusion: str | None = Field(description="hybrid: how its lists were fused (--fusions); null: the query layer's default")
    measures: Measures = Field(description="the mean over every query of the set")
    seconds: float = Field(ge=0, description="wall time of the run's queries, encoding included")
    per_query: list[QueryDetail] | None = Field(None, description="with --per-query", json_schema_extra=_no_default)
    groups: dict[str, Group] | None = Field(None, description="with --group-by KEY: per value of KEY (queries without it: "
                                            "'(none)')", json_schema_extra=_no_default)


class Unanswerable(_Document):
    """A judged page the index does not hold: it stays in the judgments, as a miss."""

    query_id: str
    path: str
    page: int = Field(ge=1)
    grade: int = Field(ge=0)
    reason: str


class EvalDocument(_Document):
    """The `eval --json` document."""

    version: Literal[1] = Field(description="the version of this document's schema")
    index: str
    model: str
    pool_factor: int = Field(ge=1, description="the index's --pool-factor (a build setting)")
    query_set: str
    format: Literal["jsonl", "beir"]
    queries: int = Field(ge=1)
    judged_pages: int = Field(ge=1, description="judgments with a grade of 1 or more")
    depth: int = Field(ge=1, description="pages asked for per query")
    unanswerable: list[Unanswerable]
    notes: list[str]
    runs: list[Run]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_unset=True)


def eval_json_schema() -> dict[str, Any]:
    schema = EvalDocument.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://lgpt-index/schemas/eval.schema.json",
            **schema, "title": "lgpt-index eval --json"}


if __name__ == "__main__":  # python -m localgpt_index.evaluate.results: write the published schema
    SCHEMA_FILE.write_text(json.dumps(eval_json_schema(), indent=2) + "\n")
    print(SCHEMA_FILE)
