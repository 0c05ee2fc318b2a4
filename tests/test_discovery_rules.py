"""docs/building.md, messy folders: a symlink to a file inside the folder is followed (listed under its own
name, its content embedded once); editor and OS droppings and hidden files are skipped, not errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import run_cli, validate
from docgen import make_pdf


def test_links_inside_are_followed_and_droppings_are_skipped(fake_model, tmp_path):
    docs, index = tmp_path / "docs", tmp_path / "idx"
    make_pdf(docs / "real" / "memo.pdf", ["memo page one", "memo page two"])
    os.symlink(docs / "real" / "memo.pdf", docs / "link.pdf")  # a file inside the folder, by an absolute link
    droppings = [".DS_Store", "Thumbs.db", "~$memo.docx", ".~lock.memo.docx#", ".hidden.pdf"]
    for name in droppings:
        (docs / "real" / name).write_bytes(b"\0junk")
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    validate(report, "build")
    from localgpt_index.query.search import open_index

    paths = sorted(Path(d.path).relative_to(docs).as_posix() for d in open_index(index).documents)
    assert paths == ["link.pdf", "real/memo.pdf"], paths  # each name, as found
    assert report["pages_embedded"] == 2, report  # one content, embedded once
    assert report["failed"] == 0 and report["failures"] == []
    assert report["skipped"] == 0 and report["skipped_files"] == [], report  # droppings are neither errors nor listed
    assert not any(name in result.stderr for name in droppings), result.stderr
