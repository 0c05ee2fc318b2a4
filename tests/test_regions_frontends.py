"""Where on the page, in every front end (issue 44): `query --regions` (JSON, JSONL, the table and lines, the
config file), `regions: true` over HTTP and MCP, the Python API and the retrievers; and seen, not only read:
`query --export-pages --highlight`, `GET /pages/...?highlight=` and MCP `get_page(highlight=)` draw them.

The regions are planted here (query.regions' text_regions and visual_regions replaced in this process:
the producers are tested on their own), so each front end is checked for carrying and drawing exactly
them; the pictures are checked by reading pixels at the planted boxes and away from them."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import httpx
import pytest
from PIL import Image

from conftest import run_cli, validate
from docgen import make_pdf
from localgpt_index.core.types import Region
from localgpt_index.interop.highlight import HEAT, TEXT_OUTLINE, pixel_box

QUERY = "net revenue"
TEXT = Region((0.55, 0.05, 0.95, 0.15), "text", 0.8, ("net", "revenu"), "net revenue grew 12 %")  # top right
VISUAL = Region((0.1, 0.6, 0.4, 0.8), "visual", 0.7, ("revenue",))  # bottom left
TEXT_JSON = {"bbox": [0.55, 0.05, 0.95, 0.15], "source": "text", "score": 0.8, "terms": ["net", "revenu"],
             "text": "net revenue grew 12 %"}
VISUAL_JSON = {"bbox": [0.1, 0.6, 0.4, 0.8], "source": "visual", "score": 0.7, "tokens": ["revenue"]}


@pytest.fixture(scope="module")
def index(fake_model, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("regions")
    make_pdf(work / "docs" / "report.pdf", ["net revenue grew", "net revenue fell"])
    make_pdf(work / "docs" / "memo.pdf", ["hiring plan", "office move"])
    built = run_cli("build", str(work / "docs"), "--model", str(fake_model), "--index-dir", str(work / "idx"))
    assert built.exit_code == 0, built.stderr
    return work / "idx"


@pytest.fixture(autouse=True)
def planted(monkeypatch) -> list[tuple]:
    """Every page's regions are TEXT, and VISUAL where the query's vectors are given; the calls recorded."""
    from localgpt_index.query import regions

    calls: list[tuple] = []

    def text_regions(view, terms, path, page):
        calls.append(("text", terms.query, Path(path).name, page))
        return [TEXT]

    def visual_regions(view, query_vectors, query, pages):
        calls.extend(("visual", Path(path).name, page, query_vectors.shape) for path, page in pages)
        return [[VISUAL] for _ in pages]

    monkeypatch.setattr(regions, "text_regions", text_regions)
    monkeypatch.setattr(regions, "visual_regions", visual_regions)
    return calls


def _query(index: Path, *args: str):
    result = run_cli("query", QUERY, "--index-dir", str(index), "-k", "2", *args)
    assert result.exit_code == 0, result.stderr
    return result


def _hits(document: dict) -> list[dict]:
    return document["queries"][0]["results"]


# --- the command line -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["text", "hybrid", "visual"])
def test_query_regions_json_carries_them_and_only_when_asked(index, planted, mode):
    document = json.loads(_query(index, "--mode", mode, "--regions", "--json").stdout)
    validate(document, "query")
    expected = [TEXT_JSON] + ([VISUAL_JSON] if mode != "text" else [])  # text mode: no query vectors, no visual regions
    assert [hit["regions"] for hit in _hits(document)] == [expected, expected]
    assert {call[0] for call in planted} == ({"text", "visual"} if mode != "text" else {"text"})
    planted.clear()
    plain = json.loads(_query(index, "--mode", mode, "--json").stdout)
    assert all("regions" not in hit for hit in _hits(plain)) and not planted  # not asked: never looked for


def test_the_table_lines_tsv_and_jsonl_name_the_best_text_region(index, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    table = _query(index, "--mode", "text", "--regions", "--format", "table").stdout
    assert 'p.1, top right: "net revenue grew 12 %"' in table and "where" in table
    lines = _query(index, "--mode", "text", "--regions", "--format", "lines").stdout.splitlines()
    assert len(lines) == 2 and all(line.split("\t")[-1].startswith("at: p.") for line in lines)
    assert lines[0].split("\t")[-1] == f'at: p.{lines[0].split(chr(9))[0].rsplit(":", 1)[1]}, top right: "net revenue grew 12 %"'
    tsv = _query(index, "--mode", "text", "--regions", "--format", "tsv").stdout.splitlines()
    assert tsv[0].split("\t")[-1] == "where" and tsv[1].endswith('top right: "net revenue grew 12 %"')
    rows = [json.loads(line) for line in _query(index, "--mode", "text", "--regions", "--format", "jsonl").stdout.splitlines()]
    assert [row["regions"] for row in rows] == [[TEXT_JSON]] * 2
    unasked = _query(index, "--mode", "text", "--format", "tsv").stdout.splitlines()
    assert "where" not in unasked[0] and "at: " not in _query(index, "--mode", "text", "--format", "lines").stdout


def test_a_visual_only_hit_is_named_by_its_best_visual_region(index, monkeypatch):
    from localgpt_index.query import regions

    monkeypatch.setattr(regions, "text_regions", lambda *args: [])
    line = _query(index, "--mode", "visual", "--regions", "--format", "lines").stdout.splitlines()[0]
    assert line.split("\t")[-1].endswith(", bottom left (visual)")


def test_regions_from_the_config_file(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lgpt-index.toml").write_text("[query]\nregions = true\n")
    assert [hit["regions"] for hit in _hits(json.loads(_query(index, "--mode", "text", "--json").stdout))] == [[TEXT_JSON]] * 2


def _pixels(png: Path | bytes) -> Image.Image:
    return Image.open(io.BytesIO(png) if isinstance(png, bytes) else png).convert("RGB")


def check_drawn(drawn: Image.Image, plain: Image.Image, text: bool = True, visual: bool = True) -> None:
    """`drawn` is `plain` with TEXT outlined and VISUAL's heat laid over it, and unchanged elsewhere."""
    assert drawn.size == plain.size
    x0, y0, x1, y1 = pixel_box(TEXT.bbox, drawn.size)
    edge = [(x, y0 - 1) for x in range(x0, x1, 7)] + [(x0 - 1, y) for y in range(y0, y1, 5)]  # the outline, just outside the box
    assert all((drawn.getpixel(point) == TEXT_OUTLINE) == text for point in edge)
    vx0, vy0, vx1, vy1 = pixel_box(VISUAL.bbox, drawn.size)
    inside = [(x, y) for x in range(vx0 + 2, vx1 - 2, 9) for y in range(vy0 + 2, vy1 - 2, 9)]
    for point in inside:
        before, after = plain.getpixel(point), drawn.getpixel(point)
        # toward HEAT, by the best region's opacity: red up (or kept at 255), blue down
        assert (after[2] < before[2] or before[2] == 0) == visual and (after[0] >= before[0])
        if visual:
            assert abs(after[0] - HEAT[0]) <= abs(before[0] - HEAT[0])
    away = [(x, y) for x in range(0, drawn.size[0], 13) for y in range(0, drawn.size[1], 13)
            if not (x0 - 12 <= x <= x1 + 12 and y0 - 12 <= y <= y1 + 12) and not (vx0 <= x <= vx1 and vy0 <= y <= vy1)]
    assert all(drawn.getpixel(point) == plain.getpixel(point) for point in away)


