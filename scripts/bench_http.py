#!/usr/bin/env python3
"""serve's CPU time a request with this tree's HTTP layer against another commit's, in one run.

Both trees serve copies of one small index built with the fake model (no torch: the server's work
a request is HTTP, the application and a cheap query, so the HTTP layer's share shows). In
`--rounds` interleaved rounds (the order alternating) each server gets:

1. `--requests` GET /healthz from one client on one kept-alive connection;
2. `--queries` POST /query from 8 concurrent clients (kept-alive connections, one query each);

and the server process's CPU time (user + system, /proc) is divided by the requests. Printed: each
tree's median (min-max) milliseconds a request, and this tree's median against the baseline's.

    python scripts/bench_http.py --baseline f290ec9     # the h11 protocol (before httptools)
    python scripts/bench_http.py --baseline f290ec9 --rounds 3 --requests 1000 --queries 128 --json   # quicker

The load average is printed with the numbers: compare ratios from one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_serve import ROOT, cpu_seconds, questions  # also puts the tree and tests/ on sys.path

FAKE = "localgpt_index.testing.fake"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, metavar="REV", help="the git commit to compare with (a worktree of it)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000, help="GET /healthz a round")
    parser.add_argument("--queries", type=int, default=256, help="POST /query a round (the CPU clock ticks in 10 ms)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()

    from docgen import make_pdf
    from served import Server

    from localgpt_index.testing.fake import write_fake_checkpoint

    with tempfile.TemporaryDirectory(prefix="lgpt-bench-http-") as tmp:
        tmp = Path(tmp)
        baseline = tmp / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline], check=True,
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
            trees = {"this tree": ROOT, f"baseline {args.baseline}": baseline}
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
            for round_number in range(args.rounds):
                for name in list(trees) if round_number % 2 == 0 else list(trees)[::-1]:
                    runs[name].append(one_round(servers[name].url, servers[name].proc.pid, args.requests, args.queries))
        finally:
            for server in servers.values():
                server.stop()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], capture_output=True, check=False)

    load = os.getloadavg()
    report: dict = {"load_average": load, "rounds": args.rounds, "protocols": protocols, "runs": runs}
    lines = [f"server CPU a request, {args.rounds} interleaved rounds, median (min-max); load average "
             f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"]
    ours, theirs = runs.values()
    for key, label in (("healthz_cpu_ms", f"GET /healthz, 1 client, {args.requests} a round"),
                       ("query8_cpu_ms", f"POST /query, 8 clients, {args.queries} a round")):
        line = [f"  {label}:"]
        for name, run in runs.items():
            values = [r[key] for r in run]
            line.append(f"{name} ({protocols[name]}) {statistics.median(values):.3f} ms ({min(values):.3f}-{max(values):.3f})")
        ratios = [a[key] / b[key] for a, b in zip(ours, theirs)]
        saved = [b[key] - a[key] for a, b in zip(ours, theirs)]
        report[key] = {"ratio_median": statistics.median(ratios), "saved_ms_median": statistics.median(saved)}
        line.append(f"this tree / baseline x{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
                    f"{statistics.median(saved):.3f} ms less a request")
        lines.append("\n    ".join(line))
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
