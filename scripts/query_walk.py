"""One local query's walk: the modules a query string passes through, from `cli/query.py` to the scorer.

    python scripts/query_walk.py [TREE] [--mode visual|hybrid|text] [--json]

Builds a small index with the fake model (localgpt_index.testing.fake, no torch) in a scratch folder,
runs `lgpt-index query` in this process with a profiler on (sys.setprofile), and prints:

- the module sequence along the call stack at the moment the scorer (index/scoring/maxsim.py `maxsim`)
  runs, from the `query` command's frame down, each run of frames of one module shown once, and whether
  a module on it re-enters after it was left (A -> B -> A on the stack);
- every such re-entry seen on the stack at any other call of the query (callbacks included: a pool that
  calls back the function its caller handed it), with the first stack that showed it;
- the library's modules the query passed through before the scorer ran, in the order it first entered
  them (where its text was checked, encoded, scored).

TREE (default: this script's tree) is the checkout whose `localgpt_index` is imported, so that the walk
of an older tree is printed by the same script (`git worktree add --detach /tmp/old COMMIT`).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path

PACKAGE = "localgpt_index"
COMMAND = "localgpt_index.cli.query"  # the walk starts at the query command's frame
SCORERS = ("index/scoring/maxsim.py", "index/score.py")  # the exact scorer `maxsim`: where it lives now, and before 0.4
SCORER_NAME = "maxsim"


def _module(frame) -> str:
    return frame.f_globals.get("__name__", "?")


def _called(frame) -> bool:
    """A function's frame (a module's or a class's body, run by an import, is not a step of the query)."""
    return bool(frame.f_code.co_flags & inspect.CO_OPTIMIZED)


def _stack(frame) -> list[str]:
    """The library modules from the query command's frame down to `frame` (callers first), function calls
    only; [] outside the command."""
    names = []
    while frame is not None:
        if _called(frame):
            names.append(_module(frame))
        frame = frame.f_back
    names.reverse()
    if COMMAND not in names:
        return []
    return [name for name in names[names.index(COMMAND):] if name == PACKAGE or name.startswith(PACKAGE + ".")]


def _collapsed(modules: list[str]) -> list[str]:
    return [name for number, name in enumerate(modules) if number == 0 or modules[number - 1] != name]


def _reentered(modules: list[str]) -> list[str]:
    """Modules that appear twice on the collapsed stack with another module between (A -> B -> A)."""
    seen, again = set(), []
    for name in _collapsed(modules):
        if name in seen and name not in again:
            again.append(name)
        seen.add(name)
    return again


class Walk:
    """The profiler: the stack at the scorer's first call, and every re-entry seen on the way."""

    def __init__(self) -> None:
        self.at_scorer: list[str] | None = None
        self.reentries: dict[str, list[str]] = {}
        self.entered: list[str] = []  # modules in the order first entered, until the scorer ran

    def __call__(self, frame, event, arg) -> None:
        if event != "call" or not _module(frame).startswith(PACKAGE) or not _called(frame):
            return
        stack = _stack(frame)
        if not stack:
            return
        for name in _reentered(stack):
            self.reentries.setdefault(name, _collapsed(stack))
        if self.at_scorer is None and stack[-1] not in self.entered:
            self.entered.append(stack[-1])
        code = frame.f_code
        if self.at_scorer is None and code.co_name == SCORER_NAME and code.co_filename.replace(os.sep, "/").endswith(SCORERS):
            self.at_scorer = _collapsed(stack)


def _build(work: Path, run) -> None:
    sys.path.insert(0, str(TREE / "tests"))
    from docgen import make_pdf  # noqa: PLC0415 - from the tree's own tests: the documents its tests build

    from localgpt_index.testing.fake import write_fake_checkpoint

    model = write_fake_checkpoint(work / "fake-model")
    for number in range(3):
        make_pdf(work / "docs" / f"report-{number}.pdf", [f"report {number} page {page} revenue" for page in range(2)])
    result = run("build", str(work / "docs"), "--model", str(model), "--index-dir", str(work / "idx"))
    if result.exit_code != 0:
        raise SystemExit(f"the build failed: {result.output}")


def walk(mode: str) -> dict:
    from click.testing import CliRunner

    from localgpt_index.cli import main

    def run(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    with tempfile.TemporaryDirectory(prefix="lgpt-walk-") as scratch:
        work = Path(scratch)
        _build(work, run)
        profiler = Walk()
        sys.setprofile(profiler)
        try:
            result = run("query", "report 1 revenue", "--mode", mode, "--json", "--index-dir", str(work / "idx"))
        finally:
            sys.setprofile(None)
    if result.exit_code != 0:
        raise SystemExit(f"the query failed: {result.output}")
    return {"tree": str(TREE), "mode": mode, "at_scorer": profiler.at_scorer, "reentered": profiler.reentries,
            "entered": profiler.entered}


def _print(report: dict) -> None:
    print(f"tree {report['tree']}, query --mode {report['mode']}")
    if report["at_scorer"] is None:
        print("the scorer did not run (text mode reads no vectors)")
    else:
        print("modules on the stack when the scorer runs:")
        for depth, name in enumerate(report["at_scorer"]):
            print(f"  {'  ' * depth}{name}")
        again = _reentered(report["at_scorer"])
        print(f"re-entered on that stack after it was left: {', '.join(again) if again else 'none'}")
    print(f"modules entered before the scorer ran, in order: {' -> '.join(report['entered'])}")
    print(f"re-entered at any other call of the query: {'none' if not report['reentered'] else ''}")
    for name, stack in report["reentered"].items():
        print(f"  {name}: {' -> '.join(stack)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--mode", default="visual", choices=["visual", "hybrid", "text"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    TREE = Path(args.tree).resolve()
    sys.path.insert(0, str(TREE))
    os.environ["LGPT_PLUGINS"] = ",".join(filter(None, [os.environ.get("LGPT_PLUGINS"), "localgpt_index.testing.fake"]))
    os.environ["LGPT_OCR"] = "never"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    found = walk(args.mode)
    print(json.dumps(found, indent=2) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        _print(found)
