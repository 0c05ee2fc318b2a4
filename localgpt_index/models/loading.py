"""Opening a model's encoder: a plugin family's own, or the family's loader (byaldi or
colpali-engine) on the device and dtype the probe picks, assembled into a TorchEncoder."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from .load_errors import check_weights
from .protocols import PageEncoder
from .resolve import ModelRef, ModelSpec

if TYPE_CHECKING:
    from .device import Precision
    from .torch_encoder import TorchEncoder

# A registry family's `loader` -> the function that loads its network and processor (module, name).
LOADERS: dict[str, tuple[str, str]] = {
    "byaldi": (".byaldi_family", "load_byaldi"),
    "colpali-engine": (".colpali_engine_family", "load_colpali_engine"),
}


@dataclass(frozen=True)
class EncoderOptions:
    """How to load a page encoder: what the model layer needs of a build's options."""

    spec: ModelSpec = ModelSpec()  # where, and in what dtype (its id is resolved already: the ModelRef loaded)
    batch_size: int | None = None  # None: the device's default
    compile: bool = False
    max_visual_tokens: int | None = None


def load_page_encoder(model: ModelRef, options: EncoderOptions) -> PageEncoder:
    """The encoder for a model's family: a plugin family's own (as the test double's), else byaldi's
    or colpali-engine's loader on the device and dtype the probe picks."""
    from .families import family_named

    own = family_named(model.family).encoder
    if own is not None:
        return own(model, options.batch_size)
    encoder = open_probed_encoder(model, options.spec, options.batch_size, compile=options.compile)
    if options.max_visual_tokens is not None:
        encoder.limit_visual_tokens(options.max_visual_tokens)
    return encoder


def open_probed_encoder(model: ModelRef, spec: ModelSpec = ModelSpec(), batch_size: int | None = None,
                        queries: bool = False, compile: bool = False) -> TorchEncoder:
    """The model on the device and dtype the probe picks for the spec's (`queries`: for a query
    encoder), in batches of `batch_size` (None: the device's default); the collector paused meanwhile
    in the command's process (core/collector.py)."""
    from ..core.collector import frozen_after
    from .device import choose_precision, default_batch_size, detect_capabilities

    with frozen_after():  # torch and byaldi import here
        caps = detect_capabilities()
        precision = choose_precision(caps, spec.device, spec.dtype, queries=queries)
        return open_encoder(model, precision, batch_size or default_batch_size(precision, caps), compile=compile)


def open_encoder(model: ModelRef, precision: Precision, batch_size: int, compile: bool = False,
                 rag: Any = None) -> TorchEncoder:
    """The model loaded by its family's loader (`rag`: a byaldi RAGMultiModalModel already loaded from it)."""
    from .families import family_named
    from .torch_encoder import TorchEncoder

    check_weights(model)
    loader = family_named(model.family).loader
    module, name = LOADERS[loader]
    loaded = getattr(import_module(module, __package__), name)(model, precision, rag)
    return TorchEncoder(model, precision, batch_size, loaded, compile=compile, loader=loader)
