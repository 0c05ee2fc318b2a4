#!/usr/bin/env python3
"""The power-loss and fault enumeration of tests/test_power_loss.py, as the table of docs/integrity.md.

    python scripts/power_loss.py                 # every writer, every operation, every pattern and fault
    python scripts/power_loss.py --every 5       # a sample: every fifth operation
    python scripts/power_loss.py --only remove   # one writer (a name as in the table)

Runs in this process with the fake model (no torch), in a temporary folder; exit 1 if any case failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=1, help="explore every N-th operation (default: all)")
    parser.add_argument("--only", action="append", help="a writer's name (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lgpt-power-loss-") as scratch:
        os.environ.update({"LGPT_PLUGINS": "localgpt_index.testing.fake", "LGPT_OCR": "never", "HF_HUB_OFFLINE": "1",
                           "XDG_CACHE_HOME": str(Path(scratch) / "cache")})
        import powerloss_cases as cases

        from localgpt_index.testing.fake import write_fake_checkpoint

        model = write_fake_checkpoint(Path(scratch) / "fake-colpali")
        print("| writer | operations | power-loss cases (images booted) | held | killed, run again, then power lost | held "
              "| fault cases (not reached) | held | seconds |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        failed, started = [], time.monotonic()
        for number, scenario in enumerate(cases.scenarios()):
            if args.only and scenario.name not in args.only:
                continue
            crash = cases.explore(scenario, Path(scratch) / f"crash-{number}", model, every=args.every)
            twice = cases.explore_twice(scenario, Path(scratch) / f"twice-{number}", model, every=args.every)
            fault = cases.faults(scenario, Path(scratch) / f"fault-{number}", model, every=args.every)
            failed += [crash, twice, fault]
            held = [len(found.cases) - len(found.failed) for found in (crash, twice, fault)]
            print(f"| {scenario.name} | {crash.operations} | {len(crash.cases)} ({crash.boots}) | {held[0]} | {len(twice.cases)} | "
                  f"{held[1]} | {len(fault.cases)} ({fault.unreached}) | {held[2]} | "
                  f"{crash.seconds + twice.seconds + fault.seconds:.0f} |", flush=True)
        bad = [found for found in failed if found.failed]
        print(f"\n{time.monotonic() - started:.0f} s in all")
        if bad:
            print(cases.summary(bad))
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
