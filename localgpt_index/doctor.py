"""What this machine has and lacks for building an index, in one report (`lgpt-index doctor`).

Beside what `build` needs, the report says what other commands use (`capabilities`): the MCP
server's SDK, the watcher (watchfiles, and whether inotify is usable here or the watcher polls), and
Tesseract for OCR. None of them is needed to build an index, so none makes `doctor` fail: each says
what is missing and how to add it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from importlib import import_module, metadata
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .core.cpus import available_cpus
from .core.errors import LgptError
from .ingest.convert import find_soffice, network_isolation, word_is_installed
from .models.resolve import DEFAULT_MODEL, ModelRef, ModelSpec, fingerprint_in, hub_offline, resolve_model, resolve_recorded, same_model

if TYPE_CHECKING:
    from .index.format.manifest import ModelInfo
    from .models.device import Capabilities

INOTIFY = Path("/proc/sys/fs/inotify")
TESSERACT_HINT = "apt-get install tesseract-ocr tesseract-ocr-eng (other languages: tesseract-ocr-LANG) / brew install tesseract"
PACKAGES = ("torch", "torchvision", "transformers", "colpali-engine", "byaldi", "pdf2image", "docx2pdf", "huggingface-hub")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _tool_version(cmd: list[str], pattern: str) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, out.stdout + out.stderr)
    return match.group(1) if match else (out.stdout + out.stderr).strip()[:80] or None


def _converters() -> dict:
    soffice = find_soffice()
    pdftoppm = shutil.which("pdftoppm")
    pdfinfo = shutil.which("pdfinfo")
    return {
        "libreoffice": {
            "path": soffice,
            "version": _tool_version([soffice, "--version"], r"LibreOffice ([\d.]+)") if soffice else None,
        },
        "word": word_is_installed(),
        # converters run in a network namespace of their own where the OS allows it
        "network_isolation": " ".join(network_isolation()) or None,
        "poppler": {
            "path": pdftoppm,
            "pdfinfo": pdfinfo,
            "version": _tool_version([pdftoppm, "-v"], r"version ([\d.]+)") if pdftoppm else None,
        },
    }


def _devices() -> tuple[dict, Capabilities | None]:
    from .models.device import detect_capabilities

    try:
        caps = detect_capabilities()
    except ImportError:  # no torch: the probe says so, and build's models cannot run here
        return {"cuda": [], "mps": False, "cpu": {"cores": available_cpus(), "machine": platform.machine(), "native_bf16": None}}, None
    return {
        "cuda": [
            {
                "index": gpu.index,
                "name": gpu.name,
                "compute_capability": f"{gpu.capability[0]}.{gpu.capability[1]}",
                "memory_gib": round(gpu.memory_bytes / 2**30, 1),
                "native_bf16": gpu.native_bf16,
            }
            for gpu in caps.cuda
        ],
        "mps": caps.mps,
        "cpu": {"cores": available_cpus(), "machine": platform.machine(), "native_bf16": caps.cpu_bf16},
    }, caps


def _cache() -> dict:
    from huggingface_hub import constants

    return {"hf_home": constants.HF_HOME, "hub_cache": constants.HF_HUB_CACHE, "offline": hub_offline()}


def diagnose(spec: ModelSpec = ModelSpec(), recorded: "ModelInfo | None" = None, index: str | None = None) -> dict:
    """Everything `build` depends on; `missing` lists what it lacks here. The model checked is the
    spec's, else the one the index at `index` was built with (`recorded`), else the default."""
    from .models.device import choose_precision

    missing: list[str] = []
    devices, caps = _devices()
    try:
        if caps is None:
            raise LgptError("torch cannot be imported: pip install torch (https://pytorch.org/get-started/locally/)")
        precision = choose_precision(caps, spec.device, spec.dtype)
        probe = {**precision.to_dict(), "warnings": list(precision.warnings)}
    except LgptError as exc:
        precision = None
        probe = {"error": exc.message}
        missing.append(f"device: {exc.message}")
    converters = _converters()
    if not converters["poppler"]["path"] or not converters["poppler"]["pdfinfo"]:
        missing.append("poppler (pdftoppm, pdfinfo): apt-get install poppler-utils / brew install poppler")
    if not converters["libreoffice"]["path"] and not converters["word"]:
        missing.append("LibreOffice, to convert office, HTML, text and Markdown files: apt-get install "
                       "libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui")

    model_report = _model_report(*_target(spec.id, recorded, index), precision, load=spec.id is not None)
    if not model_report["available"]:
        missing.append(f"model {model_report['id']}: {model_report['error']}")

    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {name: _version(name) for name in PACKAGES},
        "devices": devices,
        "probe": probe,
        "converters": converters,
        "model_cache": _cache(),
        "model": model_report,
        "capabilities": capabilities(),  # mcp, watch, OCR: reported, not needed by build
        "missing": missing,
        "ok": not missing,
    }


