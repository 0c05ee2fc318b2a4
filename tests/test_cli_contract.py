"""The CLI's contract with scripts and people (issue 24): one JSON error document under --json for
every command, one message instead of a traceback for bad input (arguments that are not UTF-8, a
server that does not answer with a query document), no option silently ignored, hints where output
is empty, headers on tables. Fast tier: the fake model, real processes where stdout and stderr matter."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import load_schema, run_cli, run_process, torchless, validate
from docgen import make_pdf

pytestmark = torchless  # its processes serve the fake model


@pytest.fixture(scope="module")
def built(fake_model, tmp_path_factory) -> dict:
    """A small index (fake model), with metadata, and its folder of documents."""
    work = tmp_path_factory.mktemp("contract")
    docs = work / "docs"
    make_pdf(docs / "alpha.pdf", ["alpha one", "alpha two"])
    make_pdf(docs / "beta.pdf", ["beta"])
    rules = work / "meta.json"
    rules.write_text(json.dumps({"alpha.pdf": {"team": "finance"}}))
    index = work / "idx"
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--metadata", str(rules))
    assert result.exit_code == 0, result.output
    answer = run_cli("query", "alpha", "-k", "2", "--json", "--index-dir", str(index))
    return {"work": work, "docs": docs, "index": index, "answer": json.loads(answer.stdout)}


# --- 1. one error document under --json, for every command ----------------------------------------

def _bad_metadata(tmp: Path, built: dict) -> list[str]:
    (tmp / "bad.json").write_text("{not json")
    return ["build", str(built["docs"]), "--index-dir", str(tmp / "idx"), "--metadata", str(tmp / "bad.json")]


# Each command, failing before it has a document of its own; (arguments, exit code, kind).
ERROR_CASES = {
    "build": (_bad_metadata, 2, "usage"),
    "query": (lambda tmp, built: ["query", "q", "--index-dir", str(tmp / "none")], 1, "index"),
    "status": (lambda tmp, built: ["status", "--index-dir", str(tmp / "none")], 1, "index"),
    "ls": (lambda tmp, built: ["ls", "--index-dir", str(tmp / "none")], 1, "index"),
    "warm": (lambda tmp, built: ["warm", "--index-dir", str(tmp / "none")], 1, "index"),
    "remove": (lambda tmp, built: ["remove", "x.pdf", "--index-dir", str(tmp / "none")], 1, "index"),
    "upgrade": (lambda tmp, built: ["upgrade", "--index-dir", str(tmp / "none")], 1, "index"),
    "verify": (lambda tmp, built: ["verify", "--store", "nonsense://x"], 2, "usage"),  # its findings are a report
    "doctor": (lambda tmp, built: ["doctor", "--dtype", "float8"], 2, "usage"),
    "export": (lambda tmp, built: ["export", "--format", "qdrant", "http://x/y", "--index-dir", str(built["index"])], 2, "usage"),
    "import": (lambda tmp, built: ["import", str(tmp / "no-such-folder"), "--index-dir", str(tmp / "idx")], 2, "usage"),
    "serve": (lambda tmp, built: ["serve", "--host", "0.0.0.0", "--index-dir", str(built["index"])], 2, "usage"),
    "mcp": (lambda tmp, built: ["mcp", "--http", "--host", "0.0.0.0", "--index-dir", str(built["index"])], 2, "usage"),
    "eval": (lambda tmp, built: ["eval", str(tmp / "no-such-queries.jsonl"), "--index-dir", str(built["index"])], 2, "usage"),
    "watch": (lambda tmp, built: ["watch", *_bad_metadata(tmp, built)[1:]], 2, "usage"),
    "config": (lambda tmp, built: ["config", "no-such-command"], 2, "usage"),
}


def _one_error_document(result: subprocess.CompletedProcess, exit_code: int) -> dict:
    """stdout holds exactly one JSON document, an error document with this exit code; no traceback."""
    assert result.returncode == exit_code, result
    assert "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)  # one document: anything after it would not parse
    validate(document, "error")
    assert document["error"]["exit_code"] == exit_code and document["error"]["message"]
    return document


def _commands() -> list[str]:
    from localgpt_index.cli import main

    return sorted(main.commands)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("command", _commands())
def test_every_command_under_json_fails_with_one_error_document(command, built, tmp_path):
    """A new command without a case here fails this test (KeyError): each must honour the contract."""
    make_args, exit_code, kind = ERROR_CASES[command]
    result = run_process(*make_args(tmp_path, built), "--json", timeout=120)
    assert _one_error_document(result, exit_code)["error"]["kind"] == kind
    assert "error: " in result.stderr.lower()  # people still read the message on stderr


@pytest.mark.parametrize("args", [
    ["status", "--json", "--bogus"],  # an option that does not exist, after --json
    ["ls", "--bogus", "--json"],  # ... and before it: parsing stops before --json is read
    ["query", "-k", "0", "--json", "q"],  # a value out of range, before --json
    ["remove", "--json"],  # a missing argument
], ids=["unknown_after", "unknown_before", "out_of_range", "missing_argument"])
def test_usage_errors_under_json_are_error_documents_too(args):
    document = _one_error_document(run_process(*args, timeout=60), 2)
    assert document["error"]["kind"] == "usage"


def test_without_json_stdout_stays_empty_on_failure(tmp_path):
    result = run_process("status", "--index-dir", str(tmp_path / "none"), timeout=60)
    assert result.returncode == 1 and result.stdout == "" and "no index" in result.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_failure_documents_of_their_own_carry_the_same_error_object(built, fake_model, tmp_path):
    """build's partial report keeps validating under build.schema.json and carries the error object;
    so does remove's report when nothing was removed."""
    import jsonschema

    error_object = {**load_schema("error")["$defs"]["error"]}
    docs = tmp_path / "docs"
    make_pdf(docs / "fine.pdf", ["fine"])
    (docs / "garbage.pdf").write_bytes(b"not a PDF at all " * 64)
    build = run_process("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--json", timeout=120)
    assert build.returncode == 3, build
    report = json.loads(build.stdout)
    validate(report, "build")
    jsonschema.validate(report["error"], error_object)
    assert report["error"]["exit_code"] == report["exit_code"] == 3 and report["error"]["kind"] == "partial"

    remove = run_process("remove", str(tmp_path / "never-indexed.pdf"), "--index-dir", str(tmp_path / "idx"), "--json", timeout=60)
    assert remove.returncode == 1
    removed = json.loads(remove.stdout)
    jsonschema.validate(removed["error"], error_object)
    assert removed["not_found"] and removed["error"]["kind"] == "not_found"

    verify = run_process("verify", "--index-dir", str(tmp_path / "none"), "--json", timeout=60)
    assert verify.returncode == 1
    findings = json.loads(verify.stdout)
    jsonschema.validate(findings["error"], error_object)
    assert not findings["ok"] and findings["error"]["message"] == findings["problems"][0]


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_doctors_failing_report_carries_the_error_object(fake_model, tmp_path):
    """doctor exiting 4 prints its own report (doctor.schema.json) with the same error object."""
    import jsonschema

    result = run_process("doctor", "--json", "--model", str(tmp_path / "no-such-model"), timeout=120)
    assert result.returncode == 4, result
    report = json.loads(result.stdout)
    validate(report, "doctor")
    jsonschema.validate(report["error"], {**load_schema("error")["$defs"]["error"]})
    assert not report["ok"] and report["error"]["exit_code"] == 4 and report["error"]["kind"] == "environment"
    assert all(m in report["error"]["message"] for m in report["missing"])

