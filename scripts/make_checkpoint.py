#!/usr/bin/env python3
"""Write a random-weight checkpoint: ColPali ("tiny" for tests, "bench" with the real 1024-token
geometry for benchmarks, "cpu" model-bound on a CPU, "full" with the real architecture for a
GPU), a tiny one of another family (colqwen2, colqwen2_5, ...: real classes, processors and
token layout), or a "fake" one (deterministic vectors from the page bytes, no torch: the fast
test tier and the scheduler benchmarks).

    python scripts/make_checkpoint.py tiny       ./models/tiny-colpali
    python scripts/make_checkpoint.py bench      ./models/bench-colpali
    python scripts/make_checkpoint.py colqwen2_5 ./models/tiny-colqwen2_5
    python scripts/make_checkpoint.py colqwen2_5 ./models/bench-colqwen2_5 --geometry bench   # 768 image tokens
    python scripts/make_checkpoint.py colqwen2_5 ./models/full-colqwen2_5 --geometry full --dtype bfloat16
    python scripts/make_checkpoint.py fake       ./models/fake

Its vectors have the real shape but no meaning: retrieval results are noise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localgpt_index.testing.checkpoints import CHECKPOINT_FAMILIES, SPECS, make_checkpoint, make_family_checkpoint  # noqa: E402
from localgpt_index.testing.fake import write_fake_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", choices=sorted(SPECS) + list(CHECKPOINT_FAMILIES) + ["fake"])
    parser.add_argument("out", type=Path, help="folder to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--geometry", choices=["tiny", "bench", "full"], default="tiny",
                        help="for a Qwen family: tiny (at most 64 image tokens a page), bench (768, as the real models) "
                             "or, for colqwen2_5, full (768 and Qwen2.5-VL-3B's layers: 6.9 GB in bfloat16)")
    parser.add_argument("--dtype", default="float32", help="with --geometry full: bfloat16 halves the files")
    args = parser.parse_args()
    if args.spec == "fake":
        print(write_fake_checkpoint(args.out))
        print("(the fake family is a plugin: run lgpt-index with LGPT_PLUGINS=localgpt_index.testing.fake)", file=sys.stderr)
        return
    if args.spec in CHECKPOINT_FAMILIES:
        print(make_family_checkpoint(args.out, args.spec, seed=args.seed, geometry=args.geometry, dtype=args.dtype))
        return
    print(make_checkpoint(args.out, args.spec, seed=args.seed))


if __name__ == "__main__":
    main()
