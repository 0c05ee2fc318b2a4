"""OCR with Tesseract where a page has no usable text layer: real Tesseract on a picture and an
image-only PDF, and a stand-in `tesseract` on PATH for what real Tesseract will not do on demand
(hang, fail, wait for the encoder). Fast tier but the last test (real Tesseract on every page)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import validate
from docgen import make_pdf, make_png
from helpers import build_json, committed_texts, marked_processes, wait_until

LIST_LANGS = 'if [ "$1" = "--list-langs" ]; then printf \'List of available languages in "/x/" (2):\\neng\\nosd\\n\'; exit 0; fi\n'


def _fake_tesseract(tmp_path: Path, monkeypatch, body: str) -> Path:
    """A `tesseract` first on PATH that lists eng and, asked to read, runs `body`."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    script = folder / "tesseract"
    script.write_text("#!/bin/sh\n" + LIST_LANGS + body + "\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return script


def _scanned(folder: Path, lines: list[str], dpi: int = 150) -> tuple[Path, Path]:
    """A small page (a receipt: 4 x 2 inches) saying `lines`, as a PNG and as an image-only PDF
    (pictures of the rendered page: no text layer)."""
    from reportlab.pdfgen import canvas

    from localgpt_index.ingest.render import render_page_at_dpi

    source = folder / "source.pdf"
    folder.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(source), pagesize=(288, 144), invariant=1)
    c.setFont("Helvetica", 14)
    for number, line in enumerate(lines):
        c.drawString(18, 110 - 24 * number, line)
    c.showPage()
    c.save()
    picture = render_page_at_dpi(source, 1, dpi)
    png, pdf = folder / "docs" / "photo.png", folder / "docs" / "scan.pdf"
    png.parent.mkdir(parents=True)
    picture.save(png)
    picture.save(pdf, resolution=dpi)
    return png, pdf


def _picture():
    from PIL import Image
    from reportlab.lib.utils import ImageReader

    return ImageReader(Image.new("L", (64, 32), 128))


def test_a_picture_and_an_image_only_pdf_are_read_by_tesseract(tmp_path, fake_model, appended):
    png, pdf = _scanned(tmp_path, ["Invoice number 7731", "Quokka Holdings Ltd"])
    result, report = build_json(png.parent, tmp_path / "idx", "--model", str(fake_model), "--ocr", "auto")
    assert result.exit_code == 0, result.stderr
    validate(report, "build")
    assert report["text"] == {"layer": 0, "ocr": 2, "none": 0, "unread": 0} and report["page_warnings"] == []
    texts = committed_texts(tmp_path / "idx")
    assert set(texts) == {("photo.png", 1), ("scan.pdf", 1)}
    for text, source in texts.values():
        assert source == "ocr"
        assert text.split() == "Invoice number 7731 Quokka Holdings Ltd".split(), text


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
def test_a_page_whose_ocr_hangs_is_stopped_and_keeps_its_vectors(tmp_path, monkeypatch, fake_model, process_mark, appended):
    docs = tmp_path / "docs"
    make_png(docs / "scan.png", "a scan", size=(300, 200))
    make_pdf(docs / "text.pdf", ["A page with a proper text layer"])
    _fake_tesseract(tmp_path, monkeypatch, "exec sleep 120")
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "auto", "--ocr-timeout", "1")
    assert result.exit_code == 0, result.stderr
    assert report["indexed"] == 2 and report["pages_total"] == 2 and report["failed"] == 0
    assert report["text"] == {"layer": 1, "ocr": 0, "none": 1, "unread": 1}
    [warning] = report["page_warnings"]
    assert (Path(warning["path"]).name, warning["page"], warning["stage"]) == ("scan.png", 1, "ocr")
    assert warning["reason"] == "OCR failed: Tesseract did not finish within the page's 1 s and was stopped (see --ocr-timeout)"
    assert "scan.png page 1: OCR failed" in result.stderr and "the page is indexed, without OCR text" in result.stderr
    assert sorted(name for name, _, _ in appended) == ["scan.png", "text.pdf"]
    assert marked_processes(process_mark, "sleep 120") == []


