"""Tesseract's library (tesserocr) run as a process that answers like the `tesseract` command.

Run by file name (`python -I tesslib.py LIBRARY TESSDATA LANG PSM [--list] SOURCE`), it imports nothing of
the package (LIBRARY: the folder the caller imports tesserocr from, put first on its path where it is
not there already, as a folder PYTHONPATH names; "": its own site-packages): ocr.py starts it where the
`tesseract` command would run, under the same bounds (its address-space limit, its process group, the
page's deadline), and ocrbatch.py follows it the same way: with --list, SOURCE names one picture a line,
each page is said on stderr as it starts ("Page N : FILE") and its text is written to stdout when done,
after a form feed but the first's.
Each page's text is followed by a record separator (\x1e) and the same recognition's words with their
boxes (Tesseract's TSV: GetTSVText, no second OCR), which ocr.py reads into the page's word positions.
The library reads a page for about a quarter less CPU than Debian's `tesseract` 5.3 (scripts/
bench_ocr.py: its build has no OpenMP, and it is a later Tesseract), and the process starts as fast.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    library, tessdata, lang, psm, *rest = argv
    if library and library not in sys.path:  # (a folder PYTHONPATH named for the caller: first, as there)
        sys.path.insert(0, library)
    listing = rest[:1] == ["--list"]
    source = rest[-1]
    try:
        import tesserocr  # its own libtesseract (ocr.py runs `tesseract` where the wheel is not installed)

        if listing:
            with open(source, encoding="utf-8") as handle:
                pictures = [line.rstrip("\n") for line in handle if line.strip()]
        else:
            pictures = [source]
        with tesserocr.PyTessBaseAPI(path=tessdata, lang=lang, psm=int(psm)) as api:
            for number, picture in enumerate(pictures):
                if listing:
                    print(f"Page {number + 1} : {picture}", file=sys.stderr, flush=True)
                api.SetImageFile(picture)
                text = api.GetUTF8Text().replace("\x1e", " ") + "\x1e" + api.GetTSVText(0)
                sys.stdout.buffer.write(("\f" if number else "").encode() + text.encode("utf-8", "replace"))
                sys.stdout.buffer.flush()
    except (ImportError, MemoryError, RuntimeError, OSError) as exc:  # out of memory, a picture it cannot read, a language
        print(f"Error: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
