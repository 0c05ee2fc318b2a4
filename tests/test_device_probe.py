"""The precision policy, row by row, on simulated hardware."""

from __future__ import annotations

import pytest

from localgpt_index.models.device import Capabilities, CudaDevice, choose_precision, default_batch_size
from localgpt_index.core.errors import EnvironmentMissing, UsageError

GIB = 2**30
T4 = CudaDevice(0, "Tesla T4", (7, 5), 16 * GIB)
A100 = CudaDevice(0, "NVIDIA A100", (8, 0), 80 * GIB)
H100 = CudaDevice(0, "NVIDIA H100", (9, 0), 80 * GIB)


@pytest.mark.parametrize(
    "caps, device, dtype, autocast",
    [
        (Capabilities(cuda=(T4,)), "cuda:0", "float16", True),
        (Capabilities(cuda=(A100,)), "cuda:0", "bfloat16", True),
        (Capabilities(cuda=(H100,)), "cuda:0", "bfloat16", True),
        (Capabilities(mps=True), "mps", "float16", True),
        (Capabilities(), "cpu", "float32", False),
        (Capabilities(cpu_bf16="AVX512-BF16"), "cpu", "bfloat16", True),
        (Capabilities(cpu_bf16="AMX"), "cpu", "bfloat16", True),
    ],
    ids=["T4-7.5", "A100-8.0", "H100-9.0", "MPS", "CPU", "CPU-AVX512-BF16", "CPU-AMX"],
)
def test_auto_policy(caps, device, dtype, autocast):
    precision = choose_precision(caps)
    assert (precision.device, precision.dtype, precision.autocast) == (device, dtype, autocast)
    assert precision.reason


@pytest.mark.slow
def test_t4_never_gets_bfloat16_even_though_torch_says_it_is_supported(monkeypatch):
    import torch

    # On a T4 torch.cuda.is_bf16_supported() is True through emulation; the probe must not ask it.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    precision = choose_precision(Capabilities(cuda=(T4,)))
    assert precision.dtype == "float16"
    assert "no native bfloat16" in precision.reason


def test_user_override_of_bfloat16_on_t4_warns():
    precision = choose_precision(Capabilities(cuda=(T4,)), dtype="bfloat16")
    assert precision.dtype == "bfloat16" and precision.autocast
    assert any("emulated" in w for w in precision.warnings)


def test_bfloat16_on_a_cpu_warns_only_where_it_is_emulated():
    assert any("AVX512-BF16" in w for w in choose_precision(Capabilities(), dtype="bfloat16").warnings)
    native = choose_precision(Capabilities(cpu_bf16="AVX512-BF16"), dtype="bfloat16")
    assert native.dtype == "bfloat16" and not native.warnings
    assert choose_precision(Capabilities(cpu_bf16="AMX"), dtype="float16").warnings
    kept = choose_precision(Capabilities(cpu_bf16="AMX"), dtype="float32")
    assert (kept.dtype, kept.autocast, kept.warnings) == ("float32", False, ())


def test_queries_keep_float32_on_a_cpu_with_native_bfloat16():
    """A query encoder (query, serve) on such a CPU: float32, unless the user asks; GPUs unchanged."""
    for_queries = choose_precision(Capabilities(cpu_bf16="AVX512-BF16"), queries=True)
    assert (for_queries.dtype, for_queries.autocast) == ("float32", False) and "queries" in for_queries.reason
    assert choose_precision(Capabilities(cpu_bf16="AMX"), dtype="bfloat16", queries=True).dtype == "bfloat16"
    assert choose_precision(Capabilities(cuda=(H100,), cpu_bf16="AMX"), queries=True).dtype == "bfloat16"


def test_a_gpu_is_chosen_over_a_cpu_with_native_bfloat16():
    precision = choose_precision(Capabilities(cuda=(T4,), cpu_bf16="AMX"))
    assert (precision.device, precision.dtype) == ("cuda:0", "float16")


@pytest.mark.slow
def test_the_probe_finds_the_cpu_bfloat16_instructions_linux_lists():
    """detect_capabilities against /proc/cpuinfo's flags (amx_bf16, avx512_bf16) on this machine."""
    from pathlib import Path

    from localgpt_index.models.device import detect_capabilities

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo: not Linux")
    flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    expected = "AMX" if "amx_bf16" in flags else "AVX512-BF16" if "avx512_bf16" in flags else None
    assert detect_capabilities().cpu_bf16 == expected


def test_cpu_dtype_override_turns_autocast_on():
    precision = choose_precision(Capabilities(cuda=(H100,)), device="cpu", dtype="bfloat16")
    assert (precision.device, precision.dtype, precision.autocast) == ("cpu", "bfloat16", True)


@pytest.mark.parametrize(
    "caps, device, error",
    [
        (Capabilities(), "cuda", EnvironmentMissing),
        (Capabilities(cuda=(T4,)), "cuda:1", EnvironmentMissing),
        (Capabilities(), "mps", EnvironmentMissing),
        (Capabilities(), "tpu", UsageError),
        (Capabilities(cuda=(T4,)), "cuda:x", UsageError),
    ],
)
def test_impossible_devices_are_refused(caps, device, error):
    with pytest.raises(error) as info:
        choose_precision(caps, device=device)
    assert device in info.value.message


def test_unknown_dtype_is_a_usage_error():
    with pytest.raises(UsageError):
        choose_precision(Capabilities(), dtype="int8")


def test_batch_size_scales_with_gpu_memory():
    small = CudaDevice(0, "small", (8, 6), 8 * GIB)
    assert default_batch_size(choose_precision(Capabilities(cuda=(small,))), Capabilities(cuda=(small,))) == 4
    assert default_batch_size(choose_precision(Capabilities(cuda=(H100,))), Capabilities(cuda=(H100,))) == 32
    assert default_batch_size(choose_precision(Capabilities()), Capabilities()) == 4


@pytest.mark.slow
def test_a_query_encoder_on_a_cpu_is_float32(tiny_model):
    """On any CPU, bfloat16-capable or not, `query` and `serve` encode queries in float32."""
    from localgpt_index.models.resolve import ModelSpec, resolve_model
    from localgpt_index.query.search import load_query_encoder

    encoder = load_query_encoder(resolve_model(str(tiny_model)), ModelSpec(device="cpu"))
    assert (encoder.precision.dtype, encoder.precision.autocast) == ("float32", False)
