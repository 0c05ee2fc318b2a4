"""`lgpt-index mcp` started as a desktop agent starts it, spoken to with the official SDK's own client:
over stdio (mcp.client.stdio + ClientSession) and over streamable HTTP on a real port."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from conftest import copy_tree, run_cli, torchless, with_torch
from helpers import report_index as build_report_index, wait_until

pytestmark = torchless  # its processes serve the fake model (but where a test gives them with_torch())

TOOLS = {"search", "list_documents", "index_status", "get_page"}


@asynccontextmanager
async def mcp_session(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    """A ClientSession on `lgpt-index mcp ARGS` over stdio, and the transport faults it met (a line on
    stdout that is not a protocol message is one: it must never happen)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    faults: list[Exception] = []

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            faults.append(message)

    params = StdioServerParameters(command=sys.executable, args=["-m", "localgpt_index", "mcp", *args], env={**os.environ, **(env or {})},
                                   cwd=str(cwd) if cwd else None)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, message_handler=on_message, read_timeout_seconds=300) as session:
                await session.initialize()
                yield session, faults


def structured(result) -> dict:
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content  # the same answer as text, for older clients
    return result.structured_content


def error_text(result, hidden: Path | None = None) -> str:
    """The text of a tool error: no traceback, and no path under `hidden` (a folder of this machine)."""
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "Traceback" not in text and 'File "' not in text
    assert hidden is None or str(hidden) not in text, text
    return text


def png_size(data: str) -> tuple[int, int, int]:
    """(bytes, width, height) of a base64 PNG."""
    from PIL import Image

    raw = base64.b64decode(data)
    assert raw.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(raw)) as image:
        return len(raw), *image.size


@pytest.fixture(scope="module")
def noisy_index(fake_model, tmp_path_factory):
    """The serve tests' index (4 reports of 3 pages, a scan), built with a copy of the fake model that,
    once built, prints on stdout while it loads (as model libraries do)."""
    work = tmp_path_factory.mktemp("mcp")
    model = copy_tree(fake_model, work / "fake-model")
    built = build_report_index(work, model, reports=4, pages=3)
    (model / "faults.json").write_text(json.dumps({"load_noise": "Loading checkpoint shards: 100%"}))  # same fingerprint
    return built