def test_a_model_folder_that_is_not_there_is_a_missing_environment_piece(built, tmp_path):
    """The README's exit codes: a missing model is 4, whether a hub id not in the cache or a folder not on disk."""
    missing = str(tmp_path / "no-such-model")
    result = run_cli("build", str(built["docs"]), "--model", missing, "--index-dir", str(tmp_path / "idx"), "--json")
    error = json.loads(result.stdout)["error"]
    assert result.exit_code == 4 and error["kind"] == "environment" and "no such folder" in error["message"], result.stdout


def test_a_successful_build_document_has_no_error_object(built, fake_model, tmp_path):
    result = run_cli("build", str(built["docs"]), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and "error" not in report
    validate(report, "build")


# --- 2. one message, not a traceback --------------------------------------------------------------

class FakeServer:
    """A tiny HTTP server on 127.0.0.1 that answers POST /query with whatever the test sets, and
    GET /pages/... with a PNG (or, in turn, the bodies in `pages`, the last one repeated)."""

    def __init__(self) -> None:
        self.body: bytes = b"{}"
        self.content_type = "application/json"
        self.hits = 0
        self.pages = [b"\x89PNG\r\n\x1a\n" + b"\0" * 16]
        self.page_hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.hits += 1
                self._send(outer.body, outer.content_type)

            def do_GET(self) -> None:  # noqa: N802
                outer.page_hits += 1
                self._send(outer.pages[min(outer.page_hits, len(outer.pages)) - 1], "image/png")

            def _send(self, body: bytes, content_type: str) -> None:
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        # (shutdown waits for the loop's next poll: half a second at http.server's default, in every test)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def answer(self, document, content_type: str = "application/json") -> None:
        self.body = document if isinstance(document, bytes) else json.dumps(document).encode()
        self.content_type = content_type

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def fake_server():
    server = FakeServer()
    yield server
    server.close()


def _with_hit(answer: dict, **changes) -> dict:
    document = json.loads(json.dumps(answer))
    document["queries"][0]["results"][0].update(changes)
    return document


BAD_ANSWERS = {
    "html": lambda good: (b"<html><body>502 Bad Gateway</body></html>", "text/html"),
    "json_list": lambda good: ([good], "application/json"),
    "missing_keys": lambda good: ({"version": 1, "index": "x"}, "application/json"),
    "string_rank": lambda good: (_with_hit(good, rank="1"), "application/json"),
    "page_path": lambda good: (_with_hit(good, page="../../../escaped"), "application/json"),
    "page_zero": lambda good: (_with_hit(good, page=0), "application/json"),
    "sha256_path": lambda good: (_with_hit(good, sha256="../" * 20 + "x"), "application/json"),
    "two_answers_for_one_query": lambda good: ({**good, "queries": good["queries"] * 2}, "application/json"),
}


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_a_server_answer_that_is_not_a_query_document_is_one_message(case, built, fake_server, tmp_path):
    """Checked before it is printed or names files (--export-pages): exit 1, the server named, no traceback."""
    fake_server.answer(*BAD_ANSWERS[case](built["answer"]))
    pages = tmp_path / "out" / "pages"
    result = run_process("query", "alpha", "-k", "2", "--server", fake_server.url, "--export-pages", str(pages), timeout=60)
    assert fake_server.hits == 1
    assert result.returncode == 1, result
    assert f"the server at {fake_server.url} did not answer with a query document" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "out").exists(), "nothing written from a bad answer"
    as_json = run_process("query", "alpha", "--server", fake_server.url, "--json", timeout=60)
    assert _one_error_document(as_json, 1)["error"]["message"].startswith(f"the server at {fake_server.url}")


