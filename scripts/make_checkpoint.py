#!/usr/bin/env python3
"""Write a random-weight ColPali checkpoint: "tiny" for tests, "bench" (real 1024-token geometry) for benchmarks.

    python scripts/make_checkpoint.py tiny  ./models/tiny-colpali
    python scripts/make_checkpoint.py bench ./models/bench-colpali

Its vectors have the real shape but no meaning: retrieval results are noise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localgpt_index.checkpoints import SPECS, make_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", choices=sorted(SPECS))
    parser.add_argument("out", type=Path, help="folder to write; keep 'colpali' in its name for plain byaldi")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = make_checkpoint(args.out, args.spec, seed=args.seed)
    print(path)


if __name__ == "__main__":
    main()
