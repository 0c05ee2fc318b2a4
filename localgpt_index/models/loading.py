"""Opening a model's encoder: a plugin family's own, or a TorchEncoder from the family's loader.

The loader (models/loaders.py: byaldi or colpali-engine) runs on the device and dtype the probe
picks. A model folder that cannot be loaded is told in the checkpoint's terms: one message naming
the folder and the reason (no weights, pickled code, a width mismatch, another family's files), exit 4."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..core.errors import EnvironmentMissing, LgptError
from .loaders import LoadRequest
from .protocols import PageEncoder
from .resolve import ModelRef, ModelSpec, offline_hint, weight_files

if TYPE_CHECKING:
    from .device import Precision
    from .families import Family
    from .torch_encoder import TorchEncoder

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

    family = family_named(model.family)
    if family.loader.load is None:
        raise EnvironmentMissing(f"model {model.path}: {family.display} has an encoder of its own, not a network to load.")
    check_weights(model)
    request = LoadRequest(model.path, family.name, family.architecture, family.processor, precision, rag,
                          guard=partial(load_guard, model, family))
    loaded = family.loader.load(request)
    return TorchEncoder(model, precision, batch_size, loaded, compile=compile, loader=family.loader.name)


def check_weights(model: ModelRef) -> None:
    """A checkpoint folder without weights is refused before anything is imported or loaded."""
    folder = Path(model.path)
    if any(path.is_file() for path in weight_files(folder)):
        return
    try:
        present = sorted(path.name for path in folder.iterdir())
    except OSError:
        present = []
    shown = ", ".join(present[:8]) + (f" and {len(present) - 8} more" if len(present) > 8 else "")
    raise EnvironmentMissing(f"model {folder}: no weights: no *.safetensors or *.bin file there (it holds {shown or 'nothing'}).",
                             hint=load_hint(model))


def load_hint(model: ModelRef) -> str:
    """What to do about a checkpoint that cannot be loaded."""
    if model.revision:  # a hub snapshot: fetch it again
        return "Its copy in the Hugging Face cache looks damaged. " + offline_hint(model.id, model.revision)
    return ("Point --model at a complete checkpoint, as save_pretrained writes one: config.json (whose architectures "
            "name the family), the processor's files and the weights (safetensors), all of the same model.")


@contextmanager
def load_guard(model: ModelRef, family: Family, shown_as: str | None = None) -> Iterator[None]:
    """A checkpoint that cannot be loaded (pickled code, weights whose shapes do not match its
    config, another family's files) stops the command with one message naming the folder and the
    reason, exit 4. The loaders are third-party code reading files from anywhere: whatever
    they raise is turned into that message (the exception stays chained for a debugger)."""
    try:
        yield
    except LgptError:
        raise
    except Exception as exc:
        reason = load_reason(exc)
        if shown_as:
            reason = reason.replace(shown_as, model.path)
        raise EnvironmentMissing(f"model {model.path}: cannot be loaded as {family.display} by {family.loader.name}: {reason}.",
                                 hint=load_hint(model)) from exc


def load_reason(exc: BaseException) -> str:
    """What went wrong, in the terms of the checkpoint rather than of the loader's code."""
    import pickle

    text = " ".join(str(exc).split())
    if isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" in text:
        return ("its pickled weights (*.bin) hold more than tensors, and lgpt-index loads tensors only (no pickled "
                "code runs); convert them to safetensors")
    if "ignore_mismatched_sizes" in text or "size mismatch" in text:
        return "the shapes of its weights do not match the widths its config.json declares"
    first = re.split(r"(?<=[.!?]) ", text, maxsplit=1)[0]  # loaders put the cause first, then advice for their own API
    return f"{type(exc).__name__}: {first[:300].rstrip('.')}"
