"""`lgpt-index serve` under hostile clients and concurrency (issue 26): a real server on a real
port, spoken to with httpx or raw sockets, synchronised on failpoints and observable state."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from conftest import faulty_model, run_cli, torchless
from docgen import make_pdf
from helpers import report_index as build_report_index
from served import Server, serving

pytestmark = torchless  # its processes serve the fake model


@pytest.fixture(scope="module")
def hardening_index(fake_model, tmp_path_factory):
    return build_report_index(tmp_path_factory.mktemp("hardening"), fake_model, reports=3, pages=2)


class Hold:
    """A failpoint with :hold: reached() once the server waits there, release() to let it go on."""

    def __init__(self, folder: Path, name: str, count: int = 1) -> None:
        self.file = folder / f"hold-{name}"
        self.env = {"LGPT_FAILPOINT": f"{name}:{count}:hold", "LGPT_FAILPOINT_HOLD": str(self.file)}

    def wait_reached(self, server: Server, timeout: float = 30) -> None:
        wait_for(lambda: Path(f"{self.file}.reached").exists(), timeout, lambda: "\n".join(server.lines))

    def release(self) -> None:
        self.file.touch()


def wait_for(condition, timeout: float = 60, why=lambda: "") -> None:
    """Poll an observable condition (not a sleep standing in for one) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time: " + why())
        time.sleep(0.02)


# 1. one malformed query fails its own request only

GOOD = [{"queries": ["quarterly report"], "k": 3}, {"queries": ["a scan", "page one"], "k": 1},
        {"queries": ["finance"], "k": 5, "filters": {"team": "finance"}}, {"queries": ["report"], "k": 2, "first_pass": 4},
        {"queries": ["numbers"], "filters": ["team=finance"]}]
BAD = [({"queries": ["fine", "broken \ud800 text"]}, 400, "queries[1]"), ({"queries": ["\udfff"]}, 400, "queries[0]"),
       ({"queries": ["x" * 2049]}, 400, "queries[0]"), ({"queries": ["q"], "k": 0}, 400, "k"),
       ({"queries": ["q"], "filters": ["no-equals"]}, 400, "filter"), ({"queries": ["q"], "filters": ["\udc80"]}, 400, "filter"),
       ({"queries": ["q"] * 65, "k": 1}, 400, "queries")]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_malformed_query_fails_only_its_own_request(hardening_index, tmp_path):
    """Requests held behind one batch are gathered into the next: the good ones are answered, each
    bad one (lone surrogates, over-long, over-sized, bad k or filters) gets its own 4xx."""
    hold = Hold(tmp_path, "serve.batch")
    running = Server("--index-dir", str(hardening_index["index"]), "-q", env=hold.env)
    try:
        running.wait_ready()
        with ThreadPoolExecutor(24) as pool, running.client() as probe:
            primer = pool.submit(_post, running, {"queries": ["primer"]})
            hold.wait_reached(running)
            mixed = [(body, None, None) for body in GOOD * 2] + BAD + [({"queries": ["bad \ud834 pair"], "k": 2}, 400, "queries[0]")] * 3
            mixed.append(({"queries": ["y" * (2 << 20)]}, 413, "larger than"))
            futures = [pool.submit(_post, running, body) for body, _, _ in mixed]
            good = sum(1 for _, status, _ in mixed if status is None)
            wait_for(lambda: probe.get("/healthz").json().get("queued", good) >= good, 60, lambda: probe.get("/healthz").text)
            hold.release()
            assert primer.result().status_code == 200
            answers = [f.result() for f in futures]
    finally:
        hold.release()
        assert running.stop() == 0
    batched = []
    for (body, status, words), answer in zip(mixed, answers):
        if status is None:
            assert answer.status_code == 200, (body, answer.text)
            document = answer.json()
            assert [q["query"] for q in document["queries"]] == body["queries"]
            assert all(q["results"] for q in document["queries"])
            batched.append(int(answer.headers["X-Lgpt-Batch-Queries"]))
        else:
            assert answer.status_code == status, (body, answer.text)
            assert answer.json()["error"]["status"] == status and words in answer.json()["error"]["message"]
    assert max(batched) > 2  # the good requests did share a batch


