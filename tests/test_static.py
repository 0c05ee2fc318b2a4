"""Static checks: ruff (style and errors, the line length) on the whole project in the fast tier, and
mypy on every package (configured in pyproject.toml) in the real-component tier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    result = _run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # a tool of its own: seconds with its cache (.mypy_cache), about a minute without
def test_mypy_passes_on_every_package():
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_unexplained_type_ignore():
    """Every `type: ignore` names its error code and says why on the same line."""
    bad = []
    for path in sorted((ROOT / "localgpt_index").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "type: ignore" in line and ("type: ignore[" not in line or "#" not in line.split("type: ignore", 1)[1]):
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bad, "\n".join(bad)
