"""Real LibreOffice on HTML and Markdown that reach outside the folder: nothing outside is read or fetched."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import run_cli
from docgen import make_png

pytestmark = pytest.mark.slow  # the real-component tier


class _Recorder(BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        _Recorder.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    _Recorder.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_build_fetches_nothing_and_reads_nothing_outside_the_folder(fake_model, tmp_path, server):
    docs = tmp_path / "docs"
    outside = make_png(tmp_path / "secret.png", "SECRET OUTSIDE")
    make_png(docs / "inside.png", "inside picture")
    (docs / "page.html").write_text(f"""<html><head><link rel="stylesheet" href="{server}/style.css">
        <style>@import url({server}/import.css); body {{ background: url({server}/bg.png) }}</style></head>
        <body><h1>Quarterly page</h1><img src="{server}/remote.png"><img src="{outside}"><img src="inside.png">
        <iframe src="{server}/frame.html"></iframe></body></html>""")
    (docs / "notes.md").write_text(f"# Notes\n\n![remote]({server}/md.png)\n\n![secret](../secret.png)\n\n![inside](inside.png)\n")
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert _Recorder.requests == []
    notes = {Path(n["path"]).name: n["note"] for n in report["notes"]}
    assert set(notes) == {"page.html", "notes.md"}
    assert "remote.png" in notes["page.html"] and str(outside) in notes["page.html"]
    assert "md.png" in notes["notes.md"] and "../secret.png" in notes["notes.md"]
    from pypdf import PdfReader

    from localgpt_index.query.search import open_index

    index = open_index(tmp_path / "idx")
    for doc in (d for d in index.documents if d.pdf):
        images = [name for page in PdfReader(str(index.store.root / doc.pdf)).pages for name in page.images]
        assert len(images) == 1, (doc.path, images)  # the picture inside the folder, and only that one


def test_sigterm_during_a_real_libreoffice_conversion_leaves_no_process_and_no_folder(fake_model, tmp_path, process_mark):
    import os
    import signal
    import subprocess
    import sys

    from docgen import make_docx
    from helpers import marked_processes, wait_until

    docs, scratch = tmp_path / "docs", tmp_path / "tmp"
    scratch.mkdir()
    make_docx(docs / "long.docx", ["A long memo"] + [f"Paragraph {i} " * 40 for i in range(300)], page_breaks=300)
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "localgpt_index", "build", str(docs), "--model", str(fake_model),
                             "--index-dir", str(tmp_path / "idx")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def soffice_running() -> bool:  # this test's LibreOffice only, not the machine's others
        return bool(marked_processes(process_mark, f"{scratch}/lgpt-lo-profile"))

    # LibreOffice is running and has written its profile into the scratch folder: well into the conversion
    wait_until(lambda: soffice_running() and list(scratch.glob("lgpt-lo-profile*/user")), 60, "LibreOffice's start", proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "interrupted" in stderr, stderr
    assert wait_until(lambda: not soffice_running(), 15, "LibreOffice's end")
    assert list(scratch.iterdir()) == []


def _odt_with_linked_picture(path: Path, url: str) -> Path:
    """An OpenDocument text whose only picture is a link to `url` (LibreOffice fetches it when it renders)."""
    import zipfile

    ns = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
          'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" xmlns:xlink="http://www.w3.org/1999/xlink" '
          'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"')
    content = (f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ns} office:version="1.2"><office:body><office:text>'
               '<text:p>Linked picture memo</text:p><text:p><draw:frame draw:name="pic" text:anchor-type="paragraph" svg:width="5cm" '
               f'svg:height="5cm"><draw:image xlink:href="{url}" xlink:type="simple" xlink:show="embed" xlink:actuate="onLoad"/>'
               '</draw:frame></text:p></office:text></office:body></office:document-content>')
    manifest = ('<?xml version="1.0" encoding="UTF-8"?><manifest:manifest '
                'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
                '<manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>'
                '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/></manifest:manifest>')
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content, zipfile.ZIP_DEFLATED)
        archive.writestr("META-INF/manifest.xml", manifest, zipfile.ZIP_DEFLATED)
    return path


def test_a_link_inside_an_office_file_is_not_fetched_the_converter_has_no_network(fake_model, tmp_path, server):
    """No rewriting reaches inside an office file: only the converter's network namespace stops this fetch
    (LibreOffice run directly on this file asks the server for the picture)."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")  # probed here, not through the code under test, which must not decide to skip
    if not unshare or subprocess.run([unshare, "--net", "true"], capture_output=True).returncode != 0 and \
            subprocess.run([unshare, "--user", "--map-root-user", "--net", "true"], capture_output=True).returncode != 0:
        pytest.skip("this OS refuses a network namespace: documented, office links are then not blocked (doctor says so)")
    docs = tmp_path / "docs"
    _odt_with_linked_picture(docs / "memo.odt", f"{server}/linked.png")
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["indexed"] == 1, result.stdout
    assert _Recorder.requests == []
