#!/usr/bin/env python3
"""The warm service against cold `lgpt-index query` processes, on one index, in one run.

The "bench" checkpoint (real ColPali geometry, small widths) on the CPU, a 1,000-page index
(100 PDFs x 10 pages), `lgpt-index serve` in a process of its own:

1. latency: the median of one `/query` against the warm server, and of one cold
   `lgpt-index query` process (imports, model load, query), measured in the same run;
2. throughput: the same 64 queries sent one at a time, then by 8 concurrent clients, then the
   scorer alone on the same 64 queries (a process of its own, the server idle: one query, and 8
   stacked at a time), in interleaved rounds; 8 clients' queries/s as a share of the scorer's batched
   ceiling (1 / its time a query of 8 stacked; target 90 %), and the CPU time a query of both; every
   answer's top-k compared with the CLI's for the same query;
3. memory: 10,000 queries; the server's resident memory after the first 100 and at the end;
4. a build that adds 100 pages while 4 clients query: failed requests, and whether queries
   after the commit see the new pages.

    python scripts/bench_serve.py
    python scripts/bench_serve.py --pdfs 20 --queries 1000      # quicker
    python scripts/bench_serve.py --pdfs 20 --queries 1000 --baseline 31bee69 --rounds 5
    python scripts/bench_serve.py --quick --json     # a smoke run (tests/test_bench_smoke.py)

With --baseline REV, that commit's lgpt-index (a git worktree of it, in a temporary folder) builds
the same index and serves it beside this tree's server; first, in `--rounds` interleaved rounds (the
order alternating), each tree's cold `lgpt-index query` latency, warm /query latency and throughput
(one at a time, and 8 clients) are measured, and the median ratio and its spread (min-max) printed,
with whether both servers rank every answer the same; then the sections below, for this tree.

Exits 1 if any request failed or an answer's ranking differs from the CLI's.
"""

from __future__ import annotations

import argparse
import json
import json as JSON  # LeanClient.post takes an argument named json, as httpx does
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
WORDS = "revenue quarter growth invoice total market outlook hiring plan budget margin customers".split()


def tree_env(tree: Path) -> dict:
    """`tree`'s lgpt-index first on the path (with `python -m`, the working directory is first too)."""
    return {**ENV, "PYTHONPATH": str(tree)}


def lgpt(*args: str, tree: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localgpt_index", *args], capture_output=True, text=True,
                          env=tree_env(tree), cwd=tree, check=False)


def questions(count: int) -> list[str]:
    return [f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7 + 3) % len(WORDS)]} {i}" for i in range(count)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# Visual mode throughout: the scorer's ceiling is visual scoring, and the baseline trees before page
# text answer visually. Such a server refuses the field (found by asking it once, `takes_modes`): its URL
# is listed in WITHOUT_MODES. A baseline with page text gets the field, or it would answer in hybrid mode.
VISUAL = {"mode": "visual"}
WITHOUT_MODES: set[str] = set()


SCORED_WITH: list[int] = []  # X-Lgpt-Scored-With of the answers to concurrent clients (this tree's server)
CLIENT_CPU: list[float] = []  # the 8 clients' CPU seconds a query (this process), beside the server's


def ask(client, text: str, k: int = 10, scored_with: list | None = None) -> dict:
    extra = {} if str(client.base_url).rstrip("/") in WITHOUT_MODES else VISUAL
    answer = client.post("/query", json={"queries": [text], "k": k, **extra})
    answer.raise_for_status()
    if scored_with is not None and "X-Lgpt-Scored-With" in answer.headers:
        scored_with.append(int(answer.headers["X-Lgpt-Scored-With"]))
    return answer.json()


def takes_modes(url: str) -> bool:
    """Whether the server at `url` accepts the query's `mode` field (trees before page text refuse it)."""
    import httpx

    return httpx.post(f"{url.rstrip('/')}/query", json={"queries": ["mode"], "k": 1, **VISUAL}, timeout=300).status_code < 400


def ranking(document: dict) -> list[tuple[str, int]]:
    return [(h["path"], h["page"]) for h in document["queries"][0]["results"]]


# Scores within this of each other may rank either way between the CLI and the server: a one-shot `query`
# scores by torch's path, a warm server by the compiled kernel, equal within float32 rounding (the
# scorer's documented tolerance: index/scoring/kernel_policy.py, docs/performance.md)
TIE = 1e-3