def test_export_pages_highlight_draws_each_hits_regions(index, tmp_path):
    _query(index, "--mode", "hybrid", "--export-pages", str(tmp_path / "plain"), "--dpi", "40")
    _query(index, "--mode", "hybrid", "--export-pages", str(tmp_path / "drawn"), "--dpi", "40", "--highlight")
    manifest = json.loads((tmp_path / "drawn" / "manifest.json").read_text())
    entries = manifest["queries"][0]["results"]
    assert len(entries) == 2 and all(entry["regions"] == [TEXT_JSON, VISUAL_JSON] for entry in entries)
    for entry in entries:
        check_drawn(_pixels(tmp_path / "drawn" / entry["image"]), _pixels(tmp_path / "plain" / entry["image"]))


def test_highlight_without_export_pages_is_refused(index):
    result = run_cli("query", QUERY, "--index-dir", str(index), "--highlight")
    assert result.exit_code == 2 and "--highlight" in result.stderr and "--export-pages" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_python_api_gives_regions_when_asked(index):
    from localgpt_index import open_index

    searcher = open_index(index)
    [hits] = searcher.search(QUERY, k=2, mode="hybrid", regions=True)
    assert all(hit.regions == (TEXT, VISUAL) for hit in hits)
    [plain] = searcher.search(QUERY, k=2, mode="hybrid")
    assert all(hit.regions is None for hit in plain)


