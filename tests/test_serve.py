"""`lgpt-index serve` in a process of its own, on a free port, spoken to over real HTTP (httpx)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from conftest import faulty_model, run_cli, torchless, validate, with_torch
from docgen import make_pdf
from helpers import report_index as build_report_index
from helpers import free_port, wait_until
from served import Server, serving

pytestmark = torchless  # its processes serve the fake model (but torch_server: with_torch())


@pytest.fixture(scope="module")
def report_index(fake_model, tmp_path_factory):
    return build_report_index(tmp_path_factory.mktemp("serve"), fake_model, reports=4, pages=3)


@pytest.fixture(scope="module")
def server(report_index):
    """The module's server, without torch as the fast tier's processes are (NumPy scoring)."""
    yield from serving("--index-dir", str(report_index["index"]), "--absolute-paths")


@pytest.fixture(scope="module")
def torch_server(report_index):
    """A server with torch (unlike this module's other processes): its scorer is the compiled kernel, loaded at
    start, whose answers are held against the CLI's torch path."""
    yield from serving("--index-dir", str(report_index["index"]), "--absolute-paths", env=with_torch())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_query_answers_exactly_what_the_cli_prints(torch_server, report_index):
    server = torch_server
    queries = ["quarterly report", "a scan of a receipt"]
    with server.client() as client:
        served = client.post("/query", json={"queries": queries, "k": 4}).json()
        filtered = client.post("/query", json={"queries": queries[:1], "k": 4, "filters": {"team": "finance"}}).json()
        first_pass = client.post("/query", json={"queries": queries[:1], "k": 3, "first_pass": 5}).json()
    cli = json.loads(run_cli("query", *queries, "-k", "4", "--json", "--index-dir", str(report_index["index"])).stdout)
    # the same document; scores within float32 rounding: with torch installed, the warm server scores with
    # the compiled kernel and a one-shot CLI with torch's path (the fast tier, without torch: NumPy both); a fused
    # score also passes through the visual list's calibration, which divides by spreads of scores with that rounding
    assert _scoreless(served) == _scoreless(cli)
    assert len(_scores(cli)) >= 8 and _scores(served) == [pytest.approx(v, rel=1e-4) if isinstance(v, float) else v for v in _scores(cli)]
    validate(served, "query")
    assert {Path(h["path"]).name for h in filtered["queries"][0]["results"]} == {"report-0.pdf"}
    assert len(first_pass["queries"][0]["results"]) == 3


def _scores(document, found=None) -> list[float]:
    """Every score in a query document (`score`, `visual_score`, ...), in document order."""
    found = [] if found is None else found
    for key, value in document.items() if isinstance(document, dict) else enumerate(document):
        if isinstance(value, (dict, list)):
            _scores(value, found)
        elif isinstance(key, str) and key.endswith("score"):
            found.append(value)
    return found


def _scoreless(document):
    """The document with every score left out."""
    if isinstance(document, list):
        return [_scoreless(value) for value in document]
    if isinstance(document, dict):
        return {key: _scoreless(value) for key, value in document.items() if not key.endswith("score")}
    return document


def test_status_documents_and_ls_are_the_cli_documents(server, report_index):
    with server.client() as client:
        status = client.get("/status").json()
        documents = client.get("/documents").json()
        under = client.get("/documents", params={"prefix": str(report_index["docs"] / "report-1")}).json()
    index = ["--index-dir", str(report_index["index"])]
    assert status == json.loads(run_cli("status", "--json", *index).stdout)
    assert documents == json.loads(run_cli("ls", "--json", *index).stdout)
    validate(status, "status")
    validate(documents, "documents")
    validate(json.loads(run_cli("ls", "--failed", "--json", *index).stdout), "documents")
    assert [Path(d["path"]).name for d in under["documents"]] == ["report-1.pdf"]
    listed = run_cli("ls", str(report_index["docs"] / "report-2"), *index)
    assert listed.exit_code == 0 and "report-2.pdf" in listed.stdout and "report-1.pdf" not in listed.stdout


def test_page_images_by_sha256(server):
    with server.client() as client:
        doc = next(d for d in client.get("/documents").json()["documents"] if d["kind"] == "pdf")
        page = client.get(f"/pages/{doc['sha256']}/2.png", params={"dpi": 40})
        assert page.status_code == 200 and page.headers["content-type"] == "image/png" and page.content[:4] == b"\x89PNG"
        for path, status in ((f"/pages/{doc['sha256']}/4.png", 404), (f"/pages/{doc['sha256']}/0.png", 404),
                             (f"/pages/{'0' * 64}/1.png", 404), ("/pages/..%2F..%2Fetc%2Fpasswd/1.png", 404),
                             (f"/pages/{doc['sha256']}/1.png?dpi=5000", 400)):
            answer = client.get(path)
            assert answer.status_code == status, (path, answer.text)
            assert "error" in answer.json() and "/etc" not in answer.text


BAD_QUERIES = {
    "too-many-queries": ({"queries": ["q"] * 65}, 400),
    "query-too-long": ({"queries": ["x" * 2049]}, 400),
    "empty-query": ({"queries": ["  "]}, 400),
    "no-queries": ({"queries": []}, 400),
    "k-zero": ({"queries": ["q"], "k": 0}, 400),
    "k-huge": ({"queries": ["q"], "k": 100_000}, 400),
    "filter-syntax": ({"queries": ["q"], "filters": ["no-equals-sign"]}, 400),
    "filter-type": ({"queries": ["q"], "filters": 42}, 400),
    "unknown-field": ({"queries": ["q"], "path": "/etc/passwd"}, 400),
}


@pytest.mark.parametrize("case", sorted(BAD_QUERIES))
def test_bad_requests_are_clear_4xx_json(server, case):
    body, status = BAD_QUERIES[case]
    with server.client() as client:
        answer = client.post("/query", json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["status"] == status and error["message"] and "Traceback" not in answer.text


def test_a_body_that_is_no_request_is_named_as_a_client_writes_it(server):
    """Where the body stops being JSON, a body that is not UTF-8, a list's item by its index (and the list not also
    said to be short of items), each in the one error shape."""
    cases = {b'{"queries": ["q"], "k": }': "body: not JSON (Expecting value, at character 24)",
             b'{"queries": ["q", 1]}': "queries[1]: Input should be a valid string",
             b'{"queries": ["\xff"]}': "body: not UTF-8; a JSON body is UTF-8 text"}
    with server.client() as client:
        for body, message in cases.items():
            answer = client.post("/query", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 400 and answer.json()["error"]["message"] == message, answer.text


def test_the_limits_hold_at_their_bounds_and_answers_are_compact_ascii_json(server):
    """docs/serving.md: 64 queries of 2,048 characters, k up to 1,000, dpi 20 to 600, in and just out;
    answers compact (no spaces after separators) with ASCII escapes; the scoring and readiness headers."""
    sha = next(d["sha256"] for d in server.client().get("/documents").json()["documents"] if d["kind"] == "pdf")
    bounds = [({"k": 1000}, 200), ({"k": 1001}, 400), ({"dpi": 20}, 200), ({"dpi": 600}, 200), ({"dpi": 19}, 400),
              ({"dpi": 601}, 400), ({"queries": ["q"] * 64}, 200), ({"queries": ["x" * 2048]}, 200)]
    with server.client() as client:
        for body, status in bounds:
            answer = client.post("/query", json={"queries": ["q"], **body})
            assert answer.status_code == status, (body, answer.text)
        for dpi, status in ((19, 400), (20, 200), (601, 400)):
            assert client.get(f"/pages/{sha}/1.png", params={"dpi": dpi}).status_code == status, dpi
        answer = client.post("/query", json={"queries": ["café → Zürich"], "k": 3})
        healthz = client.get("/healthz")
    assert answer.status_code == 200 and answer.json()["queries"][0]["query"] == "café → Zürich"
    assert b"caf\\u00e9 \\u2192 Z\\u00fcrich" in answer.content and answer.content.isascii()
    between_strings = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', answer.content)  # a snippet may hold ", "
    assert b", " not in between_strings and b": " not in between_strings and b'"":[{"":' in between_strings
    assert int(answer.headers["X-Lgpt-Scored-With"]) >= 1
    assert healthz.status_code == 200 and healthz.json()["queued"] == 0


def test_oversized_and_malformed_bodies(server):
    with server.client() as client:
        big = client.post("/query", content=b'{"queries": ["' + b"x" * (2 << 20) + b'"]}',
                          headers={"content-type": "application/json"})
        assert big.status_code == 413 and "larger than" in big.json()["error"]["message"]
        chunked = client.post("/query", content=iter([b'{"queries": ["', b"x" * (2 << 20), b'"]}']),
                              headers={"content-type": "application/json"})
        assert chunked.status_code == 413
        garbage = client.post("/query", content=b"\xff\xfe not json", headers={"content-type": "application/json"})
        assert garbage.status_code == 400
        wrong_method = client.get("/query")
        assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"  # HTTP requires Allow on a 405
        assert wrong_method.json()["error"]["status"] == 405
        assert client.get("/nowhere").json()["error"]["status"] == 404


def test_the_openapi_description_lists_the_endpoints(server):
    with server.client() as client:
        spec = client.get("/openapi.json").json()
    assert {"/query", "/status", "/documents", "/healthz", "/pages/{sha256}/{page}.png"} <= set(spec["paths"])


def test_the_openapi_query_answer_is_the_published_query_document(server):
    """The /query answer's OpenAPI schema is generated from the one definition of the query result,
    the same as query.schema.json (constraints included: rank and page from 1, the kinds, the sha256)."""
    from localgpt_index.interop.results import query_json_schema

    with server.client() as client:
        spec = client.get("/openapi.json").json()
    answer = spec["paths"]["/query"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/QueryDocument"}
    published = json.loads(json.dumps(query_json_schema()).replace("#/$defs/", "#/components/schemas/"))
    components = spec["components"]["schemas"]
    assert components["QueryDocument"]["properties"] == published["properties"]
    assert {name: components[name] for name in published["$defs"]} == published["$defs"]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_concurrent_requests_share_a_forward_pass(report_index, tmp_path, fake_model):
    slow = faulty_model(tmp_path / "slow", seconds_per_query=0.3)
    index = tmp_path / "idx"
    assert run_cli("build", str(report_index["docs"]), "--model", str(slow), "--index-dir", str(index)).exit_code == 0
    running = Server("--index-dir", str(index), "-q")
    try:
        running.wait_ready()
        queries = [f"question {i}" for i in range(8)]

        def ask(text):
            with running.client() as client:
                answer = client.post("/query", json={"queries": [text], "k": 3})
                return answer.json(), int(answer.headers["X-Lgpt-Batch-Queries"])

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, queries))
        assert max(size for _, size in answers) > 1  # queries that arrived together were encoded together
        alone = [ask(text)[0] for text in queries]
        for (together, _), single in zip(answers, alone):  # and answered as one at a time
            assert _ranking(together) == _ranking(single)
            assert [h["score"] for h in together["queries"][0]["results"]] == \
                pytest.approx([h["score"] for h in single["queries"][0]["results"]], rel=1e-5)
    finally:
        assert running.stop() == 0


def _ranking(document: dict) -> list[tuple[str, int]]:
    return [(h["path"], h["page"]) for h in document["queries"][0]["results"]]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_build_beside_the_server_is_picked_up(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "first.pdf", ["first"])
    run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    running = Server("--index-dir", str(index))
    try:
        running.wait_ready()
        with running.client() as client:
            before = client.post("/query", json={"queries": ["q"], "k": 10})
            make_pdf(docs / "second.pdf", ["second", "two"])
            assert run_cli("build", str(docs), "--index-dir", str(index)).exit_code == 0
            after = client.post("/query", json={"queries": ["q"], "k": 10})
            status = client.get("/status").json()
        assert int(after.headers["X-Lgpt-Generation"]) > int(before.headers["X-Lgpt-Generation"])
        assert {Path(h["path"]).name for h in after.json()["queries"][0]["results"]} == {"first.pdf", "second.pdf"}
        assert status["pages"] == 3
    finally:
        assert running.stop() == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_token_guards_everything_but_healthz(server, report_index):
    """Beyond loopback with the token from $LGPT_SERVE_TOKEN alone (serve --token: test_serve_hardening)."""
    guarded = Server("--host", "0.0.0.0", "--index-dir", str(report_index["index"]), env={"LGPT_SERVE_TOKEN": "s3cret"})
    try:
        guarded.wait_ready()
        with guarded.client() as anonymous, guarded.client("wrong") as wrong, guarded.client("s3cret") as right:
            assert anonymous.get("/healthz").status_code == 200
            sha = next(d["sha256"] for d in right.get("/documents").json()["documents"] if d["kind"] == "pdf")
            for client, status in ((anonymous, 401), (wrong, 401), (right, 200)):
                assert client.post("/query", json={"queries": ["q"]}).status_code == status
                assert client.get("/status").status_code == status
                assert client.get("/openapi.json").status_code == status
                assert client.get("/documents").status_code == status
                assert client.get(f"/pages/{sha}/1.png", params={"dpi": 20}).status_code == status
        cli = run_cli("query", "q", "--server", guarded.url, "--token", "s3cret", "--json")
        assert cli.exit_code == 0 and json.loads(cli.stdout)["queries"][0]["results"]
        from_env = run_cli("query", "q", "--server", guarded.url, "--json", env={"LGPT_SERVE_TOKEN": "s3cret"})
        assert from_env.exit_code == 0 and json.loads(from_env.stdout)["queries"][0]["results"]
        refused = run_cli("query", "q", "--server", guarded.url)
        assert refused.exit_code == 2 and "bearer token" in refused.stderr
    finally:
        assert guarded.stop() == 0


def test_beyond_loopback_a_token_is_required(report_index):
    result = run_cli("serve", "--host", "0.0.0.0", "--index-dir", str(report_index["index"]))
    assert result.exit_code == 2 and "needs a bearer token" in result.stderr


def test_a_taken_port_is_exit_4(report_index):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "localgpt_index", "serve", "--port", str(port), "--index-dir",
                                 str(report_index["index"])], capture_output=True, text=True, timeout=60)
    assert result.returncode == 4 and f"port {port} on 127.0.0.1 is taken" in result.stderr


