"""The byaldi loading path and the autocast context, observed inside the forward pass."""

from __future__ import annotations

import pytest
from PIL import Image

from localgpt_index.models.device import Capabilities, choose_precision
from localgpt_index.models.loading import open_encoder
from localgpt_index.models.torch_encoder import TorchEncoder
from localgpt_index.models.resolve import resolve_model

pytestmark = pytest.mark.slow  # the real-component tier


def _encoder(model_dir, dtype: str, batch_size: int = 3) -> TorchEncoder:
    precision = choose_precision(Capabilities(), device="cpu", dtype=dtype)
    return open_encoder(resolve_model(str(model_dir)), precision, batch_size)


def _observe_autocast(encoder: TorchEncoder) -> list[tuple[bool, object, object]]:
    import torch

    seen = []

    def hook(module, args, kwargs):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), kwargs["pixel_values"].dtype
                     if "pixel_values" in kwargs else None))

    encoder.net.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


@pytest.mark.parametrize("dtype, autocast", [("bfloat16", True), ("float32", False)])
def test_autocast_is_entered_with_the_probed_dtype(tiny_model, dtype, autocast):
    import torch

    encoder = _encoder(tiny_model, dtype)
    seen = _observe_autocast(encoder)
    pages = [Image.new("RGB", (80, 100), c) for c in ("white", "black", "red", "blue", "green")]
    vectors = encoder.encode_pages(pages)

    assert encoder.forward_calls == 2  # batch size 3: two forward passes, not five
    assert len(seen) == 2
    for enabled, autocast_dtype, pixel_dtype in seen:
        assert enabled is autocast
        if autocast:
            assert autocast_dtype == getattr(torch, dtype)
        assert pixel_dtype == getattr(torch, dtype)  # inputs cast at the model boundary
    assert {p.dtype for p in encoder.net.parameters()} == {getattr(torch, dtype)}
    assert len(vectors) == 5 and all(v.dtype.name == "float16" and v.shape == (29, 128) for v in vectors)


def test_loaded_through_byaldi_with_colpali_engine_classes(tiny_model, monkeypatch):
    import byaldi
    from colpali_engine.models import ColPali, ColPaliProcessor

    calls = []
    original = byaldi.RAGMultiModalModel.from_pretrained.__func__

    def spy(cls, path, **kwargs):
        calls.append((path, kwargs))
        return original(cls, path, **kwargs)

    monkeypatch.setattr(byaldi.RAGMultiModalModel, "from_pretrained", classmethod(spy))
    encoder = _encoder(tiny_model, "float32")
    assert calls and calls[0][1]["device"] == "cpu"
    assert isinstance(encoder.net, ColPali) and isinstance(encoder.processor, ColPaliProcessor)
    assert encoder.render_size == (56, 56)


def test_folder_without_colpali_in_its_name_still_loads(tiny_model, tmp_path):
    import shutil

    plain = shutil.copytree(tiny_model, tmp_path / "my-model")
    encoder = _encoder(plain, "float32")
    query = encoder.encode_queries(["what was q3 revenue?"])[0]
    assert query.shape[1] == 128
    assert abs(float((query[0] ** 2).sum()) - 1.0) < 1e-3  # unit-norm rows


def test_query_vectors_match_byaldi_encode_query(tiny_model):
    """Our query path gives byaldi's own vectors (same model, float32)."""
    import numpy as np
    import torch
    from byaldi import RAGMultiModalModel

    encoder = _encoder(tiny_model, "float32")
    rag = RAGMultiModalModel.from_pretrained(str(tiny_model), device="cpu", verbose=0)
    rag.model.model = rag.model.model.to(torch.float32)
    theirs = rag.model.encode_query("quarterly revenue").float().numpy()[0]
    ours = encoder.encode_queries(["quarterly revenue"])[0]
    np.testing.assert_allclose(ours, theirs[: len(ours)], atol=1e-5)


def test_a_query_does_not_depend_on_its_batch_neighbours(tiny_model):
    """Padded queries under transformers 5's sdpa attention come out different (by up to 0.07 a
    component on these checkpoints): queries of different lengths must never share a pass."""
    import numpy as np

    encoder = _encoder(tiny_model, "float32")
    queries = ["revenue", "market outlook for the third quarter", "invoice total", "what was q3 revenue in 2024"]
    together = encoder.encode_queries(queries)
    for query, vectors in zip(queries, together):
        np.testing.assert_array_equal(encoder.encode_queries([query])[0], vectors)
    assert encoder.processor.process_queries(queries)["attention_mask"].min() == 0  # they do differ in length