def ranks_as(document: dict, want: list[tuple[str, int, float]] | None) -> bool:
    """Whether `document`'s hits rank as `want` (path, page, score), a near-tie (scores within TIE at
    the same rank) in either order."""
    got = [(h["path"], h["page"], h["score"]) for h in document["queries"][0]["results"]]
    return want is not None and len(got) == len(want) and all(
        (path, page) == (their_path, their_page) or abs(score - their_score) <= TIE
        for (path, page, score), (their_path, their_page, their_score) in zip(got, want))


def same_ranking(ours: list, theirs: list) -> bool:
    """Two rankings of (path, page, score): the same, a near-tie (scores within TIE at the same rank) in either order."""
    return len(ours) == len(theirs) and all((a[:2] == b[:2]) or abs(a[2] - b[2]) <= TIE for a, b in zip(ours, theirs))


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LeanClient:
    """One kept-alive connection by the standard library's http.client: the clients share the server's 2
    CPUs here (on a deployment they are elsewhere), so the load they make should cost little; httpx took
    about 1 ms of CPU a request. Enough of httpx.Client for `ask`."""

    def __init__(self, url: str) -> None:
        import http.client
        from urllib.parse import urlsplit

        self.base_url = url
        where = urlsplit(url)
        self.connection = http.client.HTTPConnection(where.hostname, where.port, timeout=120)

    def post(self, path: str, json: dict) -> "LeanClient.Answer":
        body = JSON.dumps(json).encode()
        self.connection.request("POST", path, body, {"Content-Type": "application/json"})
        answer = self.connection.getresponse()
        return self.Answer(answer.status, answer.headers, answer.read())

    class Answer:
        def __init__(self, status_code: int, headers, content: bytes) -> None:
            self.status_code, self.headers, self.content = status_code, headers, content

        def raise_for_status(self) -> None:
            if self.status_code >= 400:
                raise RuntimeError(f"HTTP {self.status_code}: {self.content[:300]!r}")

        def json(self):
            return JSON.loads(self.content)

    def close(self) -> None:
        self.connection.close()


def throughput_rounds(url: str, texts: list[str], expected: list, rounds: int, pid: int | None = None,
                      cpu: list | None = None) -> tuple[list[tuple[float, float]], bool]:
    """Queries/s of `texts` one at a time, then from 8 concurrent clients, `rounds` times in turn
    (the machine's speed drifts between runs); and whether every answer ranked as `expected`. With
    `pid` (the server's), its CPU seconds a query from the 8 clients are appended to `cpu`."""
    rates, same = [], True
    first, own, made = LeanClient(url), threading.local(), []

    def client() -> LeanClient:  # one connection per client thread (http.client's is not thread-safe)
        if not hasattr(own, "client"):
            own.client = LeanClient(url)
            made.append(own.client)
        return own.client

    with ThreadPoolExecutor(8) as pool:
        for _ in range(rounds):
            started = time.perf_counter()
            one_by_one = [ask(first, t) for t in texts]
            alone = len(texts) / (time.perf_counter() - started)
            started, used, mine = time.perf_counter(), cpu_seconds(pid) if pid else 0.0, cpu_seconds(os.getpid())
            together = list(pool.map(lambda text: ask(client(), text, scored_with=SCORED_WITH), texts))
            rates.append((alone, len(texts) / (time.perf_counter() - started)))
            if pid and cpu is not None:
                cpu.append((cpu_seconds(pid) - used) / len(texts))
                CLIENT_CPU.append((cpu_seconds(os.getpid()) - mine) / len(texts))
            same &= all(ranking(a) == ranking(b) and ranks_as(a, want) for a, b, want in zip(one_by_one, together, expected))
    for connection in [first, *made]:
        connection.close()
    return rates, same


