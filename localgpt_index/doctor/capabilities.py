"""What `doctor` reports beside what `build` needs: the MCP server's SDK, the watcher (watchfiles, and
whether inotify is usable here or the watcher polls), and Tesseract for OCR. None of them is needed to
build an index, so none makes `doctor` fail: each says what is missing and how to add it."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import subprocess
import sys
from importlib import import_module, metadata
from pathlib import Path

INOTIFY = Path("/proc/sys/fs/inotify")
TESSERACT_HINT = "apt-get install tesseract-ocr tesseract-ocr-eng (other languages: tesseract-ocr-LANG) / brew install tesseract"


def capabilities(inotify: Path = INOTIFY) -> dict:
    return {"mcp": mcp_sdk(), "watch": watcher(inotify), "ocr": tesseract()}


def _package(distribution: str, module: str, hint: str) -> dict:
    """The installed version of `distribution`, and whether `module` imports (an install can be broken)."""
    try:
        version: str | None = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        version = None
    try:
        import_module(module)
    except Exception as exc:  # noqa: BLE001  (any failure to import is what this reports)
        return {"version": version, "importable": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}",
                "hint": hint}
    return {"version": version, "importable": True, "error": None, "hint": None}


def mcp_sdk() -> dict:
    """The official MCP SDK `lgpt-index mcp` runs on."""
    return _package("mcp", "mcp", "pip install 'mcp>=2.3' (a dependency of lgpt-index: reinstall it)")


def watcher(inotify: Path = INOTIFY) -> dict:
    """watchfiles, and how it would learn of changes here: inotify where it can start a watch, else polling."""
    report = _package("watchfiles", "watchfiles", "pip install 'watchfiles>=1.0' (a dependency of lgpt-index: reinstall it)")
    limits = {name: _read_int(inotify / name) for name in ("max_user_watches", "max_user_instances")}
    usable, why = _inotify_usable(limits["max_user_watches"])
    report.update(inotify=usable, **limits, mode="inotify" if usable else "polling", inotify_error=why)
    return report


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _inotify_usable(max_user_watches: int | None) -> tuple[bool, str | None]:
    """Whether this process can open an inotify instance (its limits, a container, seccomp can forbid it)."""
    if not sys.platform.startswith("linux"):
        return False, f"no inotify on {sys.platform}"
    if max_user_watches is None:
        return False, "no /proc/sys/fs/inotify/max_user_watches: this kernel offers no inotify"
    if max_user_watches <= 0:
        return False, "fs.inotify.max_user_watches is 0"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_CLOEXEC)
    except (OSError, AttributeError) as exc:
        return False, f"inotify_init1 unavailable ({exc})"
    if fd < 0:
        code = ctypes.get_errno()
        hint = " (fs.inotify.max_user_instances reached)" if code == errno.EMFILE else ""
        return False, f"inotify_init1 failed: {os.strerror(code)}{hint}"
    os.close(fd)
    return True, None


def tesseract() -> dict:
    """Tesseract for OCR: where it is, its version, its languages; missing, builds index pages without OCR."""
    path = shutil.which("tesseract")
    report: dict = {"path": path, "version": None, "languages": [], "error": None, "hint": None}
    if path is None:
        report.update(error="not found on PATH: pages without a text layer get no text (no OCR)", hint=TESSERACT_HINT)
        return report
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        langs = subprocess.run([path, "--list-langs"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report.update(error=f"{path} does not run ({type(exc).__name__}: {exc})", hint=TESSERACT_HINT)
        return report
    found = re.search(r"tesseract\s+v?([\d][\w.\-]*)", version.stdout + version.stderr)
    report["version"] = found.group(1) if found else None
    # "List of available languages in "/usr/share/tesseract-ocr/5/tessdata/" (2):" then one per line
    report["languages"] = [line.strip() for line in langs.stdout.splitlines()[1:] if line.strip()] if langs.returncode == 0 else []
    if report["version"] is None or langs.returncode != 0:
        report.update(error=f"{path} did not answer as Tesseract does: {(version.stderr or langs.stderr).strip()[:200]}",
                      hint=TESSERACT_HINT)
    elif "eng" not in report["languages"]:
        report.update(error="Tesseract has no English data (eng)", hint="apt-get install tesseract-ocr-eng")
    return report
