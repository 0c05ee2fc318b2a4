#!/usr/bin/env bash
# The test command: set up what is missing, then run the suite. With no arguments, the two tiers one
# after the other, each in parallel (the fast tier on its own first: it runs without torch); with
# arguments, pytest with those arguments (`scripts/test.sh -m "not slow" -n 2`, `scripts/test.sh tests/test_x.py`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export HF_HUB_OFFLINE=1
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python -m pytest -m "not slow" -n 2
exec .venv/bin/python -m pytest -m slow -n 2
