"""Output for scripts and people (issue 42): `--format` on `query`, `ls` and `eval`, lines by default off a
terminal; and copies collapsed: the pages of byte-identical documents are one hit naming every path, in
the CLI, HTTP, MCP, the Python API, LangChain, LlamaIndex and `eval` alike (`--all-copies`: apart)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import shutil
from pathlib import Path

import httpx
import pytest

from conftest import run_cli, validate
from docgen import make_pdf

QUERY = "quarterly revenue"


@pytest.fixture(scope="module")
def copies(fake_model, tmp_path_factory):
    """An index of four documents, two of them byte-identical (one in a folder, a space in its name)."""
    work = tmp_path_factory.mktemp("copies")
    docs = work / "docs"
    report = make_pdf(docs / "report.pdf", ["quarterly revenue grew", "quarterly costs fell"])
    (docs / "copy").mkdir()
    shutil.copyfile(report, docs / "copy" / "report copy.pdf")
    make_pdf(docs / "invoice.pdf", ["invoice total due", "payment terms"])
    make_pdf(docs / "memo.pdf", ["hiring plan", "office move"])
    index = work / "idx"
    built = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    assert built.exit_code == 0, built.stderr
    return {"docs": docs, "index": index, "same": {str(docs / "report.pdf"), str(docs / "copy" / "report copy.pdf")}}


def _query(copies, *args: str):
    result = run_cli("query", QUERY, "--index-dir", str(copies["index"]), *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


# --- formats ------------------------------------------------------------------------------------------

def test_query_off_a_terminal_prints_a_line_a_hit_without_a_box_or_markup(copies):
    """A pipe gets `path:page<TAB>score<TAB>snippet` (ripgrep's path:line:text), not the 80-column table."""
    lines = _query(copies, "--mode", "text", "-k", "3").splitlines()
    assert len(lines) == 2  # the report's two pages: its copy is the same pages
    for line in lines:
        assert not re.search("[│┃━─]", line) and "**" not in line and "\x1b" not in line
        where, score, snippet = line.split("\t")[:3]
        path, page = where.rsplit(":", 1)
        assert path in copies["same"] and page in ("1", "2") and float(score) > 0
        assert "quarterly" in snippet
        assert line.split("\t")[3] == "copies: " + (copies["same"] - {path}).pop()
    table = _query(copies, "--mode", "text", "--format", "table")
    assert "│" in table and "**" not in table and "quarterly" in table


@pytest.mark.slow  # a process of its own, on a pseudo-terminal
def test_query_on_a_terminal_prints_the_table_with_the_matched_words_styled(copies):
    import os
    import pty
    import subprocess
    import sys

    reader, writer = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "localgpt_index", "query", QUERY, "--mode", "text", "--index-dir",
                               str(copies["index"])], stdout=writer, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              env={**os.environ, "COLUMNS": "160", "TERM": "xterm-256color"}, timeout=120)
    finally:
        os.close(writer)
    shown = b""
    while True:
        try:
            chunk = os.read(reader, 1 << 16)
        except OSError:  # the terminal's other end is closed: all was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(reader)
    assert done.returncode == 0, done.stderr
    text = shown.decode()
    assert "┃" in text and "**" not in text and "\x1b[1;33mquarterly\x1b[0m" in text


def test_query_in_every_format(copies):
    text = ["--mode", "text", "-k", "3"]
    tsv = list(csv.DictReader(io.StringIO(_query(copies, *text, "--format", "tsv")), delimiter="\t"))
    assert [row["rank"] for row in tsv] == ["1", "2"] and {row["query"] for row in tsv} == {QUERY}
    assert all(row["path"] in copies["same"] and row["copies"] in copies["same"] - {row["path"]} for row in tsv)
    assert all("**" not in row["snippet"] and "quarterly" in row["snippet"] for row in tsv)
    jsonl = [json.loads(line) for line in _query(copies, *text, "--format", "jsonl", "--with-text").splitlines()]
    assert [hit["rank"] for hit in jsonl] == [1, 2] and all(hit["query"] == QUERY and "text" in hit for hit in jsonl)
    document = json.loads(_query(copies, *text, "--format", "json"))
    validate(document, "query")
    assert document["version"] == 2 and "results" not in document and document["query"] == QUERY
    assert [{k: v for k, v in hit.items() if k != "text"} for hit in jsonl] == \
        [{"query": QUERY, **hit} for hit in document["queries"][0]["results"]]
    assert json.loads(_query(copies, *text, "--json")) == document
    paths = _query(copies, *text, "--format", "paths").splitlines()
    assert len(paths) == 1 and paths[0] in copies["same"]  # one path a line, each once


