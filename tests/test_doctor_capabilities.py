"""`doctor` reports what `mcp`, `watch` and OCR need (doctor.py): the MCP SDK, watchfiles
and inotify (else polling), Tesseract and its languages; each missing one with how to add it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib import metadata

import pytest

from conftest import run_cli, validate

from localgpt_index.doctor import INOTIFY, mcp_sdk, watcher
from localgpt_index.cli.doctor import _print_capabilities

TESSERACT_INSTALL = "apt-get install tesseract-ocr tesseract-ocr-eng"


def doctor(*args: str, env: dict | None = None) -> tuple[dict, str]:
    """doctor's JSON report and its text, with the same environment (exit 4 is fine: the fast tier has no torch)."""
    report = run_cli("doctor", "--json", *args, env=env)
    text = run_cli("doctor", *args, env=env)
    assert report.exit_code in (0, 4) and text.exit_code in (0, 4), report.stderr + text.stderr
    document = json.loads(report.stdout)
    validate(document, "doctor")
    return document, text.stdout


def line(text: str, name: str) -> str:
    return next(row for row in text.splitlines() if row.startswith(f"{name:13}"))


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_doctor_reports_the_mcp_sdk_the_watcher_and_tesseract():
    report, text = doctor()
    found = report["capabilities"]
    assert found["mcp"] == {"version": metadata.version("mcp"), "importable": True, "error": None, "hint": None}
    assert line(text, "mcp") == f"mcp          MCP SDK {metadata.version('mcp')}"

    watch = found["watch"]
    assert watch["version"] == metadata.version("watchfiles") and watch["importable"]
    assert watch["max_user_watches"] == int((INOTIFY / "max_user_watches").read_text())
    assert watch["inotify"] and watch["mode"] == "inotify" and watch["inotify_error"] is None  # this machine has inotify
    assert line(text, "watch") == (f"watch        watchfiles {watch['version']}; changes seen by inotify "
                                   f"(max_user_watches {watch['max_user_watches']})")

    tesseract = shutil.which("tesseract")
    assert tesseract, "the test machine has Tesseract (scripts/bootstrap installs it)"
    version = re.search(r"tesseract ([\d.]+)", subprocess.run([tesseract, "--version"], capture_output=True, text=True).stdout)[1]
    languages = subprocess.run([tesseract, "--list-langs"], capture_output=True, text=True).stdout.splitlines()[1:]
    assert found["ocr"] == {"path": tesseract, "version": version, "languages": languages, "error": None, "hint": None}
    assert "eng" in languages
    assert line(text, "tesseract") == f"tesseract    {version} at {tesseract}, languages: {', '.join(languages)}"
    assert "to add it" not in text


def test_doctor_without_tesseract_says_how_to_add_it(tmp_path):
    (tmp_path / "bin").mkdir()
    report, text = doctor(env={"PATH": str(tmp_path / "bin")})
    ocr = report["capabilities"]["ocr"]
    assert ocr["path"] is None and ocr["version"] is None and ocr["languages"] == []
    assert "not found on PATH" in ocr["error"] and TESSERACT_INSTALL in ocr["hint"]
    assert line(text, "tesseract") == f"tesseract    {ocr['error']}"
    assert f"to add it: {TESSERACT_INSTALL}" in text
    assert not any("tesseract" in item.lower() for item in report["missing"])  # build works without OCR


def test_doctor_with_tesseract_but_no_english(tmp_path):
    (tmp_path / "tessdata").mkdir()  # the real Tesseract, pointed at a folder without language data
    report, text = doctor(env={"TESSDATA_PREFIX": str(tmp_path / "tessdata")})
    ocr = report["capabilities"]["ocr"]
    assert ocr["version"] and ocr["languages"] == [] and "no English data" in ocr["error"]
    assert ocr["hint"] == "apt-get install tesseract-ocr-eng"
    assert "languages: none" in line(text, "tesseract") and "to add it: apt-get install tesseract-ocr-eng" in text


def test_the_watcher_polls_where_inotify_is_unavailable(tmp_path):
    assert watcher(tmp_path)["mode"] == "polling"  # no inotify limits: a kernel without inotify
    assert "no /proc/sys/fs/inotify/max_user_watches" in watcher(tmp_path)["inotify_error"]
    (tmp_path / "max_user_watches").write_text("0\n")
    off = watcher(tmp_path)
    assert off["inotify"] is False and off["max_user_watches"] == 0 and "max_user_watches is 0" in off["inotify_error"]
    lines: list[str] = []
    _print_capabilities({"mcp": mcp_sdk(), "watch": off, "ocr": {"version": "5", "path": "t", "languages": ["eng"], "error": None,
                                                                  "hint": None}}, echo=lines.append)
    assert any(row.startswith("watch") and "changes seen by polling: fs.inotify.max_user_watches is 0" in row for row in lines)


def test_a_missing_mcp_sdk_or_watchfiles_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # an import of mcp fails, as it would if it were not installed
    monkeypatch.setitem(sys.modules, "watchfiles", None)
    mcp, watch = mcp_sdk(), watcher()
    assert mcp["importable"] is False and "ModuleNotFoundError" in mcp["error"] and "pip install 'mcp" in mcp["hint"]
    assert watch["importable"] is False and "pip install 'watchfiles" in watch["hint"]
    lines: list[str] = []
    _print_capabilities({"mcp": mcp, "watch": watch, "ocr": {"version": None, "path": None, "languages": [], "error": "not found",
                                                             "hint": "apt"}}, echo=lines.append)
    assert lines[0].startswith("mcp          NOT AVAILABLE: ModuleNotFoundError")
    assert lines[1].startswith("watch        watchfiles NOT AVAILABLE: ModuleNotFoundError")
    assert sum(row.strip().startswith("to add it:") for row in lines) == 3
