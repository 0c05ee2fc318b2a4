"""The build holds a bounded number of pages, whatever the size of the corpus."""

from __future__ import annotations

import gc
import weakref

import pytest

import localgpt_index.ingest.render as render
from docgen import make_pdf

pytestmark = pytest.mark.slow  # the real-component tier


def test_pages_in_flight_are_bounded_by_batch_and_queue(tiny_model, tmp_path, monkeypatch):
    from localgpt_index.indexing.run import BuildOptions, build_index
    from localgpt_index.models.resolve import ModelSpec
    from localgpt_index.ingest.feed import RENDER_CHUNK
    from localgpt_index.index.local.store import LocalStore

    docs = tmp_path / "docs"
    make_pdf(docs / "long.pdf", [f"page {i}" for i in range(120)])
    for i in range(4):
        make_pdf(docs / f"short-{i}.pdf", ["a", "b", f"c{i}"])

    alive: list[weakref.ref] = []
    original = render.render_pdf_pages

    def tracked(*args, **kwargs):
        images = original(*args, **kwargs)
        alive.extend(weakref.ref(image) for image in images)
        return images

    monkeypatch.setattr("localgpt_index.ingest.feed.render_pdf_pages", tracked)
    from localgpt_index.models.loading import load_page_encoder

    prepared: list[weakref.ref] = []

    def tracking_encoder(model, options):
        """The real encoder, its prepared pages watched (build_index's encoder_factory seam)."""
        encoder = load_page_encoder(model, options)
        original_prepare = encoder.prepare_page

        def tracked_prepare(image):
            tensor = original_prepare(image)
            prepared.append(weakref.ref(tensor))
            return tensor

        encoder.prepare_page = tracked_prepare
        return encoder

    peak = {"images": 0, "tensors": 0}
    batch = 4

    class Watch:
        def add_task(self, name, total):
            pass

        def advance(self, name, amount=1, total=None):
            if name != "pages":
                return
            gc.collect()
            peak["images"] = max(peak["images"], sum(ref() is not None for ref in alive))
            peak["tensors"] = max(peak["tensors"], sum(ref() is not None for ref in prepared))

    report = build_index(docs, LocalStore(tmp_path / "idx" / "default"),
                         BuildOptions(model=ModelSpec(str(tiny_model)), batch_size=batch), progress=Watch(),
                         encoder_factory=tracking_encoder)
    assert report.pages_embedded == 132
    # rendered images: at most the chunk being prepared; prepared pages: the queue (2 batches),
    # the batch being encoded and one in the producer's hand
    assert peak["images"] > 0 and peak["tensors"] > 0  # it did watch something
    assert peak["images"] <= RENDER_CHUNK
    assert peak["tensors"] <= 2 * batch + batch + 1