def test_a_page_that_is_not_a_png_is_one_message_and_nothing_is_written(built, fake_server, tmp_path):
    """The first page a PNG, the second an HTML page: exit 1 naming the server, no export folder left."""
    fake_server.answer(built["answer"])
    fake_server.pages = [fake_server.pages[0], b"<html><body>502 Bad Gateway</body></html>"]
    result = run_cli("query", "alpha", "-k", "2", "--server", fake_server.url, "--export-pages", str(tmp_path / "out" / "pages"))
    assert fake_server.page_hits == 2
    assert result.exit_code == 1, result.output
    assert f"the server at {fake_server.url} sent something other than a PNG for page" in result.stderr
    assert result.stdout == "" and not (tmp_path / "out").exists(), "nothing written from a bad answer"


WIDE = {"COLUMNS": "300"}  # a table wide enough for whole paths (under xdist the terminal is 80 columns)


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_good_server_answer_is_printed_and_exported(built, fake_server, tmp_path):
    """The check accepts what a real server sends (the local query's own document)."""
    fake_server.answer(built["answer"])
    result = run_process("query", "alpha", "-k", "2", "--server", fake_server.url, "--export-pages", str(tmp_path / "p"),
                         env=WIDE, timeout=60)
    assert result.returncode == 0, result
    assert "alpha.pdf" in result.stdout
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert all((tmp_path / "p" / r["image"]).is_file() for r in manifest["queries"][0]["results"])


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_server_answer_with_a_page_it_could_not_render_is_accepted(built, fake_server):
    """A hit whose image the server could not render carries "image_base64": null and an image_error
    (the server's own answer, POST /query with_images): the client's check accepts it, and the CLI
    prints it as the server sent it."""
    answer = _with_hit(built["answer"], image_base64=None, image_error="not rendered: at most 32 pages at 150 dpi per answer")
    for hit in answer["queries"][0]["results"][1:]:
        hit["image_base64"] = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode("ascii")
    fake_server.answer(answer)
    result = run_process("query", "alpha", "-k", "2", "--with-images", "--json", "--server", fake_server.url, timeout=60)
    assert result.returncode == 0, result
    assert json.loads(result.stdout) == answer
    validate(answer, "query")


