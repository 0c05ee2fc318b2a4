"""A folder of everything that goes wrong in real folders: the build reports each case and goes on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import poppler_page_count, run_cli, validate
from docgen import make_docx, make_pdf, make_png
from helpers import build_ok, marked_processes, wait_until

pytestmark = pytest.mark.slow  # the real-component tier


def _encrypted(source: Path, target: Path, user_password: str) -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(str(source)).pages:
        writer.add_page(page)
    writer.encrypt(user_password=user_password, owner_password="owner-secret")
    with open(target, "wb") as handle:
        writer.write(handle)
    return target


def _zero_pages(target: Path) -> Path:
    from pypdf import PdfWriter

    with open(target, "wb") as handle:
        PdfWriter().write(handle)
    return target


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    docs = root / "docs"
    outside = make_pdf(root / "outside" / "secret.pdf", ["Outside the folder"])
    good = {
        "report.pdf": make_pdf(docs / "report.pdf", ["One", "Two", "Three"]),
        "UPPER.PDF": make_pdf(docs / "UPPER.PDF", ["Upper", "Case"]),
        "photo.PNG": make_png(docs / "photo.PNG", "upper-case image"),
        "memo.docx": make_docx(docs / "sub" / "memo.docx", ["Memo", "Body"]),
        "copy-of-report.pdf": None,
        "empty-password.pdf": None,
        "huge-page.pdf": None,
        "caf\udce9.pdf": None,  # a name that is not UTF-8
    }
    good["copy-of-report.pdf"] = shutil.copy(good["report.pdf"], docs / "copy-of-report.pdf")
    good["empty-password.pdf"] = _encrypted(good["report.pdf"], docs / "empty-password.pdf", "")
    from reportlab.pdfgen import canvas

    huge = canvas.Canvas(str(docs / "huge-page.pdf"), pagesize=(14400, 14400))  # 200 x 200 inches
    huge.drawString(100, 100, "a very large page")
    huge.showPage()
    huge.save()
    good["huge-page.pdf"] = docs / "huge-page.pdf"
    odd = os.fsencode(docs) + b"/caf\xe9.pdf"
    shutil.copy(good["UPPER.PDF"], odd)
    good["caf\udce9.pdf"] = Path(os.fsdecode(odd))

    data = good["report.pdf"].read_bytes()
    bad = {
        "truncated.pdf": ("render", docs / "truncated.pdf", data[: len(data) // 3]),
        "garbage.pdf": ("render", docs / "garbage.pdf", os.urandom(4000)),
        "empty.docx": ("discover", docs / "empty.docx", b""),
        "broken.docx": ("convert", docs / "broken.docx", os.urandom(3000)),
        "not-really.xlsx": ("convert", docs / "not-really.xlsx", b"PK\x03\x04 not a spreadsheet at all"),
    }
    for _, path, content in bad.values():
        path.write_bytes(content)
    bad["locked.pdf"] = ("render", _encrypted(good["report.pdf"], docs / "locked.pdf", "secret"), None)
    bad["zero-pages.pdf"] = ("render", _zero_pages(docs / "zero-pages.pdf"), None)

    skipped = {"notes.xyz": "unsupported", "README": "unsupported"}
    (docs / "notes.xyz").write_text("unknown kind")
    (docs / "README").write_text("no extension")
    (docs / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (docs / "~$memo.docx").write_bytes(b"lock")
    (docs / "sub" / ".~lock.memo.docx#").write_text("lock")
    (docs / ".hidden").mkdir()
    make_pdf(docs / ".hidden" / "invisible.pdf", ["hidden"])
    os.symlink(docs, docs / "sub" / "loop")  # a symlink loop
    os.symlink(outside, docs / "outside-link.pdf")  # leads out of the folder
    return {"docs": docs, "good": good, "bad": bad, "skipped": skipped}


@pytest.fixture(scope="module")
def first_build(hostile, tiny_model, tmp_path_factory):
    index_dir = tmp_path_factory.mktemp("hostile-index")
    os.environ["HF_HUB_OFFLINE"] = "1"
    result = run_cli("build", str(hostile["docs"]), "--model", str(tiny_model), "--index-dir", str(index_dir), "--json")
    return {"result": result, "index_dir": index_dir}


def test_build_reports_every_bad_document_and_indexes_the_rest(hostile, first_build):
    result = first_build["result"]
    assert result.exit_code == 3, result.stderr
    report = json.loads(result.stdout)
    validate(report, "build")

    failures = {Path(os.fsdecode(os.fsencode(f["path"]))).name: f for f in report["failures"]}
    assert {name: f["stage"] for name, f in failures.items()} == {name: b[0] for name, b in hostile["bad"].items()}
    assert "password" in failures["locked.pdf"]["reason"]
    assert "no pages" in failures["zero-pages.pdf"]["reason"]
    assert "not a PDF" in failures["garbage.pdf"]["reason"]
    assert "0 bytes" in failures["empty.docx"]["reason"]
    assert "not a valid .docx" in failures["broken.docx"]["reason"]
    assert "LibreOffice could not convert" in failures["not-really.xlsx"]["reason"]
    for failure in report["failures"]:
        assert f"{Path(failure['path']).name}: {failure['stage']}: {failure['reason']}" in result.stderr

    assert report["indexed"] + report["reused"] == len(hostile["good"])
    assert report["failed"] == len(hostile["bad"])
    skipped = {Path(s["path"]).name: s["reason"] for s in report["skipped_files"]}
    assert skipped["notes.xyz"].startswith("unsupported") and skipped["README"].startswith("unsupported")
    assert skipped["outside-link.pdf"] == "symlink to outside the folder"
    assert not any(name in skipped for name in (".DS_Store", "~$memo.docx", "invisible.pdf"))
    assert report["documents_seen"] == len(hostile["good"]) + len(hostile["bad"])


def test_every_valid_document_has_its_page_count(hostile, first_build):
    from localgpt_index.query.search import open_index

    index = open_index(first_build["index_dir"])
    by_path = {d.path: d for d in index.documents}
    assert set(by_path) == {str(p) for p in hostile["good"].values()}
    for name, path in hostile["good"].items():
        doc = by_path[str(path)]
        if doc.kind == "image":
            assert doc.pages == 1
        elif doc.pdf:
            assert doc.pages == poppler_page_count(index.store.root / doc.pdf)
        else:
            assert doc.pages == poppler_page_count(Path(os.fsencode(path).decode("utf-8", "surrogateescape"))), name
    assert by_path[str(hostile["good"]["copy-of-report.pdf"])].spans == by_path[str(hostile["good"]["report.pdf"])].spans
    # a terminal wide enough for the whole path (a narrower one shortens it with an ellipsis)
    query = run_cli("query", "report", "-k", "30", "--index-dir", str(first_build["index_dir"]), env={"COLUMNS": "300"})
    assert query.exit_code == 0 and "caf\ufffd.pdf" in query.stdout  # the odd name, shown safely


def test_second_build_retries_only_the_failures(hostile, first_build):
    again = run_cli("build", str(hostile["docs"]), "--index-dir", str(first_build["index_dir"]), "--json")
    assert again.exit_code == 3
    report = json.loads(again.stdout)
    assert report["model_calls"] == 0 and report["indexed"] == 0
    assert report["failed"] == len(hostile["bad"]) and report["unchanged"] == len(hostile["good"])
    status = json.loads(run_cli("status", "--index-dir", str(first_build["index_dir"]), "--json").stdout)
    assert len(status["failures"]) == len(hostile["bad"])


def test_strict_commits_nothing(hostile, tiny_model, tmp_path):
    result = run_cli("build", str(hostile["docs"]), "--model", str(tiny_model), "--strict", "--commit-every", "1",
                     "--index-dir", str(tmp_path / "idx"), "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["exit_code"] == 1
    assert not (tmp_path / "idx" / "default" / "HEAD").exists()


def test_a_hanging_conversion_is_killed_and_reported(tiny_model, tmp_path, process_mark):
    docs = tmp_path / "docs"
    make_docx(docs / "slow.docx", ["Takes longer than allowed"])
    make_pdf(docs / "fine.pdf", ["Fine"])
    started = time.monotonic()
    result = run_cli("build", str(docs), "--model", str(tiny_model), "--convert-timeout", "0.3",
                     "--index-dir", str(tmp_path / "idx"), "--json")
    assert result.exit_code == 3
    report = json.loads(result.stdout)
    assert report["indexed"] == 1
    [failure] = report["failures"]
    assert failure["stage"] == "convert" and "did not finish within 0.3 s" in failure["reason"]
    assert time.monotonic() - started < 60
    # a LibreOffice process must not outlive its timeout (killed processes may take a moment to go)
    assert wait_until(lambda: not marked_processes(process_mark, "lgpt-lo-profile"), 10, "LibreOffice's end")


class _ChangeFilesDuringBuild:
    """A progress sink that, once the first pages are encoded, edits one file and deletes another."""

    def __init__(self, change: Path, delete: Path) -> None:
        self.change, self.delete, self.done = change, delete, False

    def add_task(self, name, total) -> None:
        pass

    def advance(self, name, amount=1, total=None) -> None:
        if name == "pages" and not self.done:
            self.done = True
            make_pdf(self.change, ["edited", "while", "indexing"])
            self.delete.unlink()


def test_files_changing_or_vanishing_during_the_build(tiny_model, tmp_path):
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.local.store import LocalStore

    docs = tmp_path / "docs"
    first = make_pdf(docs / "a-first.pdf", ["First"])
    names = [make_pdf(docs / f"b-{i}.pdf", [f"Doc {i}"]) for i in range(6)]
    change, delete = names[-1], names[-2]
    store = LocalStore(tmp_path / "idx" / "default")
    options = BuildOptions(model=ModelSpec(str(tiny_model)), batch_size=1)
    report = build_index(docs, store, options, progress=_ChangeFilesDuringBuild(change, delete))
    failures = {Path(f.path).name: f.reason for f in report.failures}
    assert "disappeared" in failures[delete.name]
    assert "changed during the build" in failures[change.name]
    assert report.indexed == 5 and report.exit_code == 3
    again = build_index(docs, store, options)
    assert again.indexed == 1 and again.failed == 0 and again.removed == 0  # the edited file, now stable
    assert {Path(d.path).name for d in store.read_manifest().documents} == {first.name, *[n.name for n in names if n != delete]}


def test_disk_full_during_commit_keeps_the_previous_generation(tiny_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "a.pdf", ["A"])
    index = ["--index-dir", str(tmp_path / "idx")]
    build_ok(str(docs), "--model", str(tiny_model), *index)
    before = run_cli("query", "a", "--json", *index).stdout
    make_pdf(docs / "b.pdf", ["B", "B2"])
    full = subprocess.run(
        [sys.executable, "-m", "localgpt_index", "build", str(docs), *index],
        capture_output=True, text=True, env={**os.environ, "LGPT_FAILPOINT": "write-vectors:1:enospc", "HF_HUB_OFFLINE": "1"},
    )
    assert full.returncode == 1
    assert "No space left on device" in full.stderr and "keeps" in full.stderr and "Traceback" not in full.stderr
    assert run_cli("verify", *index).exit_code == 0
    assert run_cli("query", "a", "--json", *index).stdout == before
    build_ok(str(docs), *index)  # space again: it carries on
    assert run_cli("verify", *index).exit_code == 0


def test_include_and_exclude_globs(hostile, tiny_model, tmp_path):
    result = run_cli("build", str(hostile["docs"]), "--model", str(tiny_model), "--include", "*.pdf", "--include", "*.PDF",
                     "--exclude", "copy-*", "--index-dir", str(tmp_path / "idx"), "--json")
    report = json.loads(result.stdout)
    seen = {Path(f["path"]).name for f in report["failures"]} | {
        Path(d.path).name for d in __import__("localgpt_index.query.search", fromlist=["open_index"]).open_index(tmp_path / "idx").documents
    }
    assert all(name.lower().endswith(".pdf") for name in seen)
    assert "copy-of-report.pdf" not in seen and "report.pdf" in seen and "UPPER.PDF" in seen