def test_a_page_whose_ocr_fails_keeps_its_thin_text_layer_and_is_reported(tmp_path, monkeypatch, fake_model, appended):
    from reportlab.pdfgen import canvas

    docs = tmp_path / "docs"
    docs.mkdir()
    c = canvas.Canvas(str(docs / "stamped.pdf"), invariant=1)  # a scan's page number: too little text to trust
    c.drawImage(_picture(), 72, 144, width=200, height=100)  # the scan (--ocr auto reads only a page with an image)
    c.drawString(72, 72, "Page 7")
    c.showPage()
    c.save()
    _fake_tesseract(tmp_path, monkeypatch, 'echo "Error in pixReadStream: Unknown format" >&2\nexit 1')
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "auto")
    assert result.exit_code == 0, result.stderr
    assert report["text"] == {"layer": 1, "ocr": 0, "none": 0, "unread": 1}
    [warning] = report["page_warnings"]
    assert warning["reason"] == "OCR failed: tesseract failed: Error in pixReadStream: Unknown format"
    assert committed_texts(tmp_path / "idx") == {("stamped.pdf", 1): ("Page 7", "layer")}


def test_ocr_auto_skips_a_thin_text_page_that_draws_no_image(tmp_path, monkeypatch, fake_model, appended):
    """--ocr auto reads a page with thin text only where it draws an image (pdfimages -list, one process
    a document): a slide with a title and no picture has nothing for Tesseract. --ocr always reads it."""
    from reportlab.pdfgen import canvas

    docs = tmp_path / "docs"
    docs.mkdir()
    c = canvas.Canvas(str(docs / "slides.pdf"), invariant=1)
    c.drawString(72, 720, "Agenda")  # page 1: a title, nothing else
    c.showPage()
    c.drawString(72, 720, "Results")  # page 2: a title and a picture
    c.drawImage(_picture(), 72, 400, width=128, height=64)
    c.showPage()
    c.save()
    _fake_tesseract(tmp_path, monkeypatch, 'echo "Chart of quarterly results"')
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "auto")
    assert result.exit_code == 0, result.stderr
    assert report["text"] == {"layer": 1, "ocr": 1, "none": 0, "unread": 0} and report["page_warnings"] == []
    assert sorted((page, text, source) for (_, page), (text, source) in committed_texts(tmp_path / "idx").items()) == [
        (1, "Agenda", "layer"), (2, "Chart of quarterly results", "ocr")]

    appended.clear()
    result, report = build_json(docs, tmp_path / "idx2", "--model", str(fake_model), "--ocr", "always")
    assert report["text"] == {"layer": 0, "ocr": 2, "none": 0, "unread": 0}


@pytest.mark.parametrize(("ocr", "users", "spin"), [("auto", None, "1000"), ("never", None, None), ("auto", "50000", "50000")],
                         ids=["ocr-may-run", "no-ocr", "the-user-s-value-wins"])