def test_a_local_query_with_images_answers_when_one_source_changed_since_the_build(fake_model, tmp_path):
    """query --with-images answers as serve and mcp do: the hits of a document whose source changed
    since it was indexed carry "image_base64": null and an image_error, the others keep their images,
    and the query exits 0 (it failed whole, exit 1, before)."""
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "kept.pdf", ["alpha kept"])
    make_pdf(docs / "changed.pdf", ["alpha changed"])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    make_pdf(docs / "changed.pdf", ["other bytes now", "and another page"])
    result = run_cli("query", "alpha", "-k", "5", "--json", "--with-images", "--index-dir", str(index))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document, "query")
    hits = {Path(hit["path"]).name: hit for hit in document["queries"][0]["results"]}
    assert set(hits) == {"kept.pdf", "changed.pdf"}
    assert hits["changed.pdf"]["image_base64"] is None
    assert hits["changed.pdf"]["image_error"].startswith("the page cannot be rendered: its source changed")
    assert hits["changed.pdf"]["image_error"].endswith("changed.pdf changed since it was indexed.")
    assert base64.b64decode(hits["kept.pdf"]["image_base64"]).startswith(b"\x89PNG") and "image_error" not in hits["kept.pdf"]


def test_the_published_query_schema_is_generated_from_the_one_definition():
    """query.schema.json is interop.results.QueryDocument's schema (the CLI builds the document with
    it, the server's OpenAPI and the client's check use it); its kinds are discover's."""
    from typing import get_args

    from localgpt_index.ingest.discover import KIND_BY_SUFFIX
    from localgpt_index.interop.results import Hit, query_json_schema

    assert load_schema("query") == query_json_schema(), "regenerate: python -m localgpt_index.interop.results"
    assert set(get_args(Hit.model_fields["kind"].annotation)) == set(KIND_BY_SUFFIX.values())