def test_connections_to_the_listening_socket_get_tcp_nodelay():
    """asyncio (under uvicorn) sets TCP_NODELAY only where the socket says IPPROTO_TCP; without it,
    each response on a kept-alive connection waited about 40 ms (Nagle and delayed ACKs)."""
    import asyncio

    from localgpt_index.serve.runner import bind

    listening = bind("127.0.0.1", 0)
    seen: list[int] = []

    async def accept_one() -> None:
        made = asyncio.Event()  # the server side of the connection exists

        class Record(asyncio.Protocol):
            def connection_made(self, transport):
                seen.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()
                made.set()

        server = await asyncio.get_running_loop().create_server(Record, sock=listening)
        port = listening.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.wait_for(made.wait(), 30)
        writer.close()
        server.close()

    asyncio.run(accept_one())
    assert seen == [1]


def test_query_server_unreachable_is_exit_4_and_no_fallback(report_index):
    port = free_port()
    result = run_cli("query", "q", env={"LGPT_SERVER": f"http://127.0.0.1:{port}", "LGPT_INDEX_DIR": str(report_index["index"])})
    assert result.exit_code == 4 and "cannot reach the lgpt-index server" in result.stderr and result.stdout == ""


def test_query_server_prints_the_same_table_and_exports_pages(server, report_index, tmp_path):
    index = ["--index-dir", str(report_index["index"])]
    local = run_cli("query", "report", "-k", "3", *index)
    remote = run_cli("query", "report", "-k", "3", "--server", server.url, "--export-pages", str(tmp_path / "pages"))
    assert remote.exit_code == 0 and remote.stdout == local.stdout
    manifest = json.loads((tmp_path / "pages" / "manifest.json").read_text())
    assert len(manifest["queries"][0]["results"]) == 3
    assert all((tmp_path / "pages" / r["image"]).read_bytes()[:4] == b"\x89PNG" for r in manifest["queries"][0]["results"])


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_healthz_is_ready_only_once_the_model_is_loaded(report_index, tmp_path):
    slow = faulty_model(tmp_path / "slow-load", seconds_to_load=3)
    index = tmp_path / "idx"
    assert run_cli("build", str(report_index["docs"]), "--model", str(slow), "--index-dir", str(index)).exit_code == 0
    running = Server("--index-dir", str(index))
    try:
        with running.client() as client:
            loading = client.get("/healthz")
            assert loading.status_code == 503 and loading.json() == {"status": "loading", "ready_modes": ["text"]}
            early = client.post("/query", json={"queries": ["q"]})
            assert early.status_code == 503 and "still loading" in early.json()["error"]["message"]
        running.wait_ready()
    finally:
        assert running.stop() == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_sigterm_finishes_the_request_in_flight_then_exits_0(report_index, tmp_path):
    """The query is held on the encoder thread (failpoint serve.batch) while SIGTERM arrives; the server
    stops listening (a new connection is refused), yet answers the held query once it goes on, then exits 0."""
    release = tmp_path / "release"
    running = Server("--index-dir", str(report_index["index"]),
                     env={"LGPT_FAILPOINT": "serve.batch:1:hold", "LGPT_FAILPOINT_HOLD": str(release)})
    try:
        running.wait_ready()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(lambda: running.client().post("/query", json={"queries": ["in flight"]}))
            wait_until(Path(f"{release}.reached").exists, what="the query reaching the model", proc=running.proc)
            running.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: not _accepts(running.url), what="the server to stop listening", proc=running.proc)
            assert not pending.done()  # still held: shutting down, waiting for it
            release.touch()
            answer = pending.result(timeout=60)
    finally:
        release.touch()
    assert answer.status_code == 200 and answer.json()["queries"][0]["results"]
    assert running.proc.wait(timeout=60) == 0