def test_a_build_that_may_ocr_shortens_openmp_spinning_before_torch_loads(ocr, users, spin, tmp_path, fake_model, monkeypatch):
    """The model's idle OpenMP threads spin on the cores Tesseract wants (GNU OpenMP's default): a build
    that may run OCR asks for a short spin, before torch is loaded (when it still counts), unless the
    user set one; a build without OCR leaves it alone."""
    import sys

    from conftest import run_cli

    make_pdf(tmp_path / "docs" / "a.pdf", ["a page"])
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")  # recorded as absent, restored so after the test
    monkeypatch.delenv("GOMP_SPINCOUNT")
    if users:
        monkeypatch.setenv("GOMP_SPINCOUNT", users)
    loaded = "torch" in sys.modules  # by an earlier test of a mixed run: then too late, and left alone
    result = run_cli("build", str(tmp_path / "docs"), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--ocr", ocr)
    assert result.exit_code == 0, result.stderr
    assert os.environ.get("GOMP_SPINCOUNT") == (users or (None if loaded else spin))


LIST_READER = """echo "$1" >> {log}
case "$1" in *.tif)  # one picture
  case "$1" in *page-1.tif) {trouble} ;; esac
  printf 'read %s\\n' "$(basename "$1" .tif)"
  exit 0 ;;
esac
n=0
while read -r f; do  # a list of pictures, as Tesseract reads one: each page said on stderr, its text when done
  {say}echo "Page $n : $f" >&2
  case "$f" in *page-1.tif) {trouble} ;; esac
  [ $n -gt 0 ] && printf '\\f'
  printf 'read %s\\n' "$(basename "$f" .tif)"
  n=$((n + 1))
done < "$1"
"""


@pytest.mark.slow  # processes, servers or tools of its own: over a second, the real-component tier
@pytest.mark.parametrize(("trouble", "say"), [("", ""), ("exec sleep 120", ""), ("kill -SEGV $$", ""), ("kill -SEGV $$", ": ")],
                         ids=["all-read", "page-2-hangs", "page-2-crashes", "page-2-crashes-a-tesseract-naming-no-page"])
def test_a_documents_pages_share_one_tesseract_and_a_page_in_trouble_costs_only_itself(trouble, say, tmp_path, monkeypatch,
                                                                                      fake_model, process_mark, appended):
    """A PDF's pages are read by one Tesseract process (a list of their renders: the model loaded once);
    a page that hangs or crashes it fails alone, after its own --ocr-timeout: the pages before it keep
    what was read, the pages after it go on in a new process. A Tesseract that does not name the page
    it starts leaves the pages it did not surely finish to one process each."""
    from PIL import Image, ImageDraw

    docs, log = tmp_path / "docs", tmp_path / "tesseract.log"
    docs.mkdir()
    page = Image.new("L", (200, 100), 255)
    ImageDraw.Draw(page).text((10, 40), "a line of print", fill=0)  # (a blank page is not read at all)
    page.save(docs / "scan.pdf", save_all=True, append_images=[page] * 2)
    _fake_tesseract(tmp_path, monkeypatch, LIST_READER.format(log=log, trouble=trouble or ":", say=say))
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "auto", "--ocr-workers", "1",
                                "--ocr-timeout", "3")
    assert result.exit_code == 0, result.stderr
    read = {page: text for (_, page), (text, _) in committed_texts(tmp_path / "idx").items()}
    assert read[1] == "read page-0" and read[3] == "read page-2" and report["pages_total"] == 3
    processes = [Path(line).suffix for line in log.read_text().splitlines()]
    if not trouble:
        assert read[2] == "read page-1" and processes == [".txt"] and report["page_warnings"] == []
        return
    [warning] = report["page_warnings"]
    assert (warning["page"], read[2]) == (2, "")
    assert processes == ([".txt", ".txt"] if not say else [".txt", ".tif", ".tif"])
    if "sleep" in trouble:
        assert warning["reason"] == "OCR failed: Tesseract did not finish within the page's 3 s and was stopped (see --ocr-timeout)"
        assert marked_processes(process_mark, "sleep 120") == []
    else:
        assert warning["reason"].startswith("OCR failed: tesseract failed: exit status -11"), warning


def test_ocr_runs_beside_the_encoder(tmp_path, monkeypatch, fake_model):
    """The stand-in Tesseract waits for the encoder to be encoding, and the encoder for OCR to be
    reading: run one after the other, this build could not finish."""
    from localgpt_index.indexing.options import BuildSettings
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.local.store import LocalStore
    from localgpt_index.models.loading import load_page_encoder

    docs, started, release = tmp_path / "docs", tmp_path / "ocr-started", tmp_path / "encoding"
    for n in range(4):
        make_png(docs / f"scan-{n}.png", f"scan {n}", size=(120, 90))
    _fake_tesseract(tmp_path, monkeypatch, f"touch {started}\nn=0\nwhile [ ! -e {release} ]; do sleep 0.05; n=$((n+1)); "
                    f"[ $n -gt 1200 ] && exit 3; done\necho read by ocr")

    class Meeting:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def encode_pages(self, pages):
            wait_until(started.exists, what="OCR reading while the encoder encodes")
            release.touch()
            return self.inner.encode_pages(pages)

    report = build_index(docs, LocalStore(tmp_path / "idx" / "default"),
                         BuildOptions(model=ModelSpec(str(fake_model)), batch_size=2, settings=BuildSettings(ocr="auto"), ocr_workers=2),
                         encoder_factory=lambda model, options: Meeting(load_page_encoder(model, options)))
    assert report.text == {"layer": 0, "ocr": 4, "none": 0, "unread": 0} and report.pages_total == 4


