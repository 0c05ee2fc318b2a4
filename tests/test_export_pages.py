"""`--export-pages` (interop.pages.export_pages) on its own: every page and the manifest, or nothing."""

from __future__ import annotations

import json

import pytest

from localgpt_index.core.errors import LgptError
from localgpt_index.interop.pages import export_pages


def _document(*hits: tuple[int, str, int]) -> dict:
    return {"queries": [{"query": "q", "results": [{"rank": rank, "path": path, "page": page, "score": 1.0}
                                                   for rank, path, page in hits]}]}


def test_pages_and_manifest_are_written_and_a_name_given_twice_keeps_the_later_page(tmp_path):
    out = tmp_path / "new" / "pages"
    document = _document((1, "a.pdf", 1), (1, "a.pdf", 1), (2, "b.pdf", 3))  # a server's two hits at one rank
    pages = iter([b"first", b"second", b"third"])
    manifest = export_pages(document, out, 72, lambda hit: next(pages))
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "q01-r01-a-p1.png", "q01-r02-b-p3.png"]
    assert (out / "q01-r01-a-p1.png").read_bytes() == b"second"
    assert [e["image"] for e in json.loads(manifest.read_text())["queries"][0]["results"]] == [
        "q01-r01-a-p1.png", "q01-r01-a-p1.png", "q01-r02-b-p3.png"]


@pytest.mark.parametrize("existing", [False, True])
def test_a_page_that_cannot_be_had_leaves_nothing_behind(tmp_path, existing):
    out = tmp_path / "new" / "pages"
    if existing:
        out.mkdir(parents=True)
        (out / "mine.txt").write_text("kept")

    def fetch(hit: dict) -> bytes:
        if hit["rank"] == 2:
            raise LgptError("the server sent something other than a PNG")
        return b"png"

    with pytest.raises(LgptError, match="other than a PNG"):
        export_pages(_document((1, "a.pdf", 1), (2, "b.pdf", 1)), out, 72, fetch)
    if existing:
        assert [p.name for p in out.iterdir()] == ["mine.txt"]
    else:
        assert not (tmp_path / "new").exists()