def _accepts(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=5)
    except httpx.TransportError:
        return False
    return True


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_one_log_line_per_request_and_json_logs(report_index):
    running = Server("--index-dir", str(report_index["index"]), "--json-logs")
    try:
        running.wait_ready()
        with running.client() as client:
            client.get("/status")
    finally:
        running.stop()
    lines = [json.loads(line) for line in running.lines if line.startswith("{")]
    status = [entry for entry in lines if entry.get("path") == "/status"]
    assert status and status[0]["method"] == "GET" and status[0]["status"] == 200 and status[0]["ms"] >= 0


def test_the_service_switches_generations_and_lets_the_old_one_go(fake_model, tmp_path):
    import gc
    import weakref

    from localgpt_index.query.request import QueryRequest
    from localgpt_index.serve.service import IndexService

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "first.pdf", ["first"])
    run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    service = IndexService(index / "default")
    service.load()
    old = service.index()
    [first_segment] = old.manifest.segments
    old_vectors = old.store.segment_arrays(old.manifest.segments[first_segment])[0]
    gone = weakref.ref(old)
    in_flight = service.search([QueryRequest(queries=("q",), k=5)])[0]  # an answer keeps its own generation
    make_pdf(docs / "second.pdf", ["second"])
    run_cli("build", str(docs), "--index-dir", str(index))
    new = service.index()
    assert new.manifest.generation == old.manifest.generation + 1 and service.switches == 1
    assert new.store.segment_arrays(new.manifest.segments[first_segment])[0] is old_vectors  # checked once, reused
    assert in_flight.index is old and len(service.search([QueryRequest(queries=("q",), k=5)])[0].results[0]) == 2
    del old, in_flight, old_vectors
    gc.collect()
    assert gone() is None


