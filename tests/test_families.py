"""Model families: recognised from config.json, loaded by the right library, pages and queries
encoded as colpali-engine encodes them, a page's vectors independent of its batch neighbours."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import run_cli
from docgen import PAGE_SHAPES, make_docx, make_pdf, make_pdf_of_shapes, make_png
from helpers import build_ok
from localgpt_index.core.errors import UsageError
from localgpt_index.models.families import FAMILIES, QWEN_GRID, detect_family, family_named
from localgpt_index.testing.checkpoints import CHECKPOINT_FAMILIES
from localgpt_index.models.resolve import resolve_model


def _folder(tmp_path: Path, config: dict) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_family_is_recognised_by_architecture_and_by_model_type(family):
    assert detect_family({"architectures": [family.architecture], "model_type": "anything"}) is family
    assert detect_family({"model_type": family.model_types[0]}) is family


def test_the_folder_name_does_not_decide_the_family(tmp_path):
    # byaldi would load this as plain ColQwen2 from its name
    folder = _folder(tmp_path / "my-colqwen2.5", {"model_type": "qwen2_5_vl", "architectures": ["ColQwen2_5"]})
    assert resolve_model(str(folder)).family == "colqwen2_5"
    folder = _folder(tmp_path / "colpali-named", {"model_type": "qwen2_vl", "architectures": ["ColQwen2"]})
    assert resolve_model(str(folder)).family == "colqwen2"


@pytest.mark.parametrize("config", [{"model_type": "bert"}, {"model_type": "qwen2_vl", "architectures": ["BiQwen2"]}, {}])
def test_an_unknown_or_single_vector_model_is_refused_with_the_supported_list(tmp_path, config):
    with pytest.raises(UsageError) as refused:
        resolve_model(str(_folder(tmp_path / "model", config)))
    for family in FAMILIES:
        assert family.display in refused.value.message


@pytest.fixture(scope="module", params=CHECKPOINT_FAMILIES)
def family_model(request, tmp_path_factory) -> Path:
    from localgpt_index.testing.checkpoints import make_family_checkpoint

    return make_family_checkpoint(tmp_path_factory.mktemp("models") / request.param, request.param)


def _encoder(model: Path, batch_size: int = 4):
    from localgpt_index.models.device import Capabilities, choose_precision
    from localgpt_index.models.loading import open_encoder

    return open_encoder(resolve_model(str(model)), choose_precision(Capabilities(), device="cpu", dtype="float32"), batch_size)


def _engine(model: Path):
    """The family's model and processor straight from colpali-engine, as its README loads them
    (in float32; for the families byaldi loads, through bfloat16 first, as byaldi does)."""
    import colpali_engine.models as engine
    import torch

    from localgpt_index.models.families import family_named

    family = family_named(resolve_model(str(model)).family)
    dtype = torch.bfloat16 if family.loader.name == "byaldi" else torch.float32
    net = getattr(engine, family.architecture).from_pretrained(str(model), dtype=dtype).float().eval()
    return net, getattr(engine, family.processor).from_pretrained(str(model))


@pytest.mark.slow
def test_the_right_library_loads_the_family(family_model):
    from localgpt_index.models.families import family_named

    encoder = _encoder(family_model)
    family = family_named(encoder.model.family)
    assert encoder.loader == family.loader.name
    assert type(encoder.net).__name__ == family.architecture


@pytest.mark.slow
def test_a_page_alone_and_in_a_mixed_batch_gives_the_same_vectors(family_model):
    encoder = _encoder(family_model)
    tall, wide, square = (Image.effect_noise(size, 60).convert("RGB") for size in [(200, 300), (420, 140), (250, 250)])
    alone = encoder.encode_pages([tall])[0]
    masks = []
    encoder.net.register_forward_pre_hook(lambda module, args, kwargs: masks.append(kwargs["attention_mask"]), with_kwargs=True)
    mixed = encoder.encode_pages([wide, tall, square, wide])
    assert masks and all(bool(mask.all()) for mask in masks)  # no page was padded to a neighbour's length
    assert mixed[1].shape == alone.shape
    if family_named(encoder.model.family).dynamic:
        assert mixed[0].shape != alone.shape  # different token counts in one batch
    np.testing.assert_allclose(mixed[1].astype(np.float32), alone.astype(np.float32), atol=1e-3)


@pytest.mark.slow
def test_pages_are_rendered_at_the_size_the_processor_uses(family_model, tmp_path):
    """Pages of every shape: the processor makes the same grid of our rendering as of pdf2image's
    200 dpi one (what colpali-engine's loop hands it), and does not resize ours."""
    from pdf2image import convert_from_path

    from localgpt_index.ingest.render import PixelBudget, render_pdf_pages

    encoder = _encoder(family_model)
    size = encoder.render_size
    pdf = make_pdf_of_shapes(tmp_path / "shapes.pdf")
    ours = render_pdf_pages(pdf, size, 1, len(PAGE_SHAPES))
    if not isinstance(size, PixelBudget):  # a fixed size, or a long side the processor tiles
        assert all(im.size == size if isinstance(size, tuple) else max(im.size) == size for im in ours)
        return
    processor = encoder.processor
    for page, reference in zip(ours, convert_from_path(str(pdf))):
        grid = processor.process_images([page])["image_grid_thw"][0].tolist()
        assert grid == processor.process_images([reference])["image_grid_thw"][0].tolist()
        patch = processor.image_processor.patch_size
        assert page.size == (grid[2] * patch, grid[1] * patch)  # taken as it is


@pytest.mark.slow
def test_pages_and_queries_match_colpali_engine(family_model):
    import torch

    encoder = _encoder(family_model)
    net, processor = _engine(family_model)
    pages = [Image.effect_noise(size, 40).convert("RGB") for size in [(220, 300), (300, 220)]]
    queries = ["quarterly revenue", "invoice total amount due"]
    with torch.inference_mode():
        theirs_pages = [net(**processor.process_images([page]))[0] for page in pages]
        theirs_queries = [net(**processor.process_queries([query]))[0] for query in queries]
    ours_pages = [torch.from_numpy(v.astype(np.float32)) for v in encoder.encode_pages(pages)]
    ours_queries = [torch.from_numpy(v) for v in encoder.encode_queries(queries)]
    for ours, theirs in zip(ours_pages, theirs_pages):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-3)
    expected = processor.score(theirs_queries, theirs_pages).float()
    np.testing.assert_allclose(processor.score(ours_queries, ours_pages).float().numpy(), expected.numpy(), rtol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_prepared_page_is_what_process_images_gives(family_model, dtype):
    """What the render thread prepares is exactly colpali-engine's process_images output, cast to
    the model's dtype; for the Qwen families a second page of a size reuses the first one's text,
    and the pixels are the first of the processor's temporal frames, which are all the same."""
    import torch

    from localgpt_index.models.device import Capabilities, choose_precision
    from localgpt_index.models.loading import open_encoder
    from localgpt_index.models.qwen_frames import first_frame

    encoder = open_encoder(resolve_model(str(family_model)), choose_precision(Capabilities(), device="cpu", dtype=dtype), 2)
    qwen = encoder.model.family in QWEN_GRID
    assert encoder.one_frame == qwen
    image_processor = encoder.processor.image_processor
    sizes = [(220, 300), (300, 220), (220, 300)]
    if qwen:  # and pages the processor takes as they are (the size a build renders at), made without it
        patch = image_processor.patch_size
        grids = [encoder.processor.process_images([Image.new("RGB", size)])["image_grid_thw"][0] for size in sizes[:2]]
        sizes += [(int(w) * patch, int(h) * patch) for _, h, w in grids] * 2
    for size in sizes:
        page = Image.effect_noise(size, 40).convert("RGB")
        ours, theirs = encoder.prepare_page(page), encoder.processor.process_images([page])
        assert set(ours) == set(theirs)
        for key, value in theirs.items():
            expected = value
            if key == "pixel_values" and qwen:
                frames = value[0].view(value.shape[1], 3, image_processor.temporal_patch_size, -1)
                assert all(torch.equal(frames[:, :, 0], frames[:, :, t]) for t in range(1, frames.shape[2]))
                expected = first_frame(value[0], image_processor.temporal_patch_size, image_processor.patch_size)
                expected = expected.unsqueeze(0).to(getattr(torch, dtype))
            assert ours[key].dtype == expected.dtype and torch.equal(ours[key], expected), (key, size)
    if qwen:
        assert [encoder.grid._texts[size][1] is not None for size in sizes] == [False] * 3 + [True] * 4


@pytest.mark.slow
def test_a_batch_of_pages_reaches_the_model_without_a_copy_of_their_pixels(family_model):
    """A Qwen-family model concatenates its pages' pixels itself (its unpadding): they go to it as
    the list of prepared pages, not concatenated once more (7 MB a page in float32); the others'
    pages are concatenated once. Either way a page's vectors are those it has alone."""
    import torch

    from localgpt_index.models.page_batches import collate

    encoder = _encoder(family_model)
    images = [Image.effect_noise((220, 300), 40).convert("RGB") for _ in range(3)]
    pages = [encoder.prepare_page(image) for image in images]
    if encoder.model.family == "colpali":
        pages = [{"pixel_values": page.unsqueeze(0)} for page in pages]  # its batches come from process_pages
    pixels = collate(pages, family_named(encoder.model.family).pixel_grid)["pixel_values"]
    if encoder.model.family in QWEN_GRID:
        assert [p.data_ptr() for p in pixels] == [page["pixel_values"].data_ptr() for page in pages]
    else:
        assert torch.equal(pixels, torch.cat([page["pixel_values"] for page in pages]))
    together = encoder.encode_pages(images)
    for image, vectors in zip(images, together):
        np.testing.assert_allclose(vectors, encoder.encode_pages([image])[0], atol=1e-3)


@pytest.mark.slow
def test_a_pass_builds_no_key_value_cache(family_model):
    """A forward pass builds no cache of keys and values (nothing is generated after it): where the
    family's network builds one unless told not to, the runner tells it (families.Family.use_cache)."""
    from helpers import pass_by_products

    encoder = _encoder(family_model)
    seen = pass_by_products(encoder.net)
    encoder.encode_queries(["quarterly revenue"])
    encoder.encode_pages([Image.effect_noise((220, 300), 40).convert("RGB")])
    assert encoder.forward_calls == 2 and seen["caches"] == []
    assert all(count == 0 for count in seen["logits"])


@pytest.mark.slow
def test_the_qwen_patch_embedding_runs_as_a_product_with_the_convolution_s_result(family_model):
    import torch

    encoder = _encoder(family_model)
    embeddings = [m for m in encoder.net.modules() if isinstance(getattr(m, "proj", None), torch.nn.Conv3d)]
    assert encoder.patch_embeddings_as_products == len(embeddings) == (encoder.model.family in QWEN_GRID)
    for module in embeddings:
        kernel = module.proj.weight.shape[1:]
        rows = torch.randn(50, kernel.numel())
        with torch.inference_mode():
            expected = module.proj(rows.view(-1, *kernel)).view(50, -1)
            torch.testing.assert_close(module(rows), expected, atol=1e-5, rtol=1e-5)
            # rows of one frame (a page: its frames are copies): the convolution of the frame repeated
            frame = torch.randn(50, kernel[0], 1, *kernel[2:])
            repeated = frame.expand(-1, -1, kernel[1], -1, -1)
            expected = module.proj(repeated.contiguous()).view(50, -1)
            torch.testing.assert_close(module(frame.reshape(50, -1)), expected, atol=1e-5, rtol=1e-5)


def _assert_scores_match_colpali_engine(model: Path, index_dir: Path, query: str, hits: list[dict]) -> None:
    """The scores a query printed against colpali-engine's: its model encodes the query, its
    processor.score scores it against the stored page vectors."""
    import torch

    from localgpt_index import open_index

    net, processor = _engine(model)
    with torch.inference_mode():
        query_vectors = net(**processor.process_queries([query]))[0]
    index = open_index(index_dir)
    for hit in hits:
        page = index.view.page_vectors(index.document(hit["path"]))[hit["page"] - 1]
        expected = float(processor.score([query_vectors], [torch.from_numpy(page.astype(np.float32))])[0, 0])
        assert abs(hit["score"] - expected) <= 1e-3 * max(1.0, abs(expected)), (hit, expected)


@pytest.mark.slow
def test_build_and_query_a_corpus(family_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "report.pdf", ["quarterly revenue", "invoice total", "market outlook"])
    make_png(docs / "scan.png", "receipt", size=(500, 300))
    make_docx(docs / "memo.docx", ["Memo", "Revenue grew."])
    # float32, as the colpali-engine reference below (the probe would pick bfloat16 on a CPU with AVX512-BF16)
    index, float32 = ["--index-dir", str(tmp_path / "idx")], ["--dtype", "float32"]
    built = run_cli("build", str(docs), "--model", str(family_model), "--json", *index, *float32)
    assert built.exit_code == 0, built.stderr
    report = json.loads(built.stdout)
    assert report["pages_embedded"] == 5 and report["model"]["family"] == resolve_model(str(family_model)).family
    status = json.loads(run_cli("status", "--json", *index).stdout)
    # a grid sized by a pixel budget: each page its own size, the budget kept as max_visual_tokens;
    # other dynamic families: a long side; else the model's fixed size
    family, settings = family_named(report["model"]["family"]), status["settings"]
    if family.name in QWEN_GRID:
        assert settings.get("render_size") is None and settings["max_visual_tokens"] >= 1
    else:
        assert len(settings["render_size"]) == (1 if family.dynamic else 2)
    answer = run_cli("query", "quarterly revenue", "-k", "5", "--json", "--mode", "visual", *index, *float32)
    assert answer.exit_code == 0, answer.stderr
    hits = json.loads(answer.stdout)["queries"][0]["results"]
    assert sorted((Path(h["path"]).name, h["page"]) for h in hits) == [("memo.docx", 1), ("report.pdf", 1), ("report.pdf", 2),
                                                                      ("report.pdf", 3), ("scan.png", 1)]
    _assert_scores_match_colpali_engine(family_model, tmp_path / "idx", "quarterly revenue", hits)
    again = json.loads(run_cli("build", str(docs), "--json", *index, *float32).stdout)
    assert again["pages_embedded"] == 0 and again["model_calls"] == 0


def _vectors_per_page(index_dir: Path) -> list[int]:
    from localgpt_index import open_index

    index = open_index(index_dir)
    return [len(v) for doc in index.documents for v in index.view.page_vectors(doc)]


@pytest.mark.slow
def test_max_visual_tokens_is_recorded_and_kept(tmp_path):
    from localgpt_index.testing.checkpoints import make_family_checkpoint

    model = make_family_checkpoint(tmp_path / "colqwen2_5", "colqwen2_5")
    docs = tmp_path / "docs"
    make_pdf(docs / "report.pdf", ["quarterly revenue", "invoice total"])
    full, capped = ["--index-dir", str(tmp_path / "full")], ["--index-dir", str(tmp_path / "capped")]
    build_ok(str(docs), "--model", str(model), *full)
    built = run_cli("build", str(docs), "--model", str(model), "--max-visual-tokens", "8", *capped)
    assert built.exit_code == 0, built.stderr
    assert json.loads(run_cli("status", "--json", *capped).stdout)["settings"]["max_visual_tokens"] == 8
    assert json.loads(run_cli("status", "--json", *full).stdout)["settings"]["max_visual_tokens"] == 64
    processor = _engine(model)[1]
    prompt = len(processor.tokenizer(processor.visual_prompt_prefix)["input_ids"]) - 1  # text tokens around the image
    assert all(n <= prompt + 8 for n in _vectors_per_page(tmp_path / "capped"))
    assert min(_vectors_per_page(tmp_path / "full")) > prompt + 8

    make_pdf(docs / "more.pdf", ["market outlook"])
    other = run_cli("build", str(docs), "--max-visual-tokens", "16", *capped)
    assert other.exit_code == 1 and "--max-visual-tokens 8" in other.stderr and "--rebuild" in other.stderr
    kept = run_cli("build", str(docs), "--json", *capped)  # no option: the index's own
    assert kept.exit_code == 0 and json.loads(kept.stdout)["pages_embedded"] == 1
    assert all(n <= prompt + 8 for n in _vectors_per_page(tmp_path / "capped"))
    rebuilt = run_cli("build", str(docs), "--max-visual-tokens", "16", "--rebuild", *capped)
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert json.loads(run_cli("status", "--json", *capped).stdout)["settings"]["max_visual_tokens"] == 16

    # a rebuild of one folder with another budget would keep another folder's pages made with the old one
    make_pdf(tmp_path / "elsewhere" / "memo.pdf", ["board minutes"])
    assert run_cli("build", str(tmp_path / "elsewhere"), *capped).exit_code == 0
    mixed = run_cli("build", str(docs), "--max-visual-tokens", "8", "--rebuild", *capped)
    assert mixed.exit_code == 1 and "visual-token budget" in mixed.stderr and str(tmp_path / "elsewhere") in mixed.stderr, mixed.stderr


def test_max_visual_tokens_is_refused_where_the_family_has_no_budget(fake_model, tmp_path):
    docs = tmp_path / "docs"
    make_pdf(docs / "report.pdf", ["quarterly revenue"])
    result = run_cli("build", str(docs), "--model", str(fake_model), "--max-visual-tokens", "8",
                     "--index-dir", str(tmp_path / "idx"))
    assert result.exit_code == 2 and "--max-visual-tokens" in result.stderr and "ColQwen2.5" in result.stderr


@pytest.mark.slow
def test_doctor_reports_family_loader_tokens_and_bytes(family_model):
    from conftest import validate
    from localgpt_index.models.families import family_named

    result = run_cli("doctor", "--model", str(family_model), "--device", "cpu", "--json")
    report = json.loads(result.stdout)
    validate(report, "doctor")
    model = report["model"]
    family = family_named(resolve_model(str(family_model)).family)
    assert (model["family"], model["loader"], model["dynamic_resolution"]) == (family.name, family.loader.name, family.dynamic)
    smoke = model["smoke_test"]
    assert smoke["ok"], smoke
    rows, dim = smoke["page_vectors"]
    assert smoke["vector_bytes_per_page"] == rows * dim * 2 and 0 < smoke["image_tokens_per_page"] < rows


@pytest.mark.slow
def test_byaldi_export_is_refused_for_a_family_byaldi_cannot_load(tmp_path):
    from localgpt_index.testing.checkpoints import make_family_checkpoint

    model = make_family_checkpoint(tmp_path / "colidefics3", "colidefics3")
    docs = tmp_path / "docs"
    make_pdf(docs / "report.pdf", ["quarterly revenue"])
    index = ["--index-dir", str(tmp_path / "idx")]
    build_ok(str(docs), "--model", str(model), *index)
    result = run_cli("export", "--format", "byaldi", str(tmp_path / "out"), *index)
    assert result.exit_code == 2 and "ColIdefics3" in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_full_colqwen2_5_geometry_has_the_3b_model_s_layers(tmp_path):
    """scripts/bench_gpu.py --family colqwen2_5 times a model with the real one's FLOPs a page."""
    import torch

    import colpali_engine.models as engine
    from localgpt_index.testing.checkpoints import QWEN_CELLS, _qwen_parts, make_family_checkpoint

    _, images, _, config = _qwen_parts("colqwen2_5", "full")
    with torch.device("meta"):  # the shapes without 14 GB of float32 weights
        model = engine.ColQwen2_5(config)
    assert 3.4e9 < sum(p.numel() for p in model.parameters()) < 3.5e9
    vision, text = config.vision_config, config.text_config
    assert (vision.depth, vision.hidden_size, vision.fullatt_block_indexes) == (32, 1280, [7, 15, 23, 31])
    assert (text.num_hidden_layers, text.hidden_size, text.num_key_value_heads) == (36, 2048, 2)
    assert images.size["longest_edge"] == QWEN_CELLS["full"] * 28 * 28
    with pytest.raises(ValueError, match="colqwen2_5 only"):
        make_family_checkpoint(tmp_path / "model", "colqwen2", geometry="full")


@pytest.mark.slow
@pytest.mark.parametrize("tokens", [None, 16])
def test_the_render_size_its_settings_promise_is_the_loaded_processor_s(family_model, tokens):
    """A build renders while the model loads, at the size read from the saved processor settings;
    for every family that is the size the loaded processor asks for (with --max-visual-tokens too)."""
    from localgpt_index.models.render_size import expected_render_size

    encoder = _encoder(family_model)
    if encoder.max_visual_tokens is None:
        tokens = None
    if tokens is not None:
        encoder.limit_visual_tokens(tokens)
    assert expected_render_size(encoder.model, tokens) == encoder.render_size is not None


@pytest.mark.slow
def test_colpali_s_render_size_is_known_before_it_loads(tiny_model):
    from localgpt_index.models.device import Capabilities, choose_precision
    from localgpt_index.models.loading import open_encoder
    from localgpt_index.models.render_size import expected_render_size

    encoder = open_encoder(resolve_model(str(tiny_model)), choose_precision(Capabilities(), device="cpu", dtype="float32"), 2)
    assert expected_render_size(encoder.model) == encoder.render_size == (56, 56)  # the tiny geometry
