"""Pages are converted and rendered while the model loads (a core that would otherwise wait),
held unprepared within a memory budget, and go out in order, prepared, once the encoder is ready."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest

import localgpt_index.indexing.local_engine as local_engine
import localgpt_index.ingest.feed as pipeline
from conftest import run_cli
from docgen import make_docx
from helpers import build_ok, make_pdfs, pid_alive, wait_until
from localgpt_index.core import failpoints
from localgpt_index.ingest import processes
from localgpt_index.ingest.discover import OFFICE, PDF
from localgpt_index.ingest.events import DocumentDone, DocumentOpened, PageReady
from localgpt_index.ingest.feed import FeedSource, PageFeed

KINDS = {DocumentOpened: "open", PageReady: "page", DocumentDone: "end"}


def _events(feed: PageFeed) -> dict[int, list[tuple]]:
    """Each document's events in order (documents go out as their opening finishes)."""
    events: dict[int, list[tuple]] = {}
    for e in feed:
        events.setdefault(e.number, []).append((KINDS[type(e)], e.image if isinstance(e, PageReady) else None))
    return events


def test_pages_wait_in_files_within_the_budget_then_go_out_in_order_prepared(tmp_path, monkeypatch):
    """While the model loads, rendered pages wait as files in the staging folder (not in memory),
    up to AHEAD_BYTES; once the encoder is ready they are prepared and go out in their order."""
    pdfs = make_pdfs(tmp_path, 3, 4, "doc")
    sources = [FeedSource(pdf, PDF, pdf.stat().st_size) for pdf in pdfs]
    page_file = len(b"P6\n64 64\n255\n") + 64 * 64 * 3
    monkeypatch.setattr(pipeline, "AHEAD_BYTES", 5 * page_file)
    prepare = lambda image: ("prepared", image.size, image.tobytes())  # noqa: E731
    expected = _events(PageFeed(sources, None, tmp_path, (64, 64), queue_pages=4, prepare=prepare))

    staging = tmp_path / "staging"
    staging.mkdir()
    waits = threading.Event()  # the producer has stopped rendering and waits for the encoder
    failpoints.set_hook(lambda name: waits.set() if name == "ahead-full" else None)
    try:
        early = PageFeed(sources, None, staging, (64, 64), queue_pages=4, prepare=None).start()
        assert waits.wait(30), "the producer never stopped to wait for the encoder"
    finally:
        failpoints.set_hook(None)
    waiting = [e.image for e in early._ahead if isinstance(e, PageReady)]
    assert early._ahead.bytes == 5 * page_file and early._queue.empty()
    assert len(waiting) == 5 and all(path.is_file() and staging in path.parents for path in waiting)
    early.set_prepare(prepare)
    assert _events(early) == expected  # every page prepared, every document's events in their order
    assert sum(kind == "page" for events in expected.values() for kind, _ in events) == 12
    assert not [f for f in staging.rglob("*") if f.is_file()]  # each file went when its page was read


