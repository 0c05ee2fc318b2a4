"""POST /query's well-formed requests are answered without FastAPI's per-request machinery
(serve/routes.py WellFormedQueries); every other request reaches the FastAPI route behind it, so
both answer alike. Run in-process (ASGI): two apps on one service, with and without the fast route."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from fastapi.routing import APIRoute
from helpers import report_index as build_report_index

from localgpt_index.serve.app import create_app
from localgpt_index.serve.middleware import RequestLog
from localgpt_index.serve.routes import WellFormedQueries

OK = json.dumps({"queries": ["quarterly report"], "k": 3}).encode()
JSON = "application/json"
CASES = {
    "ok": (JSON, OK),
    "two-queries": (JSON, b'{"queries": ["report", "scan"], "k": 2, "mode": "visual"}'),
    "filters": (JSON, b'{"queries": ["report"], "filters": ["team=finance"]}'),
    "media-type-case-and-charset": ("Application/JSON; charset=utf-8", OK),
    "duplicate-key": (JSON, b'{"queries": ["report"], "k": 1, "k": 2}'),
    "no-content-type": (None, OK),
    "text-plain": ("text/plain", OK),
    "plus-json": ("application/vnd.api+json", OK),
    "form": ("application/x-www-form-urlencoded", b"queries=report"),
    "empty": (JSON, b""),
    "not-json": (JSON, b"\xff\xfe not json"),
    "trailing": (JSON, OK + b" x"),
    "byte-order-mark": (JSON, b"\xef\xbb\xbf" + OK),
    "utf-16": (JSON, OK.decode().encode("utf-16")),
    "lone-surrogate-escape": (JSON, rb'{"queries": ["fine", "broken \ud800 text"]}'),
    "k-zero": (JSON, b'{"queries": ["q"], "k": 0}'),
    "unknown-field": (JSON, b'{"queries": ["q"], "path": "/etc/passwd"}'),
    "a-list": (JSON, b"[1, 2]"),
    "nan": (JSON, b'{"queries": ["q"], "k": NaN}'),
    "filter-syntax": (JSON, b'{"queries": ["q"], "filters": ["no-equals-sign"]}'),
    "empty-filter-key": (JSON, b'{"queries": ["q"], "filters": {"": "x"}}'),
    "blank-query": (JSON, b'{"queries": [" "]}'),
    "text-mode": (JSON, b'{"queries": ["q"], "mode": "text"}'),
}


@pytest.fixture(scope="module")
def service(fake_model, tmp_path_factory):
    from localgpt_index.serve.service import IndexService

    built = build_report_index(tmp_path_factory.mktemp("fastroute"), fake_model, reports=3, pages=2)
    service = IndexService(built["index"] / "default")
    service.load()
    assert service.ready
    return service


def _apps(service):
    fast = create_app(service, log=RequestLog(quiet=True))
    plain = create_app(service, log=RequestLog(quiet=True))
    plain.router.routes[:] = [r for r in plain.router.routes if not isinstance(getattr(r, "app", None), WellFormedQueries)]
    assert len(plain.router.routes) == len(fast.router.routes) - 1
    return fast, plain


async def _ask(app, cases: dict) -> dict:
    answers = {}
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            for name, (content_type, body) in cases.items():
                headers = {"content-type": content_type} if content_type else {}
                answer = await client.post("/query", content=body, headers=headers)
                answers[name] = (answer.status_code, sorted(answer.headers.items()), answer.json())
    return answers


def test_the_fast_route_answers_every_request_as_fastapi_s_route_does(service):
    fast, plain = _apps(service)
    with_it, without = asyncio.run(_ask(fast, CASES)), asyncio.run(_ask(plain, CASES))
    for name in CASES:
        assert with_it[name] == without[name], name
    answered = {name for name, answer in with_it.items() if answer[0] == 200}
    assert answered == {"ok", "two-queries", "filters", "media-type-case-and-charset", "duplicate-key", "plus-json",
                        "byte-order-mark", "utf-16", "text-mode"}
    assert "queries[1]" in with_it["lone-surrogate-escape"][2]["error"]["message"]  # the query's own check, after FastAPI's parse
    assert with_it["duplicate-key"][2]["k"] == 2


def test_well_formed_queries_skip_fastapi_s_route_and_the_others_reach_it(service):
    fast, _ = _apps(service)
    documented = next(r for r in fast.router.routes if isinstance(r, APIRoute) and r.path == "/query")
    reached: list[str] = []
    handle = documented.handle

    async def counted(scope, receive, send) -> None:
        reached.append(scope["path"])
        await handle(scope, receive, send)

    documented.handle = counted  # type: ignore[method-assign]  # a spy on this one route object
    well_formed = ["ok", "two-queries", "filters", "media-type-case-and-charset", "duplicate-key", "filter-syntax", "blank-query"]
    answers = asyncio.run(_ask(fast, {name: CASES[name] for name in well_formed}))
    assert reached == [] and answers["ok"][0] == 200 and answers["filter-syntax"][0] == 400
    others = ["no-content-type", "plus-json", "empty", "not-json", "lone-surrogate-escape", "k-zero"]
    asyncio.run(_ask(fast, {name: CASES[name] for name in others}))
    assert reached == ["/query"] * len(others)


def test_the_openapi_document_still_describes_the_query_route(service):
    fast, plain = _apps(service)
    assert fast.openapi() == plain.openapi()
    assert "requestBody" in fast.openapi()["paths"]["/query"]["post"]


def test_a_query_document_is_the_validated_model_s_dump_key_for_key():
    """query_document returns the dicts it built where they hold exactly the published types, else the
    model's dump: either way the document the model's dump would be (values, types and key order)."""
    from types import SimpleNamespace

    import numpy as np

    from localgpt_index.core.types import SearchHit
    from localgpt_index.interop.reports import query_document
    from localgpt_index.interop.results import QueryDocument

    index = SimpleNamespace(store=SimpleNamespace(location="/srv/idx"), manifest=SimpleNamespace(model=SimpleNamespace(id="m")))
    sha = "ab" * 32
    visual = [SearchHit(1, 2.5, "/d/a.pdf", 3, sha, "pdf", {"team": "x"}), SearchHit(2, 1.25, "/d/b.png", 1, sha, "image")]
    hybrid = [SearchHit(1, 0.5, "/d/a.pdf", 1, sha, "pdf", fused=True, visual_rank=2, text_rank=None, visual_score=3.0,
                        text_score=None, snippet="**a** b")]
    coerced = [SearchHit(1, np.float32(2.5), "/d/a.pdf", np.int64(3), sha, "pdf")]  # not the published types: the dump converts
    for results, mode in [([visual], "visual"), ([visual, hybrid], "hybrid"), ([coerced], None)]:
        texts = [f"q{n}" for n in range(len(results))]
        document = query_document(index, texts, results, 5, mode=mode, fusion="rrf")
        how = {"mode": mode, **({"fusion": "rrf"} if mode == "hybrid" else {})} if mode else {}
        dumped = QueryDocument.model_validate({"version": 2, "index": "/srv/idx", "model": "m", "k": 5, **how, "queries": [
            {"query": q, "results": [hit.to_dict() for hit in hits]} for q, hits in zip(texts, results)]}).to_json()
        if len(texts) == 1:
            dumped["query"] = dumped["queries"][0]["query"]
        assert json.dumps(document) == json.dumps(dumped)
    assert type(document["queries"][0]["results"][0]["score"]) is float and type(document["queries"][0]["results"][0]["page"]) is int