def test_a_query_the_model_cannot_read_fails_alone_even_inside_a_batch():
    """Past the HTTP checks (a library caller, a tokenizer with rules of its own): a forward pass that
    fails is run again request by request, so only the request the model cannot read fails."""
    import asyncio
    from types import SimpleNamespace

    from localgpt_index.core.errors import UsageError
    from localgpt_index.serve.batcher import QueryBatcher
    from localgpt_index.query.request import QueryRequest

    class Encoder:  # the tokenizer refuses one text
        def encode_queries(self, texts):
            if any("poison" in text for text in texts):
                raise TypeError("TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]")
            return [f"vector of {text}" for text in texts]

    index = SimpleNamespace(view=SimpleNamespace(exact_scoring=lambda: None))  # a view that ranks by itself: no sweep, a stacked pass
    service = SimpleNamespace(require_ready=Encoder, index=lambda: index, stale=None, encoder=None,
                              answer_encoded=lambda index, requests, vectors, count: [SimpleNamespace(request=r) for r in requests])

    async def scenario():
        batcher = QueryBatcher(service)
        batcher.start()
        requests = [QueryRequest(queries=(text,)) for text in ("one", "poison", "two", "three")]
        answers = await asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True)
        await batcher.stop()
        return batcher.batches, answers

    batches, answers = asyncio.run(scenario())
    assert batches < 4  # some requests were batched together
    assert isinstance(answers[1], UsageError) and "cannot read" in answers[1].message
    assert [a.request.queries[0] for i, a in enumerate(answers) if i != 1] == ["one", "two", "three"]


def _post(server: Server, body: dict) -> httpx.Response:
    with server.client() as client:
        return client.post("/query", content=json.dumps(body).encode(), headers={"content-type": "application/json"})