def test_several_queries_name_their_query_in_lines_and_jsonl(copies):
    index = ["--index-dir", str(copies["index"]), "--mode", "text", "-k", "1"]
    lines = run_cli("query", QUERY, "invoice", *index).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [QUERY, "invoice"]
    assert lines[1].split("\t")[1] == f"{copies['docs'] / 'invoice.pdf'}:1"
    jsonl = [json.loads(line) for line in run_cli("query", QUERY, "invoice", *index, "--format", "jsonl").stdout.splitlines()]
    assert [hit["query"] for hit in jsonl] == [QUERY, "invoice"]


def test_json_with_another_format_is_refused(copies):
    refused = run_cli("query", QUERY, "--index-dir", str(copies["index"]), "--json", "--format", "tsv")
    assert refused.exit_code == 2 and "--json and --format tsv" in refused.stderr
    assert json.loads(refused.stdout)["error"]["kind"] == "usage"  # --json: the error document too
    missing = run_cli("query", QUERY, "--index-dir", str(copies["index"] / "none"), "--format", "json")
    assert missing.exit_code == 1 and json.loads(missing.stdout)["error"]["kind"] == "index"
    piped = run_cli("query", QUERY, "--index-dir", str(copies["index"] / "none"), "--format", "jsonl")
    assert piped.exit_code == 1 and piped.stdout == ""  # jsonl is not the JSON document: no error document
    bad = run_cli("query", QUERY, "--index-dir", str(copies["index"]), "--format", "xml")
    assert bad.exit_code == 2 and "xml" in bad.stderr


def test_ls_in_every_format(copies):
    index = ["--index-dir", str(copies["index"])]
    names = sorted(str(p) for p in copies["docs"].rglob("*.pdf"))
    lines = run_cli("ls", *index).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == names and all(line.split("\t")[1:3] == ["2", "pdf"] for line in lines)
    tsv = list(csv.DictReader(io.StringIO(run_cli("ls", *index, "--format", "tsv").stdout), delimiter="\t"))
    assert [row["path"] for row in tsv] == names and {row["pages"] for row in tsv} == {"2"}
    jsonl = [json.loads(line) for line in run_cli("ls", *index, "--format", "jsonl").stdout.splitlines()]
    document = json.loads(run_cli("ls", *index, "--format", "json").stdout)
    validate(document, "documents")
    assert jsonl == document["documents"]
    assert run_cli("ls", *index, "--format", "paths").stdout.splitlines() == names
    assert run_cli("ls", *index, "--format", "table").stdout.splitlines()[0].split() == ["pages", "kind", "text", "path"]


def _queryset(copies, tmp_path: Path, path: str) -> Path:
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": QUERY, "relevant": [{"path": path, "page": 1, "grade": 1}]}) + "\n")
    return queries


def test_eval_in_every_format(copies, tmp_path):
    args = ["eval", str(_queryset(copies, tmp_path, "report.pdf")), "--index-dir", str(copies["index"]), "--modes", "text,hybrid"]
    lines = run_cli(*args).stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["text", "hybrid"] and lines[0].split("\t")[2].startswith("nDCG@5=")
    tsv = list(csv.DictReader(io.StringIO(run_cli(*args, "--format", "tsv").stdout), delimiter="\t"))
    assert [row["mode"] for row in tsv] == ["text", "hybrid"] and float(tsv[0]["ndcg@5"]) == 1.0
    document = json.loads(run_cli(*args, "--format", "json").stdout)
    validate(document, "eval")
    jsonl = [json.loads(line) for line in run_cli(*args, "--format", "jsonl").stdout.splitlines()]
    assert [run["measures"] for run in jsonl] == [run["measures"] for run in document["runs"]]
    assert "nDCG" in run_cli(*args, "--format", "table").stdout
    refused = run_cli(*args, "--format", "paths")
    assert refused.exit_code == 2 and "--format paths" in refused.stderr