PER_IMAGE, PER_ANSWER = 60_000, 150_000


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_stdio_tools_answer_with_typed_results_and_capped_images(noisy_index):
    index = str(noisy_index["index"])

    async def scenario():
        async with mcp_session("--index-dir", index, "--max-image-bytes", str(PER_IMAGE),
                               "--max-answer-image-bytes", str(PER_ANSWER)) as (session, faults):
            listed = await session.list_tools()
            tools = {tool.name: tool for tool in listed.tools}
            assert set(tools) == TOOLS
            assert all(tool.output_schema and tool.input_schema["type"] == "object" for tool in tools.values())
            assert tools["search"].input_schema["properties"]["k"]["maximum"] == 50
            assert tools["search"].annotations.read_only_hint

            found = await session.call_tool("search", {"query": "report 2 page 1", "k": 5, "with_images": True})
            answer = structured(found)
            assert len(answer["hits"]) == 5 and answer["mode"] == "hybrid"  # the reports have a text layer
            assert [hit["rank"] for hit in answer["hits"]] == [1, 2, 3, 4, 5]
            names = {hit["document"] for hit in answer["hits"]}
            assert names <= {"report-0.pdf", "report-1.pdf", "report-2.pdf", "report-3.pdf", "scan.png"}  # relative names
            images = [block for block in found.content if block.type == "image"]
            assert len(images) == 5 and all(block.mime_type == "image/png" for block in images)
            sizes = [png_size(block.data) for block in images]
            assert all(size <= min(PER_IMAGE, PER_ANSWER // 5) for size, _, _ in sizes), sizes
            assert sum(size for size, _, _ in sizes) <= PER_ANSWER
            for hit in answer["hits"]:  # each hit says which image is its own, and its true size
                block = found.content[hit["image"]["content_index"]]
                assert png_size(block.data) == (hit["image"]["bytes"], hit["image"]["width"], hit["image"]["height"])
            assert any(hit["image"]["scaled"] for hit in answer["hits"])  # a page at 150 dpi is larger than its share

            plain = structured(await session.call_tool("search", {"query": "report 2 page 1", "k": 2, "filters": {"team": "finance"}}))
            assert [hit["document"] for hit in plain["hits"]] == ["report-0.pdf", "report-0.pdf"]
            assert all(hit["image"] is None for hit in plain["hits"])
            assert len(structured(await session.call_tool("search", {"query": "report", "k": 2, "first_pass": 4}))["hits"]) == 2

            first = structured(await session.call_tool("list_documents", {"limit": 2}))
            rest = structured(await session.call_tool("list_documents", {"offset": first["next_offset"], "limit": 10}))
            assert first["total"] == rest["total"] == 5 and rest["next_offset"] is None
            assert [d["document"] for d in first["documents"] + rest["documents"]] == [
                "report-0.pdf", "report-1.pdf", "report-2.pdf", "report-3.pdf", "scan.png"]
            assert first["documents"][0]["metadata"] == {"team": "finance"}
            under = structured(await session.call_tool("list_documents", {"prefix": "report-1"}))
            assert [d["document"] for d in under["documents"]] == ["report-1.pdf"]

            status = structured(await session.call_tool("index_status", {}))
            assert (status["documents"], status["pages"], status["model_state"]) == (5, 13, "ready")
            assert status["modes"] == ["hybrid", "visual", "text"]
            assert status["index"] == "default" and status["image_caps"] == {"per_image": PER_IMAGE, "per_answer": PER_ANSWER}
            assert status["text_caps"] == {"per_page": 20_000, "per_answer": 200_000}  # the defaults

            page = await session.call_tool("get_page", {"document": "report-1.pdf", "page": 3})
            shown = structured(page)
            assert (shown["document"], shown["page"], shown["pages"], shown["kind"]) == ("report-1.pdf", 3, 3, "pdf")
            size, width, height = png_size(page.content[1].data)
            assert size <= PER_IMAGE and (size, width, height) == (shown["image"]["bytes"], shown["image"]["width"],
                                                                   shown["image"]["height"])
            by_sha = structured(await session.call_tool("get_page", {"document": shown["sha256"], "page": 1, "with_image": False}))
            assert by_sha["document"] == "report-1.pdf" and by_sha["image"] is None
            assert faults == []  # the model printed while it loaded: none of it reached the protocol stream

    asyncio.run(scenario())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_stdio_errors_are_tool_errors_with_the_clis_messages(noisy_index):
    index, work = str(noisy_index["index"]), noisy_index["work"]  # no path of this machine in what the client sees

    async def scenario():
        async with mcp_session("--index-dir", index) as (session, faults):
            text = error_text(await session.call_tool("get_page", {"document": "../../etc/passwd", "page": 1}), work)
            assert "document: not in the index (its name is not repeated back)" in text
            text = error_text(await session.call_tool("get_page", {"document": "report-1.pdf", "page": 4}), work)
            assert "page 4 out of range: report-1.pdf has 3 page(s)" in text
            text = error_text(await session.call_tool("get_page", {"document": "report-1.pdf", "page": 0}), work)
            assert "invalid arguments: page: Input should be greater than or equal to 1 (got 0)." in text
            text = error_text(await session.call_tool("search", {"query": "q", "k": "many"}), work)
            assert "invalid arguments: k: Input should be a valid integer, unable to parse string as an integer (got 'many')." in text
            for k in (51, 1001, 10**20):  # the tool's own bound, whatever the excess (not the HTTP API's 1,000)
                text = error_text(await session.call_tool("search", {"query": "q", "k": k}), work)
                assert f"invalid arguments: k: Input should be less than or equal to 50 (got {k})." in text, text
            text = error_text(await session.call_tool("get_page", {"document": "report-1.pdf"}), work)
            assert text.endswith("invalid arguments: page: Field required.") and "pydantic" not in text
            text = error_text(await session.call_tool("search", {"query": "   "}), work)
            assert "query is empty." in text
            text = error_text(await session.call_tool("search", {"query": "q", "mode": "sideways"}), work)
            assert "mode" in text
            text = error_text(await session.call_tool("search", {"query": "q", "filters": {"": "x"}}), work)
            assert "filters: a key may not be empty" in text
            assert faults == []

    asyncio.run(scenario())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_list_documents_cannot_probe_the_indexed_folder(noisy_index):
    """Issue 39 #3: an absolute prefix is one tool error whatever it names (how many documents it matched
    would rebuild the indexed folder a character at a time); relative prefixes match the names it lists.
    get_page's absolute document and a filter that is no KEY=VALUE are one error each too (messages leave the
    server's folders out: an echo of a guess would say which it names)."""
    docs = str(noisy_index["docs"])

    async def scenario():
        async with mcp_session("--index-dir", str(noisy_index["index"])) as (session, faults):
            texts = {error_text(await session.call_tool("list_documents", {"prefix": probe}), noisy_index["work"])
                     for probe in ("/", docs[:2], docs, docs + "/report-1", "/nowhere/at/all")}
            assert len(texts) == 1 and "prefix: an absolute path" in texts.pop()
            probes = ("/", docs, docs + "/report-1.pdf", "/nowhere/report-1.pdf")  # nor get_page's document, nor a filter
            texts = {error_text(await session.call_tool("get_page", {"document": probe, "page": 1}), noisy_index["work"])
                     for probe in probes}
            assert len(texts) == 1 and "document: an absolute path" in texts.pop()
            for shape in (" {}", "./{}"):  # not absolute, yet holding the path: not repeated back either
                texts = {error_text(await session.call_tool("get_page", {"document": shape.format(probe), "page": 1}),
                                    noisy_index["work"]) for probe in probes}
                assert len(texts) == 1 and "document: not in the index" in texts.pop()
            texts = {error_text(await session.call_tool("search", {"query": "q", "filters": [probe + "/x"]}), noisy_index["work"])
                     for probe in probes}
            assert len(texts) == 1 and "filters[0]: expected KEY=VALUE" in texts.pop()
            for probe in (docs, "/nowhere/at/all"):  # a value echoed as the client sent it, never rewritten by the policy
                text = error_text(await session.call_tool("search", {"query": "q", "first_pass": probe}), None)
                assert f"first_pass: '{probe}' is not a number of candidate pages" in text, text
            for climbing in ("..", f"../{noisy_index['docs'].name}/report-1", "./report-1"):
                assert structured(await session.call_tool("list_documents", {"prefix": climbing}))["total"] == 0
            under = structured(await session.call_tool("list_documents", {"prefix": "report-1"}))
            assert [d["document"] for d in under["documents"]] == ["report-1.pdf"]
            assert faults == []

    asyncio.run(scenario())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_no_index_then_a_build_then_an_emptied_index(noisy_index, fake_model, tmp_path):
    """No index yet: every tool says so (the server stays up for the agent that launched it); a build beside
    it is followed at the next call; an index whose documents were all removed answers search with an error."""
    docs = copy_tree(noisy_index["docs"], tmp_path / "docs")
    index = tmp_path / "idx"

    async def scenario():
        async with mcp_session("--index-dir", str(index)) as (session, faults):
            for tool, args in (("search", {"query": "report"}), ("list_documents", {}), ("index_status", {}),
                               ("get_page", {"document": "report-1.pdf", "page": 1})):
                text = error_text(await session.call_tool(tool, args), tmp_path)
                assert "no index at default." in text and "lgpt-index build DOCS" in text  # named as index_status names it
            pictures = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--include", "*.png",
                               "--ocr", "never")
            assert pictures.exit_code == 0, pictures.stderr
            status = structured(await session.call_tool("index_status", {}))  # it reads text, none found: text finds nothing
            assert status["modes"] == ["hybrid", "visual", "text"] and status["page_text"] is False, status
            answer = structured(await session.call_tool("search", {"query": "q", "mode": "text"}))
            assert answer["mode"] == "text" and answer["hits"] == [], answer
            assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
            hits = structured(await session.call_tool("search", {"query": "report", "k": 3}))["hits"]
            assert len(hits) == 3
            text_answer = structured(await session.call_tool("search", {"query": "report 1 page 2", "mode": "text", "k": 1}))
            assert text_answer["mode"] == "text" and "report" in text_answer["hits"][0]["text"]
            assert run_cli("remove", str(docs), "--index-dir", str(index)).exit_code == 0
            text = error_text(await session.call_tool("search", {"query": "report"}), tmp_path)
            assert "the index at default holds no pages yet." in text
            status = structured(await session.call_tool("index_status", {}))
            assert (status["generation"], status["documents"]) == (3, 0)
            assert faults == []

    asyncio.run(scenario())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_model_that_cannot_load_is_a_tool_error_and_the_rest_still_answers(fake_model, tmp_path):
    model = copy_tree(fake_model, tmp_path / "fake-model")
    built = build_report_index(tmp_path, model, reports=1, pages=1)
    (model / "faults.json").write_text(json.dumps({"load_error": f"{model}/model.safetensors: weights file is truncated"}))
    index = str(built["index"])

    async def scenario():
        async with mcp_session("--index-dir", index) as (session, faults):
            text = error_text(await session.call_tool("search", {"query": "report"}), tmp_path)
            assert ("the model could not be loaded: OSError while loading the model: fake-model/model.safetensors: weights file is "
                    "truncated") in text  # the model named by its folder's name, as index_status names it
            status = structured(await session.call_tool("index_status", {}))
            assert status["model_state"] == "failed" and "weights file is truncated" in status["model_problem"]
            assert str(tmp_path) not in status["model_problem"]
            assert structured(await session.call_tool("get_page", {"document": "report-0.pdf", "page": 1}))["image"]["bytes"] > 0
            assert faults == []

    asyncio.run(scenario())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_page_that_cannot_be_rendered_or_fit_has_an_image_error_and_the_others_keep_theirs(fake_model, tmp_path):
    """scan.png changed since it was indexed, noise.png cannot fit 2 KiB even at 32 pixels: each hit of theirs
    says why it has no image (no path of this machine in it), the report pages keep their images."""
    from PIL import Image

    from docgen import make_png

    (tmp_path / "docs").mkdir()
    Image.frombytes("RGB", (200, 200), os.urandom(200 * 200 * 3)).save(tmp_path / "docs" / "noise.png")
    built = build_report_index(tmp_path, fake_model, reports=2, pages=1)
    make_png(built["docs"] / "scan.png", "a scan, redrawn after the build")

    async def scenario():
        async with mcp_session("--index-dir", str(built["index"]), "--max-image-bytes", "2048") as (session, faults):
            found = await session.call_tool("search", {"query": "report 1 page 0", "k": 4, "with_images": True})
            hits = {hit["document"]: hit for hit in structured(found)["hits"]}
            assert set(hits) == {"report-0.pdf", "report-1.pdf", "scan.png", "noise.png"}
            changed, noise = hits.pop("scan.png"), hits.pop("noise.png")
            assert changed["image"] is None and changed["image_error"].startswith("the page cannot be rendered: its source changed")
            assert changed["image_error"].endswith(": scan.png changed since it was indexed.")
            assert noise["image"] is None and noise["image_error"] == ("the page image does not fit in 2,048 bytes, even scaled "
                                                                       "down to 32 pixels.")
            images = [block for block in found.content if block.type == "image"]
            assert len(images) == 2 and all(hit["image_error"] is None for hit in hits.values())
            for hit in hits.values():
                assert png_size(found.content[hit["image"]["content_index"]].data)[0] == hit["image"]["bytes"] <= 2048
            page = structured(await session.call_tool("get_page", {"document": "scan.png", "page": 1}))
            assert page["image"] is None and page["image_error"] == changed["image_error"]
            assert str(tmp_path) not in found.content[0].text + json.dumps(page)
            assert faults == []

    asyncio.run(scenario())


def held_text_search(release: Path) -> dict[str, str]:
    """The environment that holds the server's first text-mode search at its text list (query.text) until
    `release` exists, as a page of one word repeated 25,000 times once held it for 36 s."""
    return {"LGPT_FAILPOINT": "query.text:1:hold", "LGPT_FAILPOINT_HOLD": str(release)}


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_slow_search_holds_no_other_call(noisy_index, tmp_path):
    """While one search is held mid-way, an unrelated search (hybrid: the model and the text list) and the
    other tools answer; the held one answers once released."""
    release = tmp_path / "release"

    async def scenario():
        async with mcp_session("--index-dir", str(noisy_index["index"]), env=held_text_search(release)) as (session, faults):
            held = asyncio.create_task(session.call_tool("search", {"query": "report 1 page 2", "mode": "text", "k": 1}))
            await asyncio.to_thread(wait_until, Path(f"{release}.reached").exists, 60, "the text search held")
            other = await asyncio.wait_for(session.call_tool("search", {"query": "report 2 page 1", "k": 2}), 60)
            assert structured(other)["mode"] == "hybrid" and len(structured(other)["hits"]) == 2
            assert structured(await asyncio.wait_for(session.call_tool("index_status", {}), 60))["pages"] == 13
            assert not held.done()
            release.touch()
            answer = structured(await asyncio.wait_for(held, 60))
            assert answer["mode"] == "text" and len(answer["hits"]) == 1 and "report" in answer["hits"][0]["text"]
            assert faults == []

    asyncio.run(scenario())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_text_search_answers_while_the_model_loads(noisy_index, tmp_path):
    """The model's load held (failpoint serve.model_load): index_status says it loads and that text is ready,
    a text search answers; released, a hybrid search answers and every mode is ready."""
    release = tmp_path / "release"
    env = {"LGPT_FAILPOINT": "serve.model_load:1:hold", "LGPT_FAILPOINT_HOLD": str(release)}

    async def scenario():
        async with mcp_session("--index-dir", str(noisy_index["index"]), env=env) as (session, faults):
            await asyncio.to_thread(wait_until, Path(f"{release}.reached").exists, 60, "the model load held")
            status = structured(await asyncio.wait_for(session.call_tool("index_status", {}), 60))
            assert status["model_state"] == "loading" and status["ready_modes"] == ["text"], status
            text = structured(await asyncio.wait_for(session.call_tool("search", {"query": "report 1", "mode": "text", "k": 2}), 60))
            assert text["mode"] == "text" and len(text["hits"]) == 2
            hybrid = asyncio.create_task(session.call_tool("search", {"query": "report 2 page 1", "k": 2}))
            assert not hybrid.done()
            release.touch()
            assert structured(await asyncio.wait_for(hybrid, 60))["mode"] == "hybrid"
            status = structured(await asyncio.wait_for(session.call_tool("index_status", {}), 60))
            assert status["model_state"] == "ready" and set(status["ready_modes"]) == {"visual", "text", "hybrid"}, status
            assert faults == []

    asyncio.run(scenario())


class RawStdio:
    """`lgpt-index mcp` over stdio, spoken to line by line (as a client that sends what the SDK's parser
    refuses, or that leaves mid-call, does); its stdout lines read on a thread of their own."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "mcp", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
                                     env={**os.environ, **(env or {})})
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()

    def send(self, message: dict | str) -> None:
        self.proc.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 60) -> dict:
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout} s") from None

    def initialize(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
        assert self.answer()["result"]["serverInfo"]["name"] == "lgpt-index"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)


def search_call(number: int | str, arguments: str) -> str:
    """A tools/call line for search, its arguments given as raw JSON text."""
    return (f'{{"jsonrpc": "2.0", "id": {json.dumps(number)}, "method": "tools/call", '
            f'"params": {{"name": "search", "arguments": {arguments}}}}}')


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_line_the_parser_refuses_is_answered_and_the_server_goes_on(noisy_index):
    """A lone surrogate escape, a filter nested 5,000 deep, a line that is not JSON (no id to read), JSON that is no JSON-RPC
    message: each gets a JSON-RPC error (with its id where one can be read), and the next request its answer."""
    client = RawStdio("--index-dir", str(noisy_index["index"]))
    try:
        client.initialize()
        client.send(search_call(2, '{"query": "\\ud83d"}'))
        surrogate = client.answer()
        assert (surrogate["id"], surrogate["error"]["code"]) == (2, -32700), surrogate
        assert surrogate["error"]["message"].startswith("Parse error: ")
        deep = '{"a": ' * 5000 + "1" + "}" * 5000
        client.send(search_call("three", f'{{"query": "q", "filters": {deep}}}'))
        nested = client.answer()
        assert (nested["id"], nested["error"]["code"]) == ("three", -32700) and "recursion" in nested["error"]["message"], nested
        client.send("[1, 2")
        broken = client.answer()
        assert (broken["id"], broken["error"]["code"]) == (None, -32700), broken
        assert broken["error"]["message"].startswith("Parse error: EOF while parsing a list")
        client.send({"jsonrpc": "2.0", "id": 5, "method": 7})
        invalid = client.answer()
        assert (invalid["id"], invalid["error"]["code"]) == (5, -32600), invalid
        client.send(search_call(6, '{"query": "report 1", "k": 1}'))
        found = client.answer()
        assert found["id"] == 6 and not found["result"]["isError"] and len(found["result"]["structuredContent"]["hits"]) == 1
        client.proc.stdin.close()
        assert client.proc.wait(timeout=60) == 0
    finally:
        client.close()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_server_stops_when_the_client_closes_stdin_mid_call(noisy_index, tmp_path):
    """The client leaves while a search is held (for 300 s): the server exits at once (0), the call abandoned."""
    release = tmp_path / "release"
    client = RawStdio("--index-dir", str(noisy_index["index"]), env=held_text_search(release))
    try:
        client.initialize()
        client.send(search_call(2, '{"query": "report", "mode": "text"}'))
        wait_until(Path(f"{release}.reached").exists, 60, "the text search held", proc=client.proc)
        client.proc.stdin.close()
        assert client.proc.wait(timeout=30) == 0
    finally:
        release.touch()
        client.close()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_page_text_is_capped_per_page_and_per_answer(noisy_index):
    """Each page's text at most --max-text-chars, an answer's together at most --max-answer-text-chars (pages
    under an even share keep all theirs), each cut text a prefix of the page's and marked text_truncated."""
    full = json.loads(run_cli("query", "report 1", "-k", "13", "--mode", "text", "--with-text", "--json",
                              "--index-dir", str(noisy_index["index"])).stdout)
    texts = {(hit["path"].rsplit("/", 1)[-1], hit["page"]): hit["text"] for hit in full["queries"][0]["results"]}
    assert min(len(text) for text in texts.values()) > 400  # every page's text is longer than the caps below let through

    async def scenario():
        async with mcp_session("--index-dir", str(noisy_index["index"]), "--max-text-chars", "400",
                               "--max-answer-text-chars", "1500") as (session, faults):
            assert structured(await session.call_tool("index_status", {}))["text_caps"] == {"per_page": 400, "per_answer": 1500}
            for k, each in ((2, 400), (5, 300), (12, 125)):  # the per-page cap, then an even share of the answer's
                hits = structured(await session.call_tool("search", {"query": "report 1", "k": k, "mode": "text"}))["hits"]
                assert len(hits) == k and all(hit["text_truncated"] for hit in hits)
                assert all(len(hit["text"]) <= each and texts[hit["document"], hit["page"]].startswith(hit["text"]) for hit in hits)
                assert sum(len(hit["text"]) for hit in hits) <= 1500
                assert all(len(hit["text"]) > each * 0.8 for hit in hits)  # cut at a space near the cap, not far before it
            page = structured(await session.call_tool("get_page", {"document": "report-1.pdf", "page": 2, "with_image": False}))
            assert page["text_truncated"] and len(page["text"]) <= 400 and texts["report-1.pdf", 2].startswith(page["text"])
            assert faults == []

    asyncio.run(scenario())


def test_an_answers_text_cap_is_shared_evenly_by_the_pages_that_need_it():
    """Pages under an even share keep all their text; the longer ones share the rest evenly (docs/mcp.md)."""
    from localgpt_index.mcp.schemas import TextCaps

    caps = TextCaps()  # 20,000 characters a page, 200,000 an answer
    assert caps.limits([100, 3_000, 50_000, 2_500_000]) == [100, 3_000, 20_000, 20_000]
    assert caps.limits([50_000] * 50) == [4_000] * 50  # search k=50 over long pages
    assert TextCaps(100, 250).limits([10, 200, 200, 50]) == [10, 95, 95, 50]


class HttpMcp:
    """`lgpt-index mcp --http --port 0` in a process of its own, its address read from stderr."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "mcp", "--http", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        lines = []
        for line in self.proc.stderr:
            lines.append(line)
            match = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
            if match:
                self.url = match.group(1)
                return
        raise AssertionError("".join(lines))

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return self.proc.returncode, out


def _silent_connection(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").removesuffix("/mcp").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_streamable_http_on_a_real_port_behind_serves_guards(noisy_index):
    server = HttpMcp("--index-dir", str(noisy_index["index"]), "--max-image-bytes", str(PER_IMAGE))
    silent = _silent_connection(server.url)  # says nothing: dropped at the header deadline (10 s; mcp has no option for it)

    async def scenario():
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with streamable_http_client(server.url) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=300) as session:
                await session.initialize()
                assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
                found = await session.call_tool("search", {"query": "report 1", "k": 2, "with_images": True})
                assert len(structured(found)["hits"]) == 2
                assert all(png_size(block.data)[0] <= PER_IMAGE for block in found.content if block.type == "image")
                assert "out of range" in error_text(await session.call_tool("get_page", {"document": "scan.png", "page": 2}))

    try:
        asyncio.run(scenario())
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream"}
        with httpx.Client(timeout=60) as client:
            assert client.post(server.url, json=initialize, headers=headers).status_code == 200
            for foreign in ({"Origin": "http://evil.example"}, {"Host": "evil.example"}, {"Host": "attacker.test:8766"}):
                refused = client.post(server.url, json=initialize, headers={**headers, **foreign})
                assert refused.status_code == 403, foreign
                assert "refused" in refused.json()["error"]["message"] or "not a loopback name" in refused.json()["error"]["message"]
            large = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                "params": {"name": "search", "arguments": {"query": "x" * (1 << 20)}}}).encode()
            for body in (large, iter([large[: 1 << 19], large[1 << 19 :]])):  # with a Content-Length, and chunked without one
                refused = client.post(server.url, content=body, headers={**headers, "Content-Type": "application/json"})
                assert refused.status_code == 413 and "request body larger than 1048576 bytes" in refused.json()["error"]["message"]
            taken = run_cli("mcp", "--http", "--port", server.url.rsplit(":", 1)[1].removesuffix("/mcp"),
                            "--index-dir", str(noisy_index["index"]))
            assert taken.exit_code == 4 and "is taken" in taken.stderr, taken.stderr
        assert silent.recv(1024) == b""  # closed, nothing answered (it would wait past the 60 s timeout if it were kept)
    finally:
        silent.close()
        code, _ = server.stop()  # over HTTP stdout is not the protocol: the model's noise may go there
    assert code == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("given", ["option", "environment"])
def test_http_with_a_token_answers_only_requests_that_carry_it(noisy_index, given):
    """The token from --token, or from $LGPT_SERVE_TOKEN alone."""
    if given == "option":
        server = HttpMcp("--index-dir", str(noisy_index["index"]), "--token", "s3cret", "-q")
    else:
        server = HttpMcp("--index-dir", str(noisy_index["index"]), "-q", env={"LGPT_SERVE_TOKEN": "s3cret"})
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        with httpx.Client(timeout=60) as client:
            for wrong in ({}, {"Authorization": "Bearer guess"}):
                refused = client.post(server.url, json=initialize, headers={**headers, **wrong})
                assert refused.status_code == 401 and "bearer token" in refused.json()["error"]["message"]
            answered = client.post(server.url, json=initialize, headers={**headers, "Authorization": "Bearer s3cret"})
            assert answered.status_code == 200 and answered.json()["result"]["serverInfo"]["name"] == "lgpt-index"
    finally:
        assert server.stop()[0] == 0


def test_http_beyond_loopback_needs_a_token(noisy_index):
    result = run_cli("mcp", "--http", "--host", "0.0.0.0", "--index-dir", str(noisy_index["index"]))
    assert result.exit_code == 2
    assert "listening beyond this machine needs a bearer token" in result.stderr


@pytest.mark.slow
def test_stdio_with_the_real_tiny_checkpoint(tiny_model, tmp_path):
    """Only real model libraries (torch, transformers, colpali-engine) can corrupt stdout while they load."""
    built = build_report_index(tmp_path, tiny_model, reports=2, pages=2)

    async def scenario():
        async with mcp_session("--index-dir", str(built["index"]), "--max-image-bytes", str(PER_IMAGE),
                               env=with_torch()) as (session, faults):
            assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
            found = await session.call_tool("search", {"query": "report 1 page 1", "k": 3, "with_images": True})
            assert len(structured(found)["hits"]) == 3
            assert all(png_size(block.data)[0] <= PER_IMAGE for block in found.content if block.type == "image")
            status = structured(await session.call_tool("index_status", {}))
            assert status["model_state"] == "ready" and status["pages"] == 5
            assert structured(await session.call_tool("get_page", {"document": "scan.png", "page": 1}))["kind"] == "image"
            assert "not in the index" in error_text(await session.call_tool("get_page", {"document": "nope.pdf", "page": 1}))
            assert faults == []

    asyncio.run(scenario())


def test_the_sdk_seam_the_stdio_layer_uses_is_there():
    """mcp/stdio.py reaches the SDK's low-level server (no public hook for the stdio read stream in 2.x):
    an SDK without it fails here, not in a user's session."""
    from mcp.server.mcpserver import MCPServer

    lowlevel = MCPServer("seam")._lowlevel_server
    assert callable(lowlevel.run) and lowlevel.create_initialization_options() is not None


@pytest.mark.parametrize("line, expected", [
    ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"q": "\\ud83d"}}', 7),
    ('{"params": ' + "[" * 5000 + "]" * 5000 + ', "id": "a-1", "jsonrpc": "2.0"}', "a-1"),
    ('{"params": {"id": 3}, "jsonrpc": "2.0", "id": 4', 4),  # the nested id is not the request's
    ('{"id": "\\ud83d", "jsonrpc": "2.0"}', None),  # a lone surrogate cannot be written back
    ('{"id": true}', None),
    ("[1, 2]", None),
    ('{"jsonrpc": "2.0", "id": 9', 9),
    ("not json", None),
])
def test_the_id_of_a_line_the_parser_refused_is_read_without_recursion(line, expected):
    from localgpt_index.mcp.stdio import line_id

    assert line_id(line) == expected


def test_a_cut_text_ends_at_a_space_near_the_limit():
    from localgpt_index.mcp.backend import cut_text

    assert cut_text("abcd " * 50, 102) == ("abcd " * 20).strip()  # the last space within a tenth of the limit
    assert cut_text("x" * 30, 10) == "x" * 10  # no space near: cut at the limit
    assert cut_text("short", 100) == "short"