def _raw_cli(*args: str | bytes, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI with argv bytes as given (on Linux, bytes that are not UTF-8 reach Python as surrogate escapes)."""
    return subprocess.run([sys.executable, "-m", "localgpt_index", *args], capture_output=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("where", ["local", "server"])
@pytest.mark.parametrize("argument", [[b"caf\xe9 menu"], [b"menu", b"--filter", b"team=caf\xe9"]], ids=["query", "filter"])
def test_an_argument_that_is_not_utf8_is_a_usage_error(where, argument, built, fake_server):
    fake_server.answer(built["answer"])
    target = ["--index-dir", str(built["index"])] if where == "local" else ["--server", fake_server.url]
    result = _raw_cli("query", *argument, *target)
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2, stderr
    assert "is not UTF-8 text" in stderr and "\\xe9" in stderr
    assert "Traceback" not in stderr and result.stdout == b""
    assert fake_server.hits == 0


# --- 3. --server with the options of a local index ------------------------------------------------

@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("option", [["--name", "other"], ["--index-dir", "elsewhere"], ["--store", "local"], ["--model", "other"],
                                    ["--device", "cpu"], ["--dtype", "float32"]],
                         ids=["name", "index_dir", "store", "model", "device", "dtype"])
@pytest.mark.parametrize("server_from", ["option", "environment"])
def test_server_with_a_local_index_option_is_a_usage_error(option, server_from, built, fake_server):
    fake_server.answer(built["answer"])
    server = ["--server", fake_server.url] if server_from == "option" else []
    env = {"LGPT_SERVER": fake_server.url} if server_from == "environment" else None
    result = run_cli("query", "alpha", *server, *option, env=env)
    assert result.exit_code == 2, result.output
    assert option[0] in result.stderr and ("--server" if server else "$LGPT_SERVER") in result.stderr
    assert fake_server.hits == 0 and result.stdout == ""


def test_server_with_index_settings_in_the_environment_still_asks_the_server(built, fake_server):
    """LGPT_INDEX_DIR set for `serve` in the same shell is not a mistake: the server answers."""
    fake_server.answer(built["answer"])
    result = run_cli("query", "alpha", "--server", fake_server.url, env={"LGPT_INDEX_DIR": "elsewhere", "LGPT_INDEX_NAME": "x", **WIDE})
    assert result.exit_code == 0 and fake_server.hits == 1 and "alpha.pdf" in result.stdout


@pytest.mark.parametrize("option", [["--name", "other"], ["--store", "local"]], ids=["name", "store"])
def test_server_with_a_local_index_option_before_the_command_is_a_usage_error_too(option, built, fake_server):
    fake_server.answer(built["answer"])
    result = run_cli(*option, "query", "alpha", "--server", fake_server.url)
    assert result.exit_code == 2 and f"{option[0]} cannot be used with --server" in result.stderr and fake_server.hits == 0


def test_server_with_index_settings_in_the_config_file_still_asks_the_server(built, fake_server, tmp_path):
    fake_server.answer(built["answer"])
    (tmp_path / "lgpt-index.toml").write_text('name = "x"\nindex-dir = "elsewhere"\n')
    result = run_cli("query", "alpha", "--server", fake_server.url, env=WIDE)
    assert result.exit_code == 0 and fake_server.hits == 1 and "alpha.pdf" in result.stdout


# --- 4. a filter that matches nothing -------------------------------------------------------------

def test_a_filter_that_matches_nothing_says_so(built):
    index = ["--index-dir", str(built["index"])]
    table = run_cli("query", "alpha", "--filter", "team=nobody", *index)
    assert table.exit_code == 0
    assert "no document matches --filter team=nobody" in table.stderr and "lgpt-index ls" in table.stderr
    as_json = run_cli("query", "alpha", "--filter", "team=nobody", "--json", *index)
    assert as_json.exit_code == 0 and "no document matches" in as_json.stderr
    document = json.loads(as_json.stdout)
    validate(document, "query")
    assert document["queries"][0]["results"] == []
    matching = run_cli("query", "alpha", "--filter", "team=finance", *index, env=WIDE)
    assert matching.exit_code == 0 and "no document matches" not in matching.stderr and "alpha.pdf" in matching.stdout


# --- 5. ls has a header ---------------------------------------------------------------------------

def test_ls_has_a_header_and_its_json_does_not(built):
    """The table (a terminal's default) has a header; lines (a pipe's) are one document a line, without."""
    index = ["--index-dir", str(built["index"])]
    lines = run_cli("ls", "--format", "table", *index).stdout.splitlines()
    assert lines[0].split() == ["pages", "kind", "text", "path"]
    assert len(lines) == 3 and "alpha.pdf  team=finance" in lines[1] and lines[2].endswith("beta.pdf")
    piped = run_cli("ls", *index).stdout.splitlines()
    assert [line.split("\t")[0].rsplit("/", 1)[-1] for line in piped] == ["alpha.pdf", "beta.pdf"]
    document = json.loads(run_cli("ls", "--json", *index).stdout)
    validate(document, "documents")


def _into_a_closed_pipe(*args: str, stream: str = "stdout") -> subprocess.CompletedProcess:
    """The CLI writing into a pipe whose reader is gone before it writes (what `| head -1` leaves once head
    has its line): deterministic, where a real `head` races the writer. `stream`: which of its outputs; the other
    is read."""
    import os

    read, write = os.pipe()
    os.close(read)
    outputs = {"stdout": write, "stderr": subprocess.PIPE} if stream == "stdout" else {"stdout": subprocess.PIPE, "stderr": write}
    try:
        process = subprocess.Popen([sys.executable, "-m", "localgpt_index", *args], text=True, **outputs)
    finally:
        os.close(write)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(args, process.returncode, out or "", err or "")


@pytest.mark.slow  # processes of its own (a pipe's reader gone): over a second, the real-component tier
@pytest.mark.parametrize("command", [("status",), ("ls",), ("query", "--mode", "text", "invoice"), ("doctor",), ("--help",),
                                     ("status", "--json")])
def test_a_closed_pipe_ends_every_command_quietly(command, fake_model, tmp_path):
    make_pdf(tmp_path / "docs" / "invoice.pdf", ["invoice total due"])
    index = ("--index-dir", str(tmp_path / "idx"))
    assert run_cli("build", str(tmp_path / "docs"), "--model", str(fake_model), *index).exit_code == 0
    where = index if command[0] not in ("doctor", "--help") else ()
    result = _into_a_closed_pipe(*command, *where)
    assert result.returncode == 141, result.stderr  # 128 + SIGPIPE, what a shell reports for `yes | head -1`
    assert result.stderr == "", result.stderr  # no "internal error", no traceback, no "Exception ignored"


@pytest.mark.slow  # processes of its own (a pipe's reader gone): over a second, the real-component tier
def test_a_closed_pipe_on_stderr_is_the_same_quiet_141(fake_model, tmp_path):
    """`verify 2>&1 >/dev/null | true`: a message's reader gone ends the command as a C tool's SIGPIPE would (141,
    not 1, which is verify's damage; a usage error's too), nothing moved onto stdout; a command that writes no
    message keeps its own status."""
    make_pdf(tmp_path / "docs" / "invoice.pdf", ["invoice total due"])
    index = ("--index-dir", str(tmp_path / "idx"))
    assert run_cli("build", str(tmp_path / "docs"), "--model", str(fake_model), *index).exit_code == 0
    for command in (("verify", *index), ("ls", "--bogus", *index)):
        result = _into_a_closed_pipe(*command, stream="stderr")
        assert result.returncode == 141 and result.stdout == "", (command, result.returncode, result.stdout)
    status = _into_a_closed_pipe("status", *index, stream="stderr")
    assert status.returncode == 0 and "documents   1" in status.stdout
