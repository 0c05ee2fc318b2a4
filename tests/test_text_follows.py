"""Pixels first, text follows: a scanned page is committed with its vectors before its OCR is read,
searchable by its pixels, and its text lands in a later generation (in the build, with --ocr auto;
after it, with --ocr later: `build --text-only`, the next build, a watcher). A stand-in `tesseract`
on PATH (real Tesseract's pace is not the point here); fast tier but the kill -9 and the watcher."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_cli, run_process, validate
from docgen import make_pdf
from helpers import build_json, committed_texts, verify_ok, wait_until

LIST_LANGS = 'if [ "$1" = "--list-langs" ]; then printf \'List of available languages in "/x/" (2):\\neng\\nosd\\n\'; exit 0; fi\n'
WORD = "Quokka"


def _tesseract(tmp_path: Path, body: str = "") -> dict[str, str]:
    """A `tesseract` that lists eng and reads every page as "WORD invoice" (after `body`); the PATH with it first."""
    folder = tmp_path / "fake-bin"
    folder.mkdir(exist_ok=True)
    script = folder / "tesseract"
    script.write_text(f"#!/bin/sh\n{LIST_LANGS}{body}\necho '{WORD} invoice'\n")
    script.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _scans(docs: Path, count: int = 2) -> Path:
    """`count` one-page image-only PDFs (no text layer: --ocr auto reads them), and a text PDF."""
    from PIL import Image, ImageDraw

    docs.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        picture = Image.new("L", (240, 120), 255)
        draw = ImageDraw.Draw(picture)
        draw.rectangle((20 + 10 * n, 20, 120, 60 + 5 * n), fill=0)
        draw.text((20, 90), "a line of print", fill=0)  # (a page without one is not given to Tesseract at all)
        picture.save(docs / f"scan-{n}.pdf", resolution=72)
    make_pdf(docs / "text.pdf", ["Quarterly revenue Wombat"])
    for file in docs.iterdir():  # older than the index: a file written in the build's second is hashed again (racily clean)
        os.utime(file, (file.stat().st_mtime - 10, file.stat().st_mtime - 10))
    return docs


def _json(*args: str) -> dict:
    result = run_cli(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_ocr_later_commits_pixels_first_and_status_ls_and_query_tell_the_pending_pages(tmp_path, fake_model, monkeypatch):
    monkeypatch.setenv("LGPT_OCR", "auto")
    monkeypatch.setenv("PATH", _tesseract(tmp_path)["PATH"])
    docs, index = _scans(tmp_path / "docs"), tmp_path / "idx"
    where = ("--index-dir", str(index))
    result, report = build_json(docs, index, "--model", str(fake_model), "--ocr", "later")
    assert result.exit_code == 0, result.stderr
    validate(report, "build")
    assert report["pages_text_pending"] == 2 and report["text_commit_s"] is None and report["visual_commit_s"] > 0
    assert "2 page(s) are searchable by their pixels, their text pending" in result.stderr
    status = _json("status", *where)
    validate(status, "status")
    assert status["text"]["pending"] == 2 and status["text"]["layer"] == 1
    listed = {Path(d["path"]).name: d["text"]["pending"] for d in _json("ls", *where)["documents"]}
    assert listed == {"scan-0.pdf": 1, "scan-1.pdf": 1, "text.pdf": 0}
    assert "pending 1" not in run_cli("ls", *where).stdout and "pending" in run_cli("ls", *where).stdout

    visual = _json("query", "a page", "--mode", "visual", "-k", "3", *where)
    assert {Path(hit["path"]).name for hit in visual["queries"][0]["results"]} == {"scan-0.pdf", "scan-1.pdf", "text.pdf"}
    text = run_cli("query", WORD, "--mode", "text", "--json", *where)
    assert json.loads(text.stdout)["queries"][0]["results"] == [] and json.loads(text.stdout)["text_pending"] == 2
    assert "note: 2 page(s) of this index have their text pending" in text.stderr
    validate(json.loads(text.stdout), "query")


def test_build_text_only_reads_the_pending_text_into_a_later_generation(tmp_path, fake_model, monkeypatch):
    monkeypatch.setenv("LGPT_OCR", "auto")
    monkeypatch.setenv("PATH", _tesseract(tmp_path)["PATH"])
    docs, index = _scans(tmp_path / "docs"), tmp_path / "idx"
    where = ("--index-dir", str(index))
    _, report = build_json(docs, index, "--model", str(fake_model), "--ocr", "later")
    assert report["pages_text_pending"] == 2
    result = run_cli("build", "--text-only", "--json", *where)
    assert result.exit_code == 0, result.stderr
    after = json.loads(result.stdout)
    validate(after, "build")
    assert after["generation"] == report["generation"] + 1 and after["pages_text_pending"] == 0 and after["text_commit_s"] > 0
    found = _json("query", WORD, "--mode", "text", *where)
    assert {Path(hit["path"]).name for hit in found["queries"][0]["results"]} == {"scan-0.pdf", "scan-1.pdf"}
    assert "text_pending" not in found
    assert _json("status", *where)["text"] == {"layer": 1, "ocr": 2, "none": 0, "pending": 0, "unknown": 0}
    assert committed_texts(index)["scan-0.pdf", 1] == (f"{WORD} invoice", "ocr")
    verify_ok(index)


def test_the_next_build_reads_the_text_an_earlier_build_left_pending(tmp_path, fake_model, monkeypatch):
    monkeypatch.setenv("LGPT_OCR", "auto")
    monkeypatch.setenv("PATH", _tesseract(tmp_path)["PATH"])
    docs, index = _scans(tmp_path / "docs", 1), tmp_path / "idx"
    _, first = build_json(docs, index, "--model", str(fake_model), "--ocr", "later")
    assert first["pages_text_pending"] == 1
    result, second = build_json(docs, index)
    assert result.exit_code == 0, result.stderr
    assert second["pages_text_pending"] == 0 and second["generation"] == first["generation"] + 1, result.stderr
    assert "Index is up to date" in result.stderr and "Read the pending text of 1 page(s)" in result.stderr
    assert committed_texts(index)["scan-0.pdf", 1] == (f"{WORD} invoice", "ocr")


def test_a_scanned_page_is_searchable_by_its_pixels_before_its_text_lands_in_a_later_generation(tmp_path, fake_model, monkeypatch):
    """The stand-in Tesseract reads nothing until the visual generation is published: the build, which
    would wait for OCR before committing a page, could not finish; here the page is committed pending,
    found by a visual query, and its text commits after."""
    from localgpt_index.core import failpoints

    release = tmp_path / "visual-committed"
    monkeypatch.setenv("LGPT_OCR", "auto")
    monkeypatch.setenv("PATH", _tesseract(tmp_path, f"n=0; while [ ! -e {release} ]; do sleep 0.05; n=$((n+1)); "
                                                    "[ $n -gt 1200 ] && exit 3; done")["PATH"])
    docs, index = _scans(tmp_path / "docs", 1), tmp_path / "idx"
    seen: list[dict] = []

    def at_head(name: str) -> None:
        if name == "after-head" and not release.exists():
            status = _json("status", "--index-dir", str(index))
            visual = _json("query", "a page", "--mode", "visual", "-k", "2", "--index-dir", str(index))
            seen.append({"generation": status["generation"], "pending": status["text"]["pending"],
                         "found": sorted(Path(hit["path"]).name for hit in visual["queries"][0]["results"])})
            release.touch()

    failpoints.set_hook(at_head)
    try:
        result, report = build_json(docs, index, "--model", str(fake_model), "--ocr-timeout", "120")
    finally:
        failpoints.set_hook(None)
    assert result.exit_code == 0, result.stderr
    assert seen == [{"generation": 1, "pending": 1, "found": ["scan-0.pdf", "text.pdf"]}]
    assert report["generation"] == 2 and report["pages_text_pending"] == 0
    assert report["text"] == {"layer": 1, "ocr": 1, "none": 0, "unread": 0}
    assert report["text_commit_s"] >= report["visual_commit_s"] > 0
    assert committed_texts(index)["scan-0.pdf", 1] == (f"{WORD} invoice", "ocr")
    verify_ok(index)


def test_build_text_only_takes_no_docs_and_builds_need_them(tmp_path, fake_model):
    result = run_cli("build", "--text-only", str(tmp_path), "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 2 and "--text-only" in result.stderr
    assert run_cli("build", "--index-dir", str(tmp_path / "idx")).exit_code == 2
    for flag in ("--rebuild", "--rehash", "--strict"):  # work on DOCS that --text-only would not do: refused, not ignored
        result = run_cli("build", "--text-only", flag, "--index-dir", str(tmp_path / "idx"))
        assert result.exit_code == 2 and f"{flag}: not with --text-only" in result.stderr, result.stderr
    (tmp_path / "lgpt-index.toml").write_text("[build]\nstrict = true\n")  # a project's default: no request of this run
    os.chdir(tmp_path)
    assert "not with --text-only" not in run_cli("build", "--text-only", "--index-dir", str(tmp_path / "idx")).stderr


@pytest.mark.slow  # a build in a process of its own, killed with SIGKILL: over a second
def test_a_kill_between_the_visual_commit_and_the_text_commit_leaves_a_sound_index_the_next_build_completes(tmp_path, fake_model):
    docs, index = _scans(tmp_path / "docs"), tmp_path / "idx"
    # Tesseract reads once the visual generation is published (HEAD), never before: the pages are committed pending
    env = {**_tesseract(tmp_path, f"while [ ! -e {index}/default/gen-00000001.json ]; do sleep 0.05; done"), "LGPT_OCR": "auto"}
    where = ("--index-dir", str(index))
    killed = run_process("build", str(docs), "--model", str(fake_model), *where,
                         env={**env, "LGPT_FAILPOINT": "text-commit"})
    assert killed.returncode == -9, killed.stderr
    verify_ok(index)
    status = _json("status", *where)
    assert status["generation"] == 1 and status["text"]["pending"] == 2 and status["documents"] == 3
    visual = _json("query", "a page", "--mode", "visual", "-k", "3", *where)
    assert len(visual["queries"][0]["results"]) == 3
    done = run_process("build", str(docs), *where, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pages_text_pending"] == 0
    assert _json("status", *where)["text"]["pending"] == 0
    found = _json("query", WORD, "--mode", "text", *where)["queries"][0]["results"]
    assert {Path(h["path"]).name for h in found} == {"scan-0.pdf", "scan-1.pdf"}
    verify_ok(index)


@pytest.mark.slow  # `lgpt-index watch` in a process of its own: over a second
def test_ocr_later_then_watch_completes_the_text(tmp_path, fake_model):
    import subprocess
    import sys

    env = {**_tesseract(tmp_path), "LGPT_OCR": "auto"}
    docs, index = _scans(tmp_path / "docs", 1), tmp_path / "idx"
    where = ("--index-dir", str(index))
    first = run_process("build", str(docs), "--model", str(fake_model), "--ocr", "later", *where, env=env)
    assert first.returncode == 0, first.stderr
    watcher = subprocess.Popen([sys.executable, "-m", "localgpt_index", "watch", str(docs), *where],
                               env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: _json("status", *where)["text"]["pending"] == 0, 120, "the watcher to read the pending text", watcher)
    finally:
        watcher.terminate()
        watcher.communicate(timeout=60)
    assert committed_texts(index)["scan-0.pdf", 1] == (f"{WORD} invoice", "ocr")
    verify_ok(index)


@pytest.mark.slow  # an in-process Qdrant store, opened by each command: over a second
def test_pending_text_follows_on_a_qdrant_store_too(tmp_path, fake_model, monkeypatch):
    """The same generations on Qdrant (in-process): the text part and the sparse vectors follow."""
    monkeypatch.setenv("LGPT_OCR", "auto")
    monkeypatch.setenv("PATH", _tesseract(tmp_path)["PATH"])
    docs, where = _scans(tmp_path / "docs"), ("--store", f"qdrant+path://{tmp_path / 'qd'}/pages")
    result = run_cli("build", str(docs), "--model", str(fake_model), "--ocr", "later", *where)
    assert result.exit_code == 0, result.stderr
    assert _json("status", *where)["text"]["pending"] == 2
    assert _json("query", WORD, "--mode", "text", *where)["queries"][0]["results"] == []
    result = run_cli("build", "--text-only", *where)
    assert result.exit_code == 0, result.stderr
    assert _json("status", *where)["text"]["pending"] == 0
    for mode in ("text", "hybrid"):
        hits = _json("query", WORD, "--mode", mode, "-k", "2", *where)["queries"][0]["results"]
        assert {Path(hit["path"]).name for hit in hits} == {"scan-0.pdf", "scan-1.pdf"}, mode
    verified = run_cli("verify", *where)
    assert verified.exit_code == 0, verified.stderr


LIST_READER = """case "$1" in *.tif) printf 'read %s\\n' "$(basename "$1" .tif)"; exit 0 ;; esac
n=0
while read -r f; do  # a list of pictures, as Tesseract reads one: each page said on stderr, its text when done
  echo "Page $n : $f" >&2
  [ $n -gt 0 ] && printf '\\f'
  printf 'read %s\\n' "$(basename "$f" .tif)"
  n=$((n + 1))
