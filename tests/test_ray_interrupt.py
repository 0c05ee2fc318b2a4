"""Issue 24: `build --ray HOST:PORT` where something accepts connections but is not a Ray head. Ray's
connect then waits in its C++ code; a SIGTERM meanwhile ends the build at once, with the usual
message, and releases the index's writer lock. And once connected, a SIGTERM is still the CLI's
interrupt (Ray replaces the handler). Black-box: the CLI in a process of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import run_cli
from docgen import make_pdf
from helpers import held_build, marked_processes, signal_held, wait_until

pytestmark = pytest.mark.slow  # imports Ray

EXIT_BOUND_S = 10.0  # Ray's one GCS try lasts about 40 s


class SilentServer:
    """Accepts TCP connections and never answers; `ray_connected` is set at the second connection
    (the first is the build's own probe of the address)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("0.0.0.0", 0))  # Ray connects to this node's address, not to 127.0.0.1
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.ray_connected = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)
            if len(self.accepted) >= 2:
                self.ray_connected.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_while_ray_waits_for_a_silent_head_ends_the_build_at_once(fake_model, tmp_path: Path, sig):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "a.pdf", ["a"])
    server = SilentServer()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "build", str(docs), "--model", str(fake_model),
                                 "--index-dir", str(index), "--ray", f"127.0.0.1:{server.port}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        try:
            assert server.ray_connected.wait(120), "Ray never connected"
            assert proc.poll() is None, proc.communicate()
            proc.send_signal(sig)
            started = time.monotonic()
            _, stderr = proc.communicate(timeout=EXIT_BOUND_S)
            took = time.monotonic() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        server.close()
    assert took < EXIT_BOUND_S
    assert proc.returncode == 1, stderr
    assert "interrupted; the index keeps its last committed generation" in stderr, stderr
    assert "Traceback" not in stderr and "SIGTERM handler" not in stderr, stderr
    again = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    assert again.exit_code == 0, again.stderr


def _terminated(proc, release: Path) -> str:
    """SIGTERM to a build held at a failpoint: its stderr, once it has ended as the CLI's interrupt
    (exit 1, its message)."""
    stderr = signal_held(proc, release, signal.SIGTERM)
    assert proc.returncode == 1, stderr  # was 15: Ray's handler, sys.exit(15), without the message
    assert "interrupted; the index keeps its last committed generation" in stderr, stderr
    return stderr


def test_a_sigterm_during_a_local_ray_build_is_an_interrupt(fake_model, tmp_path: Path):
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "release"
    make_pdf(docs / "a.pdf", ["a", "b"])
    # the cluster is up, the build held before encoding
    proc = held_build(["build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--ray", "local"],
                      release, "encode")
    stderr = _terminated(proc, release)
    assert "Traceback" not in stderr and "SIGTERM received" not in stderr, stderr
    again = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    assert again.exit_code == 0, again.stderr


def test_a_sigterm_inside_ray_init_is_an_interrupt(fake_model, tmp_path: Path, process_mark):
    """ray.init sets a SIGTERM handler of its own (sys.exit(15)) before it starts the node: a SIGTERM
    then is still the CLI's interrupt (exit 1, its message, the index as it was, no Ray left running)."""
    docs, index, release = tmp_path / "docs", tmp_path / "idx", tmp_path / "release"
    make_pdf(docs / "a.pdf", ["a", "b"])
    tests_dir = str(Path(__file__).parent)
    hook = {"RAY_RUNTIME_ENV_HOOK": "ray_init_hold.hold",  # held inside ray.init, its handler set
            "PYTHONPATH": os.pathsep.join(filter(None, [tests_dir, os.environ.get("PYTHONPATH")]))}
    proc = held_build(["build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--ray", "local"],
                      release, "ray-init", env=hook)
    stderr = _terminated(proc, release)
    assert "Traceback" not in stderr, stderr
    assert wait_until(lambda: not marked_processes(process_mark), 30, "the end of what the build started")
    again = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index))
    assert again.exit_code == 0, again.stderr
