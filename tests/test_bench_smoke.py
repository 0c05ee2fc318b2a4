"""The benches the issue's numbers come from still run: `--quick` smoke runs, checked for the
numbers they must print (the scorer against the machine's limit; serve against the scorer's
batched ceiling). No timing is asserted: this machine's speed says nothing here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_bench_query_quick_prints_the_scorer_against_the_machine_s_limit():
    """Torch-free in the fast tier: the NumPy scorer and NumPy's product give the limit."""
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_query.py"), "--quick", "--pages", "20", "--batch", "8",
                           "--baseline-queries", "2", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"]
    limit = report["sizes"][0]["limit"]
    assert limit["bytes"] == 20 * 1030 * 128 * 2
    assert limit["read_gb_s"][0] > 0 and limit["peak_gflop_s"]["float32"][0] > 0
    for stacked in ("1_stacked", "8_stacked"):
        (one,) = limit[stacked]["rounds"]
        assert one["limit_s"] == max(one["read_s"], one["compute_s"]) and one["percent"] > 0
    assert limit["8_stacked"]["gflop"] == pytest.approx(8 * limit["1_stacked"]["gflop"])
    assert "% of the limit (target 60 %)" in done.stderr


@pytest.mark.slow  # the bench checkpoint on torch, a real server
def test_bench_serve_quick_prints_serve_against_the_scorer_s_batched_ceiling():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_serve.py"), "--quick", "--pdfs", "3", "--json"], capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    ceiling = report["ceiling"]
    assert ceiling["rounds"] and all(r["of_ceiling"] > 0 for r in ceiling["rounds"])
    assert "of the scorer's batched ceiling (target 90 %)" in done.stderr
    assert all(r["serve_cpu_ms"] > 0 and r["scorer_stacked_cpu_ms"] > 0 for r in ceiling["rounds"])
    assert report["scored_with_median"] >= 1 and "X-Lgpt-Scored-With" in done.stderr


@pytest.mark.slow  # five builds in processes of their own: too long for the fast tier
def test_bench_watch_incremental_prints_both_variants_with_bytes_read():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_watch.py"), "--incremental", "30", "--segment-pages", "10",
                           "--rounds", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["pages"] == 30 and report["vectors_gb"] > 0 and len(report["runs"]) == 4
    assert [r["variant"] for r in report["runs"]] == ["full", "record", "record", "full"]
    assert all(r["indexed"] == 1 and r["read_mb"] >= 0 for r in report["runs"])
    assert report["full"]["wall_s"] > 0 and report["ratio_wall_full_over_record"] > 0


@pytest.mark.slow  # two real servers, a git worktree of the baseline
def test_bench_http_prints_serve_s_cpu_a_request_against_a_baseline():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_http.py"), "--baseline", "HEAD", "--rounds", "1", "--layer-requests",
                           "50", "--requests", "30", "--queries", "16", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert set(report["layer_cpu_us"]) == {"h11 (uvicorn)", "httptools (uvicorn)", "httptools guarded (serve)"}
    assert all(us[0] > 0 for us in report["layer_cpu_us"].values())
    assert all("HttpToolsProtocol" in name for name in report["protocols"].values()), report["protocols"]
    for runs in report["runs"].values():
        assert runs[0]["healthz_cpu_ms"] >= 0 and runs[0]["query8_cpu_ms"] > 0
    assert "of h11's" in done.stderr and "this tree / baseline" in done.stderr


@pytest.mark.slow  # two copies of a torch model in one process
def test_bench_encode_compares_a_baseline_s_query_pass_bit_for_bit():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_encode.py"), "--baseline", "HEAD", "--spec", "tiny",
                           "--passes", "16", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["bitwise_equal"] and report["ratio_1"] > 0 and report["ratio_8"] > 0
    assert "a single-query pass" in done.stderr


@pytest.mark.slow  # two builds in processes of their own, a baseline from git
def test_bench_regions_prints_the_positions_size_build_cost_and_query_cost():
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_regions.py"), "--pdfs", "2", "--pages", "2", "--rounds", "1",
                           "--queries", "3", "--baseline", "HEAD"], capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    ratio = re.search(r"words / text = ([0-9.]+)", out)
    assert ratio and float(ratio.group(1)) > 0, out
    assert re.search(r"build, CPU seconds .* this tree [0-9.]+ s, baseline HEAD [0-9.]+ s", out), out
    assert re.search(r"text layers alone, CPU seconds: plain pdftotext [0-9.]+ s, with word positions [0-9.]+ s", out), out
    for mode in ("text", "hybrid", "visual"):
        timed = re.search(rf"query k=10 {mode}, CPU a query \(each query's least, mean\): without regions ([0-9.]+) ms, "
                          r"with ([0-9.]+) ms", out)
        assert timed and float(timed.group(1)) > 0 and float(timed.group(2)) > 0, out
