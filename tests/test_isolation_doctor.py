"""docs/building.md: converters run in a network namespace of their own; where the OS refuses that
(no `unshare`, or one that fails, as in some containers), `doctor` says so."""

from __future__ import annotations

import json

import pytest

from conftest import run_process, validate


pytestmark = pytest.mark.slow  # a doctor process costs ~3 s of CPU: too much for the fast tier


def _doctor(path: str, text: bool = True) -> tuple[dict, str]:
    # a process of its own: the probe is cached per process; the CLI starts as sys.executable, so PATH may lack everything
    report = run_process("doctor", "--json", env={"PATH": path})
    assert report.returncode in (0, 4), report.stderr  # 4: no torch where the tier blocks it
    document = json.loads(report.stdout)
    validate(document, "doctor")
    if not text:
        return document, ""
    shown = run_process("doctor", env={"PATH": path})
    assert shown.returncode in (0, 4), shown.stderr
    return document, next(row for row in shown.stdout.splitlines() if row.startswith("isolation"))


def test_doctor_says_when_converters_cannot_get_a_network_namespace(tmp_path):
    refusing = tmp_path / "refusing"
    refusing.mkdir()
    (refusing / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (refusing / "unshare").chmod(0o755)
    report, line = _doctor(str(refusing))  # an unshare the OS refuses (some containers)
    assert report["converters"]["network_isolation"] is None, report["converters"]
    assert "no network namespace here" in line and "confined to the folder" in line, line
    report, _ = _doctor(str(tmp_path / "empty"), text=False)  # no unshare at all
    assert report["converters"]["network_isolation"] is None, report["converters"]
