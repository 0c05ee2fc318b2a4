"""`serve`'s connection protocol (serve/httpconn.py, on uvicorn's httptools parser) where a parser
that reads in callbacks differs from one that reads whole events: a request cut into one-byte
packets, pipelined requests (their deadlines wait while the one before is answered), a body that
stops mid-way, the loopback /healthz past the cap sent a byte at a time, the 16 KiB bound on a
request's line and headers that h11 had and httptools has not (in pieces or in one packet), what the
parser refuses answered with the error document, and an install without httptools.
A real server on a real port, spoken to with raw sockets; the deadlines of test_serve_hardening.py
hold here too."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from conftest import run_process, torchless
from helpers import report_index as build_report_index
from served import Server
from test_serve_hardening import Hold, _closed_within, _connect, wait_for

pytestmark = torchless  # its processes serve the fake model

HOST = b"Host: 127.0.0.1\r\n"


@pytest.fixture(scope="module")
def conn_index(fake_model, tmp_path_factory):
    return build_report_index(tmp_path_factory.mktemp("httpconn"), fake_model, reports=2, pages=2)


@pytest.fixture(scope="module")
def plain_server(conn_index):
    """A server of default limits but a 2 s body deadline (a one-byte-a-packet body fits in it)."""
    running = Server("--index-dir", str(conn_index["index"]), "-q", "--body-timeout", "2")
    try:
        running.wait_ready()
        yield running
    finally:
        assert running.stop() == 0
    assert not any("Traceback" in line for line in running.lines), running.lines


def _query(text: str, k: int = 3) -> bytes:
    body = json.dumps({"queries": [text], "k": k}).encode()
    return (b"POST /query HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _read_answers(sock: socket.socket, count: int, timeout: float = 60, headers: dict | None = None) -> list[tuple[int, dict]]:
    """`count` answers read off `sock` in order (status, JSON body); each carries its content-length.
    `headers`, if given, gets the last answer's headers (names in lower case)."""
    sock.settimeout(timeout)
    buffer, answers = b"", []
    while len(answers) < count:
        head, found, rest = buffer.partition(b"\r\n\r\n")
        if found:
            lines = head.split(b"\r\n")
            fields = {name.lower(): value for name, value in (line.split(b": ", 1) for line in lines[1:])}
            length = int(fields[b"content-length"])
            if headers is not None:
                headers.clear()
                headers.update(fields)
            if len(rest) >= length:
                answers.append((int(lines[0].split(b" ")[1]), json.loads(rest[:length])))
                buffer = rest[length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection after {len(answers)} of {count} answers"
        buffer += chunk
    assert buffer == b"", buffer
    return answers


def _read_to_end(sock: socket.socket) -> bytes:
    """Everything `sock` receives until the server closes it."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def _ranking(answer: dict) -> list:
    return [(r["path"], r["page"]) for r in answer["queries"][0]["results"]]


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        sock.setblocking(True)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_request_cut_into_one_byte_packets_is_answered_as_a_whole(plain_server):
    with plain_server.client() as client:
        expected = client.post("/query", json={"queries": ["report 1 page 0"], "k": 3}).json()
    sock = _connect(plain_server)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    long_target = b"GET /status?pad=" + b"a" * 1_500 + b" HTTP/1.1\r\n" + HOST + b"\r\n"  # its target: 1,500 parser callbacks
    for request in (_query("report 1 page 0"), b"GET /status HTTP/1.1\r\n" + HOST + b"\r\n", long_target):  # kept alive
        for byte in request:
            sock.send(bytes([byte]))
            time.sleep(0.001)  # pacing, not a wait: so that the server reads the bytes one by one
        [(status, answer)] = _read_answers(sock, 1)
        assert status == 200, answer
        if "queries" in answer:
            assert _ranking(answer) == _ranking(expected)
    sock.close()


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_pipelined_requests_are_answered_in_order_and_wait_their_turn_without_a_deadline(conn_index, tmp_path):
    """Two connections, each a query held in the model with a request pipelined behind it: one half
    through its body, the other half through its headers. Neither is timed while the query before it is
    answered, however long that takes; once that answer is sent, the unfinished body's deadline runs."""
    hold = Hold(tmp_path, "serve.batch")
    running = Server("--index-dir", str(conn_index["index"]), "-q", "--header-timeout", "1", "--body-timeout", "1", env=hold.env)
    try:
        running.wait_ready()
        queued_body = _query("report 1 page 0", k=2)
        body_behind = _connect(running)
        body_behind.sendall(_query("report 0 page 1") + queued_body[:-8])
        hold.wait_reached(running)
        headers_behind = _connect(running)
        headers_behind.sendall(_query("report 1 page 1") + b"GET /status HTTP/1.1\r\n" + HOST)
        with running.client() as probe:  # its query waits behind the held one: the packet after it was read too
            wait_for(lambda: probe.get("/healthz").json().get("queued", 0) >= 1, 60, lambda: probe.get("/healthz").text)
        stalled = _connect(running)  # started after both pipelined requests: its deadline passes first
        stalled.sendall(b"POST /query HTTP/1.1\r\n" + HOST + b"Content-Length: 40\r\n\r\n{")
        _closed_within(stalled, 30)
        assert _still_open(body_behind) and _still_open(headers_behind)
        headers_behind.sendall(b"\r\n")
        hold.release()
        answers = _read_answers(headers_behind, 2)
        assert [status for status, _ in answers] == [200, 200], answers
        assert answers[0][1]["queries"][0]["query"] == "report 1 page 1" and answers[1][1]["pages"] == 5
        [(status, answer)] = _read_answers(body_behind, 1)
        assert status == 200 and answer["queries"][0]["query"] == "report 0 page 1"
        _closed_within(body_behind, 30)  # the body never came: its deadline ran once the answer before it was sent
    finally:
        hold.release()
        assert running.stop() == 0
    assert not any("Traceback" in line for line in running.lines), running.lines


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_body_that_stops_mid_way_is_dropped_and_the_server_answers_on(plain_server):
    request = _query("report 0 page 0")
    stopped = _connect(plain_server)
    stopped.sendall(request[: len(request) - 10])
    stopped.settimeout(30)  # a bound for a failure, not a wait: the deadline is 2 s
    assert _read_to_end(stopped) == b""  # closed at the body deadline, without an answer
    fresh = _connect(plain_server)
    fresh.sendall(request)
    [(status, answer)] = _read_answers(fresh, 1)
    assert status == 200 and _ranking(answer)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_past_the_cap_a_healthz_sent_a_byte_at_a_time_is_answered_and_anything_else_refused(conn_index):
    running = Server("--index-dir", str(conn_index["index"]), "-q", "--max-connections", "1", "--header-timeout", "60")
    held = None
    try:
        running.wait_ready()
        held = _connect(running)
        held.sendall(b"GET /status HTTP/1.1\r\n")  # unfinished headers hold the one slot
        answers = {}
        for path, sent in ((b"/healthz?probe=1", b"\r\n" + HOST + b"\r\n"), (b"/status", b"\n")):  # /status: refused at its line's end
            sock = _connect(running)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for byte in b"GET " + path + b" HTTP/1.1" + sent:
                sock.send(bytes([byte]))
                time.sleep(0.001)
            headers: dict = {}
            [answers[path]] = _read_answers(sock, 1, headers=headers)
            assert headers[b"connection"] == b"close", headers  # past the cap: one answer, then the connection closes
            _closed_within(sock, 30)
        assert answers[b"/healthz?probe=1"][0] == 200 and answers[b"/healthz?probe=1"][1]["status"] == "ready", answers
        assert answers[b"/status"][0] == 503 and "too many connections" in answers[b"/status"][1]["error"]["message"]
        held.close()
        with running.client() as client:
            wait_for(lambda: client.get("/status").status_code == 200, 30)
    finally:
        if held is not None:
            held.close()
        assert running.stop() == 0


def test_request_headers_past_16_kib_are_refused_with_431_and_the_connection_closed(plain_server):
    """httptools bounds nothing (h11 bounded a request's line and headers at 16 KiB): without a bound
    a client could fill the server's memory within its header deadline."""
    for target, headers in ((b"/status", b"X-Big: " + b"a" * 20_000 + b"\r\n"), (b"/status?" + b"q=1&" * 5_000, b""),
                            (b"/status", b"X-Many: b\r\n" * 2_000)):
        sock = _connect(plain_server)
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\n" + HOST + headers)  # not even finished: refused as it grows
        answer = _read_to_end(sock)
        status, _, rest = answer.partition(b"\r\n")
        assert status == b"HTTP/1.1 431 Request Header Fields Too Large", answer[:300]
        assert json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["message"].startswith("request line and headers over 16 KiB")
    big = b"GET /status HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    for whole in (big, b"GET /healthz HTTP/1.1\r\n" + HOST + b"\r\n" + big):  # whole, in one packet; behind a small one
        sock = _connect(plain_server)
        sock.sendall(whole)
        answer = _read_to_end(sock)
        assert answer.count(b"HTTP/1.1 431 Request Header Fields Too Large") == 1 and b'"error"' in answer, answer[:300]
    sock = _connect(plain_server)  # under the bound: answered
    sock.sendall(b"GET /status HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 12_000 + b"\r\n\r\n")
    [(status, answer)] = _read_answers(sock, 1)
    assert status == 200 and answer["pages"] == 5
    body = b'{"queries": ["report"], "k": 3' + b" " * 40_000 + b"}"  # a body past 16 KiB in the same packet: not headers
    sock = _connect(plain_server)
    sock.sendall(b"POST /query HTTP/1.1\r\n" + HOST + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    [(status, answer)] = _read_answers(sock, 1)
    assert status == 200 and len(answer["queries"][0]["results"]) == 3


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n", b"POST /query HTTP/1.1\r\n" + HOST + b"Content-Length: -1\r\n\r\n",
    b"POST /query HTTP/1.1\r\n" + HOST + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}"],
    ids=["request line", "content-length", "length and chunked"])
def test_what_the_parser_refuses_is_a_400_error_document(plain_server, request_bytes):
    sock = _connect(plain_server)
    sock.sendall(request_bytes)
    status, _, rest = _read_to_end(sock).partition(b"\r\n")
    head, _, body = rest.partition(b"\r\n\r\n")
    assert status == b"HTTP/1.1 400 Bad Request" and b"content-type: application/json" in head.lower()
    assert "not an HTTP/1.1 request" in json.loads(body)["error"]["message"]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_without_httptools_serve_says_what_to_install(conn_index, tmp_path):
    hiding = tmp_path / "hiding"
    hiding.mkdir()
    (hiding / "httptools.py").write_text("raise ImportError('No module named httptools (hidden by the test)')\n")
    done = run_process("serve", "--index-dir", str(conn_index["index"]), "--port", "0", timeout=120,
                       env={"PYTHONPATH": os.pathsep.join([str(hiding), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 4, done.stderr
    assert "HTTP parser" in done.stderr and "pip install 'httptools" in done.stderr and "Traceback" not in done.stderr


def test_without_a_token_an_http_1_0_request_without_host_is_answered_and_a_foreign_host_refused(plain_server):
    """docs/serving.md: no browser sends a request without Host, so only a foreign Host is a page's (DNS rebinding)."""
    answers = {}
    for name, head in (("none", b""), ("foreign", b"Host: rebound.example\r\n"), ("loopback", HOST)):
        sock = _connect(plain_server)
        sock.sendall(b"GET /status HTTP/1.0\r\n" + head + b"\r\n")
        answers[name] = _read_to_end(sock).partition(b"\r\n")[0]
    assert answers == {"none": b"HTTP/1.1 200 OK", "foreign": b"HTTP/1.1 403 Forbidden", "loopback": b"HTTP/1.1 200 OK"}
