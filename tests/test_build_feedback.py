"""What `build` says from its first second (issue 42, feedback): the stage it is in, off a terminal and on one.

Each test holds the build at a failpoint (the model's load, the first encoded batch) and reads what it
said so far: no sleeps.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from docgen import make_pdf
from helpers import held_build, wait_until

pytestmark = pytest.mark.slow  # builds in processes of their own, held mid-way

GUARD_S = 60


def reading(stream) -> list[str]:
    """The lines of `stream` as they come, read in a thread into the returned list."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    return lines


def docs_with_an_office_file(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["quarterly report", "second page"])
    (docs / "notes.txt").write_text("meeting notes\n")
    return docs


def test_off_a_terminal_a_stage_line_comes_before_the_model_has_loaded(fake_model, tmp_path):
    docs = docs_with_an_office_file(tmp_path)
    release = tmp_path / "release"
    build = held_build(["build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx")],
                       release, "model-load")
    try:
        said = reading(build.stderr)
        wait_until(lambda: any("loading the model" in line for line in said), GUARD_S, "a line naming the model's load")
        assert said[0].startswith("progress (0 s): starting"), said
        assert not any("encoding: " in line and "encoding: 0 pages" not in line for line in said), said
        assert any("converting " in line for line in said), said  # notes.txt: LibreOffice, beside the load
    finally:
        release.touch()
        assert build.wait(GUARD_S) == 0, said
    assert any("committing" in line for line in said), said


def test_verbose_names_the_model_device_dtype_and_batch_size_before_the_build_ends(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["quarterly report"])
    release = tmp_path / "release"
    build = held_build(["build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "-v"],
                       release, "encode")  # the first batch encoded, not committed yet
    try:
        said = reading(build.stderr)
        line = wait_until(lambda: next((line for line in said if line.startswith("model ")), None), GUARD_S, "the model line")
        assert f"model {fake_model} on cpu in float32" in line and "batch size" in line, line
        assert not any(" indexed, " in line for line in said)  # the build's summary: not yet
    finally:
        release.touch()
        assert build.wait(GUARD_S) == 0


def test_on_a_terminal_the_bar_shows_the_models_load(fake_model, tmp_path):
    docs = docs_with_an_office_file(tmp_path)
    release = tmp_path / "release"
    main, child = pty.openpty()
    build = subprocess.Popen([sys.executable, "-m", "localgpt_index", "build", str(docs), "--model", str(fake_model),
                              "--index-dir", str(tmp_path / "idx")], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=child, env={**os.environ, "LGPT_FAILPOINT": "model-load:1:hold",
                                                "LGPT_FAILPOINT_HOLD": str(release), "COLUMNS": "120"})
    os.close(child)
    screen: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal closed with the process
                return
            if not chunk:
                return
            screen.append(chunk)

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_until(Path(f"{release}.reached").exists, GUARD_S, "the model's load", build)
        wait_until(lambda: b"loading the model" in b"".join(screen), GUARD_S, "the bar's stage row")
    finally:
        release.touch()
        assert build.wait(GUARD_S) == 0
    assert b"pages" in b"".join(screen)


def test_off_a_terminal_the_ocr_runs_are_said_while_the_build_goes_on(fake_model, tmp_path):
    from PIL import Image, ImageDraw

    docs = tmp_path / "docs"
    docs.mkdir()
    picture = Image.new("L", (600, 200), 255)
    ImageDraw.Draw(picture).text((20, 80), "Invoice number 7731", fill=0)
    picture.save(docs / "scan.png")
    release = tmp_path / "release"
    build = held_build(["build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--ocr", "always"],
                       release, "encode")  # the first page encoded, its text (OCR) read: not committed yet
    try:
        said = reading(build.stderr)
        wait_until(lambda: any("OCR runs: 1" in line for line in said), GUARD_S, "a line naming the OCR")
    finally:
        release.touch()
        assert build.wait(GUARD_S) == 0, said
