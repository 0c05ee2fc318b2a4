"""The LangChain and LlamaIndex retrievers (localgpt_index.integrations), through each framework's own
retriever interface (`invoke` for LangChain, `retrieve` for LlamaIndex), over the Python API (an open
index, the fake encoder) and over a real `lgpt-index serve` on a real port. LangChain's own standard suite:
tests/test_integrations_standard.py.

Each framework is imported where a test uses it (langchain-core and llama-index-core: about 3 s of CPU), not at
collection: the other xdist worker collects this module too, and runs none of it (`--dist loadfile`)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
import textwrap

import httpx
import pytest
from PIL import Image

from helpers import report_index as build_report_index
from served import serving

from localgpt_index import LgptError, open_index
from localgpt_index.core.errors import EnvironmentMissing, UsageError
from localgpt_index.integrations.source import PageHit, open_source

QUERY = "report 1 page 0"


@pytest.fixture(scope="module")
def report_index(fake_model, tmp_path_factory):
    return build_report_index(tmp_path_factory.mktemp("retrievers"), fake_model, reports=3, pages=2)


@pytest.fixture(scope="module")
def server(report_index):
    yield from serving("--index-dir", str(report_index["index"]), "--absolute-paths")  # paths as the API gives them


def expected(report_index, k: int, **filters) -> list[tuple[str, int, float]]:
    """What the Python API itself answers: (path, page, score) of each hit, best first."""
    hits = open_index(report_index["index"]).search(QUERY, k=k, filters=filters or None)[0]
    return [(hit.path, hit.page, hit.score) for hit in hits]


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def langchain_retriever(backend: str, report_index, server, **options):
    from localgpt_index.integrations import langchain as lc

    if backend == "server":
        return lc.LgptRetriever.from_server(server.url, **options)
    return lc.LgptRetriever.from_index(index_dir=str(report_index["index"]), **options)


def llamaindex_retriever(backend: str, report_index, server, **options):
    from localgpt_index.integrations import llamaindex as li

    if backend == "server":
        return li.LgptRetriever.from_server(server.url, **options)
    return li.LgptRetriever.from_index(open_index(report_index["index"]), **options)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("backend", ["api", "server"])
def test_langchain_retriever_invoke(backend, report_index, request):
    from langchain_core.documents import Document

    server = request.getfixturevalue("server") if backend == "server" else None
    retriever = langchain_retriever(backend, report_index, server, k=3)
    documents = retriever.invoke(QUERY)
    assert all(isinstance(document, Document) for document in documents)
    assert asyncio.run(retriever.ainvoke(QUERY)) == documents and retriever.batch([QUERY, QUERY]) == [documents, documents]
    assert [(d.metadata["path"], d.metadata["page"], d.metadata["score"]) for d in documents] == expected(report_index, 3)
    first = documents[0]
    assert first.metadata["rank"] == 1 and first.id == f"{first.metadata['sha256']}#page={first.metadata['page']}"
    title = f"{first.metadata['path'].rsplit('/', 1)[-1][:-4].replace('-', ' ')} page {first.metadata['page'] - 1}"
    assert first.page_content.startswith(title + "\n")  # the page's text layer, as the index holds it
    assert first.metadata["has_text"] is True  # the text layer of the page, as the index holds it
    assert "image_base64" not in first.metadata
    assert retriever.page_image(first, dpi=40).size == png_size(_page_png(report_index, first.metadata, 40))
    if backend == "server":  # the image reference is the server's own page URL
        assert png_size(httpx.get(first.metadata["image_url"]).content) == retriever.page_image(first).size
    else:
        assert "image_url" not in first.metadata

    finance = langchain_retriever(backend, report_index, server, k=5, filters={"team": "finance"}).invoke(QUERY)
    assert [(d.metadata["path"], d.metadata["page"], d.metadata["score"]) for d in finance] == expected(report_index, 5, team="finance")
    assert {d.metadata["document_metadata"]["team"] for d in finance} == {"finance"}

    with_images = langchain_retriever(backend, report_index, server, k=2, with_images=True, dpi=40).invoke(QUERY)
    assert [png_size(base64.b64decode(d.metadata["image_base64"])) for d in with_images] == [
        retriever.page_image(d, dpi=40).size for d in with_images]


@pytest.mark.parametrize("backend", ["api", "server"])
def test_llamaindex_retriever_retrieve(backend, report_index, request):
    from llama_index.core.schema import ImageNode, NodeWithScore, TextNode

    server = request.getfixturevalue("server") if backend == "server" else None
    retriever = llamaindex_retriever(backend, report_index, server, similarity_top_k=3)
    nodes = retriever.retrieve(QUERY)
    assert [n.node.node_id for n in asyncio.run(retriever.aretrieve(QUERY))] == [n.node.node_id for n in nodes]
    assert all(isinstance(found, NodeWithScore) and type(found.node) is TextNode for found in nodes)
    assert [(n.node.metadata["path"], n.node.metadata["page"], n.score) for n in nodes] == expected(report_index, 3)
    first = nodes[0].node
    assert first.node_id == f"{first.metadata['sha256']}#page={first.metadata['page']}"
    assert first.text.startswith("report ") and first.metadata["has_text"] is True
    shown = first.get_content(metadata_mode="llm")  # what an LLM reads: the path and page, not the hashes
    assert first.metadata["path"] in shown and "sha256" not in shown
    assert retriever.page_image(nodes[0], dpi=40).size == png_size(_page_png(report_index, first.metadata, 40))
    assert ("image_url" in first.metadata) == (backend == "server")

    with_images = llamaindex_retriever(backend, report_index, server, similarity_top_k=2, with_images=True, dpi=40).retrieve(QUERY)
    assert all(type(found.node) is ImageNode and found.node.image_mimetype == "image/png" for found in with_images)
    assert [png_size(base64.b64decode(n.node.image)) for n in with_images] == [retriever.page_image(n, dpi=40).size for n in with_images]


def _page_png(report_index, metadata: dict, dpi: int) -> bytes:
    from localgpt_index.integrations.source import IndexSource

    return IndexSource(open_index(report_index["index"])).page_png(metadata["sha256"], metadata["page"], dpi)


def test_page_text_is_the_content_where_the_index_has_it():
    from localgpt_index.integrations import langchain as lc
    from localgpt_index.integrations import llamaindex as li

    hit = {"rank": 1, "score": 2.5, "path": "a.pdf", "page": 3, "sha256": "ab" * 32, "kind": "pdf",
           "metadata": {"team": "x"}, "text": "Invoice 4711, due 2026-12-31"}
    page = PageHit.from_hit("invoice", hit)
    document = lc.to_document(page)
    assert document.page_content == "Invoice 4711, due 2026-12-31" and document.metadata["has_text"] is True
    node = li.to_node(page)
    assert node.node.text == "Invoice 4711, due 2026-12-31" and node.score == 2.5
    assert "Invoice 4711" in node.node.get_content(metadata_mode="llm")


@pytest.mark.parametrize("backend", ["api", "server"])
def test_text_mode_finds_the_page_by_its_text_and_hands_it_on(backend, report_index, request):
    server = request.getfixturevalue("server") if backend == "server" else None
    documents = langchain_retriever(backend, report_index, server, k=2, mode="text").invoke("report 2 page 1")
    assert documents[0].metadata["path"].endswith("report-2.pdf") and documents[0].metadata["page"] == 2
    assert documents[0].page_content.startswith("report 2 page 1\n") and "report 2 page 1 details" in documents[0].page_content
    nodes = llamaindex_retriever(backend, report_index, server, similarity_top_k=2, mode="text", with_text=False).retrieve(
        "report 2 page 1")
    assert nodes[0].node.metadata["page"] == 2 and nodes[0].node.text == "" and nodes[0].node.metadata["has_text"] is False


def test_bad_options_and_an_unreachable_server(report_index):
    from localgpt_index.integrations import langchain as lc
    from localgpt_index.integrations import llamaindex as li

    for bad in ({"k": 0}, {"dpi": 5000}, {"first_pass": 0}, {"kk": 3}, {"mode": "sideways"}):
        with pytest.raises(UsageError, match="bad retriever option"):
            lc.LgptRetriever.from_index(index_dir=str(report_index["index"]), **bad)
        with pytest.raises(UsageError, match="bad retriever option"):
            li.LgptRetriever.from_server("http://127.0.0.1:9", **bad)
        with pytest.raises(UsageError, match="bad retriever option"):  # per call too
            lc.LgptRetriever.from_index(index_dir=str(report_index["index"])).invoke(QUERY, **bad)
    with pytest.raises(UsageError, match="names it similarity_top_k"):  # LlamaIndex's name for it
        li.LgptRetriever.from_server("http://127.0.0.1:9", k=3)
    with pytest.raises(UsageError, match="either a server or an index"):
        open_source(open_index(report_index["index"]), server="http://127.0.0.1:9")
    with pytest.raises(UsageError, match="http:// or https://"):
        li.LgptRetriever.from_server("127.0.0.1:9")
    with pytest.raises(EnvironmentMissing, match="cannot reach the lgpt-index server at http://127.0.0.1:9"):
        lc.LgptRetriever.from_server("http://127.0.0.1:9").invoke(QUERY)
    with pytest.raises(LgptError, match="index"):
        li.LgptRetriever.from_index(name="no-such-index")


def _png(width: int, height: int, rows: bytes | None = None) -> bytes:
    """A 1-bit grey PNG of `width` x `height`: all black (a few KB whatever its size, as zeros compress), or
    with `rows` as its compressed image data."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    if rows is None:
        rows = zlib.compress(bytes((1 + (width + 7) // 8) * height), 9)
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


@pytest.fixture
def png_server():
    """A stand-in for a server on a real port, answering every GET with the PNG put in `.body`."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(self.server.body)))
            self.end_headers()
            self.wfile.write(self.server.body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_page_image_from_a_server_is_bounded_before_it_is_decoded(png_server):
    """Issue 39 #9: a 17 KB PNG of 12000x12000 pixels (690 MiB decoded), one of 20000x20000 (PIL's bomb error) and
    one that does not decode are each an LgptError naming the server; a page of a sane size decodes."""
    from langchain_core.documents import Document
    from llama_index.core.schema import TextNode

    from localgpt_index.integrations import langchain as lc
    from localgpt_index.integrations import llamaindex as li

    page = Document(page_content="", metadata={"sha256": "ab" * 32, "page": 3})
    for retriever in (lc.LgptRetriever.from_server(png_server.url), li.LgptRetriever.from_server(png_server.url)):
        png_server.body = _png(50, 40)
        assert retriever.page_image(page if isinstance(retriever, lc.LgptRetriever) else TextNode(metadata=page.metadata)).size == (50, 40)
    retriever = lc.LgptRetriever.from_server(png_server.url)
    for body, said in ((_png(12000, 12000), "as a 12000x12000 image"), (_png(20000, 20000, b""), "as a 20000x20000 image"),
                       (_png(64, 64, b"not zlib at all"), "cannot be decoded"), (_png(64, 64)[:40], "cannot be decoded")):
        png_server.body = body
        with pytest.raises(LgptError) as refused:
            retriever.page_image(page)
        assert png_server.url in refused.value.message and said in refused.value.message, refused.value.message
        assert "page 3 of abababababab" in refused.value.message
    from localgpt_index.integrations.source import MAX_PAGE_PIXELS

    assert 12000 * 12000 > MAX_PAGE_PIXELS > 7016 * 4961  # A4 at 600 dpi, the most a client may ask for, fits


LIGHT_IMPORTS = """
import sys
import localgpt_index
from localgpt_index import open_index
hits = open_index({index!r}).search("report", k=2)[0]
import localgpt_index.integrations, localgpt_index.integrations.source, localgpt_index.serve.client
assert hits and localgpt_index.__all__
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("langchain_core", "langchain", "llama_index"))
assert not heavy, heavy
import localgpt_index.integrations.langchain, localgpt_index.integrations.llamaindex
assert "torch" not in sys.modules, "an adapter imported torch"
print("ok")
"""

# Every connection that is not to this machine fails, and is recorded: a download would show here.
OFFLINE = """
import socket, sys
tried = []
_connect = socket.socket.connect
def connect(self, address, *args):
    if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
        tried.append(address)
        raise OSError("no network in this test")
    return _connect(self, address, *args)
socket.socket.connect = connect
from localgpt_index.integrations.llamaindex import LgptRetriever
retrievers = [LgptRetriever.from_index(index_dir={index!r}, similarity_top_k=2)]
retrievers += [LgptRetriever.from_server({url!r}, similarity_top_k=2)] if {url!r} else []
for retriever in retrievers:
    nodes = retriever.retrieve("report 1")
    assert len(nodes) == 2 and nodes[0].node.get_content(metadata_mode="all")
    retriever.retrieve("report 2")
assert not tried, tried
fetchers = sorted(m for m in ("nltk", "tiktoken", "tiktoken_ext") if m in sys.modules)
assert not fetchers, "on the retrieval path: " + ", ".join(fetchers)
print("ok")
"""


def _run_python(source: str, tmp_path, **env) -> None:
    import os

    # where llama-index and tiktoken would put what they download: empty, so a download would be needed
    env = {**os.environ, "NLTK_DATA": str(tmp_path / "nltk"), "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken"), **env}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_the_package_and_the_api_import_no_framework(report_index, tmp_path):
    """In a process where torch cannot be imported (as in the fast tier), in either tier."""
    from conftest import torchless_path

    _run_python(LIGHT_IMPORTS.format(index=str(report_index["index"])), tmp_path, PYTHONPATH=torchless_path())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_llamaindex_retriever_works_offline(report_index, server, tmp_path):
    _run_python(OFFLINE.format(index=str(report_index["index"]), url=server.url), tmp_path, HF_HUB_OFFLINE="1")


@pytest.mark.slow
def test_llamaindex_retriever_works_offline_with_a_real_model(tiny_model, tmp_path):
    """The same, with the model libraries a real checkpoint loads (torch, transformers' tokenizer) on the path."""
    index = build_report_index(tmp_path, tiny_model, reports=2, pages=1)["index"]
    _run_python(OFFLINE.format(index=str(index), url=None), tmp_path, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


@pytest.mark.parametrize("backend", ["api", "server"])
def test_options_per_call_and_llamaindex_names(backend, report_index, request):
    """LangChain's `invoke(query, k=1)` (and `ainvoke`, `batch`) overrides the retriever's own options for that
    call only; a LlamaIndex retriever's `similarity_top_k` is read and set as on LlamaIndex's own retrievers."""
    server = request.getfixturevalue("server") if backend == "server" else None
    retriever = langchain_retriever(backend, report_index, server, k=4)
    assert len(retriever.invoke(QUERY, k=1)) == 1 and len(retriever.invoke(QUERY)) == 4
    assert len(asyncio.run(retriever.ainvoke(QUERY, k=2))) == 2
    assert [len(found) for found in retriever.batch([QUERY, QUERY], k=3)] == [3, 3]
    text = retriever.invoke("report 2 page 1", k=1, mode="text")
    assert [(d.metadata["path"].endswith("report-2.pdf"), d.metadata["page"]) for d in text] == [(True, 2)]
    nodes = llamaindex_retriever(backend, report_index, server, similarity_top_k=4)
    assert nodes.similarity_top_k == 4 and len(nodes.retrieve(QUERY)) == 4
    nodes.similarity_top_k = 2
    assert [(n.node.metadata["path"], n.node.metadata["page"], n.score) for n in nodes.retrieve(QUERY)] == expected(report_index, 2)


def test_documents_are_json_serialisable(report_index):
    from localgpt_index.integrations import langchain as lc

    documents = lc.LgptRetriever.from_index(index_dir=str(report_index["index"]), k=2).invoke(QUERY)
    json.dumps([document.metadata for document in documents])


def test_a_png_header_gives_its_size_without_decoding():
    import io

    from PIL import Image

    from localgpt_index.integrations.source import png_dimensions

    out = io.BytesIO()
    Image.new("RGB", (17, 5)).save(out, "PNG")
    assert png_dimensions(out.getvalue()) == (17, 5)
    assert png_dimensions(b"\x89PNG\r\n\x1a\n") is None and png_dimensions(b"GIF89a" + bytes(30)) is None
