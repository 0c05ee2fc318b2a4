"""An empty text answer says why in every front end (issue 43): the words no page holds and the nearest indexed
words, in `query` (stderr and --json), `POST /query`, `query --server` and the MCP search tool alike; and a
page that floods a text query with matches holds no other MCP call."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from conftest import run_cli
from helpers import report_index as build_report_index, wait_until

HINT = "no page holds 'reprot'; the nearest indexed words: report"


@pytest.fixture(scope="module")
def reports(fake_model, tmp_path_factory):
    return build_report_index(tmp_path_factory.mktemp("hints"), fake_model, reports=3, pages=2)


def _local(reports, *args: str):
    done = run_cli("query", *args, "--mode", "text", "--index-dir", str(reports["index"]))
    assert done.exit_code == 0, done.stderr
    return done


def test_query_names_the_missing_words_on_stderr_and_in_its_json(reports):
    shown = _local(reports, "reprot")
    assert f"hint: {HINT} (query 'reprot')" in shown.stderr, shown.stderr
    document = json.loads(_local(reports, "reprot", "report 1", "--json").stdout)
    assert document["queries"][0]["hints"] == [HINT] and "hints" not in document["queries"][1], document
    phrase = json.loads(_local(reports, '"page report"', "--json").stdout)
    assert phrase["queries"][0]["hints"] == ["every word of '\"page report\"' is indexed, but no page holds its phrase as quoted"]


def test_post_query_carries_the_hints_query_json_does(reports):
    from localgpt_index.serve.app import create_app
    from localgpt_index.serve.middleware import RequestLog
    from localgpt_index.serve.service import IndexService

    service = IndexService(reports["index"] / "default")
    service.load()
    app = create_app(service, log=RequestLog(quiet=True))

    async def ask(*bodies: dict) -> list[dict]:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
                answers = [await client.post("/query", json=body) for body in bodies]
        assert all(answer.status_code == 200 for answer in answers), [answer.text for answer in answers]
        return [answer.json() for answer in answers]

    served, hybrid = asyncio.run(ask({"queries": ["reprot", "report 1"], "mode": "text"}, {"queries": ["reprot"]}))
    local = json.loads(_local(reports, "reprot", "report 1", "--json").stdout)
    assert [answer.get("hints") for answer in served["queries"]] == [answer.get("hints") for answer in local["queries"]] == [[HINT], None]
    assert "hints" not in hybrid["queries"][0]  # hybrid finds pages by their pixels: nothing to explain


@pytest.mark.slow  # a server and an MCP server, each a process of its own
def test_query_server_and_the_mcp_search_tool_give_the_same_hints(reports):
    from served import Server
    from test_mcp import mcp_session, structured

    running = Server("--index-dir", str(reports["index"]))
    try:
        running.wait_ready()
        remote = run_cli("query", "reprot", "--mode", "text", "--server", running.url)
        assert remote.exit_code == 0 and remote.stderr == _local(reports, "reprot").stderr, remote.stderr
    finally:
        assert running.stop() == 0

    async def scenario():
        async with mcp_session("--index-dir", str(reports["index"])) as (session, faults):
            answer = structured(await session.call_tool("search", {"query": "reprot", "mode": "text"}))
            assert answer["hits"] == [] and answer["hints"] == [HINT], answer
            found = structured(await session.call_tool("search", {"query": "report 1", "mode": "text"}))
            assert found["hits"] and found["hints"] == []
            assert faults == []

    asyncio.run(scenario())


def write_flood(path: Path, word: str = "valve", times: int = 25_000) -> Path:
    """A text PDF whose one page holds `word` `times` times: a poster-sized page (pdftotext drops text in
    fonts much below 8 pt), 100 a line."""
    from reportlab.pdfgen import canvas

    path.parent.mkdir(parents=True, exist_ok=True)
    sheet = canvas.Canvas(str(path), pagesize=(3000, 3000), invariant=1)
    sheet.setFont("Helvetica", 8)
    for line in range(times // 100):
        sheet.drawString(10, 2980 - 10 * line, " ".join([word] * 100))
    sheet.showPage()
    sheet.save()
    return path


@pytest.mark.slow  # an MCP server, a process of its own
def test_a_text_search_over_a_flooded_page_holds_no_other_mcp_call(reports, fake_model, tmp_path):
    """One word 25,000 times on a page: a text search that finds it, held at its snippet (failpoint
    query.snippet: past the text list's work on that page; every later snippet would hold too), leaves
    index_status, list_documents and get_page answering; released, it answers with the page and a snippet."""
    from test_mcp import held_text_search, mcp_session, structured

    import shutil

    docs = shutil.copytree(reports["docs"], tmp_path / "docs")
    write_flood(docs / "flood.pdf")
    index = tmp_path / "idx"
    done = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    assert done.exit_code == 0, done.stderr
    release = tmp_path / "release"
    env = {**held_text_search(release), "LGPT_FAILPOINT": "query.snippet:1:hold"}

    async def scenario():
        async with mcp_session("--index-dir", str(index), env=env) as (session, faults):
            held = asyncio.create_task(session.call_tool("search", {"query": "valve", "mode": "text", "k": 1}))
            await asyncio.to_thread(wait_until, Path(f"{release}.reached").exists, 60, "the flooded page's search held")
            status = structured(await asyncio.wait_for(session.call_tool("index_status", {}), 60))
            assert status["pages"] == 8, status
            listed = structured(await asyncio.wait_for(session.call_tool("list_documents", {}), 60))
            assert len(listed["documents"]) == 5, listed
            page = structured(await asyncio.wait_for(session.call_tool("get_page", {"document": "report-1.pdf", "page": 2,
                                                                                       "with_image": False}), 60))
            assert "report 1 page 1" in page["text"] and not held.done(), page
            release.touch()
            answer = structured(await asyncio.wait_for(held, 60))
            assert answer["hits"][0]["document"].endswith("flood.pdf") and "**valve**" in answer["hits"][0]["snippet"], answer
            assert answer["hits"][0]["text"].count("valve") == 25_000 or answer["hits"][0]["text_truncated"]
            assert faults == []

    asyncio.run(scenario())
