"""Forward passes of a loaded network, its dtype audited and its failures told apart.

Inputs are cast at its boundary, under autocast and inference mode; a failure is the device's, a
module's dtype or a page's."""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from .colpali_parts import query_parts, same_bits
from .failures import device_failure
from .guard import DtypeFix, audit_checkpoint, audit_live, failing_module, translate_error

if TYPE_CHECKING:
    from .device import Precision


class NetRunner:
    """Runs a loaded ColPali-family network on the device and dtype the probe picked."""

    def __init__(self, net: Any, model_path: str, precision: Precision, compiled: bool = False,
                 logits_to_keep: bool = False, use_cache: bool = False) -> None:
        """`compiled`: the network went through torch.compile (errors then name no module);
        `logits_to_keep`: it takes logits_to_keep (it reads its last hidden states only);
        `use_cache`: it takes use_cache (and builds a key-value cache unless told not to)."""
        import torch

        self.net = net
        self.precision = precision
        self.dtype = precision.torch_dtype()
        self.device = torch.device(precision.device)
        self.calls = 0
        # Arguments every pass takes: what the network would otherwise compute for nothing.
        self.fixed: dict[str, Any] = {}
        if logits_to_keep:
            # ColPali reads the last hidden states only. An empty index of positions leaves the LM head
            # no token at all; with 1 it still turns the last token of every input into vocabulary
            # logits (PaliGemma-3B: a 257,216 x 2048 product, 1 GB of weights in bfloat16 read every pass).
            self.fixed["logits_to_keep"] = torch.empty(0, dtype=torch.long, device=self.device)
        if use_cache:
            self.fixed["use_cache"] = False  # a cache of the keys and values, built per pass and dropped
        net.eval()
        # byaldi hard-codes bfloat16 weights; the probe decides instead. The audit
        # casts what is off, tensor by tensor, and keeps a record of it.
        self.dtype_fixes: list[DtypeFix] = audit_checkpoint(model_path, precision.dtype)
        self.dtype_fixes += audit_live(net, self.dtype, self.device, "load")
        self._audits_due = 1  # once more after the first batch: catches modules changed after loading
        self._named = None if compiled else net  # errors name its modules (guard.failing_module)
        # ColPali's queries through the parts whose results they keep (colpali_parts), once checked
        self.query_parts = None if compiled else query_parts(net)
        self._parts_checked = False

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
        out = self._run(inputs)
        self.calls += 1
        if self._audits_due:
            self._audits_due -= 1
            self.dtype_fixes += audit_live(self.net, self.dtype, self.device, "first-batch")
        out = out.float().cpu()
        mask = inputs["attention_mask"]
        if bool(mask.all()):  # nothing padded (queries, ColPali's pages): each input's rows as they are
            return list(out.numpy())
        mask = mask.bool().cpu()
        return [out[i][mask[i]].numpy() for i in range(out.shape[0])]

    def _run(self, inputs: dict) -> Any:
        """The network's output, its RuntimeErrors told apart (see failures.device_failure, guard.translate_error)."""
        import torch

        precision = self.precision
        kind = precision.device_type
        # autocast(enabled=False) is only needed to turn off a caller's autocast (it costs about 6 us a pass)
        autocast = (torch.autocast(device_type=kind, dtype=self.dtype, enabled=precision.autocast)
                    if precision.autocast or torch.is_autocast_enabled(kind) else nullcontext())
        try:
            with torch.inference_mode(), autocast:
                return self._forward(inputs)
        except RuntimeError as exc:
            failure = device_failure(exc, precision.device) or translate_error(exc, failing_module(exc, self._named), precision.dtype)
            if failure is None:
                raise
            raise failure from exc

    def _forward(self, inputs: dict) -> Any:
        """The network's output; a query's (no pixels) through ColPali's parts once they gave the whole
        network's bits on a first query (else through the whole network from then on)."""
        parts = self.query_parts
        if parts is None or "pixel_values" in inputs:
            return self.net(**inputs, **self.fixed)
        if self._parts_checked:
            return parts(inputs)
        whole = self.net(**inputs, **self.fixed)
        try:
            out = parts(inputs)
        except Exception:  # noqa: BLE001 - a colpali-engine or transformers whose parts differ: the whole network answers
            out = None
        if out is None or not same_bits(out, whole):
            self.query_parts = None
            return whole
        self._parts_checked = True
        return out