def test_closing_the_reader_ends_its_ocr_processes(tmp_path, monkeypatch, process_mark):
    """An interrupted build (Ctrl-C, a failed engine) ends the OCR processes of its pages at once."""
    from localgpt_index.ingest.events import DocumentOpened, OpenedDocument
    from localgpt_index.ingest.ocr import Tesseract
    from localgpt_index.ingest.opening import FeedSource
    from localgpt_index.ingest.pagetext import PageTexts, TextSettings

    png = make_png(tmp_path / "scan.png", "a scan", size=(200, 150))
    started = tmp_path / "started"
    _fake_tesseract(tmp_path, monkeypatch, f"touch {started}\nexec sleep 300")
    settings = TextSettings(ocr="auto", ocr_timeout_s=600, tesseract=Tesseract.find())
    texts = PageTexts(settings, [FeedSource(png, "image", png.stat().st_size)])
    events = texts.attach(iter([DocumentOpened(0, OpenedDocument(image=png, pages=1))]))
    next(events)
    wait_until(started.exists, what="the OCR process to start")
    assert marked_processes(process_mark, "sleep 300")
    events.close()
    assert marked_processes(process_mark, "sleep 300") == []


def test_each_ocr_process_is_held_to_its_memory_limit(tmp_path):
    from localgpt_index.ingest.ocr import OcrFailed, Tesseract

    png = make_png(tmp_path / "scan.png", "a scan", size=(200, 150))
    tesseract = Tesseract.find()
    assert tesseract is not None and "eng" in tesseract.languages
    with pytest.raises(OcrFailed) as raised:
        tesseract.read_image_frame(png, 1, "eng", timeout_s=60, memory_mib=16)
    assert raised.value.reason.startswith("tesseract failed: ") and "(each OCR process may map 16 MiB)" in raised.value.reason


def test_lgpt_ocr_nice_runs_each_ocr_process_at_a_lower_priority(monkeypatch):
    """LGPT_OCR_NICE=N starts each OCR process (the 300 dpi render, Tesseract) N lower in CPU priority
    than the build, so that it takes only the cores the encoder leaves; by default, the build's own."""
    import time

    from localgpt_index.ingest.ocr import run_bounded

    def niceness() -> int:  # coreutils' nice alone prints the niceness it runs at
        return int(run_bounded(["nice"], time.monotonic() + 60, 60, 256, "nice"))

    monkeypatch.delenv("LGPT_OCR_NICE", raising=False)
    assert niceness() == os.nice(0)
    monkeypatch.setenv("LGPT_OCR_NICE", "10")
    assert niceness() == min(19, os.nice(0) + 10)
    monkeypatch.setenv("LGPT_OCR_NICE", "lots")  # not a niceness: ignored
    assert niceness() == os.nice(0)


def test_a_build_lowers_its_own_ocr_while_the_encoder_runs_and_nothing_else(monkeypatch):
    """While the encoder runs, the build's text readers' process scope starts OCR 10 lower (the scopes under it
    too); the process's environment and other runs' scopes are untouched; $LGPT_OCR_NICE, where set, wins."""
    import time
    from types import SimpleNamespace

    from localgpt_index.indexing.run import OCR_NICE_BESIDE_ENCODER, ocr_below_encoder
    from localgpt_index.ingest.ocr import run_bounded
    from localgpt_index.ingest.processes import ProcessScope

    def niceness() -> int:
        return int(run_bounded(["nice"], time.monotonic() + 60, 60, 256, "nice"))

    monkeypatch.delenv("LGPT_OCR_NICE", raising=False)
    build, other = SimpleNamespace(scope=ProcessScope(), settings=SimpleNamespace(tesseract=object())), ProcessScope()
    pool = ProcessScope(build.scope)  # an OCR pool's scope, under the text readers'
    with ocr_below_encoder(build):
        assert "LGPT_OCR_NICE" not in os.environ
        with pool.entered():
            assert niceness() == min(19, os.nice(0) + OCR_NICE_BESIDE_ENCODER)
        with other.entered():
            assert niceness() == os.nice(0)
        monkeypatch.setenv("LGPT_OCR_NICE", "3")
        with pool.entered():
            assert niceness() == min(19, os.nice(0) + 3)
        monkeypatch.delenv("LGPT_OCR_NICE")
    with pool.entered():  # the encoder done: the build's own priority
        assert niceness() == os.nice(0)