# The scorer on its own, in a process of its own (the server idle meanwhile), on the very queries the
# clients send (argv[2], a JSON list): each query alone (the median of 3), and all of them 8 stacked at
# a time in order (the server's batched pass; its wall and CPU time a query). The same queries matter:
# the cost of a stacked product follows the query tokens stacked (the clients' queries here are about
# 19.6 tokens, "revenue growth N" 17) and even their count's remainder (torch's CPU product of 135
# stacked tokens took up to 1.5x the time of 136 here). One measurement per line read on stdin, so
# that it runs between the server's rounds.
SCORING = """
import json, statistics, sys, time
from localgpt_index.query.search import open_index
index = open_index(sys.argv[1])
encoder = index.load_encoder()
from localgpt_index.index.scoring.maxsim import kernel_policy
kernel_policy.load()  # as the server has it (it loads the compiled kernel at start)
vectors = encoder.encode_queries(json.loads(sys.argv[2]))
stacks = [vectors[at : at + 8] for at in range(0, len(vectors), 8)]
index.search_vectors(stacks[0], 10)
print("ready", flush=True)
for _ in sys.stdin:
    alone = []
    for query in vectors[:3]:
        started = time.perf_counter()
        index.search_vectors([query], 10)
        alone.append(time.perf_counter() - started)
    started, cpu = time.perf_counter(), time.process_time()
    for stack in stacks:
        index.search_vectors(stack, 10)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    tokens = sum(len(v) for v in vectors) / len(vectors)
    print(json.dumps([1000 * statistics.median(alone), 1000 * wall / len(vectors), 1000 * cpu / len(vectors), tokens]), flush=True)
"""


class Scorer:
    """The scorer alone in a process of its own (SCORING) on `texts`: `measure()` gives milliseconds a
    query for one query and for 8 stacked, the CPU time a query of 8 stacked, and the mean query tokens."""

    def __init__(self, index: Path, texts: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SCORING, str(index), json.dumps(texts)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=tree_env(ROOT), cwd=ROOT)
        assert self.proc.stdout.readline().strip() == "ready"

    def measure(self) -> tuple[float, float, float, float]:
        """Milliseconds: one query, a query of 8 stacked, the CPU time a query of 8 stacked; mean query tokens."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        alone, stacked, stacked_cpu, tokens = json.loads(self.proc.stdout.readline())
        return alone, stacked, stacked_cpu, tokens

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def against_ceiling(url: str, texts: list[str], expected: list, index: Path, rounds: int, pid: int | None = None) -> tuple[dict, bool]:
    """`rounds` interleaved rounds: serve's queries/s from 8 concurrent clients (and one at a time),
    then the scorer's own batched ceiling on the same queries, 1000 / (ms a query of 8 stacked), with the server idle."""
    SCORED_WITH.clear()  # this tree's server only
    scorer = Scorer(index, texts)
    result: dict = {"rounds": []}
    same = True
    try:
        for _ in range(rounds):
            cpu: list[float] = []
            [(alone, together)], agreed = throughput_rounds(url, texts, expected, 1, pid, cpu)
            same &= agreed
            one_ms, stacked_ms, stacked_cpu_ms, tokens = scorer.measure()
            result["query_tokens"] = tokens
            result["rounds"].append({"alone_qps": alone, "together_qps": together, "scorer_one_ms": one_ms,
                                     "scorer_stacked_ms": stacked_ms, "ceiling_qps": 1000 / stacked_ms,
                                     "of_ceiling": together * stacked_ms / 1000, "scorer_stacked_cpu_ms": stacked_cpu_ms,
                                     "serve_cpu_ms": 1000 * cpu[0] if cpu else None})
    finally:
        scorer.close()
    return result, same


def one_round(tree: Path, server_url: str, index: Path, texts: list[str], docs: Path) -> dict:
    """One tree's measurements of a round: cold CLI latency (2 processes), warm /query latency
    (median of 20), the rankings of `texts` asked one at a time, queries/s one at a time and from 8 clients."""
    import httpx

    cold = []
    for text in texts[:2]:
        started = time.perf_counter()
        mode = ["--mode", "visual"] if tree == ROOT else []
        assert lgpt("query", text, "--json", "--index-dir", str(index), *mode, tree=tree).returncode == 0
        cold.append(time.perf_counter() - started)
    with httpx.Client(base_url=server_url, timeout=120) as client:
        warm = []
        for text in texts[:20]:
            started = time.perf_counter()
            ask(client, text)
            warm.append(time.perf_counter() - started)
        # one at a time, before the concurrent clients: a query batched with others is padded with
        # them, and its ranking can differ in near-ties (the CLI's, batched, differs the same way)
        # paths relative to the indexed folder, as `serve` now answers (31bee69 and older: absolute, as the CLI)
        rankings = [[(os.path.relpath(h["path"], docs) if os.path.isabs(h["path"]) else h["path"], h["page"], h["score"])
                     for h in ask(client, t)["queries"][0]["results"]] for t in texts]
    [(alone, together)], _ = throughput_rounds(server_url, texts, [None] * len(texts), 1)
    return {"cold": statistics.median(cold), "warm": statistics.median(warm), "alone": alone, "together": together,
            "rankings": rankings}


