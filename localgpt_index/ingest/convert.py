"""Turn office, text, CSV, HTML and Markdown files into PDF, in a staging folder.

Nothing is written next to the user's files: each input is copied into the
staging folder under a plain name first, which also keeps odd file names away
from the converters.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from abc import ABC, abstractmethod
from pathlib import Path

from . import processes
from .confine import confine_html
from ..core.errors import DocumentError

LIBREOFFICE_INSTALL_HINT = (
    "install LibreOffice (Debian/Ubuntu: apt-get install libreoffice-writer-nogui "
    "libreoffice-calc-nogui libreoffice-impress-nogui; macOS: brew install --cask libreoffice)"
)

OFFICE_SUFFIXES = frozenset(
    {".docx", ".doc", ".odt", ".rtf", ".pptx", ".ppt", ".odp", ".xlsx", ".xls", ".ods", ".html", ".htm", ".txt", ".md", ".markdown",
     ".dotx", ".dot", ".ott", ".potx", ".pot", ".otp", ".xltx", ".xlt", ".ots",  # templates convert as their documents do
     ".csv", ".tsv"}
)

# LibreOffice's import filter (with its options) and export filter for the files of a batch key that needs
# them: HTML in Writer, not Writer/Web, so that the PDF export filter applies; text as UTF-8; CSV and TSV as
# spreadsheets (Calc's CSV filter: the separator, '"' around text, UTF-8, from line 1).
_CSV = "Text - txt - csv (StarCalc)"
FILTERS: dict[str, tuple[str, str]] = {
    "html": ("HTML (StarWriter)", "pdf:writer_pdf_Export"),
    "text": ("Text (encoded):UTF8,LF,,,", "pdf"),
    "csv": (f"{_CSV}:44,34,76,1", "pdf:calc_pdf_Export"),  # 44: ','
    "tsv": (f"{_CSV}:9,34,76,1", "pdf:calc_pdf_Export"),  # 9: a tab
}


# What the first bytes of each office format must be; a file that says otherwise is refused
# before a converter sees it (LibreOffice would import random bytes as plain text).
_ZIP = (b"PK\x03\x04",)
_OLE2 = (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",)
SIGNATURES: dict[str, tuple[tuple[bytes, ...], str]] = {
    **{s: (_ZIP, "a ZIP archive") for s in (".docx", ".pptx", ".xlsx", ".odt", ".odp", ".ods",
                                              ".dotx", ".potx", ".xltx", ".ott", ".otp", ".ots")},
    **{s: (_OLE2, "an OLE2 compound file") for s in (".doc", ".ppt", ".xls", ".dot", ".pot", ".xlt")},
    ".rtf": ((b"{\\rtf",), "RTF"),
}


def check_signature(path: Path, suffix: str) -> None:
    """Refuse an office file whose bytes are not of its kind."""
    expected = SIGNATURES.get(suffix)
    if expected is None:
        return
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        raise DocumentError("convert", f"cannot read the file: {exc.strerror or exc}") from exc
    if not head.startswith(expected[0]):
        raise DocumentError("convert", f"not a valid {suffix} file: its bytes are not {expected[1]}")


class MissingConverter(DocumentError):
    """No converter for this type is installed: an environment problem, not the document's."""

    def __init__(self, suffix: str) -> None:
        super().__init__("convert", f"no converter for {suffix} files: {LIBREOFFICE_INSTALL_HINT}")