done < "$1"
exit 0"""


def test_pending_pages_of_a_document_committed_in_several_segments_get_their_own_text(tmp_path, fake_model, monkeypatch):
    """A long scan committed a page a commit (--commit-every 1) spans several segments: each page's OCR
    lands on its own row (one Tesseract list for the three: page-N is the N-th picture of the list)."""
    from PIL import Image, ImageDraw

    from localgpt_index.index.local.store import LocalStore

    monkeypatch.setenv("LGPT_OCR", "auto")
    monkeypatch.setenv("PATH", _tesseract(tmp_path, LIST_READER)["PATH"])
    docs, index = tmp_path / "docs", tmp_path / "idx"
    docs.mkdir()
    pages = [Image.new("L", (200, 100), 255 - 40 * n) for n in range(3)]
    for page in pages:
        ImageDraw.Draw(page).text((10, 40), "a line of print", fill=0)  # (a page without one is not given to Tesseract)
    pages[0].save(docs / "long.pdf", save_all=True, append_images=pages[1:])
    result, report = build_json(docs, index, "--model", str(fake_model), "--ocr", "later", "--commit-every", "1", "--batch-size", "1")
    assert result.exit_code == 0, result.stderr
    [doc] = LocalStore(index / "default").open().documents
    assert len(doc.spans) > 1 and report["pages_text_pending"] == 3
    result = run_cli("build", "--text-only", "--index-dir", str(index), "--ocr-workers", "1")
    assert result.exit_code == 0, result.stderr
    assert committed_texts(index) == {("long.pdf", page): (f"read page-{page - 1}", "ocr") for page in (1, 2, 3)}
    verify_ok(index)
