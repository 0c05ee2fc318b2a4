"""scripts/bench_gpu.py --query: the exact device scorer (index/scoring/device.py) over synthetic pages.

The vectors are random unit float16 vectors, --tokens a page, held in memory (generated on the
device in chunks and copied back): a NumPy array shaped like a segment's memory map, read by the
scorer as it reads a segment (the store's block checks are not part of this measurement). Each
measurement is the median of --rounds; the bandwidth bound is the vectors' bytes over the copy rate
measured here (a device-to-device copy for resident vectors; pinned host-to-device for streamed ones).
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np

CHECK_ALL_UP_TO = 20_000  # pages: above this the CPU reference scores a sample (the device's top-10 and 2,000 more)
GROUP_BYTES = 32 << 20


class MemorySegment:
    """One segment in memory, as DeviceScorer reads it (vectors, offsets, checked_groups without checks)."""

    def __init__(self, vectors: np.ndarray, offsets: np.ndarray) -> None:
        self.vectors, self.offsets = vectors, offsets

    def checked_groups(self, pages: np.ndarray):
        per = max(1, GROUP_BYTES // max(1, int(self.offsets[1] - self.offsets[0]) * self.vectors.shape[1] * 2))
        for start in range(0, len(pages), per):
            yield pages[start : start + per]


def synthetic_segment(pages: int, tokens: int, device: str, seed: int = 0) -> MemorySegment:
    import torch

    rows = pages * tokens
    vectors = np.empty((rows, 128), dtype=np.float16)
    generator = torch.Generator(device=device).manual_seed(seed)
    step = 1 << 24
    for start in range(0, rows, step):
        n = min(step, rows - start)
        block = torch.randn((n, 128), generator=generator, device=device)
        block /= block.norm(dim=1, keepdim=True)
        vectors[start : start + n] = block.half().cpu().numpy()
    return MemorySegment(vectors, np.arange(pages + 1, dtype=np.int64) * tokens)


def make_queries(count: int, tokens: int, bf16: bool, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        q = rng.standard_normal((tokens, 128)).astype(np.float32)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        if bf16:
            import torch

            q = torch.from_numpy(q).bfloat16().float().numpy()
        out.append(q)
    return out


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copy_rates(device, nbytes: int) -> tuple[float, float]:
    """Bytes/s read by a device-to-device copy (read + written, counted as read rate x 2), and of a
    pinned host-to-device copy (on the CPU: the same memory copy)."""
    import torch

    n = max(1 << 20, min(nbytes, 4 << 30)) // 2
    src = torch.empty(n, dtype=torch.float16, device=device).fill_(1)
    dst = torch.empty_like(src)
    host = torch.empty(n, dtype=torch.float16, pin_memory=device.type == "cuda").fill_(1)

    def rate(fn, moved: int) -> float:
        fn()
        sync(device)
        times = []
        for _ in range(5):
            started = time.perf_counter()
            fn()
            sync(device)
            times.append(time.perf_counter() - started)
        return moved / min(times)

    on_device = rate(lambda: dst.copy_(src), 2 * 2 * n)
    to_device = rate(lambda: dst.copy_(host, non_blocking=True), 2 * n) if device.type == "cuda" else on_device
    return on_device, to_device


def timed(scorer, queries, segment, pages, rounds: int) -> tuple[float, np.ndarray]:
    """Median seconds of one scorer call with `queries` stacked, and its scores."""
    scores = scorer.score(queries, "bench", segment, pages)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        scores = scorer.score(queries, "bench", segment, pages)  # returns host scores: the device is done
        times.append(time.perf_counter() - started)
    return statistics.median(times), scores


def reference_check(queries, segment: MemorySegment, scores: np.ndarray) -> tuple[bool, float, int]:
    """Against the CPU scorer: top-10 identical (all pages, or the sample), the largest score difference, pages checked."""
    from localgpt_index.index.scoring.maxsim import maxsim

    pages = len(segment.offsets) - 1
    if pages <= CHECK_ALL_UP_TO:
        sample = np.arange(pages)
    else:
        top = np.argsort(-scores, axis=1)[:, :10].ravel()
        sample = np.unique(np.concatenate([top, np.random.default_rng(1).choice(pages, 2000, replace=False)]))
    expected = maxsim(queries, segment.vectors, segment.offsets, sample)
    got = scores[:, sample]
    same = all(np.array_equal(np.argsort(-a, kind="stable")[:10], np.argsort(-b, kind="stable")[:10]) for a, b in zip(got, expected))
    return same, float(np.abs(got - expected).max()), len(sample)


def measure(scorer, segment, pages, one, stacked, rounds: int, bound_s: float) -> dict:
    alone_s, one_scores = timed(scorer, one, segment, pages, rounds)
    stack_s, stack_scores = timed(scorer, stacked, segment, pages, rounds)
    out = {}
    for name, seconds, count in (("one", alone_s, 1), ("stacked", stack_s, len(stacked))):
        per_query = seconds / count
        out[name] = {"queries": count, "ms_per_pass": 1000 * seconds, "ms_per_query": 1000 * per_query,
                     "bound_ms": 1000 * bound_s / count, "share_of_bound": bound_s / count / per_query}
    return {**out, "_scores": (one_scores, stack_scores)}


def query_main(args) -> None:
    import torch

    from localgpt_index.index.scoring.device import DeviceScorer

    device = torch.device(args.device)
    pages = args.pages or 100_000
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    load = os.getloadavg()
    print(f"device scorer on {device} ({name}); torch {torch.__version__}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    started = time.perf_counter()
    segment = synthetic_segment(pages, args.tokens, str(device))
    nbytes = segment.vectors.nbytes
    print(f"{pages:,} pages x {args.tokens} x 128 float16 vectors, held in memory: {nbytes / 1e9:.2f} GB "
          f"(made in {time.perf_counter() - started:.1f} s)", flush=True)
    on_device, to_device = copy_rates(device, nbytes)
    print(f"copy rates measured here: on the device {on_device / 1e9:.0f} GB/s read, "
          f"host to device (pinned) {to_device / 1e9:.1f} GB/s", flush=True)
    queries = make_queries(args.stack + 1, args.query_tokens, args.bf16_queries, seed=2)
    one, stacked = queries[:1], queries[1:]
    every = np.arange(pages)
    report = {"device": str(device), "device_name": name, "pages": pages, "tokens": args.tokens, "query_tokens": args.query_tokens,
              "vector_bytes": nbytes, "held": "in memory", "bf16_queries": args.bf16_queries, "load_average": load,
              "device_read_GBps": on_device / 1e9, "host_to_device_GBps": to_device / 1e9}
    modes = [("resident", None, nbytes / on_device)] + ([] if args.no_stream else [("streamed", 0, nbytes / to_device)])
    for mode, budget, bound_s in modes:
        scorer = DeviceScorer(str(device), max_resident=budget)
        if budget is None:
            started = time.perf_counter()
            scorer.score(one, "bench", segment, every)
            upload = time.perf_counter() - started
            print(f"resident: uploaded in {upload:.2f} s ({nbytes / upload / 1e9:.1f} GB/s, the first query)", flush=True)
            if scorer.stats.resident_bytes != nbytes:
                print(f"resident: the vectors do not fit the device's budget ({scorer.stats.resident_bytes} bytes resident): streamed")
        result = measure(scorer, segment, every, one, stacked, args.rounds, bound_s)
        one_scores, stack_scores = result.pop("_scores")
        for row in result.values():
            what = "one query" if row["queries"] == 1 else f"{row['queries']} stacked"
            print(f"{mode:9s} {what}: "
                  f"{row['ms_per_pass']:9.2f} ms a pass, {row['ms_per_query']:9.2f} ms a query; "
                  f"bandwidth bound {row['bound_ms']:8.2f} ms a query ({100 * row['share_of_bound']:5.1f} % of it)", flush=True)
        same_one, diff_one, checked = reference_check(one, segment, one_scores)
        same_stack, diff_stack, _ = reference_check(stacked, segment, stack_scores)
        result["top10_identical"], result["max_score_difference"] = same_one and same_stack, max(diff_one, diff_stack)
        verdict = "identical" if same_one and same_stack else "DIFFERENT"
        print(f"{mode:9s} against the CPU scorer ({checked:,} pages a query): top-10 {verdict}, "
              f"largest score difference {max(diff_one, diff_stack):.2e}", flush=True)
        report[mode] = result
        del scorer
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report["top10_identical"] = all(report[m]["top10_identical"] for m, _, _ in modes)
    report["max_score_difference"] = max(report[m]["max_score_difference"] for m, _, _ in modes)
    one_ms = report["resident"]["one"]["ms_per_query"]
    if device.type == "cuda":
        print(f"one query over {pages:,} pages: {one_ms:.1f} ms; target < 50 ms on one H200 at 100,000 pages: "
              f"{'met' if one_ms < 50 and pages >= 100_000 else 'not met' if pages >= 100_000 else 'n/a (fewer pages)'}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)