def against_baseline(baseline: Path, model: Path, docs: Path, tmp: Path, rounds: int) -> bool:
    """Both trees build the same index and serve it; `rounds` interleaved rounds of one_round each; the
    median ratios (this tree against the baseline, above 1 is faster here) and their spread. True if
    every answer ranked the same on both."""
    from served import Server

    trees = {"this tree": ROOT, f"baseline {baseline.name.removeprefix('baseline-')}": baseline}
    servers, indexes = {}, {}
    for number, (name, tree) in enumerate(trees.items()):
        indexes[name] = tmp / f"idx-tree-{number}"
        built = lgpt("build", str(docs), "--model", str(model), "--index-dir", str(indexes[name]), tree=tree)
        assert built.returncode == 0, built.stderr
        servers[name] = Server("-q", "--index-dir", str(indexes[name]), env=tree_env(tree), cwd=tree)
    texts = questions(64)
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    try:
        for server in servers.values():
            server.wait_ready(timeout=300)
        WITHOUT_MODES.update(server.url.rstrip("/") for name, server in servers.items() if not takes_modes(server.url))
        for round_number in range(rounds):
            names = list(trees) if round_number % 2 == 0 else list(trees)[::-1]
            for name in names:
                runs[name].append(one_round(trees[name], servers[name].url, indexes[name], texts, docs))
    finally:
        for server in servers.values():
            server.stop()
    ours, before = runs.values()
    # near-ties (scores within TIE at the same rank) in either order count as the same ranking, as against
    # the CLI: two trees' scorers (torch's product, the compiled kernel) round differently
    differ = [sum(not same_ranking(x, y) for x, y in zip(a["rankings"], b["rankings"])) for a, b in zip(ours, before)]
    same = not any(differ)
    unstable = [sum(not same_ranking(x, y) for x, y in zip(run[0]["rankings"], later["rankings"])) for run in (ours, before)
                for later in run[1:]]

    def ratio(key: str, faster: bool) -> str:  # a rate: this / baseline; a time: baseline / this
        values = [a[key] / b[key] if faster else b[key] / a[key] for a, b in zip(ours, before)]
        return f"{statistics.median(values):.2f}x ({min(values):.2f}x-{max(values):.2f}x)"

    say(f"0. this tree / {list(trees)[1]}, {rounds} interleaved rounds, median (min-max), above 1 is faster here: "
          f"cold `lgpt-index query` {ratio('cold', False)}, warm /query {ratio('warm', False)}, 64 queries one at a "
          f"time {ratio('alone', True)}, from 8 clients {ratio('together', True)}; top-10 identical on both (near-ties within "
          f"{TIE:g} in either order): {same}")
    say(f"   queries of 64 ranked differently by the two trees, per round: {differ}; by one tree against its own "
          f"first round (this tree's rounds, then the baseline's): {unstable}")
    for label, key, unit in (("cold query", "cold", "s"), ("warm /query", "warm", "s"), ("one at a time", "alone", "q/s"),
                             ("8 clients", "together", "q/s")):
        say(f"   {label} per round (this tree, baseline): "
              + ", ".join(f"{a[key]:.3f}/{b[key]:.3f} {unit}" for a, b in zip(ours, before)))
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pdfs", type=int, default=None, help="PDFs of 10 pages in the index (default 100; --quick 10)")
    parser.add_argument("--queries", type=int, default=10_000, help="queries of the memory run")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the throughput run (the median is reported; "
                        "default 3, --quick 1)")
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help="a git commit whose lgpt-index serves the same index, measured in interleaved rounds")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 100 pages, one round, only the warm latency and serve against the scorer's ceiling")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout (the text goes to stderr)")
    args = parser.parse_args()
    global JSON_OUT
    JSON_OUT = args.json
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.pdfs = args.pdfs or (10 if args.quick else 100)
    import httpx
    from docgen import make_pdf
    from served import Server

    from localgpt_index.testing.checkpoints import make_checkpoint

    failed = False
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-serve-") as tmp:
        tmp = Path(tmp)
        model = make_checkpoint(tmp / "bench-colpali", "bench")
        docs, index = tmp / "docs", tmp / "idx"
        for i in range(args.pdfs):
            make_pdf(docs / f"report-{i:03d}.pdf", [f"Report {i} {WORDS[p % len(WORDS)]} {p}" for p in range(10)])
        say(f"index: {args.pdfs * 10} pages, bench checkpoint, CPU ({os.cpu_count()} cores)")
        report: dict = {"pages": args.pdfs * 10}
        if args.baseline:
            baseline = tmp / f"baseline-{args.baseline}"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline],
                           check=True, capture_output=True)
            try:
                failed |= not against_baseline(baseline, model, docs, tmp, args.rounds)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], capture_output=True,
                               check=False)
        built = lgpt("build", str(docs), "--model", str(model), "--index-dir", str(index))
        assert built.returncode == 0, built.stderr

        cold = []
        for text in questions(0 if args.quick else 5):
            started = time.perf_counter()
            assert lgpt("query", text, "--json", "--mode", "visual", "--index-dir", str(index)).returncode == 0
            cold.append(time.perf_counter() - started)
        server = Server("-q", "--index-dir", str(index), env=tree_env(ROOT), cwd=ROOT)
        server.wait_ready(timeout=300)
        client = httpx.Client(base_url=server.url, timeout=120)
        warm = []
        for text in questions(50):
            started = time.perf_counter()
            ask(client, text)
            warm.append(time.perf_counter() - started)
        warm_ms = 1000 * statistics.median(warm)
        report["warm_ms"] = warm_ms
        if cold:
            cold_ms = 1000 * statistics.median(cold)
            report["cold_ms"] = cold_ms
            say(f"1. median latency: cold `lgpt-index query` {cold_ms:.0f} ms, warm /query {warm_ms:.1f} ms: "
                f"{cold_ms / warm_ms:.0f}x")
        else:
            say(f"1. median latency: warm /query {warm_ms:.1f} ms")

        texts = questions(64)
        cli = json.loads(lgpt("query", *texts, "-k", "10", "--json", "--mode", "visual", "--index-dir", str(index)).stdout)["queries"]
        # the CLI answers absolute paths, `serve` paths relative to the indexed folder
        expected = [[(os.path.relpath(h["path"], docs), h["page"], h["score"]) for h in c["results"]] for c in cli]
        ceiling, same = against_ceiling(server.url, texts, expected, index, args.rounds, server.proc.pid)
        failed |= not same
        report["ceiling"] = ceiling
        rounds = ceiling["rounds"]
        gain = [r["together_qps"] / r["alone_qps"] for r in rounds]
        share = [100 * r["of_ceiling"] for r in rounds]
        say(f"2. throughput, {args.rounds} interleaved rounds of the 64 queries one at a time, then from 8 concurrent "
            f"clients, then the scorer alone on the same queries ({ceiling.get('query_tokens', 0):.1f} tokens a query; a process "
            "of its own, the server idle): "
            + ", ".join(f"{r['alone_qps']:.1f} -> {r['together_qps']:.1f} q/s (scorer: {r['scorer_one_ms']:.0f} ms one "
                        f"query, {r['scorer_stacked_ms']:.0f} ms a query of 8 stacked, ceiling {r['ceiling_qps']:.1f} q/s)"
                        for r in rounds))
        most = [r["scorer_one_ms"] / r["scorer_stacked_ms"] for r in rounds]
        cpu_share = [100 * r["scorer_stacked_cpu_ms"] / r["serve_cpu_ms"] for r in rounds if r["serve_cpu_ms"]]
        if cpu_share:  # CPU time drifts far less than wall time on a loaded machine
            say(f"   CPU time a query: the scorer's (8 stacked) as a share of serve's (8 clients, the whole server "
                f"process): {statistics.median(cpu_share):.0f} % ({min(cpu_share):.0f}-{max(cpu_share):.0f} %); serve "
                + ", ".join(f"{r['serve_cpu_ms']:.0f}" for r in rounds) + " ms, the scorer "
                + ", ".join(f"{r['scorer_stacked_cpu_ms']:.0f}" for r in rounds) + " ms"
                + (f"; the 8 clients (this process) {1000 * statistics.median(CLIENT_CPU):.1f} ms" if CLIENT_CPU else ""))
        if SCORED_WITH:
            report["scored_with_median"] = statistics.median(SCORED_WITH)
            say(f"   queries scored together with each of the 8 clients' queries (X-Lgpt-Scored-With): median "
                f"{statistics.median(SCORED_WITH):.0f}, min {min(SCORED_WITH)}, max {max(SCORED_WITH)}")
        say(f"   8 clients: {statistics.median(share):.0f} % ({min(share):.0f}-{max(share):.0f} %) of the scorer's batched "
            f"ceiling (target 90 %); {statistics.median(gain):.2f}x ({min(gain):.2f}x-{max(gain):.2f}x) one client's "
            f"throughput, where batching can take at most {statistics.median(most):.2f}x off the scoring "
            f"({100 * statistics.median(g / m for g, m in zip(gain, most)):.0f} % of that gain); "
            f"top-10 identical to the CLI's (near-ties within 1e-3 in either order) for every query in every round: {same}")
        if args.quick:
            server.stop()
            finish(report, failed, args.json)

        errors = 0
        lock = threading.Lock()

        def worker(number: int, count: int) -> None:
            nonlocal_errors = 0
            with httpx.Client(base_url=server.url, timeout=120) as own:
                for text in questions(count):
                    try:
                        ask(own, f"{text} {number}")
                    except httpx.HTTPError:
                        nonlocal_errors += 1
            with lock:
                counts.append(nonlocal_errors)

        counts: list[int] = []
        for text in questions(100):
            ask(client, text)
        after_100 = rss_mib(server.proc.pid)
        started = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(n, (args.queries - 100) // 8)) for n in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        errors = sum(counts)
        at_end = rss_mib(server.proc.pid)
        failed |= errors > 0
        say(f"3. {args.queries:,} queries in {time.perf_counter() - started:.0f} s: RSS {after_100:.0f} MiB after 100, "
              f"{at_end:.0f} MiB at the end ({at_end / after_100:.3f}); errors: {errors}")

        stop = threading.Event()
        outcomes: list[int] = []

        def querying() -> None:
            with httpx.Client(base_url=server.url, timeout=120) as own:
                while not stop.is_set():
                    try:
                        outcomes.append(own.post("/query", json={"queries": ["revenue"], "k": 5, **VISUAL}).status_code)
                    except httpx.HTTPError:
                        outcomes.append(0)

        pages_before = client.get("/status").json()["pages"]
        for i in range(10):
            make_pdf(docs / f"added-{i:02d}.pdf", [f"Added {i} page {p}" for p in range(10)])
        threads = [threading.Thread(target=querying) for _ in range(4)]
        [t.start() for t in threads]
        added = lgpt("build", str(docs), "--index-dir", str(index))
        stop.set()
        [t.join() for t in threads]
        pages_after = client.get("/status").json()["pages"]
        seen = {h["path"] for h in client.post("/query", json={"queries": ["added"], "k": 1000, **VISUAL}).json()["queries"][0]["results"]}
        new_seen = sum(Path(p).name.startswith("added-") for p in seen)
        bad = sum(status != 200 for status in outcomes)
        failed |= bad > 0 or added.returncode != 0 or new_seen != 10
        say(f"4. build of 100 more pages during {len(outcomes)} queries from 4 clients: {bad} failed; pages "
              f"{pages_before} -> {pages_after}; new documents in the answers after the commit: {new_seen} of 10")
        report["memory"] = {"queries": args.queries, "rss_after_100_mib": after_100, "rss_at_end_mib": at_end, "errors": errors}
        report["build_during_queries"] = {"queries": len(outcomes), "failed": bad, "new_documents_seen": new_seen}
        server.stop()
    finish(report, failed, args.json)


def finish(report: dict, failed: bool, as_json: bool) -> None:
    report["ok"] = not failed
    if as_json:
        print(json.dumps(report, indent=1))
    sys.exit(1 if failed else 0)


JSON_OUT = False


def say(line: str) -> None:
    """Human output: stdout, or stderr when --json owns stdout."""
    print(line, file=sys.stderr if JSON_OUT else sys.stdout)


if __name__ == "__main__":
    main()
