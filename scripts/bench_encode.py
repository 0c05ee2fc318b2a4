#!/usr/bin/env python3
"""The CPU a query's forward pass costs, this tree against a baseline commit, in one process.

The baseline's `localgpt_index/models` package (from `git archive`) is imported beside this tree's as
a package of its own, each loads its own copy of the checkpoint's network, and their passes alternate
(the order flipping every pass): thread CPU time, one torch thread, the command's process (as
`serve`), float32 (the query dtype on a CPU). Both must give the same vectors bit for bit, or the
bench exits 1. Medians: a single-query pass, and a call of 8 queries (of different lengths, so
mostly 8 passes).

`--head` also times what an LM head asked for the last token's logits costs a pass at PaliGemma-3B's
size (257,216 x 2048): one token's product by the head's weights, in float32 and bfloat16.

    python scripts/bench_encode.py --baseline 5975dd0
    python scripts/bench_encode.py --baseline 5975dd0 --spec tiny --passes 200 --head
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
WORDS = "revenue quarter growth invoice total market outlook hiring plan budget margin customers".split()
QUERIES = [f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7 + 3) % len(WORDS)]} {i}" for i in range(64)]


def baseline_models(rev: str, folder: Path) -> str:
    """`rev`'s models package under `folder` as the package `basemodels` (its `..x` imports made
    absolute: they reach this tree's other packages, which the models package only reads)."""
    target = folder / "basemodels"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "localgpt_index/models"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    for path in (folder / "localgpt_index" / "models").glob("*.py"):
        text = re.sub(r"from \.\.([a-z_]+)", r"from localgpt_index.\1", path.read_text())
        (target / path.name).write_text(text)
    sys.path.insert(0, str(folder))
    return "basemodels"


def open_both(package: str, checkpoint: str) -> tuple:
    from localgpt_index.models import device, loading, resolve

    mine = loading.open_encoder(resolve.resolve_model(checkpoint), device.choose_precision(device.Capabilities(), "cpu", "float32"), 4)
    base = {name: importlib.import_module(f"{package}.{name}") for name in ("device", "loading", "resolve")}
    precision = base["device"].choose_precision(base["device"].Capabilities(), "cpu", "float32")
    theirs = base["loading"].open_encoder(base["resolve"].resolve_model(checkpoint), precision, 4)
    return theirs, mine


def interleaved(theirs, mine, passes: int) -> dict:
    times: dict[str, list[float]] = {"base_1": [], "this_1": [], "base_8": [], "this_8": []}
    for i in range(passes):
        order = (("base", theirs), ("this", mine)) if i % 2 else (("this", mine), ("base", theirs))
        for name, encoder in order:
            start = time.thread_time()
            encoder.encode_queries([QUERIES[i % 64]])
            times[f"{name}_1"].append(time.thread_time() - start)
            if i % 8 == 0:
                first = i // 8 % 8 * 8
                start = time.thread_time()
                encoder.encode_queries(QUERIES[first:first + 8])
                times[f"{name}_8"].append(time.thread_time() - start)
    return {key: statistics.median(values) * 1000 for key, values in times.items()}


def head_cost() -> dict:
    """CPU ms of one token's logits over PaliGemma-3B's vocabulary, per dtype (median of 5)."""
    import torch

    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        weights = torch.randn(257216, 2048, dtype=dtype)
        token = torch.randn(1, 1, 2048, dtype=dtype)
        runs = []
        with torch.inference_mode():
            for _ in range(6):
                start = time.thread_time()
                torch.nn.functional.linear(token, weights)
                runs.append(time.thread_time() - start)
        out[str(dtype).removeprefix("torch.")] = statistics.median(runs[1:]) * 1000
        del weights
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a git commit whose models package is measured beside this tree's")
    parser.add_argument("--spec", default="bench", help="the self-made ColPali checkpoint (testing/checkpoints.SPECS)")
    parser.add_argument("--passes", type=int, default=400, help="single-query passes a tree (default 400)")
    parser.add_argument("--head", action="store_true", help="also time PaliGemma-3B's LM head on one token")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from localgpt_index.core.collector import own_process
    from localgpt_index.testing.checkpoints import make_checkpoint

    own_process()
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench-encode-") as tmp:
        checkpoint = str(make_checkpoint(Path(tmp) / f"{args.spec}-colpali", args.spec))
        theirs, mine = open_both(baseline_models(args.baseline, Path(tmp)), checkpoint)
        same = all(theirs.encode_queries([q])[0].tobytes() == mine.encode_queries([q])[0].tobytes() for q in QUERIES)
        medians = interleaved(theirs, mine, args.passes)
    report = {"spec": args.spec, "baseline": args.baseline, "passes": args.passes, "bitwise_equal": same,
              "ms": medians, "ratio_1": medians["this_1"] / medians["base_1"], "ratio_8": medians["this_8"] / medians["base_8"],
              "load_average": os.getloadavg()}
    if args.head:
        report["head_ms"] = head_cost()
    print(f"{args.spec} checkpoint, {args.passes} passes a tree, load average {report['load_average'][0]:.2f}: "
          f"a single-query pass {medians['this_1']:.3f} ms of CPU here against {medians['base_1']:.3f} for {args.baseline} "
          f"(x{report['ratio_1']:.3f}); 8 queries {medians['this_8']:.3f} against {medians['base_8']:.3f} (x{report['ratio_8']:.3f}); "
          f"vectors bitwise equal: {same}", file=sys.stderr)
    if args.head:
        print("PaliGemma-3B's LM head, one token: " + ", ".join(f"{k} {v:.1f} ms" for k, v in report["head_ms"].items()),
              file=sys.stderr)
    if args.json:
        print(json.dumps(report))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