class Converter(ABC):
    """Converts some document types to PDF.

    Work happens in two steps: `stage` puts the input into a work folder under a
    plain name; `convert_staged` converts staged files, several at once where the
    converter can (`batch_key` says which files may share one run).
    """

    name: str
    suffixes: frozenset[str]

    def batch_key(self, suffix: str) -> str | None:
        """Files with the same key may be converted in one run; None: one at a time."""
        return None

    def stage(self, source: Path, workdir: Path, stem: str, root: Path | None = None) -> tuple[Path, list[str]]:
        """Put `source` into `workdir` under a plain name; returns it and notes on what was changed.

        HTML is confined to `root` (the indexed folder) on the way: see confine.py."""
        workdir.mkdir(parents=True, exist_ok=True)
        suffix = source.suffix.lower()
        staged = workdir / f"{stem}{suffix}"
        try:
            if suffix in (".html", ".htm"):
                return self._stage_html(_read_text(source), source, staged, root)
            shutil.copyfile(source, staged)
        except OSError as exc:
            raise DocumentError("convert", f"cannot read the file: {exc.strerror or exc}") from None
        return staged, []

    @staticmethod
    def _stage_html(text: str, source: Path, staged: Path, root: Path | None) -> tuple[Path, list[str]]:
        confined = confine_html(text, source.parent, root or source.parent)
        staged.write_text(confined.html, "utf-8")
        notes = [f"dropped {len(confined.dropped)} reference(s) that would reach outside the folder: "
                 + "; ".join(confined.dropped[:5]) + (" ..." if len(confined.dropped) > 5 else "")] if confined.dropped else []
        return staged, notes

    @abstractmethod
    def convert_staged(self, staged: list[Path]) -> list[Path | DocumentError]:
        """PDFs for staged files (all in one folder, one batch key), or the error of each."""

    def convert(self, source: Path, workdir: Path, root: Path | None = None) -> Path:
        """Write a PDF for `source` inside `workdir` and return its path; raise DocumentError."""
        result = self.convert_staged([self.stage(source, workdir, "document", root)[0]])[0]
        if isinstance(result, DocumentError):
            raise result
        return result