# LlamaIndex's import (about 2 s of CPU) in a worker that may not otherwise import it: the real-component tier
@pytest.mark.parametrize("framework", ["langchain", pytest.param("llamaindex", marks=pytest.mark.slow)])
def test_the_retrievers_put_regions_in_the_metadata(index, framework):
    from localgpt_index import open_index

    if framework == "langchain":
        from localgpt_index.integrations.langchain import LgptRetriever as LangChain

        found = [doc.metadata for doc in LangChain.from_index(open_index(index), k=2, mode="text", regions=True).invoke(QUERY)]
        plain = [doc.metadata for doc in LangChain.from_index(open_index(index), k=2, mode="text").invoke(QUERY)]
    else:
        from localgpt_index.integrations.llamaindex import LgptRetriever as LlamaIndex

        nodes = LlamaIndex.from_index(open_index(index), similarity_top_k=2, mode="text", regions=True).retrieve(QUERY)
        found = [node.node.metadata for node in nodes]
        assert "regions" in nodes[0].node.excluded_llm_metadata_keys  # boxes are for the program, not the model's prompt
        plain = [node.node.metadata for node in LlamaIndex.from_index(open_index(index), similarity_top_k=2,
                                                                      mode="text").retrieve(QUERY)]
    assert [meta["regions"] for meta in found] == [[TEXT_JSON]] * 2 and all("regions" not in meta for meta in plain)


# --- serve --------------------------------------------------------------------------------------------

def _served(index: Path, ask) -> object:
    from localgpt_index.serve.app import create_app
    from localgpt_index.serve.middleware import RequestLog
    from localgpt_index.serve.service import IndexService

    service = IndexService(index / "default")
    service.load()
    app = create_app(service, log=RequestLog(quiet=True))

    async def run():
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
                return await ask(client)

    return asyncio.run(run())


def test_http_query_regions_and_highlighted_pages(index):
    async def ask(client: httpx.AsyncClient):
        answers = {mode: (await client.post("/query", json={"queries": [QUERY], "k": 2, "mode": mode, "regions": True})).json()
                   for mode in ("text", "hybrid")}
        plain_answer = (await client.post("/query", json={"queries": [QUERY], "k": 2})).json()
        hit = _hits(answers["hybrid"])[0]
        where = f"/pages/{hit['sha256']}/{hit['page']}.png"
        plain = await client.get(where, params={"dpi": 40})
        drawn = await client.get(where, params={"dpi": 40, "highlight": QUERY})
        return answers, plain_answer, plain, drawn

    answers, plain_answer, plain, drawn = _served(index, ask)
    for mode, document in answers.items():
        validate(document, "query")
        assert [h["regions"] for h in _hits(document)] == [[TEXT_JSON] + ([VISUAL_JSON] if mode == "hybrid" else [])] * 2
    assert all("regions" not in hit for hit in _hits(plain_answer))
    assert plain.status_code == drawn.status_code == 200 and drawn.headers["content-type"] == "image/png"
    assert drawn.headers["X-Lgpt-Regions"] == "2" and "X-Lgpt-Regions" not in plain.headers  # the model is loaded: visual too
    check_drawn(_pixels(drawn.content), _pixels(plain.content))