# --- copies -------------------------------------------------------------------------------------------

def _pages(hits: list[dict], path: str = "path") -> list[tuple[str, int]]:
    return [(Path(hit[path]).name, hit["page"]) for hit in hits]


@pytest.mark.parametrize("mode", ["visual", "text", "hybrid"])
def test_copies_are_one_hit_naming_every_path_and_k_distinct_pages_come_back(copies, mode):
    document = json.loads(_query(copies, "--mode", mode, "-k", "6", "--json"))
    hits = document["queries"][0]["results"]
    # every distinct page (6 of the index's 8); text finds the report's two only
    assert len({(hit["sha256"], hit["page"]) for hit in hits}) == len(hits) == (2 if mode == "text" else 6)
    assert [hit["rank"] for hit in hits] == list(range(1, len(hits) + 1))
    for hit in hits:
        if hit["path"] in copies["same"]:
            assert {hit["path"], *hit["copies"]} == copies["same"]
        else:
            assert "copies" not in hit
    apart = json.loads(_query(copies, "--mode", mode, "-k", "8", "--all-copies", "--json"))["queries"][0]["results"]
    assert all("copies" not in hit for hit in apart)
    assert {hit["path"] for hit in apart} >= copies["same"]


def test_a_filter_keeps_the_copies_it_matches_only(copies, fake_model, tmp_path):
    """A copy the filters leave out is not named (its metadata differs: it is another document to them)."""
    rules = tmp_path / "meta.json"
    rules.write_text(json.dumps({"*.pdf": {"team": "finance"}, "copy/**": {"team": "archive"}}))
    index = tmp_path / "idx"
    built = run_cli("build", str(copies["docs"]), "--model", str(fake_model), "--index-dir", str(index),
                    "--metadata", str(rules))
    assert built.exit_code == 0, built.stderr
    answered = run_cli("query", QUERY, "--mode", "text", "--index-dir", str(index), "--filter", "team=finance", "--json")
    hits = json.loads(answered.stdout)["queries"][0]["results"]
    assert _pages(hits) == [("report.pdf", 1), ("report.pdf", 2)] and all("copies" not in hit for hit in hits)


def test_copies_over_http(copies):
    """POST /query (in-process, the real app): collapsed, the copies named as the server names paths."""
    from localgpt_index.serve.app import create_app
    from localgpt_index.serve.middleware import RequestLog
    from localgpt_index.serve.service import IndexService

    service = IndexService(copies["index"] / "default")
    service.load()
    app = create_app(service, log=RequestLog(quiet=True))

    async def ask() -> tuple[dict, dict]:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
                body = {"queries": [QUERY], "k": 4, "mode": "hybrid"}
                one = (await client.post("/query", json=body)).json()
                apart = (await client.post("/query", json={**body, "all_copies": True, "k": 8})).json()
                return one, apart

    one, apart = asyncio.run(ask())
    validate(one, "query")
    hits = one["queries"][0]["results"]
    assert len({(hit["sha256"], hit["page"]) for hit in hits}) == len(hits) == 4 and "results" not in one
    collapsed = [hit for hit in hits if "copies" in hit]
    assert collapsed and all({hit["path"], *hit["copies"]} == {"report.pdf", "copy/report copy.pdf"} for hit in collapsed)
    assert {hit["path"] for hit in apart["queries"][0]["results"]} >= {"report.pdf", "copy/report copy.pdf"}