@pytest.mark.slow
def test_ocr_always_reads_every_page_and_never_reads_none(tmp_path, fake_model, appended):
    docs = tmp_path / "docs"
    make_pdf(docs / "text.pdf", ["Quarterly revenue Wombat", "Outlook Platypus"])
    _, scan = _scanned(tmp_path / "scanned", ["Receipt Echidna 5512"])
    os.rename(scan, docs / "scan.pdf")
    result, report = build_json(docs, tmp_path / "idx", "--model", str(fake_model), "--ocr", "always")
    assert result.exit_code == 0, result.stderr
    assert report["text"] == {"layer": 0, "ocr": 3, "none": 0, "unread": 0}
    read = {key: text for key, (text, _) in committed_texts(tmp_path / "idx").items()}
    assert "quarterly revenue wombat details" in read["text.pdf", 1] and "outlook platypus details" in read["text.pdf", 2]
    assert "Receipt Echidna 5512" in read["scan.pdf", 1]

    appended.clear()
    result, report = build_json(docs, tmp_path / "idx2", "--model", str(fake_model), "--ocr", "never")
    assert report["text"] == {"layer": 2, "ocr": 0, "none": 1, "unread": 0}
    assert ("scan.pdf", 1, {"text": "", "text_source": "none", "words": None}) in appended


def test_a_failed_documents_pages_are_not_read(tmp_path, monkeypatch):
    """A document that fails (its render, a page the encoder refuses) has its queued OCR cancelled."""
    from localgpt_index.ingest.events import DocumentFailed, DocumentOpened, OpenedDocument, PagesEncoded
    from localgpt_index.ingest.ocr import Tesseract
    from localgpt_index.ingest.opening import FeedSource
    from localgpt_index.ingest.pagetext import PageTexts, TextSettings
    from localgpt_index.core.errors import DocumentError

    log, release = tmp_path / "read.log", tmp_path / "release"
    _fake_tesseract(tmp_path, monkeypatch, f"echo read >> {log}\nwhile [ ! -e {release} ]; do sleep 0.05; done\necho text")
    pdf = tmp_path / "scan.pdf"
    from PIL import Image, ImageDraw

    page = Image.new("RGB", (200, 100), "white")
    ImageDraw.Draw(page).text((10, 40), "a line of print", fill="black")  # (a blank page is not read at all)
    page.save(pdf, save_all=True, append_images=[page] * 4)
    png = make_png(tmp_path / "next.png", "next", size=(200, 100))
    texts = PageTexts(TextSettings(ocr="auto", ocr_workers=1, tesseract=Tesseract.find()),
                      [FeedSource(pdf, "pdf", 1), FeedSource(png, "image", 1)])
    events = texts.attach(iter([DocumentOpened(0, OpenedDocument(pdf=pdf, pages=5)), DocumentFailed(0, DocumentError("render", "x")),
                                DocumentOpened(1, OpenedDocument(image=png, pages=1)), PagesEncoded(((1, "vectors"),))]))
    next(events)
    wait_until(log.exists, what="the first page's OCR to start")
    next(events)  # the failure: pages 2-5 are dropped while page 1 is read
    release.touch()
    *_, encoded = events  # the next document's page, read by the one OCR thread after what was queued before it
    assert texts.resolve(encoded.texts[0]).text == "text"  # pixels first: it went on pending, its text follows
    assert log.read_text().splitlines() == ["read", "read"]  # page 1 of the failed document, then the next one's


