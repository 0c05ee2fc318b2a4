"""The precision guard: every weight in the chosen dtype and device, and clear words when not.

Two bugs started this project: ColPali in bfloat16 fed float32 inputs ("Input type
(torch.cuda.FloatTensor) and weight type (CUDABFloat16Type) should be the same"),
and a LLaVA projector left in float32 beside float16 weights ("mat1 and mat2 must
have the same dtype, but got Half and Float"). The guard audits the checkpoint as
stored, the model as loaded and the model after its first batch; anything off is
aligned and reported. A mismatch that still escapes is translated into a message
that names the module and the fix.
"""

from __future__ import annotations

import json
import re
import struct
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.errors import LgptError

# safetensors dtype codes -> torch names
_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
              "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_CONFIG_DTYPE_FIELDS = ("dtype", "torch_dtype")


@dataclass(frozen=True)
class DtypeFix:
    """A group of tensors that was not in the chosen dtype/device, and has been aligned."""

    stage: str  # "checkpoint" (as stored), "load" (as loaded), "first-batch" (changed after loading)
    module: str
    found: str
    aligned_to: str
    count: int

    def to_dict(self) -> dict:
        return asdict(self)


class PrecisionError(LgptError):
    """A dtype or device mismatch inside the model, explained."""


def module_group(name: str) -> str:
    """The top-level sub-module a parameter belongs to, e.g. 'vision_tower' or 'multi_modal_projector'."""
    parts = [p for p in name.split(".") if p not in ("model", "base_model")]
    return parts[0] if parts else name


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def audit_live(module, dtype, device, stage: str) -> list[DtypeFix]:
    """Cast every floating parameter and buffer not in `dtype` on `device`; report per top-level module.

    float32 buffers stay float32 (on the right device): transformers keeps rotary
    frequencies in float32 on purpose and upcasts where it uses them.
    """
    import torch

    counts: Counter = Counter()
    for kind, named in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, tensor in named:
            if not torch.is_floating_point(tensor):
                continue
            want = torch.float32 if kind == "buffer" and tensor.dtype == torch.float32 else dtype
            if tensor.dtype == want and tensor.device == device:
                continue
            counts[(module_group(name), f"{_dtype_name(tensor.dtype)} on {tensor.device}")] += 1
            tensor.data = tensor.data.to(device=device, dtype=want)
    target = f"{_dtype_name(dtype)} on {device}"
    return [DtypeFix(stage, group, found, target, n) for (group, found), n in sorted(counts.items())]


def stored_dtypes(folder: str | Path) -> dict[str, Counter]:
    """Per top-level module, how many tensors of each dtype the safetensors files store (headers only)."""
    groups: dict[str, Counter] = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = _ST_DTYPES.get(info.get("dtype"))
            if dtype:
                groups.setdefault(module_group(name), Counter())[dtype] += 1
    return groups


def declared_dtypes(folder: str | Path) -> dict[str, str]:
    """The dtypes config.json declares: the model's, and each sub-config's (vision_config.dtype, ...)."""
    config_path = Path(folder) / "config.json"
    if not config_path.exists():
        return {}
    config = json.loads(config_path.read_text())
    found = {}
    for key in _CONFIG_DTYPE_FIELDS:
        if isinstance(config.get(key), str):
            found[key] = config[key]
    for sub, value in config.items():
        if isinstance(value, dict):
            for key in _CONFIG_DTYPE_FIELDS:
                if isinstance(value.get(key), str):
                    found[f"{sub}.{key}"] = value[key]
    return found


def audit_checkpoint(folder: str | Path, dtype_name: str) -> list[DtypeFix]:
    """Modules whose stored weights are not in the chosen dtype (they get cast on load)."""
    fixes = []
    for group, counter in sorted(stored_dtypes(folder).items()):
        for found, n in sorted(counter.items()):
            if found != dtype_name:
                fixes.append(DtypeFix("checkpoint", group, found, dtype_name, n))
    return fixes


def failing_module(exc: BaseException, model) -> str | None:
    """The innermost sub-module of `model` whose code was running when `exc` was raised (its name in
    named_modules), read from the traceback's frames: the innermost frame whose `self` is one of them.
    A forward pass pays nothing for it (hooks on every module cost about a tenth of a small model's
    query pass). None where `model` is None (a compiled model: errors then name no module) or no
    sub-module's frame is in the traceback."""
    if model is None:
        return None
    names = {id(module): name for name, module in model.named_modules() if name}
    found = None
    trace = exc.__traceback__
    while trace is not None:
        name = names.get(id(trace.tb_frame.f_locals.get("self")))
        found = name or found
        trace = trace.tb_next
    return found


_MISMATCH_PATTERNS = [
    (re.compile(r"Input type \((?P<a>[^)]+)\) and (?:weight|bias) type \((?P<b>[^)]+)\) should be the same"), "convolution"),
    (re.compile(r"mat1 and mat2 must have the same dtype, but got (?P<a>\w+) and (?P<b>\w+)"), "matrix multiply"),
    (re.compile(r"expected m1 and m2 to have the same dtype, but got: (?P<a>\S+) != (?P<b>\S+)"), "matrix multiply"),
    (re.compile(r"expected (?:scalar type|mat1 and mat2 to have the same dtype).*?(?P<a>\w+) but found (?P<b>\w+)"), "tensor operation"),
    (re.compile(r"mixed dtype \(CPU\): expect parameter to have scalar type of (?P<a>\w+)"), "normalisation"),
    (re.compile(r"Expected all tensors to be on the same device(?P<a>)(?P<b>)"), "device placement"),
]


def translate_error(exc: RuntimeError, module: str | None, chosen: str) -> PrecisionError | None:
    """A PrecisionError explaining `exc` if it is a dtype/device mismatch, else None."""
    text = " ".join(str(exc).split())
    for pattern, operation in _MISMATCH_PATTERNS:
        match = pattern.search(text)
        if not match:
            continue
        where = f" in module {module}" if module else ""
        if operation == "device placement":
            message = f"device mismatch{where}: {text[:200]}"
            hint = "Pass --device explicitly (for example --device cuda:0), so that every module is moved to it."
        else:
            kinds = " and ".join(x for x in match.groupdict().values() if x)
            message = f"dtype mismatch in a {operation}{where}: {kinds} met (the model runs in {chosen}). torch said: {text[:200]}"
            group = module_group(module) if module else None
            field = "vision_config.torch_dtype" if group and "vision" in group else "torch_dtype"
            hint = (
                f"Try --dtype float32 (or another --dtype), or set {field} in the checkpoint's config.json to "
                f"{chosen}; run `lgpt-index doctor --model ...` to see which modules are stored in another dtype."
            )
        return PrecisionError(message, hint=hint)
    return None
