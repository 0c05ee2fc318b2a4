#!/usr/bin/env bash
# The test command: set up what is missing, then run the suite. With no arguments, the two tiers one
# after the other, each in parallel (the fast tier on its own first: it runs without torch); with
# arguments, pytest with those arguments (`scripts/test.sh -m "not slow" -n 2`, `scripts/test.sh tests/test_x.py`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export HF_HUB_OFFLINE=1
# The tests' files on a RAM disk where one has room, unless TMPDIR names a place: every commit of an index
# fsyncs, and on a VM's disk an fsync (or a folder's removal) costs milliseconds where the suite makes tens of
# thousands. What a power loss leaves is tested on the recording disk (tests/test_power_loss.py), not this one.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -ge $((6 * 1024 * 1024)) ]; then
    export TMPDIR=/dev/shm
fi
# The project's own modules compiled once (with PYTHONDONTWRITEBYTECODE set, every process the tests start
# would compile them again; bytecode of an edited module is out of date, and Python then reads the source)
.venv/bin/python -m compileall -q -j 0 localgpt_index tests >/dev/null
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
.venv/bin/python -m pytest -m "not slow" -n 2
exec .venv/bin/python -m pytest -m slow -n 2 --durations=40  # (the slowest named: what CI's time goes to)