def test_a_feed_given_up_removes_the_pages_it_set_aside(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    pdf = make_pdfs(tmp_path, 1, 3, "doc")[0]
    early = PageFeed([FeedSource(pdf, PDF, pdf.stat().st_size)], None, staging, (64, 64), queue_pages=4, prepare=None).start()
    deadline = time.monotonic() + 30
    while len(early._ahead) < 5 and time.monotonic() < deadline:  # open, 3 pages, end
        time.sleep(0.01)
    assert len([f for f in staging.rglob("*.ppm")]) == 3
    early.close()
    assert not list(staging.iterdir())


def test_the_pages_rendered_during_the_load_do_not_wait_for_a_slow_conversion(tmp_path, monkeypatch):
    """The producer is waiting on a LibreOffice that never finishes when the encoder becomes ready:
    the PDF pages it rendered before go out at once."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started = tmp_path / "soffice-pid"  # the stuck LibreOffice's pid, once it runs
    (bin_dir / "soffice").write_text(f"#!/bin/sh\necho $$ > {started}.part && mv {started}.part {started}\nexec sleep 300\n")
    (bin_dir / "soffice").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    from localgpt_index.ingest.convert import ConverterSet

    converters = ConverterSet.detect(timeout_s=60)
    pdfs = make_pdfs(tmp_path, 2, 2, "doc")
    docx = make_docx(tmp_path / "memo.docx", ["memo"])
    sources = [FeedSource(p, PDF, p.stat().st_size) for p in pdfs] + [FeedSource(docx, OFFICE, docx.stat().st_size)]
    feed = PageFeed(sources, converters, tmp_path / "staging", (64, 64), queue_pages=8, prepare=None).start()
    try:
        # open, 2 pages, end, twice; and the conversion under way
        wait_until(lambda: len(feed._ahead) >= 8 and started.exists(), 30, "the PDFs' pages and the conversion's start")
        feed.set_prepare(lambda image: image)
        events = iter(feed)
        got = [next(events) for _ in range(8)]
        assert pid_alive(int(started.read_text())), "the pages waited for the conversion to end"
        by_document: dict[int, list[str]] = {}
        for event in got:
            by_document.setdefault(event.number, []).append(KINDS[type(event)])
        assert by_document == {0: ["open", "page", "page", "end"], 1: ["open", "page", "page", "end"]}
    finally:
        feed.close()
        converters.close()


def _query(index) -> list:
    result = run_cli("query", "doc 1 page 2", "-k", "20", "--index-dir", str(index), "--json")
    assert result.exit_code == 0, result.stderr
    return [(hit["path"].rsplit("/", 1)[-1], hit["page"], hit["score"]) for hit in json.loads(result.stdout)["queries"][0]["results"]]


def test_a_build_renders_while_its_model_loads_and_indexes_what_it_would_have(tmp_path, monkeypatch, fake_model):
    docs = tmp_path / "docs"
    make_pdfs(docs, 4, 3, "doc")
    log, bin_dir = tmp_path / "pdftoppm.log", tmp_path / "bin"  # each pdftoppm start, logged by a wrapper on PATH
    bin_dir.mkdir()
    (bin_dir / "pdftoppm").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {shutil.which("pdftoppm")} "$@"\n')
    (bin_dir / "pdftoppm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def rendered() -> list[str]:
        """The documents pdftoppm has rendered so far, once per run."""
        runs = log.read_text().splitlines() if log.exists() else []
        return [next(arg for arg in run.split() if arg.endswith(".pdf")) for run in runs]

    at_load: list[int] = []  # the documents rendered when the model's load began

    def on_load(name: str) -> None:
        """The model load waits (up to a deadline) for the feed beside it to render every document."""
        if name == "model-load":
            deadline = time.monotonic() + (30 if wait_for_feed else 0)
            while len(rendered()) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            at_load.append(len(rendered()))

    failpoints.set_hook(on_load)
    try:
        wait_for_feed = True
        result = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "early"), "--json")
        assert result.exit_code == 0, result.stderr
        assert at_load == [4] and len(rendered()) == 4  # all of it while the model loaded, none again after

        monkeypatch.setattr(local_engine, "expected_render_size", lambda model, tokens=None: None)  # the model first, as before
        log.unlink()
        wait_for_feed = False
        build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "after"))
        assert at_load == [4, 0] and len(rendered()) == 4
    finally:
        failpoints.set_hook(None)
    assert _query(tmp_path / "early") == _query(tmp_path / "after")


def test_pages_rendered_at_a_wrongly_expected_size_are_rendered_again(tmp_path, monkeypatch, fake_model):
    docs = tmp_path / "docs"
    make_pdfs(docs, 2, 3, "doc")
    build_ok(str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "right"))
    monkeypatch.setattr(local_engine, "expected_render_size", lambda model, tokens=None: (50, 70))
    wrong = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "wrong"), "-v")
    assert wrong.exit_code == 0, wrong.stderr
    assert "not (50, 70) as its saved settings say: rendering again" in wrong.stderr
    assert _query(tmp_path / "wrong") == _query(tmp_path / "right")


def test_a_model_that_cannot_be_loaded_ends_the_rendering_started_beside_it(tmp_path, fake_model):
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.index.local.store import LocalStore

    docs = tmp_path / "docs"
    make_pdfs(docs, 3, 2, "doc")

    def failing(model, options):
        wait_until(lambda: any(t.name == "lgpt-render" for t in threading.enumerate()), 30, "the feed's start")
        raise RuntimeError("the weights are not there")

    with pytest.raises(RuntimeError, match="weights"):
        build_index(docs, LocalStore(tmp_path / "idx" / "default"), BuildOptions(model=ModelSpec(str(fake_model))),
                    encoder_factory=failing)
    assert processes.running_count() == 0
    assert not [t for t in threading.enumerate() if t.name == "lgpt-render"]
