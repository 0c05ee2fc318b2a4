#!/usr/bin/env python3
"""Show that an issue's tests guard its defects: each fails on the code before the fix, passes now.

Reads a list of items and the tests that cover them (scripts/regressions/ISSUE.json), checks out
the base commit (the previous main) into a temporary git worktree, puts this tree's tests/ into
it (new test files, fixtures and helpers included), and runs the listed tests there and here:

    python scripts/check_regressions.py issue24              # base: the file's recorded base
    python scripts/check_regressions.py issue24 --base REV   # or any commit
    python scripts/check_regressions.py issue24 -m "not slow"  # the fast tests only

Prints item -> test -> outcome at the base -> outcome now. Exits 0 when every test passes now and
fails at the base (or errors, or does not even collect: a test of a hook the old code lacks); 1 otherwise, naming the
tests that pass at the base (they do not show their defect) or fail now.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTS = Path(__file__).resolve().parent / "regressions"


def load_items(issue: str) -> tuple[str, list[dict]]:
    data = json.loads((LISTS / f"{issue}.json").read_text())
    return data["base"], data["items"]


def outcomes(tree: Path, tests: list[str], marks: str | None) -> dict[str, str]:
    """Run `tests` with `tree` first on the path; each node id -> passed, failed, error or skipped. One pytest
    run a test file: a file that does not import at the base (a module the old code lacks) is then
    uncollected alone, instead of stopping the run of every other file ("found no collectors")."""
    seen: dict[str, str] = {}
    for path in sorted({test.split("::")[0] for test in tests}):
        seen |= _outcomes(tree, [test for test in tests if test.split("::")[0] == path], marks)
    return seen


def _outcomes(tree: Path, tests: list[str], marks: str | None) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
               "HF_HUB_OFFLINE": "1"}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                   f"--junitxml={report}", "-o", "junit_family=xunit1", *tests]
        if marks:
            command += ["-m", marks]
        subprocess.run(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return parse_junit(report) if report.exists() else {}


def parse_junit(report: Path) -> dict[str, str]:
    seen: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        node = f"{case.get('file')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        seen[node] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                      else "skipped" if "skipped" in kinds else "passed")
    return seen


def cases_of(test: str, seen: dict[str, str]) -> list[str]:
    """A listed id may name a parametrized test as a whole: each of its cases."""
    return sorted(node for node in seen if node == test or node.startswith(test + "["))


def base_tree(base: str, scratch: Path) -> Path:
    tree = scratch / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), base], check=True)
    subprocess.run(["rm", "-rf", str(tree / "tests")], check=True)
    subprocess.run(["cp", "-a", str(ROOT / "tests"), str(tree / "tests")], check=True)
    return tree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("issue", help="the list's name under scripts/regressions/, e.g. issue24")
    parser.add_argument("--base", help="the commit before the fix (default: the list's recorded base)")
    parser.add_argument("-m", dest="marks", help="a pytest mark expression, e.g. 'not slow'")
    args = parser.parse_args()
    recorded, items = load_items(args.issue)
    tests = sorted({t for item in items for t in item["tests"]})
    with tempfile.TemporaryDirectory() as scratch:
        tree = base_tree(args.base or recorded, Path(scratch))
        try:
            before = outcomes(tree, tests, args.marks)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    now = outcomes(ROOT, tests, args.marks)
    bad, rows = [], 0
    print(f"{'item':<40} {'test':<100} {'base':<11} now")
    for item in items:
        for test in item["tests"]:
            cases = cases_of(test, now) or ([] if args.marks else [test])
            for case in cases:
                # at the base a test file that does not import (new fixtures) collects no case
                was, is_ = before.get(case, "uncollected"), now.get(case, "not run")
                rows += 1
                if is_ != "passed" or was == "passed" or was == "skipped":
                    bad.append(case)
                print(f"{item['item'][:40]:<40} {case:<100} {was:<11} {is_}")
    print(f"\n{rows - len(bad)} of {rows} tests fail at the base and pass now")
    for case in bad:
        print(f"  does not show its defect: {case}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