def test_a_pass_computes_no_logits_and_builds_no_cache(tiny_model):
    """ColPali reads its last hidden states only: a forward pass turns no token into vocabulary logits
    (PaliGemma-3B's LM head reads 1 GB of weights for one token) and builds no key-value cache."""
    from helpers import pass_by_products

    encoder = _encoder(tiny_model, "float32")
    seen = pass_by_products(encoder.net)
    encoder.encode_queries(["revenue", "invoice total"])
    encoder.encode_pages([Image.new("RGB", (60, 80), "white")])
    # the page's pass and the first query's check run the whole network, its LM head given no token
    assert seen["logits"] == [0, 0]
    assert seen["caches"] == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_queries_go_through_colpali_s_parts_with_the_whole_network_s_bits(tiny_model, dtype):
    """A query skips ColPali's captured hidden states and LM head, and PaliGemmaModel's mask building for
    a length already seen (colpali_parts): its vectors are the whole network's bit for bit; where the
    parts ever differ, the whole network answers from then on."""
    import numpy as np
    import torch

    encoder = _encoder(tiny_model, dtype)
    queries = ["revenue", "market outlook for the third quarter", "what was q3 revenue in 2024"]

    def whole(query):
        batch = {k: v for k, v in encoder.processor.process_queries([query]).items()}
        with torch.inference_mode(), torch.autocast("cpu", dtype=encoder.runner.dtype, enabled=dtype != "float32"):
            return encoder.net(**batch)[0].float().numpy()

    for query, vectors in zip(queries, encoder.encode_queries(queries)):
        np.testing.assert_array_equal(vectors, whole(query))
    assert encoder.runner.query_parts is not None  # checked on the first query, and kept
    # each length's mask and positions kept; the queries again, now through the language model directly
    # (the first of them also through PaliGemmaModel, once a process: the same bits, so kept)
    assert len(encoder.runner.query_parts.shapes) == len(queries) and encoder.runner.query_parts.direct is None
    for query, vectors in zip(queries, encoder.encode_queries(queries)):
        np.testing.assert_array_equal(vectors, whole(query))
    assert encoder.runner.query_parts.direct is True

    drifted = _encoder(tiny_model, dtype)
    direct = drifted.runner.query_parts._language_model
    drifted.runner.query_parts._language_model = lambda *args: direct(*args) + 1  # a pass that differs (a scale is normed away)
    for _ in range(3):
        np.testing.assert_array_equal(drifted.encode_queries([queries[1]])[0], whole(queries[1]))
    assert drifted.runner.query_parts.direct is False and drifted.runner.query_parts.shapes == {}  # found out, never used

    off = _encoder(tiny_model, dtype)
    parts = off.runner.query_parts
    off.runner.query_parts = lambda inputs: parts(inputs) * 2  # parts that no longer match
    np.testing.assert_array_equal(off.encode_queries([queries[0]])[0], whole(queries[0]))
    assert off.runner.query_parts is None

    broken = _encoder(tiny_model, dtype)

    def gone(inputs):  # a colpali-engine or transformers whose parts are not where they were
        raise AttributeError("'ColPali' object has no attribute 'model'")

    broken.runner.query_parts = gone
    np.testing.assert_array_equal(broken.encode_queries([queries[0]])[0], whole(queries[0]))
    assert broken.runner.query_parts is None


def test_a_query_length_keeps_its_own_mask_while_another_thread_encodes(tiny_model):
    """Two threads' first queries of two lengths overlapping on one encoder: each length keeps the mask
    and positions of its own pass (the hook on the language model is there for both passes)."""
    import threading

    encoder = _encoder(tiny_model, "float32")
    encoder.encode_queries(["warm up"])  # the runner's first-query check out of the way
    language = encoder.net.model.model.language_model
    short, long = "revenue", "market outlook for the third quarter of the year"
    long_inside, short_done = threading.Event(), threading.Event()

    def after(module, args, output):  # the long query's pass waits inside (its hook on) until the short one's is done
        if threading.current_thread().name == "long":
            long_inside.set()
            assert short_done.wait(30)
        else:
            short_done.set()

    gate = language.register_forward_hook(after)
    other = threading.Thread(target=encoder.encode_queries, args=([long],), name="long")
    other.start()
    assert long_inside.wait(30)
    encoder.encode_queries([short])
    other.join(30)
    gate.remove()
    kept = {key[0][1][1]: positions.shape[-1] for key, (_, positions) in encoder.runner.query_parts.shapes.items()}
    tokens = {len(encoder.processor.process_queries([text])["input_ids"][0]) for text in (short, long)}
    assert tokens <= set(kept) and all(length == positions for length, positions in kept.items()), kept


def test_page_batches_equal_the_processor_output(tiny_model):
    """The cached prompt tokens plus per-page pixels are exactly what process_images gives."""
    import torch

    encoder = _encoder(tiny_model, "float32")
    pages = [Image.new("RGB", size, color) for size, color in (((80, 100), "white"), ((300, 200), "red"), ((56, 56), "blue"))]
    theirs = encoder.processor.process_images(pages)
    for ours in (encoder.process_pages(pages), encoder.process_pages([encoder.prepare_page(p) for p in pages])):
        assert set(ours) == set(theirs) - {"labels"}  # training targets, never fed to the model
        for key, value in ours.items():
            assert torch.equal(value, theirs[key]), key


def test_compiled_encoder_matches_eager_and_keeps_one_shape(tiny_model):
    """build --compile: same vectors as eager; a short last batch is padded, not recompiled."""
    import numpy as np

    eager = _encoder(tiny_model, "float32")
    pages = [Image.new("RGB", (60, 80), c) for c in ("white", "black", "red", "blue", "green")]
    expected = eager.encode_pages(pages)
    compiled = open_encoder(resolve_model(str(tiny_model)), eager.precision, batch_size=3, compile=True)
    shapes = []
    compiled.net.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["pixel_values"].shape)), with_kwargs=True)
    got = compiled.encode_pages(pages)
    assert len(got) == 5 and shapes == [(3, 3, 56, 56), (3, 3, 56, 56)]
    for a, b in zip(expected, got):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), atol=2e-3)