# 2. ready only after the warm-up, which runs on the encoder thread; /healthz follows HEAD itself

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_healthz_is_not_ready_until_the_warm_up_has_run(hardening_index, tmp_path):
    hold = Hold(tmp_path, "serve.warm_up")
    running = Server("--index-dir", str(hardening_index["index"]), env=hold.env)
    try:
        hold.wait_reached(running)
        with running.client() as client:
            for _ in range(3):
                held = client.get("/healthz")
                assert held.status_code == 503 and held.json() == {"status": "loading", "ready_modes": ["text"]}
            hold.release()
            running.wait_ready()
            assert client.get("/healthz").json()["status"] == "ready"
        assert not any("Traceback" in line for line in running.lines)
    finally:
        hold.release()
        assert running.stop() == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_text_queries_answer_while_the_model_loads(hardening_index, tmp_path):
    """The model's load held (failpoint serve.model_load): /healthz says text is ready, a text query answers,
    a hybrid one is refused as still loading; released, every mode is ready."""
    hold = Hold(tmp_path, "serve.model_load")
    running = Server("--index-dir", str(hardening_index["index"]), env=hold.env)
    try:
        hold.wait_reached(running)
        with running.client() as client:
            held = client.get("/healthz")
            assert held.status_code == 503 and held.json() == {"status": "loading", "ready_modes": ["text"]}
            text = client.post("/query", json={"queries": ["report"], "mode": "text", "k": 2})
            assert text.status_code == 200 and len(text.json()["queries"][0]["results"]) == 2, text.text
            hybrid = client.post("/query", json={"queries": ["report"], "k": 2})
            assert hybrid.status_code == 503 and "still loading" in hybrid.text
            hold.release()
            running.wait_ready()
            assert set(client.get("/healthz").json()["ready_modes"]) == {"visual", "text", "hybrid"}
            assert client.post("/query", json={"queries": ["report"], "k": 2}).status_code == 200
    finally:
        hold.release()
        assert running.stop() == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_healthz_follows_the_index_itself_after_a_swap_and_a_restore(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "one.pdf", ["one"])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    other = faulty_model(tmp_path / "other-model", dim=128, page_tokens=8)
    running = Server("--index-dir", str(index), "-q")
    try:
        running.wait_ready()
        with running.client() as client:
            assert run_cli("build", str(docs), "--rebuild", "--model", str(other), "--index-dir", str(index)).exit_code == 0
            refused = client.post("/query", json={"queries": ["q"]})
            assert refused.status_code == 503 and "rebuilt with another model" in refused.text
            for folder in (tmp_path, other, fake_model):  # the models named by their folders' names only
                assert str(folder) not in refused.text, refused.text
            assert client.get("/healthz").json() == {"status": "stale", "ready_modes": ["text"]}
            assert run_cli("build", str(docs), "--rebuild", "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
            healthz = client.get("/healthz")  # no other endpoint asked in between
            assert healthz.status_code == 200 and healthz.json()["status"] == "ready", healthz.text
            assert client.post("/query", json={"queries": ["q"]}).status_code == 200
    finally:
        assert running.stop() == 0
    assert [line for line in running.lines if line.startswith(("GET /", "POST /"))] == []  # -q: no line per request, 2xx or not


# 3. another model at load: exit 1; a model library's own error: exit 4 with the reason

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_another_model_is_exit_1_and_a_model_library_error_at_load_exit_4(fake_model, tmp_path):
    import shutil
    import subprocess
    import sys

    model = Path(shutil.copytree(fake_model, tmp_path / "model"))
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "one.pdf", ["one"])
    assert run_cli("build", str(docs), "--model", str(model), "--index-dir", str(index)).exit_code == 0
    serve = [sys.executable, "-m", "localgpt_index", "serve", "--port", "0", "--index-dir", str(index), "-q"]  # errors still said
    config = model / "config.json"
    original = config.read_text()
    config.write_text(json.dumps({**json.loads(original), "retrained": True}))  # another fingerprint: another model
    refused = subprocess.run(serve, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "was built with" in refused.stderr, refused.stderr  # docs/integrity.md: exit 1
    assert "cannot be compared with another model" in refused.stderr and "Traceback" not in refused.stderr
    assert "error: the model could not be loaded:" in refused.stderr
    config.write_text(original)
    (model / "faults.json").write_text(json.dumps({"load_error": "safetensors header is damaged"}))
    result = subprocess.run(serve, capture_output=True, text=True, timeout=60)
    assert result.returncode == 4, result.stderr
    assert "OSError" in result.stderr and "safetensors header is damaged" in result.stderr
    assert "Traceback" not in result.stderr


# 4. the scorer never touches torch's process-wide thread count per call

@pytest.mark.slow
def test_overlapping_queries_never_change_torch_s_thread_count(monkeypatch):
    import threading

    import numpy as np
    import torch

    import localgpt_index.index.scoring.maxsim as score_module

    monkeypatch.setattr(score_module, "SCORE_WORKERS", 2)  # side by side even on a one-core machine
    rng = np.random.default_rng(7)
    offsets = np.arange(0, 20_001, 20)  # 1,000 pages of 20 rows: several chunks
    vectors = rng.standard_normal((20_000, 64)).astype(np.float16)
    queries = [rng.standard_normal((6, 64)).astype(np.float32)]
    expected = score_module.maxsim(queries, vectors, offsets)  # the scorer's threads start (once per process)
    threads = torch.get_num_threads()
    calls: list[int] = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n)))
    seen: list[int] = []
    both = threading.Barrier(2)

    def query() -> None:
        for _ in range(10):
            both.wait(timeout=60)  # the two calls start together and overlap
            np.testing.assert_allclose(score_module.maxsim(queries, vectors, offsets), expected, rtol=1e-5)
            seen.append(torch.get_num_threads())

    workers = [threading.Thread(target=query) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    fresh: list[int] = []
    probe = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    probe.start()
    probe.join()
    assert calls == [] and len(seen) == 20
    assert set(seen) == {threads} and fresh == [threads] and torch.get_num_threads() == threads


# 5. slow and silent connections are dropped; past the connection cap a loopback /healthz still answers

def _connect(server: Server):
    import socket

    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_within(sock, bound: float, trickle: bytes = b"") -> float:
    """Seconds until the server closes `sock` (recv gives b'' or a reset), at most `bound`; with
    `trickle`, one byte of it is sent every 0.1 s meanwhile, as a slow client would."""
    import socket

    started = time.monotonic()
    for byte in trickle or [None] * 10**6:
        left = bound - (time.monotonic() - started)
        assert left > 0, "the server kept the connection open"
        if byte is not None:
            try:
                sock.send(bytes([byte]))
            except OSError:
                return time.monotonic() - started
        sock.settimeout(min(left, 0.1) if trickle else left)
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    raise AssertionError("the server kept the connection open")


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_slow_and_silent_connections_are_dropped_at_their_deadlines(hardening_index):
    running = Server("--index-dir", str(hardening_index["index"]), "-q", "--header-timeout", "0.5", "--body-timeout", "0.5")
    try:
        running.wait_ready()
        silent = _connect(running)
        assert 0.4 < _closed_within(silent, 3) < 3
        slow_headers = _connect(running)  # a byte every 0.1 s: the deadline does not move with them
        assert 0.4 < _closed_within(slow_headers, 3, b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200) < 3
        slow_body = _connect(running)
        slow_body.sendall(b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n")
        assert 0.4 < _closed_within(slow_body, 3, b'{"queries": ["' + b"a" * 400) < 3
        kept_alive = _connect(running)  # a second request on a kept-alive connection has the same deadline
        kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
        assert _closed_within(kept_alive, 3, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: y\r\n" * 40) < 3
        with running.client() as client:  # and the server answers as before
            assert client.post("/query", json={"queries": ["report"]}).status_code == 200
    finally:
        assert running.stop() == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_past_the_connection_cap_a_loopback_healthz_still_answers(hardening_index):
    running = Server("--index-dir", str(hardening_index["index"]), "-q", "--max-connections", "4", "--header-timeout", "60")
    held = []
    try:
        running.wait_ready()
        for _ in range(4):  # unfinished headers hold every slot
            held.append(_connect(running))
            held[-1].sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        with running.client() as client:
            health = client.get("/healthz")
            assert health.status_code == 200 and health.json()["status"] == "ready"
            refused = client.get("/status")
            assert refused.status_code == 503 and "too many connections" in refused.json()["error"]["message"]
        # at most 8 loopback connections wait past the cap: a ninth makes the oldest give way
        waiters = []
        for _ in range(9):
            waiters.append(_connect(running))
            held.append(waiters[-1])
        assert waiters[0].recv(65536).startswith(b"HTTP/1.1 503")  # the oldest, closed with the capacity error
        for sock in (waiters[1], waiters[-1]):  # the others may still ask
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        for sock in held:
            sock.close()
        with running.client() as client:
            wait_for(lambda: client.get("/status").status_code == 200, 30)
    finally:
        for sock in held:
            sock.close()
        assert running.stop() == 0


# 6. DNS rebinding: without a token only loopback Host names; no foreign Origin

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_without_a_token_only_loopback_host_names_are_answered(server_plain):
    port = server_plain.url.rsplit(":", 1)[1]
    with server_plain.client() as client:
        sha = client.get("/documents").json()["documents"][0]["sha256"]
        for path in ("/documents", "/status", f"/pages/{sha}/1.png", "/healthz"):
            refused = client.get(path, headers={"Host": f"rebind.attacker.example:{port}"})
            assert refused.status_code == 403 and "not a loopback name" in refused.json()["error"]["message"], path
        query = client.post("/query", json={"queries": ["q"]}, headers={"Host": "rebind.attacker.example"})
        assert query.status_code == 403
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", f"[::1]:{port}"):
            assert client.get("/status", headers={"Host": host}).status_code == 200, host
        foreign = client.get("/status", headers={"Origin": "http://rebind.attacker.example"})
        assert foreign.status_code == 403 and "Origin" in foreign.json()["error"]["message"]
        assert client.get("/status", headers={"Origin": f"http://localhost:{port}"}).status_code == 200


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_with_a_token_any_host_but_no_foreign_origin(hardening_index):
    guarded = Server("--index-dir", str(hardening_index["index"]), "-q", "--token", "s3cret")
    try:
        guarded.wait_ready()
        with guarded.client("s3cret") as client:
            assert client.get("/status", headers={"Host": "index.internal:8765"}).status_code == 200
            assert client.get("/status", headers={"Origin": "https://elsewhere.example"}).status_code == 403
    finally:
        assert guarded.stop() == 0


@pytest.fixture(scope="module")
def server_plain(hardening_index):
    yield from serving("--index-dir", str(hardening_index["index"]))


# 8. log lines cannot be forged; a token that is not ASCII matches

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_request_paths_cannot_forge_log_lines(server_plain):
    def healthz_lines() -> int:
        return sum(line.startswith("GET /healthz") for line in server_plain.lines)

    before = healthz_lines()  # the server is shared: its start (wait_ready) and other tests logged some already
    with server_plain.client() as client:
        client.get("/nowhere%0aGET /forged 200 1.0 ms%1b[2J")
        client.get("/healthz")  # its line comes after the one above
    wait_for(lambda: healthz_lines() > before)
    assert not any(line.startswith("GET /forged") for line in server_plain.lines)
    assert not any("\x1b" in line for line in server_plain.lines)
    assert any("/nowhere\\nGET /forged 200 1.0 ms\\x1b[2J 404" in line for line in server_plain.lines)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_token_that_is_not_ascii_matches(hardening_index):
    guarded = Server("--index-dir", str(hardening_index["index"]), "-q", "--token", "clé-secrète")
    try:
        guarded.wait_ready()
        with httpx.Client(base_url=guarded.url) as client:
            right = client.get("/status", headers={"Authorization": "Bearer clé-secrète".encode()})
            wrong = client.get("/status", headers={"Authorization": "Bearer cle-secrete".encode()})
        assert right.status_code == 200 and wrong.status_code == 401
        # the command line's client sends it as UTF-8 too (httpx refuses a header str that is not ASCII)
        given = run_cli("query", "report", "-k", "1", "--server", guarded.url, "--token", "clé-secrète", "--json")
        from_env = run_cli("query", "report", "-k", "1", "--server", guarded.url, "--json", env={"LGPT_SERVE_TOKEN": "clé-secrète"})
        assert given.exit_code == 0 and from_env.exit_code == 0, given.stderr + from_env.stderr
        assert json.loads(given.stdout)["queries"][0]["results"] == json.loads(from_env.stdout)["queries"][0]["results"] != []
    finally:
        assert guarded.stop() == 0


# 7. answers name documents relative to the folder they were indexed from; no secret is echoed

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_an_error_about_a_value_is_the_same_whatever_folder_the_value_names(server_plain, hardening_index):
    """Messages leave the server's folders out: a request's value repeated back through that rewriting would say
    which folder a guess named (the real one came back shortened), so a refused filter or query is not repeated."""
    docs = str(hardening_index["docs"])
    shapes = ('{{"queries": ["q"], "filters": ["{}/x"]}}', '{{"queries": ["q"], "filters": ["{}/\\udcff=x"]}}',
              '{{"queries": ["q"], "filters": {{"team": "{}/\\udcff"}}}}', '{{"queries": ["{}/\\udcff"]}}')
    with server_plain.client() as client:
        for shape in shapes:
            said = {client.post("/query", content=shape.format(probe), headers={"content-type": "application/json"}).text
                    for probe in (docs, "/nowhere/at/all")}
            assert len(said) == 1 and '"status": 400' in said.pop(), (shape, said)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_answers_and_errors_carry_no_absolute_path_unless_asked(server_plain, hardening_index, fake_model):
    from conftest import validate

    secret_places = [str(hardening_index["work"]), str(hardening_index["docs"]), str(hardening_index["index"]), str(fake_model)]
    with server_plain.client() as client:
        answers = {"query": client.post("/query", json={"queries": ["report", "scan"], "k": 10}),
                   "status": client.get("/status"), "documents": client.get("/documents"),
                   "failures": client.get("/documents", params={"failed": "true"}),
                   "under": client.get("/documents", params={"prefix": "report-1"}),
                   "error": client.get("/pages/" + "0" * 64 + "/1.png")}
    for name, answer in answers.items():
        assert not any(place in answer.text for place in secret_places), (name, answer.text)
    query = answers["query"].json()
    validate(query, "query")
    validate(answers["status"].json(), "status")
    validate(answers["documents"].json(), "documents")
    assert {h["path"] for q in query["queries"] for h in q["results"]} == {"report-0.pdf", "report-1.pdf", "report-2.pdf", "scan.png"}
    assert query["index"] == "default" and "/" not in query["model"]
    assert [d["path"] for d in answers["under"].json()["documents"]] == ["report-1.pdf"]
    absolute = Server("--index-dir", str(hardening_index["index"]), "-q", "--absolute-paths")
    try:
        absolute.wait_ready()
        with absolute.client() as client:
            hits = client.post("/query", json={"queries": ["report"], "k": 2}).json()["queries"][0]["results"]
        assert all(h["path"].startswith(str(hardening_index["docs"])) for h in hits)
    finally:
        assert absolute.stop() == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_documents_prefix_cannot_probe_the_indexed_folder(server_plain, hardening_index):
    """Issue 39 #3: an absolute prefix is refused the same way whatever it names (a count of matches would
    rebuild the folder a character at a time); a relative one matches the names answers give, never the root."""
    docs = str(hardening_index["docs"])
    probes = ["/", docs[:2], docs, docs + "/", docs + "/report-1", "/nowhere/at/all"]
    with server_plain.client() as client:
        refused = [client.get("/documents", params={"prefix": probe}) for probe in probes]
        failed = client.get("/documents", params={"prefix": docs, "failed": "true"})
        climbing = [client.get("/documents", params={"prefix": prefix}).json()
                    for prefix in ("..", "../", f"../{Path(docs).name}/report-1", "./report-1", "report-9")]
        under = client.get("/documents", params={"prefix": "report-1"}).json()
    assert {answer.status_code for answer in refused + [failed]} == {400}
    assert len({answer.text for answer in refused + [failed]}) == 1  # one answer for every absolute prefix
    assert "prefix: an absolute path" in refused[0].json()["error"]["message"] and docs not in refused[0].text
    assert all(answer["documents"] == [] for answer in climbing), climbing
    assert [d["path"] for d in under["documents"]] == ["report-1.pdf"]


def test_errors_never_echo_a_secret():
    """A Qdrant URL with user:password@ or an api key, in any error message or log line."""
    from localgpt_index.serve.httpguard import PathPolicy, redact
    from localgpt_index.serve.schemas import error_response

    message = "cannot reach Qdrant at qdrant://admin:hunter2@db.internal:6333/docs?api_key=k3y (refused)."
    body = error_response(503, message).body.decode()
    assert "hunter2" not in body and "k3y" not in body and "qdrant://***@db.internal:6333/docs" in body
    assert "hunter2" not in PathPolicy(absolute=True).message(message) and "hunter2" not in redact(message)
    assert PathPolicy.index_name("qdrant://admin:hunter2@db.internal:6333/docs") == "docs"


# 10. nothing loads from the internet: no Swagger UI page from a CDN, the OpenAPI description stays

def test_no_page_loads_assets_from_a_cdn(server_plain):
    with server_plain.client() as client:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            answer = client.get(path)
            assert answer.status_code == 404 and "cdn" not in answer.text.lower(), path
        spec = client.get("/openapi.json")
    assert spec.status_code == 200 and "/query" in spec.json()["paths"]


# 8. /pages honours dpi; a changed source fails its own hit's image, not the whole answer

def _png_size(data: bytes) -> tuple[int, int]:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size


def test_pages_honour_dpi(server_plain):
    with server_plain.client() as client:
        doc = next(d for d in client.get("/documents").json()["documents"] if d["kind"] == "pdf")
        low = client.get(f"/pages/{doc['sha256']}/1.png", params={"dpi": 40})
        high = client.get(f"/pages/{doc['sha256']}/1.png", params={"dpi": 80})
    assert low.status_code == high.status_code == 200
    (w1, h1), (w2, h2) = _png_size(low.content), _png_size(high.content)
    assert abs(w2 - 2 * w1) <= 2 and abs(h2 - 2 * h1) <= 2


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_changed_source_fails_its_own_image_not_the_answer(fake_model, tmp_path):
    import base64

    from conftest import validate

    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "kept.pdf", ["kept"])
    make_pdf(docs / "changed.pdf", ["changed"])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    running = Server("--index-dir", str(index), "-q")
    try:
        running.wait_ready()
        make_pdf(docs / "changed.pdf", ["changed since", "and longer"])
        with running.client() as client:
            answer = client.post("/query", json={"queries": ["kept", "changed"], "k": 5, "with_images": True, "dpi": 40})
            sha = next(d["sha256"] for d in client.get("/documents").json()["documents"] if d["path"] == "changed.pdf")
            assert client.get(f"/pages/{sha}/1.png").status_code == 409
    finally:
        assert running.stop() == 0
    assert answer.status_code == 200, answer.text
    document = answer.json()
    validate(document, "query")
    hits = [h for q in document["queries"] for h in q["results"]]
    by_path = {h["path"]: h for h in hits}
    assert base64.b64decode(by_path["kept.pdf"]["image_base64"])[:4] == b"\x89PNG"
    assert by_path["changed.pdf"]["image_base64"] is None and "changed since it was indexed" in by_path["changed.pdf"]["image_error"]
    assert str(docs) not in answer.text


# 9. with_images is bounded per answer and reuses pages already rendered

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_with_images_is_bounded_and_reuses_rendered_pages(server_plain):
    with server_plain.client() as client:
        first = client.post("/query", json={"queries": ["report", "scan", "page"], "k": 7, "with_images": True, "dpi": 600})
        again = client.post("/query", json={"queries": ["report", "scan", "page"], "k": 7, "with_images": True, "dpi": 600})
    assert first.status_code == again.status_code == 200
    hits = [h for q in first.json()["queries"] for h in q["results"]]
    distinct = {(h["sha256"], h["page"]) for h in hits if h["image_base64"]}
    assert len(distinct) == 2 and int(first.headers["X-Lgpt-Images-Rendered"]) == 2  # 32 pages at 150 dpi = 2 at 600 dpi
    capped = [h for h in hits if h["image_base64"] is None]
    assert capped and all("at most 32 pages at 150 dpi per answer (2 at 600 dpi)" in h["image_error"] for h in capped)
    assert int(again.headers["X-Lgpt-Images-Rendered"]) == 0  # every page came from the cache
    assert again.json() == first.json()


def test_two_pages_are_rendered_at_once(monkeypatch):
    """PageImages lets two renders run at once, whoever asks: a third waits until one is done."""
    import threading
    from types import SimpleNamespace

    from localgpt_index.core import failpoints
    from localgpt_index.interop import pages
    from localgpt_index.serve.images import PageImages

    monkeypatch.setattr(pages, "page_image", lambda index, hit, dpi: hit.page)
    monkeypatch.setattr(pages, "png_bytes", lambda image: b"png %d" % image)
    arrived, inside, most, gate, lock = [], [0], [0], threading.Semaphore(0), threading.Lock()

    def rendering(name: str) -> None:  # each render stops inside its slot until the test lets one go
        if name == "serve.render":
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            gate.acquire()
            with lock:
                inside[0] -= 1

    images = PageImages()
    index = SimpleNamespace(document=lambda path: arrived.append(path))  # no document: nothing cached is served
    failpoints.set_hook(rendering)
    try:
        with ThreadPoolExecutor(3) as pool:
            done = [pool.submit(images.png, index, SimpleNamespace(sha256="0" * 64, page=n, path=f"p{n}"), 150) for n in (1, 2)]
            wait_for(lambda: inside[0] == 2, 30)
            done.append(pool.submit(images.png, index, SimpleNamespace(sha256="0" * 64, page=3, path="p3"), 150))
            wait_for(lambda: len(arrived) == 3, 30)  # the third is at the slots
            gate.release()  # one render ends: the third may start
            wait_for(lambda: inside[0] == 2 and sum(f.done() for f in done) == 1, 30)
            gate.release(2)
            assert sorted(f.result()[0] for f in done) == [b"png 1", b"png 2", b"png 3"]
    finally:
        failpoints.set_hook(None)
        gate.release(3)
    assert most[0] == 2


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_rendering_stops_when_the_client_is_gone(hardening_index, tmp_path):
    """The first page renders while the client hangs up: no other page of that answer is rendered
    (a later identical request renders them itself)."""
    hold = Hold(tmp_path, "serve.render")
    running = Server("--index-dir", str(hardening_index["index"]), env=hold.env)
    body = {"queries": ["report", "scan"], "k": 7, "with_images": True, "dpi": 40}
    try:
        running.wait_ready()
        leaving = _connect(running)
        payload = json.dumps(body).encode()
        leaving.sendall(b"POST /query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
        hold.wait_reached(running)
        leaving.close()
        hold.release()
        wait_for(lambda: any(line.startswith("POST /query") for line in running.lines))  # that request is over
        with running.client() as client:
            again = client.post("/query", json=body)
        assert again.status_code == 200
        assert int(again.headers["X-Lgpt-Images-Rendered"]) == 6  # 7 pages; the one held was the only one rendered before
    finally:
        hold.release()
        assert running.stop() == 0


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_under_a_file_descriptor_limit_a_flood_leaves_healthz_answering(hardening_index):
    """200 silent connections against a server allowed 160 descriptors: its default cap keeps it
    under the limit, so a loopback /healthz is still answered (it used to time out)."""
    import resource

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))

    running = Server("--index-dir", str(hardening_index["index"]), "-q", preexec_fn=low_limit)
    flood = []
    try:
        running.wait_ready()
        flood = [_connect(running) for _ in range(200)]
        with httpx.Client(base_url=running.url, timeout=20) as client:
            health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ready"
    finally:
        for sock in flood:
            sock.close()
        assert running.stop() == 0
    assert not any("Traceback" in line for line in running.lines), running.lines


# 10. stopping the server ends a page render in flight

STUCK_PDFTOPPM = """#!/bin/sh
# stands in for a pdftoppm stuck on a page: it and a child of its own never finish
sleep 300 &
wait
"""


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("route", ["with_images", "pages"])
def test_sigterm_during_a_page_render_leaves_no_pdftoppm_behind(hardening_index, tmp_path, process_mark, route):
    """The render runs in the command's ProcessScope (not a bare executor thread): SIGTERM ends its
    pdftoppm at once, the request in flight is answered ("not rendered"), and serve exits 0."""
    from helpers import marked_processes, wait_until

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pdftoppm").write_text(STUCK_PDFTOPPM)
    (bin_dir / "pdftoppm").chmod(0o755)
    running = Server("--index-dir", str(hardening_index["index"]), env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    try:
        running.wait_ready()
        with ThreadPoolExecutor(1) as pool, running.client() as client:
            if route == "pages":
                doc = client.get("/documents").json()["documents"][0]
                answer = pool.submit(client.get, f"/pages/{doc['sha256']}/1.png", params={"dpi": 40})
            else:
                answer = pool.submit(client.post, "/query", json={"queries": ["report"], "k": 1, "with_images": True, "dpi": 40})
            wait_until(lambda: marked_processes(process_mark, "pdftoppm"), 60, "the render", proc=running.proc)
            running.proc.send_signal(signal.SIGTERM)
            assert running.proc.wait(timeout=45) == 0  # the render timeout (60 s) did not end it
            response = answer.result()
        assert not marked_processes(process_mark, "pdftoppm") and not marked_processes(process_mark, "sleep 300")
        if route == "pages":
            assert response.status_code == 503 and response.json()["error"]["message"] == "not rendered: the server is stopping"
        else:
            assert response.status_code == 200
            [[hit]] = [q["results"] for q in response.json()["queries"]]
            assert hit["image_base64"] is None and hit["image_error"] == "not rendered: the server is stopping"
        assert not any("Traceback" in line for line in running.lines), running.lines
    finally:
        running.stop()