def test_a_client_of_a_plain_http_server_loads_no_certificates_and_one_of_https_checks_them(monkeypatch):
    """`query --server http://...` and the integrations' server source open one client a process: the system's CA
    bundle (30-70 ms of CPU) is read only where there is a certificate to check."""
    import ssl

    from localgpt_index.serve.client import ServerClient

    loaded = []
    original = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", lambda self, *a, **k: loaded.append(a or k) or original(self, *a, **k))
    ServerClient("http://127.0.0.1:9")
    assert loaded == []
    ServerClient("https://127.0.0.1:9")
    assert loaded


@pytest.mark.timeout(60)  # linear: well under a second; the quadratic pass it replaced: about 20 minutes here
def test_a_request_of_many_bad_items_names_the_first_ones_in_time_linear_in_them():
    """One body can hold hundreds of thousands of refused items: their message is worked out in one pass over
    them (a quadratic one held the event loop for hours), and names the first three."""
    from localgpt_index.query.request import problems

    errors = [{"type": "string_type", "loc": ("body", "queries", n), "msg": "Input should be a valid string"} for n in range(100_000)]
    errors.append({"type": "too_short", "loc": ("body", "queries"), "msg": "Tuple should have at least 1 item"})
    assert problems(errors, whole="body") == "; ".join(f"queries[{n}]: Input should be a valid string" for n in range(3))
