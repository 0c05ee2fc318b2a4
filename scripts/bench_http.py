#!/usr/bin/env python3
"""serve's CPU time a request in its HTTP layer: h11 against httptools, in one run.

1. The protocol alone, in this process (no sockets, no FastAPI: a fake transport and an ASGI app
   that reads the body and sends a 10-result /query answer): `--layer-requests` POST /query on one
   kept-alive connection through uvicorn's H11Protocol, uvicorn's HttpToolsProtocol and serve's
   guarded protocol (serve/httpconn.py), `--rounds` interleaved rounds; CPU microseconds a request.
2. With `--baseline REV`, whole servers: this tree and that commit (a git worktree of it) serve
   copies of one small index built with the fake model (no torch: the server's work a request is
   HTTP, the application and a cheap query). In `--rounds` interleaved rounds each server gets
   `--requests` GET /healthz from one client on one kept-alive connection, then `--queries` POST
   /query from 8 concurrent clients; the server process's CPU time (user + system, /proc) a request.

Printed: each variant's median (min-max), and the ratios of one run.

    python scripts/bench_http.py                        # the protocol alone
    python scripts/bench_http.py --baseline f290ec9     # and against the h11 protocol (before httptools)
    python scripts/bench_http.py --baseline f290ec9 --rounds 3 --requests 1000 --queries 128 --json   # quicker

The load average is printed with the numbers: compare ratios from one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_serve import ROOT, cpu_seconds, questions  # also puts the tree and tests/ on sys.path

FAKE = "localgpt_index.testing.fake"


# 1. the protocol alone

LAYER_ANSWER = json.dumps({"queries": [{"query": "revenue growth 12", "results": [
    {"path": f"report-{i:03d}.pdf", "page": i + 1, "score": 12.5 + i, "metadata": {}} for i in range(10)]}]}).encode()
LAYER_BODY = json.dumps({"queries": ["revenue growth 12"], "k": 10}).encode()
LAYER_REQUEST = (b"POST /query HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
                 b"Connection: keep-alive\r\nUser-Agent: python-httpx/0.28.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(LAYER_BODY), LAYER_BODY))


async def layer_app(scope, receive, send) -> None:
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(LAYER_ANSWER))]})
    await send({"type": "http.response.body", "body": LAYER_ANSWER})


class FakeTransport:
    """What a protocol asks of its transport; what it writes is counted, not sent."""

    def __init__(self) -> None:
        self.written, self.closing = 0, False

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def layer_cpu_us(protocol: type, requests: int) -> float:
    """CPU microseconds a request through `protocol` (one kept-alive connection, one request at a time)."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    config = Config(layer_app, lifespan="off", http=protocol, log_level="warning")
    config.load()
    state = ServerState()
    connection = protocol(config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop())
    transport = FakeTransport()
    connection.connection_made(transport)
    started = time.process_time()
    for _ in range(requests):
        answered = state.total_requests
        connection.data_received(LAYER_REQUEST)
        while state.total_requests == answered:
            await asyncio.sleep(0)
    used = time.process_time() - started
    assert not transport.closing and transport.written > requests * len(LAYER_ANSWER)
    connection.connection_lost(None)
    return 1e6 * used / requests


def protocol_alone(rounds: int, requests: int) -> dict[str, list[float]]:
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from localgpt_index.serve.httpconn import guarded_protocol
    from localgpt_index.serve.httpguard import ConnectionLimits

    kinds = {"h11 (uvicorn)": H11Protocol, "httptools (uvicorn)": HttpToolsProtocol,
             "httptools guarded (serve)": guarded_protocol(ConnectionLimits())}
    runs: dict[str, list[float]] = {name: [] for name in kinds}
    for round_number in range(rounds):
        for name in list(kinds) if round_number % 2 == 0 else list(kinds)[::-1]:
            runs[name].append(asyncio.run(layer_cpu_us(kinds[name], requests)))
    return runs


# 2. whole servers, this tree against a baseline commit


def tree_env(tree: Path) -> dict:
    """`tree`'s lgpt-index first on the path; what else PYTHONPATH holds stays after it."""
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    return {**os.environ, "HF_HUB_OFFLINE": "1", "LGPT_PLUGINS": FAKE, "PYTHONPATH": os.pathsep.join([str(tree), *rest])}


