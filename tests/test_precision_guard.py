"""The two seed bugs, reproduced; the audit, the error translator and doctor."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from conftest import run_cli, validate
from localgpt_index.models.device import Precision
from localgpt_index.models.loading import open_encoder
from localgpt_index.models.torch_encoder import TorchEncoder
from localgpt_index.models.guard import PrecisionError, translate_error
from localgpt_index.models.resolve import resolve_model

pytestmark = pytest.mark.slow  # the real-component tier


@pytest.fixture(scope="module")
def mixed_models(tmp_path_factory):
    """Seed 2's shape: float16 checkpoints with the vision tower, or the projector alone, stored in float32."""
    from localgpt_index.testing.checkpoints import make_checkpoint

    root = tmp_path_factory.mktemp("mixed")
    return {
        "vision_tower": make_checkpoint(root / "vision32-colpali", "tiny", dtype="float16", module_dtypes={"vision_tower": "float32"}),
        "multi_modal_projector": make_checkpoint(root / "proj32-colpali", "tiny", dtype="float16",
                                                 module_dtypes={"multi_modal_projector": "float32"}),
    }


@pytest.mark.parametrize("module", ["vision_tower", "multi_modal_projector"])
def test_seed2_mixed_checkpoint_builds_queries_and_is_reported(mixed_models, corpus, tmp_path, module):
    root, _ = corpus
    model = mixed_models[module]
    index = ["--index-dir", str(tmp_path / "idx")]
    built = run_cli("build", str(root), "--model", str(model), "--dtype", "float16", "-v", "--json", *index)
    assert built.exit_code == 0, built.stderr
    report = json.loads(built.stdout)
    validate(report, "build")
    assert report["precision"]["dtype"] == "float16" and report["indexed"] == 6
    stored = [f for f in report["dtype_fixes"] if f["stage"] == "checkpoint"]
    assert [(f["module"], f["found"], f["aligned_to"]) for f in stored] == [(module, "float32", "float16")]
    assert f"aligned [checkpoint] {module}" in built.stderr

    queried = run_cli("query", "revenue", "--dtype", "float16", "--json", *index)
    assert queried.exit_code == 0, queried.stderr
    assert len(json.loads(queried.stdout)["queries"][0]["results"]) == 5

    doctor = run_cli("doctor", "--model", str(model), "--dtype", "float16", "--json")
    assert doctor.exit_code == 0, doctor.stdout
    diagnosis = json.loads(doctor.stdout)
    validate(diagnosis, "doctor")
    assert diagnosis["model"]["stored_dtypes"][module] == {"float32": 2 if module == "multi_modal_projector" else 32}
    assert any(f["module"] == module and f["stage"] == "checkpoint" for f in diagnosis["model"]["audit"])
    assert diagnosis["model"]["smoke_test"]["ok"] is True
    if module == "vision_tower":
        assert diagnosis["model"]["declared_dtypes"]["vision_config.dtype"] == "float32"


def _encoder(model_dir, dtype: str, autocast: bool) -> TorchEncoder:
    precision = Precision("cpu", dtype, autocast, "test")
    return open_encoder(resolve_model(str(model_dir)), precision, batch_size=2)


def test_seed1_bfloat16_model_fed_float32_pixels(tiny_model):
    """The seed's failing operation, the vision tower's patch convolution, raises on float32 pixels;
    through the encoder there is no error. (transformers 5 and colpali-engine now also cast
    pixel values themselves; the encoder does not rely on that.)"""
    import torch

    encoder = _encoder(tiny_model, "bfloat16", autocast=False)
    batch = encoder.processor.process_images([Image.new("RGB", (60, 80), "white")])
    assert batch["pixel_values"].dtype == torch.float32
    with pytest.raises(RuntimeError) as raw:
        encoder.net.model.model.vision_tower.embeddings.patch_embedding(batch["pixel_values"])
    assert "should be the same" in str(raw.value)

    seen = []
    encoder.net.model.model.vision_tower.register_forward_pre_hook(
        lambda m, args, kw: seen.append((args[0] if args else kw["pixel_values"]).dtype), with_kwargs=True
    )
    vectors = encoder.encode_pages([Image.new("RGB", (60, 80), "white")])
    assert seen == [torch.bfloat16] and vectors[0].shape == (29, 128)


def test_escaped_mismatch_names_the_module_and_the_fix(tiny_model):
    encoder = _encoder(tiny_model, "bfloat16", autocast=False)
    encoder.net.model.model.multi_modal_projector.float()  # a module changed behind the guard's back
    with pytest.raises(PrecisionError) as info:
        encoder.encode_pages([Image.new("RGB", (60, 80), "white")])
    message = info.value.message
    assert "multi_modal_projector" in message and "bfloat16" in message.lower()
    assert "--dtype" in info.value.hint


