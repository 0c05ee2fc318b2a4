"""Turn a PDF or an image file into page images at the size the model consumes."""

from __future__ import annotations

from pathlib import Path
from PIL import Image

from .errors import DocumentError

# Used when the model has no fixed input size (ColQwen2's dynamic resolution):
# the long side of the page in pixels.
DEFAULT_LONG_SIDE = 1024


def pdf_page_count(pdf: Path) -> int:
    from pdf2image import pdfinfo_from_path
    from pdf2image.exceptions import PDFInfoNotInstalledError

    try:
        with open(pdf, "rb") as handle:
            head = handle.read(1024)
    except OSError as exc:
        raise DocumentError("render", f"cannot read the file: {exc.strerror or exc}") from exc
    if b"%PDF-" not in head:
        raise DocumentError("render", "not a PDF: no %PDF- header in its first 1024 bytes")
    try:
        info = pdfinfo_from_path(str(pdf))
    except PDFInfoNotInstalledError as exc:
        raise DocumentError("render", "poppler's pdfinfo is not installed (apt-get install poppler-utils)") from exc
    except Exception as exc:  # pdf2image raises several types for broken files
        said = _short(exc)
        if "password" in said.lower():
            raise DocumentError("render", f"the PDF is encrypted and needs a password (poppler: {said})") from exc
        if "page count 0" in said.lower():
            raise DocumentError("render", "the PDF has no pages") from exc
        raise DocumentError("render", f"poppler cannot read this PDF: {said}") from exc
    pages = int(info.get("Pages", 0))
    if pages <= 0:
        raise DocumentError("render", "the PDF has no pages")
    return pages


def render_pdf_pages(
    pdf: Path, size: tuple[int, int] | None, first: int, last: int
) -> list[Image.Image]:
    """Render pages first..last (1-based, inclusive) of `pdf`."""
    from pdf2image import convert_from_path

    scale = size if size is not None else DEFAULT_LONG_SIDE
    try:
        images = convert_from_path(str(pdf), size=scale, first_page=first, last_page=last)
    except Exception as exc:
        raise DocumentError("render", f"poppler failed on pages {first}-{last}: {_short(exc)}") from exc
    if len(images) != last - first + 1:
        raise DocumentError("render", f"poppler returned {len(images)} images for pages {first}-{last}")
    return [im.convert("RGB") for im in images]


def image_file_pages(path: Path, size: tuple[int, int] | None) -> list[Image.Image]:
    """Every frame of an image file (multi-page TIFF gives several), resized for the model."""
    from PIL import ImageSequence

    try:
        with Image.open(path) as image:
            frames = [_fit(frame.convert("RGB"), size) for frame in ImageSequence.Iterator(image)]
    except Image.DecompressionBombError as exc:
        raise DocumentError("render", f"image too large to decode safely: {_short(exc)}") from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise DocumentError("render", f"cannot decode the image: {_short(exc)}") from exc
    if not frames:
        raise DocumentError("render", "the image has no frames")
    return frames


def _fit(image: Image.Image, size: tuple[int, int] | None) -> Image.Image:
    if size is not None:
        return image.resize(size, Image.BICUBIC)
    scale = DEFAULT_LONG_SIDE / max(image.size)
    if scale < 1:
        image = image.resize((round(image.width * scale), round(image.height * scale)), Image.BICUBIC)
    return image


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
