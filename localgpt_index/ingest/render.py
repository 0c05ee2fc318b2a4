"""Turn a PDF or an image file into page images at the size the model consumes.

Every poppler process runs with a timeout in its own process group (a 4 KB PDF can
keep pdftoppm busy forever), and image files are decoded one frame at a time.
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from PIL import Image

from . import processes
from ..core.errors import DocumentError
from ..core.sizes import PixelBudget, RenderSize, grid_cell, render_size_for  # noqa: F401 (re-exported)

DEFAULT_LONG_SIDE = 1024
PDF_DPI = 200  # what pdf2image renders at by default: the size a plain pipeline hands the processor


DEFAULT_RENDER_TIMEOUT_S = 60.0  # per call of pdftoppm (a few pages) or pdfinfo

processes.use_in_pdf2image()
# A picture between PIL's warning and error limits (89 to 179 megapixels) decodes and is
# resized to the model's size at once; its warning is not printed raw in the middle of a
# build. (A filter set once: catch_warnings is not safe across the render threads.)
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


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
    from pdf2image import pdfinfo_from_path
    from pdf2image.exceptions import PDFInfoNotInstalledError, PDFPopplerTimeoutError

    try:
        with open(pdf, "rb") as handle:
            head = handle.read(1024)
    except OSError as exc:
        raise DocumentError("render", f"cannot read the file: {exc.strerror or exc}") from None
    if b"%PDF-" not in head:
        raise DocumentError("render", "not a PDF: no %PDF- header in its first 1024 bytes")
    pages = {"first_page": 1, "last_page": ALL_PAGES} if points else {}
    try:
        info = pdfinfo_from_path(str(pdf), timeout=_whole_seconds(timeout_s), **pages)
    except PDFInfoNotInstalledError:
        raise DocumentError("render", "poppler's pdfinfo is not installed (apt-get install poppler-utils)") from None
    except PDFPopplerTimeoutError:
        raise DocumentError("render", f"poppler's pdfinfo did not finish within {timeout_s:g} s and was stopped") from None
    except processes.Stopped:
        raise
    except Exception as exc:  # pdf2image raises several types for broken files
        said = _short(exc)
        if "password" in said.lower():
            raise DocumentError("render", f"the PDF is encrypted and needs a password (poppler: {said})") from None
        if "page count 0" in said.lower():
            raise DocumentError("render", "the PDF has no pages") from None
        raise DocumentError("render", f"poppler cannot read this PDF: {said}") from None
    count = int(info.get("Pages", 0))
    if count <= 0:
        raise DocumentError("render", "the PDF has no pages")
    return PdfPages(count, _points_from(info, 1, count) if points else ())


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


def _poppler_pages(pdf: Path, scale: int | tuple[int, int], first: int, last: int, timeout_s: float) -> list[Image.Image]:
    """pdftoppm's pages first..last at PDF_DPI, the long side scaled to `scale`, or to exactly
    (width, height), as pdf2image's convert_from_path(size=scale) gives them.

    pdftoppm runs directly: convert_from_path starts two more processes each call (pdfinfo for
    the page count, pdftoppm -v for its version), 14 ms of CPU on this project's 2-core machine,
    against 37 ms for pdftoppm's 5 pages. Its files go to a temporary folder (from a pipe, pdf2image
    split them in Python: twice the render thread's CPU, holding the GIL)."""
    scaling = ["-scale-to-x", str(scale[0]), "-scale-to-y", str(scale[1])] if isinstance(scale, tuple) else ["-scale-to", str(scale)]
    with tempfile.TemporaryDirectory(prefix="lgpt-render-") as folder:
        _run_poppler(["pdftoppm", "-r", str(PDF_DPI), "-f", str(first), "-l", str(last), *scaling,
                      os.path.abspath(pdf), os.path.join(folder, "page")], timeout_s, f"pages {first}-{last}")
        # page-7.ppm, page-08.ppm...: pdftoppm pads the number to the width of the document's page count
        files = sorted(Path(folder).glob("page-*.ppm"), key=lambda file: int(file.stem.rpartition("-")[2]))
        images = [_read_page(file) for file in files]
    if len(images) != last - first + 1:
        raise DocumentError("render", f"poppler returned {len(images)} images for pages {first}-{last}")
    return images


def _run_poppler(args: list[str], timeout_s: float, what: str) -> None:
    """Run a poppler tool with a timeout in its own process group; a DocumentError if it fails."""
    try:
        proc = processes.Tracked(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise DocumentError("render", f"poppler's {args[0]} is not installed (apt-get install poppler-utils)") from None
    try:
        _, said = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.kill_group(proc)
        proc.communicate()
        raise DocumentError(
            "render", f"poppler did not finish {what} within {timeout_s:g} s and was stopped (see --render-timeout)"
        ) from None
    if processes.stopping():
        raise processes.Stopped("interrupted")
    if proc.returncode != 0:
        text = " ".join(said.decode("utf-8", "replace").split())[:300] or f"exit status {proc.returncode}"
        raise DocumentError("render", f"poppler failed on {what}: {text}")


def _read_page(file: Path) -> Image.Image:
    with Image.open(file) as image:
        image.load()
        return image if image.mode == "RGB" else image.convert("RGB")


def _page_points(pdf: Path, first: int, last: int, timeout_s: float) -> tuple[PagePoints, ...]:
    """The sizes of pages first..last, from pdfinfo."""
    from pdf2image import pdfinfo_from_path
    from pdf2image.exceptions import PDFPopplerTimeoutError

    try:
        info = pdfinfo_from_path(str(pdf), first_page=first, last_page=last, timeout=_whole_seconds(timeout_s))
    except PDFPopplerTimeoutError:
        raise DocumentError("render", f"poppler's pdfinfo did not finish within {timeout_s:g} s and was stopped") from None
    except processes.Stopped:
        raise
    except Exception as exc:
        raise DocumentError("render", f"poppler cannot read the page sizes: {_short(exc)}") from None
    return _points_from(info, first, last)


def _points_from(info: dict, first: int, last: int) -> tuple[PagePoints, ...]:
    """Pages first..last's sizes in pdfinfo's output (as pdf2image's pdfinfo_from_path parses it)."""
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
    from pdf2image import convert_from_path
    from pdf2image.exceptions import PDFPopplerTimeoutError

    try:
        images = convert_from_path(str(pdf), dpi=dpi, first_page=page, last_page=page, timeout=_whole_seconds(timeout_s))
    except PDFPopplerTimeoutError:
        raise DocumentError("render", f"poppler did not finish within {timeout_s:g} s") from None
    except Exception as exc:
        raise DocumentError("render", f"poppler failed: {_short(exc)}") from None
    if len(images) != 1:
        raise DocumentError("render", f"poppler returned {len(images)} images for one page")
    return images[0].convert("RGB")


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
    if isinstance(size, PixelBudget):
        size = size.fit(image.width, image.height)
    if isinstance(size, tuple):
        return image if image.size == size else image.resize(size, Image.BICUBIC)
    scale = (size or DEFAULT_LONG_SIDE) / max(image.size)
    if scale < 1 or size is not None:
        image = image.resize((round(image.width * scale), round(image.height * scale)), Image.BICUBIC)
    return image


def _whole_seconds(timeout_s: float) -> int:
    return max(1, int(round(timeout_s)))


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


def size_setting(size: RenderSize) -> list[int] | None:
    """A render size as an index records it: [width, height], or [long side]; None where each
    page gets its own size (a PixelBudget: the index records its max_visual_tokens)."""
    if size is None or isinstance(size, PixelBudget):
        return None
    return list(size) if isinstance(size, tuple) else [int(size)]
