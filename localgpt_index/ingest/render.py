"""Turn a PDF or an image file into page images at the size the model consumes.

Every poppler process runs with a timeout in its own process group, in the current run's
ProcessScope (a 4 KB PDF can keep pdftoppm busy forever), and image files are decoded one
frame at a time. Nothing is patched or filtered at import: poppler's tools run directly (not
through pdf2image), and PIL's DecompressionBombWarning for a picture between its warning and
error limits (89 to 179 megapixels: it decodes, and is resized to the model's size at once) is
left to the application to show or not (the CLI hides it: cli/app.py).
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from PIL import Image

from . import processes
from ..core.errors import DocumentError
from ..core.sizes import DEFAULT_LONG_SIDE, PixelBudget, RenderSize, fitted_size, grid_cell, render_size_for  # noqa: F401 (re-exported)

PDF_DPI = 200  # what pdf2image renders at by default: the size a plain pipeline hands the processor


DEFAULT_RENDER_TIMEOUT_S = 60.0  # per call of pdftoppm (a few pages) or pdfinfo


PagePoints = tuple[float, float, bool]  # a page's (width, height) in points as shown, and whether /Rotate turns it a quarter
ALL_PAGES = 1_000_000_000  # pdfinfo's -l past the last page: it stops at the last one


@dataclass(frozen=True)
class PdfPages:
    """What one pdfinfo call says about a PDF: its page count and, where asked for, every page's size."""

    count: int
    points: tuple[PagePoints, ...] = ()


def pdf_page_count(pdf: Path, timeout_s: float = DEFAULT_RENDER_TIMEOUT_S) -> int:
    return read_pdf_pages(pdf, timeout_s).count


def read_pdf_pages(pdf: Path, timeout_s: float = DEFAULT_RENDER_TIMEOUT_S, points: bool = False) -> PdfPages:
    """The page count of `pdf` and, with `points`, every page's size (for a PixelBudget: the
    render then needs no pdfinfo of its own)."""
    try:
        with open(pdf, "rb") as handle:
            head = handle.read(1024)
    except OSError as exc:
        raise DocumentError("render", f"cannot read the file: {exc.strerror or exc}") from None
    if b"%PDF-" not in head:
        raise DocumentError("render", "not a PDF: no %PDF- header in its first 1024 bytes")
    info = _pdfinfo(pdf, timeout_s, (1, ALL_PAGES) if points else None)
    count = info["Pages"]
    if count <= 0:
        raise DocumentError("render", "the PDF has no pages")
    return PdfPages(count, _points_from(info, 1, count) if points else ())


def poppler_error(tool: str, failure: str, what: str = "", said: str = "", timeout_s: float = 0.0) -> DocumentError:
    """The one message for each way a poppler tool fails on `what`: `failure` is "missing" (not
    installed), "timeout" (stopped after timeout_s) or "failed" (it refused the file, and `said` why)."""
    if failure == "missing":
        return DocumentError("render", f"poppler's {tool} is not installed (apt-get install poppler-utils)")
    if failure == "timeout":
        return DocumentError("render", f"poppler's {tool} did not finish within {timeout_s:g} s{f' ({what})' if what else ''} "
                                       "and was stopped (see --render-timeout)")
    said = " ".join(said.split())[:300]
    if "password" in said.lower():
        return DocumentError("render", f"the PDF is encrypted and needs a password (poppler: {said})")
    if "page count 0" in said.lower():
        return DocumentError("render", "the PDF has no pages")
    return DocumentError("render", f"poppler failed on {what}: {said}")


