"""OCR with Tesseract 5, for pages without a usable text layer (scans, photos, image files).

A PDF page is read from its own grey render (pdftoppm, one page), not from the model's small page
image, at the resolution its text needs (textsize.py): a first render at PROBE_DPI shows how tall
its lines are, and it is reduced, or rendered again finer (small print), so that they are
textsize.LINE_PX high (10 pt print: 110 dpi, between MIN_OCR_DPI and OCR_DPI); a page that shows no
line of print (blank, or a picture alone) is not given to Tesseract at all. An image file's frame is
read the same way from its own pixels (a small one enlarged, a huge one or one with large text
reduced). Tesseract itself runs as a process (`tesseract`), not in this one through its library
(tesserocr): its recogniser is most of a page's cost either way, and a process can be bounded. Each page is bounded
like the renderer's poppler calls, in time (one deadline for the page's render and its OCR: the
--ocr-timeout) and, here, in memory too: each process runs under an address-space limit
(`ulimit -v`, OCR_MEMORY_MIB), so a page that would take the machine's memory fails alone. Every
process runs in its own process group, in the current ProcessScope (an interrupt ends them).
Tesseract runs one thread a page (OMP_THREAD_LIMIT=1): pages run side by side instead (pagetext.py).
OCR processes start lower in CPU priority while a build's encoder runs (indexing/run.ocr_below_encoder:
nice 10, in the build's session, so that the kernel's autogroup leaves the niceness in force): they take
the cores the model leaves idle without preempting its threads. $LGPT_OCR_NICE (0 to 19) sets it for
every OCR process instead (docs/performance.md, "OCR scheduling").
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from ..core.errors import EnvironmentMissing
from . import processes
from .text import PageText, clean_page_text
from .textsize import TextSize, measure

if TYPE_CHECKING:  # (imported where a TSV is read: see ingest/text.py)
    from ..core.words import PageWords

OCR_DPI = 300  # the finest a page is read at (and every page, with a fixed resolution: scripts/bench_ocr.py's baseline)
PROBE_DPI = 150  # the first render of a page, that shows its text's size (and is read as it is, or reduced, mostly)
MIN_OCR_DPI = 100  # the coarsest (large print's)
SCREEN_DPI = 100  # what a small frame (a screenshot) is measured as, to tell whether it shows print at all
PSM = "3"  # Tesseract's page segmentation: automatic (columns, tables); a single block (6) costs as much and mixes columns
DEFAULT_OCR_TIMEOUT_S = 60.0
DEFAULT_OCR_LANG = "eng"
OCR_NICE = 0  # the OCR processes' niceness over the build's (10: a CFS weight of 110 against 1024), unless $LGPT_OCR_NICE
OCR_MEMORY_MIB = 2048  # address space each process of a page's OCR may map (pdftoppm, tesseract)
SMALL_IMAGE_SIDE = 1600  # an image frame whose long side is shorter is enlarged (screenshots: small text)
LARGE_IMAGE_SIDE = 7000  # and one whose long side is longer is reduced (about A3 at 400 dpi)
INSTALL_HINT = "apt-get install tesseract-ocr tesseract-ocr-eng"
TESSLIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tesslib.py")  # run by file name: no package import
_SHELL = "/bin/sh"  # runs the tool under its limit (`ulimit -v`, then exec): found without PATH


def _import_folder(spec: importlib.machinery.ModuleSpec | None) -> str | None:
    """The folder on sys.path that a module (`spec`: a package or a single file) is imported from."""
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return os.path.dirname(next(iter(spec.submodule_search_locations)))
    return os.path.dirname(spec.origin) if spec.origin else None


class OcrFailed(Exception):
    """One page could not be read: it keeps its vectors, without OCR text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Tesseract:
    """An installed Tesseract and the languages it has; with `tessdata` (its language folder, where
    tesserocr is installed), pages are read by its library in a process of ours (tesslib.py), which imports
    it from `tesserocr_folder`: the folder this process finds it in (that process is isolated, `python -I`: a folder
    PYTHONPATH names, as `pip install --target` leaves, is not on its path otherwise)."""

    path: str
    languages: tuple[str, ...]
    tessdata: str | None = None
    tesserocr_folder: str | None = None

    @classmethod
    def find(cls, timeout_s: float = 30.0) -> Tesseract | None:
        """The Tesseract on PATH, or None where there is none (or it does not answer)."""
        path = shutil.which("tesseract")
        if path is None:
            return None
        try:
            done = subprocess.run([path, "--list-langs"], capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0:
            return None
        lines = (done.stdout or done.stderr).decode("utf-8", "replace").splitlines()
        named = re.search(r'"(.+)"', lines[0]) if lines else None  # the first line names the folder
        spec = importlib.util.find_spec("tesserocr")
        tessdata = named.group(1) if named and spec is not None else None
        return cls(path, tuple(line.strip() for line in lines[1:] if line.strip()), tessdata, _import_folder(spec) if tessdata else None)

    def command(self, source: str, lang: str, listing: bool = False) -> list[str]:
        """The process that reads `source`, a picture or (`listing`) a file naming one a line, and writes
        its text to stdout: tesslib.py where the library has every language of `lang`, else `tesseract`."""
        folder = self.tessdata
        if folder and all(os.path.isfile(os.path.join(folder, f"{part}.traineddata")) for part in lang.split("+") if part):
            return [sys.executable, "-I", TESSLIB, self.tesserocr_folder or "", folder, lang, PSM, *(["--list"] if listing else []), source]
        return [self.path, source, "stdout", "-l", lang, "--psm", PSM, "txt", "tsv"]  # (command_pages: both renderers' output)

    def check_language(self, lang: str) -> None:
        """Refuse a --ocr-lang this Tesseract cannot read (eng, or several: eng+deu)."""
        wanted = [part for part in lang.split("+") if part]
        missing = [part for part in wanted if part not in self.languages]
        if not wanted or missing:
            have = ", ".join(name for name in self.languages if name != "osd") or "none"
            package = " ".join(f"tesseract-ocr-{part.lower().replace('_', '-')}" for part in missing) or "tesseract-ocr-eng"
            raise EnvironmentMissing(f"--ocr-lang {lang}: Tesseract has no language {'+'.join(missing) or repr(lang)} "
                                     f"(it has: {have})", hint=f"apt-get install {package}, or --ocr never")

    def read_pdf_page(self, pdf: Path, page: int, lang: str, timeout_s: float = DEFAULT_OCR_TIMEOUT_S,
                      memory_mib: int = OCR_MEMORY_MIB, fixed_dpi: int | None = None) -> PageText:
        """The text of one PDF page, from its render at the resolution its text needs (or `fixed_dpi`)."""
        deadline = time.monotonic() + timeout_s
        with tempfile.TemporaryDirectory(prefix="lgpt-ocr-") as folder:
            picture = prepare_pdf_page(pdf, page, os.path.join(folder, "page"), deadline, timeout_s, memory_mib, fixed_dpi)
            return self.read_picture(picture, lang, deadline, timeout_s, memory_mib) if picture else NO_OCR_TEXT

    def read_image_frame(self, image: Path, frame: int, lang: str, timeout_s: float = DEFAULT_OCR_TIMEOUT_S,
                         memory_mib: int = OCR_MEMORY_MIB, measured: bool = True) -> PageText:
        """The text of one frame (1-based) of an image file; not `measured`: read at its own size (a small
        or huge one resized), none skipped, as before frames were measured (scripts/bench_ocr.py's baseline)."""
        deadline = time.monotonic() + timeout_s
        with tempfile.TemporaryDirectory(prefix="lgpt-ocr-") as folder:
            picture = os.path.join(folder, "frame.pgm")
            try:
                with Image.open(image) as source:
                    source.seek(frame - 1)
                    sized = _sized_for_ocr(source.convert("L"), measured)
                    if sized is None:
                        return NO_OCR_TEXT  # blank, or a picture alone
                    sized.save(picture, "PPM")
            except (OSError, ValueError, EOFError, SyntaxError, Image.DecompressionBombError) as exc:
                raise OcrFailed(f"cannot decode frame {frame}: {' '.join(str(exc).split())[:200]}") from None
            return self.read_picture(picture, lang, deadline, timeout_s, memory_mib)

    def read_picture(self, picture: str, lang: str, deadline: float, timeout_s: float, memory_mib: int,
                     dpi: int | None = None) -> PageText:
        """The text of a picture on disk, by Tesseract, by `deadline`."""
        args = self.command(picture, lang)
        resolution = ["--dpi", str(dpi)] if dpi and args[0] == self.path else []  # (the library: the picture's own)
        out = run_bounded([*args, *resolution], deadline, timeout_s, memory_mib, "Tesseract", tool="tesseract")
        return self.clean(self.pages(args, out.decode("utf-8", "replace"))[0])

    def pages(self, args: list[str], out: str) -> list[str]:
        """What the process `args` (`command`) wrote, a page's text after a form feed but the first's, as each
        page's text, a record separator and its TSV (as tesslib.py writes them; command_pages for `tesseract`)."""
        return command_pages(out) if args[0] == self.path else out.split("\f")

    @staticmethod
    def clean(out: str) -> PageText:
        """Tesseract's text of a page as page text, with its words' boxes where it gave them (its TSV after a
        record separator: `pages`)."""
        text, _, tsv = out.partition("\x1e")
        cleaned = clean_page_text(text)
        return PageText(cleaned, "ocr", tsv_words(cleaned, tsv) if tsv else None)


def command_pages(out: str) -> list[str]:
    """The `tesseract` command's stdout with its txt and tsv renderers (`Tesseract.command`) as tesslib.py's: each
    page's text, a record separator, its TSV rows. The command writes a page's rows, then a form feed (but
    the first page's), then its text: a row goes to the page its page_num names, the other lines to the text
    between form feeds (Tesseract's text holds no tab; the TSV's header is dropped)."""
    texts: list[list[str]] = []
    rows: dict[int, list[str]] = {}
    for part in out.split("\f"):
        texts.append([])
        for line in part.split("\n"):
            cells = line.split("\t")
            if len(cells) == 12:
                if cells[1].isdigit():
                    rows.setdefault(int(cells[1]), []).append(line)
            else:
                texts[-1].append(line)
    return ["\n".join(lines).replace("\x1e", " ") + "\x1e" + "\n".join(rows.get(number, [])) for number, lines in enumerate(texts, 1)]


def tsv_words(text: str, tsv: str) -> PageWords:
    """The tokens of `text` with the boxes Tesseract's TSV gives its words (fractions of the picture it read)."""
    from ..core.words import FoundWord, align

    found: list[FoundWord] = []
    width = height = 0.0
    for row in tsv.splitlines():
        cells = row.split("\t")
        if len(cells) < 12 or not cells[0].isdigit():
            continue
        level, numbers = int(cells[0]), [int(cell) if cell.lstrip("-").isdigit() else 0 for cell in cells[1:10]]
        _page, block, paragraph, line, _word, left, top, w, h = numbers
        if level == 1:
            width, height = float(w), float(h)
        elif level == 5 and width > 0 and height > 0:
            box = (left / width, top / height, (left + w) / width, (top + h) / height)
            found += [FoundWord(part, box, paragraph * 10_000 + line, block) for part in cells[11].split()]
    return align(text.split(), found)


NO_OCR_TEXT = PageText("", "ocr")  # a picture with no line of print: nothing read


def prepare_pdf_page(pdf: Path, page: int, root: str, deadline: float, timeout_s: float, memory_mib: int,
                     fixed_dpi: int | None = None) -> str | None:
    """One PDF page as Tesseract will read it, a grey TIFF at the resolution its text needs (ROOT.tif,
    its resolution recorded in it), or None where it shows no line of print; at `fixed_dpi`: every
    page, rendered at that resolution, as it was before pages were measured."""
    if fixed_dpi:
        return render_for_ocr(pdf, page, root, deadline, timeout_s, memory_mib, fixed_dpi)
    probe = _read_render(render_for_ocr(pdf, page, root + "-probe", deadline, timeout_s, memory_mib, PROBE_DPI))
    size = measure(probe, PROBE_DPI)
    if size.kind != "text":
        return None
    dpi = ocr_dpi(size, PROBE_DPI)
    if dpi > PROBE_DPI:
        return render_for_ocr(pdf, page, root, deadline, timeout_s, memory_mib, dpi)
    if dpi < PROBE_DPI:
        scale = dpi / PROBE_DPI
        probe = probe.resize((max(1, round(probe.width * scale)), max(1, round(probe.height * scale))), Image.Resampling.BOX)
    probe.save(root + ".tif", dpi=(dpi, dpi))
    return root + ".tif"


def ocr_dpi(size: TextSize, seen_at: float) -> int:
    """The resolution (a multiple of 10 dpi, MIN_OCR_DPI to OCR_DPI) that makes text measured at `seen_at` LINE_PX high."""
    return int(min(OCR_DPI, max(MIN_OCR_DPI, round(seen_at * size.scale() / 10) * 10)))


def _read_render(path: str) -> Image.Image:
    try:
        with Image.open(path) as picture:
            return picture.convert("L")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise OcrFailed(f"cannot read the page's render: {' '.join(str(exc).split())[:200]}") from None


def render_for_ocr(pdf: Path, page: int, root: str, deadline: float, timeout_s: float, memory_mib: int, dpi: int = OCR_DPI) -> str:
    """Render one PDF page at `dpi` in grey for Tesseract: the picture's path (ROOT.tif)."""
    # an uncompressed grey TIFF: Tesseract (Leptonica) reads it faster than PGM, the same pixels; it records its resolution
    run_bounded(["pdftoppm", "-r", str(dpi), "-gray", "-tiff", "-f", str(page), "-l", str(page), "-singlefile",
                 os.path.abspath(pdf), root], deadline, timeout_s, memory_mib, f"the {dpi} dpi render")
    if not os.path.exists(root + ".tif"):
        raise OcrFailed(f"pdftoppm gave no image of page {page}")
    return root + ".tif"


def _sized_for_ocr(image: Image.Image, measured: bool = True) -> Image.Image | None:
    """Enlarge a small frame (Tesseract misses text under about 10 pixels high), reduce a huge one or one
    whose text is larger than OCR needs; None for a frame that shows no line of print."""
    long_side = max(image.size)
    if 0 < long_side < SMALL_IMAGE_SIDE:
        if measured and measure(image, SCREEN_DPI).kind != "text":
            return None
        factor = min(4, -(-SMALL_IMAGE_SIDE // long_side))
        return image.resize((image.width * factor, image.height * factor), Image.Resampling.LANCZOS)
    if long_side > LARGE_IMAGE_SIDE:
        scale = LARGE_IMAGE_SIDE / long_side
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.Resampling.LANCZOS)
    if not measured:
        return image
    size = measure(image, OCR_DPI)  # as if the frame were a 300 dpi scan
    if size.kind != "text":
        return None
    scale = ocr_dpi(size, OCR_DPI) / OCR_DPI
    if scale < 0.9:
        return image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.Resampling.BOX)
    return image


def pages_with_images(pdf: Path, first: int, last: int, timeout_s: float = DEFAULT_OCR_TIMEOUT_S) -> set[int] | None:
    """Which of pages first..last draw an image of any kind (pdfimages -list: pictures, masks, inline
    images; one process for them all), or None where that cannot be told (pdfimages missing, too slow,
    or refusing the file): then any page may hold one. A page with none has nothing for OCR to read
    but text drawn as outlines."""
    try:
        out = run_bounded(["pdfimages", "-list", "-f", str(first), "-l", str(last), os.path.abspath(pdf)],
                          time.monotonic() + timeout_s, timeout_s, OCR_MEMORY_MIB, "pdfimages")
    except OcrFailed:
        return None
    rows = (line.split(maxsplit=1) for line in out.decode("utf-8", "replace").splitlines()[2:])  # under its two header lines
    return {int(row[0]) for row in rows if row and row[0].isdigit()}


def ocr_niceness() -> int:
    """How much lower than the build OCR runs: $LGPT_OCR_NICE (0 to 19; a machine's setting, or a benchmark's
    variant), else what the current process scope says (a build lowers its text scope's while its encoder runs:
    indexing/run.ocr_below_encoder), else OCR_NICE. A value that is not one is ignored."""
    value = os.environ.get("LGPT_OCR_NICE", "")
    if value.isdigit() and int(value) <= 19:
        return int(value)
    scope = processes.current()
    lowered = scope.lowered() if scope is not None else None
    return OCR_NICE if lowered is None else lowered


@lru_cache(maxsize=1)
def _nice() -> str | None:
    """coreutils' nice (a process's priority is set before it starts: no window at the normal one), if found."""
    found = shutil.which("nice", path="/usr/bin:/bin")
    return shlex.quote(found) if found else None


def run_bounded(args: list[str], deadline: float, timeout_s: float, memory_mib: int, what: str, tool: str | None = None) -> bytes:
    """Run a tool under an address-space limit until `deadline`, in its own process group, in the
    current ProcessScope: its stdout, or OcrFailed (missing, too slow, out of memory, failed; `tool`
    names it there, else its program's name)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise OcrFailed(f"the page's OCR did not finish within {timeout_s:g} s (see --ocr-timeout)")
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        proc = processes.Tracked(bounded_command(args, memory_mib), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except FileNotFoundError:
        raise OcrFailed(f"{_SHELL} is missing: cannot run {what}") from None
    try:
        out, said = proc.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        processes.kill_group(proc)
        proc.communicate()
        raise OcrFailed(f"{what} did not finish within the page's {timeout_s:g} s and was stopped (see --ocr-timeout)") from None
    if proc.interrupted:
        raise processes.Stopped("interrupted")
    if proc.returncode != 0:
        raise OcrFailed(failure(tool or args[0], proc.returncode, said, memory_mib))
    return out


def bounded_command(args: list[str], memory_mib: int) -> list[str]:
    """`args` run under an address-space limit (and $LGPT_OCR_NICE lower in priority), by the shell."""
    nice, niceness = _nice(), ocr_niceness()
    lowered = f'{nice} -n {niceness} ' if nice and niceness else ""
    return [_SHELL, "-c", f'ulimit -v {memory_mib * 1024} && exec {lowered}"$@"', "sh", *args]


def failure(tool: str, code: int, said: bytes, memory_mib: int) -> str:
    """Why a tool that exited with `code`, saying `said`, failed a page."""
    text = " ".join(said.decode("utf-8", "replace").split())[:300] or f"exit status {code}"
    if code == 127 and "not found" in text:  # the shell's exec
        return f"{tool} is not installed"
    if code < 0 or any(word in text.lower() for word in ("alloc", "memory", "map")):
        text += f" (each OCR process may map {memory_mib} MiB)"
    return f"{os.path.basename(tool)} failed: {text}"
