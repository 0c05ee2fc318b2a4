#!/usr/bin/env bash
# The test command: set up what is missing, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