def _read_text(source: Path, limit: int = 64 << 20) -> str:
    with open(source, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise DocumentError("convert", f"larger than {limit >> 20} MiB of text")
    return data.decode("utf-8", "replace")


@functools.cache
def network_isolation() -> list[str]:
    """The command prefix that runs a converter without network access (a network namespace of
    its own, with only a loopback that is down), or [] where the OS does not allow it."""
    unshare = shutil.which("unshare")
    if not unshare or not sys.platform.startswith("linux"):
        return []
    for prefix in ([unshare, "--net"], [unshare, "--user", "--map-root-user", "--net"]):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return []



def find_soffice() -> str | None:
    for name in ("soffice", "libreoffice"):
        found = shutil.which(name)
        if found:
            return found
    mac = "/Applications/LibreOffice.app/Contents/MacOS/soffice"
    return mac if os.path.exists(mac) else None


class LibreOfficeConverter(Converter):
    """LibreOffice headless, with a profile of its own per thread, so that conversions can run
    side by side and never meet a LibreOffice the user has open."""

    name = "libreoffice"
    suffixes = OFFICE_SUFFIXES - {".md", ".markdown"}

    def __init__(self, binary: str, timeout_s: float = 120.0) -> None:
        self.binary = binary
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._profiles: list[Path] = []
        self._lock = threading.Lock()

    @property
    def profile_dir(self) -> Path:
        profile = getattr(self._local, "profile", None)
        if profile is None:
            profile = self._local.profile = Path(tempfile.mkdtemp(prefix="lgpt-lo-profile-"))
            with self._lock:
                self._profiles.append(profile)
        return profile

    def close(self) -> None:
        with self._lock:
            for profile in self._profiles:
                shutil.rmtree(profile, ignore_errors=True)
            self._profiles.clear()

    def batch_key(self, suffix: str) -> str | None:
        # One run applies one import filter to all its files.
        return {".html": "html", ".htm": "html", ".txt": "text", ".csv": "csv", ".tsv": "tsv"}.get(suffix, "office")

    def convert_staged(self, staged: list[Path]) -> list[Path | DocumentError]:
        """One LibreOffice run for all of `staged` (its start-up is most of the cost of a small
        file). If the run times out or misses a file, those files are converted one by one,
        so that each gets its own timeout and its own error."""
        outdir = staged[0].parent / "out"
        outdir.mkdir(exist_ok=True)
        key = self.batch_key(staged[0].suffix.lower())
        cmd = [*network_isolation(), self.binary, f"-env:UserInstallation={self.profile_dir.resolve().as_uri()}"]
        cmd += ["--headless", "--invisible", "--nologo", "--nodefault", "--nolockcheck", "--norestore"]
        target = "pdf"
        if key in FILTERS:
            infilter, target = FILTERS[key]
            cmd += [f"--infilter={infilter}"]
        cmd += ["--convert-to", target, "--outdir", str(outdir), *map(str, staged)]
        # LibreOffice's own temporary files go inside its profile, which close() removes even
        # after the process was killed (it cannot clean up after a SIGKILL)
        scratch = self.profile_dir / "tmp"
        scratch.mkdir(exist_ok=True)
        env = {**os.environ, "TMPDIR": str(scratch), "TMP": str(scratch), "TEMP": str(scratch)}
        proc = processes.Tracked(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        try:
            output, _ = proc.communicate(timeout=self.timeout_s)
            said = " ".join(output.decode("utf-8", "replace").split())[-300:]
            timed_out = False
        except subprocess.TimeoutExpired:
            processes.kill_group(proc)
            proc.communicate()
            said, timed_out = "", True
        results: list[Path | DocumentError] = []
        for path in staged:
            pdf = outdir / (path.stem + ".pdf")
            if pdf.exists() and pdf.stat().st_size > 0:
                results.append(pdf)
            elif proc.interrupted:
                raise processes.Stopped("interrupted")
            elif len(staged) > 1:
                pdf.unlink(missing_ok=True)
                results.append(self.convert_staged([path])[0])
            elif timed_out:
                results.append(
                    DocumentError("convert", f"LibreOffice did not finish within {self.timeout_s:g} s and was stopped")
                )
            else:
                results.append(
                    DocumentError("convert", f"LibreOffice could not convert it (exit {proc.returncode}): {said or 'no output'}")
                )
        return results


class MarkdownConverter(Converter):
    """Markdown -> HTML (markdown-it, CommonMark with tables) -> PDF through LibreOffice."""

    name = "markdown+libreoffice"
    suffixes = frozenset({".md", ".markdown"})

    def __init__(self, office: LibreOfficeConverter) -> None:
        self.office = office

    def batch_key(self, suffix: str) -> str | None:
        return "html"

    def stage(self, source: Path, workdir: Path, stem: str, root: Path | None = None) -> tuple[Path, list[str]]:
        from markdown_it import MarkdownIt

        try:
            text = _read_text(source)
        except OSError as exc:
            raise DocumentError("convert", f"cannot read the file: {exc.strerror or exc}") from None
        body = MarkdownIt("commonmark").enable("table").render(text)
        workdir.mkdir(parents=True, exist_ok=True)
        page = f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{body}</body></html>'
        return self._stage_html(page, source, workdir / f"{stem}.html", root)

    def convert_staged(self, staged: list[Path]) -> list[Path | DocumentError]:
        return self.office.convert_staged(staged)


def word_is_installed() -> bool:
    """docx2pdf drives Microsoft Word, which exists only on Windows and macOS."""
    if sys.platform == "darwin":
        return os.path.exists("/Applications/Microsoft Word.app")
    if sys.platform == "win32":
        try:
            import winreg

            winreg.OpenKey(winreg.HKEY_CLASSES_ROOT, r"Word.Application").Close()
            return True
        except OSError:
            return False
    return False


class Docx2PdfConverter(Converter):
    """Microsoft Word through docx2pdf: the most faithful rendering of .docx where Word exists."""

    name = "docx2pdf"
    suffixes = frozenset({".docx"})

    def convert_staged(self, staged: list[Path]) -> list[Path | DocumentError]:
        from docx2pdf import convert as word_convert

        results: list[Path | DocumentError] = []
        for path in staged:
            pdf = path.with_suffix(".pdf")
            try:
                word_convert(str(path), str(pdf))
            except Exception as exc:  # Word automation raises anything
                results.append(DocumentError("convert", f"Microsoft Word could not convert it: {exc}"))
                continue
            ok = pdf.exists() and pdf.stat().st_size > 0
            results.append(pdf if ok else DocumentError("convert", "Microsoft Word wrote no PDF"))
        return results


class ConverterSet:
    """The converters found on this machine, picked by file type."""

    def __init__(self, converters: list[Converter]) -> None:
        self.converters = converters

    @classmethod
    def detect(cls, timeout_s: float = 120.0) -> "ConverterSet":
        found: list[Converter] = []
        if word_is_installed():
            found.append(Docx2PdfConverter())
        soffice = find_soffice()
        if soffice:
            office = LibreOfficeConverter(soffice, timeout_s=timeout_s)
            found += [office, MarkdownConverter(office)]
        return cls(found)

    def for_suffix(self, suffix: str) -> Converter:
        for converter in self.converters:
            if suffix in converter.suffixes:
                return converter
        raise MissingConverter(suffix)

    def close(self) -> None:
        for converter in self.converters:
            if isinstance(converter, LibreOfficeConverter):
                converter.close()
