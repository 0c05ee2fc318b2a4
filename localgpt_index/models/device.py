"""Device-capability probe: which device and dtype to run the model in.

The choice is a pure function of the capabilities found (`choose_precision`),
so every row of the policy can be tested with simulated hardware.

| found                         | weights  | autocast |
| CUDA, compute capability >= 8 | bfloat16 | bfloat16 |
| CUDA, compute capability < 8  | float16  | float16  |
| Apple MPS                     | float16  | float16  |
| CPU with native bfloat16      | bfloat16 | bfloat16 |
| (AMX or AVX512-BF16)          |          |          |
|   the same, encoding queries  | float32  | off      |
| other CPUs                    | float32  | off      |
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..core.errors import EnvironmentMissing, UsageError

DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class CudaDevice:
    index: int
    name: str
    capability: tuple[int, int]
    memory_bytes: int

    @property
    def native_bf16(self) -> bool:
        # torch.cuda.is_bf16_supported() also counts emulation (True on a T4);
        # only Ampere (8.0) and later run bfloat16 natively.
        return self.capability >= (8, 0)


@dataclass(frozen=True)
class Capabilities:
    cuda: tuple[CudaDevice, ...] = ()
    mps: bool = False
    cpu_bf16: str | None = None  # the CPU's native bfloat16 instructions ("AMX", "AVX512-BF16"), if any


@dataclass(frozen=True)
class Precision:
    """The device, weight dtype and autocast setting a model runs with."""

    device: str  # "cpu", "cuda:0", "mps"
    dtype: str  # one of DTYPES
    autocast: bool
    reason: str
    warnings: tuple[str, ...] = field(default=())

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    def to_dict(self) -> dict:
        return asdict(self)


def detect_capabilities() -> Capabilities:
    """Ask torch what hardware this process can use."""
    import torch

    cuda: list[CudaDevice] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            cuda.append(CudaDevice(i, props.name, (props.major, props.minor), props.total_memory))
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    return Capabilities(tuple(cuda), mps, _cpu_bf16(torch))


def _cpu_bf16(torch) -> str | None:
    """The x86 instructions that run bfloat16 matrix products natively (oneDNN uses them), if any.

    torch.backends.mkldnn's bf16 check is no use here: it also says yes where AVX-512 only
    emulates bfloat16. The torch.cpu checks are private, hence getattr."""
    for name, check in (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported")):
        probe = getattr(torch.cpu, check, None)
        if probe is not None and probe():
            return name
    return None


def _pick_device(caps: Capabilities, device: str) -> str:
    if device == "auto":
        if caps.cuda:
            return "cuda:0"
        return "mps" if caps.mps else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "mps":
        if not caps.mps:
            raise EnvironmentMissing("--device mps: Apple MPS is not available on this machine.")
        return "mps"
    if device == "cuda" or device.startswith("cuda:"):
        index_text = device.partition(":")[2] or "0"
        if not index_text.isdigit():
            raise UsageError(f"--device {device}: expected cuda or cuda:N.")
        if not caps.cuda:
            raise EnvironmentMissing(
                f"--device {device}: no CUDA device is visible to torch.",
                hint="Install a CUDA build of torch and check nvidia-smi, or use --device cpu.",
            )
        index = int(index_text)
        if index >= len(caps.cuda):
            raise EnvironmentMissing(
                f"--device {device}: only {len(caps.cuda)} CUDA device(s) are visible (cuda:0..cuda:{len(caps.cuda) - 1})."
            )
        return f"cuda:{index}"
    raise UsageError(f"--device {device}: expected auto, cpu, cuda, cuda:N or mps.")


def choose_precision(caps: Capabilities, device: str = "auto", dtype: str = "auto", queries: bool = False) -> Precision:
    """Apply the precision policy to the capabilities found and the user's overrides.

    `queries`: for a query encoder (`query`, `serve`), which keeps float32 on a CPU even where
    pages are encoded in bfloat16 (see below)."""
    if dtype not in ("auto", *DTYPES):
        raise UsageError(f"--dtype {dtype}: expected auto, {', '.join(DTYPES)}.")
    chosen_device = _pick_device(caps, device)
    kind = chosen_device.split(":")[0]
    warnings: list[str] = []

    if kind == "cuda":
        gpu = caps.cuda[int(chosen_device.split(":")[1])]
        cc = f"{gpu.capability[0]}.{gpu.capability[1]}"
        auto_dtype = "bfloat16" if gpu.native_bf16 else "float16"
        reason = (
            f"{gpu.name} (compute capability {cc}) runs bfloat16 natively"
            if gpu.native_bf16
            else f"{gpu.name} (compute capability {cc}) has no native bfloat16; float16 instead"
        )
        if dtype == "bfloat16" and not gpu.native_bf16:
            warnings.append(
                f"bfloat16 on {gpu.name} (compute capability {cc}) is emulated and slow; float16 is the native choice."
            )
    elif kind == "mps":
        auto_dtype = "float16"
        reason = "Apple MPS: float16 (bfloat16 needs macOS 14 or later)"
        if dtype == "bfloat16":
            warnings.append("bfloat16 on MPS needs macOS 14 or later.")
    else:
        auto_dtype, reason = _cpu_choice(caps, queries)
        if dtype == "float16" and caps.cpu_bf16:
            warnings.append("float16 on CPU is usually slower than float32 and less precise.")
        elif dtype in ("bfloat16", "float16") and not caps.cpu_bf16:
            warnings.append(f"{dtype} on a CPU without AMX or AVX512-BF16 is usually slower than float32 and less precise.")

    if dtype != "auto":
        reason = f"--dtype {dtype} chosen by the user"
    final = auto_dtype if dtype == "auto" else dtype
    return Precision(chosen_device, final, final != "float32", reason, tuple(warnings))


def _cpu_choice(caps: Capabilities, queries: bool) -> tuple[str, str]:
    """The CPU's automatic dtype, and why."""
    if not caps.cpu_bf16:
        return "float32", "CPU: float32 (no AMX or AVX512-BF16: bfloat16 would be emulated, slow and less precise)"
    if queries:
        # Measured on the same Zen 4: in bfloat16 a server's memory grew 21 % over 6,000 queries of
        # varied lengths, and still 15 % with oneDNN's primitive cache at 8 (float32: 2 %); the CLI
        # and a server must also agree, so both keep float32 here.
        return "float32", f"CPU with {caps.cpu_bf16}, queries: float32 (in bfloat16 a server's memory kept growing)"
    # Measured on a 2-core Zen 4 (AVX512-BF16): a model-bound page 1.45x faster than in float32,
    # a pipeline-bound build as fast (scripts/bench_build.py). Vectors then match a GPU's.
    return "bfloat16", f"CPU with {caps.cpu_bf16}: bfloat16 runs natively (--dtype float32 for float32)"


def default_batch_size(precision: Precision, caps: Capabilities) -> int:
    """Pages per forward pass: large enough to feed the device, small enough to fit."""
    if precision.device_type == "cuda":
        gpu = caps.cuda[int(precision.device.split(":")[1])]
        gib = gpu.memory_bytes / 2**30
        # 32 measured best on an H200 for full-size ColPali (scripts/bench_gpu.py): beyond it
        # the GPU is already full and memory only grows.
        return int(min(32, max(4, gib // 2)))
    return 4
