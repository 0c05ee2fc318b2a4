"""The warm command line: `query` finds a warm service of its index by itself (serve/warm.py), and its
answers are byte for byte a local query's; `lgpt-index warm` and `query --keep-warm` start one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, run_process, torchless
from docgen import make_pdf
from helpers import report_index as build_report_index
from helpers import pid_alive, wait_until
from localgpt_index.serve import warm
from served import Server

pytestmark = torchless  # its processes serve the fake model

WARM = "answered by the warm service"


class WarmService:
    """`lgpt-index warm --foreground` on an index, in a process of its own."""

    def __init__(self, index_dir: Path, *args: str) -> None:
        self.root = index_dir / "default"
        self.proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "warm", "--foreground", "--index-dir",
                                      str(index_dir), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def wait_ready(self) -> dict:
        def ready():
            answer = warm.call(self.root, "GET", warm.STATUS_PATH)
            return answer[1] if answer is not None and answer[0] == 200 and answer[1]["ready"] else None

        return wait_until(ready, timeout=120, what="the warm service's model loaded", proc=self.proc)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.proc.stderr.close()
        return code


@pytest.fixture(scope="module")
def report_index(fake_model, tmp_path_factory):
    return build_report_index(tmp_path_factory.mktemp("warm"), fake_model, reports=3, pages=2)


@pytest.fixture(scope="module")
def service(report_index):
    running = WarmService(report_index["index"], "--idle", "600")
    running.wait_ready()
    yield running
    assert running.stop() == 0


def query(index: Path, *args: str) -> subprocess.CompletedProcess:
    return run_process("query", "--index-dir", str(index), *args)


@pytest.mark.slow  # processes of its own (a warm service, CLI processes): over a second, the real-component tier
@pytest.mark.parametrize("mode", ["text", "hybrid", "visual"])
def test_warm_and_local_answers_are_byte_identical(service, report_index, mode):
    index = report_index["index"]
    for output in ([], ["--json"], ["--json", "--with-text", "-k", "3"], ["--first-pass", "2", "--json"],
                   ["--filter", "team=finance"], ["--json", "--regions", "-k", "2"]):
        args = ["report page 1", "a scan", "--mode", mode, *output]
        local, warmed = query(index, *args, "--no-warm", "-v"), query(index, *args, "-v")
        assert local.returncode == warmed.returncode == 0, local.stderr + warmed.stderr
        assert warmed.stdout == local.stdout
        assert WARM in warmed.stderr and WARM not in local.stderr
        # the same messages on stderr, but for which process answered
        assert [line for line in warmed.stderr.splitlines() if WARM not in line] == local.stderr.splitlines()


@pytest.mark.slow  # CLI processes of their own, beside a warm service
@pytest.mark.parametrize("verbosity", [[], ["-v"]])
def test_the_warm_path_imports_no_numpy_torch_pydantic_or_server(service, report_index, tmp_path, verbosity):
    """The cheap client path: Click, the socket and JSON; no model code, no pydantic (the service checks the
    request), no other command's module, and rich only where a message is printed (-v)."""
    dump = tmp_path / "modules.json"
    code = ("import atexit, json, sys; from pathlib import Path; "
            f"atexit.register(lambda: Path({str(dump)!r}).write_text(json.dumps(sorted(sys.modules)))); "
            "from localgpt_index.cli import run; "
            f"sys.argv = ['lgpt-index', 'query', 'report', '--mode', 'visual', '--json', *{verbosity!r}, "
            f"'--index-dir', {str(report_index['index'])!r}]; "
            "run()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["queries"], done.stderr
    assert (WARM in done.stderr) == bool(verbosity), done.stderr
    modules = set(json.loads(dump.read_text()))
    heavy = {"numpy", "torch", "transformers", "fastapi", "uvicorn", "httpx", "PIL", "pydantic", "regex", "http.client",
             "pluggy", "localgpt_index.query.search", "localgpt_index.query.request", "localgpt_index.index.local.store",
             "localgpt_index.models.families", "localgpt_index.models.encoding", "localgpt_index.interop.results",
             "localgpt_index.cli.build", "localgpt_index.cli.eval", "localgpt_index.cli.serve"}
    assert not heavy & modules, heavy & modules
    assert ("rich" in modules) == bool(verbosity)  # (a message printed: rich's console; none, none)


@pytest.mark.slow  # a warm service in a process of its own
def test_another_model_setting_or_index_is_never_asked(service, report_index, fake_model, tmp_path):
    index = report_index["index"]
    other_settings = query(index, "report", "--json", "-v", "--scorer", "cpu")
    assert other_settings.returncode == 0 and WARM not in other_settings.stderr
    # another index whose folder holds the first service's socket: that service refuses it (409), the query answers here
    other = tmp_path / "other"
    make_pdf(tmp_path / "docs" / "a.pdf", ["another index"])
    assert run_cli("build", str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", str(other)).exit_code == 0
    (other / "default" / "warm").mkdir(mode=0o700)
    os.link(service.root / "warm" / "socket", other / "default" / "warm" / "socket")
    answered = query(other, "report", "--json", "-v")
    assert answered.returncode == 0 and WARM not in answered.stderr, answered.stderr
    assert [hit["path"] for hit in json.loads(answered.stdout)["queries"][0]["results"]] == [str(tmp_path / "docs" / "a.pdf")]
    assert (other / "default" / "warm" / "socket").exists()  # alive, so not stale: left alone


@pytest.mark.slow  # a warm service in a process of its own
def test_a_service_of_another_user_is_never_used(service, monkeypatch):
    monkeypatch.setattr(warm, "expected_uid", lambda: os.getuid() + 1)
    assert warm.find(service.root) is None
    assert (service.root / "warm" / "socket").exists()  # not ours to remove


@pytest.mark.slow  # a warm service in a process of its own, killed
def test_a_killed_service_leaves_a_socket_the_next_query_removes(report_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(report_index["index"], index, ignore=shutil.ignore_patterns("warm"))
    running = WarmService(index)
    running.wait_ready()
    running.proc.kill()
    running.proc.wait(timeout=60)
    running.proc.stderr.close()
    socket_file = index / "default" / "warm" / "socket"
    assert socket_file.exists()
    answered = query(index, "report", "--json", "-v")
    assert answered.returncode == 0 and WARM not in answered.stderr
    assert not socket_file.exists()


@pytest.mark.slow  # a warm service in a process of its own, waited out
def test_an_idle_service_exits_and_a_removed_index_ends_it(report_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(report_index["index"], index, ignore=shutil.ignore_patterns("warm"))
    idle = WarmService(index, "--idle", "0.5")
    idle.wait_ready()
    assert idle.proc.wait(timeout=60) == 0
    idle.proc.stderr.close()
    assert not (index / "default" / "warm" / "socket").exists()

    running = WarmService(index, "--idle", "600")
    running.wait_ready()
    shutil.rmtree(index / "default")
    assert running.proc.wait(timeout=60) == 0  # its socket went with the index
    running.proc.stderr.close()
    answered = query(index, "report")
    assert answered.returncode == 1 and "no index" in answered.stderr


@pytest.mark.slow  # a warm service in a process of its own, beside builds
def test_a_new_generation_answers_the_next_query(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "first.pdf", ["first"])
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index)).exit_code == 0
    running = WarmService(index)
    try:
        running.wait_ready()
        make_pdf(docs / "second.pdf", ["second", "two"])
        assert run_cli("build", str(docs), "--index-dir", str(index)).exit_code == 0
        warmed = query(index, "q", "-k", "10", "--json", "-v")
        local = query(index, "q", "-k", "10", "--json", "--no-warm")
        assert WARM in warmed.stderr and warmed.stdout == local.stdout
        assert {Path(h["path"]).name for h in json.loads(warmed.stdout)["queries"][0]["results"]} == {"first.pdf", "second.pdf"}
    finally:
        assert running.stop() == 0


@pytest.mark.slow  # serve and warm services in processes of their own
def test_keep_warm_starts_a_detached_service_that_warm_stops(report_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(report_index["index"], index, ignore=shutil.ignore_patterns("warm"))
    first = query(index, "report", "--json", "-v", "--keep-warm", "600")
    assert first.returncode == 0 and "warm service started" in first.stderr
    shown = wait_until(lambda: (lambda s: s.returncode == 0 and '"ready": true' in s.stdout and s)(
        run_process("warm", "--status", "--json", "--index-dir", str(index))), timeout=120, what="ready")
    pid = json.loads(shown.stdout)["pid"]
    assert os.getsid(pid) == pid  # its own session: no terminal's signal reaches it
    status = run_process("status", "--index-dir", str(index))
    assert f"warm        pid {pid}" in status.stdout
    second = query(index, "report", "--json", "-v", "--keep-warm", "600")
    assert WARM in second.stderr and second.stdout == first.stdout
    stopped = run_process("warm", "--stop", "--index-dir", str(index))
    assert stopped.returncode == 0 and "stopped" in stopped.stderr
    assert not pid_alive(pid)
    assert run_process("warm", "--status", "--index-dir", str(index)).returncode == 1

    served = Server("--index-dir", str(index), "--absolute-paths")  # serve listens on the socket too
    try:
        served.wait_ready()
        answered = query(index, "report", "--json", "-v")
        assert WARM in answered.stderr and answered.stdout == first.stdout
        assert "stop it with SIGTERM" in run_process("warm", "--stop", "--index-dir", str(index)).stderr
    finally:
        assert served.stop() == 0
    assert not (index / "default" / "warm" / "socket").exists()


@pytest.mark.slow  # an MCP server in a process of its own
def test_the_mcp_server_answers_query_on_the_socket_too(report_index, tmp_path):
    index = tmp_path / "idx"
    shutil.copytree(report_index["index"], index, ignore=shutil.ignore_patterns("warm"))
    server = subprocess.Popen([sys.executable, "-m", "localgpt_index", "mcp", "--index-dir", str(index)], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        root = index / "default"
        wait_until(lambda: (lambda a: a is not None and a[0] == 200 and a[1]["ready"])(warm.call(root, "GET", warm.STATUS_PATH)),
                   timeout=120, what="the MCP server's socket ready", proc=server)
        warmed, local = query(index, "report", "--json", "-v"), query(index, "report", "--json", "--no-warm")
        assert WARM in warmed.stderr and warmed.stdout == local.stdout
    finally:
        server.stdin.close()
        assert server.wait(timeout=60) == 0
    assert not (index / "default" / "warm" / "socket").exists()


@pytest.mark.slow  # CLI processes of their own, beside a warm service
def test_a_request_the_service_refuses_is_the_local_paths_error(service, report_index):
    """The warm client sends the request unchecked (no pydantic in its process): where the service refuses
    it, the local path reports it, as it does without a service (nothing said of the service)."""
    index = report_index["index"]
    for bad in (["--first-pass", "many"], ["--filter", "team"]):
        args = ["report", "--json", "-v", *bad]
        warmed, local = query(index, *args), query(index, *args, "--no-warm")
        assert warmed.returncode == local.returncode == 2
        assert warmed.stdout == local.stdout and warmed.stderr == local.stderr, warmed.stderr


def scoreless(hit) -> dict:
    """A hit's document but for its scores (a float32 sum's last digits depend on its order)."""
    return {key: value for key, value in hit.to_dict().items() if not key.endswith("score")}


@pytest.mark.slow  # a warm service in a process of its own, beside builds
def test_the_python_api_opt_in_answers_from_a_warm_service_of_its_generation(report_index, tmp_path):
    """open_warm_index: the same hits as open_index's, from a warm service of the index where one runs
    with the same model and settings; text mode, another generation and another scorer answer here."""
    from localgpt_index import open_index, open_warm_index
    from localgpt_index.index.scoring.device import DeviceScoring

    index = tmp_path / "idx"
    shutil.copytree(report_index["index"], index, ignore=shutil.ignore_patterns("warm"))
    running = WarmService(index)
    try:
        running.wait_ready()
        warmed, local = open_warm_index(index), open_index(index)
        for mode in ("visual", "hybrid", "text"):
            queries, asked = ["report page 1", "a scan"], {"mode": mode, "k": 3, "with_text": True, "filters": {"team": "finance"}}
            # the same hits; scores alike to float32's precision (the service's scorer may sum in another order)
            theirs, ours = warmed.search(queries, **asked), local.search(queries, **asked)
            assert [[scoreless(hit) for hit in hits] for hits in theirs] == [[scoreless(hit) for hit in hits] for hits in ours]
            assert [hit.score for hits in theirs for hit in hits] == pytest.approx([hit.score for hits in ours for hit in hits], rel=1e-5)
        assert warmed.answered_warm == 2  # (text mode loads no model: answered here)
        other = open_warm_index(index, scoring=DeviceScoring("cpu"))
        other.search("report", mode="visual")
        assert other.answered_warm == 0  # a service of other settings is not asked

        make_pdf(report_index["docs"].parent / "more" / "new.pdf", ["a new report"])
        assert run_cli("build", str(report_index["docs"].parent / "more"), "--index-dir", str(index)).exit_code == 0
        before = warmed.search("a new report", mode="visual", k=10)
        assert warmed.answered_warm == 2  # its generation is not the service's now: answered here, from its own
        assert "new.pdf" not in {Path(hit.path).name for hit in before[0]}
        fresh = open_warm_index(index)
        assert "new.pdf" in {Path(hit.path).name for hit in fresh.search("a new report", mode="visual", k=10)[0]}
        assert fresh.answered_warm == 1
    finally:
        assert running.stop() == 0
