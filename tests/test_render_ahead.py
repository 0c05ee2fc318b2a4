"""Pages are converted and rendered while the model loads (a core that would otherwise wait),
held unprepared within a memory budget, and go out in order, prepared, once the encoder is ready."""

from __future__ import annotations

import json
import time

import pytest

import localgpt_index.build.local_engine as local_engine
import localgpt_index.ingest.feed as pipeline
from conftest import run_cli
from docgen import make_docx, make_pdf
from localgpt_index.ingest import processes
from localgpt_index.ingest.discover import OFFICE, PDF
from localgpt_index.ingest.events import DocumentDone, DocumentOpened, PageReady
from localgpt_index.ingest.feed import FeedSource, PageFeed

KINDS = {DocumentOpened: "open", PageReady: "page", DocumentDone: "end"}


@pytest.fixture(autouse=True)
def processes_allowed():
    yield
    processes.reset()  # a closed feed stops every external process and refuses new ones


def _pdfs(folder, count: int, pages: int) -> list:
    return [make_pdf(folder / f"doc-{n}.pdf", [f"doc {n} page {p}" for p in range(pages)]) for n in range(count)]


def _events(feed: PageFeed) -> dict[int, list[tuple]]:
    """Each document's events in order (documents go out as their opening finishes)."""
    events: dict[int, list[tuple]] = {}
    for e in feed:
        events.setdefault(e.number, []).append((KINDS[type(e)], e.image if isinstance(e, PageReady) else None))
    return events


def test_pages_wait_in_files_within_the_budget_then_go_out_in_order_prepared(tmp_path, monkeypatch):
    """While the model loads, rendered pages wait as files in the staging folder (not in memory),
    up to AHEAD_BYTES; once the encoder is ready they are prepared and go out in their order."""
    pdfs = _pdfs(tmp_path, 3, 4)
    sources = [FeedSource(pdf, PDF, pdf.stat().st_size) for pdf in pdfs]
    page_file = len(b"P6\n64 64\n255\n") + 64 * 64 * 3
    monkeypatch.setattr(pipeline, "AHEAD_BYTES", 5 * page_file)
    prepare = lambda image: ("prepared", image.size, image.tobytes())  # noqa: E731
    expected = _events(PageFeed(sources, None, tmp_path, (64, 64), queue_pages=4, prepare=prepare))

    staging = tmp_path / "staging"
    staging.mkdir()
    early = PageFeed(sources, None, staging, (64, 64), queue_pages=4, prepare=None).start()
    deadline = time.monotonic() + 30
    while early._ahead.bytes < 5 * page_file and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the producer now waits for the encoder: nothing more is rendered
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
    pdf = _pdfs(tmp_path, 1, 3)[0]
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
    (bin_dir / "soffice").write_text("#!/bin/sh\nsleep 300\n")
    (bin_dir / "soffice").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    from localgpt_index.ingest.convert import ConverterSet

    converters = ConverterSet.detect(timeout_s=60)
    pdfs = _pdfs(tmp_path, 2, 2)
    docx = make_docx(tmp_path / "memo.docx", ["memo"])
    sources = [FeedSource(p, PDF, p.stat().st_size) for p in pdfs] + [FeedSource(docx, OFFICE, docx.stat().st_size)]
    feed = PageFeed(sources, converters, tmp_path / "staging", (64, 64), queue_pages=8, prepare=None).start()
    try:
        deadline = time.monotonic() + 30
        while len(feed._ahead) < 8 and time.monotonic() < deadline:  # open, 2 pages, end, twice
            time.sleep(0.01)
        started = time.monotonic()
        feed.set_prepare(lambda image: image)
        events = iter(feed)
        got = [next(events) for _ in range(8)]
        assert time.monotonic() - started < 5
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
    return [(hit["path"].rsplit("/", 1)[-1], hit["page"], hit["score"]) for hit in json.loads(result.stdout)["results"]]


def test_a_build_renders_while_its_model_loads_and_indexes_what_it_would_have(tmp_path, monkeypatch):
    from localgpt_index.testing.fake import write_fake_checkpoint

    docs = tmp_path / "docs"
    _pdfs(docs, 4, 3)
    model = write_fake_checkpoint(tmp_path / "slow-model", seconds_to_load=1.0)
    rendered: list[float] = []
    render = pipeline.render_pdf_pages

    def timed(*args, **kwargs):
        rendered.append(time.monotonic())
        return render(*args, **kwargs)

    monkeypatch.setattr(pipeline, "render_pdf_pages", timed)
    started = time.monotonic()
    result = run_cli("build", str(docs), "--model", str(model), "--index-dir", str(tmp_path / "early"), "--json")
    assert result.exit_code == 0, result.stderr
    assert len(rendered) == 4 and max(rendered) < started + 1.0  # all of it while the model loaded

    monkeypatch.setattr(local_engine, "expected_render_size", lambda model, tokens=None: None)  # the model first, as before
    rendered.clear()
    started = time.monotonic()
    assert run_cli("build", str(docs), "--model", str(model), "--index-dir", str(tmp_path / "after")).exit_code == 0
    assert min(rendered) > started + 1.0
    assert _query(tmp_path / "early") == _query(tmp_path / "after")


def test_pages_rendered_at_a_wrongly_expected_size_are_rendered_again(tmp_path, monkeypatch, fake_model):
    docs = tmp_path / "docs"
    _pdfs(docs, 2, 3)
    assert run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "right")).exit_code == 0
    monkeypatch.setattr(local_engine, "expected_render_size", lambda model, tokens=None: (50, 70))
    wrong = run_cli("build", str(docs), "--model", str(fake_model), "--index-dir", str(tmp_path / "wrong"), "-v")
    assert wrong.exit_code == 0, wrong.stderr
    assert "not (50, 70) as its saved settings say: rendering again" in wrong.stderr
    assert _query(tmp_path / "wrong") == _query(tmp_path / "right")


def test_a_model_that_cannot_be_loaded_ends_the_rendering_started_beside_it(tmp_path, fake_model):
    from localgpt_index.build.run import BuildOptions, build_index
    from localgpt_index.index.store import IndexStore

    docs = tmp_path / "docs"
    _pdfs(docs, 3, 2)

    def failing(model, options):
        time.sleep(0.5)  # the feed is rendering by now
        raise RuntimeError("the weights are not there")

    with pytest.raises(RuntimeError, match="weights"):
        build_index(docs, IndexStore(tmp_path / "idx" / "default"), BuildOptions(model=str(fake_model)),
                    encoder_factory=failing)
    assert processes.running_count() == 0
    assert not [t for t in __import__("threading").enumerate() if t.name == "lgpt-render"]
