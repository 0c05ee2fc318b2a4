"""HTML is confined to the indexed folder before conversion (unit tests; the real conversion is in
test_conversion_isolation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localgpt_index.ingest.confine import confine_html


@pytest.fixture
def folder(tmp_path) -> Path:
    docs = tmp_path / "docs"
    (docs / "img").mkdir(parents=True)
    (docs / "img" / "logo.png").write_bytes(b"\x89PNG fake")
    (docs / "style.css").write_text("body { background: url('img/logo.png') } @import url(/etc/x.css); h1 { background: url(/etc/passwd) }")
    (docs / "drawing.svg").write_text("<svg/>")
    (tmp_path / "outside.png").write_bytes(b"\x89PNG outside")
    return docs


def _confined(html: str, folder: Path):
    return confine_html(html, folder, folder)


def test_a_picture_inside_the_folder_is_kept_as_its_file_uri(folder):
    result = _confined('<p><img src="img/logo.png" alt="logo"></p>', folder)
    assert f'src="{(folder / "img" / "logo.png").as_uri()}"' in result.html and not result.dropped


@pytest.mark.parametrize("reference", ["/etc/passwd", "../outside.png", "file:///etc/hostname", "img/../../outside.png",
                                       "http://127.0.0.1:9/x.png", "https://example.com/a.png", "//example.com/a.png",
                                       "ftp://example.com/a.png", "img/missing.png", "drawing.svg"])
def test_references_that_leave_the_folder_are_dropped_and_listed(folder, reference):
    result = _confined(f'<img src="{reference}"><img src="img/logo.png">', folder)
    assert reference not in result.html
    assert len(result.dropped) == 1 and reference in result.dropped[0]
    assert (folder / "img" / "logo.png").as_uri() in result.html


def test_links_that_escape_through_a_symlink_are_dropped(folder, tmp_path):
    (folder / "sneaky.png").symlink_to(tmp_path / "outside.png")
    result = _confined('<img src="sneaky.png">', folder)
    assert "sneaky" not in result.html and "outside the indexed folder" in result.dropped[0]


def test_every_attribute_and_element_that_fetches(folder):
    html = """<html><head><base href="http://evil/"><meta http-equiv="refresh" content="0;url=http://evil/">
    <link rel="stylesheet" href="style.css"><link rel="icon" href="http://evil/favicon.ico">
    <style>@import 'http://evil/a.css'; p { background-image: url("http://evil/b.png") }</style>
    <script src="http://evil/x.js"></script></head>
    <body background="http://evil/bg.png" onload="fetch('http://evil/')">
    <iframe src="http://evil/frame"></iframe><object data="http://evil/o"></object><embed src="http://evil/e">
    <picture><source srcset="http://evil/1.png 1x, img/logo.png 2x"></picture>
    <video poster="http://evil/p.png"></video><div style="background: url(http://evil/d.png)">text</div>
    <a href="http://example.com/">a link stays a link</a><svg><image href="http://evil/s.png"/></svg>
    <!--[if IE]><img src="http://evil/ie.png"><![endif]--></body></html>"""
    result = _confined(html, folder)
    assert "evil" not in result.html and "/etc/" not in result.html
    assert 'href="http://example.com/"' in result.html and "a link stays a link" in result.html
    assert "<style>" in result.html and (folder / "img" / "logo.png").as_uri() in result.html  # inlined style.css
    assert len(result.dropped) >= 12


def test_data_uris_of_plain_images_stay_and_others_go(folder):
    png = "data:image/png;base64,iVBORw0KGgo="
    svg = "data:image/svg+xml;base64,PHN2Zy8+"
    result = _confined(f'<img src="{png}"><img src="{svg}">', folder)
    assert png in result.html and svg not in result.html
