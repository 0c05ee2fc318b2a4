"""Time to the first text answer from process start: `lgpt-index mcp` over stdio, as an agent starts it.

    python scripts/bench_first_text.py --index-dir .lgpt-index/default [--query "invoice"] [--runs 3]

Starts the server, and with the MCP SDK's client times (from the moment the process is started): the
session's initialisation, the first `mode: "text"` search (which must not wait for the vision model),
and the first hybrid search (which does). The `query --mode text` CLI's time is printed beside it, as
the yardstick: a process that reads the text index and answers."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time


async def one_run(index_dir: str, query: str) -> dict[str, float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "localgpt_index", "mcp", "--index-dir", index_dir],
                                   env=dict(os.environ))
    started = time.perf_counter()
    found: dict[str, float] = {}
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=None) as session:
                await session.initialize()
                found["initialised"] = time.perf_counter() - started
                text = await session.call_tool("search", {"query": query, "mode": "text", "k": 5})
                assert not text.is_error, text.content[0].text
                found["first text answer"] = time.perf_counter() - started
                status = await session.call_tool("index_status", {})
                found["model loading at the text answer"] = float(status.structured_content["model_state"] == "loading")
                hybrid = await session.call_tool("search", {"query": query, "k": 5})
                assert not hybrid.is_error, hybrid.content[0].text
                found["first hybrid answer"] = time.perf_counter() - started
    return found


def cli_text(index_dir: str, query: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "localgpt_index", "query", "--mode", "text", "--json", "--index-dir", index_dir, query],
                   check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index-dir", required=True)
    parser.add_argument("--query", default="invoice")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [asyncio.run(one_run(args.index_dir, args.query)) for _ in range(args.runs)]
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(f"{name:40} median {statistics.median(values):7.2f}   runs {' '.join(f'{v:.2f}' for v in values)}")
    clis = [cli_text(args.index_dir, args.query) for _ in range(args.runs)]
    label = "query --mode text (CLI, whole process)"
    print(f"{label:40} median {statistics.median(clis):7.2f}   runs {' '.join(f'{v:.2f}' for v in clis)}")


if __name__ == "__main__":
    main()
