"""Forward passes of a loaded network: inputs cast at its boundary, under autocast and inference
mode, its dtype audited, its failures told apart (the device's, a module's dtype, a page's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .failures import device_failure
from .guard import DtypeFix, ModuleTracker, audit_checkpoint, audit_live, translate_error

if TYPE_CHECKING:
    from .device import Precision


class NetRunner:
    """Runs a loaded ColPali-family network on the device and dtype the probe picked."""

    def __init__(self, net: Any, model_path: str, precision: Precision, compiled: bool = False,
                 logits_to_keep: bool = False) -> None:
        """`compiled`: the network went through torch.compile (errors then name no module);
        `logits_to_keep`: it takes logits_to_keep (it reads its last hidden states only)."""
        import torch

        self.net = net
        self.precision = precision
        self.dtype = precision.torch_dtype()
        self.device = torch.device(precision.device)
        self.logits_to_keep = logits_to_keep
        self.calls = 0
        net.eval()
        # byaldi hard-codes bfloat16 weights; the probe decides instead. The audit
        # casts what is off, tensor by tensor, and keeps a record of it.
        self.dtype_fixes: list[DtypeFix] = audit_checkpoint(model_path, precision.dtype)
        self.dtype_fixes += audit_live(net, self.dtype, self.device, "load")
        self._audits_due = 1  # once more after the first batch: catches modules changed after loading
        self._tracker = ModuleTracker(None if compiled else net)

    def to_model(self, value: Any) -> Any:
        """`value` on the model's device, floating point cast to its dtype (the model boundary)."""
        if value.is_floating_point():
            value = value.to(self.dtype)
        return value.to(self.device)

    def __call__(self, batch: dict) -> list[np.ndarray]:
        """One forward pass: float32 vectors (tokens, dim) per input, without its padding."""
        inputs: dict[str, Any] = {}
        for key, value in batch.items():
            if key == "labels":  # training targets: only cost a loss computation
                continue
            inputs[key] = [self.to_model(v) for v in value] if isinstance(value, list) else self.to_model(value)
        if self.logits_to_keep:
            # ColPali reads the last hidden states only; without this the LM head turns every
            # token into vocabulary logits (about 1 TFLOP per page on the real model) for nothing.
            inputs["logits_to_keep"] = 1
        out = self._run(inputs)
        self.calls += 1
        if self._audits_due:
            self._audits_due -= 1
            self.dtype_fixes += audit_live(self.net, self.dtype, self.device, "first-batch")
        mask = inputs["attention_mask"].bool().cpu()
        out = out.float().cpu()
        return [out[i][mask[i]].numpy() for i in range(out.shape[0])]

    def _run(self, inputs: dict) -> Any:
        """The network's output, its RuntimeErrors told apart (see failures.device_failure, guard.translate_error)."""
        import torch

        precision = self.precision
        autocast = torch.autocast(device_type=precision.device_type, dtype=self.dtype, enabled=precision.autocast)
        try:
            with torch.inference_mode(), autocast, self._tracker.running():
                return self.net(**inputs)
        except RuntimeError as exc:
            failure = device_failure(exc, precision.device) or translate_error(exc, self._tracker.innermost, precision.dtype)
            if failure is None:
                raise
            raise failure from exc