def protocol_of(tree: Path) -> str:
    """The name of the connection protocol `tree` gives uvicorn (what is being compared)."""
    code = ("from localgpt_index.serve.httpconn import guarded_protocol; from localgpt_index.serve.httpguard import "
            "ConnectionLimits; c = guarded_protocol(ConnectionLimits()); print(c.__mro__[2].__module__ + '.' + c.__mro__[2].__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=tree_env(tree), cwd=tree, check=False)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def one_round(url: str, pid: int, requests: int, queries: int) -> dict:
    """Milliseconds of the server's CPU a request: /healthz from one client, /query from 8 clients."""
    import httpx

    with httpx.Client(base_url=url, timeout=120) as client:
        used = cpu_seconds(pid)
        for _ in range(requests):
            client.get("/healthz").raise_for_status()
        healthz = 1000 * (cpu_seconds(pid) - used) / requests
    texts = questions(queries)
    clients = [httpx.Client(base_url=url, timeout=120) for _ in range(8)]
    try:
        with ThreadPoolExecutor(8) as pool:
            used = cpu_seconds(pid)
            list(pool.map(lambda pair: clients[pair[0] % 8].post("/query", json={"queries": [pair[1]], "k": 10}).raise_for_status(),
                          enumerate(texts)))
            query = 1000 * (cpu_seconds(pid) - used) / len(texts)
    finally:
        for client in clients:
            client.close()
    return {"healthz_cpu_ms": healthz, "query8_cpu_ms": query}


def whole_servers(baseline_rev: str, rounds: int, requests: int, queries: int) -> tuple[dict, dict]:
    """Each tree's protocol name, and its rounds of one_round."""
    from docgen import make_pdf
    from served import Server

    from localgpt_index.testing.fake import write_fake_checkpoint

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-http-") as tmp:
        tmp = Path(tmp)
        baseline = tmp / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), baseline_rev], check=True,
                       capture_output=True)
        servers: dict[str, Server] = {}
        try:
            model = write_fake_checkpoint(tmp / "fake")
            docs = tmp / "docs"
            for i in range(10):
                make_pdf(docs / f"report-{i}.pdf", [f"report {i} page {p}" for p in range(2)])
            built = subprocess.run([sys.executable, "-m", "localgpt_index", "build", str(docs), "--model", str(model), "--index-dir",
                                    str(tmp / "idx")], capture_output=True, text=True, env=tree_env(ROOT), cwd=ROOT, check=False)
            assert built.returncode == 0, built.stderr
            trees = {"this tree": ROOT, f"baseline {baseline_rev}": baseline}
            protocols = {name: protocol_of(tree) for name, tree in trees.items()}
            for number, (name, tree) in enumerate(trees.items()):
                index = tmp / f"idx-{number}"
                shutil.copytree(tmp / "idx", index)
                servers[name] = Server("-q", "--index-dir", str(index), env=tree_env(tree), cwd=tree)
            for server in servers.values():
                server.wait_ready(timeout=300)
            for server in servers.values():  # warm: the first requests pay imports and the first batch
                one_round(server.url, server.proc.pid, 50, 16)
            runs: dict[str, list[dict]] = {name: [] for name in trees}
            for round_number in range(rounds):
                for name in list(trees) if round_number % 2 == 0 else list(trees)[::-1]:
                    runs[name].append(one_round(servers[name].url, servers[name].proc.pid, requests, queries))
        finally:
            for server in servers.values():
                server.stop()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], capture_output=True, check=False)
    return protocols, runs


def spread(values: list[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", metavar="REV", help="a git commit whose server is measured beside this tree's (a worktree of it)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layer-requests", type=int, default=5000, help="requests a round through the protocol alone")
    parser.add_argument("--requests", type=int, default=3000, help="GET /healthz a round (whole servers)")
    parser.add_argument("--queries", type=int, default=256, help="POST /query a round (whole servers; the CPU clock ticks in 10 ms)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()

    layer = protocol_alone(args.rounds, args.layer_requests)
    report: dict = {"rounds": args.rounds, "layer_cpu_us": layer}
    h11 = layer["h11 (uvicorn)"]
    lines = [f"1. the protocol alone, CPU microseconds a POST /query, {args.rounds} interleaved rounds of {args.layer_requests}, "
             "median (min-max):"]
    for name, values in layer.items():
        ratios = [a / b for a, b in zip(values, h11)]
        lines.append(f"   {name}: {spread(values, 1)} us, x{spread(ratios)} of h11's")
    if args.baseline:
        protocols, runs = whole_servers(args.baseline, args.rounds, args.requests, args.queries)
        report.update(protocols=protocols, runs=runs)
        lines.append(f"2. whole servers, the server process's CPU a request, {args.rounds} interleaved rounds, median (min-max):")
        ours, theirs = runs.values()
        for key, label in (("healthz_cpu_ms", f"GET /healthz, 1 client, {args.requests} a round"),
                           ("query8_cpu_ms", f"POST /query, 8 clients, {args.queries} a round")):
            lines.append(f"   {label}:")
            for name, run in runs.items():
                lines.append(f"     {name} ({protocols[name]}) {spread([r[key] for r in run])} ms")
            # /proc counts CPU in clock ticks (10 ms): a short round's can be 0, which gives no ratio
            ratios = [a[key] / b[key] for a, b in zip(ours, theirs) if b[key] > 0]
            saved = [b[key] - a[key] for a, b in zip(ours, theirs)]
            report[key] = {"ratio_median": statistics.median(ratios) if ratios else None, "saved_ms_median": statistics.median(saved)}
            shown = f"x{spread(ratios)}" if ratios else "x n/a (the baseline's CPU under one clock tick in every round)"
            lines.append(f"     this tree / baseline {shown}, {statistics.median(saved):.3f} ms less a request")
    report["load_average"] = load = os.getloadavg()
    lines.append(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