def test_a_mismatch_after_the_first_batch_names_the_module_and_no_pass_pays_for_it(tiny_model):
    """The module is named from the error's traceback: no hooks run in any pass, and a module changed
    after the first batch's audit is still named."""
    encoder = _encoder(tiny_model, "bfloat16", autocast=False)
    page = Image.new("RGB", (60, 80), "white")
    encoder.encode_pages([page])
    hooks = [hook for m in encoder.net.modules() for hook in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())]
    assert not [hook for hook in hooks if hook.__module__.startswith("localgpt_index")]  # transformers' own may run
    encoder.net.model.model.multi_modal_projector.float()
    with pytest.raises(PrecisionError) as info:
        encoder.encode_pages([page])
    assert "in module model.model.multi_modal_projector.linear" in info.value.message


def test_audit_after_first_batch_catches_a_module_changed_during_it(tiny_model):
    import torch

    encoder = _encoder(tiny_model, "bfloat16", autocast=True)
    projector = encoder.net.model.model.multi_modal_projector
    def lazy_reinit(*args) -> None:  # e.g. code that re-initialises a module after loading
        projector.float()

    handle = encoder.net.register_forward_hook(lazy_reinit)
    encoder.encode_pages([Image.new("RGB", (60, 80), "white")])
    handle.remove()
    late = [f for f in encoder.dtype_fixes if f.stage == "first-batch"]
    assert [(f.module, f.found) for f in late] == [("multi_modal_projector", "float32 on cpu")]
    assert {p.dtype for p in encoder.net.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize(
    "operation, expect",
    [
        (lambda torch: torch.nn.Conv2d(3, 4, 3).to(torch.bfloat16)(torch.randn(1, 3, 8, 8)), "convolution"),
        (lambda torch: torch.nn.Linear(4, 4).half()(torch.randn(2, 4)), "matrix multiply"),
        (lambda torch: torch.randn(2, 4).half() @ torch.randn(4, 4), "matrix multiply"),
        (lambda torch: torch.nn.LayerNorm(4).half()(torch.randn(2, 4)), "normalisation"),
    ],
    ids=["conv", "linear", "matmul", "layernorm"],
)
def test_translator_on_real_torch_errors(operation, expect):
    import torch

    with pytest.raises(RuntimeError) as raised:
        operation(torch)
    translated = translate_error(raised.value, "model.vision_tower.embeddings.patch_embedding", "bfloat16")
    assert translated is not None and expect in translated.message
    assert "vision_tower" in translated.message and "vision_config.torch_dtype" in translated.hint


def test_translator_leaves_other_errors_alone():
    import torch

    with pytest.raises(RuntimeError) as raised:
        torch.randn(2, 3) @ torch.randn(4, 5)
    assert translate_error(raised.value, None, "float32") is None


def test_doctor_exit_code_flips_without_libreoffice_or_poppler(tiny_model, tmp_path):
    from localgpt_index.models.device import detect_capabilities

    ok = run_cli("doctor", "--model", str(tiny_model), "--json")
    assert ok.exit_code == 0, ok.stdout
    diagnosis = json.loads(ok.stdout)
    validate(diagnosis, "doctor")
    # the CPU's native bfloat16, and the probe's choice that follows from it (no GPU here)
    native = detect_capabilities().cpu_bf16
    assert diagnosis["devices"]["cpu"]["native_bf16"] == native
    assert diagnosis["probe"]["dtype"] == ("bfloat16" if native else "float32")

    for keep, lost in ((("pdftoppm", "pdfinfo"), "LibreOffice"), (("soffice",), "poppler")):
        bin_dir = tmp_path / f"bin-{lost}"
        bin_dir.mkdir()
        for tool in keep:
            os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
        hidden = run_cli("doctor", "--model", str(tiny_model), "--json", env={"PATH": str(bin_dir)})
        assert hidden.exit_code == 4
        diagnosis = json.loads(hidden.stdout)
        validate(diagnosis, "doctor")
        assert diagnosis["ok"] is False and any(lost in m for m in diagnosis["missing"])


def test_doctor_without_model_reports_the_default_model_offline():
    result = run_cli("doctor", "--json")
    diagnosis = json.loads(result.stdout)
    assert result.exit_code == 4 and diagnosis["model"]["id"] == "vidore/colpali-v1.3"
    assert diagnosis["model"]["available"] is False and diagnosis["model_cache"]["offline"] is True
    human = run_cli("doctor")
    assert "NOT AVAILABLE" in human.stdout and "hf download" in human.stdout