@pytest.mark.slow
def test_a_ray_build_reads_the_text_of_its_pages_too(tmp_path, fake_model, appended):
    """`build --ray`: pages are rendered and encoded on the cluster, their text read beside, on the driver."""
    from conftest import run_cli

    _, scan = _scanned(tmp_path / "scanned", ["Receipt Echidna 5512"])
    docs = scan.parent
    make_pdf(docs / "text.pdf", ["Quarterly revenue Wombat"])
    result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "idx"), "--ray", "local",
                     "--ocr", "auto", "--json")
    assert result.exit_code == 0, result.stderr
    read = {name: {"text": text, "text_source": source} for (name, _), (text, source) in committed_texts(tmp_path / "idx").items()}
    assert read["text.pdf"]["text_source"] == "layer" and read["text.pdf"]["text"].startswith("Quarterly revenue Wombat")
    assert read["scan.pdf"]["text_source"] == read["photo.png"]["text_source"] == "ocr"
    assert "Receipt Echidna 5512" in read["scan.pdf"]["text"] and "Receipt Echidna 5512" in read["photo.png"]["text"]


def test_the_encoder_goes_on_while_a_batch_waits_for_its_ocr(tmp_path, monkeypatch, fake_model):
    """The first page's OCR ends only once the encoder has started the second batch: a build that
    held the encoder until each batch's text was read could not finish."""
    from localgpt_index.indexing.options import BuildSettings
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.local.store import LocalStore
    from localgpt_index.models.loading import load_page_encoder

    docs, release = tmp_path / "docs", tmp_path / "second-batch"
    for n in range(3):
        make_png(docs / f"scan-{n}.png", f"scan {n}", size=(120, 90))
    _fake_tesseract(tmp_path, monkeypatch, f"n=0\nwhile [ ! -e {release} ]; do sleep 0.05; n=$((n+1)); "
                    f"[ $n -gt 1200 ] && exit 3; done\necho read by ocr")
    calls = []

    class Counting:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def encode_pages(self, pages):
            calls.append(len(pages))
            if len(calls) == 2:
                release.touch()
            return self.inner.encode_pages(pages)

    report = build_index(docs, LocalStore(tmp_path / "idx" / "default"),
                         BuildOptions(model=ModelSpec(str(fake_model)), batch_size=1, settings=BuildSettings(ocr="auto"), ocr_workers=1,
                                      ocr_timeout_s=120),
                         encoder_factory=lambda model, options: Counting(load_page_encoder(model, options)))
    assert report.text == {"layer": 0, "ocr": 3, "none": 0, "unread": 0} and report.page_warnings == []


def test_ocr_starts_while_the_model_loads(tmp_path, monkeypatch, fake_model, appended):
    """The model's load is held until a scanned page's OCR has started: the feed that renders during
    the load tells the text reader of each document it opens, and OCR does not wait for the encoder."""
    import time

    from localgpt_index.core import failpoints

    png, pdf = _scanned(tmp_path, ["Invoice number 7731"])
    started = tmp_path / "ocr-started"
    _fake_tesseract(tmp_path, monkeypatch, f"touch {started}\necho Invoice number 7731")
    at_load: list[bool] = []  # whether an OCR had started when the load was let go

    def hold_the_load(name: str) -> None:
        if name == "model-load":
            deadline = time.monotonic() + 60
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            at_load.append(started.exists())

    failpoints.set_hook(hold_the_load)
    try:
        result, report = build_json(png.parent, tmp_path / "idx", "--model", str(fake_model), "--ocr", "auto")
    finally:
        failpoints.set_hook(None)
    assert result.exit_code == 0, result.stderr
    assert at_load == [True], "no OCR started while the model loaded"
    assert report["text"] == {"layer": 0, "ocr": 2, "none": 0, "unread": 0} and report["page_warnings"] == []
    assert {name: text for (name, _), (text, _) in committed_texts(tmp_path / "idx").items()} == {
        "photo.png": "Invoice number 7731", "scan.pdf": "Invoice number 7731"}