def test_copies_over_mcp(copies):
    """The MCP `search` tool through the SDK's client (in memory): one hit naming the copy; all_copies apart."""
    from mcp import Client

    from localgpt_index.mcp.backend import IndexTools
    from localgpt_index.mcp.runner import _lifespan
    from localgpt_index.mcp.server import create_server
    from localgpt_index.serve.service import IndexService

    tools = IndexTools(IndexService(copies["index"] / "default"))
    server = create_server(tools, lifespan=_lifespan(tools, ()))

    async def ask() -> tuple[dict, dict]:
        async with Client(server) as client:
            one = await client.call_tool("search", {"query": QUERY, "k": 6, "mode": "visual"})
            apart = await client.call_tool("search", {"query": QUERY, "k": 8, "mode": "visual", "all_copies": True})
            return one.structured_content, apart.structured_content

    one, apart = asyncio.run(ask())
    hits = one["hits"]
    assert len({(hit["sha256"], hit["page"]) for hit in hits}) == len(hits) == 6
    named = [{hit["document"], *hit["copies"]} for hit in hits if hit["copies"]]
    assert named and all(found == {"report.pdf", "copy/report copy.pdf"} for found in named)
    assert {hit["document"] for hit in apart["hits"]} >= {"report.pdf", "copy/report copy.pdf"}
    assert all(hit["copies"] == [] for hit in apart["hits"])


# LlamaIndex's import (about 2 s of CPU) in a worker that may not otherwise import it: the real-component tier
@pytest.mark.parametrize("framework", ["langchain", pytest.param("llamaindex", marks=pytest.mark.slow)])
def test_copies_in_the_retrievers(copies, framework):
    """k=6 gives six pages (LlamaIndex gave fewer: two copies of a page have one node id), the copies in metadata."""
    from localgpt_index import open_index

    def retrieve(**options) -> list[dict]:
        if framework == "langchain":
            from localgpt_index.integrations.langchain import LgptRetriever as LangChain

            return [doc.metadata for doc in LangChain.from_index(open_index(copies["index"]), **options).invoke(QUERY)]
        from localgpt_index.integrations.llamaindex import LgptRetriever as LlamaIndex

        options["similarity_top_k"] = options.pop("k")  # (LlamaIndex's name)
        return [found.node.metadata for found in LlamaIndex.from_index(open_index(copies["index"]), **options).retrieve(QUERY)]

    found = retrieve(k=6, mode="visual")
    assert len({(meta["sha256"], meta["page"]) for meta in found}) == len(found) == 6
    named = [{meta["path"], *meta["copies"]} for meta in found if "copies" in meta]
    assert named and all(paths == copies["same"] for paths in named)
    apart = retrieve(k=8, mode="visual", all_copies=True)
    assert len(apart) == 8 and {meta["path"] for meta in apart} >= copies["same"] and all("copies" not in meta for meta in apart)


def test_the_python_api_collapses_copies_and_lists_them_apart_when_asked(copies):
    from localgpt_index import open_index

    index = open_index(copies["index"])
    [hits] = index.search(QUERY, k=6, mode="visual")
    assert len({(hit.sha256, hit.page) for hit in hits}) == 6  # every distinct page: 6 of the 8
    assert any(set(hit.copies) | {hit.path} == copies["same"] for hit in hits)
    [apart] = index.search(QUERY, k=8, mode="visual", all_copies=True)
    assert {hit.path for hit in apart} >= copies["same"] and all(hit.copies == () for hit in apart)


@pytest.mark.parametrize("judged", ["report.pdf", "copy/report copy.pdf"])
def test_eval_judges_a_hit_on_any_copy(copies, tmp_path, judged):
    """A judgment of either copy's page is answered by the one hit that stands for both: a perfect score
    whichever path the query set names (relative `report.pdf` is not ambiguous: the two are one document)."""
    args = ["eval", str(_queryset(copies, tmp_path, judged)), "--index-dir", str(copies["index"]), "--modes", "text", "--json"]
    result = run_cli(*args, "--per-query")
    assert result.exit_code == 0, result.stderr
    [run] = json.loads(result.stdout)["runs"]
    assert run["measures"]["ndcg@1"] == 1.0 and run["measures"]["recall@1"] == 1.0
    assert run["per_query"][0]["top"][0]["grade"] == 1
