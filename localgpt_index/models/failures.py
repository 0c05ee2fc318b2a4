"""How a failed forward pass is told apart: the machine's fault or a page's.

`DeviceOutOfMemory` (the build halves its batch and tries again), `DeviceLost` (the build
stops, exit 4), or any other error, which the build pins on the page that causes it alone.
"""

from __future__ import annotations

import re

from ..core.errors import EnvironmentMissing


class DeviceOutOfMemory(RuntimeError):
    """The device ran out of memory for this batch; a smaller batch may fit."""


class DeviceLost(EnvironmentMissing):
    """The device failed (a CUDA error, a lost GPU): nothing more can run on it in this process."""


_OOM = re.compile(r"out of memory|CUBLAS_STATUS_ALLOC_FAILED|MPS backend out of memory|DefaultCPUAllocator: can't allocate", re.I)
_LOST = re.compile(
    r"CUDA error|CUDA driver|cudaErrorDevice|device-side assert|illegal memory access|unspecified launch failure"
    r"|CUBLAS_STATUS_(?!ALLOC)|CUDNN_STATUS|NCCL error|no CUDA GPUs are available|device not ready|ECC error"
    r"|MPS backend|Metal",
    re.I,
)


def classify_failure(exc: BaseException) -> str:
    """"oom", "device" or "page": whose fault a RuntimeError from a forward pass is."""
    if type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, (DeviceOutOfMemory, MemoryError)):
        return "oom"
    text = str(exc)
    if _OOM.search(text):
        return "oom"
    if _LOST.search(text):
        return "device"
    return "page"


def device_failure(exc: RuntimeError, device: str) -> Exception | None:
    """The DeviceOutOfMemory or DeviceLost a forward pass's RuntimeError means, or None (a page's fault)."""
    kind = classify_failure(exc)
    text = " ".join(str(exc).split())[:300]
    if kind == "oom":
        return DeviceOutOfMemory(text)
    if kind == "device":
        return DeviceLost(f"the device {device} failed: {text}",
                          hint="Check the GPU (nvidia-smi), then run build again: it carries on from the last commit.")
    return None
