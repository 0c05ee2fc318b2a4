"""The fork server the doc examples run `lgpt-index` through (tests/forkserver.py): a forked command behaves as the
real one run by the shell (output, input, folder, environment, exit code), and where it cannot be forked faithfully
the client runs the real CLI itself. Preloading the CLI only (no torch). The slow tier, whose doc examples are what the
fork server is for: a server process and tens of forked commands, about 5 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docgen import make_pdf
from forkserver import SOCKET_ENV
from helpers import free_port, wait_until

SERVER = Path(__file__).with_name("forkserver.py")
pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path):
    socket_path = tmp_path / "fs.sock"
    log = tmp_path / "forkserver.log"
    env = {**os.environ, SOCKET_ENV: str(socket_path)}
    with log.open("w") as said:
        process = subprocess.Popen([sys.executable, str(SERVER), "--fork-server", str(socket_path), "localgpt_index.cli"], env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=said, text=True)
    try:
        assert process.stdout.readline() == "ready\n", log.read_text()
        yield env, log
    finally:
        process.kill()
        process.wait()


def lgpt(env: dict, *args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SERVER), *args], env=env, cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_a_forked_command_answers_as_the_real_one(server, tmp_path):
    env, log = server
    (tmp_path / "lgpt-index.toml").write_text("[query]\nk = 7\n")
    forked = [lgpt(env, *args, cwd=tmp_path) for args in (["config", "query", "--json"], ["nosuch"], ["status"])]
    real = [subprocess.run([sys.executable, "-m", "localgpt_index", *args], env=env, cwd=tmp_path, capture_output=True, text=True)
            for args in (["config", "query", "--json"], ["nosuch"], ["status"])]
    assert [(f.returncode, f.stdout, f.stderr) for f in forked] == [(r.returncode, r.stdout, r.stderr) for r in real]
    assert [f.returncode for f in forked] == [0, 2, 1] and '"k"' in forked[0].stdout
    assert log.read_text().count("forkserver: forked") == 3


def test_stdin_and_the_environment_reach_the_forked_command(server, tmp_path, fake_model):
    env, log = server
    make_pdf(tmp_path / "docs" / "a.pdf", ["Q3 revenue grew", "late fee schedule"])
    assert lgpt(env, "build", "docs", "--model", str(fake_model), "--name", "other", cwd=tmp_path).returncode == 0
    asked = ["query", "--mode", "text", "--json", "--queries-file", "-"]
    done = lgpt({**env, "LGPT_INDEX_NAME": "other"}, *asked, cwd=tmp_path, stdin="late fee\nrevenue\n")
    real = subprocess.run([sys.executable, "-m", "localgpt_index", *asked], input="late fee\nrevenue\n",
                          env={**env, "LGPT_INDEX_NAME": "other"}, cwd=tmp_path, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (real.returncode, real.stdout, real.stderr)
    answers = json.loads(done.stdout)["queries"]
    assert [(a["query"], [h["page"] for h in a["results"]]) for a in answers] == [("late fee", [2]), ("revenue", [1])]
    assert log.read_text().count("forkserver: forked") == 2


def test_an_environment_the_imports_read_differently_runs_the_real_cli(server, tmp_path):
    env, log = server
    done = lgpt({**env, "HF_HOME": str(tmp_path / "elsewhere")}, "nosuch", cwd=tmp_path)
    assert done.returncode == 2 and "No such command" in done.stderr
    assert "refused ['nosuch']: HF_HOME" in log.read_text() and "forked" not in log.read_text()


def test_a_forked_server_answers_and_ends_with_exit_0_on_the_sigterm_its_client_gets(server, tmp_path, fake_model):
    """serve, watch and mcp are forked too: the SIGTERM a shell sends the client reaches the command, which ends as
    the real one does (exit 0), and the client with it."""
    import signal
    import urllib.request

    def answers(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.status == 200
        except OSError:  # not listening yet, or 503 while its model loads
            return False

    env, log = server
    make_pdf(tmp_path / "docs" / "a.pdf", ["Q3 revenue grew"])
    assert lgpt(env, "build", "docs", "--model", str(fake_model), cwd=tmp_path).returncode == 0
    port = free_port()
    client = subprocess.Popen([sys.executable, str(SERVER), "serve", "--port", str(port)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), what="serve answering /healthz", proc=client)
        client.send_signal(signal.SIGTERM)
        _, err = client.communicate(timeout=60)
    finally:
        client.kill()
    assert client.returncode == 0, err[-2000:]
    assert "forked" in log.read_text() and "['serve', '--port'" in log.read_text()
