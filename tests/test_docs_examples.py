"""The Python API page's examples are tests: every ```python block of docs/python-api.md runs,
in order, in one namespace, with the fake model (fast tier) and a folder of two PDFs."""

from __future__ import annotations

import re
from pathlib import Path

from docgen import make_pdf

PAGE = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_the_page_has_examples_of_the_whole_api():
    code = "\n".join(block for _, block in python_blocks(PAGE.read_text()))
    for name in ("build_index", "BuildOptions", "open_store", "open_index", ".search(", "search_vectors",
                 "page_image", "load_rules", "LgptError"):
        assert name in code, name


def test_examples_import_only_the_root_package():
    for line, block in python_blocks(PAGE.read_text()):
        assert not re.search(r"\b(from|import) localgpt_index\.", block), f"python-api.md:{line}: not the root API"


def test_every_python_example_runs(tmp_path, fake_model, monkeypatch):
    docs = tmp_path / "examples-docs"
    make_pdf(docs / "q3-report.pdf", ["Q3 revenue", "Costs"])
    make_pdf(docs / "hiring.pdf", ["Hiring plan"])
    monkeypatch.setenv("LGPT_EXAMPLE_MODEL", str(fake_model))
    monkeypatch.setenv("LGPT_EXAMPLE_DOCS", str(docs))
    namespace: dict = {"__name__": "python_api_examples"}
    blocks = python_blocks(PAGE.read_text())
    assert len(blocks) >= 5
    for line, block in blocks:
        # the line numbers of a failure point into the page
        exec(compile("\n" * (line - 1) + block, str(PAGE), "exec"), namespace)
    assert sorted(p.name for p in tmp_path.glob("page-*.png")) == ["page-1.png"]