def _run_poppler(args: list[str], timeout_s: float, what: str, check: bool = True) -> tuple[bytes, str]:
    """Run a poppler tool with a timeout in its own process group, in the current ProcessScope: its
    stdout and what it said (stderr, or its exit status); a poppler_error if it is missing, too slow,
    or (with `check`) fails."""
    try:
        proc = processes.Tracked(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise poppler_error(args[0], "missing") from None
    try:
        out, said = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.kill_group(proc)
        proc.communicate()
        raise poppler_error(args[0], "timeout", what, timeout_s=timeout_s) from None
    if proc.interrupted:
        raise processes.Stopped("interrupted")
    text = said.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"
    if check and proc.returncode != 0:
        raise poppler_error(args[0], "failed", what, text)
    return out, text


def _pdfinfo(pdf: Path, timeout_s: float, pages: tuple[int, int] | None = None) -> dict:
    """pdfinfo's fields ("Key: value" lines, "Pages" an int), with pages first..last's sizes where
    asked. Its exit status is not what decides: it warns about a damaged file and goes on."""
    what = "this PDF" if pages is None or pages[1] == ALL_PAGES else f"the sizes of pages {pages[0]}-{pages[1]}"
    span = ["-f", str(pages[0]), "-l", str(pages[1])] if pages else []
    out, said = _run_poppler(["pdfinfo", os.path.abspath(pdf), *span], timeout_s, what, check=False)
    info: dict = {}
    for line in out.decode("utf-8", "ignore").split("\n"):
        key, _, value = line.partition(":")
        if key:
            info[key] = value.strip()
    try:
        info["Pages"] = int(info["Pages"])
    except (KeyError, ValueError):
        raise poppler_error("pdfinfo", "failed", what, said) from None
    return info


def render_pdf_pages(
    pdf: Path, size: RenderSize, first: int, last: int, timeout_s: float = DEFAULT_RENDER_TIMEOUT_S,
    points: Sequence[PagePoints] | None = None,
) -> list[Image.Image]:
    """Render pages first..last (1-based, inclusive) of `pdf`: with a PixelBudget each page at the
    size the processor gives its 200 dpi rendering (one poppler call per run of equal sizes).
    `points`: those pages' sizes, where read_pdf_pages has them already."""
    if not isinstance(size, PixelBudget):
        return _poppler_pages(pdf, size if size is not None else DEFAULT_LONG_SIDE, first, last, timeout_s)
    sizes = []
    for width, height, turned in points if points is not None else _page_points(pdf, first, last, timeout_s):
        # pdftoppm's pixels at PDF_DPI (it rounds up); its -scale-to-x/y apply before a page's /Rotate
        fitted = size.fit(math.ceil(width * (PDF_DPI / 72.0)), math.ceil(height * (PDF_DPI / 72.0)))
        sizes.append(fitted[::-1] if turned else fitted)
    images: list[Image.Image] = []
    start = first
    for number in range(first, last + 1):
        if number == last or sizes[number + 1 - first] != sizes[start - first]:
            images += _poppler_pages(pdf, sizes[start - first], start, number, timeout_s)
            start = number + 1
    return images


def _poppler_pages(pdf: Path, scale: int | tuple[int, int] | None, first: int, last: int, timeout_s: float,
                   dpi: int = PDF_DPI) -> list[Image.Image]:
    """pdftoppm's pages first..last at `dpi`, the long side scaled to `scale`, or to exactly
    (width, height), as pdf2image's convert_from_path(size=scale) gives them (None: not scaled).

    pdftoppm runs directly: convert_from_path starts two more processes each call (pdfinfo for
    the page count, pdftoppm -v for its version), 14 ms of CPU on this project's 2-core machine,
    against 37 ms for pdftoppm's 5 pages. Its files go to a temporary folder (from a pipe, pdf2image
    split them in Python: twice the render thread's CPU, holding the GIL)."""
    scaling: list[str] = []
    if isinstance(scale, tuple):
        scaling = ["-scale-to-x", str(scale[0]), "-scale-to-y", str(scale[1])]
    elif scale is not None:
        scaling = ["-scale-to", str(scale)]
    what = f"pages {first}-{last}"
    with tempfile.TemporaryDirectory(prefix="lgpt-render-") as folder:
        _run_poppler(["pdftoppm", "-r", str(dpi), "-f", str(first), "-l", str(last), *scaling,
                      os.path.abspath(pdf), os.path.join(folder, "page")], timeout_s, what)
        # page-7.ppm, page-08.ppm...: pdftoppm pads the number to the width of the document's page count
        files = sorted(Path(folder).glob("page-*.ppm"), key=lambda file: int(file.stem.rpartition("-")[2]))
        images = [_read_page(file) for file in files]
    if len(images) != last - first + 1:
        raise DocumentError("render", f"poppler returned {len(images)} images for {what}")
    return images


def _read_page(file: Path) -> Image.Image:
    with Image.open(file) as image:
        image.load()
        return image if image.mode == "RGB" else image.convert("RGB")


def _page_points(pdf: Path, first: int, last: int, timeout_s: float) -> tuple[PagePoints, ...]:
    """The sizes of pages first..last, from pdfinfo."""
    return _points_from(_pdfinfo(pdf, timeout_s, (first, last)), first, last)


def _points_from(info: dict, first: int, last: int) -> tuple[PagePoints, ...]:
    """Pages first..last's sizes in pdfinfo's output (_pdfinfo's fields)."""
    sizes = []
    for number in range(first, last + 1):
        said = str(info.get(f"Page {number:4d} size", ""))
        try:
            width, _, height = said.split()[:3]
            points = (float(width), float(height))
        except ValueError:
            raise DocumentError("render", f"poppler gives no size for page {number} ({said[:80]!r})") from None
        if not all(0 < p < 1e6 for p in points):
            raise DocumentError("render", f"page {number} has an impossible size: {said[:80]}")
        turned = str(info.get(f"Page {number:4d} rot", "0")).strip() in ("90", "270")
        sizes.append((*(points[::-1] if turned else points), turned))
    return tuple(sizes)


def render_page_at_dpi(pdf: Path, page: int, dpi: int, timeout_s: float = DEFAULT_RENDER_TIMEOUT_S) -> Image.Image:
    """One page at a resolution for people and answerers (not the model's size)."""
    return _poppler_pages(pdf, None, page, page, timeout_s, dpi=dpi)[0]


def image_frame_count(path: Path) -> int:
    """How many pages an image file has (a multi-page TIFF has several), without decoding them."""
    with _decoding(path) as image:
        return max(1, int(getattr(image, "n_frames", 1)))


def image_file_pages(path: Path, size: RenderSize, first: int = 1) -> Iterator[Image.Image]:
    """The frames of an image file from `first` (1-based) on, decoded one at a time and resized for the model."""
    with _decoding(path) as image:
        count = max(1, int(getattr(image, "n_frames", 1)))
        for number in range(first - 1, count):
            try:
                image.seek(number)
                frame = _fit(image.convert("RGB"), size)
            except Image.DecompressionBombError as exc:
                raise DocumentError("render", f"frame {number + 1} is too large to decode safely: {_short(exc)}") from None
            except (OSError, ValueError, SyntaxError, EOFError) as exc:
                raise DocumentError("render", f"cannot decode frame {number + 1}: {_short(exc)}") from None
            yield frame


@contextmanager
def _decoding(path: Path) -> Iterator[Image.Image]:
    """Open an image file, with decoding errors turned into DocumentErrors."""
    try:
        image = Image.open(path)
    except Image.DecompressionBombError as exc:
        raise DocumentError("render", f"image too large to decode safely: {_short(exc)}") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise DocumentError("render", f"cannot decode the image: {_short(exc)}") from None
    try:
        yield image
    finally:
        image.close()


def _fit(image: Image.Image, size: RenderSize) -> Image.Image:
    target = fitted_size(size, image.width, image.height)
    return image if image.size == target else image.resize(target, Image.Resampling.BICUBIC)


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


def size_setting(size: RenderSize) -> list[int] | None:
    """A render size as an index records it: [width, height], or [long side]; None where each
    page gets its own size (a PixelBudget: the index records its max_visual_tokens)."""
    if size is None or isinstance(size, PixelBudget):
        return None
    return list(size) if isinstance(size, tuple) else [int(size)]
