"""A running `lgpt-index serve` for tests and scripts/bench_serve.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx


class Server:
    """A running `lgpt-index serve`, its address read from its first line."""

    def __init__(self, *args: str, env: dict | None = None, **popen) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "serve", "--port", "0", *args],
                                     env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     **popen)
        first = self.proc.stderr.readline()
        match = re.search(r"http://(?:127\.0\.0\.1|0\.0\.0\.0):(\d+)", first)  # 0.0.0.0: reached on loopback
        assert match, first + self.proc.stderr.read()
        self.url = f"http://127.0.0.1:{match.group(1)}"
        self.lines: list[str] = []
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", verify=False).status_code == 200:  # plain http: no CA bundle to load
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError("server not ready: " + "\n".join(self.lines))

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=60, verify=False)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self._drainer.join(timeout=60)  # every line it wrote is in self.lines
        return code


def serving(*args: str, env: dict | None = None) -> Iterator[Server]:
    """A fixture's server (`yield from serving(...)`): ready before the tests, and stopped after them with exit 0."""
    running = Server(*args, env=env)
    running.wait_ready()
    yield running
    assert running.stop() == 0