@pytest.mark.parametrize("highlight, problem", [("", "highlight"), ("x" * 20_000, "highlight"), ("   ", "highlight is empty")])
def test_http_refuses_a_bad_highlight_and_regions_value(index, highlight, problem):
    async def ask(client: httpx.AsyncClient):
        hit = _hits((await client.post("/query", json={"queries": [QUERY], "k": 1, "mode": "text"})).json())[0]
        page = await client.get(f"/pages/{hit['sha256']}/{hit['page']}.png", params={"highlight": highlight})
        regions = await client.post("/query", json={"queries": [QUERY], "regions": "sometimes"})
        return page, regions

    page, regions = _served(index, ask)
    assert page.status_code == 400 and problem in page.json()["error"]["message"] and "Traceback" not in page.text
    assert regions.status_code == 400 and "regions" in regions.json()["error"]["message"]


# --- MCP ----------------------------------------------------------------------------------------------

def _mcp(index: Path, ask, load: bool = True):
    from mcp import Client

    from localgpt_index.mcp.backend import IndexTools
    from localgpt_index.mcp.runner import _lifespan
    from localgpt_index.mcp.server import create_server
    from localgpt_index.serve.service import IndexService

    tools = IndexTools(IndexService(index / "default"))
    server = create_server(tools, lifespan=_lifespan(tools, ()) if load else None)  # (without: the model loads on a search)

    async def run():
        async with Client(server) as client:
            return await ask(client)

    return asyncio.run(run())


def test_mcp_search_regions_and_get_page_highlight(index):
    import base64

    async def ask(client):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        found = {mode: (await client.call_tool("search", {"query": QUERY, "k": 2, "mode": mode, "regions": True})).structured_content
                 for mode in ("text", "hybrid")}
        plain = (await client.call_tool("search", {"query": QUERY, "k": 2, "mode": "hybrid"})).structured_content
        hit = found["hybrid"]["hits"][0]
        page = await client.call_tool("get_page", {"document": hit["document"], "page": hit["page"]})
        drawn = await client.call_tool("get_page", {"document": hit["document"], "page": hit["page"], "highlight": QUERY})
        return tools, found, plain, page, drawn

    tools, found, plain, page, drawn = _mcp(index, ask)
    assert "regions" in tools["search"].input_schema["properties"] and "highlight" in tools["get_page"].input_schema["properties"]
    for mode, answer in found.items():
        assert [hit["regions"] for hit in answer["hits"]] == [[TEXT_JSON] + ([VISUAL_JSON] if mode == "hybrid" else [])] * 2
    assert all(hit["regions"] is None for hit in plain["hits"])
    assert page.structured_content["regions"] is None
    assert drawn.structured_content["regions"] == [TEXT_JSON, VISUAL_JSON]  # the model was loaded by the search: visual too

    def image(result) -> Image.Image:
        block = result.content[result.structured_content["image"]["content_index"]]
        return _pixels(base64.b64decode(block.data))

    check_drawn(image(drawn), image(page))


@pytest.mark.parametrize("arguments, problem", [({"highlight": ""}, "highlight"), ({"highlight": " \t"}, "highlight is empty"),
                                                ({"highlight": 3}, "highlight")])
def test_mcp_refuses_a_bad_highlight(index, arguments, problem):
    async def ask(client):
        listed = (await client.call_tool("list_documents", {})).structured_content["documents"][0]["document"]
        return await client.call_tool("get_page", {"document": listed, "page": 1, **arguments})

    result = _mcp(index, ask)
    text = result.content[0].text
    assert result.is_error and problem in text and "Traceback" not in text


def test_mcp_highlight_before_the_model_loads_draws_the_text_regions_only(index, planted):
    async def ask(client):
        listed = (await client.call_tool("list_documents", {})).structured_content["documents"][0]["document"]
        return await client.call_tool("get_page", {"document": listed, "page": 1, "highlight": QUERY})

    result = _mcp(index, ask, load=False)
    assert result.structured_content["regions"] == [TEXT_JSON] and {call[0] for call in planted} == {"text"}
