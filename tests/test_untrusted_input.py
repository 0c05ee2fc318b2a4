"""Documents, folders and command lines that attack the tool: each reproduction, with the fake model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_cli, run_process
from docgen import make_docx, make_pdf, make_png, make_xobject_bomb
from helpers import build_json, marked_processes, pid_alive, wait_until


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_pdf_that_renders_for_ever_is_stopped_and_reported(fake_model, tmp_path, process_mark):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_xobject_bomb(docs / "bomb.pdf")
    make_pdf(docs / "fine.pdf", ["fine"])
    make_png(docs / "photo.png", "photo")
    started = time.monotonic()
    result, report = build_json(docs, index, "--model", str(fake_model), "--render-timeout", "2")
    assert time.monotonic() - started < 2 + 60
    assert result.exit_code == 3
    [failure] = report["failures"]
    assert Path(failure["path"]).name == "bomb.pdf" and failure["stage"] == "render" and "within 2 s" in failure["reason"]
    assert report["indexed"] == 2 and report["committed"]
    assert wait_until(lambda: not marked_processes(process_mark, "bomb.pdf"), 10, "the renderer's end")


FAKE_SOFFICE = """#!/bin/sh
# stands in for a LibreOffice stuck on a document: it and a child of its own never finish
echo $$ >> "$LGPT_TEST_MARK"
sleep 300 &
echo $! >> "$LGPT_TEST_MARK"
wait
"""


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_during_a_conversion_ends_it_and_leaves_nothing_behind(fake_model, tmp_path, sig):
    bin_dir, scratch, mark = tmp_path / "bin", tmp_path / "tmp", tmp_path / "pids"
    bin_dir.mkdir()
    scratch.mkdir()
    (bin_dir / "soffice").write_text(FAKE_SOFFICE)
    (bin_dir / "soffice").chmod(0o755)
    docs = tmp_path / "docs"
    for i in range(3):
        make_docx(docs / f"memo-{i}.docx", [f"Memo {i}"])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(scratch), "LGPT_TEST_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "build", str(docs), "--model", str(fake_model),
                             "--index-dir", str(tmp_path / "idx")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: mark.exists() and len(mark.read_text().split()) >= 2, 60, "the fake soffice's start", proc)
    pids = [int(p) for p in mark.read_text().split()]
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 1 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    assert wait_until(lambda: not [pid for pid in pids if pid_alive(pid)], 15, "the fake soffice's end")
    assert list(scratch.iterdir()) == []
    assert len(mark.read_text().split()) == 2  # nothing was retried after the interrupt


def test_image_frames_are_decoded_one_at_a_time(tmp_path, monkeypatch):
    from PIL import Image

    import localgpt_index.ingest.render as render

    frames = [Image.new("RGB", (40, 30), (i, 0, 0)) for i in range(30)]
    path = tmp_path / "scan.tiff"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    decoded: list[int] = []
    real_fit = render._fit
    monkeypatch.setattr(render, "_fit", lambda image, size: decoded.append(1) or real_fit(image, size))
    pages = render.image_file_pages(path, (16, 16))
    first = next(pages)
    assert first.size == (16, 16) and len(decoded) == 1
    assert render.image_frame_count(path) == 30 and len(list(pages)) == 29


def test_a_multi_frame_tiff_is_indexed_page_by_page(fake_model, tmp_path):
    from PIL import Image

    docs = tmp_path / "docs"
    docs.mkdir()
    frames = [Image.new("RGB", (40, 30), (i * 8, 0, 0)) for i in range(12)]
    frames[0].save(docs / "scan.tiff", save_all=True, append_images=frames[1:])
    _, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model))
    assert report["pages_embedded"] == 12


def test_an_index_inside_the_documents_folder_is_not_indexed(fake_model, tmp_path, unstable_converter):
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["a"])
    (docs / "note.txt").write_text("converted, so the index stores a PDF")
    index = docs / "idx"
    first, report = build_json(docs, index, "--model", str(fake_model))
    assert first.exit_code == 0 and report["indexed"] == 2
    assert list((index / "default" / "pdf").iterdir())
    again, report = build_json(docs, index)
    assert again.exit_code == 0 and report["pages_embedded"] == 0 and report["documents_seen"] == 2
    assert {"path": str(index / "default"), "reason": "the index folder"} in report["skipped_files"]
    # nor is another lgpt-index index found there: a build of docs into another index skips docs/idx too
    other, report = build_json(docs, tmp_path / "other", "--model", str(fake_model))
    assert other.exit_code == 0 and report["indexed"] == report["documents_seen"] == 2, other.stderr
    assert {"path": str(index / "default"), "reason": "the index folder"} in report["skipped_files"]


@pytest.mark.parametrize("text, message", [("", "is empty"), ("   ", "is empty"), ("x" * 5000, "limited to 2,048 characters")])
def test_empty_and_overlong_queries_are_refused(fake_model, tmp_path, text, message):
    result = run_cli("query", text, "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 2 and message in result.stderr


@pytest.mark.timeout(60)
def test_a_fifo_named_like_a_document_is_listed_not_read(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "real.pdf", ["real"])
    os.mkfifo(docs / "pipe.pdf")
    os.symlink(docs / "pipe.pdf", docs / "link-to-pipe.pdf")
    _, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model))
    reasons = {Path(s["path"]).name: s["reason"] for s in report["skipped_files"]}
    assert reasons["pipe.pdf"] == "not a regular file (a FIFO)"
    assert reasons["link-to-pipe.pdf"] == "not a regular file (a FIFO)"
    assert report["indexed"] == 1


def test_a_metadata_csv_from_excel_with_a_byte_order_mark(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "q3.pdf", ["q3"])
    rules = tmp_path / "meta.csv"
    rules.write_bytes("glob,team\n*.pdf,finance\n".encode("utf-8-sig"))
    result, _ = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--metadata", str(rules))
    assert result.exit_code == 0, result.stderr
    found = run_cli("query", "q3", "--filter", "team=finance", "--index-dir", str(tmp_path / "idx"), "--json")
    assert len(json.loads(found.stdout)["queries"][0]["results"]) == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_wait_must_be_a_finite_number_of_seconds(fake_model, tmp_path, value):
    result = run_cli("build", str(tmp_path), "--wait", value, "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 2 and "seconds" in result.stderr


def test_a_newline_in_a_file_name_does_not_split_a_table_row(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "two\nlines.pdf", ["odd name"])
    build_json(docs, tmp_path / "idx", "--model", str(fake_model))
    # wide enough that the long temporary path is not folded: the point is the escaped newline
    table = run_cli("query", "odd", "--index-dir", str(tmp_path / "idx"), env={"COLUMNS": "240"}).stdout
    assert "two\\nlines.pdf" in table
    assert not any(line.strip().startswith("lines.pdf") for line in table.splitlines())


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_decompression_bomb_warning_is_not_printed_raw(fake_model, tmp_path):
    from PIL import Image

    docs = tmp_path / "docs"
    docs.mkdir()
    Image.new("1", (9500, 9500)).save(docs / "poster.png")  # 90 megapixels: above PIL's warning limit
    result = run_process("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"))
    assert result.returncode == 0, result.stderr
    assert "DecompressionBombWarning" not in result.stderr


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_folder_1100_levels_deep(fake_model, tmp_path):
    docs = tmp_path / "docs"
    deep = docs.joinpath(*["d"] * 1100)
    subprocess.run(["mkdir", "-p", str(deep)], check=True)  # os.makedirs itself recurses too deep
    try:
        make_pdf(deep / "bottom.pdf", ["deep down"])
        result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model))
        assert result.exit_code == 0 and report["indexed"] == 1, result.stderr
    finally:
        subprocess.run(["rm", "-rf", str(docs)], check=True)  # so does shutil.rmtree, in pytest's clean-up


@pytest.mark.parametrize("option", ["--queries-file", "--metadata"])
def test_binary_option_files_are_refused_with_a_message(fake_model, tmp_path, option):
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 40)
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["a"])
    build_json(docs, tmp_path / "idx", "--model", str(fake_model))
    if option == "--queries-file":
        result = run_cli("query", "--queries-file", str(binary), "--index-dir", str(tmp_path / "idx"))
    else:
        result = run_cli("build", str(docs), "--metadata", str(binary), "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 2 and "not UTF-8 text" in result.stderr


def test_user_text_files_are_read_whole_or_refused(tmp_path, monkeypatch):
    """One bounded reader for --queries-file, --metadata and eval sets: too large is refused, never cut short."""
    import io

    from localgpt_index.core.errors import UsageError
    from localgpt_index.core.files import read_user_text

    text_file = tmp_path / "q.txt"
    text_file.write_bytes("\ufeffone\ntwo\n".encode())
    assert read_user_text(text_file, limit=64, label="--queries-file q.txt") == "one\ntwo\n"
    text_file.write_bytes(b"x\n" * 40)
    with pytest.raises(UsageError, match=r"^--queries-file q.txt: larger than"):
        read_user_text(text_file, limit=64, label="--queries-file q.txt")
    text_file.write_bytes(b"a\x00b")
    with pytest.raises(UsageError, match="NUL bytes"):
        read_user_text(text_file, limit=64, label="q")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"from stdin\n")))
    assert read_user_text("-", limit=64, label="q") == "from stdin\n"


def test_an_index_folder_in_proc_is_a_message(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["a"])
    build = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", "/proc/self")
    assert build.exit_code == 1 and "cannot take the writers' lock" in build.stderr
    query = run_cli("query", "a", "--index-dir", "/proc/self")
    assert query.exit_code == 1 and "no index at" in query.stderr


def test_an_index_name_of_300_characters(tmp_path):
    result = run_cli("status", "--name", "n" * 300, "--index-dir", str(tmp_path))
    assert result.exit_code == 2 and "up to 100" in result.stderr


def test_a_lock_that_is_a_folder(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["a"])
    (tmp_path / "idx" / "default" / "lock").mkdir(parents=True)
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 1 and "'lock' a plain file" in result.stderr


def test_a_missing_stored_pdf_under_export_pages(fake_model, tmp_path, unstable_converter):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("converted")
    build_json(docs, tmp_path / "idx", "--model", str(fake_model))
    for stored in (tmp_path / "idx" / "default" / "pdf").iterdir():
        stored.unlink()
    result = run_cli("query", "note", "--export-pages", str(tmp_path / "pages"), "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 1 and "is missing" in result.stderr and "Traceback" not in result.stderr


def test_export_pages_refuses_the_index_and_leaves_no_page_of_an_earlier_export(fake_model, tmp_path):
    """Nothing written inside the index folder; an export into the folder of an earlier one leaves only its own
    pages (the earlier manifest's others removed, a file of the user's kept)."""
    docs, index, pages = tmp_path / "docs", tmp_path / "idx", tmp_path / "pages"
    for n in range(3):
        make_pdf(docs / f"r{n}.pdf", [f"report {n}"])
    build_json(docs, index, "--model", str(fake_model))
    inside = run_cli("query", "report", "--export-pages", str(index / "default" / "pngs"), "--index-dir", str(index))
    assert inside.exit_code == 2 and "inside the index" in inside.stderr and not (index / "default" / "pngs").exists()
    assert run_cli("query", "report", "-k", "3", "--export-pages", str(pages), "--index-dir", str(index)).exit_code == 0
    (pages / "mine.png").write_bytes(b"the user's")
    assert len(list(pages.glob("q01-r*.png"))) == 3
    assert run_cli("query", "report", "-k", "1", "--export-pages", str(pages), "--index-dir", str(index)).exit_code == 0
    listed = [entry["image"] for entry in json.loads((pages / "manifest.json").read_text())["queries"][0]["results"]]
    assert sorted(p.name for p in pages.glob("*.png")) == sorted([*listed, "mine.png"]) and len(listed) == 1


def test_two_identical_files_are_embedded_once(fake_model, tmp_path):
    docs = tmp_path / "docs"
    original = make_pdf(docs / "a.pdf", ["same", "bytes"])
    (docs / "b.pdf").write_bytes(original.read_bytes())
    _, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model))
    assert report["pages_embedded"] == 2 and report["model_calls"] == 1 and report["reused"] == 1