def _target(model: str | None, recorded: "ModelInfo | None", index: str | None) -> tuple[str, dict, Callable[[], ModelRef]]:
    """The model to check, where it was named, and how to resolve it (never downloading)."""
    if model is not None:
        return model, {"source": "--model", "index": None}, lambda: resolve_model(model, allow_download=False)
    if recorded is not None:
        def resolve() -> ModelRef:
            ref = resolve_recorded(recorded.id, recorded.path, recorded.revision, allow_download=False)
            if not same_model(ref, recorded.fingerprint, recorded.fingerprint_scheme):
                raise LgptError(f"{ref.path} is not the model the index was built with: its fingerprint is "
                                f"{fingerprint_in(ref, recorded.fingerprint_scheme)}, the index recorded {recorded.fingerprint}. "
                                "Queries and builds will refuse it.")
            return ref

        return recorded.id, {"source": "index", "index": index}, resolve
    return DEFAULT_MODEL, {"source": "default", "index": None}, lambda: resolve_model(DEFAULT_MODEL, allow_download=False)


def _model_report(model: str, origin: dict, resolve: Callable[[], ModelRef], precision, load: bool) -> dict:
    from .models.guard import declared_dtypes, stored_dtypes

    report: dict = {"id": model, **origin, "available": False, "path": None, "revision": None, "error": None,
                    "declared_dtypes": {}, "stored_dtypes": {}, "audit": [], "smoke_test": None}
    try:
        ref = resolve()
    except LgptError as exc:
        report["error"] = exc.message + (f" {exc.hint}" if exc.hint else "")
        return report
    from .models.families import family_named

    family = family_named(ref.family)
    report.update(available=True, path=ref.path, revision=ref.revision, family=ref.family,
                  family_name=family.display, loader=family.loader.name, dynamic_resolution=family.dynamic)
    try:
        report["declared_dtypes"] = declared_dtypes(ref.path)
        report["stored_dtypes"] = {group: dict(counter) for group, counter in stored_dtypes(ref.path).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error) as exc:  # a damaged checkpoint
        report.update(available=False, error=f"{ref.path}: its config or weight headers cannot be read "
                                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}).")
        return report
    if load and precision is not None:
        report["audit"], report["smoke_test"] = _load_and_audit(ref, precision)
    return report


def _image_tokens(encoder, page) -> int | None:
    """How many image tokens the processor gives a page of A4 proportions."""
    image_token = getattr(encoder.processor, "image_token_id", None)
    if image_token is None:
        return None
    return int((encoder.processor.process_images([page])["input_ids"] == image_token).sum())


def _a4_page(size) -> tuple[int, int]:
    """(width, height) an A4 page is rendered at for the model."""
    from .ingest.render import PDF_DPI, PixelBudget

    if isinstance(size, PixelBudget):
        return size.fit(210 / 25.4 * PDF_DPI, 297 / 25.4 * PDF_DPI)
    return size if isinstance(size, tuple) else (round(size / 2**0.5), size)


def _load_and_audit(ref, precision) -> tuple[list[dict], dict]:
    """Load through the real path (byaldi or colpali-engine), run one page and one query, return the audit."""
    import time

    from PIL import Image

    from .models.loading import open_encoder

    started = time.perf_counter()
    try:
        encoder = open_encoder(ref, precision, batch_size=1)
    except LgptError as exc:
        return [], {"ok": False, "error": exc.message, "hint": exc.hint}
    loaded = time.perf_counter()
    page_image = Image.new("RGB", _a4_page(encoder.render_size or 448), "white")
    try:
        page = encoder.encode_pages([page_image])[0]
        query = encoder.encode_queries(["doctor"])[0]
        smoke = {"ok": True, "load_s": round(loaded - started, 2), "page_vectors": list(page.shape),
                 "query_vectors": list(query.shape), "image_tokens_per_page": _image_tokens(encoder, page_image),
                 "vector_bytes_per_page": int(page.shape[0] * page.shape[1] * 2), "render_size": list(page_image.size)}
    except LgptError as exc:
        smoke = {"ok": False, "error": exc.message, "hint": exc.hint}
    return [fix.to_dict() for fix in encoder.dtype_fixes], smoke


# what other commands use: reported, never a failure


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
